"""The history of a stored run, checked before the store writes, reads, exports or imports it: what the notebooks'
panels replay must be curves (:func:`check_history`).

Rules: ``history`` maps names to lists of one length; ``"step"`` holds integers in ``[0, MAX_STEP]``, strictly
increasing; a finished run has at least one; every other entry holds numbers or nulls (NaN and ±inf, which a
diverged run records, are numbers), and an entry named ``*_per_layer`` / ``*_per_head`` (a probe's per-layer or
per-head values) may hold lists of them, nested at most two deep. Booleans, text and objects are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_STEP = 10**9
"""Largest step number [updates] in a stored history."""
NESTED = ("_per_layer", "_per_head")
"""Endings of history names whose values may be lists (per layer, per layer and head)."""


_NUMBER_OR_NULL = frozenset({int, float, type(None)})
"""Exact types of a column that is all numbers or nulls (most columns), accepted without a walk in Python."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_value(value: Any, depth: int) -> bool:
    if value is None or _is_number(value):
        return True
    return depth > 0 and isinstance(value, list) and all(_check_value(v, depth - 1) for v in value)


def check_history(history: Any, status: str, where: str) -> None:
    """Refuse a history the panels cannot replay (see the module docstring).

    Raises:
        ValueError: naming ``where``, the entry, the position and what is allowed.
    """
    if not isinstance(history, Mapping):
        raise ValueError(f"{where}: history must be an object of lists, got {type(history).__name__}")
    steps = history.get("step")
    if not isinstance(steps, list):
        raise ValueError(f"{where}: history has no 'step' list (the update number of each row)")
    if status == "finished" and not steps:
        raise ValueError(f"{where}: a finished run with an empty history (no step recorded)")
    for i, step in enumerate(steps):
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
            raise ValueError(f"{where}: history.step[{i}]={step!r:.40}: must be an integer in [0, {MAX_STEP:,}]")
        if i and step <= steps[i - 1]:
            raise ValueError(f"{where}: history.step[{i}]={step} after {steps[i - 1]}: steps must increase")
    for name, values in history.items():
        if not isinstance(name, str) or not isinstance(values, list) or len(values) != len(steps):
            raise ValueError(f"{where}: history[{name!r:.60}] must be a list of {len(steps)} values (one per step)")
        if name == "step":
            continue
        if set(map(type, values)) <= _NUMBER_OR_NULL:  # the common case, checked at C speed (bool is not int here)
            continue
        depth = 2 if name.endswith(NESTED) else 0
        for i, value in enumerate(values):
            if not _check_value(value, depth):
                allowed = "numbers or null" + (" (or lists of them)" if depth else "")
                raise ValueError(f"{where}: history[{name!r:.60}][{i}]={value!r:.40}: must be {allowed}")
