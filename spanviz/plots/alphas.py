"""What α does to training (notebook 01): the change of best validation loss against standard as one order's α moves
(:func:`alpha_response_figure`), beside the share of ‖dS‖² each order carries.

Input: **rows** as :func:`spanviz.experiments.alphas.summarize_alphas` gives them — one per variant with ``variant``,
``order`` (None for "standard" and the paper's "[1000]"), ``alpha``, ``mean``, ``rel_change_pct``,
``rel_ci_low_pct``, ``rel_ci_high_pct`` (the paired change against standard and its 95 % CI, in %) and
``verdict``; **shares** ``{order: share of ‖dS‖² in [0, 1]}``.

Colours: Okabe–Ito (Okabe & Ito 2008), one per order, each order also with its own dash and marker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from spanviz.plots.common import Trace

ORDER_STYLES = (("#0072B2", "solid", "circle"), ("#E69F00", "dash", "square"), ("#009E73", "dot", "diamond"),
                ("#D55E00", "dashdot", "triangle-up"))  # fmt: skip
"""Order o → (Okabe–Ito colour, dash, marker)."""
REFERENCE_STYLES = {"[1000]": ("star", "#000000", "the paper's setting (α1 = α2 = α3 = 0 at once)"),
                    "[0000]": ("hexagram", "#CC79A7", "no score gradient at all (every α = 0)")}
"""The whole-setting points drawn at α = 0: (marker, colour, what it is)."""


def alpha_response_data(rows: Sequence[Mapping[str, Any]], shares: Mapping[int, float]) -> list[Trace]:
    """Traces of :func:`alpha_response_figure`: per order its curve through (α, change %) with CI error bars, the
    point (1, 0) of standard included; the whole settings [1000] (the paper's) and [0000] (no score gradient) as their
    own markers at α = 0; the share bars (axes 2).

    Raises: ValueError for a row without ``variant``, ``order``, ``alpha`` or ``rel_change_pct``.
    """
    for i, row in enumerate(rows):
        missing = [k for k in ("variant", "order", "alpha", "rel_change_pct") if k not in row]
        if missing:
            raise ValueError(f"rows[{i}] has no {missing[0]!r}; keys: {sorted(row)}")
    traces: list[Trace] = []
    orders = sorted({r["order"] for r in rows if r["order"] is not None})
    for order in orders:
        color, dash, symbol = ORDER_STYLES[order % len(ORDER_STYLES)]
        points = sorted([r for r in rows if r["order"] == order and r["rel_change_pct"] is not None],
                        key=lambda r: r["alpha"])  # fmt: skip
        x = [1.0] + [r["alpha"] for r in points]
        y = [0.0] + [r["rel_change_pct"] for r in points]
        hi = [0.0] + [r["rel_ci_high_pct"] - r["rel_change_pct"] for r in points]
        lo = [0.0] + [r["rel_change_pct"] - r["rel_ci_low_pct"] for r in points]
        text = ["standard (α = 1): the reference"] + [
            f"α{order} = {r['alpha']:g}: {r['rel_change_pct']:+.2f} % (95 % CI {r['rel_ci_low_pct']:+.2f} … "
            f"{r['rel_ci_high_pct']:+.2f} %), {r['verdict']}" for r in points]
        order_idx = np.argsort(x)
        traces.append({"type": "scatter", "x": np.asarray(x)[order_idx], "y": np.asarray(y)[order_idx],
                       "error_y": {"type": "data", "symmetric": False, "array": np.asarray(hi)[order_idx],
                                   "arrayminus": np.asarray(lo)[order_idx], "color": color, "thickness": 1.5},
                       "mode": "lines+markers", "name": f"order {order}: α{order} moves, the others stay 1",
                       "line": {"color": color, "dash": dash, "width": 2.5},
                       "marker": {"symbol": symbol, "size": 10, "color": color},
                       "text": list(np.asarray(text)[order_idx]), "hovertemplate": "%{text}<extra></extra>",
                       "xaxis": "x", "yaxis": "y", "legendgroup": f"order{order}"})
    references = [r for r in rows if r["order"] is None and r["alpha"] is None and r["rel_change_pct"] is not None]
    for r in references:
        symbol, color, what = REFERENCE_STYLES.get(r["variant"], ("star", "#000000", "a reference"))
        up, down = r["rel_ci_high_pct"] - r["rel_change_pct"], r["rel_change_pct"] - r["rel_ci_low_pct"]
        traces.append({"type": "scatter", "x": [0.0], "y": [r["rel_change_pct"]], "mode": "markers",
                       "error_y": {"type": "data", "symmetric": False, "array": [up], "arrayminus": [down],
                                   "color": color},
                       "marker": {"symbol": symbol, "size": 15, "color": color}, "name": f"{r['variant']}: {what}",
                       "hovertemplate": f"{r['variant']}: {r['rel_change_pct']:+.2f} %, {r['verdict']}<extra></extra>",
                       "xaxis": "x", "yaxis": "y"})
    if shares:
        keys = sorted(shares)
        traces.append({"type": "bar", "x": [f"order {o}" for o in keys], "y": [100.0 * shares[o] for o in keys],
                       "marker": {"color": [ORDER_STYLES[o % len(ORDER_STYLES)][0] for o in keys],
                                  "pattern": {"shape": ["", "/", ".", "x"][: len(keys)]}},
                       "text": [f"{100.0 * shares[o]:.3g} %" for o in keys], "textposition": "outside",
                       "showlegend": False, "xaxis": "x2", "yaxis": "y2",
                       "hovertemplate": "%{x}: %{y:.3g} % of ‖dS‖²<extra></extra>"})
    return traces


def alpha_response_figure(rows: Sequence[Mapping[str, Any]], shares: Mapping[int, float], *,
                          title: str | None = None) -> go.Figure:
    """Left: change of best validation loss against standard (%, paired by seed, 95 % CI bars) as α_o goes from 1 to
    each value tried, one curve per order (the others at 1), the paper's [1000] and [0000] (no score gradient: the
    largest effect α can have); a dotted zero line. Right: each
    order's share of ‖dS‖² at α = 1.

    Args: rows, shares (module docstring); title (default a plain one). Returns: the figure (height 420 px).
    Raises: ValueError as :func:`alpha_response_data`.
    Source: spanviz's α-response sweep (:mod:`spanviz.experiments.alphas`) around arXiv 2512.13033.
    """
    fig = make_subplots(rows=1, cols=2, column_widths=[0.68, 0.32], horizontal_spacing=0.1,
                        subplot_titles=("change of best validation loss vs standard", "share of ‖dS‖² per order"))
    for trace in alpha_response_data(rows, shares):
        fig.add_trace(go.Bar(**trace) if trace["type"] == "bar" else go.Scatter(**trace))
    fig.add_hline(y=0, line={"color": "#555555", "dash": "dot", "width": 1}, row=1, col=1)
    fig.update_xaxes(title_text="α of one order (the others at 1)", tickvals=[0, 0.5, 1, 1.5, 2], row=1, col=1)
    fig.update_yaxes(title_text="change (%) — above 0: worse", row=1, col=1)
    fig.update_yaxes(title_text="% of ‖dS‖² (α = 1)", rangemode="tozero", row=1, col=2)
    fig.update_layout(height=420, margin={"t": 70}, legend={"orientation": "h", "y": -0.22},
                      title={"text": title or "what α does to training: remove (α 0) or double (α 2) one block"})
    return fig
