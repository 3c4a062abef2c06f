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
        rows.append(
            {
                "seed": seed,
                "strategy": s,
                "overflow_before": before,
                "overflow_during": during,
                "overflow_after": after,
                "steps_with_overflow": n_steps,
                "first_overflow_step": first,
                "median_utilisation": statistics.median(utils) if utils else None,
            }
        )
    return rows


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
    tests = {(r["scenario"], r["margin"], r["strategy"]): r["verdict"] for r in rows}
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


__all__ = ["METRIC", "alpha_obs", "overflow_rows", "sweep_verdict"]
