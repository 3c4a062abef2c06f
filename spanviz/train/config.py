"""How to train: :class:`TrainConfig`, the learning-rate schedule :func:`lr_at`, and the checks of a run that
need this machine (device, precision, memory) — everything decided before a single tensor is built."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import psutil
import torch
from torch import Tensor

from spanviz.model import GPTConfig
from spanviz.validators import check_choice, check_fields, check_float, check_int

DTYPES = ("float32", "bfloat16")
MAX_OPTIMIZER_SCALE = 1e38
"""Largest factor AdamW may apply to a float32 weight in one update (float32's largest number is 3.4e38):
lr * lr_spike_factor / (1 - beta1) and lr * lr_spike_factor * weight_decay stay below it."""
DEVICE_TYPES = ("cpu", "cuda", "mps")


def _check_device_name(name: str, value: Any) -> str:
    if value == "auto":
        return value
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        device = None
    if device is None or device.type not in DEVICE_TYPES:
        raise ValueError(f"{name} must be 'auto', 'cpu', 'cuda', 'cuda:<index>' or 'mps', got {value!r}")
    if device.type in ("cpu", "mps"):  # one CPU, one MPS device: "cpu:0" is "cpu" (one setting, one store key)
        return device.type
    return str(device)


def default_warmup_steps(steps: int) -> int:
    """The warm-up length used when ``TrainConfig.warmup_steps`` is None: 10 % of ``steps``, at most 100."""
    return min(100, steps // 10)


@dataclass(frozen=True)
class TrainConfig:
    """How to train: optimizer, schedule, evaluation, precision, checkpoints, seed. Validated on construction.

    The command line (``spanviz train``) parses these fields with tyro: their defaults, types and the
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
        lr_spike_start: first update of the spike, >= 0 (< steps when the spike is on; stored as 0 when it is
            off).
        lr_spike_steps: spike length [updates], >= 0 (>= 1 when the spike is on; stored as 0 when it is off).
            The peak learning rate lr * lr_spike_factor must keep AdamW's float32 arithmetic finite:
            lr * lr_spike_factor / (1 - beta1) and lr * lr_spike_factor * weight_decay <= 1e38.

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
    dtype: Literal[DTYPES] = "float32"
    checkpoint_interval: int | None = None
    lr_spike_factor: float = 1.0
    lr_spike_start: int = 0
    lr_spike_steps: int = 0

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)  # normalised values: 3 → 3.0, so equal configs hash equal

        put("steps", check_int("steps", self.steps, 1))
        put("batch_size", check_int("batch_size", self.batch_size, 1))
        put("lr", check_float("lr", self.lr, 0.0, low_open=True))
        warmup = default_warmup_steps(self.steps) if self.warmup_steps is None else self.warmup_steps
        put("warmup_steps", check_int("warmup_steps", warmup, 0, self.steps))
        put("min_lr_ratio", check_float("min_lr_ratio", self.min_lr_ratio, 0.0, 1.0))
        put("weight_decay", check_float("weight_decay", self.weight_decay, 0.0))
        if self.grad_clip is not None:
            clip = check_float("grad_clip", self.grad_clip, 0.0)
            put("grad_clip", clip if clip > 0 else None)
        put("beta1", check_float("beta1", self.beta1, 0.0, 1.0, high_open=True))
        put("beta2", check_float("beta2", self.beta2, 0.0, 1.0, high_open=True))
        put("eval_interval", check_int("eval_interval", self.eval_interval, 1))
        put("eval_iters", check_int("eval_iters", self.eval_iters, 1))
        put("seed", check_int("seed", self.seed, 0, 2**63 - 1))
        put("device", _check_device_name("device", self.device))
        check_choice("dtype", self.dtype, DTYPES)
        if self.dtype == "bfloat16" and self.device != "auto" and torch.device(self.device).type != "cuda":
            raise ValueError(f"dtype='bfloat16' needs a CUDA device (bf16 autocast is CUDA only), "
                             f"got device={self.device!r}; use dtype='float32'")
        if self.checkpoint_interval is not None:
            put("checkpoint_interval", check_int("checkpoint_interval", self.checkpoint_interval, 0))
        put("lr_spike_factor", check_float("lr_spike_factor", self.lr_spike_factor, 1.0))
        put("lr_spike_start", check_int("lr_spike_start", self.lr_spike_start, 0))
        put("lr_spike_steps", check_int("lr_spike_steps", self.lr_spike_steps, 0))
        if self.lr_spike_factor == 1.0:  # no spike: its start and length mean nothing (one setting, one store key)
            put("lr_spike_start", 0)
            put("lr_spike_steps", 0)
        else:
            if self.lr_spike_start >= self.steps:
                raise ValueError(f"lr_spike_start must be < steps={self.steps} when the spike is on "
                                 f"(lr_spike_factor={self.lr_spike_factor}), got {self.lr_spike_start}")
            if self.lr_spike_steps < 1:
                raise ValueError(f"lr_spike_steps must be >= 1 when the spike is on "
                                 f"(lr_spike_factor={self.lr_spike_factor}), got {self.lr_spike_steps}")
        # AdamW's first step moves a weight by up to lr / (1 - beta1) and scales it by 1 - lr * weight_decay,
        # both as float32: beyond float32's range the optimizer itself fails, so refuse it here.
        peak = self.lr * self.lr_spike_factor
        largest = max(peak / (1.0 - self.beta1), peak * self.weight_decay)
        if not largest <= MAX_OPTIMIZER_SCALE:
            raise ValueError(f"the peak learning rate lr * lr_spike_factor = {peak:g} (lr={self.lr:g}, "
                             f"lr_spike_factor={self.lr_spike_factor:g}) is too large: AdamW would scale a weight by "
                             f"{largest:g} (lr / (1 - beta1), lr * weight_decay), beyond float32's range; keep them "
                             f"below {MAX_OPTIMIZER_SCALE:g}")

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
        return cls(**check_fields(cls, d))


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
    step = check_int("step", step, 0)
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


def available_memory(device: torch.device) -> int:
    """Free memory on ``device`` [bytes]: CUDA's free memory, else the system's available RAM."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
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
    if need > free:
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


def check_data(data: Any, model_cfg: GPTConfig) -> None:
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
