"""Training: :class:`TrainConfig`, the learning-rate schedule, :class:`Trainer` and :class:`RunRecord`.

A :class:`Trainer` trains one :class:`~spanviz.model.TinyGPT` on a :class:`~spanviz.data.TokenData` with AdamW.
It is step-wise, so a notebook UI can interleave work with drawing: ``trainer.step(n)`` runs ``n`` optimizer
steps and returns their history rows; ``trainer.run()`` blocks until ``train_cfg.steps``. Everything a run
produced lives in ``trainer.record`` (a :class:`RunRecord`: config, environment, history, status), saved as
JSON; ``save_checkpoint`` / :meth:`Trainer.resume` continue a run exactly.

Step numbering: row ``step`` = s is the s-th optimizer update, 0-based (s = 0 … steps − 1).
``train_loss`` is the loss of that update's batch (before the update), ``lr`` the learning rate it used,
``grad_norm`` the global L2 norm of the gradients *before* clipping, ``val_loss`` the mean loss on the fixed
evaluation batches measured *after* the update (``None`` on rows without evaluation), ``tokens_per_s`` the
training throughput of that update (batch, forward, backward, optimizer; evaluation and probes excluded).

Determinism: one ``seed`` controls the initial weights, the training batches (a private ``torch.Generator``)
and dropout (a private copy of torch's RNG state, swapped in for each step). The trainer therefore never
disturbs, and is never disturbed by, other users of torch's global RNG (another trainer in the same
process, a probe that draws random numbers). On CPU the same seed gives the same loss curve bit for bit,
and a run resumed from a checkpoint continues the very same curve.

Non-finite numbers: a non-finite training loss or gradient norm stops the run *before* the optimizer step
(the model keeps its last weights), a non-finite validation loss stops it after; status becomes
``"diverged"``, the offending row stays in the history, and no checkpoint is written from then on, so the
last good checkpoint stays on disk.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import platform
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from spanviz import data as data_lib
from spanviz.files import atomic_write
from spanviz.model import GPTConfig, TinyGPT

logger = logging.getLogger(__name__)

DTYPES = ("float32", "bfloat16")
DEVICE_TYPES = ("cpu", "cuda", "mps")
STATUSES = ("running", "finished", "stopped", "diverged", "interrupted")
CORE_KEYS = ("step", "train_loss", "val_loss", "lr", "grad_norm", "tokens_per_s")
"""History keys every row has; probe keys must differ from these."""
CONFIG_KEYS = ("model", "train", "data", "probes")
"""Keys of ``RunRecord.config`` set by the trainer; ``extra_config`` may add others (e.g. ``variant``)."""
RECORD_FORMAT = "spanviz-run-1"
CHECKPOINT_FORMAT = "spanviz-checkpoint-1"
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


# ================================================================================================ config
def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be an integer {allowed}, got {value}")
    return int(value)


def _check_float(name: str, value: Any, low: float, high: float = math.inf, *, low_open: bool = False,
                 high_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    value = float(value)
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if not math.isfinite(value) or too_low or too_high:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open or high == math.inf else ']'}"
        raise ValueError(f"{name} must be a finite number in {interval}, got {value!r}")
    return value


def _check_device_name(name: str, value: Any) -> str:
    if value == "auto":
        return value
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        device = None
    if device is None or device.type not in DEVICE_TYPES:
        raise ValueError(f"{name} must be 'auto', 'cpu', 'cuda', 'cuda:<index>' or 'mps', got {value!r}")
    return str(value)


def default_warmup_steps(steps: int) -> int:
    """The warm-up length used when ``TrainConfig.warmup_steps`` is None: 10 % of ``steps``, at most 100."""
    return min(100, steps // 10)


@dataclass(frozen=True)
class TrainConfig:
    """How to train: optimizer, schedule, evaluation, precision, checkpoints, seed. Validated on construction.

    The command line (``spanviz train``) is generated from these fields: their defaults, types and the
    descriptions below are its flags' defaults, types and help. Units are in brackets.

    Attributes:
        steps: optimizer updates in the run, >= 1.
        batch_size: B [sequences per update], >= 1; each sequence has the model's context_length tokens.
        lr: peak learning rate, > 0.
        warmup_steps: linear warm-up length [updates], 0 <= warmup_steps <= steps; None = 10 % of steps,
            at most 100 (stored as the number it resolves to).
        min_lr_ratio: the cosine decay ends at lr * min_lr_ratio on the last update; in [0, 1]
            (1 = constant learning rate after the warm-up).
        weight_decay: AdamW decoupled weight decay, >= 0, applied to parameters with >= 2 dimensions only
            (linear weights and the embedding matrices, tied with the output layer); biases and norm gains
            are not decayed.
        grad_clip: clip the global gradient L2 norm to this value; None or 0 = off (stored as None).
        beta1: AdamW first-moment coefficient, in [0, 1).
        beta2: AdamW second-moment coefficient, in [0, 1).
        eval_interval: evaluate after updates s with s % eval_interval == 0 (so also after the first one)
            and after the last update; >= 1.
        eval_iters: number of fixed evaluation batches (B windows each, evenly spaced over the eval split), >= 1.
        seed: one seed for weights, batches and dropout; integer in [0, 2**63 - 1].
        device: auto (cuda, then mps, then cpu), cpu, cuda, cuda:<index> or mps.
        dtype: float32, or bfloat16 for bf16 autocast of the forward passes (CUDA only: any other device is
            refused rather than silently training in another precision than recorded).
        checkpoint_interval: with an output folder, write checkpoint.pt and run.json every this many
            updates; None = after every evaluation; 0 = only when the run ends. >= 0. The cadence never
            changes the loss curve (it is not part of the results-store key).
        lr_spike_factor: multiply the learning rate by this factor (>= 1; 1.0 = off) for the updates
            lr_spike_start <= s < lr_spike_start + lr_spike_steps, a controlled transient for the FP8
            scaling experiments (arXiv 2602.18851, "transient scenarios").
        lr_spike_start: first update of the spike, >= 0 (< steps when the spike is on).
        lr_spike_steps: spike length [updates], >= 0 (>= 1 when the spike is on).

    Raises:
        ValueError: naming the field, the value and what is allowed.
    """

    steps: int = 300
    batch_size: int = 16
    lr: float = 3e-3
    warmup_steps: int | None = None
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float | None = 1.0
    beta1: float = 0.9
    beta2: float = 0.95
    eval_interval: int = 50
    eval_iters: int = 10
    seed: int = 0
    device: str = "auto"
    dtype: str = "float32"
    checkpoint_interval: int | None = None
    lr_spike_factor: float = 1.0
    lr_spike_start: int = 0
    lr_spike_steps: int = 0

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)  # normalised values: 3 → 3.0, so equal configs hash equal

        put("steps", _check_int("steps", self.steps, 1))
        put("batch_size", _check_int("batch_size", self.batch_size, 1))
        put("lr", _check_float("lr", self.lr, 0.0, low_open=True))
        warmup = default_warmup_steps(self.steps) if self.warmup_steps is None else self.warmup_steps
        put("warmup_steps", _check_int("warmup_steps", warmup, 0, self.steps))
        put("min_lr_ratio", _check_float("min_lr_ratio", self.min_lr_ratio, 0.0, 1.0))
        put("weight_decay", _check_float("weight_decay", self.weight_decay, 0.0))
        if self.grad_clip is not None:
            clip = _check_float("grad_clip", self.grad_clip, 0.0)
            put("grad_clip", clip if clip > 0 else None)
        put("beta1", _check_float("beta1", self.beta1, 0.0, 1.0, high_open=True))
        put("beta2", _check_float("beta2", self.beta2, 0.0, 1.0, high_open=True))
        put("eval_interval", _check_int("eval_interval", self.eval_interval, 1))
        put("eval_iters", _check_int("eval_iters", self.eval_iters, 1))
        put("seed", _check_int("seed", self.seed, 0, 2**63 - 1))
        put("device", _check_device_name("device", self.device))
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.dtype == "bfloat16" and self.device != "auto" and torch.device(self.device).type != "cuda":
            raise ValueError(f"dtype='bfloat16' needs a CUDA device (bf16 autocast is CUDA only), "
                             f"got device={self.device!r}; use dtype='float32'")
        if self.checkpoint_interval is not None:
            put("checkpoint_interval", _check_int("checkpoint_interval", self.checkpoint_interval, 0))
        put("lr_spike_factor", _check_float("lr_spike_factor", self.lr_spike_factor, 1.0))
        put("lr_spike_start", _check_int("lr_spike_start", self.lr_spike_start, 0))
        put("lr_spike_steps", _check_int("lr_spike_steps", self.lr_spike_steps, 0))
        if self.lr_spike_factor != 1.0:
            if self.lr_spike_start >= self.steps:
                raise ValueError(f"lr_spike_start must be < steps={self.steps} when the spike is on "
                                 f"(lr_spike_factor={self.lr_spike_factor}), got {self.lr_spike_start}")
            if self.lr_spike_steps < 1:
                raise ValueError(f"lr_spike_steps must be >= 1 when the spike is on "
                                 f"(lr_spike_factor={self.lr_spike_factor}), got {self.lr_spike_steps}")

    def checkpoint_due(self, step_count: int, evaluated: bool) -> bool:
        """Whether a checkpoint is due after ``step_count`` updates (``evaluated``: this update was evaluated)."""
        if self.checkpoint_interval is None:
            return evaluated
        return self.checkpoint_interval > 0 and step_count % self.checkpoint_interval == 0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of all fields."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict`; missing fields take their defaults. Unknown keys raise ``ValueError``."""
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown TrainConfig field(s) {sorted(unknown)}; allowed: {sorted(known)}")
        return cls(**dict(d))


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate of update ``step`` (0-based): linear warm-up, cosine decay, optional spike.

    * warm-up, ``step < warmup_steps``: ``lr * (step + 1) / warmup_steps`` (the first update already moves);
    * then cosine from ``lr`` at ``step = warmup_steps`` down to ``lr * min_lr_ratio`` at ``step = steps - 1``
      (steps past the end keep the final value);
    * times ``lr_spike_factor`` for ``lr_spike_start <= step < lr_spike_start + lr_spike_steps``.

    Returns:
        The learning rate (same units as ``cfg.lr``).
    Raises:
        ValueError: ``step`` not an integer >= 0, or ``cfg`` not a :class:`TrainConfig`.
    """
    if not isinstance(cfg, TrainConfig):
        raise ValueError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    step = _check_int("step", step, 0)
    peak, floor = cfg.lr, cfg.lr * cfg.min_lr_ratio
    if step < cfg.warmup_steps:
        lr = peak * (step + 1) / cfg.warmup_steps
    else:
        decay_steps = max(1, cfg.steps - 1 - cfg.warmup_steps)
        progress = min(1.0, (step - cfg.warmup_steps) / decay_steps)
        lr = floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * progress))
    if cfg.lr_spike_start <= step < cfg.lr_spike_start + cfg.lr_spike_steps:
        lr *= cfg.lr_spike_factor
    return lr


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """The torch device to train on: "auto" picks cuda, then mps, then cpu.

    Returns:
        A ``torch.device``; a CUDA device always carries its index (``cuda:0`` for "cuda").
    Raises:
        ValueError: an unknown device name, or one that is not available on this machine.
    """
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    dev = torch.device(_check_device_name("device", str(device)))
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={str(device)!r} but CUDA is not available here; "
                             "use device='auto' or device='cpu'")
        index = torch.cuda.current_device() if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise ValueError(f"device={str(device)!r} but only {torch.cuda.device_count()} CUDA device(s) exist")
        return torch.device("cuda", index)
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={str(device)!r} but MPS is not available here; use device='auto' or device='cpu'")
    return dev


def count_parameters(cfg: GPTConfig) -> int:
    """Number of parameters of ``TinyGPT(cfg)`` (tied embedding counted once), computed without building it.

    Equals ``TinyGPT(cfg).num_params()`` (tested); cheap for any size, so absurd configurations can be
    refused before anything is allocated.
    """
    d, H, V, T, L = cfg.d_model, cfg.n_head, cfg.vocab_size, cfg.context_length, cfg.n_layer
    dh, bias = cfg.d_head, int(cfg.bias)
    norm = d * (1 + bias)  # LayerNorm gain (+ bias)
    if cfg.qk_rank is None:
        query = d * d + bias * d
    else:
        query = d * H * cfg.qk_rank + H * cfg.qk_rank * dh + bias * H * dh
    attention = query + 3 * (d * d + bias * d) + (2 * dh if cfg.qk_norm else 0)
    mlp = d * 4 * d + bias * 4 * d + 4 * d * d + bias * d
    return V * d + T * d + L * (2 * norm + attention + mlp) + norm


def estimate_memory(model_cfg: GPTConfig, train_cfg: TrainConfig) -> int:
    """A rough lower bound of the memory one training run needs [bytes].

    fp32 parameters, gradients and the two AdamW moments (16 bytes per parameter), the activations kept for
    one backward pass (per layer and token about 16·d_model values and 2·n_head·T attention scores, and three
    B·T·vocab_size logit tensors), and the fixed evaluation batches (eval_iters·B windows of T + 1 int64 ids,
    kept as x and y). Real use is higher (allocator slack, temporaries), so a run refused by
    :func:`check_memory` certainly does not fit.
    """
    B, T = train_cfg.batch_size, model_cfg.context_length
    per_token = model_cfg.n_layer * (16 * model_cfg.d_model + 2 * model_cfg.n_head * T) + 3 * model_cfg.vocab_size
    eval_batches = 2 * 8 * train_cfg.eval_iters * B * (T + 1)
    return 16 * count_parameters(model_cfg) + 4 * B * T * per_token + eval_batches


def available_memory(device: torch.device) -> int | None:
    """Free memory on ``device`` [bytes]: CUDA's free memory, else the system's available RAM; None if unknown."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return None
    return int(psutil.virtual_memory().available)


def check_memory(model_cfg: GPTConfig, train_cfg: TrainConfig, device: torch.device) -> int:
    """Refuse a configuration whose :func:`estimate_memory` exceeds the free memory of ``device``.

    Returns:
        The estimate [bytes].
    Raises:
        ValueError: naming the size fields, the estimate and what is free.
    """
    need = estimate_memory(model_cfg, train_cfg)
    free = available_memory(device)
    if free is not None and need > free:
        sizes = ", ".join(f"{name}={value}" for name, value in (
            ("n_layer", model_cfg.n_layer), ("d_model", model_cfg.d_model), ("n_head", model_cfg.n_head),
            ("context_length", model_cfg.context_length), ("vocab_size", model_cfg.vocab_size),
            ("batch_size", train_cfg.batch_size), ("eval_iters", train_cfg.eval_iters)))
        raise ValueError(f"this configuration needs at least {need / 2**30:,.1f} GiB to train ({sizes}; "
                         f"{count_parameters(model_cfg):,} parameters) but {device} has {free / 2**30:,.1f} GiB "
                         "free; make n_layer, d_model, context_length, batch_size or eval_iters smaller")
    return need


def check_runnable(model_cfg: GPTConfig, train_cfg: TrainConfig) -> torch.device:
    """Every check of a run that needs this machine, before anything is built or loaded.

    The device exists here; bf16 autocast has CUDA; FlexAttention (``attn_backend="flex"``) has CUDA and no
    dropout; the run fits in memory (:func:`check_memory`). Cheap: builds nothing.

    Returns:
        The resolved device.
    Raises:
        ValueError: naming the field, the value and what is allowed.
    """
    if not isinstance(model_cfg, GPTConfig):
        raise ValueError(f"model_cfg must be a GPTConfig, got {type(model_cfg).__name__}")
    if not isinstance(train_cfg, TrainConfig):
        raise ValueError(f"train_cfg must be a TrainConfig, got {type(train_cfg).__name__}")
    device = resolve_device(train_cfg.device)
    if train_cfg.dtype == "bfloat16" and device.type != "cuda":
        raise ValueError(f"dtype='bfloat16' needs CUDA (bf16 autocast is CUDA only) but device "
                         f"{train_cfg.device!r} resolved to {device}; use dtype='float32'")
    if model_cfg.attn_backend == "flex":
        if device.type != "cuda":
            raise ValueError(f"attn_backend='flex' needs CUDA (FlexAttention has no CPU backward) but device "
                             f"{train_cfg.device!r} resolved to {device}; use attn_backend='auto'")
        if model_cfg.dropout > 0:
            raise ValueError(f"attn_backend='flex' does not support dropout, got dropout={model_cfg.dropout}; "
                             "use dropout=0 or attn_backend='auto'")
    check_memory(model_cfg, train_cfg, device)
    return device


# ================================================================================================ probes
class Probe(Protocol):
    """An opt-in measurement taken during training (see :mod:`spanviz.probes`-style classes in the techniques).

    Attributes:
        name: non-empty, unique among a trainer's probes.
        every: run after updates s with ``s % every == 0`` (so after the first update) and after the last.
    Call:
        ``probe(trainer) -> dict[str, JSON-able]``, after the optimizer step (and after evaluation, when
        due), with the model in eval mode (train mode restored afterwards) and gradients enabled (the
        parameters' ``.grad`` still hold this update's clipped gradients; a probe may overwrite them). A probe
        may draw random numbers: the trainer's own RNG stream is separate, so a probe never changes the
        loss curve. The keys go into the
        history *as returned*: by convention a probe prefixes them itself (``"fp8/..."``); they must not be
        core keys (:data:`CORE_KEYS`) nor keys of another probe (``ValueError``). Tensors and numpy
        values are converted with ``.tolist()``.
    Optional:
        ``describe() -> dict`` (JSON-able settings for the run config and the results-store key; without it
        the public scalar / tuple attributes are recorded), ``state_dict() -> dict`` (JSON-able) and
        ``load_state_dict(state)`` to carry probe state (e.g. delayed-scaling histories) through checkpoints.
    """

    name: str
    every: int

    def __call__(self, trainer: Trainer) -> Mapping[str, Any]: ...


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def describe_probe(probe: Probe) -> dict[str, Any]:
    """JSON-ready description of a probe for ``RunRecord.config["probes"]``: type, name, every, settings.

    Settings come from ``probe.describe()`` when the probe has it; otherwise from its public attributes
    whose values are scalars, tuples of scalars, or objects with ``to_dict()`` (lists are treated as state
    and left out).
    """
    describe = getattr(probe, "describe", None)
    if callable(describe):
        settings = dict(describe())
    else:
        settings = {}
        for attr, value in sorted(vars(probe).items()) if hasattr(probe, "__dict__") else ():
            if attr.startswith("_") or attr in ("name", "every"):
                continue
            if _is_scalar(value) or (isinstance(value, tuple) and all(_is_scalar(v) for v in value)):
                settings[attr] = value
            elif callable(getattr(value, "to_dict", None)):
                settings[attr] = value.to_dict()
    return {"type": type(probe).__qualname__, "name": probe.name, "every": probe.every, "settings": settings}


def _check_probes(probes: Sequence[Any]) -> None:
    names = []
    for i, probe in enumerate(probes):
        name, every = getattr(probe, "name", None), getattr(probe, "every", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"probes[{i}].name must be a non-empty string, got {name!r}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"probes[{i}].every (probe {name!r}) must be an integer >= 1, got {every!r}")
        if not callable(probe):
            raise ValueError(f"probes[{i}] (probe {name!r}) must be callable as probe(trainer) -> dict")
        names.append(name)
    if len(set(names)) != len(names):
        raise ValueError(f"probe names must be unique, got {names}")


def _to_json_value(value: Any, where: str) -> Any:
    """``value`` as plain JSON types (tensors and numpy values via ``tolist()``); ValueError otherwise."""
    if isinstance(value, (Tensor, np.ndarray, np.generic)):
        value = value.tolist() if not isinstance(value, Tensor) else value.detach().cpu().tolist()
    if _is_scalar(value):
        return value
    if isinstance(value, Mapping):
        return {str(k): _to_json_value(v, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json_value(v, where) for v in value]
    raise ValueError(f"{where} is a {type(value).__name__}, which is not JSON-able; return numbers, strings, "
                     "lists or dicts")


# ================================================================================================ record
def _encode_nonfinite(obj: Any) -> Any:
    """Replace non-finite floats by the strings "nan", "inf", "-inf" (JSON has no NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, Mapping):
        return {k: _encode_nonfinite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encode_nonfinite(v) for v in obj]
    return obj


def _decode_nonfinite(obj: Any) -> Any:
    """Inverse of :func:`_encode_nonfinite` (applied to histories only)."""
    if isinstance(obj, str) and obj in _NONFINITE:
        return _NONFINITE[obj]
    if isinstance(obj, dict):
        return {k: _decode_nonfinite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode_nonfinite(v) for v in obj]
    return obj


def to_json_text(obj: Any) -> str:
    """Strict JSON text of ``obj`` (non-finite floats as strings, see :class:`RunRecord`).

    Raises:
        ValueError: ``obj`` holds something JSON cannot represent.
    """
    try:
        return json.dumps(_encode_nonfinite(obj), allow_nan=False)
    except TypeError as error:
        raise ValueError(f"not JSON-serialisable: {error}") from error


@dataclass
class RunRecord:
    """Everything one training run produced, as plain JSON-able data.

    Attributes:
        config: ``{"model": GPTConfig dict, "train": TrainConfig dict, "data": data.describe() (incl. the
            splits used), "probes": [describe_probe(...)], ...}`` plus any extra entries (e.g. ``variant``,
            ``seed``, ``tags`` from :func:`spanviz.experiments.run_grid`). The results store keys runs by it.
        environment: torch / python / platform / spanviz versions, device and its name, threads, start time.
        history: ``{key: list}``, all lists the same length, one entry per optimizer update (row); keys
            :data:`CORE_KEYS` plus probe keys; ``None`` = not measured at that update.
        status: "running", "finished", "stopped" (by request), "diverged" (non-finite numbers) or
            "interrupted" (Ctrl-C).
        message: a human-readable sentence about the status (e.g. where and why a run diverged).

    JSON (``save`` / ``load``): one object with the attributes above plus ``format`` and, for convenience,
    ``best_val_loss``. Non-finite floats (the loss of a diverged step) are written as the strings ``"nan"``,
    ``"inf"``, ``"-inf"`` — JSON has no NaN — and read back as floats by :meth:`load` / :meth:`from_dict`.

    Raises:
        ValueError: unknown status or history lists of different lengths.
    """

    config: dict[str, Any]
    environment: dict[str, Any] = field(default_factory=dict)
    history: dict[str, list[Any]] = field(default_factory=dict)
    status: str = "running"
    message: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        lengths = {key: len(column) for key, column in self.history.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"history lists must have equal lengths, got {lengths}")

    @property
    def best_val_loss(self) -> float | None:
        """Lowest finite ``val_loss`` in the history [nats], or None when there is none."""
        values = [v for v in self.history.get("val_loss", []) if isinstance(v, (int, float)) and math.isfinite(v)]
        return min(values) if values else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (non-finite floats still as floats; :meth:`to_json` encodes them)."""
        return {
            "format": RECORD_FORMAT,
            "status": self.status,
            "message": self.message,
            "best_val_loss": self.best_val_loss,
            "config": self.config,
            "environment": self.environment,
            "history": self.history,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunRecord:
        """Inverse of :meth:`to_dict` (also accepts the encoded form of :meth:`to_json`).

        Raises:
            ValueError: not a mapping; ``config`` / ``history`` / ``status`` missing; a part of the wrong type
                (``config`` and ``environment`` mappings, ``history`` a mapping of string keys to lists,
                ``status`` one of :data:`STATUSES`, ``message`` a string); history lists of unequal lengths.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"not a spanviz run record: a JSON object was expected, got {type(d).__name__}")
        missing = [k for k in ("config", "history", "status") if k not in d]
        if missing:
            raise ValueError(f"not a spanviz run record: missing {missing}")
        config, environment, history = d["config"], d.get("environment") or {}, d["history"]
        message = d.get("message", "")
        for name, value, kind, want in (("config", config, Mapping, "an object"),
                                        ("environment", environment, Mapping, "an object"),
                                        ("history", history, Mapping, "an object of lists"),
                                        ("status", d["status"], str, "a string"),
                                        ("message", message, str, "a string")):
            if not isinstance(value, kind):
                raise ValueError(f"not a spanviz run record: {name} must be {want}, got {type(value).__name__}")
        bad = [k for k, v in history.items() if not isinstance(k, str) or not isinstance(v, list)]
        if bad:
            raise ValueError(f"not a spanviz run record: history[{bad[0]!r}] must be a list")
        return cls(
            config=dict(config),
            environment=dict(environment),
            history={k: list(_decode_nonfinite(v)) for k, v in history.items()},
            status=d["status"],
            message=message,
        )

    def to_json(self) -> str:
        """Strict JSON text (see the class docstring). Raises ``ValueError`` if something is not JSON-able."""
        return to_json_text(self.to_dict())

    @classmethod
    def from_json(cls, text: str | bytes) -> RunRecord:
        """Inverse of :meth:`to_json`. Raises ``ValueError`` for text that is not a run record."""
        try:
            obj = json.loads(text)
        except RecursionError:
            raise ValueError("not a spanviz run record: JSON nested too deeply") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"not a JSON run record: {error}") from None
        return cls.from_dict(obj)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the record as JSON, atomically (serialised first: on error nothing is written). Returns the path."""
        return atomic_write(path, self.to_json().encode("utf-8"))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunRecord:
        """Read a record written by :meth:`save`.

        Raises:
            ValueError: the file cannot be read or is not a run record (the message names the file).
        """
        try:
            return cls.from_json(Path(path).read_bytes())
        except OSError as error:
            raise ValueError(f"{path} cannot be read: {error.strerror or error}") from None
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None


def run_config(
    model_cfg: GPTConfig,
    train_cfg: TrainConfig,
    data: Any,
    probes: Sequence[Probe] = (),
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The full configuration of a run, as stored in ``RunRecord.config`` and hashed by the results store.

    Returns:
        ``{"model": ..., "train": ..., "data": data.describe(), "probes": [...], **extra}`` as plain JSON
        types (tuples become lists), so it equals its own JSON round trip.
    Raises:
        ValueError: ``extra`` reuses a key of :data:`CONFIG_KEYS`, or something is not JSON-able.
    """
    config: dict[str, Any] = {
        "model": model_cfg.to_dict(),
        "train": train_cfg.to_dict(),
        "data": dict(data.describe()),
        "probes": [describe_probe(p) for p in probes],
    }
    for key, value in (extra or {}).items():
        if key in CONFIG_KEYS:
            raise ValueError(f"extra_config key {key!r} is reserved; reserved keys: {CONFIG_KEYS}")
        config[str(key)] = value
    return json.loads(to_json_text(config))


def environment(device: torch.device) -> dict[str, Any]:
    """Where a run ran: versions, platform, device (name), CPU threads, start time (UTC, ISO 8601)."""
    try:
        from importlib.metadata import version

        spanviz_version = version("spanviz")
    except Exception:  # noqa: BLE001 - not installed (e.g. run from a source tree)
        spanviz_version = "unknown"
    if device.type == "cuda":
        device_name = torch.cuda.get_device_name(device)
    else:
        device_name = platform.processor() or platform.machine() or device.type
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "spanviz": spanviz_version,
        "device": str(device),
        "device_name": device_name,
        "num_threads": torch.get_num_threads(),
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


# ================================================================================================ trainer
@contextmanager
def _deferred_sigint() -> Iterator[dict[str, bool]]:
    """Inside the block (main thread only), a first Ctrl-C only sets ``state["pending"]``; a second raises.

    This lets the training loop finish the current step and stop between steps, where the state is
    consistent and can be checkpointed.
    """
    state = {"pending": False}
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def handler(signum: int, frame: Any) -> None:
        if state["pending"]:
            raise KeyboardInterrupt
        state["pending"] = True
        logger.warning("Ctrl-C: stopping after the current step (press again to abort at once)")

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # e.g. an embedded interpreter that does not allow signal handlers
        yield state
        return
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)


class Trainer:
    """Trains a :class:`~spanviz.model.TinyGPT` with AdamW, step by step; keeps a :class:`RunRecord`.

    Args:
        model_cfg: the architecture (its ``context_length`` T is the training sequence length).
        train_cfg: optimizer, schedule, evaluation, device, seed.
        data: a :class:`spanviz.data.TokenData` (or anything with ``train_ids``, ``eval_ids`` — 1-D integer
            tensors —, ``vocab_size`` and ``describe()``). Batches come from :func:`spanviz.data.get_batch`.
        probes: :class:`Probe` objects, run every ``probe.every`` updates.
        callbacks: ``cb(trainer, row)`` called after every update (also the diverged one), after probes and
            checkpoints; may call ``trainer.request_stop()``. Exceptions propagate.
        out_dir: folder for ``run.json`` and ``checkpoint.pt``; None = keep everything in memory. ``run.json``
            (status "running") is written when training starts, both files at every checkpoint (see
            ``TrainConfig.checkpoint_interval``: by default after every evaluation) and when the run ends;
            only ``run.json`` when it diverges, so the last good checkpoint stays on disk.
        extra_config: JSON-able entries added to ``record.config`` (e.g. ``{"variant": "qk4", "seed": 1}``);
            they are part of the results-store key.

    Attributes:
        model (TinyGPT, on ``device``), optimizer (AdamW), device, model_cfg, train_cfg, data, probes (tuple),
        callbacks (list; may be appended to),
        step_count (updates done), history (dict of lists, also ``record.history``), record (:class:`RunRecord`),
        eval_batches (the ``eval_iters`` fixed (x, y) pairs, (B, T) long), probe_batch (the first B
        consecutive windows of the eval split, (x, y), (B', T) long with B' <= B).

    Raises:
        ValueError: bad configs, probes, callbacks or data (e.g. ``model_cfg.vocab_size`` smaller than the
            data's, ids shorter than T + 1), anything :func:`check_runnable` refuses (an unavailable device,
            bf16 or FlexAttention without CUDA, a run that does not fit in memory) — before any compute.

    Thread safety: only :meth:`request_stop` may be called from another thread while a step runs.
    """

    def __init__(
        self,
        model_cfg: GPTConfig,
        train_cfg: TrainConfig,
        data: Any,
        *,
        probes: Sequence[Probe] = (),
        callbacks: Sequence[Callable[[Trainer, dict[str, Any]], None]] = (),
        out_dir: str | os.PathLike[str] | None = None,
        extra_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.device = check_runnable(model_cfg, train_cfg)
        _check_data(data, model_cfg)
        self.probes = tuple(probes)
        _check_probes(self.probes)
        self.callbacks = list(callbacks)
        for i, cb in enumerate(self.callbacks):
            if not callable(cb):
                raise ValueError(f"callbacks[{i}] must be callable as cb(trainer, row), got {cb!r}")
        self.model_cfg, self.train_cfg, self.data = model_cfg, train_cfg, data
        self.out_dir = Path(out_dir) if out_dir is not None else None
        config = run_config(model_cfg, train_cfg, data, self.probes, extra_config)

        # One seed: weights (CPU init, then moved), dropout (our own copy of torch's RNG), batches.
        self._cuda = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=self._cuda):
            torch.manual_seed(train_cfg.seed)
            self.model = TinyGPT(model_cfg).to(self.device)
            self._rng = self._read_rng()
        self._batch_gen = torch.Generator().manual_seed(train_cfg.seed)

        decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": train_cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=lr_at(0, train_cfg),
            betas=(train_cfg.beta1, train_cfg.beta2),
        )

        B, T = train_cfg.batch_size, model_cfg.context_length
        self.eval_batches = list(
            data_lib.iter_eval_batches(data.eval_ids, B, T, n_batches=train_cfg.eval_iters, device=self.device)
        )
        self.probe_batch = next(data_lib.iter_eval_batches(data.eval_ids, B, T, device=self.device))

        self.step_count = 0
        self.history: dict[str, list[Any]] = {key: [] for key in CORE_KEYS}
        self.record = RunRecord(config=config, environment=environment(self.device), history=self.history)
        self._key_owner: dict[str, str] = {}  # probe key → probe name
        self._stop = threading.Event()
        self._in_update = False  # True from the batch draw to the appended row
        self._torn = False  # interrupted inside an update: in-memory state may be half-updated
        self._announced = False  # run.json written with status "running" by this trainer
        self.last_checkpoint: int | None = None  # step_count of the checkpoint in out_dir, if any
        logger.info("Trainer: %d parameters on %s, %d steps of %d×%d tokens",
                    self.model.num_params(), self.device, train_cfg.steps, B, T)

    # --------------------------------------------------------------------------------------- control
    @property
    def done(self) -> bool:
        """True unless the status is "running" (finished, stopped, diverged or interrupted)."""
        return self.record.status != "running"

    def request_stop(self) -> None:
        """Ask the trainer to stop at the next step boundary (thread-safe; e.g. a UI Stop button).

        The running ``step(n)`` / ``run()`` returns after the current update with status "stopped" (a
        checkpoint is written when there is an ``out_dir``). The request is consumed: a later ``step()`` or
        ``run()`` continues the run.
        """
        self._stop.set()

    def step(self, n: int = 1) -> list[dict[str, Any]]:
        """Run up to ``n`` optimizer updates and return their history rows.

        Stops early when the run finishes, diverges, or a stop was requested. Returns ``[]`` once the run
        finished or diverged. A Ctrl-C (main thread) ends the run cleanly after the current update, as in
        :meth:`run`.

        Raises:
            ValueError: ``n`` not an integer >= 1.
            KeyboardInterrupt: after Ctrl-C, once the record (and checkpoint) are saved.
            RuntimeError: the trainer was interrupted inside an update earlier (resume from the checkpoint).
        """
        return self._loop(_check_int("n", n, 1), None)

    def run(self, progress: bool | Callable[[dict[str, Any]], None] | None = None) -> RunRecord:
        """Train until ``train_cfg.steps`` updates are done (or the run stops, diverges or is interrupted).

        Args:
            progress: None; a callable ``fn(row)`` called after every update; or True for a ``tqdm.auto``
                progress bar (meant for the command line).
        Returns:
            ``self.record`` with status "finished", "stopped" or "diverged" (divergence does not raise).
        Raises:
            KeyboardInterrupt: re-raised after Ctrl-C, *after* the record (status "interrupted") and, with an
                ``out_dir``, a checkpoint of the last complete update were saved. The first Ctrl-C lets the
                current update finish; a second one interrupts at once (then no checkpoint is written,
                since the weights may be half-updated, and this trainer refuses further steps).
        """
        remaining = self.train_cfg.steps - self.step_count
        if remaining <= 0 or self.record.status == "diverged":
            return self.record
        bar = None
        on_row = progress if callable(progress) else None
        if progress is True:
            from tqdm.auto import tqdm

            bar = tqdm(total=self.train_cfg.steps, initial=self.step_count, unit="step", dynamic_ncols=True)

            def on_row(row: dict[str, Any]) -> None:
                bar.update(1)
                bar.set_postfix(loss=f"{row['train_loss']:.3f}", refresh=False)

        try:
            self._loop(remaining, on_row)
        finally:
            if bar is not None:
                bar.close()
        return self.record

    # ------------------------------------------------------------------------------------------ loop
    def _loop(self, n: int, on_row: Callable[[dict[str, Any]], None] | None) -> list[dict[str, Any]]:
        """Up to ``n`` updates; each followed by callbacks, ``on_row``, and the stop / Ctrl-C checks."""
        if self._torn:
            raise RuntimeError("this trainer was interrupted inside an update, so its state may be half-updated; "
                               "continue from its last checkpoint (Trainer.resume)")
        rows: list[dict[str, Any]] = []
        if self.record.status in ("finished", "diverged") or self.step_count >= self.train_cfg.steps:
            return rows
        self.record.status, self.record.message = "running", ""
        if self.out_dir is not None and not self._announced:
            self._save_outputs(checkpoint=False)  # a run killed before its first checkpoint still leaves a trace
            self._announced = True
        with _deferred_sigint() as sigint:
            try:
                for _ in range(n):
                    if self._honour_stop():
                        break
                    self._in_update = True
                    row = self._update()
                    self._in_update = False
                    rows.append(row)
                    for cb in self.callbacks:
                        cb(self, row)
                    if on_row is not None:
                        on_row(row)
                    if self.done or self._honour_stop() or sigint["pending"]:
                        break
                if sigint["pending"]:
                    raise KeyboardInterrupt
            except KeyboardInterrupt:
                self._interrupted()
                raise
        return rows

    def _interrupted(self) -> None:
        """Record a Ctrl-C: checkpoint the last complete update, unless it struck inside an update."""
        if self._in_update:
            self._torn = True
            self._end("interrupted", f"interrupted inside update {self.step_count}: the in-memory state may be "
                      f"half-updated, so no checkpoint was written.{self._on_disk()}", checkpoint=False)
        elif not self.done:
            self._end("interrupted", f"interrupted by Ctrl-C after {self.step_count} of {self.train_cfg.steps} "
                      "updates", checkpoint=True)
            if self.out_dir is not None:
                self.record.message += f".{self._on_disk()}"
                self._save_outputs(checkpoint=False)

    def _honour_stop(self) -> bool:
        if not self._stop.is_set():
            return False
        self._stop.clear()
        if not self.done:
            self._end("stopped", f"stopped by request after {self.step_count} of {self.train_cfg.steps} updates",
                      checkpoint=True)
        return True

    @contextmanager
    def _own_rng(self) -> Iterator[None]:
        """Swap the trainer's RNG state in for the block (dropout draws from it), torch's global one back after."""
        with torch.random.fork_rng(devices=self._cuda):
            torch.set_rng_state(self._rng["cpu"])
            if "cuda" in self._rng:
                torch.cuda.set_rng_state(self._rng["cuda"], self.device)
            try:
                yield
            finally:
                self._rng = self._read_rng()

    def _read_rng(self) -> dict[str, Tensor]:
        state = {"cpu": torch.get_rng_state()}
        if self._cuda:
            state["cuda"] = torch.cuda.get_rng_state(self.device)
        return state

    def _autocast(self) -> Any:
        if self.train_cfg.dtype == "bfloat16":
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        return nullcontext()

    def _update(self) -> dict[str, Any]:
        """One optimizer update plus evaluation, probes and checkpoint when due; returns the row."""
        cfg, s = self.train_cfg, self.step_count
        B, T = cfg.batch_size, self.model_cfg.context_length
        lr = lr_at(s, cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        start = time.perf_counter()
        grad_norm = None
        with self._own_rng():
            x, y = data_lib.get_batch(self.data.train_ids, B, T, self._batch_gen, self.device)
            with self._autocast():
                _, loss = self.model(x, y)
            train_loss = loss.item()
            if math.isfinite(train_loss):
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                max_norm = cfg.grad_clip if cfg.grad_clip is not None else math.inf
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm).item()
                if math.isfinite(grad_norm):
                    self.optimizer.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        row: dict[str, Any] = {"step": s, "train_loss": train_loss, "val_loss": None, "lr": lr,
                               "grad_norm": grad_norm, "tokens_per_s": B * T / (time.perf_counter() - start)}

        if not math.isfinite(train_loss) or grad_norm is None or not math.isfinite(grad_norm):
            what, value = ("train loss", train_loss) if not math.isfinite(train_loss) else ("gradient norm", grad_norm)
            self._append(row)
            self._diverge(f"{what} is {value} at update {s}; stopped before the optimizer step")
        else:
            self.step_count += 1
            last = self.step_count == cfg.steps
            if s % cfg.eval_interval == 0 or last:
                row["val_loss"] = self.evaluate()
            for probe in self.probes:
                if s % probe.every == 0 or last:
                    row.update(self._run_probe(probe))
            self._append(row)
            if row["val_loss"] is not None and not math.isfinite(row["val_loss"]):
                self._diverge(f"validation loss is {row['val_loss']} after update {s}")
            elif last:
                best = self.record.best_val_loss
                self._end("finished", f"finished {cfg.steps} updates; best val loss {best:.4f}", checkpoint=True)
            elif self.out_dir is not None and cfg.checkpoint_due(self.step_count, row["val_loss"] is not None):
                self._save_outputs(checkpoint=True)
        return row

    def _append(self, row: dict[str, Any]) -> None:
        """Append a row to the history; a new key is back-filled with None so all lists stay equal length."""
        n = len(self.history["step"])
        for key in row:
            if key not in self.history:
                self.history[key] = [None] * n
        for key, column in self.history.items():
            column.append(row.get(key))

    def _run_probe(self, probe: Probe) -> dict[str, Any]:
        was_training = self.model.training
        self.model.eval()
        try:
            out = probe(self)
        finally:
            self.model.train(was_training)
        if not isinstance(out, Mapping):
            raise ValueError(f"probe {probe.name!r} must return a dict, got {type(out).__name__}")
        values = {}
        for key, value in out.items():
            if not isinstance(key, str) or key in CORE_KEYS:
                raise ValueError(f"probe {probe.name!r} returned key {key!r}; keys must be strings other than "
                                 f"the core keys {CORE_KEYS}")
            owner = self._key_owner.setdefault(key, probe.name)
            if owner != probe.name:
                raise ValueError(f"probe {probe.name!r} returned key {key!r}, already used by probe {owner!r}; "
                                 "prefix probe keys with the probe name")
            values[key] = _to_json_value(value, f"probe {probe.name!r} key {key!r}")
        return values

    # ------------------------------------------------------------------------------ ending and saving
    def _diverge(self, what: str) -> None:
        clip = self.train_cfg.grad_clip
        hint = (f"try a lower lr (peak lr={self.train_cfg.lr:g})"
                + (" or enable gradient clipping (grad_clip=1.0)" if clip is None
                   else f" or a smaller grad_clip (now {clip:g})"))
        self._end("diverged", f"diverged: {what}; {hint}.{self._on_disk()}", checkpoint=False)

    def _on_disk(self) -> str:
        """What the output folder holds, as a sentence starting with a space (empty without an out_dir)."""
        if self.out_dir is None:
            return ""
        if self.last_checkpoint is None:
            return f" No checkpoint had been written yet; the history is in {self.out_dir / 'run.json'}."
        return (f" The last good checkpoint ({self.last_checkpoint} of {self.train_cfg.steps} updates) is "
                f"{self.out_dir / 'checkpoint.pt'}; the history is in {self.out_dir / 'run.json'}.")

    def _end(self, status: str, message: str, *, checkpoint: bool) -> None:
        self.record.status, self.record.message = status, message
        (logger.warning if status in ("diverged", "interrupted") else logger.info)("run %s: %s", status, message)
        self._save_outputs(checkpoint=checkpoint)

    def _save_outputs(self, *, checkpoint: bool) -> None:
        """Write run.json (and checkpoint.pt); non-finite weights turn the run "diverged" instead."""
        if self.out_dir is None:
            return
        if checkpoint:
            bad = self._nonfinite_parameter()
            if bad is None:
                self.save_checkpoint(self.out_dir / "checkpoint.pt")
                self.last_checkpoint = self.step_count
            else:
                self.record.status = "diverged"
                self.record.message = (f"diverged: parameter {bad} became non-finite by update {self.step_count}; "
                                       f"try a lower lr or gradient clipping.{self._on_disk()}")
                logger.warning("run diverged: %s", self.record.message)
        if self.record.status == "running":
            held = ("no checkpoint yet" if self.last_checkpoint is None
                    else f"checkpoint.pt holds {self.last_checkpoint} updates")
            self.record.message = f"{self.step_count} of {self.train_cfg.steps} updates done; {held}"
        self.record.save(self.out_dir / "run.json")

    def _nonfinite_parameter(self) -> str | None:
        """Name of the first parameter holding a NaN or infinity, or None."""
        for name, param in self.model.named_parameters():
            if not torch.isfinite(param).all():
                return name
        return None

    def save_checkpoint(self, path: str | os.PathLike[str]) -> Path:
        """Save everything needed to continue this run exactly, atomically (old file kept on error).

        Contents (loadable with ``torch.load(path, weights_only=True)``): ``format``, ``model_config`` and
        ``train_config`` (JSON strings), ``record`` (the run record as JSON text, history included), ``step``,
        ``model`` and ``optimizer`` state dicts, ``rng`` (``torch``: CPU RNG state, ``cuda`` when on CUDA,
        ``batch``: the batch generator's state, all uint8 tensors), ``probes`` (JSON string of the state of
        probes that have ``state_dict()``).

        Returns:
            The path written.
        Raises:
            RuntimeError: a parameter is non-finite (a bad state is never written).
        """
        bad = self._nonfinite_parameter()
        if bad is not None:
            raise RuntimeError(f"refusing to save a checkpoint: parameter {bad} has non-finite values")
        probe_states = {p.name: p.state_dict() for p in self.probes if callable(getattr(p, "state_dict", None))}
        state = {
            "format": CHECKPOINT_FORMAT,
            "model_config": json.dumps(self.model_cfg.to_dict()),
            "train_config": json.dumps(self.train_cfg.to_dict()),
            "record": self.record.to_json(),
            "step": self.step_count,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": {"torch": self._rng["cpu"], "batch": self._batch_gen.get_state(),
                    **({"cuda": self._rng["cuda"]} if "cuda" in self._rng else {})},
            "probes": to_json_text(probe_states),
        }
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return atomic_write(path, buffer.getvalue())

    @classmethod
    def resume(
        cls,
        path: str | os.PathLike[str] | Checkpoint,
        data: Any,
        *,
        probes: Sequence[Probe] = (),
        callbacks: Sequence[Callable[[Trainer, dict[str, Any]], None]] = (),
        out_dir: str | os.PathLike[str] | None = None,
        steps: int | None = None,
    ) -> Trainer:
        """Continue a run from a checkpoint written by :meth:`save_checkpoint`.

        Restores model, optimizer, step count, history, record config (incl. extra entries), RNG states and
        the state of probes (matched by name) that have ``load_state_dict``. On CPU the continued loss
        curve is bit-for-bit the one an uninterrupted run would have produced. The status becomes "running"
        (or stays "finished").

        Args:
            path: the checkpoint file, or a :class:`Checkpoint` from :func:`load_checkpoint`.
            data: the same token data as the original run (a different ``describe()`` is logged as a warning:
                the curve will not match). probes, callbacks, out_dir: as in :class:`Trainer` (pass the same
                probes to keep the same history columns).
            steps: a new total number of updates, >= the updates already done (None = the saved total). A
                larger total extends the run, also a finished one: the updates still to do follow the
                learning-rate schedule of the new total (:func:`lr_at` decays over ``steps``), so the
                extension equals the tail of an uninterrupted run of the new length exactly when the
                schedule does not depend on the total (``min_lr_ratio=1``). ``config["extended_from_steps"]``
                lists the totals the run had before each extension (so the results store keeps an extended
                run apart from a fresh one).
        Raises:
            ValueError: a damaged or foreign checkpoint (:class:`CheckpointError`, naming the file), a
                ``steps`` below the updates done, or configs / data that do not fit (see :class:`Trainer`).
        """
        ckpt = path if isinstance(path, Checkpoint) else load_checkpoint(path)
        saved, train_cfg = ckpt.record, ckpt.train_cfg
        extra = {k: v for k, v in saved.config.items() if k not in CONFIG_KEYS}
        if steps is not None and steps != train_cfg.steps:
            steps = _check_int("steps", steps, 1)
            if steps < ckpt.step:
                raise ValueError(f"steps={steps} is below the {ckpt.step} updates the checkpoint {ckpt.path} "
                                 "already holds; give at least that many")
            extra["extended_from_steps"] = [*extra.get("extended_from_steps", []), train_cfg.steps]
            train_cfg = replace(train_cfg, steps=steps)
        trainer = cls(ckpt.model_cfg, train_cfg, data, probes=probes, callbacks=callbacks, out_dir=out_dir,
                      extra_config=extra)
        for part in ("data", "probes"):
            if saved.config.get(part) != trainer.record.config[part]:
                logger.warning("resume: %s differs from the checkpoint's (%s vs %s); the continued curve will "
                               "not match the original run", part, trainer.record.config[part], saved.config.get(part))
        state = ckpt.state
        try:
            trainer.model.load_state_dict(state["model"])
            trainer.optimizer.load_state_dict(state["optimizer"])
            trainer._rng["cpu"] = state["rng"]["torch"]
            if "cuda" in trainer._rng:
                if "cuda" in state["rng"]:
                    trainer._rng["cuda"] = state["rng"]["cuda"]
                else:
                    logger.warning("resume: the checkpoint has no CUDA RNG state; dropout will differ from the "
                                   "original")
            trainer._batch_gen.set_state(state["rng"]["batch"])
            probe_states = json.loads(state.get("probes", "{}"))
            for probe in trainer.probes:
                if probe.name in probe_states and callable(getattr(probe, "load_state_dict", None)):
                    probe.load_state_dict(probe_states[probe.name])
        except (RuntimeError, ValueError, TypeError, KeyError) as error:
            raise CheckpointError(f"{ckpt.path} is damaged: its state does not fit its own configuration "
                                  f"({_first_line(error)})") from None
        trainer.step_count = ckpt.step
        trainer.history.clear()
        trainer.history.update(saved.history)  # same dict object as trainer.record.history
        done = saved.status == "finished" and ckpt.step >= train_cfg.steps
        trainer.record.status = "finished" if done else "running"
        trainer.record.environment["resumed_from"] = str(ckpt.path)
        if trainer.out_dir is not None and Path(ckpt.path).resolve() == (trainer.out_dir / "checkpoint.pt").resolve():
            trainer.last_checkpoint = ckpt.step
        return trainer

    # ------------------------------------------------------------------------------------- evaluation
    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean cross-entropy [nats] over the ``eval_iters`` fixed evaluation batches.

        The batches are the same at every call (evenly spaced windows of the eval split, see
        :func:`spanviz.data.iter_eval_batches`); the model is in eval mode without gradients, and its
        previous mode is restored.
        """
        was_training = self.model.training
        self.model.eval()
        try:
            losses = []
            for x, y in self.eval_batches:
                with self._autocast():
                    _, loss = self.model(x, y)
                losses.append(loss.float())
            return torch.stack(losses).mean().item()
        finally:
            self.model.train(was_training)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used: missing, damaged, or not a spanviz checkpoint (names the file)."""


CHECKPOINT_KEYS = ("format", "model_config", "train_config", "record", "step", "model", "optimizer", "rng")


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint file read and checked by :func:`load_checkpoint`; nothing is built from it yet.

    Attributes:
        path: the file. model_cfg, train_cfg: the run's configs. record: its run record (history up to
        ``step``). step: updates done. state: the raw contents (``model`` and ``optimizer`` state dicts,
        ``rng``, ``probes``; see :meth:`Trainer.save_checkpoint`).
    """

    path: Path
    model_cfg: GPTConfig
    train_cfg: TrainConfig
    record: RunRecord
    step: int
    state: dict[str, Any]


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__


def load_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Read and check a checkpoint written by :meth:`Trainer.save_checkpoint` (``weights_only=True``).

    Cheap (the file of a tiny GPT is small) and builds nothing, so a command can check a checkpoint before it
    loads any data.

    Raises:
        CheckpointError: one sentence naming the file and what is wrong: missing, empty, unreadable
            (truncated, random bytes, a pickle ``weights_only`` refuses), not a spanviz checkpoint, or an entry
            missing or of the wrong type.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint there" + (" (it is a folder)" if path.is_dir() else ""))
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path} is empty (a damaged checkpoint)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - torch.load raises many types for damaged files; all mean "unreadable"
        raise CheckpointError(f"{path} is damaged or not a checkpoint; torch.load says {_first_line(error)}") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not a spanviz checkpoint (format {CHECKPOINT_FORMAT!r})")
    missing = [k for k in CHECKPOINT_KEYS if k not in state]
    if missing:
        raise CheckpointError(f"{path} is damaged: entries {missing} are missing")
    try:
        model_cfg = GPTConfig.from_dict(json.loads(state["model_config"]))
        train_cfg = TrainConfig.from_dict(json.loads(state["train_config"]))
        record = RunRecord.from_json(state["record"])
        step = state["step"]
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= train_cfg.steps:
            raise ValueError(f"step must be an integer in [0, {train_cfg.steps}], got {step!r}")
        if len(record.history.get("step", [])) < step:
            raise ValueError(f"its history has fewer rows than its {step} updates")
        for key in ("model", "optimizer", "rng"):
            if not isinstance(state[key], dict):
                raise ValueError(f"{key!r} must be a dict, got {type(state[key]).__name__}")
    except (ValueError, TypeError) as error:
        raise CheckpointError(f"{path} is damaged: {_first_line(error)}") from None
    return Checkpoint(path, model_cfg, train_cfg, record, step, state)


def _check_data(data: Any, model_cfg: GPTConfig) -> None:
    """ValueError unless ``data`` looks like a TokenData that fits ``model_cfg``."""
    missing = [a for a in ("train_ids", "eval_ids", "vocab_size", "describe") if not hasattr(data, a)]
    if missing:
        raise ValueError(f"data must be a spanviz.data.TokenData (train_ids, eval_ids, vocab_size, describe()); "
                         f"{type(data).__name__} lacks {missing}")
    if data.vocab_size > model_cfg.vocab_size:
        raise ValueError(f"model vocab_size={model_cfg.vocab_size} is smaller than the data's vocab_size="
                         f"{data.vocab_size}; use GPTConfig(vocab_size={data.vocab_size}, ...)")
    T = model_cfg.context_length
    for name in ("train_ids", "eval_ids"):
        ids = getattr(data, name)
        if not isinstance(ids, Tensor) or ids.dim() != 1 or ids.is_floating_point() or ids.is_complex():
            raise ValueError(f"data.{name} must be a 1-D integer tensor, got {getattr(ids, 'shape', type(ids))}")
        if ids.numel() < T + 1:
            raise ValueError(f"data.{name} has {ids.numel()} tokens; context_length={T} needs at least {T + 1}")


__all__ = [
    "CORE_KEYS", "DTYPES", "STATUSES", "Checkpoint", "CheckpointError", "Probe", "RunRecord", "TrainConfig",
    "Trainer", "atomic_write", "check_memory", "check_runnable", "count_parameters", "default_warmup_steps",
    "describe_probe", "environment", "estimate_memory", "load_checkpoint", "lr_at", "resolve_device", "run_config",
    "to_json_text",
]
