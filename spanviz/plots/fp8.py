"""Rank-aware FP8 logit bounds (arXiv 2602.18851): bounds vs observed max logit, scales and overflows over
training, bounds vs rank."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from spanviz.plots.common import (
    BLACK, DASHES, GRAY, OKABE_ITO, SYMBOLS, History, Trace, as_array, cycle_color, keys_under, markers, rgba,
)

# ------------------------------------------------------------------------------------------------- FP8
E4M3_MAX = 448.0

STRATEGY_COLORS = {s: OKABE_ITO[c] for s, c in (
    ("deterministic", "blue"), ("agnostic", "bluish green"), ("theory", "reddish purple"), ("delayed", "vermillion"),
    ("dynamic", "sky blue"), ("calibrated", "orange"))}
"""One colour per scaling strategy, in every FP8 figure (the bounds take their strategy's colour: worst case =
deterministic, rank-agnostic = agnostic, rank-aware = theory), from the Okabe–Ito palette (:mod:`.common`)."""
BOUND_STRATEGY = {"worst case": "deterministic", "rank-agnostic": "agnostic", "rank-aware": "theory"}
"""The strategy whose scale comes from each bound."""
STRATEGY_ORDER = ("delayed", "dynamic", "deterministic", "theory", "agnostic", "calibrated")
"""The order strategies are listed in (the baseline first): :func:`fp8_series` sorts by it."""
STRATEGY_DASHES = dict(zip(STRATEGY_ORDER, DASHES))
STRATEGY_SYMBOLS = dict(zip(STRATEGY_ORDER, SYMBOLS))
"""The second cue of a strategy's scale (dash) and overflow (dash and marker) curves, beside its colour."""
SPIKE_FILL = GRAY
"""The LR spike's band: a neutral gray with dotted black edges (a second cue: the pale rank-agnostic band is about
as light)."""
BOUND_STYLES = {
    "worst case": {"dash": "dash", "width": 2},
    "rank-agnostic": {"dash": "solid", "width": 8},  # a wide pale band: visible under a rank-aware line on top of it
    "rank-aware": {"dash": "dot", "width": 3},
}
LOG_AXIS = {"type": "log", "minorloglabels": "complete"}
"""A log axis whose labels between the decades are whole numbers (20, 50), not bare digits (2, 5)."""


def bound_color(name: str, i: int = 0) -> str:
    """The color of a bound (``"rank-aware"``, ``"worst case × 2^1"``, ...) or a strategy name; else the i-th color."""
    base = name.split(" × ")[0]
    return STRATEGY_COLORS.get(BOUND_STRATEGY.get(base, base), cycle_color(i))


def _strategy_dash(name: str, i: int) -> str:
    return STRATEGY_DASHES.get(name, DASHES[i % len(DASHES)])


def _bound_line(name: str, i: int) -> dict[str, Any]:
    style = BOUND_STYLES.get(name.split(" × ")[0], {"dash": "dash", "width": 2})
    color = bound_color(name, i + 1)
    if style["width"] > 4:
        color = rgba(color, 0.35)
    return {"color": color, **style}


def coinciding(curves: Mapping[str, Any], rtol: float = 1e-9) -> dict[str, str]:
    """``{name: the earlier curve it equals}`` for curves equal to an earlier one at every point (e.g. the
    rank-agnostic and rank-aware bounds when γ·r >= d caps both at the same value)."""
    out: dict[str, str] = {}
    items = [(name, as_array(y)) for name, y in curves.items()]
    for k, (name, y) in enumerate(items):
        for other, z in items[:k]:
            if y.size and y.shape == z.shape and np.allclose(y, z, rtol=rtol, atol=0.0, equal_nan=True):
                out[name] = other
                break
    return out


def _coincide_note(name: str, same: Mapping[str, str]) -> str:
    partners = [b for a, b in same.items() if a == name] + [a for a, b in same.items() if b == name]
    return f" (= {partners[0]} here)" if partners else ""


def fp8_panel_data(
    steps: Any,
    observed: Any,
    bounds: Mapping[str, Any],
    scales: Mapping[str, Any],
    overflows: Mapping[str, Any],
) -> list[Trace]:
    """Traces of :func:`fp8_panel_figure`: observed, bounds..., one "above" strip per bound, scales...,
    overflows... (in that order)."""
    x = as_array(steps)

    def col(name: str, y: Any) -> np.ndarray:
        y = as_array(y)
        if y.shape != x.shape:
            raise ValueError(f"{name} has shape {y.shape}, steps has {x.shape}")
        return y

    obs = col("observed", observed)
    traces: list[Trace] = [
        {"type": "scatter", "x": x, "y": obs, "name": "observed max |S|", "mode": "lines",
         "line": {"color": BLACK, "width": 2.5}, "legendgroup": "logits",
         "legendgrouptitle": {"text": "max logit"}}
    ]
    curves = {name: col(f"bounds[{name!r}]", y) for name, y in bounds.items()}
    same = coinciding(curves)
    for i, (name, y) in enumerate(curves.items()):
        traces.append({"type": "scatter", "x": x, "y": y, "name": f"bound: {name}{_coincide_note(name, same)}",
                       "mode": "lines", "line": _bound_line(name, i), "legendgroup": "logits"})
    for i, (name, y) in enumerate(curves.items()):
        over = obs > y
        traces.append({"type": "scatter", "x": x[over], "y": np.full(int(over.sum()), float(i)),
                       "name": f"above {name}: {int(over.sum())} of {len(x)} steps", "mode": "markers",
                       "marker": {"symbol": "line-ns", "size": 11, "color": bound_color(name, i + 1),
                                  "line": {"width": 2, "color": bound_color(name, i + 1)}},
                       "legendgroup": "above", "showlegend": False,
                       "hovertemplate": f"step %{{x}}: max |S| above the {name} bound<extra></extra>"})
    strategies = list(dict.fromkeys([*scales, *overflows]))
    # Each strategy its colour and its dash (and marker in the counts); a strategy whose curve equals an earlier one's
    # at every step is drawn thinner on top of it, and says so.
    scale_curves = {name: col(f"scales[{name!r}]", y) for name, y in scales.items()}
    same = coinciding(scale_curves)
    for k, (name, y) in enumerate(scale_curves.items()):
        i = strategies.index(name)
        traces.append({"type": "scatter", "x": x, "y": y, "name": f"scale: {name}{_coincide_note(name, same)}",
                       "mode": "lines", "line": {"color": bound_color(name, i + 5), "width": 2 if name in same else 4,
                                                 "dash": _strategy_dash(name, i)},
                       "legendgroup": "scales", **({"legendgrouptitle": {"text": "FP8 scale"}} if k == 0 else {})})
    counts = {name: col(f"overflows[{name!r}]", y) for name, y in overflows.items()}
    same = coinciding(counts)
    for k, (name, y) in enumerate(counts.items()):
        i = strategies.index(name)
        traces.append({"type": "scatter", "x": x, "y": y, "name": f"overflows: {name}{_coincide_note(name, same)}",
                       **markers(len(x), size=6, symbol=STRATEGY_SYMBOLS.get(name, SYMBOLS[i % len(SYMBOLS)])),
                       "line": {"color": bound_color(name, i + 5), "dash": _strategy_dash(name, i),
                                "width": 1 if name in same else 2},
                       "legendgroup": "overflows",
                       **({"legendgrouptitle": {"text": "E4M3 overflows"}} if k == 0 else {})})
    return traces


FP8_ROWS = ("max logit: observed vs bounds", "steps where the observed max |S| is above a bound",
            "FP8 scale per strategy", "E4M3 overflows per step")
"""The rows of :func:`fp8_panel_figure`, top to bottom."""


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
    """FP8 panel: logit bounds vs observed max logit, where a bound was exceeded, scales, and overflow counts per
    strategy over steps.

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
        Figure with 4 rows sharing x (tick labels on each, :data:`FP8_ROWS`): bounds + observed (log y; a bound
        equal to another at every step says so in its legend and is drawn as a wide pale band under it); a thin
        strip with one tick per step where the observed max exceeds each bound (so the curves stay readable);
        scales (log y); overflow counts. Colors per strategy (:data:`STRATEGY_COLORS`); legend grouped by row.
    Raises:
        ValueError: a series whose length differs from ``steps``.
    """
    traces = fp8_panel_data(steps, observed, bounds, scales, overflows)
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.06, row_heights=[0.38, 0.1, 0.28, 0.24],
                        subplot_titles=FP8_ROWS)
    n_b, n_s = 1 + len(bounds), len(scales)
    for i, trace in enumerate(traces):
        row = 1 if i < n_b else 2 if i < n_b + len(bounds) else 3 if i < n_b + len(bounds) + n_s else 4
        fig.add_trace(trace, row=row, col=1)
    names = list(bounds)
    fig.update_yaxes(title_text="|S|", row=1, col=1, **LOG_AXIS)
    fig.update_yaxes(tickvals=list(range(len(names))), ticktext=names, range=[-0.6, max(len(names), 1) - 0.4],
                     showgrid=False, zeroline=False, fixedrange=True, row=2, col=1)
    fig.update_yaxes(title_text="scale", row=3, col=1, **LOG_AXIS)
    fig.update_yaxes(title_text="count", rangemode="tozero", row=4, col=1)
    fig.update_xaxes(showticklabels=True)
    fig.update_xaxes(title_text="step", row=4, col=1)
    if max_step is not None:
        fig.update_xaxes(range=[0, max_step])
    if spike is not None:
        start, length, factor = spike
        end = start + max(length, 1) - 1
        when = f"step {start}" if end == start else f"steps {start}–{end}"
        # named in the legend (the band of the first row), not by a label inside the plot: there it sat on the
        # bound curves, which run along the top of the first row after the first steps
        for row in (1, 2, 3, 4):
            fig.add_vrect(x0=start - 0.5, x1=start + max(length, 1) - 0.5, fillcolor=SPIKE_FILL, opacity=0.25,
                          line={"color": BLACK, "width": 1, "dash": "dot"}, row=row, col=1,
                          exclude_empty_subplots=False, showlegend=row == 1,
                          name=f"LR spike ×{factor:g}, {when}",
                          legendgroup="spike", legendrank=1)
    fig.update_layout(title=title or "FP8 attention logits", height=820, margin={"l": 60, "r": 10, "t": 60, "b": 40},
                      legend={"groupclick": "toggleitem"})
    return fig


def bound_vs_rank_data(
    ranks: Any, bounds: Mapping[str, Any], observed: Any | None = None, r: int | None = None,
    reference: Any | None = None, gamma: Any | None = None,
) -> list[Trace]:
    """Traces of :func:`bound_vs_rank_figure`: bounds..., the √(r/d_head) reference (if given), observed (if
    given), current-r markers (if r)."""
    x = as_array(ranks)
    traces: list[Trace] = []
    curves = {name: as_array(y) for name, y in bounds.items()}
    for name, y in curves.items():
        if y.shape != x.shape:
            raise ValueError(f"bounds[{name!r}] has shape {y.shape}, ranks has {x.shape}")
    same = coinciding(curves)
    g = None if gamma is None else as_array(gamma)
    if g is not None and g.shape != x.shape:
        raise ValueError(f"gamma has shape {g.shape}, ranks has {x.shape}")
    for i, (name, y) in enumerate(curves.items()):
        trace: Trace = {"type": "scatter", "x": x, "y": y, "name": f"{name}{_coincide_note(name, same)}",
                        "mode": "lines+markers", "line": _bound_line(name, i), "marker": {"size": 5}}
        if g is not None and name.startswith("rank-aware"):
            trace.update(customdata=g, hovertemplate="r = %{x}: %{y:.3g} (γ = %{customdata:.3g})<extra></extra>")
        traces.append(trace)
    if reference is not None:
        y = as_array(reference)
        if y.shape != x.shape:
            raise ValueError(f"reference has shape {y.shape}, ranks has {x.shape}")
        traces.append({"type": "scatter", "x": x, "y": y, "name": "√(r/d_head) × rank-aware at r = d_head",
                       "mode": "lines", "line": {"color": GRAY, "dash": "dot", "width": 2}})
    if observed is not None:
        y = as_array(observed)
        if y.shape != x.shape:
            raise ValueError(f"observed has shape {y.shape}, ranks has {x.shape}")
        traces.append({"type": "scatter", "x": x, "y": y, "name": "observed max |S|", "mode": "markers",
                       "marker": {"color": BLACK, "size": 8, "symbol": "x"}})
        curves["observed max |S|"] = y
    if r is not None:
        idx = np.flatnonzero(x == r)
        if idx.size == 0:
            raise ValueError(f"r={r} is not one of the ranks {x.tolist()}")
        at = [float(as_array(y)[idx[0]]) for y in curves.values()]
        traces.append({"type": "scatter", "x": [r] * len(at), "y": at, "name": f"r = {r}", "mode": "markers",
                       "marker": {"color": "rgba(0,0,0,0)", "size": 16, "line": {"color": BLACK, "width": 2}}})
    return traces


def bound_vs_rank_figure(
    ranks: Any,
    bounds: Mapping[str, Any],
    observed: Any | None = None,
    r: int | None = None,
    title: str | None = None,
    log_y: bool = True,
    reference: Any | None = None,
    gamma: Any | None = None,
    subtitle: str | None = None,
) -> go.Figure:
    """Logit bounds as a function of the rank r of W^Q W^Kᵀ.

    Args:
        ranks: (R,) ranks r.
        bounds: ``{name: (R,)}`` predicted max |S| per rank (e.g. worst case, rank-agnostic, rank-aware).
        observed: (R,) observed max |S| per rank (e.g. on random inputs), optional.
        r: highlight this rank (must be one of ``ranks``).
        reference: (R,) a reference curve, drawn dotted gray: √(r/d_head) times the rank-aware bound at r = d_head
            (what the bound would be if it shrank like √r).
        gamma: (R,) γ(r) of the rank-aware bound, shown on hover.
        subtitle: a second, smaller title line (a figure beside other output is narrow: a long title would run
            under plotly's toolbar or past the figure's edge).
    Returns:
        Figure with one line per bound (colored by strategy; a bound equal to an earlier one at every rank says so
        in its legend), the reference, the observed markers, and a ring marker per curve at r.
    Raises:
        ValueError: mismatched lengths or r not in ranks.
    """
    fig = go.Figure(data=bound_vs_rank_data(ranks, bounds, observed, r, reference, gamma))
    fig.update_layout(
        title={"text": title or "max-logit bound vs rank r", **({"subtitle": {"text": subtitle}} if subtitle else {})},
        xaxis_title="rank r of W^Q W^Kᵀ",
        yaxis={"title": "max |S|", **(LOG_AXIS if log_y else {"type": "linear"})},
        height=380 if subtitle else 360,
        margin={"l": 60, "r": 10, "t": 70 if subtitle else 40, "b": 40},
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

    found = keys_under(history, f"fp8/L{picked[0]}/scale")
    rank = {name: k for k, name in enumerate(STRATEGY_ORDER)}
    strategies = sorted(found, key=lambda s: (rank.get(s, len(rank)), s))
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
