"""LS-attention (arXiv 2505.15548): per-head masks, attention per head, max logit per layer."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from spanviz.plots.common import (
    DASHES,
    SYMBOLS,
    History,
    Trace,
    as_array,
    block_mean,
    cycle_color,
    layer_series,
    markers,
)


# -------------------------------------------------------------------------------------- local/global heads
def mask_gap(n_cells: int) -> int:
    """Empty columns between two heads' masks in one row of :func:`head_masks_figure` (n_cells per head)."""
    return max(1, round(n_cells / 16))


def head_mask_columns(n_heads: int, n_cells: int) -> list[slice]:
    """Where each head's mask sits in a row of :func:`head_masks_data`: columns ``[h (n + gap), h (n + gap) + n)``
    of the row's z, for n = ``n_cells`` and gap = :func:`mask_gap` (n)."""
    step = n_cells + mask_gap(n_cells)
    return [slice(h * step, h * step + n_cells) for h in range(n_heads)]


_PLURAL = {"key": "keys", "query": "queries"}


def _mask_row(m: np.ndarray, pos: np.ndarray, f: int, T: int) -> Trace:
    """One heatmap of H masks (H, n, n) side by side, NaN columns between them (drawn as gaps, no hover); its
    categories name each column's head and key, and each row's query (a block of f positions when f > 1)."""
    H, n = m.shape[0], m.shape[1]
    gap = mask_gap(n)
    z = np.full((n, H * (n + gap) - gap), np.nan, dtype=np.float32)
    for h, cols in enumerate(head_mask_columns(H, n)):
        z[:, cols] = m[h]

    def name(kind: str, p: int) -> str:  # "key 5", or "keys 4–7" for a block of f positions
        return f"{kind} {p}" if f == 1 else f"{_PLURAL[kind]} {p}–{min(p + f, T) - 1}"

    x = []
    for h in range(H):
        x += [f"head {h}, {name('key', int(p))}" for p in pos]
        x += [" " * (h * gap + g + 1) for g in range(gap)] if h < H - 1 else []  # distinct blank categories
    return {"type": "heatmap", "z": z, "x": x, "y": [name("query", int(p)) for p in pos], "coloraxis": "coloraxis",
            "hoverongaps": False, "hovertemplate": "%{x}, %{y}: %{z:.2f}<extra></extra>"}


def head_masks_data(masks: Any, zoom: int | None = None, max_cells: int = 128) -> list[Trace]:
    """Traces of :func:`head_masks_figure`: the whole masks of all heads side by side in one heatmap (block means
    when T > ``max_cells``), then, with ``zoom``, their first ``zoom`` × ``zoom`` positions cell by cell in another.

    Each row is one heatmap of shape (n, H·n + (H − 1)·gap) — head h in the columns :func:`head_mask_columns`
    gives, NaN between heads — rather than one heatmap per head: plotly.js redraws two traces on two pairs of axes
    in about half the time of 2·H traces on 2·H pairs (a slider moved in the page waits for that redraw).

    Raises:
        ValueError: masks not (H, T, T).
    """
    m = as_array(masks, dtype=np.float32)
    if m.ndim != 3 or m.shape[1] != m.shape[2]:
        raise ValueError(f"masks must have shape (H, T, T), got {m.shape}")
    means = [block_mean(m[h], max_cells) for h in range(m.shape[0])]
    pos = means[0][1]
    f = int(pos[1] - pos[0]) if len(pos) > 1 else 1
    traces = [{**_mask_row(np.stack([z for z, _ in means]), pos, f, m.shape[1]), "name": "whole masks"}]
    if zoom:
        n = min(int(zoom), m.shape[1])
        traces.append({**_mask_row(m[:, :n, :n], np.arange(n), 1, n), "name": f"positions 0–{n - 1}",
                       "xgap": 1, "ygap": 1})
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
        Figure with one heatmap per row (:func:`head_masks_data`: rows = query i, columns = key j of each head;
        1 = allowed, 0 = masked) on its own pair of axes (x, y; with zoom x2, y2), square cells; the annotations
        are the H ``labels`` over the whole masks, then (with zoom) H "positions 0–n" over the zoomed ones.
    Raises:
        ValueError: masks not (H, T, T), or len(labels) != H.
    """
    m = as_array(masks, dtype=np.float32)
    traces = head_masks_data(m, zoom, max_cells)
    H = m.shape[0]
    labels = [f"head {h}" for h in range(H)] if labels is None else list(labels)
    if len(labels) != H:
        raise ValueError(f"labels must have H={H} entries, got {len(labels)}")
    rows = len(traces)
    domains = [(0.55, 1.0), (0.0, 0.45)] if rows == 2 else [(0.0, 1.0)]
    fig = go.Figure()
    annotations = []
    for r, (trace, (y0, y1)) in enumerate(zip(traces, domains)):
        ax = "" if r == 0 else str(r + 1)
        fig.add_trace({**trace, "xaxis": f"x{ax}", "yaxis": f"y{ax}"})
        fig.update_layout({
            f"xaxis{ax}": {"domain": [0, 1], "anchor": f"y{ax}", "showticklabels": False, "showgrid": False,
                           "zeroline": False, "constrain": "domain"},
            f"yaxis{ax}": {"domain": [y0, y1], "anchor": f"x{ax}", "showticklabels": False, "showgrid": False,
                           "zeroline": False, "autorange": "reversed", "scaleanchor": f"x{ax}",
                           "constrain": "domain"},
        })
        n = len(trace["y"])
        texts = labels if r == 0 else [trace["name"]] * H
        # over each head's columns (category serial numbers), just above the row's domain
        annotations += [{"text": t, "xref": f"x{ax}", "x": (cols.start + cols.stop - 1) / 2, "yref": "paper", "y": y1,
                         "yanchor": "bottom", "showarrow": False, "font": {"size": 16}}
                        for t, cols in zip(texts, head_mask_columns(H, n))]
    fig.update_layout(
        title=title or f"attention masks per head (T = {m.shape[1]}; rows: query i, columns: key j)",
        coloraxis={"colorscale": [[0, "#f4f4f4"], [1, "#1f77b4"]], "cmin": 0, "cmax": 1, "showscale": False},
        annotations=annotations,
        plot_bgcolor="white",  # the columns between heads: blank, as the paper between subplots
        height=260 * rows + 60,
        margin={"l": 20, "r": 10, "t": 70, "b": 20},
    )
    return fig


LABELLED_POSITIONS = 32
"""Most positions whose tokens :func:`attention_heads_figure` writes on its axes (more are too small to read: then
hover names them)."""


def attention_heads_data(values: Any, tokens: Sequence[str] | None = None, first: int = 0) -> list[Trace]:
    """Traces of :func:`attention_heads_figure`: one heatmap per head, its rows and columns named "i: token"."""
    v = as_array(values)
    if v.ndim != 3 or v.shape[1] != v.shape[2]:
        raise ValueError(f"values must have shape (H, n, n), got {v.shape}")
    n = v.shape[1]
    if tokens is not None and len(tokens) != n:
        raise ValueError(f"tokens must have n={n} entries (one per position shown), got {len(tokens)}")
    if isinstance(first, bool) or not isinstance(first, int) or first < 0:
        raise ValueError(f"first must be a position >= 0 (an int), got {first!r}")
    traces = []
    for h in range(v.shape[0]):
        trace: Trace = {"type": "heatmap", "z": v[h], "coloraxis": "coloraxis", "name": f"head {h}"}
        if tokens is not None:
            trace["x"] = trace["y"] = [f"{first + i}: {t}" for i, t in enumerate(tokens)]
            trace["hovertemplate"] = "query %{y}<br>key %{x}<br>%{z:.3f}<extra>" + f"head {h}</extra>"
        traces.append(trace)
    return traces


def attention_heads_figure(
    values: Any, tokens: Sequence[str] | None = None, n_cols: int = 2, title: str | None = None,
    colorbar_title: str = "", first: int = 0,
) -> go.Figure:
    """Attention logits or patterns of every head, large enough to read, the tokens on the axes.

    Args:
        values: (H, n, n) per head (rows: query i, columns: key j) for n positions from ``first`` on, e.g. a window
            of S = QKᵀ/√d_head or of P = softmax(S + M); NaN is drawn blank (e.g. the masked upper triangle of S).
        tokens: the n tokens of those positions, or None for positions only. Up to :data:`LABELLED_POSITIONS` of
            them are written on the axes ("i: token"), more only in the hover.
        n_cols: heads per row.
        title: the figure's title (default "attention per head"); a subtitle under it says how to read the grid.
        first: the position of the first row and column (the labels count from it).
    Returns:
        Figure with H heatmaps sharing one color scale (shown).
    Raises:
        ValueError: values not (H, n, n), len(tokens) != n, or first not an int >= 0.
    """
    traces = attention_heads_data(values, tokens, first)
    H, n = len(traces), as_array(values).shape[1]
    labelled = tokens is not None and n <= LABELLED_POSITIONS
    cols = max(1, min(n_cols, H))
    rows = math.ceil(H / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"head {h}" for h in range(H)],
                        horizontal_spacing=0.14 if labelled else 0.06, vertical_spacing=0.2 if labelled else 0.08)
    tick = {"showticklabels": labelled, "tickfont": {"size": 10}, "dtick": 1} if labelled else {"showticklabels": False}
    for h, trace in enumerate(traces):
        r, c = h // cols + 1, h % cols + 1
        fig.add_trace(trace, row=r, col=c)
        fig.update_yaxes(autorange="reversed", row=r, col=c, **tick)
        fig.update_xaxes(tickangle=-90, row=r, col=c, **tick)
    how = "rows: query i, columns: key j" + ("" if labelled else "; hover for the tokens")
    fig.update_layout(
        title={"text": title or "attention per head", "subtitle": {"text": how}},
        coloraxis={"colorscale": "Viridis", "colorbar": {"title": {"text": colorbar_title}}},
        height=(520 if labelled else 380) * rows + 70,
        margin={"l": 20, "r": 10, "t": 80, "b": 20},
    )
    return fig


def max_logit_data(runs: Mapping[str, History], key: str = "logits/max_per_layer") -> list[Trace]:
    """Traces of :func:`max_logit_figure`: for each run (color and marker symbol) one line per layer (dash)."""
    traces = []
    for r, (name, history) in enumerate(runs.items()):
        steps, values = layer_series(history, key)
        for layer in range(values.shape[1]):
            traces.append(
                {
                    "type": "scatter",
                    "x": steps,
                    "y": values[:, layer],
                    **markers(len(steps), size=6, symbol=SYMBOLS[r % len(SYMBOLS)]),
                    "line": {"color": cycle_color(r), "dash": DASHES[layer % len(DASHES)]},
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


# ------------------------------------------------------------------------------------ why logits grow (02)
def logit_gap_figure(positions: Any, gaps: Mapping[str, Any], p: int) -> go.Figure:
    """The logit gap a head needs to put all but ε of its attention on the last ``p`` keys, against the query
    position (notebook 02; the gaps from :func:`spanviz.local_global.required_logit_gap`).

    Args:
        positions: the query positions i, shape (n,).
        gaps: legend name → the gap at each position (logit units), shape (n,); one line each (colour and dash).
        p: the band width the gaps are for (the title says it).
    Returns:
        Figure with one line per entry of ``gaps``.
    Raises:
        ValueError: a gap whose length is not that of ``positions``.
    """
    x = as_array(positions)
    fig = go.Figure()
    for k, (name, gap) in enumerate(gaps.items()):
        y = as_array(gap)
        if y.shape != x.shape:
            raise ValueError(f"gaps[{name!r}] has shape {y.shape}, positions {x.shape}: one gap per position")
        fig.add_scatter(x=x, y=y, mode="lines", name=name,
                        line={"color": cycle_color(k), "dash": DASHES[k % len(DASHES)], "width": 2.5})
    fig.update_layout(title=f"logit gap needed to focus on the last p={p} keys", xaxis_title="query position i",
                      yaxis_title="gap (logit units)", height=320)
    return fig


def toy_band_figure(fits: Mapping[str, Mapping[str, Any]], n: int, r: int, p: int) -> go.Figure:
    """The largest |logit| while a global and a local head are fitted to a local band (notebook 02's toy; the fits
    from :func:`spanviz.local_global.toy_band_fit`).

    Args:
        fits: head name → ``{"step": (m,), "max_logit": (m,), "final_kl": float}``; one line each (colour, dash).
        n, r, p: the toy's sequence length, rank and band width (the title says them).
    Returns:
        Figure with one line per head, its final KL in the legend.
    Raises:
        KeyError: a fit without ``step``, ``max_logit`` or ``final_kl``.
    """
    fig = go.Figure()
    for k, (head, fit) in enumerate(fits.items()):
        fig.add_scatter(x=as_array(fit["step"]), y=as_array(fit["max_logit"]), mode="lines",
                        name=f"{head} head (final KL {fit['final_kl']:.3f})",
                        line={"color": cycle_color(k), "dash": DASHES[k % len(DASHES)], "width": 2.5})
    fig.update_layout(title=f"max |logit| while fitting a local band (n={n}, r={r}, p={p})", xaxis_title="Adam step",
                      yaxis_title="max |QKᵀ/√r|", height=320)
    return fig
