"""Figures: pure functions, data in, :class:`plotly.graph_objects.Figure` out. No widgets, no training.

Every figure comes in two parts so the same code serves static figures and live widgets:

* ``<name>_data(...) -> list[dict]`` returns the traces as plain property dicts (``"type"`` plus data such as
  ``x``, ``y``, ``z``, ``name``), in the order the figure holds them;
* ``<name>_figure(...) -> go.Figure`` lays those traces out (subplots, axes, titles).

A live view shows the figure once and afterwards pushes only the ``_data`` dicts (see
:class:`spanviz.widgets.FigureView`). When the number or types of traces change (another preset, more heads)
the view shows a newly built figure instead.

Input contracts (numpy arrays or anything ``np.asarray`` accepts; torch tensors are converted):

* a **history** is a mapping of equal-length lists keyed by metric (``step``, ``train_loss``, ``val_loss``,
  probe keys ...); ``None`` marks "not measured at this step" (as in ``spanviz.train.RunRecord.history``);
* **runs** for seed bands: ``{variant: [history_seed0, history_seed1, ...]}``;
* a score-gradient **block**: a mapping with ``name`` (str), ``order`` (int, number of ⊥ factors) and
  ``block`` (array (T, T)); see :func:`span_blocks_figure`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

Trace = dict[str, Any]
History = Mapping[str, Sequence[Any]]

COLORS = qualitative.Plotly
ORDER_COLORS = ("#1f77b4", "#2ca02c", "#ff7f0e", "#d62728")  # order 0 (parallel) .. 3 (all violation)
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


# --------------------------------------------------------------------------------------------- helpers
def _array(x: Any, dtype: Any = float) -> np.ndarray:
    """np.asarray that also takes torch tensors (detached, on CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def _check_history(history: History, keys: Sequence[str], what: str = "history") -> int:
    """Length of the history's columns; ValueError when a needed key is missing or lengths differ."""
    if not isinstance(history, Mapping):
        raise ValueError(f"{what} must be a mapping of equal-length lists, got {type(history).__name__}")
    for key in keys:
        if key not in history:
            raise ValueError(f"{what} has no key {key!r}; keys: {sorted(history)}")
    lengths = {len(history[k]) for k in keys}
    if len(lengths) > 1:
        raise ValueError(f"{what} columns {list(keys)} have different lengths {sorted(lengths)}")
    return lengths.pop() if lengths else 0


def _block_mean(m: np.ndarray, max_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """(T, T) → at most (max_cells, max_cells): the mean of each f×f block (f = ceil(T / max_cells)), and the
    first position of each block (for the axis). A screen cannot show more cells than that anyway."""
    T = m.shape[-1]
    f = max(1, math.ceil(T / max_cells))
    if f == 1:
        return m, np.arange(T)
    n = math.ceil(T / f)
    padded = np.full((n * f, n * f), np.nan)
    padded[:T, :T] = m
    return np.nanmean(padded.reshape(n, f, n, f), axis=(1, 3)), np.arange(n) * f


def _cells_note(T: int, max_cells: int) -> str:
    f = max(1, math.ceil(T / max_cells))
    return f"; a cell: the mean of {f}×{f} entries" if f > 1 else ""


def series(history: History, key: str, step_key: str = "step") -> tuple[np.ndarray, np.ndarray]:
    """The measured points of one scalar metric.

    Args:
        history: mapping of equal-length lists; ``None`` (or a missing value) marks "not measured".
        key: metric name, e.g. ``"val_loss"``.
    Returns:
        (steps (N,), values (N,)) as float arrays, only the steps where ``key`` was measured.
    Raises:
        ValueError: when ``key`` or ``step_key`` is missing or the columns differ in length.
    """
    _check_history(history, (step_key, key))
    pairs = [(s, v) for s, v in zip(history[step_key], history[key]) if v is not None]
    if not pairs:
        return np.zeros(0), np.zeros(0)
    steps, values = zip(*pairs)
    return _array(steps), _array(values)


def layer_series(history: History, key: str, step_key: str = "step") -> tuple[np.ndarray, np.ndarray]:
    """A per-layer metric as a matrix.

    Accepts either one key whose entries are sequences of length L (e.g. ``logits/max_per_layer`` holding
    ``[max_layer0, max_layer1, ...]`` per step) or L scalar keys ``f"{key}/{i}"`` (i = 0..L-1).

    Returns:
        (steps (N,), values (N, L)) over the steps where the metric was measured (``None`` rows dropped).
    Raises:
        ValueError: when neither form is present or rows differ in length.
    """
    if key in history:
        steps, rows = [], []
        _check_history(history, (step_key, key))
        for s, v in zip(history[step_key], history[key]):
            if v is None:
                continue
            steps.append(s)
            rows.append(np.atleast_1d(_array(v)))
        if not rows:
            return np.zeros(0), np.zeros((0, 0))
        if len({r.shape for r in rows}) > 1:
            raise ValueError(f"history[{key!r}] rows have different lengths")
        return _array(steps), np.stack(rows)
    n_layer = 0
    while f"{key}/{n_layer}" in history:
        n_layer += 1
    if n_layer == 0:
        raise ValueError(f"history has neither {key!r} nor {key + '/0'!r}; keys: {sorted(history)}")
    columns = [f"{key}/{i}" for i in range(n_layer)]
    _check_history(history, (step_key, *columns))
    keep = [i for i in range(len(history[step_key])) if all(history[c][i] is not None for c in columns)]
    steps = _array([history[step_key][i] for i in keep])
    values = np.array([[history[c][i] for c in columns] for i in keep], dtype=float).reshape(len(keep), n_layer)
    return steps, values


def keys_under(history: Mapping[str, Any], prefix: str) -> list[str]:
    """Names below ``prefix/`` in a history, e.g. ``keys_under(h, "fp8/overflow") -> ["delayed", ...]``."""
    p = prefix.rstrip("/") + "/"
    return sorted(k[len(p) :] for k in history if k.startswith(p))


# ------------------------------------------------------------------------------------ loss curves, seeds
def seed_band(histories: Sequence[History], metric: str = "val_loss") -> dict[str, np.ndarray]:
    """Mean and spread of one metric across seeds, aligned on steps.

    Args:
        histories: one history per seed (each with ``step`` and ``metric``).
        metric: e.g. ``"val_loss"`` or ``"train_loss"``.
    Returns:
        dict of arrays of shape (N,) over the union of measured steps: ``step``, ``mean``, ``std`` (sample
        standard deviation, ddof=1; 0 where only one seed measured the step) and ``count`` (seeds measured).
    Raises:
        ValueError: empty ``histories`` or a history without the metric.
    """
    if len(histories) == 0:
        raise ValueError("histories must hold at least one history (one per seed), got none")
    measured = [series(h, metric) for h in histories]
    if len(measured) == 1:  # one seed: no spread (the common live case, kept cheap)
        steps, values = measured[0]
        return {"step": steps, "mean": values, "std": np.zeros_like(values), "count": np.ones_like(values)}
    steps = np.unique(np.concatenate([s for s, _ in measured]))
    table = np.full((len(measured), len(steps)), np.nan)  # (seeds, steps), NaN = not measured
    for row, (s, v) in zip(table, measured):
        row[np.searchsorted(steps, s)] = v
    count = np.sum(~np.isnan(table), axis=0).astype(float)
    mean = np.nansum(table, axis=0) / count
    sq = np.nansum((table - mean) ** 2, axis=0)
    std = np.sqrt(np.divide(sq, count - 1, out=np.zeros_like(sq), where=count > 1))
    return {"step": steps, "mean": mean, "std": std, "count": count}


def _as_seed_runs(runs: Mapping[str, Any]) -> dict[str, list[History]]:
    if not isinstance(runs, Mapping):
        raise ValueError(f"runs must map variant name -> history or list of histories, got {type(runs).__name__}")
    return {name: [h] if isinstance(h, Mapping) else list(h) for name, h in runs.items()}


def loss_curves_data(runs: Mapping[str, Any], metrics: str | Sequence[str] = "val_loss") -> list[Trace]:
    """Traces of :func:`loss_curves_figure`: per (variant, metric) a band (mean ± std) then the mean line."""
    metrics = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    traces: list[Trace] = []
    for v, (name, histories) in enumerate(_as_seed_runs(runs).items()):
        color = _color(v)
        for m, metric in enumerate(metrics):
            b = seed_band(histories, metric)
            x, lo, hi = b["step"], b["mean"] - b["std"], b["mean"] + b["std"]
            n = len(histories)
            label = name if len(metrics) == 1 else f"{name} · {metric.replace('_', ' ')}"
            traces.append(
                {
                    "type": "scatter",
                    "x": np.concatenate([x, x[::-1]]),
                    "y": np.concatenate([hi, lo[::-1]]),
                    "fill": "toself",
                    "fillcolor": _rgba(color, 0.18),
                    "line": {"width": 0, "color": color},
                    "hoverinfo": "skip",
                    "showlegend": False,
                    "legendgroup": label,
                    "name": f"{label} ± std",
                }
            )
            traces.append(
                {
                    "type": "scatter",
                    "x": x,
                    "y": b["mean"],
                    "mode": "lines+markers" if len(x) <= 60 else "lines",
                    "line": {"color": color, "dash": DASHES[m % len(DASHES)]},
                    "marker": {"size": 4},
                    "legendgroup": label,
                    "name": label if n == 1 else f"{label} (mean of {n} seeds)",
                }
            )
    return traces


def loss_curves_figure(
    runs: Mapping[str, Any],
    metrics: str | Sequence[str] = "val_loss",
    title: str | None = None,
    log_y: bool = False,
) -> go.Figure:
    """Loss curves of several runs with seed bands.

    Args:
        runs: ``{variant: [history per seed]}`` (a single history stands for one seed). Variants are colored
            in insertion order; each history needs ``step`` and every metric.
        metrics: one metric name or several (drawn solid, dashed, dotted ... per metric).
        title: figure title; default names the metrics.
        log_y: logarithmic loss axis.
    Returns:
        Figure with 2 traces per (variant, metric): a filled band mean ± std across seeds (zero width with one
        seed) and the mean line, x = optimizer step, y = loss in nats.
    Raises:
        ValueError: malformed runs or a history lacking a metric.
    """
    metrics = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    fig = go.Figure(data=loss_curves_data(runs, metrics))
    fig.update_layout(
        title=title or " / ".join(m.replace("_", " ") for m in metrics),
        xaxis_title="step",
        yaxis_title="loss (nats)",
        yaxis_type="log" if log_y else "linear",
        margin={"l": 50, "r": 10, "t": 40, "b": 40},
        height=320,
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def relative_change_data(steps: Any, changes: Mapping[str, Any], noise: Any | None = None) -> list[Trace]:
    """Traces of :func:`relative_change_figure`: the ±noise band (when given), then one line per change."""
    x = _array(steps)
    traces: list[Trace] = []
    if noise is not None:
        n = np.abs(_array(noise))
        if n.shape != x.shape:
            raise ValueError(f"noise has shape {n.shape}, steps has {x.shape}")
        traces.append({"type": "scatter", "x": np.concatenate([x, x[::-1]]), "y": np.concatenate([n, -n[::-1]]),
                       "fill": "toself", "fillcolor": "rgba(120,120,120,0.25)", "line": {"width": 0},
                       "name": "seed noise", "hoverinfo": "skip"})
    for i, (name, y) in enumerate(changes.items()):
        y = _array(y)
        if y.shape != x.shape:
            raise ValueError(f"changes[{name!r}] has shape {y.shape}, steps has {x.shape}")
        traces.append({"type": "scatter", "x": x, "y": y, "name": name, "mode": "lines+markers",
                       "line": {"color": _color(i + 1), "width": 3}, "marker": {"size": 6},
                       "hovertemplate": "step %{x}: %{y:+.2f} %<extra></extra>"})
    return traces


def relative_change_figure(
    steps: Any, changes: Mapping[str, Any], noise: Any | None = None, title: str | None = None,
    y_title: str = "Δ val loss vs standard (%)",
) -> go.Figure:
    """Relative change of a metric against a baseline over training, with the seed-noise band around 0.

    Two loss curves that differ by a fraction of a percent coincide to the pixel; their difference does not.

    Args:
        steps: (N,) optimizer steps where both were measured.
        changes: ``{name: (N,)}`` 100·(metric − baseline)/baseline in percent (below 0: lower than baseline).
        noise: (N,) the same change between two baseline runs that differ only in the seed (the band ±|noise|):
            a change inside the band is within the seed noise.
    Returns:
        Figure with the band (when given), one line per change and a zero line.
    Raises:
        ValueError: a series whose length differs from ``steps``.
    """
    fig = go.Figure(data=relative_change_data(steps, changes, noise))
    fig.add_hline(y=0, line={"color": "gray", "width": 1})
    fig.update_layout(
        title=title or "change against the baseline (gray: seed noise)",
        xaxis_title="step",
        yaxis_title=y_title,
        height=320,
        margin={"l": 60, "r": 10, "t": 40, "b": 40},
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


# ------------------------------------------------------------------------------------- span gradient blocks
def _check_blocks(blocks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    if len(blocks) == 0:
        raise ValueError("blocks must hold at least one block, got none")
    out = []
    shape = None
    for i, b in enumerate(blocks):
        for key in ("name", "order", "block"):
            if key not in b:
                raise ValueError(f"blocks[{i}] has no {key!r}; each block needs name, order and block (T, T)")
        m = _array(b["block"])
        if m.ndim != 2:
            raise ValueError(f"blocks[{i}]['block'] must be 2-D (T, T), got shape {m.shape}")
        if shape is not None and m.shape != shape:
            raise ValueError(f"blocks have different shapes: {shape} and {m.shape}")
        shape = m.shape
        order = int(b["order"])
        if not 0 <= order <= 3:
            raise ValueError(f"blocks[{i}]['order'] must be in [0, 3], got {order}")
        out.append({"name": str(b["name"]), "order": order, "block": m})
    return out


def _block_grid(blocks: list[dict[str, Any]]) -> tuple[list[int], int, list[tuple[int, int]]]:
    """Orders present (rows), number of heatmap columns, and the (row, col) cell of each block (1-based)."""
    orders = sorted({b["order"] for b in blocks})
    next_col = dict.fromkeys(orders, 0)
    cells = []
    for b in blocks:
        next_col[b["order"]] += 1
        cells.append((orders.index(b["order"]) + 1, next_col[b["order"]]))
    return orders, max(next_col.values()), cells


SPAN_BLOCK_CELLS = 64
"""Heatmap cells per side of a score-gradient block: a larger T is shown as means of f×f entries (f = ⌈T / 64⌉).
A block is about 170 pixels wide on screen, so T = 128 has more entries than pixels anyway, and four times
fewer cells keep an α slider's redraw in the browser quick."""


def span_blocks_data(
    blocks: Sequence[Mapping[str, Any]], alphas: Sequence[float] | None = None, max_cells: int = SPAN_BLOCK_CELLS
) -> list[Trace]:
    """Traces of :func:`span_blocks_figure`: one heatmap per block (input order), then two bar traces."""
    bl = _check_blocks(blocks)
    alphas = (1.0, 1.0, 1.0, 1.0) if alphas is None else tuple(float(a) for a in alphas)
    if len(alphas) != 4:
        raise ValueError(f"alphas must be 4 numbers (α0..α3), got {alphas!r}")
    total = np.linalg.norm(sum(b["block"] for b in bl)) or 1.0
    names = [b["name"] for b in bl]
    traces: list[Trace] = []
    for b in bl:
        z, pos = _block_mean(alphas[b["order"]] * b["block"], max_cells)
        traces.append({"type": "heatmap", "z": z, "x": pos, "y": pos, "coloraxis": "coloraxis", "name": b["name"]})
    rel = np.array([np.linalg.norm(b["block"]) / total for b in bl])
    scale = np.array([abs(alphas[b["order"]]) for b in bl])
    colors = [ORDER_COLORS[b["order"]] for b in bl]
    traces.append(
        {"type": "bar", "x": names, "y": rel, "name": "‖block‖/‖dS‖", "marker": {"color": "lightgray"}}
    )
    traces.append(
        {"type": "bar", "x": names, "y": rel * scale, "name": "‖α·block‖/‖dS‖", "marker": {"color": colors}}
    )
    return traces


def span_block_title(name: str, order: int, alpha: float) -> str:
    """A block's subplot title in :func:`span_blocks_figure`, e.g. "S2 (order 1) ×0" — the α that scales it."""
    return f"{name} (order {order}) ×{float(alpha):g}"


def span_blocks_figure(
    blocks: Sequence[Mapping[str, Any]], alphas: Sequence[float] | None = None, title: str | None = None,
    max_cells: int = SPAN_BLOCK_CELLS,
) -> go.Figure:
    """The score-gradient blocks of one head as a heatmap grid grouped by order, with a bar chart of norms.

    Args:
        blocks: sequence of mappings ``{"name": "S1", "order": 0..3, "block": array (T, T)}`` (the blocks of
            dS for one layer/head, e.g. 8 blocks with orders 0,1,1,1,2,2,2,3 for the ``kv8`` preset; the
            blocks sum to dS). Rows follow ascending order, columns the input order within an order.
        alphas: (α0, α1, α2, α3); heatmaps show α_order · block on a color scale fixed by the *unscaled*
            blocks (so a small α visibly fades its blocks): ± the 99th percentile of their |entries| (larger
            ones saturate). None = all ones.
        title: figure title.
        max_cells: heatmap cells per side; a larger T shows means of f×f entries (:data:`SPAN_BLOCK_CELLS`).
    Returns:
        Figure with len(blocks) heatmaps (rows i = query, columns j = key) and 2 bar traces: ‖block‖_F/‖dS‖_F
        (gray) and ‖α·block‖_F/‖dS‖_F (colored by order).
    Raises:
        ValueError: missing keys, non-2-D or mismatched blocks, order outside 0..3, alphas not of length 4.
    """
    bl = _check_blocks(blocks)
    traces = span_blocks_data(bl, alphas, max_cells)
    orders, n_cols, cells = _block_grid(bl)
    n_rows = len(orders)
    specs: list[list[dict | None]] = [[{} for _ in range(n_cols)] + [None] for _ in range(n_rows)]
    specs[0][-1] = {"rowspan": n_rows}
    a = (1.0, 1.0, 1.0, 1.0) if alphas is None else tuple(alphas)
    titles_by_cell = {cell: span_block_title(b["name"], b["order"], a[b["order"]]) for cell, b in zip(cells, bl)}
    subplot_titles = []
    for r in range(1, n_rows + 1):
        subplot_titles += [titles_by_cell.get((r, c), "") for c in range(1, n_cols + 1)]
        if r == 1:
            subplot_titles.append("block norms")
    fig = make_subplots(
        rows=n_rows,
        cols=n_cols + 1,
        specs=specs,
        subplot_titles=subplot_titles,
        column_widths=[1.0] * n_cols + [1.3],
        horizontal_spacing=0.04,
        vertical_spacing=0.06,
    )
    for trace, (r, c) in zip(traces, cells):
        fig.add_trace(trace, row=r, col=c)
        fig.update_xaxes(showticklabels=False, row=r, col=c)
        fig.update_yaxes(showticklabels=False, autorange="reversed", scaleanchor=None, row=r, col=c)
    for trace in traces[len(bl) :]:
        fig.add_trace(trace, row=1, col=n_cols + 1)
    # The color range: the 99th percentile of |entries| over all (unscaled) blocks. dS of one head has a few
    # entries far larger than the rest: a range set by the largest would leave every block nearly white.
    magnitudes = np.abs(np.concatenate([_block_mean(b["block"], max_cells)[0].ravel() for b in bl]))
    zmax = float(np.percentile(magnitudes, 99)) or float(magnitudes.max()) or 1.0
    fig.update_layout(
        title=title or "score-gradient blocks (rows: order = number of ⊥ projections; colors clip at the 99th "
                       f"percentile of |entries|{_cells_note(bl[0]['block'].shape[0], max_cells)})",
        coloraxis={
            "colorscale": "RdBu", "cmid": 0.0, "cmin": -zmax, "cmax": zmax, "colorbar": {"x": -0.08, "len": 0.8}
        },
        barmode="group",
        height=170 * n_rows + 80,
        margin={"l": 60, "r": 10, "t": 60, "b": 40},
        legend={"orientation": "h", "y": -0.08},
    )
    return fig


def energy_by_order_data(steps: Any, shares: Mapping[str, Any]) -> list[Trace]:
    """Traces of :func:`energy_by_order_figure`: one stacked area per order."""
    x = _array(steps)
    traces = []
    for i, (label, y) in enumerate(shares.items()):
        y = _array(y)
        if y.shape != x.shape:
            raise ValueError(f"shares[{label!r}] has shape {y.shape}, steps has {x.shape}")
        traces.append(
            {
                "type": "scatter",
                "x": x,
                "y": y,
                "name": label,
                "stackgroup": "energy",
                "mode": "lines",
                "line": {"color": ORDER_COLORS[i % 4]},
            }
        )
    return traces


def energy_by_order_figure(steps: Any, shares: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """Energy share of the score gradient by order over training (stacked areas).

    Args:
        steps: (N,) optimizer steps.
        shares: ``{"order 0": (N,), "order 1": (N,), ...}`` — fraction ‖Σ blocks of that order‖²/Σ_orders ‖·‖²
            (or any per-order share; the figure stacks whatever it gets).
    Returns:
        Figure with one stacked-area trace per order.
    Raises:
        ValueError: a share whose length differs from ``steps``.
    """
    fig = go.Figure(data=energy_by_order_data(steps, shares))
    fig.update_layout(
        title=title or "score-gradient energy by order",
        xaxis_title="step",
        yaxis_title="share of ‖dS‖²",
        height=300,
        margin={"l": 50, "r": 10, "t": 40, "b": 40},
    )
    return fig


# --------------------------------------------------------------------------------- projection subspaces
def subspace_angles_data(angles: Mapping[str, Any]) -> list[Trace]:
    """Traces of :func:`subspace_angles_figure`: one bar trace per pair, in degrees."""
    traces = []
    for i, (pair, theta) in enumerate(angles.items()):
        deg = np.degrees(_array(theta))
        traces.append(
            {"type": "bar", "x": np.arange(1, len(deg) + 1), "y": deg, "name": pair, "marker": {"color": _color(i)}}
        )
    return traces


def subspace_angles_figure(angles: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """Principal angles between projection subspaces, e.g. the token-space spans of Q, K and V of one head.

    Args:
        angles: ``{"Q–K": radians (k,), "Q–V": ..., "K–V": ...}``, ascending (e.g. the arccos of
            ``spans.principal_angle_cosines``).
    Returns:
        Figure with one bar trace per pair; x = angle index 1..k, y = angle in degrees (0..90).
    """
    fig = go.Figure(data=subspace_angles_data(angles))
    fig.update_layout(
        title=title or "principal angles between spans",
        xaxis_title="angle index",
        yaxis={"title": "degrees", "range": [0, 90]},
        barmode="group",
        height=420,
        margin={"l": 50, "r": 10, "t": 40, "b": 40},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def span_toy(basis: Any | None = None, grad: Any | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """The T = 3 toy: a 2-D span (plane) in token space R³ and a gradient split into span + violation.

    With X (3, 2) (T = 3 tokens, d = 2 features) the projector Π_X = X (XᵀX)⁻¹ Xᵀ maps R³ onto the plane
    spanned by X's columns; a gradient column g ∈ R³ splits exactly into g∥ = Π_X g (in-span, "parallel")
    and g⊥ = g − g∥ (the span violation, orthogonal to the plane).

    Args:
        basis: X, shape (3, 2) of rank 2; None draws one from ``seed``.
        grad: g, shape (3,); None draws one from ``seed``.
        seed: numpy seed for the random defaults.
    Returns:
        dict of float arrays: ``basis`` (3, 2), ``grad`` (3,), ``parallel`` (3,), ``violation`` (3,),
        ``frame`` (3, 2) an orthonormal basis of the plane, ``normal`` (3,) a unit normal.
    Raises:
        ValueError: wrong shapes, or a basis of rank < 2 (no plane).
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(3, 2)) if basis is None else _array(basis)
    g = rng.normal(size=3) if grad is None else _array(grad)
    if x.shape != (3, 2):
        raise ValueError(f"basis must have shape (3, 2) (T=3 tokens, d=2), got {x.shape}")
    if g.shape != (3,):
        raise ValueError(f"grad must have shape (3,), got {g.shape}")
    if np.linalg.matrix_rank(x) < 2:
        raise ValueError("basis must have rank 2 (its columns must span a plane)")
    parallel = x @ np.linalg.solve(x.T @ x, x.T @ g)
    frame, _ = np.linalg.qr(x)
    normal = np.cross(frame[:, 0], frame[:, 1])
    return {
        "basis": x,
        "grad": g,
        "parallel": parallel,
        "violation": g - parallel,
        "frame": frame,
        "normal": normal / np.linalg.norm(normal),
    }


def _arrow(vec: np.ndarray, name: str, color: str, dash: str = "solid", width: int = 6) -> Trace:
    return {
        "type": "scatter3d",
        "x": [0.0, vec[0]],
        "y": [0.0, vec[1]],
        "z": [0.0, vec[2]],
        "mode": "lines+markers",
        "marker": {"size": [0, 5], "color": color, "symbol": "diamond"},
        "line": {"color": color, "width": width, "dash": dash},
        "name": name,
    }


def span_toy_data(toy: Mapping[str, np.ndarray], alphas: Sequence[float] = (1.0, 1.0)) -> list[Trace]:
    """Traces of :func:`span_toy_figure`: plane, the two basis columns, g, g∥, g⊥, and α∥g∥ + α⊥g⊥."""
    a_par, a_perp = (float(a) for a in alphas)
    g, par, perp, frame = toy["grad"], toy["parallel"], toy["violation"], toy["frame"]
    extent = 1.2 * max(np.abs(g).max(), np.abs(toy["basis"]).max(), 1e-9)
    corners = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]]) * extent
    pts = corners @ frame.T  # (4, 3)
    traces: list[Trace] = [
        {
            "type": "mesh3d",
            "x": pts[:, 0],
            "y": pts[:, 1],
            "z": pts[:, 2],
            "i": [0, 0],
            "j": [1, 2],
            "k": [2, 3],
            "color": "#1f77b4",
            "opacity": 0.2,
            "name": "span(X)",
            "showlegend": True,
            "hoverinfo": "skip",
        }
    ]
    for c in range(2):
        traces.append(_arrow(toy["basis"][:, c], f"x{c + 1} (column of X)", "gray", width=3))
    traces.append(_arrow(g, "g (gradient)", "black"))
    traces.append(_arrow(par, "g∥ = Π g (span)", ORDER_COLORS[0]))
    traces.append(_arrow(perp, "g⊥ = g − Π g (violation)", ORDER_COLORS[3]))
    traces.append(_arrow(a_par * par + a_perp * perp, f"{a_par:g}·g∥ + {a_perp:g}·g⊥", ORDER_COLORS[1], "dash"))
    return traces


def span_toy_figure(
    toy: Mapping[str, np.ndarray], alphas: Sequence[float] = (1.0, 1.0), title: str | None = None
) -> go.Figure:
    """3-D view of :func:`span_toy`: the span plane in R³, g and its parallel / violation parts.

    Args:
        toy: output of :func:`span_toy`.
        alphas: (α∥, α⊥) scales of the parallel and violation parts for the rescaled gradient (dashed).
    Returns:
        Figure with 7 traces: plane (mesh3d), the 2 columns of X, g, g∥, g⊥, α∥g∥ + α⊥g⊥ (scatter3d).
    """
    fig = go.Figure(data=span_toy_data(toy, alphas))
    fig.update_layout(
        title=title or "token space R³ (T = 3): span of X and a gradient column",
        scene={"aspectmode": "cube", "xaxis_title": "token 1", "yaxis_title": "token 2", "zaxis_title": "token 3"},
        height=420,
        margin={"l": 0, "r": 0, "t": 40, "b": 0},
        uirevision="toy",
    )
    return fig


# -------------------------------------------------------------------------------------- local/global heads
def head_masks_data(masks: Any, zoom: int | None = None, max_cells: int = 128) -> list[Trace]:
    """Traces of :func:`head_masks_figure`: per head the whole mask (block means when T > ``max_cells``),
    then, with ``zoom``, per head its first ``zoom`` × ``zoom`` positions cell by cell."""
    m = _array(masks, dtype=np.float32)
    if m.ndim != 3 or m.shape[1] != m.shape[2]:
        raise ValueError(f"masks must have shape (H, T, T), got {m.shape}")
    traces = []
    for h in range(m.shape[0]):
        z, pos = _block_mean(m[h], max_cells)
        traces.append({"type": "heatmap", "z": z.astype(np.float32), "x": pos, "y": pos, "coloraxis": "coloraxis",
                       "name": f"head {h}", "hovertemplate": "query %{y}, key %{x}: %{z:.2f}<extra></extra>"})
    if zoom:
        n = min(int(zoom), m.shape[1])
        for h in range(m.shape[0]):
            traces.append({"type": "heatmap", "z": m[h, :n, :n], "coloraxis": "coloraxis", "xgap": 1, "ygap": 1,
                           "name": f"head {h} (zoom)", "hovertemplate": "query %{y}, key %{x}<extra></extra>"})
    return traces


def head_masks_figure(
    masks: Any, labels: Sequence[str] | None = None, zoom: int | None = 32, max_cells: int = 128,
    title: str | None = None,
) -> go.Figure:
    """Per-head attention masks: a row of whole masks and, below, a zoom on their first positions.

    Args:
        masks: bool (H, T, T), True where query i may attend key j (e.g. ``local_global.dense_mask``).
        labels: H titles for the whole masks; default "head h".
        zoom: show the first ``zoom`` positions of every head cell by cell in a second row (None = no zoom
            row); a window of a few keys is one or two pixels wide in the whole mask at T = 128.
        max_cells: whole masks with T > max_cells show the mean of f×f blocks (f = ⌈T / max_cells⌉).
    Returns:
        Figure with H heatmaps (rows = query i, columns = key j; 1 = allowed, 0 = masked) and, with zoom, H
        more; the first H subplot titles are ``labels``.
    Raises:
        ValueError: masks not (H, T, T), or len(labels) != H.
    """
    m = _array(masks, dtype=np.float32)
    traces = head_masks_data(m, zoom, max_cells)
    H = m.shape[0]
    labels = [f"head {h}" for h in range(H)] if labels is None else list(labels)
    if len(labels) != H:
        raise ValueError(f"labels must have H={H} entries, got {len(labels)}")
    rows = 2 if zoom else 1
    n = min(int(zoom), m.shape[1]) if zoom else 0
    titles = labels + [f"positions 0–{n - 1}" for _ in range(H)] * (rows - 1)
    fig = make_subplots(rows=rows, cols=H, subplot_titles=titles, horizontal_spacing=0.03, vertical_spacing=0.1)
    for k, trace in enumerate(traces):
        r, c = k // H + 1, k % H + 1
        fig.add_trace(trace, row=r, col=c)
        fig.update_yaxes(autorange="reversed", showticklabels=False, scaleanchor=f"x{k + 1 if k else ''}",
                         row=r, col=c)
        fig.update_xaxes(showticklabels=False, constrain="domain", row=r, col=c)
    fig.update_layout(
        title=title or f"attention masks per head (T = {m.shape[1]}; rows: query i, columns: key j)",
        coloraxis={"colorscale": [[0, "#f4f4f4"], [1, "#1f77b4"]], "cmin": 0, "cmax": 1, "showscale": False},
        height=260 * rows + 60,
        margin={"l": 20, "r": 10, "t": 70, "b": 20},
    )
    return fig


def attention_heads_data(values: Any, tokens: Sequence[str] | None = None) -> list[Trace]:
    """Traces of :func:`attention_heads_figure`: one heatmap per head, hover naming the tokens."""
    v = _array(values)
    if v.ndim != 3 or v.shape[1] != v.shape[2]:
        raise ValueError(f"values must have shape (H, T, T), got {v.shape}")
    T = v.shape[1]
    if tokens is not None and len(tokens) != T:
        raise ValueError(f"tokens must have T={T} entries, got {len(tokens)}")
    traces = []
    for h in range(v.shape[0]):
        trace: Trace = {"type": "heatmap", "z": v[h], "coloraxis": "coloraxis", "name": f"head {h}"}
        if tokens is not None:
            trace["x"] = trace["y"] = [f"{i}: {t}" for i, t in enumerate(tokens)]
            trace["hovertemplate"] = "query %{y}<br>key %{x}<br>%{z:.3f}<extra>" + f"head {h}</extra>"
        traces.append(trace)
    return traces


def attention_heads_figure(
    values: Any, tokens: Sequence[str] | None = None, n_cols: int = 2, title: str | None = None,
    colorbar_title: str = "",
) -> go.Figure:
    """Attention logits or patterns of every head, large enough to read, the tokens on the axes.

    Args:
        values: (H, T, T) per head (rows: query i, columns: key j), e.g. S = QKᵀ/√d_head or P = softmax(S + M);
            NaN is drawn blank (e.g. the masked upper triangle of S).
        tokens: the T tokens of the window (axis labels "i: token" and hover), or None for positions.
        n_cols: heads per row.
    Returns:
        Figure with H heatmaps sharing one color scale (shown).
    Raises:
        ValueError: values not (H, T, T), or len(tokens) != T.
    """
    traces = attention_heads_data(values, tokens)
    H = len(traces)
    cols = max(1, min(n_cols, H))
    rows = math.ceil(H / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"head {h}" for h in range(H)],
                        horizontal_spacing=0.06, vertical_spacing=0.08)
    for h, trace in enumerate(traces):
        r, c = h // cols + 1, h % cols + 1
        fig.add_trace(trace, row=r, col=c)
        fig.update_yaxes(autorange="reversed", showticklabels=False, row=r, col=c)
        fig.update_xaxes(showticklabels=False, row=r, col=c)
    fig.update_layout(
        title=title or "attention per head (rows: query i, columns: key j; hover for the tokens)",
        coloraxis={"colorscale": "Viridis", "colorbar": {"title": {"text": colorbar_title}}},
        height=380 * rows + 60,
        margin={"l": 20, "r": 10, "t": 70, "b": 20},
    )
    return fig


def max_logit_data(runs: Mapping[str, History], key: str = "logits/max_per_layer") -> list[Trace]:
    """Traces of :func:`max_logit_figure`: for each run (color) one line per layer (dash)."""
    traces = []
    for r, (name, history) in enumerate(runs.items()):
        steps, values = layer_series(history, key)
        for layer in range(values.shape[1]):
            traces.append(
                {
                    "type": "scatter",
                    "x": steps,
                    "y": values[:, layer],
                    "mode": "lines+markers" if len(steps) <= 60 else "lines",
                    "marker": {"size": 4},
                    "line": {"color": _color(r), "dash": DASHES[layer % len(DASHES)]},
                    "legendgroup": name,
                    "name": f"{name} · layer {layer}",
                }
            )
    return traces


def max_logit_figure(
    runs: Mapping[str, History], key: str = "logits/max_per_layer", title: str | None = None
) -> go.Figure:
    """Max pre-softmax logit per layer over steps, for several runs (e.g. MHSA vs LS).

    Args:
        runs: ``{run name: history}``; each history holds ``step`` and the per-layer metric ``key`` (see
            :func:`layer_series` for the accepted forms), max |q·k|/√d_head over allowed pairs.
    Returns:
        Figure with one line per (run, layer).
    Raises:
        ValueError: a history without the metric.
    """
    fig = go.Figure(data=max_logit_data(runs, key))
    fig.update_layout(
        title=title or "max attention logit per layer",
        xaxis_title="step",
        yaxis_title="max |q·k|/√d_head",
        height=320,
        margin={"l": 50, "r": 10, "t": 40, "b": 40},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


# ------------------------------------------------------------------------------------------------- FP8
E4M3_MAX = 448.0


def fp8_panel_data(
    steps: Any,
    observed: Any,
    bounds: Mapping[str, Any],
    scales: Mapping[str, Any],
    overflows: Mapping[str, Any],
) -> list[Trace]:
    """Traces of :func:`fp8_panel_figure`: observed, bounds..., "observed above a bound" markers, scales...,
    overflows... (in that order)."""
    x = _array(steps)

    def col(name: str, y: Any) -> np.ndarray:
        y = _array(y)
        if y.shape != x.shape:
            raise ValueError(f"{name} has shape {y.shape}, steps has {x.shape}")
        return y

    obs = col("observed", observed)
    traces: list[Trace] = [
        {"type": "scatter", "x": x, "y": obs, "name": "observed max |S|", "mode": "lines",
         "line": {"color": "black", "width": 3}, "legendgroup": "logits", "legendgrouptitle": {"text": "max logit"}}
    ]
    above = np.zeros(x.shape, dtype=bool)
    broken: list[list[str]] = [[] for _ in range(len(x))]
    for i, (name, y) in enumerate(bounds.items()):
        y = col(f"bounds[{name!r}]", y)
        traces.append({"type": "scatter", "x": x, "y": y, "name": f"bound: {name}", "mode": "lines",
                       "line": {"color": _color(i + 1), "dash": "dash"}, "legendgroup": "logits"})
        over = obs > y
        above |= over
        for k in np.flatnonzero(over):
            broken[k].append(name)
    traces.append({"type": "scatter", "x": x[above], "y": obs[above], "name": "observed above a bound",
                   "mode": "markers", "marker": {"color": "red", "symbol": "x", "size": 9},
                   "text": [", ".join(b) for b, a in zip(broken, above) if a], "legendgroup": "logits",
                   "hovertemplate": "step %{x}: %{y:.3g} exceeds %{text}<extra></extra>"})
    strategies = list(dict.fromkeys([*scales, *overflows]))
    for k, (name, y) in enumerate(scales.items()):
        i = strategies.index(name)
        traces.append({"type": "scatter", "x": x, "y": col(f"scales[{name!r}]", y), "name": f"scale: {name}",
                       "mode": "lines", "line": {"color": _color(i + 5)}, "legendgroup": "scales",
                       **({"legendgrouptitle": {"text": "FP8 scale"}} if k == 0 else {})})
    for k, (name, y) in enumerate(overflows.items()):
        i = strategies.index(name)
        traces.append({"type": "scatter", "x": x, "y": col(f"overflows[{name!r}]", y), "name": f"overflows: {name}",
                       "mode": "lines+markers", "marker": {"size": 4}, "line": {"color": _color(i + 5)},
                       "legendgroup": "overflows",
                       **({"legendgrouptitle": {"text": "E4M3 overflows"}} if k == 0 else {})})
    return traces


def fp8_panel_figure(
    steps: Any,
    observed: Any,
    bounds: Mapping[str, Any],
    scales: Mapping[str, Any],
    overflows: Mapping[str, Any],
    title: str | None = None,
    spike: tuple[int, int, float] | None = None,
    max_step: int | None = None,
) -> go.Figure:
    """FP8 panel: logit bounds vs observed max logit, scales, and overflow counts per strategy over steps.

    Args:
        steps: (N,) optimizer steps.
        observed: (N,) observed max |S| (pre-softmax logit), e.g. the max over layers.
        bounds: ``{"worst case": (N,), "rank-agnostic": (N,), "rank-aware": (N,)}`` predicted max |S|.
        scales: ``{strategy: (N,)}`` FP8 scale s per strategy (E4M3 overflows where |S|·s > 448).
        overflows: ``{strategy: (N,)}`` number of logits with |S|·s > 448 at that step.
        spike: (first step, number of steps, factor) of an injected learning-rate spike, marked in every row.
        max_step: the last step of the run: the x axis spans 0..max_step from the start (so the spike mark is
            in place before training reaches it).
    Returns:
        Figure with 3 rows sharing x (tick labels on each): bounds + observed (log y) with red crosses where
        the observed max exceeds a bound, scales (log y), overflow counts; legend grouped by row.
    Raises:
        ValueError: a series whose length differs from ``steps``.
    """
    traces = fp8_panel_data(steps, observed, bounds, scales, overflows)
    fig = make_subplots(
        rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.08,
        subplot_titles=("max logit: observed vs bounds", "FP8 scale per strategy", "E4M3 overflows per step"),
    )
    n_b, n_s = 2 + len(bounds), len(scales)
    for i, trace in enumerate(traces):
        fig.add_trace(trace, row=1 if i < n_b else (2 if i < n_b + n_s else 3), col=1)
    fig.update_yaxes(type="log", title_text="|S|", row=1, col=1)
    fig.update_yaxes(type="log", title_text="scale", row=2, col=1)
    fig.update_yaxes(title_text="count", rangemode="tozero", row=3, col=1)
    fig.update_xaxes(showticklabels=True)
    fig.update_xaxes(title_text="step", row=3, col=1)
    if max_step is not None:
        fig.update_xaxes(range=[0, max_step])
    if spike is not None:
        start, length, factor = spike
        for row in (1, 2, 3):
            fig.add_vrect(x0=start - 0.5, x1=start + max(length, 1) - 0.5, fillcolor="orange", opacity=0.25,
                          line_width=0, row=row, col=1, exclude_empty_subplots=False)
        fig.add_annotation(x=start + max(length, 1), y=1, yref="y domain", text=f"LR spike ×{factor:g}",
                           showarrow=False, xanchor="left", yanchor="top", font={"color": "darkorange"}, row=1, col=1)
    fig.update_layout(title=title or "FP8 attention logits", height=700, margin={"l": 60, "r": 10, "t": 60, "b": 40},
                      legend={"groupclick": "toggleitem"})
    return fig


def bound_vs_rank_data(
    ranks: Any, bounds: Mapping[str, Any], observed: Any | None = None, r: int | None = None
) -> list[Trace]:
    """Traces of :func:`bound_vs_rank_figure`: bounds..., observed (if given), current-r markers (if r)."""
    x = _array(ranks)
    traces: list[Trace] = []
    curves = dict(bounds)
    for i, (name, y) in enumerate(curves.items()):
        y = _array(y)
        if y.shape != x.shape:
            raise ValueError(f"bounds[{name!r}] has shape {y.shape}, ranks has {x.shape}")
        traces.append({"type": "scatter", "x": x, "y": y, "name": name, "mode": "lines+markers",
                       "line": {"color": _color(i + 1)}})
    if observed is not None:
        y = _array(observed)
        if y.shape != x.shape:
            raise ValueError(f"observed has shape {y.shape}, ranks has {x.shape}")
        traces.append({"type": "scatter", "x": x, "y": y, "name": "observed max |S|", "mode": "markers",
                       "marker": {"color": "black", "size": 8, "symbol": "x"}})
        curves["observed max |S|"] = y
    if r is not None:
        idx = np.flatnonzero(x == r)
        if idx.size == 0:
            raise ValueError(f"r={r} is not one of the ranks {x.tolist()}")
        at = [float(_array(y)[idx[0]]) for y in curves.values()]
        traces.append({"type": "scatter", "x": [r] * len(at), "y": at, "name": f"r = {r}", "mode": "markers",
                       "marker": {"color": "rgba(0,0,0,0)", "size": 16, "line": {"color": "red", "width": 2}}})
    return traces


def bound_vs_rank_figure(
    ranks: Any,
    bounds: Mapping[str, Any],
    observed: Any | None = None,
    r: int | None = None,
    title: str | None = None,
    log_y: bool = True,
) -> go.Figure:
    """Logit bounds as a function of the rank r of W^Q W^Kᵀ.

    Args:
        ranks: (R,) ranks r.
        bounds: ``{name: (R,)}`` predicted max |S| per rank (e.g. worst case, rank-agnostic, rank-aware).
        observed: (R,) observed max |S| per rank (e.g. on random inputs), optional.
        r: highlight this rank (must be one of ``ranks``).
    Returns:
        Figure with one line per bound, the observed markers, and a ring marker per curve at r.
    Raises:
        ValueError: mismatched lengths or r not in ranks.
    """
    fig = go.Figure(data=bound_vs_rank_data(ranks, bounds, observed, r))
    fig.update_layout(
        title=title or "max-logit bound vs rank r",
        xaxis_title="rank r of W^Q W^Kᵀ",
        yaxis={"title": "max |S|", "type": "log" if log_y else "linear"},
        height=340,
        margin={"l": 60, "r": 10, "t": 40, "b": 40},
    )
    return fig
