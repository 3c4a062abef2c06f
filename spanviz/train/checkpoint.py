"""Checkpoint files: everything needed to continue a run exactly — weights, optimizer, RNG states, history, probe
state — in one file, written atomically, read back with ``torch.load(weights_only=True)`` and checked before
anything is built from it.

This module is file I/O and checks of plain state, as nanoGPT's ``torch.save`` of a dict of state dicts and
nanochat's ``save_checkpoint(dir, step, model_data, optimizer_data, meta)``: :func:`save_checkpoint` writes a
state dict (:meth:`Trainer.state_dict <spanviz.train.Trainer.state_dict>`), :func:`load_checkpoint` reads and
checks one into a :class:`Checkpoint`; it knows no trainer. When a run writes its checkpoint, and what a resume
does with one, is the trainer's business (:class:`spanviz.train.Trainer`); which files a run's folder holds is
:class:`~spanviz.train.folder.RunFolder`'s.

A checkpoint is written at every evaluation by default (``TrainConfig.checkpoint_interval``) and never from
non-finite weights, so after a divergence the last good checkpoint stays on disk; a checkpoint with non-finite
weights, an incomplete optimizer state or unusable RNG states is refused on loading. On CPU a run resumed from
a checkpoint with the run's torch thread count continues the very same loss curve, bit for bit.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from spanviz.files import atomic_write
from spanviz.model import GPTConfig
from spanviz.train.config import TrainConfig
from spanviz.train.record import CONFIG_KEYS, RunRecord
from spanviz.validators import check_int

CHECKPOINT_FORMAT = "spanviz-checkpoint-1"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used: missing, damaged, or not a spanviz checkpoint (names the file)."""


CHECKPOINT_KEYS = ("format", "model_config", "train_config", "record", "step", "model", "optimizer", "rng")


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint file read and checked by :func:`load_checkpoint`; nothing is built from it yet.

    Attributes:
        path: the file. model_cfg, train_cfg: the run's configs. record: its run record (history up to
        ``step``). step: updates done. state: the raw contents (``model`` and ``optimizer`` state dicts,
        ``rng``, ``probes``; see :meth:`Trainer.state_dict <spanviz.train.Trainer.state_dict>`).
    """

    path: Path
    model_cfg: GPTConfig
    train_cfg: TrainConfig
    record: RunRecord
    step: int
    state: dict[str, Any]


def first_line(error: BaseException) -> str:
    """One line for an error message: the first line of ``error`` (with its type unless it is a plain ValueError)."""
    text = str(error).strip().splitlines()
    if type(error) is ValueError and text:  # our own checks: the sentence says it all
        return text[0][:300]
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__


def load_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Read and check a checkpoint written by :func:`save_checkpoint` (``weights_only=True``).

    Cheap (the file of a tiny GPT is small) and builds nothing, so a command can check a checkpoint before it
    loads any data.

    Raises:
        CheckpointError: one sentence naming the file and what is wrong: missing, empty, unreadable
            (truncated, random bytes, a pickle ``weights_only`` refuses), not a spanviz checkpoint, an entry
            missing or of the wrong type, non-finite weights (:func:`check_weights`), an incomplete or non-finite
            optimizer state (:func:`check_optimizer`), RNG states no generator accepts (:func:`check_rng`).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint there" + (" (it is a folder)" if path.is_dir() else ""))
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path} is empty (a damaged checkpoint)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - torch.load raises many types for damaged files; all mean "unreadable"
        raise CheckpointError(f"{path} is damaged or not a checkpoint; torch.load says {first_line(error)}") from None
    model_cfg, train_cfg, record, step = check_state(state, str(path))
    return Checkpoint(path, model_cfg, train_cfg, record, step, state)


def check_state(state: Any, where: str, model: torch.nn.Module | None = None,
                optimizer: torch.optim.Optimizer | None = None) -> tuple[GPTConfig, TrainConfig, RunRecord, int]:
    """Every check of a trainer state (a checkpoint's contents, :meth:`Trainer.state_dict`), for both doors —
    :func:`load_checkpoint` and :meth:`Trainer.load_state_dict` — before anything is changed. Given ``model`` and
    ``optimizer``, the state must fit them too (the same names and shapes, the same parameter groups).

    Returns:
        ``(model_cfg, train_cfg, record, step)``.
    Raises:
        CheckpointError (a ValueError): one sentence naming ``where`` and what is wrong (see :func:`load_checkpoint`).
    """
    if not isinstance(state, Mapping) or state.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{where} is not a spanviz checkpoint (format {CHECKPOINT_FORMAT!r})")
    missing = [k for k in CHECKPOINT_KEYS if k not in state]
    if missing:
        raise CheckpointError(f"{where} is damaged: entries {missing} are missing")
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
        check_weights(state["model"])
        check_optimizer(state["optimizer"], step)
        check_rng(state["rng"])
    except (ValueError, TypeError, KeyError) as error:
        raise CheckpointError(f"{where} is damaged: {first_line(error)}") from None
    if model is not None:
        want = {name: tuple(t.shape) for name, t in model.state_dict().items()}
        have = {name: tuple(t.shape) for name, t in state["model"].items()}
        if want != have:
            wrong = sorted(set(want) ^ set(have)) or sorted(n for n in want if want[n] != have[n])
            raise CheckpointError(f"{where} does not fit this trainer (weights: names or shapes differ at "
                                  f"{wrong[:3]})")
    if optimizer is not None and [len(g["params"]) for g in state["optimizer"]["param_groups"]] != [
            len(g["params"]) for g in optimizer.param_groups]:
        raise CheckpointError(f"{where} does not fit this trainer (other optimizer parameter groups)")
    return model_cfg, train_cfg, record, step


def _nonfinite(tensor: Any) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())


def check_weights(model_state: dict[str, Any]) -> None:
    """ValueError unless every entry of a model state dict is a tensor and every float tensor is finite (a
    checkpoint is never written from non-finite weights, so NaN or infinity means damage)."""
    for name, value in model_state.items():
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"model entry {name!r} is a {type(value).__name__}, not a tensor")
        if _nonfinite(value):
            raise ValueError(f"weight {name} holds non-finite values (NaN or infinity); a checkpoint is never "
                             "written from such weights")


def check_optimizer(optimizer_state: dict[str, Any], step: int) -> None:
    """ValueError unless an AdamW state dict is complete: ``param_groups`` listing parameter ids, and after the
    first update (``step`` >= 1) a state for every parameter with finite ``exp_avg``, ``exp_avg_sq`` and ``step``
    — an emptied or partial state would resume with reset moments, a different curve."""
    groups, states = optimizer_state.get("param_groups"), optimizer_state.get("state")
    if not isinstance(groups, list) or not all(isinstance(g, dict) and isinstance(g.get("params"), list)
                                               for g in groups):
        raise ValueError("optimizer param_groups must be a list of groups listing their parameters")
    if not isinstance(states, dict):
        raise ValueError(f"optimizer state must be a dict, got {type(states).__name__}")
    if step == 0:
        return
    for index in (i for group in groups for i in group["params"]):
        entry = states.get(index)
        if not isinstance(entry, dict):
            raise ValueError(f"the optimizer state of parameter {index} is missing after {step} updates (its moments "
                             "would restart from zero)")
        for key in ("step", "exp_avg", "exp_avg_sq"):
            if not isinstance(entry.get(key), torch.Tensor):
                raise ValueError(f"the optimizer state of parameter {index} lacks its {key!r} tensor")
            if _nonfinite(entry[key]):
                raise ValueError(f"the optimizer state {key!r} of parameter {index} holds non-finite values")


def check_rng(rng: dict[str, Any]) -> None:
    """ValueError unless the RNG states (``torch``, ``batch``; ``cuda`` is checked when restored on CUDA) are states
    a CPU generator accepts."""
    for key in ("torch", "batch"):
        value = rng.get(key)
        if not isinstance(value, torch.Tensor) or value.dtype != torch.uint8:
            raise ValueError(f"rng[{key!r}] must be a uint8 tensor (a generator state), got "
                             f"{getattr(value, 'dtype', type(value).__name__)}")
        try:
            torch.Generator().set_state(value)
        except (RuntimeError, ValueError, TypeError) as error:
            raise ValueError(f"rng[{key!r}] is not a generator state ({first_line(error)})") from None


def nonfinite_parameter(model: nn.Module) -> str | None:
    """Name of the first parameter of ``model`` holding a NaN or infinity, or None."""
    for name, param in model.named_parameters():
        if not torch.isfinite(param).all():
            return name
    return None


def save_checkpoint(path: str | os.PathLike[str], state: Mapping[str, Any]) -> Path:
    """Write ``state`` (a trainer's :meth:`~spanviz.train.Trainer.state_dict`: a dict of state dicts) to ``path``
    with ``torch.save``, atomically: serialised first, then put in place, so on any error the old file stays.
    ``torch.load(path, weights_only=True)`` (or :func:`load_checkpoint`) reads it back.

    Returns:
        The path written.
    Raises:
        RuntimeError: a weight in ``state["model"]`` is non-finite (a bad state is never written).
        OSError: the file cannot be written (e.g. a full disk); the old file is kept.
    """
    bad = next((name for name, value in state["model"].items() if _nonfinite(value)), None)
    if bad is not None:
        raise RuntimeError(f"refusing to save a checkpoint: parameter {bad} has non-finite values")
    buffer = io.BytesIO()
    torch.save(dict(state), buffer)
    return atomic_write(path, buffer.getvalue())


def resumed_configs(ckpt: Checkpoint, steps: int | None) -> tuple[TrainConfig, dict[str, Any]]:
    """The train config and the extra record config of a run resumed from ``ckpt`` with a new total ``steps``.

    A larger total extends the run, also a finished one: the updates still to do follow the learning-rate schedule
    of the new total (:func:`~spanviz.train.config.lr_at` decays over ``steps``), so the extension equals the tail
    of an uninterrupted run of the new length exactly when the schedule does not depend on the total
    (``min_lr_ratio=1``). ``config["extended_from_steps"]`` lists the totals the run had before each extension (so
    the results store keeps an extended run apart from a fresh one).

    Raises:
        ValueError: ``steps`` not an integer >= 1, or below the updates the checkpoint holds.
    """
    train_cfg = ckpt.train_cfg
    extra = {k: v for k, v in ckpt.record.config.items() if k not in CONFIG_KEYS}
    if steps is not None and steps != train_cfg.steps:
        steps = check_int("steps", steps, 1)
        if steps < ckpt.step:
            raise ValueError(f"steps={steps} is below the {ckpt.step} updates the checkpoint {ckpt.path} "
                             "already holds; give at least that many")
        extra["extended_from_steps"] = [*extra.get("extended_from_steps", []), train_cfg.steps]
        train_cfg = replace(train_cfg, steps=steps)
    return train_cfg, extra


def check_moments(optimizer: torch.optim.Optimizer) -> None:
    """ValueError unless every AdamW moment (``exp_avg``, ``exp_avg_sq``) has its parameter's shape (a loaded
    optimizer state of another model)."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            moments = optimizer.state.get(param, {})
            for key in ("exp_avg", "exp_avg_sq"):
                if key in moments and moments[key].shape != param.shape:
                    raise ValueError(f"optimizer {key} of shape {tuple(moments[key].shape)} for a parameter of "
                                     f"shape {tuple(param.shape)}")
