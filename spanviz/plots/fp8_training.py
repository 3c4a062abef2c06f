"""Notebook 03's training figure: per FP8 scaling strategy, overflows and underflows per step through an LR spike,
and how close the max logit came to each weight-derived bound.

Three rows sharing the step axis: E4M3 overflows per step (log y; a step without any is a gap), scores flushed to
zero or to a subnormal summed up to each step (log y: per step the strategies' counts overlap into one band, their
sums stay apart), and max |S| ÷ bound (1 = the bound is reached). The legend groups the
strategies by where their scale comes from — the weights (no reduction before the cast), past steps (delayed), or
the scores themselves (a reduction per tensor, row, block or tile before the cast) — each strategy one colour from
the Okabe–Ito palette and its own marker symbol (the second cue), the same in every row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from spanviz.plots.common import BLACK, GRAY, OKABE_ITO, History, Trace, as_array, keys_under, markers
from spanviz.plots.fp8 import BOUND_STYLES, LOG_AXIS, SPIKE_FILL, bound_color, coinciding

FAMILIES = {
    "scale from the weights: no reduction before the cast": ("deterministic", "theory", "agnostic", "calibrated"),
    "scale from past steps: no reduction": ("delayed",),
    "scale from the scores: a reduction per tensor / row / block before the cast": (
        "dynamic", "rowwise", "rowwise_pow2", "mx", "tile_1x128"),
}
"""The legend's groups: where a strategy's scale comes from, and so what must finish before the cast."""
STRATEGY_ORDER = tuple(s for names in FAMILIES.values() for s in names)
STYLE = {  # colour (Okabe–Ito), dash, marker symbol: every strategy its own symbol
    "deterministic": ("blue", "solid", "diamond"), "theory": ("reddish purple", "dot", "triangle-up"),
    "agnostic": ("bluish green", "dashdot", "x"), "calibrated": ("orange", "longdash", "star"),
    "delayed": ("vermillion", "solid", "circle"), "dynamic": ("sky blue", "dash", "square"),
    "rowwise": ("bluish green", "dash", "triangle-down"), "rowwise_pow2": ("blue", "dot", "cross"),
    "mx": ("black", "dashdot", "hexagon"), "tile_1x128": ("orange", "dot", "pentagon"),
}
"""Per strategy (colour, dash, symbol)."""
ROWS = ("E4M3 overflows per step (|S·s| > 464; a gap = none)",
        "scores flushed to zero or to a subnormal, summed so far", "max |S| ÷ bound (above 1: the bound was broken)")
BOUND_KEYS = {"worst case": "bound_worst_case", "rank-agnostic": "bound_agnostic", "rank-aware": "bound_rank_aware"}


def family(strategy: str) -> str:
    """The legend group title of a strategy (its :data:`FAMILIES` key; unknown names: the scores' group)."""
    return next((f for f, names in FAMILIES.items() if strategy in names), list(FAMILIES)[-1])


def strategy_line(strategy: str, n_points: int) -> dict[str, Any]:
    """Mode, line and marker of a strategy's curve (:data:`STYLE`)."""
    color, dash, symbol = STYLE.get(strategy, ("sky blue", "dash", "circle"))
    c = OKABE_ITO[color]
    return {**markers(n_points, size=7, symbol=symbol, color=c), "line": {"color": c, "dash": dash, "width": 2}}


def fp8_series(history: History, layer: int | None = None) -> dict[str, Any]:
    """The figure's data from an :class:`spanviz.fp8.FP8Probe` history (worst layer, or one).

    Args: history: with ``step`` and ``fp8/…`` keys; layer: ℓ, or None = over layers (max of observed and bounds,
        sum of counts, min of scales, max of errors).
    Returns: ``steps``, ``observed``, ``bounds`` {name: (N,)}, ``scales``, ``overflows``, ``underflow_zero``,
        ``underflow_subnormal``, ``error_softmax`` ({strategy: (N,)}, the last three only for strategies that
        recorded them) and ``cost`` ({strategy: {"scales", "reductions"}} per step, summed over layers).
    Raises: ValueError: no FP8 keys in the history.
    """
    layers = sorted({int(k.split("/")[1][1:]) for k in history if k.startswith("fp8/L") and k.count("/") >= 2})
    if not layers:
        raise ValueError(f"history has no fp8/L<layer>/... keys (FP8Probe); keys: {sorted(history)[:10]}")
    picked = layers if layer is None else [layer]
    rows = [i for i, v in enumerate(history[f"fp8/L{picked[0]}/max_abs_logit"]) if v is not None]

    def col(name: str, reduce: Callable = np.max) -> np.ndarray:
        m = np.array([[_num(history[f"fp8/L{ell}/{name}"][i]) for ell in picked] for i in rows], dtype=float)
        return reduce(m, axis=1) if len(rows) else np.zeros(0)

    found = set(keys_under(history, f"fp8/L{picked[0]}/overflow"))
    rank = {name: k for k, name in enumerate(STRATEGY_ORDER)}
    strategies = sorted(found, key=lambda s: (rank.get(s, len(rank)), s))
    has = {s: f"fp8/L{picked[0]}/underflow_zero/{s}" in history for s in strategies}
    cast = [s for s in strategies if has[s]]
    last = rows[-1] if rows else None
    return {
        "steps": np.array([history["step"][i] for i in rows], dtype=float),
        "observed": col("max_abs_logit"),
        "bounds": {label: col(key) for label, key in BOUND_KEYS.items()},
        "scales": {s: col(f"scale/{s}", np.min) for s in strategies if f"fp8/L{picked[0]}/scale/{s}" in history},
        "overflows": {s: col(f"overflow/{s}", np.sum) for s in strategies},
        "underflow_zero": {s: col(f"underflow_zero/{s}", np.sum) for s in cast},
        "underflow_subnormal": {s: col(f"underflow_subnormal/{s}", np.sum) for s in cast},
        "error_softmax": {s: col(f"error_softmax/{s}", np.max) for s in cast},
        "cost": {s: {c: int(sum(history[f"fp8/L{ell}/{c}/{s}"][last] for ell in picked))
                     for c in ("scales", "reductions")} for s in cast} if last is not None else {},
    }  # fmt: skip


def _num(v: Any) -> float:
    return np.nan if v is None else float(v)


def fp8_training_data(steps: Any, observed: Any, bounds: Mapping[str, Any], overflows: Mapping[str, Any],
                      underflow_zero: Mapping[str, Any] | None = None,
                      underflow_subnormal: Mapping[str, Any] | None = None, **_: Any) -> list[Trace]:
    """Traces of :func:`fp8_training_figure`, row by row: overflows per strategy (legend; 0 drawn as a gap), underflows
    per strategy (to zero + to subnormal, summed up to each step; no legend entry of their own), max |S| ÷ bound per
    distinct bound. Each trace's
    ``meta`` is ``{"row": "overflow" | "underflow" | "ratio", "name": strategy or bound}``.

    Raises: ValueError for a series whose length differs from ``steps``.
    """
    x = as_array(steps)

    def col(name: str, y: Any) -> np.ndarray:
        y = as_array(y).astype(float)
        if y.shape != x.shape:
            raise ValueError(f"{name} has shape {y.shape}, steps has {x.shape}")
        return y

    obs = col("observed", observed)
    traces: list[Trace] = []
    titled: set[str] = set()
    for s, y in overflows.items():
        fam = family(s)
        y = col(f"overflows[{s!r}]", y)
        traces.append({"type": "scatter", "x": x, "y": np.where(y > 0, y, np.nan), "name": s,  # none: a gap
                       **strategy_line(s, len(x)), "legendgroup": fam, "meta": {"row": "overflow", "name": s},
                       **({"legendgrouptitle": {"text": fam}} if fam not in titled else {}),
                       "hovertemplate": f"{s}: %{{y:,}} overflows at step %{{x}}<extra></extra>"})
        titled.add(fam)
    zero, sub = underflow_zero or {}, underflow_subnormal or {}
    for s in zero:
        y = np.nancumsum(col(f"underflow_zero[{s!r}]", zero[s]) + col(f"underflow_subnormal[{s!r}]", sub[s]))
        traces.append({"type": "scatter", "x": x, "y": np.where(y > 0, y, np.nan), "name": s,
                       **strategy_line(s, len(x)), "legendgroup": family(s), "showlegend": False,
                       "meta": {"row": "underflow", "name": s},
                       "hovertemplate": f"{s}: %{{y:,}} scores to zero or a subnormal up to step %{{x}}"
                                        "<extra></extra>"})
    curves = {name: col(f"bounds[{name!r}]", y) for name, y in bounds.items()}
    same = coinciding(curves)
    for i, (name, y) in enumerate(curves.items()):
        if name in same:  # drawn once, under the name of the curve it equals
            continue
        partners = [a for a, b in same.items() if b == name]
        label = name + (f" (= {', '.join(partners)} here)" if partners else "")
        style = BOUND_STYLES.get(name, {"dash": "dash"})
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(y > 0, obs / y, np.nan)
        traces.append({"type": "scatter", "x": x, "y": ratio, "name": f"÷ {label}", "mode": "lines",
                       "line": {"color": bound_color(name, i + 1), "dash": style["dash"], "width": 2.5},
                       "legendgroup": "bounds", "meta": {"row": "ratio", "name": name}, "customdata": obs,
                       **({"legendgrouptitle": {"text": "max |S| ÷ each bound (from the weights)"}} if not i else {}),
                       "hovertemplate": f"step %{{x}}: max |S| = %{{customdata:.3g}} = %{{y:.2f}} × the {label} "
                                        "bound<extra></extra>"})
    return traces


def fp8_training_figure(steps: Any, observed: Any, bounds: Mapping[str, Any], overflows: Mapping[str, Any],
                        underflow_zero: Mapping[str, Any] | None = None,
                        underflow_subnormal: Mapping[str, Any] | None = None, *, title: str | None = None,
                        spike: tuple[int, int, float] | None = None, max_step: int | None = None,
                        **_: Any) -> go.Figure:
    """The FP8 training figure (module docstring): overflows, underflows and max |S| ÷ bound over steps.

    Args:
        steps: (N,) optimizer steps. observed: (N,) max |S| (over layers). bounds: {name: (N,)} predicted max |S|.
        overflows, underflow_zero, underflow_subnormal: {strategy: (N,)} counts per step (summed over layers).
        spike: (first step, steps, factor) of an LR spike, a gray band in every row. max_step: the x range's end.
        Further keys of :func:`fp8_series` (scales, errors, cost) are accepted and not drawn.
    Returns: a 3-row figure (:data:`ROWS`).
    Raises: ValueError: a series whose length differs from ``steps``.
    """
    traces = fp8_training_data(steps, observed, bounds, overflows, underflow_zero, underflow_subnormal)
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.36, 0.32, 0.32],
                        subplot_titles=ROWS)
    for t in traces:
        fig.add_trace(t, row={"overflow": 1, "underflow": 2, "ratio": 3}[t["meta"]["row"]], col=1)
    fig.add_hline(y=1.0, line={"color": GRAY, "width": 1}, row=3, col=1)
    fig.update_yaxes(title_text="count", row=1, col=1, **LOG_AXIS)
    fig.update_yaxes(title_text="count", row=2, col=1, **LOG_AXIS)
    fig.update_yaxes(title_text="max |S| ÷ bound", row=3, col=1, **LOG_AXIS)
    fig.update_xaxes(showticklabels=True)
    fig.update_xaxes(title_text="step", row=3, col=1)
    if max_step is not None:
        fig.update_xaxes(range=[0, max_step])
    if spike is not None:
        start, length, factor = spike
        end = start + max(length, 1) - 1
        when = f"step {start}" if end == start else f"steps {start}–{end}"
        for row in (1, 2, 3):
            fig.add_vrect(x0=start - 0.5, x1=start + max(length, 1) - 0.5, fillcolor=SPIKE_FILL, opacity=0.25,
                          line={"color": BLACK, "width": 1, "dash": "dot"}, row=row, col=1,
                          exclude_empty_subplots=False, showlegend=row == 1, name=f"LR spike ×{factor:g}, {when}",
                          legendgroup="spike", legendrank=1)
    fig.update_layout(title=title or "FP8 scaling strategies through training", height=760,
                      margin={"l": 60, "r": 10, "t": 60, "b": 40}, legend={"groupclick": "toggleitem"})
    return fig
