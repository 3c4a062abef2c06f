"""The logit-growth lab's figures (notebook 02): peak max logit and final loss against the learning rate, one curve per
variant with its seed band (:func:`lr_sweep_figure`), and the max logit over training at one learning rate
(:func:`growth_curves_figure`).

Input: the lab's **runs**, a list of dicts with ``variant``, ``lr``, ``seed``, ``status`` ("finished" or
"diverged"), ``final_val_loss``, ``peak_max_logit`` and the curves ``probe_step`` / ``max_logit`` (as
:func:`spanviz.experiments.growth.run_summary` gives them). A run that diverged has no final loss: it is drawn as
an ✕ at the top of the loss axis.

Colours: the Okabe–Ito palette (Okabe & Ito 2008, "Color Universal Design"), which stays distinct for the common
colour-vision deficiencies, and each variant also has its own dash and marker, so the curves read in grayscale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from spanviz.plots.common import Trace, rgba

STYLES: dict[str, tuple[str, str, str]] = {
    "mhsa": ("#000000", "solid", "circle"),
    "ls": ("#E69F00", "dash", "square"),
    "layers": ("#56B4E9", "dot", "diamond"),
    "qk_norm": ("#009E73", "solid", "triangle-up"),
    "softcap": ("#CC79A7", "dashdot", "cross"),
    "qk_clip": ("#0072B2", "longdash", "star"),
}
"""Variant → (Okabe–Ito colour, dash, marker symbol). Unknown variants cycle through the same styles."""
METRIC_TITLES = {"peak_max_logit": "peak max logit |q·k|/√d_head", "final_val_loss": "final validation loss (nats)"}


def style(variant: str, i: int = 0) -> tuple[str, str, str]:
    """The (colour, dash, marker) of a variant (the i-th style for a name not in :data:`STYLES`)."""
    return STYLES.get(variant, list(STYLES.values())[i % len(STYLES)])


def cells(runs: Sequence[Mapping[str, Any]], metric: str) -> dict[str, dict[str, np.ndarray]]:
    """Per variant: ``lr`` (sorted), ``mean``, ``low``, ``high`` of ``metric`` over the finished seeds, ``n`` and
    ``n_diverged`` per learning rate (arrays of one length; NaN where no seed finished).

    Raises:
        ValueError: a run without ``variant``, ``lr``, ``status`` or ``metric``.
    """
    grouped: dict[str, dict[float, list[Mapping[str, Any]]]] = {}
    for i, run in enumerate(runs):
        missing = [k for k in ("variant", "lr", "status", metric) if k not in run]
        if missing:
            raise ValueError(f"runs[{i}] has no {missing[0]!r}; keys: {sorted(run)}")
        grouped.setdefault(run["variant"], {}).setdefault(float(run["lr"]), []).append(run)
    out = {}
    order = list(STYLES)  # the known variants in their order (the legend's), others after them as they came
    for variant, by_lr in sorted(grouped.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)):
        lrs = sorted(by_lr)
        values = [[r[metric] for r in by_lr[lr] if r["status"] == "finished" and r[metric] is not None] for lr in lrs]
        out[variant] = {
            "lr": np.array(lrs),
            "mean": np.array([np.mean(v) if v else np.nan for v in values]),
            "low": np.array([np.min(v) if v else np.nan for v in values]),
            "high": np.array([np.max(v) if v else np.nan for v in values]),
            "n": np.array([len(v) for v in values]),
            "n_diverged": np.array([sum(r["status"] == "diverged" for r in by_lr[lr]) for lr in lrs]),
        }
    return out


def lr_sweep_data(runs: Sequence[Mapping[str, Any]], labels: Mapping[str, str] | None = None) -> list[Trace]:
    """The traces of :func:`lr_sweep_figure`: per metric (peak max logit on axes 1, final loss on axes 2) and
    variant a seed band (min … max over seeds, a filled polygon, no legend) and the mean with markers; an ✕ trace
    per variant for learning rates where a seed diverged (on the loss axes, at the top)."""
    labels = labels or {}
    traces: list[Trace] = []
    loss = cells(runs, "final_val_loss")
    top = np.nanmax([np.nanmax(c["high"]) for c in loss.values() if np.isfinite(c["high"]).any()] or [1.0])
    for axis, metric in ((1, "peak_max_logit"), (2, "final_val_loss")):
        xy = {"xaxis": "x", "yaxis": "y"} if axis == 1 else {"xaxis": "x2", "yaxis": "y2"}
        for i, (variant, c) in enumerate(cells(runs, metric).items()):
            color, dash, symbol = style(variant, i)
            name = labels.get(variant, variant)
            ok = np.isfinite(c["mean"])
            x, lo, hi = c["lr"][ok], c["low"][ok], c["high"][ok]
            traces.append({"type": "scatter", "x": np.concatenate([x, x[::-1]]), "y": np.concatenate([hi, lo[::-1]]),
                           "fill": "toself", "fillcolor": rgba(color, 0.18), "line": {"width": 0}, "mode": "lines",
                           "hoverinfo": "skip", "showlegend": False, "legendgroup": variant, **xy})
            text = [f"{name}<br>lr {lr:g}: mean {m:.4g} (seeds {lo_:.4g} … {hi_:.4g}, n {n})"
                    + (f"; {d} diverged" if d else "") for lr, m, lo_, hi_, n, d in
                    zip(x, c["mean"][ok], lo, hi, c["n"][ok], c["n_diverged"][ok])]  # fmt: skip
            traces.append({"type": "scatter", "x": x, "y": c["mean"][ok], "name": name, "mode": "lines+markers",
                           "line": {"color": color, "dash": dash, "width": 2.5},
                           "marker": {"symbol": symbol, "size": 9, "color": color}, "legendgroup": variant,
                           "legendrank": 1000 + i, "showlegend": axis == 1, "text": text,
                           "hovertemplate": "%{text}<extra></extra>", **xy})
            if axis == 2 and c["n_diverged"].any():
                bad = c["n_diverged"] > 0
                traces.append({"type": "scatter", "x": c["lr"][bad], "y": np.full(int(bad.sum()), top * 1.02),
                               "mode": "markers", "marker": {"symbol": "x", "size": 12, "color": color},
                               "name": f"{name}: diverged", "legendgroup": variant, "showlegend": False,
                               "hovertemplate": f"{name}: diverged at lr %{{x:g}}<extra></extra>", **xy})
    return traces


def lr_sweep_figure(runs: Sequence[Mapping[str, Any]], *, labels: Mapping[str, str] | None = None,
                    selected_lr: float | None = None, title: str | None = None) -> go.Figure:
    """Peak max logit (left, log scale) and final validation loss (right) against the learning rate (log scale),
    one curve per variant: the mean over seeds with markers, its seed band (min … max) shaded.

    Args:
        runs: see the module docstring. labels: variant → legend name. selected_lr: a learning rate to mark with a
            vertical line on both axes (the lab's selector). title: the figure's title (default a plain one).
    Returns: the figure (height 420 px).
    Raises: ValueError as :func:`cells`.
    Source: the LR-sensitivity plot of Wortsman et al., arXiv 2309.14322 (Fig. 1), for spanviz's runs.
    """
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("how large the attention logits grow", "how well the model ends up"))
    for trace in lr_sweep_data(runs, labels):
        fig.add_trace(go.Scatter(**trace))
    fig.update_xaxes(type="log", title_text="peak learning rate (log scale)")
    fig.update_yaxes(type="log", title_text=METRIC_TITLES["peak_max_logit"] + " (log)", row=1, col=1)
    fig.update_yaxes(title_text=METRIC_TITLES["final_val_loss"] + " — lower is better", row=1, col=2)
    fig.update_layout(height=420, margin={"t": 70}, legend={"orientation": "h", "y": -0.22, "traceorder": "normal"},
                      title={"text": title or "raise the learning rate: what happens to the logits and the loss"},
                      shapes=selected_lr_shapes(selected_lr))
    return fig


def selected_lr_shapes(lr: float | None) -> list[dict[str, Any]]:
    """A dotted vertical line at ``lr`` on both axes of :func:`lr_sweep_figure` (none for None)."""
    if lr is None:
        return []
    line = {"color": "#555555", "width": 1.5, "dash": "dot"}
    return [{"type": "line", "xref": xref, "yref": f"{yref} domain", "x0": lr, "x1": lr, "y0": 0, "y1": 1,
             "line": line} for xref, yref in (("x", "y"), ("x2", "y2"))]  # fmt: skip


def growth_curves_data(runs: Sequence[Mapping[str, Any]], lr: float,
                       labels: Mapping[str, str] | None = None) -> list[Trace]:
    """The traces of :func:`growth_curves_figure`: per variant, each seed's max-logit curve at learning rate ``lr``
    (thin), and their mean (thick, in the legend)."""
    labels = labels or {}
    picked = [r for r in runs if np.isclose(float(r["lr"]), lr)]
    order = list(STYLES)
    variants = sorted(dict.fromkeys(r["variant"] for r in picked), key=lambda v: order.index(v) if v in order else 99)
    traces: list[Trace] = []
    for i, variant in enumerate(variants):
        color, dash, symbol = style(variant, i)
        seeds = [r for r in picked if r["variant"] == variant and r.get("max_logit")]
        name = labels.get(variant, variant)
        for r in seeds:
            traces.append({"type": "scatter", "x": np.asarray(r["probe_step"], float), "y": np.asarray(r["max_logit"],
                           float), "mode": "lines", "line": {"color": rgba(color, 0.35), "width": 1},
                           "legendgroup": variant, "showlegend": False,
                           "hovertemplate": f"{name}, seed {r['seed']}: %{{y:.4g}} at update %{{x}}<extra></extra>"})
        if seeds:
            n = min(len(r["max_logit"]) for r in seeds)
            mean = np.mean([np.asarray(r["max_logit"][:n], float) for r in seeds], axis=0)
            traces.append({"type": "scatter", "x": np.asarray(seeds[0]["probe_step"][:n], float), "y": mean,
                           "name": name, "mode": "lines+markers", "legendgroup": variant, "legendrank": 1000 + i,
                           "line": {"color": color, "dash": dash, "width": 2.5},
                           "marker": {"symbol": symbol, "size": 7, "color": color, "maxdisplayed": 8}})
    return traces


def growth_curves_figure(runs: Sequence[Mapping[str, Any]], lr: float, *,
                         labels: Mapping[str, str] | None = None) -> go.Figure:
    """The max logit over training at one learning rate, one colour per variant (mean thick, seeds thin; log y).

    Args: runs (module docstring), lr (one of the runs' learning rates), labels (variant → legend name).
    Returns: the figure (height 360 px); no traces when no run has that learning rate.
    """
    fig = go.Figure([go.Scatter(**t) for t in growth_curves_data(runs, lr, labels)])
    fig.update_layout(height=360, title={"text": f"the max logit during training at lr {lr:g}"},
                      xaxis_title="update", yaxis={"type": "log", "dtick": 1, "title": "max logit (log)"},
                      legend={"orientation": "h", "y": -0.25, "traceorder": "normal"})
    return fig
