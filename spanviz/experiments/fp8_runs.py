"""What the runs of the FP8 transients experiment (arXiv 2602.18851) say: from a run's history, overflowing logits
per strategy before, during and after the transient, and how close the logits came to the worst-case bound; over
the sweep, one sentence per scenario and margin. :mod:`spanviz.experiments.fp8` runs the sweep."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from spanviz.train import RunRecord

METRIC = "overflow_during"
"""The compared per-seed number: overflowing logits in the transient window (summed over layers and steps)."""
CAST_METRICS = ("underflow_zero", "underflow_subnormal", "error_scores", "error_softmax", "error_softmax_during")
"""Per-seed numbers of the cast itself (:mod:`spanviz.fp8.strategies`), compared too when the sweep has the practical
strategies: scores flushed to zero and to subnormals (summed over the run), the relative error of the cast scores and
of the softmax (median over updates; ``_during``: the largest in the transient window)."""
COST_COLUMNS = ("scales", "reductions")
"""Per update (summed over layers): scale values stored, and amax reductions that must finish before the cast."""


def overflow_rows(
    history: Mapping[str, list[Any]], seed: int, strategies: Sequence[str], event_step: int, window: int, n_layer: int
) -> list[dict[str, Any]]:
    """Per strategy, the per-seed row of :func:`spanviz.experiments.fp8.fp8_sweep`: overflowing logits before
    ``event_step``, in the ``window`` updates from it and after, updates with any overflow, the first one, and the
    median over updates of the largest per-layer utilisation."""
    steps = history["step"]
    rows = []
    for s in strategies:
        counts = history.get(f"fp8/overflow/{s}", [None] * len(steps))
        before = during = after = 0
        first, n_steps = None, 0
        utils = []
        for step, count, *layer_utils in zip(
            steps, counts, *(history.get(f"fp8/L{i}/utilisation/{s}", [None] * len(steps)) for i in range(n_layer))
        ):
            if count is None:
                continue
            if step < event_step:
                before += count
            elif step < event_step + window:
                during += count
            else:
                after += count
            if count > 0:
                n_steps += 1
                first = step if first is None else first
            values = [u for u in layer_utils if u is not None]
            if values:
                utils.append(max(values))
        rows.append({**_base_row(seed, s, before, during, after, n_steps, first, utils),
                     **_cast_columns(history, s, event_step, window)})
    return rows


def _cast_columns(history: Mapping[str, list[Any]], s: str, event_step: int, window: int) -> dict[str, Any]:
    """Underflows summed over the run, errors' median over updates (and max in the window), cost per update."""
    steps = history["step"]

    def col(stat: str) -> list[tuple[int, Any]]:
        return [(t, v) for t, v in zip(steps, history.get(f"fp8/{stat}/{s}", [])) if v is not None]

    out: dict[str, Any] = {}
    for stat in ("underflow_zero", "underflow_subnormal"):
        values = col(stat)
        out[stat] = sum(v for _, v in values) if values else None
    for stat in ("error_scores", "error_softmax"):
        values = [v for _, v in col(stat)]
        out[stat] = statistics.median(values) if values else None
    during = [v for t, v in col("error_softmax") if event_step <= t < event_step + window]
    out["error_softmax_during"] = max(during) if during else None
    for stat in COST_COLUMNS:
        values = [v for _, v in col(stat)]
        out[stat] = values[-1] if values else None
    return out


def _base_row(seed: int, s: str, before: int, during: int, after: int, n_steps: int, first: int | None,
              utils: list[float]) -> dict[str, Any]:
    return {"seed": seed, "strategy": s, "overflow_before": before, "overflow_during": during, "overflow_after": after,
            "steps_with_overflow": n_steps, "first_overflow_step": first,
            "median_utilisation": statistics.median(utils) if utils else None}  # fmt: skip


def alpha_obs(record: RunRecord, n_layer: int) -> dict[str, float | None]:
    """Median and max over updates of α_obs = max|S| / B_wc (max over layers): how close to the worst case."""
    per_step = []
    h = record.history
    for i in range(len(h.get("step", []))):
        values = []
        for layer in range(n_layer):
            amax = (h.get(f"fp8/L{layer}/max_abs_logit") or [None] * (i + 1))[i]
            bound = (h.get(f"fp8/L{layer}/bound_worst_case") or [None] * (i + 1))[i]
            if isinstance(amax, (int, float)) and isinstance(bound, (int, float)) and bound > 0:
                values.append(amax / bound)
        if values:
            per_step.append(max(values))
    return {"alpha_obs_median": statistics.median(per_step) if per_step else None,
            "alpha_obs_max": max(per_step) if per_step else None}  # fmt: skip



def sweep_verdict(table: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]], strategies: Sequence[str]
                  ) -> str:
    """Per scenario and margin: in how many seeds each strategy overflowed in the window, and its test."""
    tests = {(r["scenario"], r["margin"], r["strategy"]): r["verdict"] for r in rows if r.get("metric") == METRIC}
    sentences = []
    for name in dict.fromkeys(row["variant"] for row in table):
        runs = [row for row in table if row["variant"] == name]
        parts = []
        for s in strategies:
            counts = [row[METRIC] for row in runs if row["strategy"] == s]
            text = f"{s} in {sum(c > 0 for c in counts)} of {len(counts)} seeds (mean {statistics.fmean(counts):.4g})"
            verdict = tests.get((runs[0]["scenario"], runs[0]["margin"], s), "")
            if verdict not in ("", "baseline"):
                text += f" [vs delayed: {verdict}]"
            parts.append(text)
        sentences.append(f"{name}: logits overflowing in the transient window — " + "; ".join(parts) + ".")
    return " ".join(sentences)


__all__ = ["CAST_METRICS", "COST_COLUMNS", "METRIC", "alpha_obs", "overflow_rows", "sweep_verdict"]
