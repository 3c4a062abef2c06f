"""FP8 transients experiment (arXiv 2602.18851): delayed vs geometry-aware scaling of attention logits.

The paper reports (without numbers) transient scenarios — loading other weights mid-run, checkpoint
resumption, learning-rate spikes — in which Transformer Engine's delayed scaling overflows (its scale comes
from past amaxes) while a scale computed from the current weights does not. Here a tiny GPT trains on
WikiText-2 with an :class:`spanviz.fp8.FP8Probe` on every update, and a transient is injected:

* ``"lr_spike"``: the learning rate is multiplied by ``lr_spike_factor`` for ``lr_spike_steps`` updates
  (``TrainConfig.lr_spike_*``);
* ``"weight_swap"``: a :class:`WeightSwap` callback loads another checkpoint's weights, or multiplies the
  query projection of one layer (or all) by ``scale_wq`` — a controlled stand-in for "load weights whose
  logits are larger";
* ``"none"``: no transient (the baseline: what plain training does to delayed scaling).

Everything is simulated in fp32: overflows are counted on S·s before any cast (:func:`spanviz.fp8.count_overflow`).
Offline, train on the validation split and evaluate on the test split (``data_dir``); the run config says so.
"""

from __future__ import annotations

import logging
import math
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from spanviz import fp8
from spanviz.model import GPTConfig, LowRankQuery

logger = logging.getLogger(__name__)

SCENARIOS = ("lr_spike", "weight_swap", "none")

DEFAULT_MODEL = dict(context_length=64, n_layer=2, n_head=4, d_model=64)
"""A CPU-sized tiny GPT (``vocab_size`` comes from the data)."""

DEFAULT_TRAIN = dict(batch_size=8, lr=1e-3, warmup_steps=10, eval_iters=2, weight_decay=0.1, grad_clip=1.0)
"""Training defaults; ``steps``, ``seed``, ``device``, ``eval_interval`` and the spike are set per run."""


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
        if isinstance(at_step, bool) or not isinstance(at_step, int) or at_step < 0:
            raise ValueError(f"at_step must be an integer >= 0, got {at_step!r}")
        if (checkpoint_path is None) == (scale_wq is None):
            raise ValueError(
                f"give exactly one of checkpoint_path and scale_wq, got checkpoint_path={checkpoint_path!r}, "
                f"scale_wq={scale_wq!r}"
            )
        if scale_wq is not None and (
            isinstance(scale_wq, bool) or not isinstance(scale_wq, (int, float)) or not math.isfinite(scale_wq)
            or scale_wq <= 0
        ):  # fmt: skip
            raise ValueError(f"scale_wq must be a finite number > 0, got {scale_wq!r}")
        if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int) or layer < 0):
            raise ValueError(f"layer must be None (all layers) or an integer >= 0, got {layer!r}")
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


def _check_choice(name: str, value: Any, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r}")
    return value


def _load_data(data_dir: str | os.PathLike[str] | None, max_vocab: int | None) -> Any:
    from spanviz import data as data_lib

    splits = data_lib.OFFLINE_SPLITS if data_dir is not None else None
    return data_lib.prepare_tokens(data_dir, splits=splits, max_vocab=max_vocab)


def fp8_transients(
    scenario: str = "lr_spike",
    *,
    steps: int = 200,
    seeds: Sequence[int] = (0,),
    data: Any = None,
    data_dir: str | os.PathLike[str] | None = None,
    max_vocab: int | None = 8192,
    at_step: int | None = None,
    lr_spike_factor: float = 20.0,
    lr_spike_steps: int = 5,
    scale_wq: float | None = 4.0,
    checkpoint_path: str | os.PathLike[str] | None = None,
    layer: int | None = None,
    strategies: Sequence[str] = ("delayed", "theory", "deterministic", "calibrated"),
    delta: float = 1e-3,
    margin: float = 0,
    fmt: str = "e4m3",
    history_len: int = 1024,
    burn_in: int = 20,
    model: Mapping[str, Any] | None = None,
    train: Mapping[str, Any] | None = None,
    device: str = "cpu",
    window: int = 10,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Train a tiny GPT with an FP8 probe on every update, inject a transient, count overflows per strategy.

    Args:
        scenario: "lr_spike", "weight_swap" or "none".
        steps: updates per run, >= 2. seeds: one run per seed (non-empty).
        data: a :class:`spanviz.data.TokenData`; None loads WikiText-2 with
            :func:`spanviz.data.prepare_tokens` from ``data_dir`` (offline: train on validation, evaluate on
            test) or, without ``data_dir``, from ``$SPANVIZ_WIKITEXT_DIR`` / the hub. max_vocab: word cap.
        at_step: the update at which the transient starts (default steps // 2): the spike's first update,
            or the update after which the weights are swapped (the first affected probe is at_step + 1).
        lr_spike_factor, lr_spike_steps: the spike (scenario "lr_spike").
        scale_wq / checkpoint_path, layer: the swap (scenario "weight_swap"; see :class:`WeightSwap`;
            ``checkpoint_path`` wins over ``scale_wq`` when given).
        strategies, delta, margin, fmt, history_len, burn_in: passed to :class:`spanviz.fp8.FP8Probe`.
        model: :class:`GPTConfig` overrides of :data:`DEFAULT_MODEL` (``vocab_size`` defaults to the data's).
        train: :class:`spanviz.train.TrainConfig` overrides of :data:`DEFAULT_TRAIN`.
        device: "cpu", "cuda", "auto", ... window: updates counted as "during the transient" from the
            first affected update, >= 1.
        progress: optional ``fn(row)`` after every update (rows carry the run's seed under "seed").
    Returns:
        dict with ``scenario``, ``event_step`` (first affected update), ``window``, ``strategies``,
        ``model`` / ``train`` (configs as dicts, per the first seed), ``data`` (its description),
        ``runs`` (per seed: ``seed``, ``history`` with step, train_loss, lr and every ``fp8/`` column,
        ``status``) and ``summary``: one row per (seed, strategy) with ``overflow_before`` (logits
        overflowing before the event), ``overflow_during`` (in the window), ``overflow_after`` (after it),
        ``steps_with_overflow`` (any layer), ``first_overflow_step`` (or None) and
        ``median_utilisation`` (amax·s/fmax, max over layers, median over steps).
    Raises:
        ValueError: bad arguments (unknown scenario, steps < 2, at_step outside [0, steps − 2], empty
            seeds, ...), or as raised by the trainer / probe.
    Source: arXiv 2602.18851's transient scenarios, spanviz's setup.
    """
    from spanviz.train import Trainer, TrainConfig

    _check_choice("scenario", scenario, SCENARIOS)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 2:
        raise ValueError(f"steps must be an integer >= 2, got {steps!r}")
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must be a non-empty sequence of integers")
    at_step = steps // 2 if at_step is None else at_step
    if isinstance(at_step, bool) or not isinstance(at_step, int) or not 0 <= at_step <= steps - 2:
        raise ValueError(f"at_step must be an integer in [0, {steps - 2}] for steps={steps}, got {at_step!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    strategies = tuple(strategies)
    fp8.FP8Probe(strategies=strategies, delta=delta, margin=margin, fmt=fmt, history_len=history_len,
                 burn_in=burn_in)  # validate early  # fmt: skip
    if data is None:
        data = _load_data(data_dir, max_vocab)

    model_cfg = GPTConfig(**{**DEFAULT_MODEL, "vocab_size": data.vocab_size, **(model or {})})
    train_kw: dict[str, Any] = {**DEFAULT_TRAIN, "eval_interval": steps, **(train or {})}
    train_kw.update(steps=steps, device=device)
    if scenario == "lr_spike":
        train_kw.update(lr_spike_factor=lr_spike_factor, lr_spike_start=at_step, lr_spike_steps=lr_spike_steps)
    event_step = at_step + 1 if scenario == "weight_swap" else at_step

    runs, summary = [], []
    first_train_cfg = None
    for seed in seeds:
        train_cfg = TrainConfig(**{**train_kw, "seed": seed})
        first_train_cfg = first_train_cfg or train_cfg
        probe = fp8.FP8Probe(every=1, delta=delta, margin=margin, strategies=strategies, fmt=fmt,
                             history_len=history_len, burn_in=burn_in)  # fmt: skip
        callbacks = []
        if scenario == "weight_swap":
            swap_scale = None if checkpoint_path is not None else scale_wq
            callbacks.append(WeightSwap(at_step, checkpoint_path=checkpoint_path, scale_wq=swap_scale, layer=layer))
        extra = {"experiment": "fp8_transients", "scenario": scenario, "seed": seed}
        trainer = Trainer(model_cfg, train_cfg, data, probes=[probe], callbacks=callbacks, extra_config=extra)
        on_row = None if progress is None else (lambda row, seed=seed: progress({**row, "seed": seed}))
        record = trainer.run(progress=on_row)
        history = {
            k: list(v) for k, v in record.history.items() if k in ("step", "train_loss", "lr") or k.startswith("fp8/")
        }
        runs.append({"seed": seed, "status": record.status, "history": history})
        summary.extend(_summarize_run(history, seed, strategies, event_step, window, model_cfg.n_layer))
        logger.info("fp8_transients %s seed %d: %s", scenario, seed, record.status)
    return {
        "scenario": scenario,
        "event_step": event_step,
        "window": window,
        "strategies": list(strategies),
        "model": model_cfg.to_dict(),
        "train": first_train_cfg.to_dict(),
        "data": data.describe(),
        "runs": runs,
        "summary": summary,
    }


def _summarize_run(
    history: Mapping[str, list[Any]], seed: int, strategies: Sequence[str], event_step: int, window: int, n_layer: int
) -> list[dict[str, Any]]:
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


def format_summary(result: Mapping[str, Any]) -> str:
    """A plain-text table of ``result["summary"]`` (for logs, the CLI and docs)."""
    cols = ("seed", "strategy", "overflow_before", "overflow_during", "overflow_after", "steps_with_overflow",
            "first_overflow_step", "median_utilisation")  # fmt: skip
    head = f"scenario={result['scenario']} event_step={result['event_step']} window={result['window']}"

    def cell(v: Any) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    table = [cols] + [tuple(cell(r[c]) for c in cols) for r in result["summary"]]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    lines = ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in table]
    return "\n".join([head, *lines])
