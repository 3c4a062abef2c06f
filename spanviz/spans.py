"""Span / violation gradient scaling: split ∂L/∂S into blocks by projections onto the spans of Q, K, V.

Source: Kim, Yun, Yoon, "Scaling Bidirectional Spans and Span Violations in Attention Mechanism",
arXiv 2512.13033 (2025). **Its abstract** states: an asymmetric projection splits the backward-pass gradients
into parallel spans and orthogonal violations; the forward pass is unchanged; scaling mainly the 0th-order
bidirectional parallel spans helps (0.56 % lower validation loss on WikiText-2). **Published secondary
summaries of the paper** (not checked against its body) add: the score gradient is split into 8 blocks
S1..S8 by how many orthogonal ("violation") projections each involves — orders 0..3 with 1, 3, 3, 1 blocks —
using projection operators built from K and V with d×d Gram inverses; each order gets a scale α0..α3,
written as a bracket [α0 α1 α2 α3] ([1111] = standard gradient, [1000] = keep only the 0th-order
"bidirectional parallel span"); V's gradient passes through unmodified; a cheaper 4-component variant
exists. **The exact placement of the projections is spanviz's reconstruction**, defined precisely below;
users can switch it (presets, or their own slot lists).

Notation, per (batch, head): Q, K, V ∈ R^{T×d} (d = d_head, T = context length), S = QKᵀ/√d (pre-mask),
dS = ∂L/∂S ∈ R^{T×T}.

* **Projector** (token space): Π_X = X (XᵀX)⁻¹ Xᵀ ∈ R^{T×T}, the orthogonal projector onto the column span
  of X (a d-dimensional subspace of R^T); Π_X^⊥ = I − Π_X. Only the d×d Gram XᵀX is inverted and no T×T
  matrix is formed: with X⁺ = (XᵀX + λI)⁻¹Xᵀ (d×T, by Cholesky), Π_X M = X (X⁺ M) and M Π_X = (M X) X⁺.
  Ridge λ = ε·tr(XᵀX)/d (ε = ``ridge``, default 1e-6); pinv fallback when Cholesky fails. The ridge biases
  Π_X slightly: its eigenvalues on the span are s_i²/(s_i² + λ) instead of 1, an under-projection of at most
  λ/(s_min² + λ) ≤ ε·κ(XᵀX) (:func:`ridge_bias`; e.g. ≈ 4e-6 at κ 8, ≈ 2.6e-4 at κ 3e3), which
  :class:`SpanProbe` reports with κ. If T ≤ d and X has rank T, the span of X is all of R^T, so Π_X = I
  exactly and Π_X^⊥ = 0: nothing to scale. If T ≤ d but rank(X) < T (e.g. K = 0, or ``qk_rank`` < T ≤
  d_head for q), Π_X is the projector onto the smaller span, as for T > d — the rank is checked.
* **Slot**: (side, basis) with side ∈ {left, right}, basis ∈ {Q, K, V}; it inserts I = Π + Π^⊥ on that
  side of dS. A **decomposition** is an ordered slot list; n slots give 2ⁿ **blocks**, one per choice of
  Π or Π^⊥ in each slot. A block's **order** is its number of Π^⊥ factors. On each side the first slot in
  the list is the outermost (farthest from dS): slots [L1, L2, R1, R2] give blocks L1 L2 · dS · R2 R1.
  Complements are always computed as M − ΠM, so the blocks sum to dS exactly, whatever the ridge.
* **Scaling**: dS' = Σ_blocks α_order(block) · block (or a per-block α, ``block_alphas``). dS' = dS when
  every α is 1. Negative α are allowed but leave the paper's setting (it only scales down parallel/violation
  parts); use them to explore, not to reproduce.
* **Presets** (names are spanviz's): ``kv8`` (default) slots [left Π_K, left Π_V, right Π_V], blocks
  Π_K^a Π_V^b · dS · Π_V^c, mirroring S = Σ (Π_K^a Π_V^b Q)(Π_V^c K)ᵀ/√d; ``qkv8`` slots [left Π_Q,
  right Π_K, right Π_V], blocks Π_Q^a · dS · Π_V^c Π_K^b; ``qk4`` slots [left Π_Q, right Π_K], whose
  exact closed form dQ' = α0 Π_Q dQ + α1 Π_Q^⊥ dQ, dK' = α0 Π_K dK + α1 Π_K^⊥ dK (order 2 is in the null
  space of the backward map, so α2 does nothing) runs as hooks on q and k and works with fused attention.
* **Block naming** S1..S2ⁿ (:func:`block_names`): blocks sorted by order, and inside one order by which
  slots carry Π^⊥, earlier slots first (bits (1,0,0) < (0,1,0) < (0,0,1); (1,1,0) < (1,0,1) < (0,1,1)).
  For ``kv8``: S1 = Π_K Π_V dS Π_V; S2..S4 (order 1) put ⊥ on Π_K, on the left Π_V, on the right Π_V;
  S5..S7 (order 2) on {Π_K, left Π_V}, {Π_K, right Π_V}, {left Π_V, right Π_V}; S8 all three.

Where it sits in the model: :mod:`spanviz.model` registers the score transform on the gradient of the
**pre-mask** scores S; the mask is additive (S + M, M = 0 / −inf), so the softmax backward already gives
dS = 0 on masked entries and nothing downstream re-masks dS'. (A hook placed after a ``masked_fill`` would
see a gradient that the masked-fill backward then re-zeroes — a different, wrong result.)
"""

from __future__ import annotations

import itertools
import logging
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

logger = logging.getLogger(__name__)

# ------------------------------------------------------------------------------------------- constants

SIDES = ("left", "right")
BASES = ("Q", "K", "V")
PRESET_SLOTS: Mapping[str, tuple[tuple[str, str], ...]] = {
    "kv8": (("left", "K"), ("left", "V"), ("right", "V")),
    "qkv8": (("left", "Q"), ("right", "K"), ("right", "V")),
    "qk4": (("left", "Q"), ("right", "K")),
}
PRESETS = tuple(PRESET_SLOTS)
CUSTOM = "custom"
"""``SpanConfig.preset`` of a user-given slot list."""
DEFAULT_RIDGE = 1e-6
MAX_SLOTS = 6  # 64 blocks; more is allowed by the math but useless for teaching and slow.

Slot = tuple[str, str]
ScoreGradFn = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
QKGradFn = Callable[[Tensor, Tensor, str], Tensor]


# ------------------------------------------------------------------------------------------ α parsing

def parse_alphas(spec: str | Sequence[float], field: str = "alphas") -> tuple[float, ...]:
    """Read α scales from the paper's bracket strings or from a sequence of numbers.

    Accepted: a digit string with one digit per α ("1000", "[1110]"), a separated string
    ("1 0.5 0 0", "[1, 0.5, 0, 0]"), or a sequence of real numbers (or of strings of numbers).
    Length is not checked here.

    Returns:
        tuple of floats.
    Raises:
        ValueError: naming ``field``, for anything else or a non-finite value.
    Source: bracket notation of arXiv 2512.13033.
    """
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1].strip()
        tokens = text.replace(",", " ").split()
        if len(tokens) == 1 and tokens[0].isdigit():
            tokens = list(tokens[0])  # "1000" -> one digit per α
        try:
            values = tuple(float(t) for t in tokens)
        except ValueError:
            raise ValueError(
                f"{field} must be a digit string like '1000', a list of numbers or a string of numbers, "
                f"got {spec!r}"
            ) from None
    elif isinstance(spec, Iterable) and not isinstance(spec, Mapping):
        items = list(spec)
        try:  # numbers, or strings of numbers (e.g. "1,0.5,0,0".split(","))
            if any(isinstance(a, bool) or not isinstance(a, (numbers.Real, str)) for a in items):
                raise ValueError
            values = tuple(float(a) for a in items)
        except ValueError:
            raise ValueError(f"{field} must contain real numbers, got {spec!r}") from None
    else:
        raise ValueError(f"{field} must be a digit string like '1000' or a sequence of numbers, got {spec!r}")
    if not values:
        raise ValueError(f"{field} must not be empty, got {spec!r}")
    if not all(math.isfinite(a) for a in values):
        raise ValueError(f"{field} must be finite numbers, got {values}")
    return values


def _parse_slots(slots: Any) -> tuple[Slot, ...]:
    """Normalise a slot list: [("left", "K"), ...] (also lists from JSON); side lower-case, basis upper."""
    if isinstance(slots, str) or not isinstance(slots, Iterable):
        raise ValueError(f"slots must be a list of (side, basis) pairs, got {slots!r}")
    out = []
    for slot in slots:
        if isinstance(slot, str) or not isinstance(slot, Sequence) or len(slot) != 2:
            raise ValueError(f"slots entries must be (side, basis) pairs, got {slot!r} in {slots!r}")
        side, basis = slot
        side = side.lower() if isinstance(side, str) else side
        basis = basis.upper() if isinstance(basis, str) else basis
        if side not in SIDES:
            raise ValueError(f"slots: side must be one of {SIDES}, got {slot[0]!r} in {slots!r}")
        if basis not in BASES:
            raise ValueError(f"slots: basis must be one of {BASES}, got {slot[1]!r} in {slots!r}")
        out.append((side, basis))
    if not 1 <= len(out) <= MAX_SLOTS:
        raise ValueError(f"slots must hold 1 to {MAX_SLOTS} slots, got {len(out)}: {slots!r}")
    return tuple(out)


# ------------------------------------------------------------------------------------------- config

@dataclass(frozen=True)
class SpanConfig:
    """Span / violation gradient scaling setting. Frozen, validated, JSON-ready through :meth:`to_dict`.

    Attributes:
        alphas: α per order, α0 first. A digit string as in the paper ("1000", "[1110]") or numbers.
            Length max(4, n_slots + 1) (4 for every preset; entries above the last order are unused, e.g.
            α3 for ``qk4``). Finite; negative values are allowed but leave the paper's setting.
        preset: "kv8" (default), "qkv8", "qk4", or "custom" for a user slot list; None = the preset whose
            slots equal ``slots``, else "custom" ("kv8" when ``slots`` is None too). "custom" with a preset's
            slots is allowed (for qk4 slots it uses the explicit score path instead of the closed form).
        slots: the decomposition as (side, basis) pairs, side ∈ {"left", "right"}, basis ∈ {"Q", "K", "V"},
            1 to 6 slots; None = the preset's. Given together with a named preset, they must agree.
        layers: layer indices (0-based) the scaling applies to; None = every layer.
        block_alphas: optional α per block in S1..S2ⁿ order (length 2ⁿ); when given it replaces the
            per-order ``alphas``.
        ridge: ε >= 0 in the Gram ridge λ = ε·tr(XᵀX)/d.

    Raises:
        ValueError: naming the field, the value and what is allowed.
    Source: the α brackets are the paper's; presets, slots, block naming and ridge are spanviz's
    reconstruction (see the module docstring).
    """

    alphas: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)
    preset: str | None = None
    slots: tuple[Slot, ...] | None = None
    layers: tuple[int, ...] | None = None
    block_alphas: tuple[float, ...] | None = None
    ridge: float = DEFAULT_RIDGE

    def __post_init__(self) -> None:
        # preset and slots
        if self.preset is not None and self.preset not in PRESETS + (CUSTOM,):
            raise ValueError(f"preset must be one of {PRESETS + (CUSTOM,)} or None, got {self.preset!r}")
        if self.slots is None:
            if self.preset == CUSTOM:
                raise ValueError("slots must be given when preset='custom', got slots=None")
            preset = self.preset or "kv8"
            slots = PRESET_SLOTS[preset]
        else:
            slots = _parse_slots(self.slots)
            named = [name for name, preset_slots in PRESET_SLOTS.items() if preset_slots == slots]
            preset = self.preset or (named[0] if named else CUSTOM)
            if preset != CUSTOM and slots != PRESET_SLOTS[preset]:
                raise ValueError(
                    f"slots {[list(s) for s in slots]} disagree with preset={preset!r} "
                    f"(its slots are {[list(s) for s in PRESET_SLOTS[preset]]}); pass one of them, "
                    "or preset='custom'"
                )
        object.__setattr__(self, "preset", preset)
        object.__setattr__(self, "slots", slots)
        # alphas
        alphas = parse_alphas(self.alphas, "alphas")
        if len(alphas) != self.n_orders:
            raise ValueError(
                f"alphas must have {self.n_orders} entries (α0..α{self.n_orders - 1}) for {len(slots)} slots, "
                f"got {len(alphas)}: {self.alphas!r}"
            )
        object.__setattr__(self, "alphas", alphas)
        if self.block_alphas is not None:
            block_alphas = parse_alphas(self.block_alphas, "block_alphas")
            if len(block_alphas) != self.n_blocks:
                raise ValueError(
                    f"block_alphas must have {self.n_blocks} entries (S1..S{self.n_blocks}), "
                    f"got {len(block_alphas)}: {self.block_alphas!r}"
                )
            object.__setattr__(self, "block_alphas", block_alphas)
        # layers
        if self.layers is not None:
            layers = self.layers if isinstance(self.layers, Iterable) and not isinstance(self.layers, str) else None
            if layers is None or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in layers):
                raise ValueError(f"layers must be None or a list of layer indices >= 0, got {self.layers!r}")
            layers = tuple(sorted(set(layers)))
            if not layers:
                raise ValueError("layers must be None (every layer) or a non-empty list, got []")
            object.__setattr__(self, "layers", layers)
        # ridge
        r = self.ridge
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r < 0:
            raise ValueError(f"ridge must be a finite number >= 0, got {r!r}")
        object.__setattr__(self, "ridge", float(r))

    @property
    def n_slots(self) -> int:
        """Number of slots n."""
        return len(self.slots)

    @property
    def n_blocks(self) -> int:
        """Number of blocks, 2ⁿ."""
        return 2 ** len(self.slots)

    @property
    def n_orders(self) -> int:
        """Length of ``alphas``: max(4, n + 1) (orders run 0..n)."""
        return max(4, len(self.slots) + 1)

    def block_weights(self) -> tuple[float, ...]:
        """α of each block in S1..S2ⁿ order (``block_alphas``, or α of the block's order)."""
        if self.block_alphas is not None:
            return self.block_alphas
        return tuple(self.alphas[o] for o in block_orders(self.slots))

    def check_layers(self, n_layer: int) -> None:
        """Raise ``ValueError`` when a configured layer index is not in [0, n_layer)."""
        if self.layers is not None and any(i >= n_layer for i in self.layers):
            raise ValueError(f"spans.layers must be in [0, {n_layer}) for n_layer={n_layer}, got {list(self.layers)}")

    def applies_to(self, layer: int) -> bool:
        """Whether layer ``layer`` (0-based) gets the scaling."""
        return self.layers is None or layer in self.layers

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict; ``SpanConfig(**cfg.to_dict()) == cfg``."""
        return {
            "alphas": list(self.alphas),
            "preset": self.preset,
            "slots": [list(s) for s in self.slots],
            "layers": None if self.layers is None else list(self.layers),
            "block_alphas": None if self.block_alphas is None else list(self.block_alphas),
            "ridge": self.ridge,
        }

    def label(self) -> str:
        """Short human label, e.g. ``kv8 [1 0 0 0]``."""
        a = " ".join(f"{x:g}" for x in (self.block_alphas or self.alphas))
        return f"{self.preset} [{a}]" + ("" if self.layers is None else f" layers {list(self.layers)}")


# ------------------------------------------------------------------------------------------- naming

def _resolve_slots(decomposition: str | SpanConfig | Sequence[Slot]) -> tuple[Slot, ...]:
    if isinstance(decomposition, SpanConfig):
        return decomposition.slots
    if isinstance(decomposition, str):
        if decomposition not in PRESET_SLOTS:
            raise ValueError(f"preset must be one of {PRESETS}, got {decomposition!r}")
        return PRESET_SLOTS[decomposition]
    return _parse_slots(decomposition)


def block_bits(decomposition: str | SpanConfig | Sequence[Slot] = "kv8") -> list[tuple[int, ...]]:
    """Each block as a tuple of bits, one per slot (0 = Π, 1 = Π^⊥), in S1..S2ⁿ order.

    The order: by number of ⊥ (the block's order), then by which slots carry ⊥, earlier slots first.
    Source: spanviz's naming convention.
    """
    n = len(_resolve_slots(decomposition))
    return sorted(itertools.product((0, 1), repeat=n), key=lambda bits: (sum(bits), [-b for b in bits]))


def block_names(decomposition: str | SpanConfig | Sequence[Slot] = "kv8") -> list[str]:
    """["S1", ..., "S2ⁿ"] for a preset name, slot list or :class:`SpanConfig` (see :func:`block_bits`)."""
    return [f"S{i + 1}" for i in range(len(block_bits(decomposition)))]


def block_orders(decomposition: str | SpanConfig | Sequence[Slot] = "kv8") -> list[int]:
    """Order (number of Π^⊥ factors) of each block, S1 first: kv8 → [0, 1, 1, 1, 2, 2, 2, 3]."""
    return [sum(bits) for bits in block_bits(decomposition)]


def block_formulas(decomposition: str | SpanConfig | Sequence[Slot] = "kv8") -> list[str]:
    """Each block written out, S1 first, e.g. kv8 S2 → "Π_K^⊥ Π_V dS Π_V"."""
    slots = _resolve_slots(decomposition)
    out = []
    for bits in block_bits(slots):
        factor = [f"Π_{basis}" + ("^⊥" if bit else "") for (_, basis), bit in zip(slots, bits)]
        left = [f for f, (side, _) in zip(factor, slots) if side == "left"]
        right = [f for f, (side, _) in zip(factor, slots) if side == "right"][::-1]  # first right = outermost
        out.append(" ".join(left + ["dS"] + right))
    return out


def block_table(decomposition: str | SpanConfig | Sequence[Slot] = "kv8") -> list[dict[str, Any]]:
    """One dict per block: ``name``, ``order``, ``bits`` (list), ``formula`` — for docs, plots, notebooks."""
    return [
        {"name": n, "order": o, "bits": list(b), "formula": f}
        for n, o, b, f in zip(
            block_names(decomposition), block_orders(decomposition), block_bits(decomposition),
            block_formulas(decomposition),
        )
    ]


# ---------------------------------------------------------------------------------------- projector

def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32, or float64 when the input is float64 (half/bfloat16 are computed in float32)."""
    return torch.promote_types(dtype, torch.float32)


def _no_autocast(device: torch.device) -> torch.autocast:
    """Autocast off (it would run the matmuls in bf16 under a bf16 autocast region)."""
    return torch.autocast(device_type=device.type, enabled=False)


class SpanProjector:
    """Π_X, the orthogonal projector onto the column span of X in token space — never formed as T×T.

    Args:
        X: (..., T, d) — batched over any leading dims, e.g. (B, H, T, d_head). Treated as constant
            (detached); computed in float32 (float64 if X is float64).
        ridge: ε >= 0; the Gram XᵀX gets λ = ε·tr(XᵀX)/d added on its diagonal before Cholesky.
        dtype: compute dtype; None = float32 (float64 for float64 X).

    Attributes:
        identity: True when T <= d and every batch element of X has rank T (checked with
            ``torch.linalg.matrix_rank``, default tolerance): the span is all of R^T and Π = I exactly.
            A rank-deficient X with T <= d (e.g. K = 0, or q of ``qk_rank`` < T) is projected like T > d.
        pinv: X⁺ = (XᵀX + λI)⁻¹ Xᵀ, (..., d, T); None when ``identity``. Computed by Cholesky; batch
            elements whose Cholesky fails use ``torch.linalg.pinv(X)`` instead (logged at debug level).
            The ridge under-projects by at most λ/(s_min² + λ) ≤ ε·κ(XᵀX) (see :func:`ridge_bias`).

    ``left(M)`` = Π_X M for M (..., T, m); ``right(M)`` = M Π_X for M (..., m, T). Each costs two matmuls,
    O(T·m·d). Source: spanviz reconstruction of the paper's "d×d Gram inverse" projectors.
    """

    def __init__(self, X: Tensor, ridge: float = DEFAULT_RIDGE, dtype: torch.dtype | None = None) -> None:
        X = X.detach()
        # One contiguous copy: q, k, v are (B, T, H, d) memory seen as (B, H, T, d), and every batched
        # matmul would otherwise copy them again.
        self.X = X.to(dtype or _compute_dtype(X.dtype)).contiguous()
        T, d = X.shape[-2], X.shape[-1]
        # T <= d: the span is all of R^T only if X has full row rank (K = 0 or a low-rank q has a smaller span)
        self.identity = T <= d and bool((torch.linalg.matrix_rank(self.X) == T).all())
        self.pinv = None if self.identity else _ridge_pinv(self.X, ridge)

    def left(self, M: Tensor) -> Tensor:
        """Π_X M, M (..., T, m) → (..., T, m)."""
        return M if self.identity else self.X @ (self.pinv @ M)

    def right(self, M: Tensor) -> Tensor:
        """M Π_X, M (..., m, T) → (..., m, T)."""
        return M if self.identity else (M @ self.X) @ self.pinv


def _ridge_pinv(X: Tensor, ridge: float) -> Tensor:
    """(XᵀX + λI)⁻¹ Xᵀ with λ = ridge·tr(XᵀX)/d; X (..., T, d) → (..., d, T)."""
    Xt = X.transpose(-2, -1)  # a transposed view: matmul and the solves take it without a copy
    gram = Xt @ X  # (..., d, d)
    d = gram.shape[-1]
    lam = ridge * gram.diagonal(dim1=-2, dim2=-1).sum(-1) / d  # (...,)
    gram.diagonal(dim1=-2, dim2=-1).add_(lam[..., None])
    chol, info = torch.linalg.cholesky_ex(gram)  # XᵀX + λI = L Lᵀ
    # (L Lᵀ)⁻¹ Xᵀ = L⁻ᵀ (L⁻¹ Xᵀ): two triangular solves — what cholesky_solve does (bit for bit on CPU), but
    # 3.5× faster on an H100 at (B 8, H 4, T 1024, d 64), where batched cholesky_solve took 0.50 ms.
    pinv = torch.linalg.solve_triangular(chol.mT, torch.linalg.solve_triangular(chol, Xt, upper=False), upper=True)
    failed = info != 0
    if bool(failed.any()):  # X is (numerically) rank deficient even with the ridge, e.g. X = 0
        logger.debug("Cholesky failed for %d of %d Gram matrices; using pinv", int(failed.sum()), failed.numel())
        pinv = torch.where(failed[..., None, None], torch.linalg.pinv(X), pinv)
    return pinv


# ------------------------------------------------------------------------------- score decomposition

def _check_qkv(dS: Tensor, q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, t in (("dS", dS), ("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() < 2:
            raise ValueError(f"{name} must be a tensor with at least 2 dims (..., T, ·), got {type(t).__name__}")
    T = dS.shape[-1]
    if dS.shape[-2] != T:
        raise ValueError(f"dS must have shape (..., T, T), got {tuple(dS.shape)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.shape[:-1] != dS.shape[:-1]:
            raise ValueError(f"{name} must have shape {tuple(dS.shape[:-1])} + (d_head,), got {tuple(t.shape)}")


def _slot_ops(slots: Sequence[Slot], projectors: Mapping[str, SpanProjector]) -> list[Callable[[Tensor], Tensor]]:
    """The linear map M ↦ Π M (left slot) or M ↦ M Π (right slot) of each slot, in slot-list order."""
    return [projectors[basis].left if side == "left" else projectors[basis].right for side, basis in slots]


def _projectors(
    slots: Sequence[Slot], q: Tensor, k: Tensor, v: Tensor, ridge: float, dtype: torch.dtype
) -> dict[str, SpanProjector]:
    """One projector per basis used (kv8 builds Π_V once for its two V slots)."""
    tensors = {"Q": q, "K": k, "V": v}
    return {basis: SpanProjector(tensors[basis], ridge, dtype) for basis in {b for _, b in slots}}


def _all_blocks(dS: Tensor, ops: Sequence[Callable[[Tensor], Tensor]]) -> dict[tuple[int, ...], Tensor]:
    """Every block, keyed by its bits. Slots are applied innermost first (the last slot in the list);
    each projection splits a tensor M into (Π-part, M − Π-part). 2ⁿ − 1 projections in all."""
    blocks: dict[tuple[int, ...], Tensor] = {(): dS}
    for op in reversed(ops):
        split: dict[tuple[int, ...], Tensor] = {}
        for bits, M in blocks.items():
            par = op(M)
            split[(0,) + bits], split[(1,) + bits] = par, M - par
        blocks = split
    return blocks


def _weighted_sum(terms: Iterable[tuple[float, Tensor | None]]) -> Tensor | None:
    """Σ c·M over terms, skipping zero coefficients and dropped (None) tensors; None if nothing is left."""
    out = None
    for c, M in terms:
        if M is None or c == 0:
            continue
        term = M if c == 1 else c * M
        out = term if out is None else out + term
    return out


def _order_scaled(dS: Tensor, ops: Sequence[Callable[[Tensor], Tensor]], alphas: Sequence[float]) -> Tensor:
    """Σ_blocks α_order(block)·block, without forming the 2ⁿ blocks.

    Blocks of equal order share α, so we only track, for the slots applied so far (innermost first),
    ``parts[j]`` = the sum of the blocks with j ⊥ factors. A slot maps parts[j] to Π parts[j] (stays j) and
    parts[j] − Π parts[j] (becomes j + 1). The outermost slot is folded into the final sum:
        Σ_j α_j Π P_j + α_{j+1} (P_j − Π P_j) = Σ_j α_{j+1} P_j + Π (Σ_j (α_j − α_{j+1}) P_j),
    one projection instead of one per part. A part that can only end in orders whose α is 0 is dropped.
    Projections for 3 slots: at most 1 + 2 + 1 = 4 (7 for the explicit blocks); [1000] needs 3.
    """
    n = len(ops)
    alphas = list(alphas[: n + 1])
    if all(a == alphas[0] for a in alphas):  # every block has the same α, and the blocks sum to dS
        return dS if alphas[0] == 1 else alphas[0] * dS
    parts: list[Tensor | None] = [dS]
    for step, op in enumerate(reversed(ops[1:])):
        remaining = n - 1 - step  # slots still to apply after this one, the outermost included
        # A part with j ⊥ so far ends in orders j .. j + remaining: needed unless all those α are 0.
        needed = [any(alphas[j : j + remaining + 1]) for j in range(len(parts) + 1)]
        new: list[Tensor | None] = [None] * (len(parts) + 1)
        for j, M in enumerate(parts):
            if M is None:
                continue
            par = op(M)
            if needed[j]:
                new[j] = par if new[j] is None else new[j] + par
            if needed[j + 1]:
                new[j + 1] = M - par
        parts = new
    outer = ops[0]
    kept = _weighted_sum((alphas[j + 1], M) for j, M in enumerate(parts))
    diff = _weighted_sum((alphas[j] - alphas[j + 1], M) for j, M in enumerate(parts))
    out = _weighted_sum([(1, kept), (1, None if diff is None else outer(diff))])
    return torch.zeros_like(dS) if out is None else out


def decompose(
    dS: Tensor, q: Tensor, k: Tensor, v: Tensor,
    decomposition: str | SpanConfig | Sequence[Slot] = "kv8", *, ridge: float | None = None,
) -> Tensor:
    """All 2ⁿ blocks of the score gradient, stacked in S1..S2ⁿ order.

    Args:
        dS: ∂L/∂S of the pre-mask scores, (..., T, T), e.g. (B, H, T, T).
        q, k, v: (..., T, d_head), treated as constants (detached).
        decomposition: preset name, slot list or :class:`SpanConfig`.
        ridge: ε of the Gram ridge; None = the SpanConfig's, else 1e-6.
    Returns:
        (2ⁿ, ..., T, T) in dS's dtype (computed in float32 or float64); ``out.sum(0)`` equals dS up to
        rounding (the complements are M − ΠM).
    Raises:
        ValueError: bad shapes, preset or slots.
    Source: spanviz reconstruction (module docstring).
    """
    slots = _resolve_slots(decomposition)
    ridge = _resolve_ridge(decomposition, ridge)
    _check_qkv(dS, q, k, v)
    with torch.no_grad(), _no_autocast(dS.device):
        dS32 = dS.detach().to(_compute_dtype(dS.dtype))
        blocks = _all_blocks(dS32, _slot_ops(slots, _projectors(slots, q, k, v, ridge, dS32.dtype)))
        return torch.stack([blocks[b] for b in block_bits(slots)]).to(dS.dtype)


def _resolve_ridge(decomposition: Any, ridge: float | None) -> float:
    if ridge is None:
        return decomposition.ridge if isinstance(decomposition, SpanConfig) else DEFAULT_RIDGE
    if isinstance(ridge, bool) or not isinstance(ridge, (int, float)) or not math.isfinite(ridge) or ridge < 0:
        raise ValueError(f"ridge must be a finite number >= 0, got {ridge!r}")
    return float(ridge)


METHODS = ("grouped", "blocks")


def scale_score_grad(
    dS: Tensor, q: Tensor, k: Tensor, v: Tensor, cfg: SpanConfig | None = None, *, method: str = "grouped"
) -> Tensor:
    """dS' = Σ_blocks α(block)·block, the scaled score gradient (the training transform for the score path).

    Args:
        dS: ∂L/∂S of the pre-mask scores, (..., T, T), any float dtype.
        q, k, v: (..., T, d_head), treated as constants.
        cfg: the setting (slots, α, ridge); None = ``SpanConfig()`` (kv8, all α = 1). Its ``layers`` are
            ignored here. For ``qk4`` this is the explicit 4-block sum (the definition the closed form in
            :func:`scale_qk_grad` reproduces).
        method: "grouped" (default; per-order α without forming the blocks, see ``_order_scaled``; returns
            α0·dS at once when all α are equal) or "blocks" (forms all 2ⁿ blocks and sums them — the
            readable reference). ``block_alphas`` always use "blocks".
    Returns:
        dS' with dS's shape and dtype (computed in float32, or float64 for float64 input).
    Raises:
        ValueError: bad shapes, cfg or method.
    Source: the α-per-order scaling is the paper's; the decomposition is spanviz's reconstruction.
    """
    cfg = SpanConfig() if cfg is None else cfg
    if not isinstance(cfg, SpanConfig):
        raise ValueError(f"cfg must be a SpanConfig or None, got {type(cfg).__name__}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    _check_qkv(dS, q, k, v)
    return _score_transform(cfg, method, dS, q, k, v)


def _score_transform(cfg: SpanConfig, method: str, dS: Tensor, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The unchecked body of :func:`scale_score_grad` (also the backward hook)."""
    with torch.no_grad(), _no_autocast(dS.device):
        dS32 = dS.to(_compute_dtype(dS.dtype)).contiguous()
        ops = _slot_ops(cfg.slots, _projectors(cfg.slots, q, k, v, cfg.ridge, dS32.dtype))
        if method == "grouped" and cfg.block_alphas is None:
            out = _order_scaled(dS32, ops, cfg.alphas)
        else:
            blocks = _all_blocks(dS32, ops)
            out = _weighted_sum((w, blocks[b]) for w, b in zip(cfg.block_weights(), block_bits(cfg.slots)))
            out = torch.zeros_like(dS32) if out is None else out
        return out.to(dS.dtype)


# ------------------------------------------------------------------------------ qk4 closed form

QK_SIDES = ("q", "k")


def _qk4_alphas(cfg: SpanConfig, side: str) -> tuple[float, float]:
    """(α on Π_X, α on Π_X^⊥) of the qk4 closed form for ∂L/∂q (side "q") or ∂L/∂k (side "k").

    dQ = dS' K/√d: Π_K^⊥ K = 0 removes the blocks with Π_K^⊥ (S3, S4), leaving S1 (α on Π_Q) and S2
    (α on Π_Q^⊥). dK = dS'ᵀ Q/√d: Π_Q^⊥ Q = 0 removes S2 and S4, leaving S1 and S3 (α on Π_K^⊥).
    """
    if cfg.block_alphas is None:
        return cfg.alphas[0], cfg.alphas[1]
    w1, w2, w3, _ = cfg.block_alphas  # S1 = Π_Q dS Π_K, S2 = Π_Q^⊥ dS Π_K, S3 = Π_Q dS Π_K^⊥, S4 both ⊥
    return (w1, w2) if side == "q" else (w1, w3)


def scale_qk_grad(grad: Tensor, x: Tensor, cfg: SpanConfig, side: str = "q") -> Tensor:
    """qk4 closed form: grad' = a Π_X grad + b Π_X^⊥ grad, with Π_X from X = q (for dQ) or k (for dK).

    Equal to the explicit qk4 4-block sum pushed through dQ = dS K/√d and dK = dSᵀ Q/√d (Π_K K = K,
    Π_K^⊥ K = 0): with order α, (a, b) = (α0, α1) on both sides; with ``block_alphas`` (S1..S4),
    (a, b) = (S1, S2) for dQ and (S1, S3) for dK. The order-2 block S4 never reaches dQ or dK, so α2 (and
    α3) have no effect.

    Args:
        grad: ∂L/∂q or ∂L/∂k, (..., T, d_head).
        x: q or k (same shape), treated as a constant.
        cfg: a SpanConfig with preset "qk4".
        side: "q" when grad is ∂L/∂q (x = q), "k" when it is ∂L/∂k (x = k).
    Returns:
        grad' with grad's shape and dtype (computed in float32, or float64 for float64 input).
    Raises:
        ValueError: cfg not qk4, an unknown side, or shapes differ.
    Source: spanviz reconstruction of the paper's "reductionistic" 4-component variant.
    """
    if not isinstance(cfg, SpanConfig) or cfg.preset != "qk4":
        raise ValueError(f"cfg must be a SpanConfig with preset='qk4', got {cfg!r}")
    if side not in QK_SIDES:
        raise ValueError(f"side must be one of {QK_SIDES}, got {side!r}")
    if not isinstance(grad, Tensor) or not isinstance(x, Tensor) or grad.shape != x.shape or grad.dim() < 2:
        raise ValueError(f"grad and x must be tensors of the same shape (..., T, d_head), got "
                         f"{getattr(grad, 'shape', grad)!r} and {getattr(x, 'shape', x)!r}")
    alpha_par, alpha_perp = _qk4_alphas(cfg, side)
    return _qk_transform(alpha_par, alpha_perp, cfg.ridge, grad, x)


def _qk_transform(alpha_par: float, alpha_perp: float, ridge: float, grad: Tensor, x: Tensor) -> Tensor:
    """α_par Π_X g + α_perp (g − Π_X g) = α_perp g + (α_par − α_perp) Π_X g; unchecked (the hook body)."""
    if alpha_par == alpha_perp:
        return grad if alpha_par == 1 else alpha_par * grad
    with torch.no_grad(), _no_autocast(grad.device):
        g = grad.to(_compute_dtype(grad.dtype)).contiguous()
        out = alpha_perp * g + (alpha_par - alpha_perp) * SpanProjector(x, ridge, g.dtype).left(g)
        return out.to(grad.dtype)


# --------------------------------------------------------------------------------- model hook-up

def build_grad_fns(cfg: SpanConfig) -> tuple[ScoreGradFn | None, QKGradFn | None]:
    """The backward transforms :meth:`spanviz.model.TinyGPT.set_span_scaling` installs on a layer.

    Returns:
        (score_grad_fn, None) for kv8, qkv8 and custom slots: ``score_grad_fn(dS, q, k, v) -> dS'`` with
        dS (B, H, T, T) the gradient of the pre-mask scores and q, k, v (B, H, T, d_head) detached; it
        forces the explicit attention path.
        (None, qk_grad_fn) for qk4: ``qk_grad_fn(grad, x, side) -> grad'`` applied to ∂L/∂q with x = q,
        side "q", and to ∂L/∂k with x = k, side "k" (the closed form :func:`scale_qk_grad`; works with
        fused attention, for order α and for ``block_alphas`` alike).
        The hooks are installed even when every α is 1 (they then return the gradient unchanged).
    Raises:
        ValueError: cfg is not a SpanConfig.
    Source: spanviz.
    """
    if not isinstance(cfg, SpanConfig):
        raise ValueError(f"cfg must be a SpanConfig, got {type(cfg).__name__}")
    if cfg.preset == "qk4":
        pairs = {side: _qk4_alphas(cfg, side) for side in QK_SIDES}

        def qk_grad_fn(grad: Tensor, x: Tensor, side: str) -> Tensor:
            alpha_par, alpha_perp = pairs[side]
            return _qk_transform(alpha_par, alpha_perp, cfg.ridge, grad, x)

        return None, qk_grad_fn

    def score_grad_fn(dS: Tensor, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return _score_transform(cfg, "grouped", dS, q, k, v)

    return score_grad_fn, None


# ------------------------------------------------------------------------------------- diagnostics

@dataclass
class ScoreGradCapture:
    """One layer's score gradient and its inputs, captured during one backward pass.

    Fields: ``layer``; ``dS`` (B, H, T, T), ∂L/∂S of the pre-mask scores as it arrived at the layer (before
    that layer's own transform); ``q``, ``k``, ``v`` (B, H, T, d_head), detached. All float, on the model's
    device.
    """

    layer: int
    dS: Tensor
    q: Tensor
    k: Tensor
    v: Tensor


def _check_model_batch(model: Any, batch: Any) -> tuple[Tensor, Tensor]:
    if not hasattr(model, "blocks") or not hasattr(model, "cfg"):
        raise ValueError(f"model must be a spanviz TinyGPT, got {type(model).__name__}")
    if not isinstance(batch, (tuple, list)) or len(batch) != 2 or not all(isinstance(t, Tensor) for t in batch):
        raise ValueError(f"batch must be a pair (x, y) of (B, T) token tensors, got {type(batch).__name__}")
    x, y = batch
    if x.dim() != 2 or x.shape != y.shape:
        raise ValueError(f"batch must be (x, y) with equal shapes (B, T), got {tuple(x.shape)} and {tuple(y.shape)}")
    return x, y


def capture_score_grads(model: Any, batch: tuple[Tensor, Tensor]) -> list[ScoreGradCapture]:
    """Run one forward/backward of ``model`` on ``batch`` through the explicit path and capture, per layer,
    dS (the gradient of the pre-mask scores) and detached q, k, v.

    The model's configured span transforms stay active (so dS is what that layer sees in training);
    the model is put in eval mode for the pass (no dropout, no RNG use) and its ``.grad`` tensors and
    train/eval flag are restored afterwards: parameters and gradients are left as they were.

    Args:
        model: a :class:`spanviz.model.TinyGPT`.
        batch: (x, y), token ids (B, T) long.
    Returns:
        one :class:`ScoreGradCapture` per layer, layer 0 first.
    Raises:
        ValueError: bad model or batch.
    Source: spanviz.
    """
    x, y = _check_model_batch(model, batch)
    captured: dict[int, ScoreGradCapture] = {}
    attns = [block.attn for block in model.blocks]
    saved_fns = [attn.score_grad_fn for attn in attns]
    saved_grads = [(p, p.grad) for p in model.parameters()]
    was_training = model.training

    def capture(layer: int, original: ScoreGradFn | None) -> ScoreGradFn:
        def fn(dS: Tensor, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            captured[layer] = ScoreGradCapture(layer, dS.detach().clone(), q, k, v)
            return dS if original is None else original(dS, q, k, v)

        return fn

    try:
        model.eval()
        for p, _ in saved_grads:
            p.grad = None
        for attn, original in zip(attns, saved_fns):
            attn.score_grad_fn = capture(attn.layer, original)
        with torch.enable_grad():
            _, loss = model(x, y)
            loss.backward()
    finally:
        for attn, original in zip(attns, saved_fns):
            attn.score_grad_fn = original
        for p, g in saved_grads:
            p.grad = g
        model.train(was_training)
    return [captured[i] for i in sorted(captured)]


@dataclass
class LayerBlocks:
    """The blocks of one layer's score gradient for one batch (from :func:`score_grad_blocks`).

    Fields:
        layer: layer index.
        names, orders, formulas: per block, S1 first (see :func:`block_table`).
        norms: (n_blocks, H) Frobenius norm of each block over the batch, per head.
        ds_norm: (H,) Frobenius norm of dS per head.
        order_share: (n_orders_used, H) energy share of each order: ‖D_o‖² / Σ_o ‖D_o‖², D_o = the sum of
            the blocks of order o. (Each slot splits the matrix it acts on into two orthogonal parts, so the
            energies add up along the slots: Σ_blocks ‖block‖² = ‖dS‖², and the shares ‖block‖²/‖dS‖² —
            ``rel_norm``² in :meth:`rows` — sum to 1, exactly for exact projectors and to about ε·κ with the
            ridge. Blocks on different branches need not be orthogonal to each other, so the blocks of one
            order can interfere: Σ_o ‖D_o‖² differs from ‖dS‖², hence the normalisation.)
        blocks: (n_blocks, H, T, T) the blocks of batch element ``sample`` (for heatmaps).
    """

    layer: int
    names: list[str]
    orders: list[int]
    formulas: list[str]
    norms: Tensor
    ds_norm: Tensor
    order_share: Tensor
    blocks: Tensor

    def rows(self) -> list[dict[str, Any]]:
        """Tidy rows: one dict per (head, block) with layer, head, block, order, formula, norm, rel_norm."""
        out = []
        for h in range(self.norms.shape[1]):
            ds = float(self.ds_norm[h])
            for i, name in enumerate(self.names):
                norm = float(self.norms[i, h])
                out.append({
                    "layer": self.layer, "head": h, "block": name, "order": self.orders[i],
                    "formula": self.formulas[i], "norm": norm, "rel_norm": norm / ds if ds > 0 else float("nan"),
                })
        return out


def order_energy_share(blocks: Tensor, orders: Sequence[int]) -> Tensor:
    """Energy share of each order per head.

    Args:
        blocks: (n_blocks, B, H, T, T) as from :func:`decompose`.
        orders: order of each block.
    Returns:
        (max(orders) + 1, H): ‖D_o‖² / Σ_o ‖D_o‖² with D_o = Σ of the blocks of order o (norm over B, T, T).
        Zero everywhere if dS = 0.
    """
    n_orders = max(orders) + 1
    per_order = torch.stack([
        blocks[[i for i, o in enumerate(orders) if o == order]].sum(0) for order in range(n_orders)
    ])  # (n_orders, B, H, T, T)
    energy = per_order.double().pow(2).sum(dim=(1, 3, 4))  # (n_orders, H)
    total = energy.sum(0, keepdim=True)
    return torch.where(total > 0, energy / total.clamp_min(1e-300), torch.zeros_like(energy)).float()


def score_grad_blocks(
    model: Any, batch: tuple[Tensor, Tensor], decomposition: str | SpanConfig | Sequence[Slot] | None = None,
    *, sample: int = 0, captures: list[ScoreGradCapture] | None = None,
) -> list[LayerBlocks]:
    """Every block of dS for each layer and head, for one batch, with names, orders and norms.

    Args:
        model: a TinyGPT; batch: (x, y) (B, T).
        decomposition: preset, slots or SpanConfig; None = the model's span config, else "kv8".
        sample: which batch element's blocks to keep in ``LayerBlocks.blocks``.
        captures: reuse the output of :func:`capture_score_grads` instead of running a new pass.
    Returns:
        one :class:`LayerBlocks` per layer.
    Raises:
        ValueError: bad model, batch, decomposition or sample.
    Source: spanviz.
    """
    x, _ = _check_model_batch(model, batch)
    if decomposition is None:
        decomposition = model.cfg.spans if model.cfg.spans is not None else "kv8"
    slots = _resolve_slots(decomposition)
    ridge = _resolve_ridge(decomposition, None)
    if isinstance(sample, bool) or not isinstance(sample, int) or not 0 <= sample < x.shape[0]:
        raise ValueError(f"sample must be an integer in [0, {x.shape[0]}), got {sample!r}")
    captures = capture_score_grads(model, batch) if captures is None else captures
    names, orders, formulas = block_names(slots), block_orders(slots), block_formulas(slots)
    out = []
    for c in captures:
        blocks = decompose(c.dS.float(), c.q.float(), c.k.float(), c.v.float(), slots, ridge=ridge)
        out.append(LayerBlocks(
            layer=c.layer, names=names, orders=orders, formulas=formulas,
            norms=blocks.pow(2).sum(dim=(1, 3, 4)).sqrt(),
            ds_norm=c.dS.float().pow(2).sum(dim=(0, 2, 3)).sqrt(),
            order_share=order_energy_share(blocks, orders),
            blocks=blocks[:, sample].clone(),
        ))
    return out


def grad_alignment(capture: ScoreGradCapture, cfg: SpanConfig) -> dict[str, Tensor]:
    """How much the transform of ``cfg`` changes dQ and dK at one layer, per head.

    dQ = dS K/√d, dK = dSᵀ Q/√d (standard); dQ', dK' = what training with ``cfg`` uses (score transform,
    or the qk4 closed form). Returns {"cos_dq", "ratio_dq", "cos_dk", "ratio_dk"}, each (H,):
    cos(dQ', dQ) and ‖dQ'‖/‖dQ‖ over (B, T, d_head) (NaN where dQ = 0).
    Raises: ValueError for a bad cfg. Source: spanviz.
    """
    score_fn, qk_fn = build_grad_fns(cfg)
    dS, q, k, v = (t.float() for t in (capture.dS, capture.q, capture.k, capture.v))
    scale = 1.0 / math.sqrt(q.shape[-1])
    dq, dk = dS @ k * scale, dS.transpose(-2, -1) @ q * scale
    if score_fn is not None:
        dS2 = score_fn(dS, q, k, v)
        dq2, dk2 = dS2 @ k * scale, dS2.transpose(-2, -1) @ q * scale
    else:
        dq2, dk2 = qk_fn(dq, q, "q"), qk_fn(dk, k, "k")
    out = {}
    for name, g, g2 in (("dq", dq, dq2), ("dk", dk, dk2)):
        g, g2 = g.double(), g2.double()
        dims = (0, 2, 3)
        n, n2 = g.pow(2).sum(dims).sqrt(), g2.pow(2).sum(dims).sqrt()
        out[f"cos_{name}"] = ((g * g2).sum(dims) / (n * n2)).float()
        out[f"ratio_{name}"] = (n2 / n).float()
    return out


def principal_angle_cosines(X: Tensor, Y: Tensor) -> Tensor:
    """Cosines of the principal angles between the column spans of X and Y in R^T, largest first.

    Args:
        X: (..., T, d_x); Y: (..., T, d_y) (same leading dims). Computed in float64.
    Returns:
        (..., min(d_x, d_y, T)) cosines in [0, 1]: singular values of Q_Xᵀ Q_Y with Q_X, Q_Y orthonormal
        bases from reduced QR (assumes full column rank; with T <= d both spans are R^T and all cosines 1).
        Angles in radians: ``torch.arccos(cos.clamp(-1, 1))``.
    Raises:
        ValueError: mismatched shapes.
    Source: Björck & Golub (1973), the standard method.
    """
    if X.dim() < 2 or Y.dim() < 2 or X.shape[:-1] != Y.shape[:-1]:
        raise ValueError(
            f"X and Y must have shapes (..., T, d_x) and (..., T, d_y), got {tuple(X.shape)} and {tuple(Y.shape)}"
        )
    qx = torch.linalg.qr(X.detach().double()).Q
    qy = torch.linalg.qr(Y.detach().double()).Q
    return torch.linalg.svdvals(qx.transpose(-2, -1) @ qy).clamp(0.0, 1.0)


def gram_condition(X: Tensor) -> Tensor:
    """Condition number κ(XᵀX) = (σ_max/σ_min)² of the d×d Gram of X (..., T, d), in float64; inf when
    X is rank deficient (always when T < d). Returns (...,). Source: standard definition."""
    if X.dim() < 2:
        raise ValueError(f"X must have shape (..., T, d), got {tuple(X.shape)}")
    s = torch.linalg.svdvals(X.detach().double())
    if X.shape[-2] < X.shape[-1]:
        return torch.full(s.shape[:-1], math.inf, dtype=torch.float64, device=s.device)
    return torch.where(s[..., -1] > 0, (s[..., 0] / s[..., -1]).pow(2), torch.full_like(s[..., 0], math.inf))


def ridge_bias(X: Tensor, ridge: float = DEFAULT_RIDGE) -> Tensor:
    """How much the ridge under-projects: ‖Π_X − Π_X,ridge‖₂ = λ/(s_min² + λ), λ = ε·tr(XᵀX)/d.

    Π_X,ridge = X(XᵀX + λI)⁻¹Xᵀ has eigenvalues s_i²/(s_i² + λ) on the span of X (s_i its singular values),
    so the worst direction loses λ/(s_min² + λ) ≤ ε·(tr(XᵀX)/d)/s_min² ≤ ε·κ(XᵀX) of its length.

    Args: X: (..., T, d) with T > d; ridge: ε >= 0. Computed in float64.
    Returns: (...,) the bias, in [0, 1] (1 when X is rank deficient: a direction of the span is lost).
    Raises: ValueError for X with T <= d (no ridge is used there) or a bad ridge.
    Source: spanviz (spectral calculus of the ridge projector).
    """
    if X.dim() < 2 or X.shape[-2] <= X.shape[-1]:
        raise ValueError(f"X must have shape (..., T, d) with T > d, got {tuple(X.shape)}")
    ridge = _resolve_ridge(None, ridge)
    s2 = torch.linalg.svdvals(X.detach().double()).pow(2)
    lam = ridge * s2.sum(-1) / X.shape[-1]
    return torch.where(lam > 0, lam / (s2[..., -1] + lam), torch.zeros_like(lam))


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


class SpanProbe:
    """Opt-in training probe: span geometry and what the α scaling does, measured on the fixed probe batch.

    Trainer protocol: ``name``, ``every`` (steps), and ``probe(trainer) -> dict`` of JSON-able values, where
    ``trainer.model`` is a TinyGPT and ``trainer.probe_batch`` an (x, y) pair. Costs one extra forward and
    backward (explicit path) plus the 2ⁿ-block decomposition, every ``every`` steps; nothing when not used.

    Args:
        every: probe interval in steps, >= 1.
        cfg: the decomposition and α to evaluate; None = the model's span config, or kv8 [1000] when the
            model trains with the standard gradient (then the numbers say what [1000] *would* do).
        per_head: also record per-head values.
    Keys (l = layer, o = order, XY ∈ {QK, QV, KV}, X ∈ {Q, K, V}; averages over heads, and over the batch
    for span geometry): ``spans/L{l}/share_order{o}`` (energy share of order o in dS),
    ``spans/L{l}/cos_dq``, ``ratio_dq``, ``cos_dk``, ``ratio_dk`` (cos(dQ', dQ), ‖dQ'‖/‖dQ‖),
    ``spans/L{l}/cos_{XY}_mean`` and ``cos_{XY}_min`` (principal-angle cosines between spans),
    ``spans/L{l}/log10_cond_{X}`` (log10 κ of the Gram XᵀX; None when infinite) and, for T > d_head,
    ``spans/L{l}/ridge_bias_{X}`` (the worst :func:`ridge_bias` over batch and heads); with ``per_head`` also
    ``spans/L{l}/h{h}/share_order{o}``, ``.../h{h}/cos_dq``, ``.../h{h}/ratio_dq``.
    Raises:
        ValueError: bad ``every`` or ``cfg``.
    Source: spanviz.
    """

    name = "spans"

    def __init__(self, every: int = 50, cfg: SpanConfig | None = None, per_head: bool = False) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an integer >= 1, got {every!r}")
        if cfg is not None and not isinstance(cfg, SpanConfig):
            raise ValueError(f"cfg must be a SpanConfig or None, got {type(cfg).__name__}")
        if not isinstance(per_head, bool):
            raise ValueError(f"per_head must be True or False, got {per_head!r}")
        self.every, self.cfg, self.per_head = every, cfg, per_head

    def describe(self) -> dict[str, Any]:
        """JSON-ready settings (for the run config and the results-store key)."""
        return {"cfg": None if self.cfg is None else self.cfg.to_dict(), "per_head": self.per_head}

    def _config(self, model: Any) -> SpanConfig:
        if self.cfg is not None:
            return self.cfg
        return model.cfg.spans if model.cfg.spans is not None else SpanConfig(alphas="1000")

    def __call__(self, trainer: Any) -> dict[str, Any]:
        model, batch = trainer.model, trainer.probe_batch
        cfg = self._config(model)
        captures = capture_score_grads(model, batch)
        reports = score_grad_blocks(model, batch, cfg, captures=captures)
        out: dict[str, Any] = {}
        for c, rep in zip(captures, reports):
            p = f"spans/L{c.layer}"
            shares = rep.order_share  # (n_orders, H)
            for o in range(shares.shape[0]):
                out[f"{p}/share_order{o}"] = float(shares[o].mean())
            align = grad_alignment(c, cfg)
            for key, val in align.items():
                out[f"{p}/{key}"] = _finite_or_none(float(val.mean()))
            for a, b in (("Q", "K"), ("Q", "V"), ("K", "V")):
                cos = principal_angle_cosines(getattr(c, a.lower()), getattr(c, b.lower()))
                out[f"{p}/cos_{a}{b}_mean"] = float(cos.mean())
                out[f"{p}/cos_{a}{b}_min"] = float(cos[..., -1].mean())
            for name in ("Q", "K", "V"):
                X = getattr(c, name.lower())
                kappa = gram_condition(X)
                out[f"{p}/log10_cond_{name}"] = _finite_or_none(float(kappa.log10().mean()))
                if X.shape[-2] > X.shape[-1]:
                    out[f"{p}/ridge_bias_{name}"] = float(ridge_bias(X, cfg.ridge).max())
            if self.per_head:
                for h in range(shares.shape[1]):
                    for o in range(shares.shape[0]):
                        out[f"{p}/h{h}/share_order{o}"] = float(shares[o, h])
                    out[f"{p}/h{h}/cos_dq"] = _finite_or_none(float(align["cos_dq"][h]))
                    out[f"{p}/h{h}/ratio_dq"] = _finite_or_none(float(align["ratio_dq"][h]))
        return out
