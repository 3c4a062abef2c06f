"""FP8 mechanics: what a cast does to scaled values, and overflows counted *before* the cast.

Casting semantics differ between builds (PyTorch >= 2.12 saturates E4M3 overflow to ±448, older builds and
ml_dtypes give NaN, E5M2 overflow gives inf), so spanviz counts on the scaled values — the same number
everywhere — and fake-quantises with a clamp first.
"""

from __future__ import annotations

import torch
from torch import Tensor

from spanviz.fp8.core import FORMATS, FP8_MAX
from spanviz.validators import check_choice, check_float, check_tensor

CAST_OVERFLOW: dict[str, tuple[float, bool]] = {"e4m3": (464.0, False), "e5m2": (61440.0, True)}
"""Per format (threshold, tie overflows): where a non-saturating cast with round-to-nearest-even stops rounding
to ±fmax. The threshold is the midpoint between fmax and the next step of the format's grid (E4M3: 448 and 480,
whose code is NaN; E5M2: 57344 and 65536 = inf). At the midpoint itself the tie goes to the even mantissa:
448 (0b110) for E4M3, inf for E5M2 — so E4M3 overflows for |x| > 464, E5M2 for |x| >= 61440 (torch's E5M2
cast agrees, tested). Source: OCP 8-bit floating point specification (OFP8), rounding and overflow rules."""
OVERFLOW_COUNTS = ("cast", "range")


def _wide(x: Tensor) -> Tensor:
    return x.to(torch.promote_types(x.dtype, torch.float32))


def fake_quantize(x: Tensor, scale: float | Tensor, fmt: str = "e4m3") -> Tensor:
    """Round-trip through FP8 with saturation: (x·s).clamp(±fmax).to(fp8).float() / s.

    Clamping first makes the result independent of the torch version's overflow casting (see
    :func:`count_overflow`). Out-of-range values come back as ±fmax/s; NaN stays NaN.

    Args: x: any shape; scale: s > 0 (float or tensor broadcastable to x); fmt: "e4m3" or "e5m2".
    Returns: float32 tensor shaped like x.
    Raises: ValueError for an unknown format or a non-positive / non-finite scale, or x not a floating-point tensor.
    """
    fmax = FP8_MAX[check_choice("fmt", fmt, FORMATS)]
    check_tensor("x", x, nonempty=False)  # dtype and device only: NaN entries are allowed (and kept / not counted)
    _check_scale(scale)
    # x̃ = fp8((x·s).clamp(±fmax)) / s
    y = (_wide(x) * scale).clamp(-fmax, fmax).to(FORMATS[fmt]).float()
    return y / scale


def _check_scale(scale: float | Tensor) -> None:
    if not isinstance(scale, Tensor):
        check_float("scale", scale, 0.0, low_open=True)
    elif not bool(torch.isfinite(scale).all() and (scale > 0).all()):
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")


def count_overflow(
    x: Tensor, scale: float | Tensor, fmt: str = "e4m3", mask: Tensor | None = None, *, count: str = "cast"
) -> int:
    """Number of entries of x·s that overflow FP8, counted on the scaled values **before** any cast.

    ``count="cast"`` (default): the entries a non-saturating cast (round to nearest, ties to even) turns into
    NaN (E4M3) or inf (E5M2): |x·s| > 464 for E4M3, |x·s| >= 61440 for E5M2 (:data:`CAST_OVERFLOW`). Values in
    (fmax, threshold] round *down* to ±fmax and are not overflows. ``count="range"``: every entry with
    |x·s| > fmax, i.e. outside the representable range before rounding (what a saturating cast clips).

    Why before the cast: casting semantics differ — PyTorch >= 2.12 saturates E4M3 overflow to ±448 (even inf),
    older builds and ml_dtypes give NaN, E5M2 overflow gives inf. Counting on the scaled values gives the
    same number everywhere. NaN entries are not counted.

    Args: x: any shape; scale: s > 0; fmt: "e4m3" or "e5m2"; mask: optional bool tensor broadcastable to
        x, True where entries count (e.g. allowed attention pairs); count: "cast" or "range".
    Returns: int.
    Raises: ValueError for an unknown format or count, a bad scale, or x not a floating-point tensor.
    """
    fmax = FP8_MAX[check_choice("fmt", fmt, FORMATS)]
    check_tensor("x", x, nonempty=False)  # dtype and device only: NaN entries are allowed (and kept / not counted)
    _check_scale(scale)
    check_choice("count", count, OVERFLOW_COUNTS)
    scaled = (_wide(x) * scale).abs()  # |x·s|, same shape as x
    if count == "range":
        over = scaled > fmax
    else:
        threshold, tie_overflows = CAST_OVERFLOW[fmt]
        # |x·s| > 464 (E4M3) or |x·s| >= 61440 (E5M2): the cast gives NaN / inf
        over = scaled >= threshold if tie_overflows else scaled > threshold
    if mask is not None:
        over = over & mask
    return int(over.sum())


def utilisation(amax: float | Tensor, scale: float | Tensor, fmt: str = "e4m3") -> float:
    """amax·s / fmax: fraction of the FP8 range the largest value uses (> 1 means overflow).

    Low utilisation wastes precision (values land among the subnormals); 1 is ideal.
    """
    # amax · s / fmax
    return float(amax) * float(scale) / FP8_MAX[check_choice("fmt", fmt, FORMATS)]
