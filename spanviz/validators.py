"""Argument checks shared by every module: one message style, ``ValueError`` naming the field, the value and
what is allowed (``"n_head must be an integer >= 1, got 0"``), raised before any compute."""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real
from typing import Any


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int when it is an integer (numpy integers too, never a bool) in [low, high].

    Raises:
        ValueError: ``"{name} must be an integer >= low (in [low, high]), got value"``.
    """
    ok = isinstance(value, Integral) and not isinstance(value, bool)
    if not ok or (low is not None and value < low) or (high is not None and value > high):
        if low is None and high is None:
            allowed = "an integer"
        elif high is None:
            allowed = f"an integer >= {low}"
        elif low is None:
            allowed = f"an integer <= {high}"
        else:
            allowed = f"an integer in [{low}, {high}]"
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return int(value)


def check_float(name: str, value: Any, low: float = -math.inf, high: float = math.inf, *, low_open: bool = False,
                high_open: bool = False) -> float:
    """``value`` as a float when it is a finite real number (numpy numbers too, never a bool) in the interval.

    ``-0.0`` is returned as ``0.0``: the two are the same setting, so they must give the same results-store key.

    Raises:
        ValueError: ``"{name} must be a finite number in [low, high], got value"`` (brackets as open or closed).
    """
    ok = isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open or high == math.inf else ']'}"
        raise ValueError(f"{name} must be a finite number in {interval}, got {value!r}")
    return float(value) + 0.0  # -0.0 + 0.0 == +0.0


def check_bool(name: str, value: Any) -> bool:
    """``value`` when it is True or False. Raises: ValueError ``"{name} must be True or False, got value"``."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> Any:
    """``value`` when it is one of ``allowed``. Raises: ValueError ``"{name} must be one of (...), got value"``."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def check_fields(cls: type, d: Any) -> dict[str, Any]:
    """``dict(d)`` when every key of the mapping ``d`` names a field of the dataclass ``cls`` (for ``from_dict``).

    Raises:
        ValueError: ``"unknown {cls.__name__} field(s) [...]; allowed: [...]"``.
    """
    known = set(cls.__dataclass_fields__)  # the config dataclasses have no ClassVar / InitVar pseudo-fields
    unknown = set(d) - known
    if unknown:
        raise ValueError(f"unknown {cls.__name__} field(s) {sorted(unknown)}; allowed: {sorted(known)}")
    return dict(d)


def printable(value: Any, max_chars: int = 120) -> str:
    """``str(value)`` safe to print on a terminal: every character that is not printable (escape sequences, line
    breaks, tabs, other control characters) shown as its ``\\x..`` / ``\\u....`` escape, and at most ``max_chars``
    characters (longer text ends in ``…``). For every string that came from a file (labels, device names, ...).

    Raises:
        ValueError: ``max_chars`` not an int >= 1.
    """
    max_chars = check_int("max_chars", max_chars, 1)
    text = str(value)
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text[:max_chars])
    return shown if len(text) <= max_chars and len(shown) <= max_chars else shown[: max_chars - 1] + "…"


MAX_LAYERS = 1024
"""Largest ``n_layer`` of a model (a million modules take minutes to build before memory runs out)."""
MAX_PARAMS = 2**35
"""Largest parameter count of a model, approximately (128 GiB in float32)."""


def check_model_size(n_layer: int, d_model: int, vocab_size: int, context_length: int) -> None:
    """Refuse a GPT too large to build: ``n_layer`` above :data:`MAX_LAYERS`, or about ``12·n_layer·d_model² +
    (vocab_size + context_length)·d_model`` parameters above :data:`MAX_PARAMS` (cheap: builds nothing).

    Raises:
        ValueError: naming the fields, their values and the limit.
    """
    check_int("n_layer", n_layer, 1, MAX_LAYERS)
    approx = 12 * n_layer * d_model**2 + (vocab_size + context_length) * d_model
    if approx > MAX_PARAMS:
        raise ValueError(f"the model has about {approx:.2e} parameters (12·n_layer·d_model² + (vocab_size + "
                         f"context_length)·d_model), more than the {MAX_PARAMS:.2e} allowed: lower n_layer={n_layer}, "
                         f"d_model={d_model}, vocab_size={vocab_size} or context_length={context_length}")
