"""The captions under the panels' figures: every number they quote is the one the figure draws (the browser suite
checks the same in the page, ``tests/browser/test_captions_browser.py``)."""

from __future__ import annotations

import math
import re
import statistics

import numpy as np
import pytest

from spanviz import plots, widgets
from spanviz.fp8.demos import BoundsVsRank
from spanviz.model import GPTConfig
from spanviz.plots.common import COLORS
from spanviz.plots.curves import loss_curves_data, relative_change_data
from spanviz.plots.fp8 import bound_vs_rank_data
from spanviz.plots.fp8_training import fp8_training_data
from spanviz.widgets import captions
from spanviz.widgets.fp8_caption import fp8_training_caption

SMALL = GPTConfig(vocab_size=64, context_length=24, n_layer=1, n_head=2, d_model=32)  # d_head 16 < T 24
SPANS = dict(alpha_label="kv8 [1 0 0 0]", alphas=(1.0, 0.0, 0.0, 0.0), twin_label="standard, seed 1", seed=0,
             d_head=32, d_model=64, n_layer=2, steps_planned=300)


def text(html: str) -> str:
    return re.sub(r"<[^>]+>", "", html)


def test_spans_caption_says_what_the_delta_figure_draws_and_why_it_can_differ():
    delta = {"steps": np.array([0.0, 150.0, 299.0]), "changes": {"kv8 [1 0 0 0]": np.array([0.0, 4.79, 3.29])},
             "noise": np.array([0.04, -2.07, 0.58])}
    t = text(captions.spans_change_caption(delta, **SPANS))
    assert "At the last evaluation (step 299) the α run kv8 [1 0 0 0] had a validation loss +3.29 % against " \
           "standard (higher)" in t
    # "worse" only once the seed band is checked: the change is outside every seed difference of the run
    assert t.index("outside the band") < t.index("ended worse than standard") and "(worse)" not in t
    assert "±0.58 % there and at most ±2.07 % over the run (step 150)" in t
    assert "outside the band" in t and "Largest change over the run: +4.79 % (step 150)" in t
    assert "d_head = 32 here, below the d_head ≥ 64" in t and "300 steps of a 2-layer model with d_model 64" in t
    assert "−0.56 %" in t  # the paper's number, for comparison
    # the same data drawn: the α line and the band of the figure
    drawn = relative_change_data(**delta)
    assert drawn[1]["y"][-1] == pytest.approx(3.29) and max(drawn[0]["y"]) == pytest.approx(2.07)

    inside = {**delta, "changes": {"kv8 [1 0 0 0]": np.array([0.0, -0.3, -0.2])}}
    t = text(captions.spans_change_caption(inside, **{**SPANS, "d_head": 64, "steps_planned": 1000}))
    assert "So far, at step 299 of 1000, the α run" in t and "−0.20 %" in t and "(lower)" in t
    assert "inside the band" in t and "below the d_head" not in t  # d_head 64: that reason does not apply
    assert "better" not in t and "worse" not in t and "not the same as no effect" in t  # inside: no verdict word
    no_band = text(captions.spans_change_caption({**inside, "noise": None}, **SPANS))
    assert "(lower)" in no_band and "better" not in no_band and "No seed band yet" in no_band
    ones = text(captions.spans_change_caption(delta, **{**SPANS, "alphas": (1.0, 1.0, 1.0, 1.0)}))
    assert "same fused attention path as standard, bit for bit" in ones and "Why it can differ" not in ones
    assert "float rounding of the explicit attention path" not in ones  # [1111] no longer forces that path
    assert captions.spans_change_caption(None, **SPANS) == ""


def test_loss_caption_lists_every_run_and_says_when_curves_coincide():
    runs = {"standard": {"step": [0, 9], "train_loss": [9.0, 5.0], "val_loss": [9.0, 5.411]},
            "[1000]": {"step": [0, 9], "train_loss": [9.0, 5.1], "val_loss": [None, 5.43]}}
    t = text(captions.loss_caption(runs))
    assert "standard 5.411 (step 9); [1000] 5.43 (step 9)" in t and "within 0.35 %" in t and "narrower" in t
    assert "lie close together" in t and "on top of each other" not in t  # 0.35 % apart: visibly two curves
    apart = {k: {**v, "val_loss": [9.0, 5.411 * f]} for (k, v), f in zip(runs.items(), (1.0, 1.019))}
    t = text(captions.loss_caption(apart))
    assert "within 1.90 %" in t and "close together" in t and "on top of each other" not in t
    same = {k: {**v, "val_loss": [9.0, 5.411 * f]} for (k, v), f in zip(runs.items(), (1.0, 1.0004))}
    assert "lie on top of each other" in text(captions.loss_caption(same))
    widths = [tr["line"]["width"] for tr in loss_curves_data(runs, ("train_loss", "val_loss"))[1::2]]
    assert widths[0] == widths[1] > widths[2] == widths[3]  # the first run drawn wider: both visible
    assert captions.loss_caption({"a": {"step": [0], "train_loss": [1.0], "val_loss": [None]}}) == ""
    at_start = {k: {"step": [0], "train_loss": [9.0], "val_loss": [9.01]} for k in ("standard", "[1000]")}
    t = text(captions.loss_caption(at_start))
    assert "standard 9.01 (step 0)" in t and "within" not in t  # nothing comparative before the runs have learnt


def test_max_logit_and_seed_peak_captions():
    runs = {"MHSA": {"step": [0, 10, 20], "logits/max_per_layer": [[1.0, 2.0], [3.0, 9.5], [4.0, 8.0]]},
            "LS (3 local, p=16)": {"step": [0, 10, 20], "logits/max_per_layer": [[1.0, 2.0], [6.0, 5.0], None]}}
    t = text(captions.max_logit_caption(runs))
    assert "MHSA 9.5 (layer 1, step 10); LS (3 local, p=16) 6 (layer 0, step 10)" in t
    assert "LS (3 local, p=16) against MHSA: −36.84 %" in t
    seeds = {"MHSA": [{"step": [0, 5], "m": [3.0, 89.4]}, {"step": [0, 5], "m": [78.8, 7.0]}]}
    peaks = plots.seed_peaks(seeds, "m")
    assert peaks == {"MHSA": [(5.0, 89.4), (0.0, 78.8)]}
    stars = plots.seed_peaks_data(seeds, "m")[0]
    assert stars["y"] == [89.4, 78.8] and stars["marker"]["color"] == COLORS[0]
    t = text(captions.seed_peaks_caption(peaks, what="peak max logit"))
    assert f"MHSA 89.4, 78.8 (mean 84.1 ± {statistics.stdev([89.4, 78.8]):.3g})" in t


def test_fp8_training_caption_numbers_are_the_figures_data():
    steps = np.arange(6.0)
    zeros = np.zeros(6)
    series = {"steps": steps, "observed": np.array([1.0, 2.0, 6.0, 7.0, 3.0, 8.0]),
              "bounds": {"worst case": np.full(6, 10.0), "rank-agnostic": np.full(6, 5.0),
                         "rank-aware": np.full(6, 5.0)},
              "overflows": {"delayed": np.array([0, 0, 1200, 0, 0, 3]), "deterministic": zeros, "rowwise": zeros,
                            "mx": np.array([4, 4, 5, 4, 4, 4])},
              "underflow_zero": {"delayed": np.array([0, 0, 0, 50, 50, 50]), "deterministic": np.ones(6),
                                 "rowwise": zeros, "mx": zeros},
              "underflow_subnormal": {"delayed": np.full(6, 10.0), "deterministic": np.full(6, 2.0),
                                      "rowwise": np.ones(6), "mx": np.ones(6)},
              "error_softmax": {s: np.full(6, 0.01) for s in ("delayed", "deterministic", "rowwise", "mx")},
              "cost": {"delayed": {"scales": 2, "reductions": 0}, "deterministic": {"scales": 2, "reductions": 0},
                       "rowwise": {"scales": 4096, "reductions": 4096}, "mx": {"scales": 8192, "reductions": 8192}}}
    t = text(fp8_training_caption(series, gamma=4.49, r=16, n_keys=4096, spike=(2, 1, 30.0)))
    drawn = {(tr["meta"]["row"], tr["meta"]["name"]): tr for tr in fp8_training_data(**series)}
    total = {s: int(np.nansum(drawn[("overflow", s)]["y"])) for s in series["overflows"]}
    assert total == {"delayed": 1203, "deterministic": 0, "rowwise": 0, "mx": 25}
    assert "over 6 steps delayed, mx overflowed; deterministic, rowwise never did." in t
    assert "Through the LR spike (×30 from step 2) and after it, delayed, mx overflowed." in t
    under = {s: int(np.nan_to_num(drawn[("underflow", s)]["y"][-1])) for s in series["underflow_zero"]}
    assert under["delayed"] == 150 + 60 and under["rowwise"] == 6
    assert "deterministic flushed 6 scores to zero and 12 to subnormals; rowwise flushed 0 and 6" in t
    assert "Delayed scaling flushed 210 in all, 10 of them at the first step (step 0)" in t
    assert "paid 4,096 scale values and 4,096 reductions per step" in t
    assert "deterministic scale never overflowed with 0 reductions" in t and "a guarantee, not a measurement" in t
    assert "the rank-aware bound at 3 of 6 steps (first at step 2), at most 1.60× it" in t
    assert "γ = 4.49 is solved for N = 4,096 keys per layer" in t and "γ·r = 4.49 × 16 = 71.8" in t
    assert "(25 over the run)" in t  # MX's clipped block maxima, the drawn count
    assert fp8_training_caption({**series, "steps": np.zeros(0)}) == ""


def test_bounds_caption_numbers_are_the_bounds_vs_rank_figure():
    view = BoundsVsRank(64, 16, 64)
    curves = view.curves(1e-3, 0, 16)
    sigma = [row["sigma"] for row in view.rows(1e-3)]
    t = text(captions.bounds_caption(curves, sigma=sigma, d=64, d_head=16, delta=1e-3, n_keys=64))
    drawn = bound_vs_rank_data(**curves)
    aware = next(tr for tr in drawn if tr["name"].startswith("rank-aware"))
    ref = next(tr for tr in drawn if tr["name"].startswith("√(r/d_head)"))
    m = re.search(r"goes from (\S+) to (\S+), ×(\S+) — not ×(\S+),", t)
    assert float(m.group(1)) == float(f"{aware['y'][15]:.3g}") and float(m.group(2)) == float(f"{aware['y'][0]:.3g}")
    assert float(m.group(3)) == round(aware["y"][0] / aware["y"][15], 2)
    assert float(m.group(4)) == round(ref["y"][0] / ref["y"][15], 2) == 0.25  # √(1/16)
    m = re.search(r"γ = (\S+) at r = 16, (\S+) at r = 1 ", t)
    assert float(m.group(1)) == float(f"{aware['customdata'][15]:.3g}") and \
        float(m.group(2)) == float(f"{aware['customdata'][0]:.3g}") > 5 * float(m.group(1))
    a, b, c = (float(x) for x in re.search(r"×(\S+) · ×(\S+) = ×(\S+)\.", t).groups())
    assert math.isclose(a * b, c, abs_tol=0.011)  # the two factors make the drawn ratio
    curves = view.curves(1e-3, 0, 4)
    assert "Rank r = 4 against r = d_head = 16" in text(
        captions.bounds_caption(curves, sigma=sigma, d=64, d_head=16, delta=1e-3, n_keys=64))


def test_bounds_caption_leads_with_a_one_line_takeaway_and_keeps_the_derivation_collapsed():
    view = BoundsVsRank(64, 16, 64)
    sigma = [row["sigma"] for row in view.rows(1e-3)]
    for r, low in ((16, 1), (4, 4)):
        html = captions.bounds_caption(view.curves(1e-3, 0, r), sigma=sigma, d=64, d_head=16, delta=1e-3, n_keys=64)
        lead, rest = html.split("<details", 1)
        assert "<details" not in rest and rest.count("</details>") == 1 and " open" not in rest.split(">", 1)[0]
        takeaway, derivation = text(lead), text(rest.split("</summary>", 1)[1])
        m = re.fullmatch(rf"In short: rank r = {low} instead of 16 makes the rank-aware bound only ×(\S+) as large, "
                         r"not the ×(\S+) that √\(r/d_head\) would give: with fewer directions, γ grows and takes "
                         r"back part of the gain\.", takeaway)
        assert m, takeaway
        # the takeaway's two ratios are the derivation's, which the figure draws (test above)
        d = re.search(r"×(\S+) — not ×(\S+), the √\(r/d_head\)", derivation)
        assert m.groups() == d.groups() and float(m.group(1)) > float(m.group(2))
        assert "γ = " in derivation and "γ" not in takeaway.split("γ grows")[0]  # γ's numbers only in the details


def test_panels_put_the_captions_under_their_figures():
    panel = widgets.FP8Panel(SMALL, static=False)
    assert "Rank r = 1 against r = d_head" in text(panel.bounds_caption.value)
    assert panel.bounds_caption in panel.widget.children
    panel.controls["rank"].value = 2
    assert "Rank r = 2 against" in text(panel.bounds_caption.value)
    assert "dynamic" in panel.scales.value  # the table lists dynamic scaling beside the bounds
    spans = widgets.SpansPanel(SMALL, static=False)
    assert "Principal angles (layer 0, head 0" in text(spans.angles_caption.value)
    spans.controls["head"].value = 1
    assert "head 1" in text(spans.angles_caption.value)
    box = spans.training.widget.children
    views = [spans.training.views[name].widget for name in ("delta", "loss")]
    for name, view in zip(("delta", "loss"), views):  # each caption right under its figure
        assert box[box.index(view) + 1] is spans.training.captions[name]
