"""Span / violation gradient scaling (arXiv 2512.13033): score-gradient blocks, energy by order, principal
angles between the spans of Q, K and V, and the T = 3 toy (computed by :func:`spanviz.spans.demos.span_toy`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from spanviz.plots.common import (
    ORDER_COLORS, History, Trace, as_array, block_mean, cycle_color, keys_under, series,
)


def _cells_note(T: int, max_cells: int) -> str:
    f = max(1, math.ceil(T / max_cells))
    return f"; a cell: the mean of {f}×{f} entries" if f > 1 else ""


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
        m = as_array(b["block"])
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

DIM_OPACITY = 0.3
"""Opacity of a block whose α is 0: drawn faded with its unscaled pattern (a student sees what α removes), not
as a blank square."""


def span_block_cells(blocks: Sequence[Mapping[str, Any]], max_cells: int = SPAN_BLOCK_CELLS) -> dict[str, Any]:
    """Everything of :func:`span_blocks_data` that does not depend on α, computed once per set of blocks.

    Returns:
        ``{"names", "orders" (lists), "z" (list of float32 (n, n) heatmaps: block means, see ``max_cells``),
        "pos" (n,) first entry of each cell, "x", "y" (list of (n,): each block's cell positions on the figure's
        one pair of axes), "grid" (placement), "rel" (n_blocks,) ‖block‖_F/‖dS‖_F, "zmax" the colour range
        (the 99th percentile of the cells' |values|), "T"}``. Norms are sums of squares (no BLAS call).
    Raises:
        ValueError: as :func:`span_blocks_figure`.
    """
    bl = _check_blocks(blocks)
    # ‖M‖_F = sqrt(Σ M_ij²) — einsum, not np.linalg.norm (a BLAS dot that may wait on worker threads)
    frob = [float(np.sqrt(np.einsum("ij,ij->", b["block"], b["block"]))) for b in bl]
    total_block = sum(b["block"] for b in bl)
    total = float(np.sqrt(np.einsum("ij,ij->", total_block, total_block))) or 1.0
    cells = [block_mean(b["block"], max_cells) for b in bl]
    z = [c.astype(np.float32) for c, _ in cells]
    # The color range: the 99th percentile of |cells| over all (unscaled) blocks. dS of one head has a few
    # entries far larger than the rest: a range set by the largest would leave every block nearly white.
    magnitudes = np.abs(np.concatenate([c.ravel() for c in z]))
    zmax = float(np.percentile(magnitudes, 99)) or float(magnitudes.max()) or 1.0
    # Every block on one pair of axes (one plotly subplot redraws several times faster than eight): block (r, c)
    # of the grid sits at (c·span, r·span) in token units, span = T + a gap for its title.
    T = bl[0]["block"].shape[0]
    orders, n_cols, grid = _block_grid(bl)
    span = T + max(2, T // 4)
    pos = cells[0][1]
    return {"names": [b["name"] for b in bl], "orders": [b["order"] for b in bl], "z": z, "pos": pos,
            "x": [(c - 1) * span + pos for _, c in grid], "y": [(r - 1) * span + pos for r, _ in grid],
            "grid": {"cells": grid, "rows": len(orders), "cols": n_cols, "span": span},
            "rel": np.array(frob) / total, "zmax": zmax, "T": T}


def _check_alphas(alphas: Sequence[float] | None) -> tuple[float, ...]:
    alphas = (1.0, 1.0, 1.0, 1.0) if alphas is None else tuple(float(a) for a in alphas)
    if len(alphas) != 4:
        raise ValueError(f"alphas must be 4 numbers (α0..α3), got {alphas!r}")
    return alphas


def span_block_shown(z: np.ndarray, alpha: float) -> tuple[np.ndarray, float]:
    """(heatmap, opacity) of one block at α: α·block, opaque — or, at α = 0, the unscaled block faded
    (:data:`DIM_OPACITY`). The browser's α rescaling (spanviz/widgets/static/block_scaler.js) does the same."""
    return (z, DIM_OPACITY) if alpha == 0 else ((z if alpha == 1 else alpha * z), 1.0)


def span_blocks_traces(cells: Mapping[str, Any], alphas: Sequence[float] | None = None) -> list[Trace]:
    """:func:`span_blocks_data` from :func:`span_block_cells`: α only rescales cached cells (a few microseconds)."""
    alphas = _check_alphas(alphas)
    orders = cells["orders"]
    traces: list[Trace] = []
    for name, order, z in zip(cells["names"], orders, cells["z"]):
        shown, opacity = span_block_shown(z, alphas[order])
        traces.append({"type": "heatmap", "z": shown, "x": cells["x"][len(traces)], "y": cells["y"][len(traces)],
                       "coloraxis": "coloraxis", "name": name, "opacity": opacity,
                       "hovertemplate": f"{name}: %{{z:.3g}}<extra></extra>"})
    scale = np.array([abs(alphas[o]) for o in orders])
    traces.append(
        {"type": "bar", "x": list(cells["names"]), "y": cells["rel"], "name": "‖block‖/‖dS‖",
         "marker": {"color": "lightgray"}, "xaxis": "x2", "yaxis": "y2"}
    )
    traces.append(
        {"type": "bar", "x": list(cells["names"]), "y": cells["rel"] * scale, "name": "‖α·block‖/‖dS‖",
         "marker": {"color": [ORDER_COLORS[o] for o in orders]}, "xaxis": "x2", "yaxis": "y2"}
    )
    return traces


def span_blocks_data(
    blocks: Sequence[Mapping[str, Any]], alphas: Sequence[float] | None = None, max_cells: int = SPAN_BLOCK_CELLS
) -> list[Trace]:
    """Traces of :func:`span_blocks_figure`: one heatmap per block (input order), then two bar traces."""
    _check_alphas(alphas)
    return span_blocks_traces(span_block_cells(blocks, max_cells), alphas)


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
            ones saturate); a block whose α is 0 shows its unscaled pattern faded (:func:`span_block_shown`).
            None = all ones.
        title: figure title.
        max_cells: heatmap cells per side; a larger T shows means of f×f entries (:data:`SPAN_BLOCK_CELLS`).
    Returns:
        Figure with len(blocks) heatmaps (rows i = query, columns j = key), all on one pair of axes, block (r, c)
        of the grid offset by (c, r) times T plus a gap (see :func:`span_block_cells`) — a figure of one subplot
        redraws several times faster in the browser than one subplot per block —, each titled by an annotation
        "S2 (order 1) ×α"; and 2 bar traces on their own axes: ‖block‖_F/‖dS‖_F (gray) and ‖α·block‖_F/‖dS‖_F
        (colored by order).
    Raises:
        ValueError: missing keys, non-2-D or mismatched blocks, order outside 0..3, alphas not of length 4.
    """
    bl = _check_blocks(blocks)
    cells = span_block_cells(bl, max_cells)
    a = _check_alphas(alphas)
    grid, T = cells["grid"], cells["T"]
    span, n_rows, n_cols = grid["span"], grid["rows"], grid["cols"]
    heat = n_cols / (n_cols + 1.3)  # the heatmaps' share of the width; the bars get the rest
    # Titles above each block (in data units, so they stay with their block), and one over the bars.
    annotations = [
        {"text": span_block_title(b["name"], b["order"], a[b["order"]]), "x": (c - 1) * span + (T - 1) / 2,
         "y": (r - 1) * span - 1, "xref": "x", "yref": "y", "xanchor": "center", "yanchor": "bottom",
         "showarrow": False, "font": {"size": 13}}
        for b, (r, c) in zip(bl, grid["cells"])
    ]
    annotations.append({"text": "block norms", "x": heat + 0.04 + (1 - heat - 0.04) / 2, "y": 1.0, "xref": "paper",
                        "yref": "paper", "xanchor": "center", "yanchor": "bottom", "showarrow": False,
                        "font": {"size": 13}})
    hidden = {"showticklabels": False, "showgrid": False, "zeroline": False, "ticks": ""}
    zmax = cells["zmax"]
    fig = go.Figure(data=span_blocks_traces(cells, a))
    fig.update_layout(
        title=title or "score-gradient blocks (rows: order = number of ⊥ projections; faded: α = 0, the block is "
                       "removed; colors clip at the 99th percentile of |entries|"
                       f"{_cells_note(T, max_cells)})",
        xaxis={**hidden, "domain": [0.0, heat], "range": [-0.5, n_cols * span - span + T - 0.5]},
        yaxis={**hidden, "range": [n_rows * span - span + T - 0.5, -(span - T) - 0.5]},  # reversed: row 0 on top
        xaxis2={"domain": [heat + 0.04, 1.0], "anchor": "y2"},
        yaxis2={"anchor": "x2"},
        annotations=annotations,
        coloraxis={
            "colorscale": "RdBu", "cmid": 0.0, "cmin": -zmax, "cmax": zmax, "colorbar": {"x": -0.08, "len": 0.8}
        },
        barmode="group",
        height=170 * n_rows + 80,
        margin={"l": 60, "r": 10, "t": 60, "b": 40},
        legend={"orientation": "h", "y": -0.08},
        plot_bgcolor="white",
    )
    return fig


def energy_by_order_data(steps: Any, shares: Mapping[str, Any]) -> list[Trace]:
    """Traces of :func:`energy_by_order_figure`: one stacked area per order."""
    x = as_array(steps)
    traces = []
    for i, (label, y) in enumerate(shares.items()):
        y = as_array(y)
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


def energy_series(history: History, layer: int) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    """Arguments of :func:`energy_by_order_figure` from a ``spans.SpanProbe`` history, or None without them.

    Args:
        history: with ``step`` and the probe's ``spans/L{layer}/share_order{k}`` keys.
        layer: the layer ℓ.
    Returns:
        (steps (N,), ``{"order k": (N,)}``) over the probed steps, or None when the history has no shares for ℓ.
    """
    names = [k for k in keys_under(history, f"spans/L{layer}") if k.startswith("share_order")]
    if not names:
        return None
    cols = {n: series(history, f"spans/L{layer}/{n}") for n in sorted(names)}
    steps = next(iter(cols.values()))[0]
    return steps, {n.replace("share_", "").replace("order", "order "): v for n, (_, v) in cols.items()}


# --------------------------------------------------------------------------------- projection subspaces
def subspace_angles_data(angles: Mapping[str, Any]) -> list[Trace]:
    """Traces of :func:`subspace_angles_figure`: one bar trace per pair, in degrees."""
    traces = []
    for i, (pair, theta) in enumerate(angles.items()):
        deg = np.degrees(as_array(theta))
        traces.append({"type": "bar", "x": np.arange(1, len(deg) + 1), "y": deg, "name": pair,
                       "marker": {"color": cycle_color(i)}})
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
        title=title or "principal angles between spans (0° = shared)",
        xaxis_title="angle index k (smallest first)",
        yaxis={"title": "angle θ_k (degrees)", "range": [0, 90], "dtick": 15},
        barmode="group",
        height=420,
        margin={"l": 50, "r": 10, "t": 40, "b": 40},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


# ------------------------------------------------------------------------------------------- the T = 3 toy
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
    """3-D view of the T = 3 toy: the span plane in R³, g and its parallel / violation parts.

    Args:
        toy: output of :func:`spanviz.spans.demos.span_toy` (``basis`` (3, 2), ``grad``, ``parallel``,
            ``violation`` (3,), ``frame`` (3, 2)).
        alphas: (α∥, α⊥) scales of the parallel and violation parts for the rescaled gradient (dashed).
    Returns:
        Figure with 7 traces: plane (mesh3d), the 2 columns of X, g, g∥, g⊥, α∥g∥ + α⊥g⊥ (scatter3d).
    """
    fig = go.Figure(data=span_toy_data(toy, alphas))
    fig.update_layout(
        title=title or "token space R³ (T = 3): span of X and a gradient column",
        scene={"aspectmode": "cube", "xaxis_title": "token 1", "yaxis_title": "token 2", "zaxis_title": "token 3"},
        height=440,
        # the scene's axis titles reach below its domain: a bottom margin keeps them off what follows the figure
        margin={"l": 0, "r": 0, "t": 40, "b": 50},
        uirevision="toy",
    )
    return fig
