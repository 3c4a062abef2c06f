"""Span / violation gradient scaling (arXiv 2512.13033): energy by order, principal angles between the spans of Q,
K and V, and the T = 3 toy (computed by :func:`spanviz.spans.demos.span_toy`). The score-gradient blocks are in
:mod:`spanviz.plots.span_blocks`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from spanviz.plots.common import (
    BLACK,
    GRAY,
    ORDER_COLORS,
    PATTERNS,
    History,
    Trace,
    as_array,
    cycle_color,
    keys_under,
    series,
)


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
                "fillpattern": {"shape": PATTERNS[i % len(PATTERNS)], "fgcolor": "#ffffff", "solidity": 0.3},
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
                       "marker": {"color": cycle_color(i), "pattern": {"shape": PATTERNS[i % len(PATTERNS)]}}})
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
def _arrow(vec: np.ndarray, name: str, color: str, dash: str = "solid", width: int = 6,
           symbol: str = "diamond") -> Trace:
    return {
        "type": "scatter3d",
        "x": [0.0, vec[0]],
        "y": [0.0, vec[1]],
        "z": [0.0, vec[2]],
        "mode": "lines+markers",
        "marker": {"size": [0, 6], "color": color, "symbol": symbol},
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
            "color": ORDER_COLORS[0],
            "opacity": 0.2,
            "name": "span(X)",
            "showlegend": True,
            "hoverinfo": "skip",
        }
    ]
    # colour and a second cue each (dash or tip symbol): told apart in grayscale and by colour-blind readers
    for c, symbol in enumerate(("circle", "square")):
        traces.append(_arrow(toy["basis"][:, c], f"x{c + 1} (column of X)", GRAY, width=3, symbol=symbol))
    traces.append(_arrow(g, "g (gradient)", BLACK))
    traces.append(_arrow(par, "g∥ = Π g (span)", ORDER_COLORS[0]))
    traces.append(_arrow(perp, "g⊥ = g − Π g (violation)", ORDER_COLORS[3], "longdash", symbol="x"))
    traces.append(_arrow(a_par * par + a_perp * perp, f"{a_par:g}·g∥ + {a_perp:g}·g⊥", ORDER_COLORS[1], "dash",
                         symbol="square"))
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
        # the camera a little farther than plotly's (1.25, 1.25, 1.25): the z axis title stays inside the figure
        scene={"aspectmode": "cube", "xaxis_title": "token 1", "yaxis_title": "token 2", "zaxis_title": "token 3",
               "camera": {"eye": {"x": 1.45, "y": 1.45, "z": 1.25}}},
        height=440,
        # the scene's axis titles reach below its domain: a bottom margin keeps them off what follows the figure
        margin={"l": 0, "r": 0, "t": 40, "b": 50},
        uirevision="toy",
    )
    return fig
