"""Span / violation gradient scaling (arXiv 2512.13033): the score-gradient blocks of one head as a heatmap grid
grouped by order, with their norms, built so that α changes only layout values (a cheap redraw in the browser).
The blocks come from :func:`spanviz.spans.decompose` (spanviz's construction, docs/spans.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.colors
import plotly.graph_objects as go

from spanviz.plots.common import ORDER_COLORS, Trace, as_array, block_mean


def _cells_note(T: int, max_cells: int) -> str:
    f = max(1, math.ceil(T / max_cells))
    return f" · a cell: the mean of {f}×{f} entries" if f > 1 else ""


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
fewer cells keep a redraw in the browser quick."""

DIM_OPACITY = 0.3
"""Opacity of a block whose α is 0: drawn faded with its unscaled pattern (a student sees what α removes), not
as a blank square."""

DIVERGING = [[float(at), color] for at, color in plotly.colors.get_colorscale("RdBu")]
"""The blocks' colour scale (red: negative, white: 0, blue: positive), spelled out: the layout is sent to the
browser as a plain dict, and plotly.js's own "RdBu" (gray at 0) is not plotly.py's."""

BAR_WIDTH = 0.4
"""Width of one norm bar (x units: one block per unit; the unscaled bar left of the block's tick, the scaled right)."""


def span_block_cells(blocks: Sequence[Mapping[str, Any]], max_cells: int = SPAN_BLOCK_CELLS) -> dict[str, Any]:
    """Everything of the blocks figure that does not depend on α, computed once per set of blocks.

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


def order_coloraxis(order: int) -> str:
    """The colour axis of one order's heatmaps in :func:`span_blocks_figure`: "coloraxis2" .. "coloraxis5" (the
    plain "coloraxis" is the colour bar's, in units of α·entry)."""
    return f"coloraxis{order + 2}"


def span_block_color_range(zmax: float, alpha: float) -> dict[str, Any]:
    """The colour range of the heatmaps of an order scaled by α, which hold the *unscaled* block.

    Colour bar ±zmax in units of α·entry; an entry z drawn on ±zmax/|α| gets the colour of α·z on ±zmax, so a
    heatmap shows α·block without its numbers changing (reversed for α < 0). At α = 0 the range is the unscaled
    ±zmax and the block is drawn faded (:func:`span_block_opacity`): a student sees what α removes.
    The browser's α rescaling looks it up (:func:`span_block_alpha_table`).

    Returns:
        ``{"cmin", "cmax", "reversescale"}`` of a plotly colour axis.
    """
    if alpha == 0:
        return {"cmin": -zmax, "cmax": zmax, "reversescale": False}
    return {"cmin": -zmax / abs(alpha), "cmax": zmax / abs(alpha), "reversescale": alpha < 0}


def span_block_opacity(alpha: float) -> float:
    """Opacity of a block's heatmap at α: :data:`DIM_OPACITY` at α = 0 (removed from the gradient), else 1."""
    return DIM_OPACITY if alpha == 0 else 1.0


def span_block_title(name: str, order: int, alpha: float) -> str:
    """A block's subplot title in :func:`span_blocks_figure`, e.g. "S2 (order 1) ×0" — the α that scales it."""
    return f"{name} (order {order}) ×{float(alpha):g}"


def span_block_bar_height(rel: float, alpha: float) -> float:
    """Height of a block's scaled norm bar: ‖α·block‖/‖dS‖ = |α|·rel (rel = ‖block‖/‖dS‖)."""
    return float(rel) * abs(float(alpha))


def span_block_bar_reach(rel: float, alpha: float) -> float:
    """How high the norm bars' axis must reach for one block: 5 % above the higher of its two bars (unscaled
    rel, scaled |α|·rel)."""
    return 1.05 * float(rel) * max(1.0, abs(float(alpha)))


BARS_TOP_EMPTY = 1.0
"""The norm bars' axis top when every bar is 0 (dS = 0)."""


def span_block_bars_top(rel: Sequence[float], orders: Sequence[int], alphas: Sequence[float]) -> float:
    """Top of the norm bars' axis: 5 % above the highest bar, unscaled (‖block‖) or scaled (‖α·block‖)
    (:func:`span_block_bar_reach`); :data:`BARS_TOP_EMPTY` when every bar is 0 (dS = 0)."""
    top = max(span_block_bar_reach(r, alphas[o]) for r, o in zip(rel, orders))
    return top if top > 0 else BARS_TOP_EMPTY


def span_block_alpha_table(cells: Mapping[str, Any], values: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Every α-dependent value of :func:`span_blocks_layout` / :func:`span_blocks_traces`, for each α an order's
    slider can take: the one α rule, evaluated here, for a page to look up (spanviz/widgets/figure/static/span_alpha.js
    does no arithmetic of its own, so the page draws what these functions draw).

    Args:
        cells: from :func:`span_block_cells`.
        values: per order 0..3, the α values its slider can take (e.g. 0, 0.05, …, 2).
    Returns:
        ``{"values": per order [α_k], "opacity": per order [opacity_k], "color": per order [{cmin, cmax,
        reversescale}_k], "title", "bar", "reach": per block i, per α_k of its order: its title, scaled bar
        height and axis reach, "empty": the axis top when all bars are 0}`` (plain lists; JSON-ready).
    Raises:
        ValueError: ``values`` not 4 sequences.
    """
    if len(values) != 4:
        raise ValueError(f"values must hold 4 sequences of α (one per order), got {len(values)}")
    vals = [[float(v) for v in vs] for vs in values]
    zmax = float(cells["zmax"])
    names, orders, rel = list(cells["names"]), [int(o) for o in cells["orders"]], [float(r) for r in cells["rel"]]
    return {
        "values": vals,
        "opacity": [[span_block_opacity(v) for v in vs] for vs in vals],
        "color": [[span_block_color_range(zmax, v) for v in vs] for vs in vals],
        "title": [[span_block_title(n, o, v) for v in vals[o]] for n, o in zip(names, orders)],
        "bar": [[span_block_bar_height(r, v) for v in vals[o]] for r, o in zip(rel, orders)],
        "reach": [[span_block_bar_reach(r, v) for v in vals[o]] for r, o in zip(rel, orders)],
        "empty": BARS_TOP_EMPTY,
    }


def span_blocks_traces(cells: Mapping[str, Any], alphas: Sequence[float] | None = None) -> list[Trace]:
    """Traces of :func:`span_blocks_figure` from :func:`span_block_cells`: one heatmap per block (input order,
    the unscaled cells on its order's colour axis, faded at α = 0), then a trace without points that carries
    the colour bar. α changes only the heatmaps' opacity."""
    alphas = _check_alphas(alphas)
    traces: list[Trace] = []
    for i, (name, order, z) in enumerate(zip(cells["names"], cells["orders"], cells["z"])):
        traces.append({"type": "heatmap", "z": z, "x": cells["x"][i], "y": cells["y"][i],
                       "coloraxis": order_coloraxis(order), "name": name, "opacity": span_block_opacity(alphas[order]),
                       "hovertemplate": f"{name}: %{{z:.3g}} before ×α{order}<extra></extra>"})
    traces.append({"type": "scatter", "x": [None], "y": [None], "mode": "markers", "name": "colour scale",
                   "marker": {"coloraxis": "coloraxis", "color": [0.0]}, "hoverinfo": "skip", "showlegend": False})
    return traces


def span_blocks_data(
    blocks: Sequence[Mapping[str, Any]], alphas: Sequence[float] | None = None, max_cells: int = SPAN_BLOCK_CELLS
) -> list[Trace]:
    """Traces of :func:`span_blocks_figure`: one heatmap per block (input order), then the colour bar's trace."""
    _check_alphas(alphas)
    return span_blocks_traces(span_block_cells(blocks, max_cells), alphas)


def span_blocks_layout(cells: Mapping[str, Any], alphas: Sequence[float] | None = None, title: str | None = None,
                       max_cells: int = SPAN_BLOCK_CELLS) -> dict[str, Any]:
    """Layout of :func:`span_blocks_figure` from :func:`span_block_cells` (a plain dict, no validation: a few µs).

    What α changes here, and nothing else: each order's colour range (:func:`span_block_color_range`), the
    heights of the scaled norm bars (``shapes[n_blocks + i]``, block i), the bars' axis range
    (:func:`span_block_bars_top`) and the blocks' titles (``annotations[i]``). In a browser these are cheap edits
    (no trace data changes), which keeps an α slider's redraw quick.
    """
    a = _check_alphas(alphas)
    names, orders, rel = list(cells["names"]), list(cells["orders"]), cells["rel"]
    grid, T, zmax = cells["grid"], cells["T"], cells["zmax"]
    span, n_rows, n_cols = grid["span"], grid["rows"], grid["cols"]
    heat = n_cols / (n_cols + 1.3)  # the heatmaps' share of the width; the bars get the rest
    # Titles above each block (in data units, so they stay with their block), and one over the bars.
    annotations = [
        {"text": span_block_title(name, o, a[o]), "x": (c - 1) * span + (T - 1) / 2, "y": (r - 1) * span - 1,
         "xref": "x", "yref": "y", "xanchor": "center", "yanchor": "bottom", "showarrow": False, "font": {"size": 13}}
        for name, o, (r, c) in zip(names, orders, grid["cells"])
    ]
    annotations.append({"text": "block norms", "x": heat + 0.04 + (1 - heat - 0.04) / 2, "y": 1.0, "xref": "paper",
                        "yref": "paper", "xanchor": "center", "yanchor": "bottom", "showarrow": False,
                        "font": {"size": 13}})
    # Norm bars as rectangles, not bar traces: a bar's height is trace data, and a change of trace data makes
    # plotly.js redraw the whole figure (~50 ms in JupyterLab); a shape is redrawn on its own.
    bar = {"type": "rect", "xref": "x2", "yref": "y2", "y0": 0.0, "line": {"width": 0}}
    shapes = [{**bar, "x0": i - BAR_WIDTH, "x1": float(i), "y1": float(r), "fillcolor": "lightgray",
               "name": "‖block‖/‖dS‖", "legendgroup": "unscaled", "showlegend": i == 0}
              for i, r in enumerate(rel)]
    shapes += [{**bar, "x0": float(i), "x1": i + BAR_WIDTH, "y1": span_block_bar_height(r, a[o]),
                "fillcolor": ORDER_COLORS[o],
                "name": "‖α·block‖/‖dS‖", "legendgroup": "scaled", "showlegend": i == 0}
               for i, (r, o) in enumerate(zip(rel, orders))]
    hidden = {"showticklabels": False, "showgrid": False, "zeroline": False, "ticks": ""}
    coloraxes = {order_coloraxis(o): {"colorscale": DIVERGING, "showscale": False, **span_block_color_range(zmax, a[o])}
                 for o in sorted(set(orders))}
    return {
        "title": {"text": title or "score-gradient blocks of one head (rows: order = number of ⊥ projections)",
                  # the notes on their own line: one line with all of them ran past a notebook's width
                  "subtitle": {"text": "faded: α = 0, the block is removed · colors clip at the 99th percentile of "
                                       f"|entries|{_cells_note(T, max_cells)}"}},
        "xaxis": {**hidden, "domain": [0.0, heat], "range": [-0.5, n_cols * span - span + T - 0.5]},
        "yaxis": {**hidden, "range": [n_rows * span - span + T - 0.5, -(span - T) - 0.5]},  # reversed: row 0 on top
        "xaxis2": {"domain": [heat + 0.04, 1.0], "anchor": "y2", "range": [-0.5 - BAR_WIDTH, len(names) - 0.5],
                   "tickvals": list(range(len(names))), "ticktext": names, "showgrid": False},
        "yaxis2": {"anchor": "x2", "range": [0.0, span_block_bars_top(rel, orders, a)]},
        "annotations": annotations,
        "shapes": shapes,
        "coloraxis": {"colorscale": DIVERGING, "cmin": -zmax, "cmax": zmax,
                      "colorbar": {"x": -0.08, "len": 0.8, "title": {"text": "α·entry"}}},
        **coloraxes,
        "showlegend": True,
        "height": 170 * n_rows + 100,
        "margin": {"l": 60, "r": 10, "t": 80, "b": 40},
        "legend": {"orientation": "h", "y": -0.08},
        "plot_bgcolor": "white",
    }


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
            ones saturate); a block whose α is 0 shows its unscaled pattern faded. None = all ones.
        title: figure title.
        max_cells: heatmap cells per side; a larger T shows means of f×f entries (:data:`SPAN_BLOCK_CELLS`).
    Returns:
        Figure with len(blocks) heatmaps (rows i = query, columns j = key), all on one pair of axes, block (r, c)
        of the grid offset by (c, r) times T plus a gap (see :func:`span_block_cells`) — a figure of one subplot
        redraws several times faster in the browser than one subplot per block —, each titled by an annotation
        "S2 (order 1) ×α", then one trace without points for the colour bar (units: α·entry). A heatmap holds the
        unscaled block (its hover says so) on its order's colour axis (:func:`order_coloraxis`), whose range
        ±zmax/|α| draws it in the colours of α·block (:func:`span_block_color_range`). The norms are rectangles
        on their own axes (``layout.shapes``): ‖block‖_F/‖dS‖_F (gray, ``shapes[i]``) and ‖α·block‖_F/‖dS‖_F
        (colored by order, ``shapes[n_blocks + i]``).
    Raises:
        ValueError: missing keys, non-2-D or mismatched blocks, order outside 0..3, alphas not of length 4.
    """
    cells = span_block_cells(blocks, max_cells)
    a = _check_alphas(alphas)
    return go.Figure(data=span_blocks_traces(cells, a), layout=span_blocks_layout(cells, a, title, max_cells))
