"""FP8 scaling as practitioners do it: per-row, power-of-two and block (MX, 1×128) scales of the attention scores.

Each strategy turns the scores S (B, H, T, T) and the allowed-pairs mask into a **quantisation scale per entry**
(broadcastable to S): the cast is ``fp8((S·s).clamp(±448)) / s``. Per-tensor scales (delayed, dynamic, the
geometry-aware ones of :mod:`spanviz.fp8.scaling`) are one number; the strategies here are finer:

* ``"rowwise"`` — one dynamic scale per query row (per batch, head and query): torchao's rowwise float8 scaling;
* ``"rowwise_pow2"`` — the same, rounded **down** to a power of two (:func:`round_scale_down_to_power_of_2`);
* ``"mx"`` — OCP Microscaling MXFP8: blocks of 32 consecutive keys share an E8M0 exponent (:func:`mx_shared_exponent`);
* ``"tile_1x128"`` — DeepSeek-V3's tile-wise scaling: one fp32 scale per 1×128 tile of keys (with T ≤ 128 a tile
  is the whole row, so it equals ``"rowwise"``).

What each costs is counted by :func:`scale_cost`: scale values stored, and amax reductions that must finish before
the cast can start. :func:`cast_stats` measures what a scale does: overflows, underflows to zero and to subnormals,
and the relative error of the cast scores and of the softmax. E4M3 facts used: max 448, smallest normal 2⁻⁶,
smallest subnormal 2⁻⁹; ``torch.float8_e4m3fn`` and ``torch.float8_e8m0fnu`` do the casts.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

E4M3_MAX = 448.0
E4M3_MIN_NORMAL = 2.0**-6
E4M3_MIN_SUBNORMAL = 2.0**-9
E4M3_CAST_OVERFLOW = 464.0
"""|x·s| above this is an overflow (a non-saturating cast gives NaN; a saturating one clips to 448), as
:func:`spanviz.fp8.casting.count_overflow` counts it."""
AMAX_EPS = 1e-12
"""torchao's float8 ``EPS``: the smallest amax a dynamic scale divides by."""
MX_BLOCK = 32
MX_EMAX_ELEM = 8
"""emax of the E4M3 element format in the OCP MX spec (Table 1: exponent of 448 = 1.75·2⁸)."""
E8M0_EMAX = 127
"""E8M0 scale exponents run −127..127; code 0xFF is NaN (OCP MX v1.0, section 5.4.1)."""
FP32_MIN_NORMAL = 2.0**-126
TILE = 128
PRACTICAL = ("rowwise", "rowwise_pow2", "mx", "tile_1x128")
"""The fine-grained strategies of this module, in the order figures and tables list them."""


def round_scale_down_to_power_of_2(scale: Tensor | float) -> Tensor:
    """s' = 2^⌊log2 s⌋: the largest power of two ≤ s. Because s' ≤ s, amax·s' ≤ amax·s ≤ fmax wherever the unrounded
    scale did not overflow, and multiplying by s' only shifts exponents (exact, no rounding of the mantissa).

    Args: scale: s > 0, any shape (float or tensor). Returns: float32 tensor, same shape.
    Raises: ValueError for a non-positive or non-finite scale.
    Source: torchao float8 ``_round_scale_down_to_power_of_2`` (``torch.exp2(torch.floor(torch.log2(scale)))``),
    used by its ``round_scales_to_power_of_2`` option.
    """
    s = torch.as_tensor(scale, dtype=torch.float32)
    if not bool(torch.isfinite(s).all() and (s > 0).all()):
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")
    return torch.exp2(torch.floor(torch.log2(s)))


def _masked_abs(x: Tensor, mask: Tensor | None) -> Tensor:
    a = x.float().abs()
    return a if mask is None else a * mask  # masked-out entries count as 0 (they are not cast)


def rowwise_scales(x: Tensor, mask: Tensor | None = None, *, power_of_two: bool = False) -> Tensor:
    """Per-row dynamic scale s_i = 448 / max(amax_i, EPS), amax_i = max over the allowed entries of row i (last dim).

    Args: x: (..., T) scores; mask: bool broadcastable to x (True = allowed) or None; power_of_two: round each
        scale down to a power of two. Returns: (..., 1) float32 scales.
    Source: torchao float8 rowwise scaling (``tensor_to_scale`` with ``axiswise_dim=-1``: amax over the row,
    ``amax_to_scale``: ``float8_max / clamp(amax, min=EPS)``).
    """
    amax = _masked_abs(x, mask).amax(dim=-1, keepdim=True)
    scale = E4M3_MAX / amax.clamp(min=AMAX_EPS)
    return round_scale_down_to_power_of_2(scale) if power_of_two else scale


def _blocks(a: Tensor, block: int) -> Tensor:
    """(..., T) → (..., ⌈T/block⌉, block), zero-padded at the end."""
    pad = (-a.shape[-1]) % block
    if pad:
        a = torch.nn.functional.pad(a, (0, pad))
    return a.reshape(*a.shape[:-1], a.shape[-1] // block, block)


def _per_entry(block_values: Tensor, block: int, t: int) -> Tensor:
    """(..., nb) → (..., T): each entry gets its block's value."""
    return block_values.repeat_interleave(block, dim=-1)[..., :t]


def tile_scales(x: Tensor, mask: Tensor | None = None, *, tile: int = TILE) -> Tensor:
    """DeepSeek-V3 tile-wise scales: per 1×``tile`` tile of the last dim, s = 448 / amax_tile (fp32), per entry.

    Args: x: (..., T); mask: as :func:`rowwise_scales`; tile: >= 1. Returns: (..., T) float32 scale per entry.
    Source: DeepSeek-V3 technical report (arXiv 2412.19437, section 3.3.2, "1×128 tile" activations) and its
    reference ``inference/kernel.py`` ``act_quant_kernel``: ``s = amax / 448``, ``y = x / s`` (so the quantisation
    scale is 448 / amax, stored as fp32). An all-zero tile gets EPS for amax (its entries cast to 0 either way).
    """
    amax = _blocks(_masked_abs(x, mask), tile).amax(dim=-1)
    return _per_entry(E4M3_MAX / amax.clamp(min=AMAX_EPS), tile, x.shape[-1])


def mx_shared_exponent(amax: Tensor) -> Tensor:
    """OCP MX shared exponent of a block: X = ⌊log2(amax)⌋ − emax_elem (emax_elem = 8 for E4M3), as E8M0.

    A zero block uses log2 of FP32's smallest normal (2⁻¹²⁶), as the reference code does; X below −127 is clamped to
    −127, X above 127 is NaN (E8M0's 0xFF). Consequence at the top of a block: amax/2^X lies in [256, 512), but E4M3
    holds only up to 448 = 1.75·2⁸, so a block whose largest magnitude has mantissa above 1.75 (amax/2^X > 448) has
    its top entries saturated to 448 — clipped by up to 12.5 % (448/512); those above 464·2^X are counted as
    overflows, as for every other strategy.

    Args: amax: per-block max |v| >= 0, any shape. Returns: float32 tensor of X (integers or NaN), same shape.
    Source: OCP Microscaling Formats (MX) v1.0 specification, section 6.3 (conversion: shared_exp =
    ⌊log2(max|V_i|)⌋ − emax_elem, X = 2^shared_exp, P_i = quantize_to_element_format(V_i / X), normals saturating
    to the max normal), and its reference code microsoft/microxcaling ``mx_ops._quantize_mx`` (zero → FP32 min normal,
    clamp at −127, NaN above 127).
    """
    a = amax.float()
    shared = torch.floor(torch.log2(a + FP32_MIN_NORMAL * (a == 0))) - MX_EMAX_ELEM
    shared = shared.clamp(min=-E8M0_EMAX)
    return torch.where(shared > E8M0_EMAX, torch.full_like(shared, math.nan), shared)


def mx_scales(x: Tensor, mask: Tensor | None = None, *, block: int = MX_BLOCK) -> Tensor:
    """MXFP8 quantisation scale per entry: 1/2^X with X the shared exponent of its block of ``block`` keys.

    The scale 2^X goes through ``torch.float8_e8m0fnu`` (exact for −127..127, NaN otherwise), as it is stored.
    Args: x: (..., T); mask: as :func:`rowwise_scales`; block: >= 1 (the spec's k = 32). Returns: (..., T) float32.
    Source: OCP MX v1.0 (see :func:`mx_shared_exponent`).
    """
    amax = _blocks(_masked_abs(x, mask), block).amax(dim=-1)
    stored = torch.exp2(mx_shared_exponent(amax)).to(torch.float8_e8m0fnu).float()  # 2^X as E8M0
    return _per_entry(1.0 / stored, block, x.shape[-1])


def practical_scales(name: str, x: Tensor, mask: Tensor | None = None) -> Tensor:
    """The scale per entry (broadcastable to x) of one strategy of :data:`PRACTICAL`.

    Raises: ValueError for an unknown name.
    """
    if name == "rowwise":
        return rowwise_scales(x, mask)
    if name == "rowwise_pow2":
        return rowwise_scales(x, mask, power_of_two=True)
    if name == "mx":
        return mx_scales(x, mask)
    if name == "tile_1x128":
        return tile_scales(x, mask)
    raise ValueError(f"strategy must be one of {PRACTICAL}, got {name!r}")


def scale_cost(name: str, shape: tuple[int, ...]) -> dict[str, int]:
    """What a strategy's scale costs on scores of ``shape`` (..., T): scale values stored, and amax reductions that
    must finish before the cast can start (on the critical path).

    Per tensor: "delayed" 1 scale, 0 reductions (from the amax history of earlier steps); "dynamic" (and its
    power-of-two form) 1 scale, 1 reduction over the whole tensor; the geometry-aware ones ("theory",
    "agnostic", "deterministic", "calibrated") 1 scale, 0 reductions (from the weights, before the scores exist).
    "rowwise"/"rowwise_pow2": one of each per row; "mx": per block of 32 keys; "tile_1x128": per 1×128 tile —
    counted over the whole (..., T) grid (a causal kernel that skips the blocks above the diagonal needs fewer).
    Returns: {"scales": int, "reductions": int}. Raises: ValueError for an unknown name.
    Source: the definitions above; the count of reductions is spanviz's.
    """
    rows = math.prod(shape[:-1])
    t = shape[-1]
    per = {"rowwise": rows, "rowwise_pow2": rows, "mx": rows * -(-t // MX_BLOCK), "tile_1x128": rows * -(-t // TILE)}
    if name in per:
        return {"scales": per[name], "reductions": per[name]}
    if name in ("dynamic", "dynamic_pow2"):
        return {"scales": 1, "reductions": 1}
    if name in ("delayed", "theory", "agnostic", "deterministic", "calibrated"):
        return {"scales": 1, "reductions": 0}
    raise ValueError(f"unknown strategy {name!r}")


def cast_stats(x: Tensor, scale: Tensor | float, mask: Tensor | None = None) -> dict[str, float | int]:
    """What casting the scores to E4M3 with ``scale`` does, on the allowed entries.

    The cast is saturating: ``fp8e4m3fn((x·s).clamp(±448)) / s``. Counts: ``overflow`` (|x·s| > 464, what
    :func:`~spanviz.fp8.casting.count_overflow` counts), ``underflow_zero`` (x ≠ 0 cast to 0: |x·s| below half
    the smallest subnormal 2⁻⁹), ``underflow_subnormal`` (cast to a nonzero subnormal, 0 < |fp8| < 2⁻⁶: kept with
    fewer mantissa bits). Errors: ``error_scores`` = ‖Ŝ − S‖/‖S‖ and ``error_softmax`` = ‖P̂ − P‖/‖P‖ (Frobenius over
    allowed entries; P = softmax over the allowed keys of each row).

    Args: x: (B, H, T, T) scores (any (..., T) works); scale: s > 0 broadcastable to x; mask: bool broadcastable
        to x, True = allowed (None: all). Returns: dict of the five numbers (ints for counts, floats for errors).
    Raises: ValueError when a scale is not positive (NaN scales, e.g. an MX exponent above 127, are allowed).
    Source: spanviz; E4M3 facts from the OCP OFP8 specification.
    """
    xf = x.float()
    s = torch.as_tensor(scale, dtype=torch.float32)
    if bool((s <= 0).any()):
        raise ValueError("scale must be > 0")
    allowed = torch.ones_like(xf, dtype=torch.bool) if mask is None else mask.expand_as(xf)
    scaled = xf * s
    q = scaled.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float()  # fp8 value, still scaled
    deq = q / s
    sel = allowed & torch.isfinite(xf)
    stats: dict[str, float | int] = {
        "overflow": int(((scaled.abs() > E4M3_CAST_OVERFLOW) & sel).sum()),
        "underflow_zero": int(((q == 0) & (xf != 0) & sel).sum()),
        "underflow_subnormal": int(((q != 0) & (q.abs() < E4M3_MIN_NORMAL) & sel).sum()),
    }
    ref = torch.where(sel, xf, 0.0)
    err = torch.where(sel, deq - xf, 0.0)
    stats["error_scores"] = float(err.norm() / ref.norm().clamp(min=1e-30))
    neg = torch.tensor(-math.inf)
    p = torch.softmax(torch.where(allowed, xf, neg), dim=-1)
    p_hat = torch.softmax(torch.where(allowed, deq, neg), dim=-1)
    stats["error_softmax"] = float(torch.nan_to_num(p_hat - p).norm() / p.nan_to_num().norm().clamp(min=1e-30))
    return stats


__all__ = [
    "E4M3_MAX", "MX_BLOCK", "PRACTICAL", "TILE", "cast_stats", "mx_scales", "mx_shared_exponent",
    "practical_scales", "round_scale_down_to_power_of_2", "rowwise_scales", "scale_cost", "tile_scales",
]  # fmt: skip
