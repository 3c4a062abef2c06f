"""Rank-aware FP8 logit bounds (arXiv 2602.18851): bounds vs rank, and the colours and styles every FP8 figure
shares (the training figure is :mod:`spanviz.plots.fp8_training`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go

from spanviz.plots.common import (
    BLACK,
    DASHES,
    GRAY,
    OKABE_ITO,
    SYMBOLS,
    Trace,
    as_array,
    cycle_color,
    rgba,
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
