"""Figure builders, checked on their data: trace counts, shapes, values, axes, and bad input."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest

from spanviz import plots
from spanviz.plots.common import layer_series, series
from spanviz.plots.curves import seed_band
from spanviz.plots.fp8 import STRATEGY_COLORS, bound_color
from spanviz.plots.fp8_training import BOUND_KEYS, STRATEGY_ORDER, STYLE, fp8_series
from spanviz.plots.local_global import head_mask_columns, head_masks_data, mask_gap
from spanviz.plots.span_blocks import DIM_OPACITY, span_block_cells, span_blocks_data, span_blocks_layout
from spanviz.spans.demos import span_toy

H1 = {"step": [0, 1, 2, 3], "train_loss": [5.0, 4.0, 3.0, 2.0], "val_loss": [None, 4.5, None, 3.0]}
H2 = {"step": [0, 1, 2, 3], "train_loss": [5.0, 4.2, 3.2, 2.4], "val_loss": [None, 4.7, None, 3.4]}


# ------------------------------------------------------------------------------------------- histories
def test_series_drops_unmeasured_steps():
    steps, values = series(H1, "val_loss")
    np.testing.assert_array_equal(steps, [1, 3])
    np.testing.assert_array_equal(values, [4.5, 3.0])


def test_series_missing_key_raises():
    with pytest.raises(ValueError, match="no key 'nope'"):
        series(H1, "nope")


def test_layer_series_accepts_list_column_and_split_keys():
    nested = {"step": [0, 1, 2], "m": [[1.0, 2.0], None, [3.0, 4.0]]}
    steps, values = layer_series(nested, "m")
    np.testing.assert_array_equal(steps, [0, 2])
    np.testing.assert_array_equal(values, [[1, 2], [3, 4]])
    split = {"step": [0, 1], "m/0": [1.0, 3.0], "m/1": [2.0, None]}
    steps, values = layer_series(split, "m")
    np.testing.assert_array_equal(steps, [0])
    np.testing.assert_array_equal(values, [[1, 2]])
    with pytest.raises(ValueError, match="neither"):
        layer_series({"step": [0]}, "m")


# ---------------------------------------------------------------------------------------- loss curves
def test_seed_band_mean_std_count():
    b = seed_band([H1, H2], "val_loss")
    np.testing.assert_array_equal(b["step"], [1, 3])
    np.testing.assert_allclose(b["mean"], [4.6, 3.2])
    np.testing.assert_allclose(b["std"], [np.std([4.5, 4.7], ddof=1), np.std([3.0, 3.4], ddof=1)])
    np.testing.assert_array_equal(b["count"], [2, 2])
    with pytest.raises(ValueError, match="at least one"):
        seed_band([], "val_loss")


def test_loss_curves_two_traces_per_variant_and_metric_with_band():
    fig = plots.loss_curves_figure({"standard": [H1, H2], "[1000]": H1}, metrics=("train_loss", "val_loss"))
    assert isinstance(fig, go.Figure)
    assert len(fig.data) == 2 * 2 * 2
    band, mean = fig.data[2], fig.data[3]  # standard · val_loss
    np.testing.assert_allclose(mean.y, [4.6, 3.2])
    std = np.std([4.5, 4.7], ddof=1)
    # band polygon: upper along x, then lower backwards
    np.testing.assert_allclose(band.y[0], 4.6 + std)
    np.testing.assert_allclose(band.y[-1], 4.6 - std)
    assert band.fill == "toself"
    single = fig.data[6:8]  # [1000] · val_loss, one seed: zero-width band
    np.testing.assert_allclose(single[0].y, [4.5, 3.0, 3.0, 4.5])  # upper = lower = the one seed
    assert mean.name == "standard · val loss (mean of 2 seeds)"  # legends in words, not key names


# ------------------------------------------------------------------------------------------ span blocks
def _blocks(rng, orders=(0, 1, 1, 1, 2, 2, 2, 3), T=6):
    return [{"name": f"S{i + 1}", "order": o, "block": rng.normal(size=(T, T))} for i, o in enumerate(orders)]


def _shown(fig, trace) -> np.ndarray:
    """What a heatmap shows, read as a person reads it: the value on the colour bar (``layout.coloraxis``) of the
    colour each cell is drawn in (the cell's place in its own colour axis' range, reversed where that axis is)."""
    own, bar = fig.layout[trace.coloraxis], fig.layout.coloraxis
    at = (np.asarray(trace.z, dtype=float) - own.cmin) / (own.cmax - own.cmin)  # 0..1 along the colour scale
    if own.reversescale:
        at = 1 - at
    return bar.cmin + at * (bar.cmax - bar.cmin)


@pytest.mark.parametrize("alphas", [(1.0, 0.5, 0.0, 2.0), (0.25, -1.0, 1.0, 0.0)])
def test_span_blocks_figure_grid_scaling_and_norms(alphas):
    rng = np.random.default_rng(0)
    blocks = _blocks(rng)
    fig = plots.span_blocks_figure(blocks, alphas)
    assert [t.type for t in fig.data] == ["heatmap"] * 8 + ["scatter"]  # the last one carries the colour bar
    heat = fig.data[:8]
    for b, trace in zip(blocks, heat):
        a = alphas[b["order"]]
        np.testing.assert_allclose(trace.z, b["block"], rtol=1e-6)  # a heatmap holds the block; hover says so
        assert f"before ×α{b['order']}" in trace.hovertemplate
        if a == 0:  # removed from the gradient: the unscaled pattern, faded — not a blank square
            np.testing.assert_allclose(_shown(fig, trace), b["block"], rtol=1e-5, atol=1e-9)
            assert trace.opacity == DIM_OPACITY < 1
        else:  # drawn in the colours of α·block on the colour bar (reversed colours for a negative α)
            np.testing.assert_allclose(_shown(fig, trace), a * b["block"], rtol=1e-5, atol=1e-9)
            assert trace.opacity == 1
    assert fig.layout.coloraxis.colorbar.title.text == "α·entry"
    # the colour scale spelled out in the layout the browser gets (a name would be plotly.js's own "RdBu", gray at 0)
    raw = span_blocks_layout(span_block_cells(blocks), alphas)
    for axis in ("coloraxis", "coloraxis2", "coloraxis5"):
        assert raw[axis]["colorscale"][5] == [0.5, "rgb(247,247,247)"] and len(raw[axis]["colorscale"]) == 11
    # one row per order: S1 alone in row 1, S8 alone in the last row; S2..S4 share a row (same y offset) side by
    # side (different x offsets), all on one pair of axes; each block titled above it with its α
    top = {t.name: t.y[0] for t in heat}
    assert top["S2"] == top["S3"] == top["S4"] != top["S1"] and len(set(top.values())) == 4
    assert len({t.x[0] for t in heat[1:4]}) == 3 and {t.xaxis for t in heat} == {None}  # the default axes
    titles = {a.text: (a.x, a.y) for a in fig.layout.annotations}
    assert titles[f"S3 (order 1) ×{alphas[1]:g}"][1] < top["S3"] < titles[f"S5 (order 2) ×{alphas[2]:g}"][1]
    # the norms: a gray bar ‖block‖/‖dS‖ and a coloured bar ‖α·block‖/‖dS‖ per block, side by side at its tick
    ds = np.linalg.norm(sum(b["block"] for b in blocks))
    rel = np.array([np.linalg.norm(b["block"]) / ds for b in blocks])
    scaled = rel * [abs(alphas[b["order"]]) for b in blocks]
    gray, coloured = fig.layout.shapes[:8], fig.layout.shapes[8:]
    assert len(fig.layout.shapes) == 16 and {(s.xref, s.yref) for s in fig.layout.shapes} == {("x2", "y2")}
    np.testing.assert_allclose([s.y1 for s in gray], rel)
    np.testing.assert_allclose([s.y1 for s in coloured], scaled)
    assert all(s.y0 == 0 and s.x1 == i == c.x0 < c.x1 for i, (s, c) in enumerate(zip(gray, coloured)))
    assert list(fig.layout.xaxis2.ticktext) == [b["name"] for b in blocks]
    assert fig.layout.yaxis2.range[1] == pytest.approx(1.05 * max(rel.max(), scaled.max()))  # every bar fits
    assert {s.name for s in fig.layout.shapes if s.showlegend} == {"‖block‖/‖dS‖", "‖α·block‖/‖dS‖"}
    # colour scale fixed by the unscaled blocks, at the 99th percentile of |entries| (a few huge ones saturate)
    entries = np.abs(np.concatenate([b["block"].ravel() for b in blocks]))
    assert fig.layout.coloraxis.cmax == pytest.approx(np.percentile(entries, 99)) == -fig.layout.coloraxis.cmin


def test_span_blocks_of_a_zero_gradient_keep_a_drawable_bars_axis():
    blocks = [{"name": f"S{i + 1}", "order": o, "block": np.zeros((4, 4))} for i, o in enumerate((0, 1, 1, 2))]
    fig = plots.span_blocks_figure(blocks)
    assert [s.y1 for s in fig.layout.shapes] == [0.0] * 8 and tuple(fig.layout.yaxis2.range) == (0.0, 1.0)


def test_span_blocks_large_context_shows_cell_means_and_exact_norms():
    rng = np.random.default_rng(1)
    blocks = _blocks(rng, T=128)
    fig = plots.span_blocks_figure(blocks, (1.0, 0.5, 0.0, 0.0))
    heat = fig.data[:8]
    assert heat[0].z.shape == (64, 64)
    np.testing.assert_allclose(_shown(fig, heat[1])[0, 0], 0.5 * blocks[1]["block"][:2, :2].mean(), rtol=1e-5)
    np.testing.assert_array_equal(heat[0].x[:2], [0, 2])
    total = np.linalg.norm(sum(b["block"] for b in blocks))
    np.testing.assert_allclose(fig.layout.shapes[8 + 1].y1, 0.5 * np.linalg.norm(blocks[1]["block"]) / total)
    assert "mean of 2×2 entries" in fig.layout.title.subtitle.text  # the notes line under the title


def test_span_blocks_qk4_has_three_rows_and_data_matches_figure():
    rng = np.random.default_rng(1)
    blocks = _blocks(rng, orders=(0, 1, 1, 2))
    fig = plots.span_blocks_figure(blocks)
    data = span_blocks_data(blocks)
    assert [d["type"] for d in data] == [t.type for t in fig.data]
    assert len({(t.x[0], t.y[0]) for t in fig.data[:4]}) == 4  # every heatmap has its own place
    assert {t.coloraxis for t in fig.data[:4]} == {"coloraxis2", "coloraxis3", "coloraxis4"}  # one per order
    assert "coloraxis5" not in fig.layout.to_plotly_json()
    np.testing.assert_allclose(fig.data[2].z, blocks[2]["block"], rtol=1e-6)


@pytest.mark.parametrize(
    "bad, match",
    [
        ([{"name": "S1", "order": 0}], "no 'block'"),
        ([{"name": "S1", "order": 5, "block": np.zeros((2, 2))}], r"order.*\[0, 3\]"),
        ([{"name": "S1", "order": 0, "block": np.zeros(3)}], "2-D"),
        ([], "at least one"),
    ],
)
def test_span_blocks_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        plots.span_blocks_figure(bad)


def test_energy_by_order_stacks_and_checks_lengths():
    fig = plots.energy_by_order_figure([0, 10], {"order 0": [0.7, 0.6], "order 1": [0.3, 0.4]})
    assert [t.stackgroup for t in fig.data] == ["energy", "energy"]
    np.testing.assert_allclose(fig.data[1].y, [0.3, 0.4])
    with pytest.raises(ValueError, match="shape"):
        plots.energy_by_order_figure([0, 10], {"order 0": [0.7]})


def test_subspace_angles_in_degrees():
    fig = plots.subspace_angles_figure({"Q–K": [0.0, np.pi / 2]})
    np.testing.assert_allclose(fig.data[0].y, [0.0, 90.0])
    np.testing.assert_array_equal(fig.data[0].x, [1, 2])


# -------------------------------------------------------------------------------------------- the toy
def test_span_toy_splits_gradient_into_span_and_violation():
    toy = span_toy(seed=3)
    np.testing.assert_allclose(toy["parallel"] + toy["violation"], toy["grad"])
    np.testing.assert_allclose(toy["basis"].T @ toy["violation"], 0.0, atol=1e-12)  # ⊥ to the plane
    np.testing.assert_allclose(toy["normal"] @ toy["parallel"], 0.0, atol=1e-12)  # in the plane
    g = np.array([1.0, 2.0, 3.0])
    flat = span_toy(basis=np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]), grad=g)
    np.testing.assert_allclose(flat["parallel"], [1.0, 2.0, 0.0])
    np.testing.assert_allclose(flat["violation"], [0.0, 0.0, 3.0])


def test_span_toy_bad_input():
    with pytest.raises(ValueError, match="rank 2"):
        span_toy(basis=np.array([[1.0, 2.0], [1.0, 2.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match=r"\(3, 2\)"):
        span_toy(basis=np.ones((4, 2)))


def test_span_toy_figure_scaled_arrow():
    toy = span_toy(seed=0)
    fig = plots.span_toy_figure(toy, alphas=(1.0, 0.0))
    assert len(fig.data) == 7
    assert fig.data[0].type == "mesh3d"
    tip = [fig.data[6].x[1], fig.data[6].y[1], fig.data[6].z[1]]
    np.testing.assert_allclose(tip, toy["parallel"])  # α⊥ = 0 keeps only the span part


# ------------------------------------------------------------------------------------ local/global heads
def test_head_masks_figure_whole_masks_then_zoom():
    """One heatmap per row: the heads side by side (NaN columns between them), each in the columns
    head_mask_columns names; categories say head, key and query; a title over each head."""
    T = 5
    causal = np.tril(np.ones((T, T), bool))
    local = causal & (np.arange(T)[:, None] - np.arange(T)[None, :] < 2)
    masks = np.stack([local, causal, causal])
    fig = plots.head_masks_figure(masks, labels=["local", "global", "global"], zoom=3)
    assert [t.type for t in fig.data] == ["heatmap", "heatmap"]
    assert (fig.data[0].xaxis, fig.data[1].xaxis) == ("x", "x2")
    whole, zoom = (np.asarray(t.z, dtype=float) for t in fig.data)
    cols, zcols = head_mask_columns(3, T), head_mask_columns(3, 3)
    assert whole.shape == (T, 3 * T + 2 * mask_gap(T)) and zoom.shape == (3, 3 * 3 + 2 * mask_gap(3))
    for h in range(3):
        np.testing.assert_array_equal(whole[:, cols[h]], masks[h].astype(float))
        np.testing.assert_array_equal(zoom[:, zcols[h]], masks[h, :3, :3].astype(float))  # cell by cell
        assert list(fig.data[0].x[cols[h]]) == [f"head {h}, key {j}" for j in range(T)]
    assert np.isnan(whole[:, cols[0].stop:cols[1].start]).all()  # the gap: drawn empty
    assert list(fig.data[0].y) == [f"query {i}" for i in range(T)]
    assert len(set(fig.data[0].x)) == len(fig.data[0].x)  # distinct categories: none merged
    assert [a.text for a in fig.layout.annotations] == ["local", "global", "global"] + ["positions 0–2"] * 3
    centres = [a.x for a in fig.layout.annotations[:3]]
    assert centres == [(c.start + c.stop - 1) / 2 for c in cols]  # each title over its head
    assert len(plots.head_masks_figure(masks, zoom=None).data) == 1
    with pytest.raises(ValueError, match="H=3"):
        plots.head_masks_figure(masks, labels=["a"])
    with pytest.raises(ValueError, match=r"\(H, T, T\)"):
        plots.head_masks_figure(np.ones((2, 3, 4)))


def test_head_masks_large_context_shows_block_means():
    T = 510
    causal = np.tril(np.ones((1, T, T), bool))
    (whole,) = head_masks_data(causal, max_cells=128)
    assert whole["z"].shape == (128, 128)
    assert whole["x"][:2] == ["head 0, keys 0–3", "head 0, keys 4–7"]  # each cell: 4 × 4 positions
    assert whole["x"][-1] == "head 0, keys 508–509" and whole["y"][-1] == "queries 508–509"  # the last is cut at T
    assert whole["z"][0, 0] == pytest.approx(10 / 16)  # the diagonal block of a causal mask: 10 of 16 allowed
    assert whole["z"][5, 0] == 1.0 and whole["z"][0, 5] == 0.0


def test_attention_heads_figure_tokens_on_axes_and_nan_kept():
    values = np.random.default_rng(0).normal(size=(4, 3, 3))
    values[:, 0, 2] = np.nan  # masked
    fig = plots.attention_heads_figure(values, tokens=["the", "cat", "the"])
    assert len(fig.data) == 4 and fig.layout.height >= 700  # 2 × 2 grid, large cells
    assert list(fig.data[0].x) == ["0: the", "1: cat", "2: the"]  # repeated tokens stay apart
    assert np.isnan(fig.data[0].z[0][2])
    with pytest.raises(ValueError, match="n=3"):
        plots.attention_heads_figure(values, tokens=["a"])
    # A readable window is labelled on every head's axes, counted from its first position; a long one only on hover.
    assert all(fig.layout[f"{axis}{k}"].showticklabels for axis in ("xaxis", "yaxis") for k in ("", "2", "3", "4"))
    assert "hover" not in fig.layout.title.subtitle.text
    window = plots.attention_heads_figure(values, tokens=["a", "b", "c"], first=24)
    assert list(window.data[3].y) == ["24: a", "25: b", "26: c"]
    long = np.zeros((2, 40, 40))
    wide = plots.attention_heads_figure(long, tokens=[f"w{i}" for i in range(40)])
    assert not wide.layout.xaxis.showticklabels and "hover for the tokens" in wide.layout.title.subtitle.text
    with pytest.raises(ValueError, match="first"):
        plots.attention_heads_figure(values, first=-1)


def test_relative_change_band_and_lines():
    fig = plots.relative_change_figure([10, 20], {"[1000]": [-0.5, -0.3]}, noise=[0.4, -0.2])
    band, line = fig.data
    np.testing.assert_array_equal(band.y, [0.4, 0.2, -0.2, -0.4])  # ±|noise|, closed polygon
    np.testing.assert_array_equal(line.y, [-0.5, -0.3])
    assert len(plots.relative_change_figure([10], {"a": [1.0]}).data) == 1
    with pytest.raises(ValueError, match="noise"):
        plots.relative_change_figure([10, 20], {"a": [1.0, 2.0]}, noise=[1.0])


def test_max_logit_one_line_per_run_and_layer():
    runs = {
        "MHSA": {"step": [0, 10], "logits/max_per_layer": [[1.0, 2.0], [3.0, 5.0]]},
        "LS": {"step": [0, 10], "logits/max_per_layer": [[1.0, 1.5], None]},
    }
    fig = plots.max_logit_figure(runs)
    assert len(fig.data) == 4
    np.testing.assert_array_equal(fig.data[1].y, [2.0, 5.0])  # MHSA layer 1
    np.testing.assert_array_equal(fig.data[3].x, [0])  # LS: the unprobed step is dropped
    assert fig.data[0].line.color == fig.data[1].line.color != fig.data[2].line.color


# ------------------------------------------------------------------------------------------------ FP8
def test_fp8_training_figure_rows_legend_groups_and_drawn_data():
    steps = [0, 1, 2]
    same = [10.0] * 3
    fig = plots.fp8_training_figure(
        steps, observed=[1.0, 20.0, 30.0],
        bounds={"worst case": [50.0] * 3, "rank-agnostic": same, "rank-aware": same},
        overflows={"delayed": [0, 0, 3], "deterministic": [0, 0, 0], "mx": [5, 6, 7]},
        underflow_zero={"delayed": [1, 2, 3], "deterministic": [0, 0, 1], "mx": [0, 0, 0]},
        underflow_subnormal={"delayed": [10, 20, 30], "deterministic": [1, 1, 1], "mx": [2, 2, 2]},
        spike=(1, 1, 30.0), max_step=100,
    )
    rows = {}
    for t in fig.data:
        rows.setdefault(t.meta["row"], []).append(t)
    assert [t.name for t in rows["overflow"]] == ["delayed", "deterministic", "mx"]
    assert {t.yaxis for t in rows["overflow"]} == {"y"} and {t.yaxis for t in rows["underflow"]} == {"y2"}
    np.testing.assert_array_equal(rows["overflow"][0].y, [np.nan, np.nan, 3])  # no overflow: a gap on the log axis
    np.testing.assert_array_equal(rows["underflow"][0].y, [11, 33, 66])  # to zero + to subnormal, summed so far
    assert all(t.showlegend is False for t in rows["underflow"])  # one legend entry per strategy
    # the coinciding bounds are one line, named for both; the ratio is max |S| ÷ bound
    assert [t.name for t in rows["ratio"]] == ["÷ worst case", "÷ rank-agnostic (= rank-aware here)"]
    np.testing.assert_allclose(rows["ratio"][1].y, [0.1, 2.0, 3.0])
    np.testing.assert_allclose(rows["ratio"][0].y, [0.02, 0.4, 0.6])
    # legend grouped by where the scale comes from, titled once per group
    titles = [t.legendgrouptitle.text for t in fig.data if t.legendgrouptitle and t.legendgrouptitle.text]
    assert titles == ["scale from past steps: no reduction", "scale from the weights: no reduction before the cast",
                      "scale from the scores: a reduction per tensor / row / block before the cast",
                      "max |S| ÷ each bound (from the weights)"]
    # every strategy its own symbol (the second cue beside the colour)
    assert len({STYLE[s][2] for s in STYLE}) == len(STYLE) == len(STRATEGY_ORDER)
    assert rows["overflow"][2].marker.symbol == STYLE["mx"][2]
    assert fig.layout.yaxis.type == fig.layout.yaxis2.type == fig.layout.yaxis3.type == "log"
    assert len([s for s in fig.layout.shapes if s.type == "rect"]) == 3  # the spike, in every row
    assert [s.name for s in fig.layout.shapes if s.showlegend] == ["LR spike ×30, step 1"]
    assert [fig.layout[f"xaxis{i}"].range for i in ("", "2", "3")] == [(0, 100)] * 3
    with pytest.raises(ValueError, match="observed"):
        plots.fp8_training_figure(steps, [1.0], {}, {})


def test_fp8_series_from_a_probe_history_with_and_without_cast_columns():
    h = {"step": [0, 1], "fp8/L0/max_abs_logit": [1.0, 2.0], "fp8/L1/max_abs_logit": [3.0, 1.0]}
    for ell in (0, 1):
        h.update({f"fp8/L{ell}/{k}": [5.0, 6.0] for k in BOUND_KEYS.values()})
        h.update({f"fp8/L{ell}/overflow/delayed": [ell, 2], f"fp8/L{ell}/scale/delayed": [1.0, 0.5],
                  f"fp8/L{ell}/overflow/mx": [1, 1], f"fp8/L{ell}/underflow_zero/mx": [ell, 0],
                  f"fp8/L{ell}/underflow_subnormal/mx": [2, 2], f"fp8/L{ell}/error_softmax/mx": [0.1 * ell, 0.0],
                  f"fp8/L{ell}/scales/mx": [8, 8], f"fp8/L{ell}/reductions/mx": [8, 8]})
    s = fp8_series(h)
    np.testing.assert_array_equal(s["observed"], [3.0, 2.0])
    np.testing.assert_array_equal(s["overflows"]["delayed"], [1, 4])
    assert list(s["overflows"]) == ["delayed", "mx"] and list(s["underflow_zero"]) == ["mx"]  # delayed: not recorded
    np.testing.assert_array_equal(s["underflow_subnormal"]["mx"], [4, 4])
    assert s["cost"] == {"mx": {"scales": 16, "reductions": 16}} and s["error_softmax"]["mx"][0] == 0.1


def test_fp8_colors_and_bound_colours():
    # a bound and the strategy whose scale it gives share the color
    assert bound_color("rank-aware") == STRATEGY_COLORS["theory"]
    assert bound_color("worst case × 2^1") == STRATEGY_COLORS["deterministic"]


def test_bound_vs_rank_marks_current_rank():
    ranks = [1, 2, 4, 8]
    bounds = {"worst case": [8.0, 8.0, 8.0, 8.0], "rank-aware": [1.0, 1.5, 2.0, 3.0]}
    fig = plots.bound_vs_rank_figure(ranks, bounds, observed=[0.5, 0.7, 1.0, 1.2], r=4)
    assert len(fig.data) == 2 + 1 + 1
    ring = fig.data[-1]
    np.testing.assert_array_equal(ring.x, [4, 4, 4])
    np.testing.assert_allclose(ring.y, [8.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="r=3"):
        plots.bound_vs_rank_figure(ranks, bounds, r=3)
    ref = [1.5, 3 / 2**0.5, 1.5 * 2**0.5, 3.0]
    fig = plots.bound_vs_rank_figure(ranks, bounds, r=8, reference=ref, gamma=[9.0, 6.0, 4.0, 3.0])
    reference = next(t for t in fig.data if t.name.startswith("√(r/d_head)"))
    np.testing.assert_allclose(reference.y, ref)
    assert list(fig.data[1].customdata) == [9.0, 6.0, 4.0, 3.0] and "γ" in fig.data[1].hovertemplate
    assert fig.layout.yaxis.minorloglabels == "complete"


def test_loss_figure_draws_the_difference_to_the_first_run_below_curves_that_coincide():
    """Two runs ending 0.4 % apart lie on top of each other in nats; the lower row draws their difference in percent
    at the steps both measured, on the same step axis; one run has no lower row."""
    mhsa = {"step": [0, 10, 20, 30], "train_loss": [9.0, 7.0, 6.5, 6.0], "val_loss": [None, 7.0, None, 6.0]}
    ls = {"step": [0, 10, 20, 30], "train_loss": [9.0, 7.1, 6.5, 6.1], "val_loss": [None, 7.07, None, 5.976]}
    fig = plots.loss_curves_figure({"MHSA": mhsa, "LS": ls}, ("train_loss", "val_loss"), delta=True)
    (lower,) = [t for t in fig.data if t.yaxis == "y2"]
    assert list(lower.x) == [10, 30] and lower.name == "LS vs MHSA"
    np.testing.assert_allclose(lower.y, [1.0, -0.4])
    assert fig.layout.xaxis.matches == "x2" and "MHSA" in fig.layout.yaxis2.title.text
    assert len(fig.data) == 4 * 2 + 1 and lower.line.color == fig.data[4].line.color  # LS's colour
    single = plots.loss_curves_figure({"MHSA": mhsa}, ("train_loss", "val_loss"), delta=True)
    assert all(t.yaxis in (None, "y") for t in single.data) and "yaxis2" not in single.layout.to_plotly_json()


def test_markers_are_thinned_on_lines_longer_than_a_dozen_points():
    from spanviz.plots.common import MAX_MARKERS, markers

    assert markers(MAX_MARKERS)["marker"].get("maxdisplayed") is None
    assert markers(31)["marker"]["maxdisplayed"] == MAX_MARKERS == 12
