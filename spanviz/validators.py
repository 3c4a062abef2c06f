"""Argument checks shared by every module: one message style, ``ValueError`` naming the field, the value and
what is allowed (``"n_head must be an integer >= 1, got 0"``), raised before any compute."""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


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
    ok = isinstance(value, Real) and not isinstance(value, bool) and _finite_real(value)
    if ok:
        ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open or high == math.inf else ']'}"
        raise ValueError(f"{name} must be a finite number in {interval}, got {value!r}")
    return float(value) + 0.0  # -0.0 + 0.0 == +0.0


def _finite_real(value: Real) -> bool:
    """Whether a real number is finite as a float (an int beyond float's range, e.g. 10**400, is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_scalar(name: str, value: Any, low: float = -math.inf, high: float = math.inf, *,
                 low_open: bool = False) -> float:
    """:func:`check_float` that also takes a one-element tensor (a 0-d loss, a bound returned as a tensor); never a
    string or a bool. Raises: ValueError as :func:`check_float`, or for a tensor of more than one element."""
    if hasattr(value, "numel") and hasattr(value, "item"):  # a torch tensor or numpy array, without importing torch
        if value.numel() != 1 or getattr(value, "is_complex", lambda: False)() or str(value.dtype) == "torch.bool":
            raise ValueError(f"{name} must be a real number or a one-element real tensor, got a tensor of shape "
                             f"{tuple(value.shape)} ({value.dtype})")
        value = value.item()
    return check_float(name, value, low, high, low_open=low_open)


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
        shown = f"{approx:.2e}" if approx < 1e300 else f"10^{len(str(approx)) - 1}"  # 10**400 has no float
        raise ValueError(f"the model has about {shown} parameters (12·n_layer·d_model² + (vocab_size + "
                         f"context_length)·d_model), more than the {MAX_PARAMS:.2e} allowed: lower n_layer={n_layer}, "
                         f"d_model={d_model}, vocab_size={vocab_size} or context_length={context_length}")


# ------------------------------------------------------------------------------------------------ tensors
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
"""Floating dtypes the mathematics takes (float8 holds no arithmetic on CPU; complex has no order for a max)."""


def check_device(name: str, device: Any) -> torch.device:
    """``device`` (a name or ``torch.device``) as a ``torch.device`` that exists here: cpu, cuda[:i] when CUDA is
    available (and i < the device count), mps when MPS is available.

    Raises:
        ValueError: ``"{name} must be ... , got value"`` for an unknown name, or one not available on this machine
            (instead of torch's ``AssertionError: Torch not compiled with CUDA enabled``).
    """
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"{name} must be 'cpu', 'cuda', 'cuda:<index>' or 'mps', got {device!r}")
    if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
        raise ValueError(f"{name}={str(device)!r} but this machine has {torch.cuda.device_count()} CUDA device(s) "
                         "(torch.cuda.is_available() is False or the index is too large); use 'cpu'")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{name}={str(device)!r} but MPS is not available here; use 'cpu'")
    return dev


def check_tensor(name: str, t: Any, *, ndim: int | None = None, min_ndim: int | None = None,
                 kind: str = "float", finite: bool = False, nonempty: bool = True,
                 device: torch.device | None = None) -> torch.Tensor:
    """``t`` when it is a torch tensor the mathematics can take, else a ``ValueError`` naming the argument.

    Args:
        name: the argument's name, for the message. t: the value.
        ndim / min_ndim: exact / least number of dimensions (None = any).
        kind: "float" (float16, bfloat16, float32, float64: no integer, bool, complex or float8) or "integer"
            (an integer dtype, not bool) or "any" (device and shape checks only).
        finite: check every element is finite (one pass and, on a GPU, one synchronisation: use it at public doors,
            not per training step).
        nonempty: refuse a tensor with no elements.
        device: the device it must be on (e.g. another argument's); a tensor on the meta device (no data) is
            always refused.
    Raises:
        ValueError: ``"{name} must be ..., got ..."``.
    """
    import torch

    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch tensor, got {type(t).__name__}")
    if t.device.type == "meta":
        raise ValueError(f"{name} is on the meta device (a shape without data); move it to a real device "
                         "(cpu, cuda) first")
    if device is not None and t.device != torch.device(device):
        raise ValueError(f"{name} must be on device {torch.device(device)} (with the other arguments), got {t.device}")
    if kind == "float" and str(t.dtype).removeprefix("torch.") not in FLOAT_DTYPES:
        raise ValueError(f"{name} must be a floating-point tensor ({', '.join(FLOAT_DTYPES)}), got {t.dtype}")
    if kind not in ("float", "integer", "any"):
        raise ValueError(f"kind must be 'float', 'integer' or 'any', got {kind!r}")
    if kind == "integer" and (t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool):
        raise ValueError(f"{name} must be an integer tensor (token ids, e.g. torch.long), got {t.dtype}")
    if ndim is not None and t.dim() != ndim or min_ndim is not None and t.dim() < min_ndim:
        want = f"{ndim} dimensions" if ndim is not None else f"at least {min_ndim} dimensions"
        raise ValueError(f"{name} must have {want}, got shape {tuple(t.shape)}")
    if nonempty and t.numel() == 0:
        raise ValueError(f"{name} must not be empty (at least one element), got shape {tuple(t.shape)}")
    if finite and t.numel():
        bad = int((~torch.isfinite(t)).sum())
        if bad:
            raise ValueError(f"{name} must be finite, got {bad} NaN/inf value(s) of {t.numel()} (shape "
                             f"{tuple(t.shape)})")
    return t
