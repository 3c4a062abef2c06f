"""Rank-aware FP8 logit bounds (arXiv 2602.18851): bounds vs observed max logit, scales and overflows over
training, bounds vs rank."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from spanviz.plots.common import History, Trace, _array, _color, keys_under

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


def fp8_series(history: History, layer: int | None = None) -> dict[str, Any]:
    """Arguments of :func:`fp8_panel_figure` from an ``FP8Probe`` history.

    Args:
        history: with ``step`` and the ``fp8/…`` keys of :class:`spanviz.fp8.FP8Probe`.
        layer: one layer ℓ (keys ``fp8/L{ℓ}/…``); None = the worst layer (max over layers of observed max,
            bounds and overflows; min of scales).
    Returns:
        dict with ``steps``, ``observed``, ``bounds``, ``scales``, ``overflows`` (arrays over probed steps).
    Raises:
        ValueError: no FP8 keys in the history.
    """
    layers = sorted({int(k.split("/")[1][1:]) for k in history if k.startswith("fp8/L") and k.count("/") >= 2})
    if not layers:
        raise ValueError(f"history has no fp8/L<layer>/... keys (FP8Probe); keys: {sorted(history)[:10]}")
    picked = layers if layer is None else [layer]
    rows = [i for i, v in enumerate(history[f"fp8/L{picked[0]}/max_abs_logit"]) if v is not None]

    def col(name: str, reduce: Callable = np.max) -> np.ndarray:
        m = np.array([[history[f"fp8/L{ell}/{name}"][i] for ell in picked] for i in rows], dtype=float)
        return reduce(m, axis=1) if len(rows) else np.zeros(0)

    strategies = keys_under(history, f"fp8/L{picked[0]}/scale")
    bound_names = {
        "worst case": "bound_worst_case", "rank-agnostic": "bound_agnostic", "rank-aware": "bound_rank_aware"
    }
    return {
        "steps": np.array([history["step"][i] for i in rows], dtype=float),
        "observed": col("max_abs_logit"),
        "bounds": {label: col(key) for label, key in bound_names.items()},
        "scales": {s: col(f"scale/{s}", np.min) for s in strategies},
        "overflows": {s: col(f"overflow/{s}", np.sum) for s in strategies},
    }
