"""One run of the FP8 transients experiment (arXiv 2602.18851): the weight-swap transient, and what a run's history
says — overflowing logits per strategy before, during and after the transient, and how close the logits came to
the worst-case bound. :mod:`spanviz.experiments.fp8` runs the sweep."""

from __future__ import annotations

import logging
import os
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from spanviz.model import LowRankQuery
from spanviz.train import RunRecord
from spanviz.validators import check_float, check_int

logger = logging.getLogger(__name__)


class WeightSwap:
    """Trainer callback ``cb(trainer, row)``: a sudden weight change after update ``at_step``.

    Exactly one of:
        checkpoint_path: load the model weights of that checkpoint (a spanviz checkpoint, whose ``"model"``
            entry is used, or a plain state dict) — "loading pretrained weights mid-run";
        scale_wq: multiply the query projection (weight and bias; for a low-rank query its up-projection
            and bias) of ``layer`` (None = every layer) by this factor, which multiplies that layer's
            attention logits by exactly ``scale_wq``.

    The change happens in the callback after the update whose row has ``step == at_step``; update
    ``at_step + 1`` is the first to run, and its probes the first to measure, on the new weights.
    The optimizer state is kept (as when weights are swapped under a running optimizer).

    Attributes: ``applied_at`` (the update after which it fired, or None).
    Raises: ValueError on bad arguments (both or neither of checkpoint_path / scale_wq, scale_wq <= 0,
        at_step < 0, negative layer) and, when firing, for a layer index out of range.
    Source: spanviz's rendering of the paper's "weight swap" transient.
    """

    def __init__(
        self,
        at_step: int,
        checkpoint_path: str | os.PathLike[str] | None = None,
        scale_wq: float | None = None,
        layer: int | None = None,
    ) -> None:
        check_int("at_step", at_step, 0)
        if (checkpoint_path is None) == (scale_wq is None):
            raise ValueError(
                f"give exactly one of checkpoint_path and scale_wq, got checkpoint_path={checkpoint_path!r}, "
                f"scale_wq={scale_wq!r}"
            )
        if scale_wq is not None:
            check_float("scale_wq", scale_wq, 0, low_open=True)
        if layer is not None:  # None: every layer
            check_int("layer", layer, 0)
        self.at_step = at_step
        self.checkpoint_path = None if checkpoint_path is None else str(checkpoint_path)
        self.scale_wq = None if scale_wq is None else float(scale_wq)
        self.layer = layer
        self.applied_at: int | None = None

    def __call__(self, trainer: Any, row: Mapping[str, Any]) -> None:
        if self.applied_at is not None or row.get("step") != self.at_step:
            return
        model = trainer.model
        if self.checkpoint_path is not None:
            state = torch.load(self.checkpoint_path, map_location="cpu", weights_only=True)
            model.load_state_dict(state["model"] if isinstance(state, dict) and "model" in state else state)
        else:
            n_layer = len(model.blocks)
            if self.layer is not None and self.layer >= n_layer:
                raise ValueError(f"layer must be in [0, {n_layer}) for this model, got {self.layer}")
            layers = range(n_layer) if self.layer is None else [self.layer]
            with torch.no_grad():
                for i in layers:
                    q = model.blocks[i].attn.W_Q
                    weight = q.up if isinstance(q, LowRankQuery) else q.weight
                    weight.mul_(self.scale_wq)
                    if q.bias is not None:
                        q.bias.mul_(self.scale_wq)
        self.applied_at = self.at_step
        logger.info("weight swap after update %d (%s)", self.at_step,
                    self.checkpoint_path or f"W_Q × {self.scale_wq:g}, layer {self.layer}")  # fmt: skip


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


__all__ = ["WeightSwap", "alpha_obs", "overflow_rows"]
