"""The T = 3 toy of span / violation gradient scaling (arXiv 2512.13033): a 2-D span (plane) in token space R³,
a gradient column split into its in-span part and its violation, and their rescaled sum — in 3-D."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from spanviz.plots.common import ORDER_COLORS, Trace, as_array


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
    x = rng.normal(size=(3, 2)) if basis is None else as_array(basis)
    g = rng.normal(size=3) if grad is None else as_array(grad)
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
        height=440,
        # the scene's axis titles reach below its domain: a bottom margin keeps them off what follows the figure
        margin={"l": 0, "r": 0, "t": 40, "b": 50},
        uirevision="toy",
    )
    return fig
