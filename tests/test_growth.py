"""The logit-growth lab: its grid, a tiny sweep, its statistics, the figures' drawn data, the caption and the widget."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from spanviz.experiments import growth
from spanviz.plots.growth import STYLES, growth_curves_figure, lr_sweep_figure
from spanviz.widgets import captions
from spanviz.widgets.growth import GrowthLab

TINY = dict(model=dict(context_length=16, n_layer=2, n_head=4, d_model=16), probe_every=2,
            train=dict(batch_size=2, eval_iters=1, eval_interval=2))  # fmt: skip


def test_the_grid_is_every_variant_at_every_learning_rate_with_its_source_setting():
    grid = growth.growth_variants(vocab_size=100)
    assert len(grid) == len(growth.VARIANTS) * len(growth.SIZES["cpu"]["lrs"])
    for name, (model, train) in grid.items():
        variant, lr = name.split(" lr=")
        assert train.lr == float(lr) and train.steps == 150 and train.warmup_steps == 15
        assert (model.context_length, model.n_layer, model.n_head, model.d_model) == (128, 2, 4, 64)
        for field, value in growth.VARIANTS[variant].items():
            assert getattr(model, field) == value
    mhsa, _ = grid["mhsa lr=0.1"]
    assert (mhsa.n_local, mhsa.qk_norm, mhsa.logit_softcap, mhsa.qk_clip, mhsa.global_every) == (0, False, None,
                                                                                                  None, None)


@pytest.mark.parametrize("kwargs, field", [
    ({"lrs": []}, "lrs"), ({"lrs": [0.1, -1.0]}, r"lrs\[1\]"), ({"lrs": [0.1, 0.1]}, "distinct"),
    ({"lrs": "0.1"}, "lrs"), ({"variants": ["mhsa", "gqa"]}, "variants"), ({"variants": []}, "variants"),
    ({"train": {"lr": 0.1}}, "lr"), ({"model": {"qk_norm": True}}, "qk_norm"), ({"size": "gpu"}, "size"),
])  # fmt: skip
def test_bad_grids_are_refused_before_anything_is_trained(kwargs, field, synthetic):
    with pytest.raises(ValueError, match=field):
        growth.growth_sweep(data=synthetic, seeds=1, steps=2, **kwargs)


@pytest.fixture(scope="module")
def tiny_lab():
    from types import SimpleNamespace

    import torch

    g = torch.Generator().manual_seed(0)
    data = SimpleNamespace(train_ids=torch.randint(0, 64, (2000,), generator=g), vocab_size=64,
                           eval_ids=torch.randint(0, 64, (500,), generator=g), describe=lambda: {"source": "synthetic"})
    return growth.growth_sweep(seeds=2, steps=4, data=data, lrs=[1e-3, 3.0], variants=["mhsa", "qk_norm", "qk_clip"],
                               **TINY)


def test_a_tiny_sweep_gives_every_cell_its_runs_metrics_and_paired_rows(tiny_lab):
    json.dumps(tiny_lab)
    assert tiny_lab["lrs"] == [1e-3, 3.0] and list(tiny_lab["variants"]) == ["mhsa", "qk_norm", "qk_clip"]
    cells = {(r["variant"], r["lr"], r["seed"]) for r in tiny_lab["runs"]}
    assert cells == {(v, lr, s) for v in ("mhsa", "qk_norm", "qk_clip") for lr in (1e-3, 3.0) for s in (0, 1)}
    for run in tiny_lab["runs"]:
        if run["status"] == "finished":
            assert run["final_val_loss"] == [v for v in run["val_loss"] if v is not None][-1]
            assert run["peak_max_logit"] == max(run["max_logit"]) and run["probe_step"] == [0, 2, 3]
    rows = {(r["variant"], r["metric"], r["lr"]): r for r in tiny_lab["rows"]}
    assert set(rows) == {(v, m, lr) for v in ("mhsa", "qk_norm", "qk_clip") for m in growth.METRICS
                         for lr in (1e-3, 3.0)}  # fmt: skip
    assert rows[("mhsa", "log10_peak_max_logit", 3.0)]["verdict"] == "baseline"
    assert rows[("qk_norm", "peak_max_logit", 3.0)].get("p") is None  # the peak is described; its log10 is tested
    q = rows[("qk_norm", "log10_peak_max_logit", 3.0)]
    peaks = {(r["variant"], r["seed"]): r["peak_max_logit"] for r in tiny_lab["runs"] if r["lr"] == 3.0}
    assert q["diff"] == pytest.approx(np.mean([np.log10(peaks[("qk_norm", s)] / peaks[("mhsa", s)]) for s in (0, 1)]))
    seeds = [r["peak_max_logit"] for r in tiny_lab["runs"] if r["variant"] == "qk_norm" and r["lr"] == 3.0]
    assert rows[("qk_norm", "peak_max_logit", 3.0)]["mean"] == pytest.approx(np.mean(seeds))
    # the learning rate makes MHSA's logits grow; QK-norm bounds them (|q̂·k̂|/√d_head <= gain² · √d_head)
    assert rows[("mhsa", "peak_max_logit", 3.0)]["mean"] > 10 * rows[("mhsa", "peak_max_logit", 1e-3)]["mean"]
    assert rows[("qk_norm", "peak_max_logit", 3.0)]["mean"] < rows[("mhsa", "peak_max_logit", 3.0)]["mean"]
    assert "MHSA's peak max logit went from" in tiny_lab["verdict"]


def test_the_sweep_figure_draws_each_variants_seed_mean_and_band(tiny_lab):
    runs = tiny_lab["runs"]
    fig = lr_sweep_figure(runs, labels=growth.LABELS, selected_lr=3.0)
    means = [t for t in fig.data if t.mode == "lines+markers"]
    assert len(means) == 2 * 3  # two metrics × three variants
    peak = next(t for t in means if t.name == growth.LABELS["mhsa"] and t.xaxis == "x")
    expected = [np.mean([r["peak_max_logit"] for r in runs if r["variant"] == "mhsa" and r["lr"] == lr])
                for lr in (1e-3, 3.0)]  # fmt: skip
    assert list(peak.x) == [1e-3, 3.0] and np.allclose(peak.y, expected)
    band = next(t for t in fig.data if t.fill == "toself" and t.legendgroup == "mhsa" and t.xaxis == "x")
    seeds = [[r["peak_max_logit"] for r in runs if r["variant"] == "mhsa" and r["lr"] == lr] for lr in (1e-3, 3.0)]
    assert np.allclose(band.y, [max(seeds[0]), max(seeds[1]), min(seeds[1]), min(seeds[0])])
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert [s.x0 for s in fig.layout.shapes] == [3.0, 3.0]
    styles = {(t.line.color, t.line.dash, t.marker.symbol) for t in means}
    assert len(styles) == 3  # one colour, dash and marker per variant


def test_a_diverged_seed_is_drawn_as_a_cross_on_the_loss_axes():
    runs = [{"variant": "mhsa", "lr": lr, "seed": s, "status": st, "final_val_loss": loss, "peak_max_logit": 5.0}
            for lr, s, st, loss in ((0.01, 0, "finished", 5.0), (0.01, 1, "finished", 5.2),
                                    (1.0, 0, "diverged", None), (1.0, 1, "finished", 7.0))]  # fmt: skip
    fig = lr_sweep_figure(runs)
    cross = [t for t in fig.data if t.marker and t.marker.symbol == "x"]
    assert len(cross) == 1 and list(cross[0].x) == [1.0] and cross[0].yaxis == "y2"
    loss = next(t for t in fig.data if t.mode == "lines+markers" and t.yaxis == "y2")
    assert list(loss.y) == [5.1, 7.0] and "1 diverged" in loss.text[1]


def test_the_curves_figure_draws_every_seed_and_the_mean_at_the_picked_rate(tiny_lab):
    fig = growth_curves_figure(tiny_lab["runs"], 3.0, labels=growth.LABELS)
    seeds = [r for r in tiny_lab["runs"] if r["lr"] == 3.0]
    assert len(fig.data) == len(seeds) + 3
    mean = next(t for t in fig.data if t.name == growth.LABELS["qk_clip"])
    expected = np.mean([r["max_logit"] for r in seeds if r["variant"] == "qk_clip"], axis=0)
    assert np.allclose(mean.y, expected)
    assert "3" in fig.layout.title.text


def test_the_caption_leads_with_the_growth_it_quotes_and_hides_the_statistics(tiny_lab):
    html = captions.growth_caption(tiny_lab["rows"], growth.LABELS)
    rows = {(r["variant"], r["metric"], r["lr"]): r for r in tiny_lab["rows"]}
    lo, hi = rows[("mhsa", "peak_max_logit", 1e-3)]["mean"], rows[("mhsa", "peak_max_logit", 3.0)]["mean"]
    first = html.split("<br>")[0]
    def big(x):  # the caption's number format: 3 significant digits, thousands grouped
        return f"{float(f'{x:.3g}'):,.0f}" if x >= 1000 else f"{x:.3g}"

    assert f"×{big(hi / lo)}" in first and big(hi) in first and "from 0.001 to 3" in first
    assert re.search(r"<details><summary>.*</summary><table>", html)
    assert html.index("<details>") > html.index("QK-norm")  # plain words first, the table one click away
    assert html.count("<tr>") == len(tiny_lab["rows"]) + 1


def test_the_lab_widget_replays_records_and_the_selector_moves_the_mark_and_the_curves(tiny_lab, tmp_path):
    from spanviz.store import ResultsStore

    store = ResultsStore(tmp_path / "runs")
    from types import SimpleNamespace

    import torch

    g = torch.Generator().manual_seed(0)
    data = SimpleNamespace(train_ids=torch.randint(0, 64, (2000,), generator=g), vocab_size=64,
                           eval_ids=torch.randint(0, 64, (500,), generator=g), describe=lambda: {"source": "synthetic"})
    growth.growth_sweep(seeds=1, steps=3, data=data, lrs=[1e-3, 3.0], variants=["mhsa", "softcap"], store=store,
                        **TINY)
    from spanviz.widgets.growth import lab_records

    lab = GrowthLab(lab_records(store), static=False)
    assert len(lab.runs) == 4 and lab.controls["lr"].options == (("0.001", 1e-3), ("3", 3.0))
    sweep, curves = lab.views["sweep"], lab.views["curves"]
    picked = lab.controls["lr"].value
    assert [s["x0"] for s in sweep.layout["shapes"]] == [picked, picked]
    other = 1e-3 if picked == 3.0 else 3.0
    lab.controls["lr"].value = other
    assert [s["x0"] for s in sweep.layout["shapes"]] == [other, other]
    drawn = [t for t in curves.data if t.get("name")]
    expected = [r["max_logit"] for r in lab.runs if r["lr"] == other and r["variant"] == "mhsa"][0]
    assert np.allclose(drawn[0]["y"], expected) and f"{other:g}" in curves.layout["title"]["text"]


def test_without_runs_the_lab_says_which_command_makes_them():
    lab = GrowthLab([])
    assert "spanviz sweep growth" in lab.widget.value and not lab.views


def test_every_lab_variant_has_its_own_colour_dash_and_marker():
    assert set(STYLES) == set(growth.VARIANTS)
    assert len({s[0] for s in STYLES.values()}) == len(STYLES)
    assert len({(s[1], s[2]) for s in STYLES.values()}) == len(STYLES)


def test_another_learning_rate_control_picks_the_labs_nearest_point():
    import ipywidgets as W

    lab = GrowthLab.__new__(GrowthLab)  # the selector alone, without figures
    lab.controls = {"lr": W.SelectionSlider(options=[("0.001", 1e-3), ("3", 3.0)], value=1e-3)}
    panel_lr = W.FloatLogSlider(value=1.0, base=10, min=-4, max=1, step=0.1)
    lab.follow(panel_lr)
    assert lab.controls["lr"].value == 1e-3  # the lab keeps its own first choice until the other control moves
    panel_lr.value = 0.8
    assert lab.controls["lr"].value == 3.0  # 0.8 is nearer 3 than 0.001 in log scale
    panel_lr.value = 0.01
    assert lab.controls["lr"].value == 1e-3
