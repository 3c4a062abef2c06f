"""Loss curves with seed bands, and the relative change against a baseline with the seed-noise band."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from spanviz.plots.common import (
    DASHES,
    GRAY,
    SYMBOLS,
    History,
    Trace,
    as_array,
    cycle_color,
    markers,
    rgba,
    series,
)


# ------------------------------------------------------------------------------------ loss curves, seeds
def seed_band(histories: Sequence[History], metric: str = "val_loss") -> dict[str, np.ndarray]:
    """Mean and spread of one metric across seeds, aligned on steps.

    Args:
        histories: one history per seed (each with ``step`` and ``metric``).
        metric: e.g. ``"val_loss"`` or ``"train_loss"``.
    Returns:
        dict of arrays of shape (N,) over the union of measured steps: ``step``, ``mean``, ``std`` (sample
        standard deviation, ddof=1; 0 where only one seed measured the step) and ``count`` (seeds measured).
    Raises:
        ValueError: empty ``histories`` or a history without the metric.
    """
    if len(histories) == 0:
        raise ValueError("histories must hold at least one history (one per seed), got none")
    measured = [series(h, metric) for h in histories]
    if len(measured) == 1:  # one seed: no spread (the common live case, kept cheap)
        steps, values = measured[0]
        return {"step": steps, "mean": values, "std": np.zeros_like(values), "count": np.ones_like(values)}
    steps = np.unique(np.concatenate([s for s, _ in measured]))
    table = np.full((len(measured), len(steps)), np.nan)  # (seeds, steps), NaN = not measured
    for row, (s, v) in zip(table, measured):
        row[np.searchsorted(steps, s)] = v
    count = np.sum(~np.isnan(table), axis=0).astype(float)
    mean = np.nansum(table, axis=0) / count
    sq = np.nansum((table - mean) ** 2, axis=0)
    std = np.sqrt(np.divide(sq, count - 1, out=np.zeros_like(sq), where=count > 1))
    return {"step": steps, "mean": mean, "std": std, "count": count}


def _as_seed_runs(runs: Mapping[str, Any]) -> dict[str, list[History]]:
    if not isinstance(runs, Mapping):
        raise ValueError(f"runs must map variant name -> history or list of histories, got {type(runs).__name__}")
    return {name: [h] if isinstance(h, Mapping) else list(h) for name, h in runs.items()}


def variant_widths(n: int) -> list[float]:
    """Line widths of ``n`` variants, widest first (2 pixels apart, the last 1.5): curves that coincide to the
    pixel show as nested stripes, each variant visible, instead of the last one drawn hiding the others."""
    return [1.5 + 2.0 * (n - 1 - v) for v in range(n)]


def loss_curves_data(runs: Mapping[str, Any], metrics: str | Sequence[str] = "val_loss") -> list[Trace]:
    """Traces of :func:`loss_curves_figure`: per (variant, metric) a band (mean ± std) then the mean line."""
    metrics = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    traces: list[Trace] = []
    seed_runs = _as_seed_runs(runs)
    widths = variant_widths(len(seed_runs))
    for v, (name, histories) in enumerate(seed_runs.items()):
        color = cycle_color(v)
        for m, metric in enumerate(metrics):
            b = seed_band(histories, metric)
            x, lo, hi = b["step"], b["mean"] - b["std"], b["mean"] + b["std"]
            n = len(histories)
            label = name if len(metrics) == 1 else f"{name} · {metric.replace('_', ' ')}"
            traces.append(
                {
                    "type": "scatter",
                    "x": np.concatenate([x, x[::-1]]),
                    "y": np.concatenate([hi, lo[::-1]]),
                    "fill": "toself",
                    "fillcolor": rgba(color, 0.18),
                    "line": {"width": 0, "color": color},
                    "hoverinfo": "skip",
                    "showlegend": False,
                    "legendgroup": label,
                    "name": f"{label} ± std",
                }
            )
            traces.append(
                {
                    "type": "scatter",
                    "x": x,
                    "y": b["mean"],
                    **markers(len(x), size=4 + widths[v], symbol=SYMBOLS[v % len(SYMBOLS)]),
                    "line": {"color": color, "dash": DASHES[m % len(DASHES)], "width": widths[v]},
                    "legendgroup": label,
                    "name": label if n == 1 else f"{label} (mean of {n} seeds)",
                }
            )
    return traces


def loss_delta_data(runs: Mapping[str, Any], metric: str = "val_loss") -> list[Trace]:
    """Traces of :func:`loss_curves_figure`'s lower row (``delta=True``): for every variant after the first, its mean
    ``metric`` against the first variant's, 100·(variant − first)/first in percent, at the steps both measured (x2,
    y2 axes; colored and marked as in :func:`loss_curves_data`). [] for fewer than two variants."""
    seed_runs = _as_seed_runs(runs)
    names = list(seed_runs)
    if len(names) < 2:
        return []
    first = seed_band(seed_runs[names[0]], metric)
    widths = variant_widths(len(names))
    traces: list[Trace] = []
    for v, name in enumerate(names[1:], start=1):
        b = seed_band(seed_runs[name], metric)
        steps, mine, theirs = np.intersect1d(b["step"], first["step"], return_indices=True)
        base = first["mean"][theirs]
        traces.append({
            "type": "scatter", "x": steps, "y": 100.0 * (b["mean"][mine] - base) / base, "xaxis": "x2", "yaxis": "y2",
            **markers(len(steps), size=4 + widths[v], symbol=SYMBOLS[v % len(SYMBOLS)]),
            "line": {"color": cycle_color(v), "width": widths[v]}, "legendgroup": name, "showlegend": False,
            "name": f"{name} vs {names[0]}", "hovertemplate": "step %{x}: %{y:+.2f} %<extra>%{fullData.name}</extra>",
        })
    return traces


def loss_curves_figure(
    runs: Mapping[str, Any],
    metrics: str | Sequence[str] = "val_loss",
    title: str | None = None,
    log_y: bool = False,
    delta: bool = False,
) -> go.Figure:
    """Loss curves of several runs with seed bands.

    Args:
        runs: ``{variant: [history per seed]}`` (a single history stands for one seed). Variants are colored
            in insertion order; each history needs ``step`` and every metric.
        metrics: one metric name or several (drawn solid, dashed, dotted ... per metric). Variants differ in
            color, line width (the first widest, :func:`variant_widths`) and marker symbol, so runs whose curves
            coincide stay visible.
        title: figure title; default names the metrics.
        log_y: logarithmic loss axis.
        delta: with two variants or more, a lower row shows each variant's mean val loss against the first's in
            percent (:func:`loss_delta_data`): curves that lie on top of each other above are apart there.
    Returns:
        Figure with 2 traces per (variant, metric): a filled band mean ± std across seeds (zero width with one
        seed) and the mean line, x = optimizer step, y = loss in nats; with ``delta``, then one trace per variant
        after the first on the lower row (y = Δ val loss in %, a gray zero line).
    Raises:
        ValueError: malformed runs or a history lacking a metric.
    """
    metrics = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    lower = loss_delta_data(runs) if delta else []
    fig = go.Figure(data=[*loss_curves_data(runs, metrics), *lower])
    fig.update_layout(
        title=title or " / ".join(m.replace("_", " ") for m in metrics),
        xaxis_title="step",
        yaxis={"title": {"text": "loss (nats)"}, "type": "log" if log_y else "linear", "minorloglabels": "complete"},
        margin={"l": 50, "r": 10, "t": 40, "b": 40},
        height=320,
        legend={"orientation": "h", "y": -0.2},
    )
    if lower:  # the loss above, the difference to the first variant below, on one step axis
        first = next(iter(_as_seed_runs(runs)))
        fig.update_layout(
            height=470, legend={"orientation": "h", "y": -0.14},
            xaxis={"domain": [0, 1], "anchor": "y", "matches": "x2", "showticklabels": False, "title": None},
            yaxis={"domain": [0.42, 1]},
            xaxis2={"domain": [0, 1], "anchor": "y2", "title": {"text": "step"}},
            yaxis2={"domain": [0, 0.3], "anchor": "x2", "zeroline": True, "zerolinecolor": GRAY,
                    "title": {"text": f"Δ val loss vs<br>{first} (%)"}},
        )
    return fig


def seed_peaks(runs: Mapping[str, Any], metric: str) -> dict[str, list[tuple[float, float]]]:
    """Each seed's peak of one metric: ``{variant: [(step, value) per seed]}`` (the largest measured value).

    Args: runs: ``{variant: [history per seed]}`` (a single history stands for one seed). metric: e.g.
        ``"logits/max"``.
    Raises: ValueError: malformed runs or a history lacking the metric.
    """
    out: dict[str, list[tuple[float, float]]] = {}
    for name, histories in _as_seed_runs(runs).items():
        out[name] = []
        for h in histories:
            steps, values = series(h, metric)
            if len(values):
                k = int(np.argmax(values))
                out[name].append((float(steps[k]), float(values[k])))
    return out


def seed_peaks_data(runs: Mapping[str, Any], metric: str) -> list[Trace]:
    """One marker trace per variant at each seed's peak (:func:`seed_peaks`), colored as :func:`loss_curves_data`
    colors the variant: to add to a :func:`loss_curves_figure` of the same runs."""
    traces: list[Trace] = []
    for v, (name, peaks) in enumerate(seed_peaks(runs, metric).items()):
        traces.append({"type": "scatter", "x": [s for s, _ in peaks], "y": [p for _, p in peaks], "mode": "markers",
                       "marker": {"color": cycle_color(v), "symbol": "star", "size": 12,
                                  "line": {"width": 1, "color": "#000000"}},
                       "name": f"{name}: peak of each seed", "legendgroup": name,
                       "hovertemplate": "peak %{y:.3g} at step %{x}<extra></extra>"})
    return traces


def relative_change_data(steps: Any, changes: Mapping[str, Any], noise: Any | None = None) -> list[Trace]:
    """Traces of :func:`relative_change_figure`: the ±noise band (when given), then one line per change."""
    x = as_array(steps)
    traces: list[Trace] = []
    if noise is not None:
        n = np.abs(as_array(noise))
        if n.shape != x.shape:
            raise ValueError(f"noise has shape {n.shape}, steps has {x.shape}")
        traces.append({"type": "scatter", "x": np.concatenate([x, x[::-1]]), "y": np.concatenate([n, -n[::-1]]),
                       "fill": "toself", "fillcolor": "rgba(120,120,120,0.25)", "line": {"width": 0},
                       "name": "seed noise", "hoverinfo": "skip"})
    for i, (name, y) in enumerate(changes.items()):
        y = as_array(y)
        if y.shape != x.shape:
            raise ValueError(f"changes[{name!r}] has shape {y.shape}, steps has {x.shape}")
        traces.append({"type": "scatter", "x": x, "y": y, "name": name,
                       **markers(len(x), size=7, symbol=SYMBOLS[(i + 1) % len(SYMBOLS)]),
                       "line": {"color": cycle_color(i + 1), "width": 3, "dash": DASHES[i % len(DASHES)]},
                       "hovertemplate": "step %{x}: %{y:+.2f} %<extra></extra>"})
    return traces


def relative_change_figure(
    steps: Any, changes: Mapping[str, Any], noise: Any | None = None, title: str | None = None,
    y_title: str = "Δ val loss vs standard (%)",
) -> go.Figure:
    """Relative change of a metric against a baseline over training, with the seed-noise band around 0.

    Two loss curves that differ by a fraction of a percent coincide to the pixel; their difference does not.

    Args:
        steps: (N,) optimizer steps where both were measured.
        changes: ``{name: (N,)}`` 100·(metric − baseline)/baseline in percent (below 0: lower than baseline).
        noise: (N,) the same change between two baseline runs that differ only in the seed (the band ±|noise|):
            a change inside the band is within the seed noise.
    Returns:
        Figure with the band (when given), one line per change and a zero line.
    Raises:
        ValueError: a series whose length differs from ``steps``.
    """
    fig = go.Figure(data=relative_change_data(steps, changes, noise))
    fig.add_hline(y=0, line={"color": GRAY, "width": 1})
    fig.update_layout(
        title=title or "change against the baseline (gray: seed noise)",
        xaxis_title="step",
        yaxis_title=y_title,
        height=320,
        margin={"l": 60, "r": 10, "t": 40, "b": 40},
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


def relative_change_series(
    baseline: History, runs: Mapping[str, History], noise: History | None = None, metric: str = "val_loss"
) -> dict[str, Any]:
    """Arguments of :func:`relative_change_figure` from histories: 100·(metric − baseline)/baseline in percent.

    Args:
        baseline: the history every change is measured against (e.g. the standard gradient).
        runs: ``{name: history}`` whose change is drawn.
        noise: a history that differs from ``baseline`` only in the seed (its change is the seed-noise band).
        metric: e.g. ``"val_loss"``.
    Returns:
        dict with ``steps`` (N,) — the steps where every history measured ``metric`` —, ``changes``
        ``{name: (N,)}`` and ``noise`` ((N,) or None).
    Raises:
        ValueError: a history without ``step`` or ``metric``.
    """
    measured = [dict(zip(*series(h, metric))) for h in (baseline, *runs.values(), *([noise] if noise else []))]
    steps = sorted(set.intersection(*(set(m) for m in measured)))
    base = np.array([measured[0][t] for t in steps])

    def change(m: dict) -> np.ndarray:
        return 100.0 * (np.array([m[t] for t in steps]) - base) / base

    return {"steps": np.array(steps, dtype=float),
            "changes": {name: change(m) for name, m in zip(runs, measured[1:])},
            "noise": change(measured[-1]) if noise is not None else None}
