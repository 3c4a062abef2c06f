"""What a run produced: the :class:`RunRecord` (config, environment, history, status) and the history's
bookkeeping, in one place: :func:`append_rows` is the only code that grows a history (the trainer and the
panels' runner both call it).

A history is a dict of equal-length lists, one entry per optimizer update (row); ``None`` marks "not measured at
this update". Saved as strict JSON: non-finite floats (the loss of a diverged step) become the strings
``"nan"``, ``"inf"``, ``"-inf"`` and are read back as floats.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from spanviz.files import UnreadableFileError, atomic_write, read_bounded
from spanviz.provenance import code_identity

if TYPE_CHECKING:  # annotations only
    from spanviz.model import GPTConfig
    from spanviz.train.config import TrainConfig
    from spanviz.train.protocols import Probe

logger = logging.getLogger(__name__)

STATUSES = ("running", "finished", "stopped", "diverged", "interrupted")
CORE_KEYS = ("step", "train_loss", "val_loss", "lr", "grad_norm", "tokens_per_s")
"""History keys every row has; probe keys must differ from these.

Row ``step`` = s is the s-th optimizer update, 0-based (s = 0 … steps − 1). ``train_loss`` is the loss of that
update's batch (before the update), ``lr`` the learning rate it used, ``grad_norm`` the global L2 norm of the
gradients *before* clipping, ``val_loss`` the mean loss on the fixed evaluation batches measured *after* the
update (``None`` on rows without evaluation), ``tokens_per_s`` the training throughput of that update (batch,
forward, backward, optimizer; evaluation and probes excluded)."""
CONFIG_KEYS = ("model", "train", "data", "probes")
"""Keys of ``RunRecord.config`` set by the trainer; ``extra_config`` may add others (e.g. ``variant``)."""
RECORD_FORMAT = "spanviz-run-1"
MAX_RECORD_FILE_BYTES = 64 * 2**20
"""Largest ``run.json`` :meth:`RunRecord.load` reads [bytes] (the results store's limit for one run)."""
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def append_rows(history: dict[str, list[Any]], rows: Sequence[Mapping[str, Any]]) -> None:
    """Append row dicts to a history of equal-length lists, filling ``None`` for keys a row lacks.

    A key seen for the first time is back-filled with ``None`` for the earlier rows, so all lists keep the
    same length.
    """
    for row in rows:
        n = len(next(iter(history.values()))) if history else 0
        for key in row:
            if key not in history:
                history[key] = [None] * n
        for key, column in history.items():
            column.append(row.get(key))


def _encode_nonfinite(obj: Any) -> Any:
    """Replace non-finite floats by the strings "nan", "inf", "-inf" (JSON has no NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, Mapping):
        return {k: _encode_nonfinite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encode_nonfinite(v) for v in obj]
    return obj


_PLAIN = frozenset({float, int, bool, type(None)})
"""Types of a history column that holds nothing to decode (most columns: a number or None per row)."""


def _decode_nonfinite(obj: Any) -> Any:
    """Inverse of :func:`_encode_nonfinite` (applied to histories only)."""
    if isinstance(obj, list) and set(map(type, obj)) <= _PLAIN:  # a plain column: copied, not walked in Python
        return list(obj)
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
        try:  # the common case, nothing non-finite: json's C encoder checks every float, no copy is made
            return json.dumps(obj, allow_nan=False)
        except (ValueError, TypeError):  # a NaN or inf (or a Mapping that is not a dict): encoded first
            return json.dumps(_encode_nonfinite(obj), allow_nan=False)
    except TypeError as error:
        raise ValueError(f"not JSON-serialisable: {error}") from error


@dataclass
class RunRecord:
    """Everything one training run produced, as plain JSON-able data.

    Attributes:
        config: ``{"model": GPTConfig dict, "train": TrainConfig dict, "data": data.describe() (incl. the
            splits used), "probes": [describe_probe(...)], ...}`` plus any extra entries (e.g. ``variant``,
            ``seed``, ``tags`` from :func:`spanviz.experiments.core.run_grid`). The results store keys runs by it.
        environment: torch / python / platform / spanviz versions, the git commit and source digest of the code
            (:func:`environment`), device and its name, threads, start time.
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
        values = [float(v) for v in self.history.get("val_loss", [])
                  if isinstance(v, float) or (isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**63)]
        values = [v for v in values if math.isfinite(v)]
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
            history={k: _decode_nonfinite(v) for k, v in history.items()},  # each a new list (checked above)
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
            ValueError: the file cannot be read (missing, not a regular file, over :data:`MAX_RECORD_FILE_BYTES`;
                checked with ``stat`` before reading) or is not a run record (the message names the file).
        """
        try:
            return cls.from_json(read_bounded(path, MAX_RECORD_FILE_BYTES))
        except UnreadableFileError:
            raise
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
    """Where and with which code a run ran: versions, the code's identity (:func:`spanviz.provenance.code_identity`:
    spanviz version, git commit or "not a git checkout", ``git_dirty``, ``source_sha256``), platform, device (name),
    CPU threads, start time (UTC, ISO 8601). No path of the machine."""
    if device.type == "cuda":
        device_name = torch.cuda.get_device_name(device)
    else:
        device_name = platform.processor() or platform.machine() or device.type
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        **code_identity(),
        "device": str(device),
        "device_name": device_name,
        "num_threads": torch.get_num_threads(),
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }




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


def to_json_value(value: Any, where: str) -> Any:
    """``value`` as plain JSON types (tensors and numpy values via ``tolist()``); ValueError otherwise."""
    if isinstance(value, (Tensor, np.ndarray, np.generic)):
        value = value.tolist() if not isinstance(value, Tensor) else value.detach().cpu().tolist()
    if _is_scalar(value):
        return value
    if isinstance(value, Mapping):
        return {str(k): to_json_value(v, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(v, where) for v in value]
    raise ValueError(f"{where} is a {type(value).__name__}, which is not JSON-able; return numbers, strings, "
                     "lists or dicts")


def note_threads(env: dict[str, Any], step: int) -> None:
    """Record in a run's ``environment`` the torch threads its updates really use, before update ``step``.

    ``env["num_threads"]`` is the count of the first update; a later call that trains with another count (a
    continued or resumed run) is listed in ``env["num_threads_changes"]`` as ``[update, threads]`` — on CPU the
    curve is bit-for-bit reproducible only with the same count (a warning is logged).
    """
    threads = torch.get_num_threads()
    if step == 0:
        env["num_threads"] = threads
        return
    changes = env.get("num_threads_changes") or []
    current = changes[-1][1] if changes else env.get("num_threads")
    if threads != current:
        env["num_threads_changes"] = [*changes, [step, threads]]
        logger.warning("the run continues with %d torch threads after %d updates with %s: on CPU the curve can "
                       "differ in the last digits from one trained with a single count", threads, step, current)
