"""What identifies a stored run: :func:`config_key`, the hash of its configuration, and where runs are kept."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spanviz.settings import spanviz_home

STORABLE = ("finished", "diverged")
"""Statuses :meth:`ResultsStore.put` accepts."""
KEY_RE = re.compile(r"^[0-9a-f]{64}$")
"""A store key: 64 lowercase hex digits."""


def default_root() -> Path:
    """``$SPANVIZ_HOME/runs`` (``SPANVIZ_HOME`` defaults to ``~/.cache/spanviz``), read at each call."""
    return spanviz_home() / "runs"


def config_key(config: Mapping[str, Any]) -> str:
    """The store key of a run configuration: 64 hex digits (see the module docstring).

    Raises:
        ValueError: ``config`` is not a mapping or holds something JSON cannot represent.
    """
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a mapping (a RunRecord.config), got {type(config).__name__}")
    identity = copy.deepcopy(dict(config))
    if isinstance(identity.get("data"), Mapping):
        identity["data"] = {k: v for k, v in identity["data"].items() if k != "source"}
    if isinstance(identity.get("train"), Mapping) and "checkpoint_interval" in identity["train"]:
        # How often a run was checkpointed does not change its curve: every cadence gets the key it had
        # when checkpoints were only written at the end (0), so records stored before stay valid.
        identity["train"] = {**identity["train"], "checkpoint_interval": 0}
    try:
        text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"config is not JSON-serialisable: {error}") from error
    return hashlib.sha256(text.encode("ascii")).hexdigest()
