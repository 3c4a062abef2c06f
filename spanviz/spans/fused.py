"""The fused backward of the score transform: fused attention forward, the α-scaled backward from recomputed rows.

:mod:`spanviz.spans.core` defines the technique on the score gradient itself: dS' = Σ_blocks w_block · block,
block = L_a · dS · R_c, applied to ∂L/∂S of the explicit (B, H, T, T) scores. That needs the whole score matrix
in float32 twice (S and its gradient) and loses the fused attention kernel. This file computes the *same
gradients* without either, and is what a model trains with (the definition stays the reference it is tested
against, for every preset, α and custom slot list).

Notation as in :mod:`spanviz.spans.core`; s = 1/√d. Left slots l_1..l_m (list order) give L_a = F_{l1} ⋯ F_{lm},
right slots r_1..r_n give R_c = F_{rn} ⋯ F_{r1} (the first slot on each side is outermost), F = Π or Π^⊥ by
the bit; every F is symmetric. The score transform only reaches Q and K through dQ = dS' K s and dK = dS'ᵀ Q s:

    dQ = s Σ_{a,c} w(a,c) · L_a (dS (R_c K)),          dK = s Σ_{a,c} w(a,c) · R_cᵀ (dSᵀ (L_aᵀ Q)).

Grouping the sums by the right bits c (or, when there are fewer left slots, by the left bits a), dS is only
ever multiplied by a few (T, d) matrices:

    dQ = s Σ_c [Σ_a w(a,c) L_a] (dS Y_c),  Y_c = R_c K;     dK = s Σ_c R_cᵀ (dSᵀ Z_c),  Z_c = Σ_a w(a,c) L_aᵀ Q,

and every projection acts on a (T, d) matrix — O(T d²), against the O(T² d) of the products with dS. A group
whose weights are all 0 is skipped: kv8 [1000] multiplies dS by one matrix on each side, as plain attention
does (Y = Π_V K, Z = Π_V Π_K Q).

dS itself is rebuilt in query-row chunks from the saved q, k, v and output O, as flash attention's backward
does: for rows r, P_r = softmax(S_r + M_r) (recomputed), dP_r = dO_r Vᵀ, dS_r = P_r ⊙ (dP_r − rowsum(dO_r ⊙ O_r)),
dV += P_rᵀ dO_r, G_Q[r] = dS_r Y, G_K += dS_rᵀ Z[r]. Only keys j < end of the chunk are read: every spanviz mask
is causal (M_ij = −inf for j > i). So no (B, H, T, T) tensor lives at any time, and the forward is whatever the
model's fused attention computes — bit-identical for every α. When every block weight equals one number a,
dS' = a·dS: the fused kernel's own backward runs, with dQ and dK scaled by a ([1111] is then exactly plain
training).

Precision: every product and the softmax in float32 (float64 for float64 input), also under bf16 autocast;
gradients are returned in the inputs' dtype. No host synchronisation in the backward on any device for T > d
(:func:`_projector` needs no Cholesky fallback).

**What the model installs** (:func:`build_grad_fns`, end of this file): :mod:`spanviz.model` registers the score
transform on the gradient of the **pre-mask** scores S; the mask is additive (S + M, M = 0 / −inf), so the
softmax backward already gives dS = 0 on masked entries and nothing downstream re-masks dS'. (A hook placed after
a ``masked_fill`` would see a gradient that the masked-fill backward then re-zeroes — a different, wrong result.)
The transform has two forms that give the same gradients (tested for every preset and α): called on dS it is
:mod:`spanviz.spans.core`'s :func:`~spanviz.spans.core.scale_score_grad` (the explicit path, where probes and
hooks see S and P); its ``attention`` method is this file's :func:`span_attention`. The model takes the fused backward
whenever it can (no hook on the scores or pattern, no attention dropout while training, backend not "explicit").

Source: spanviz (the recomputation is flash attention's backward; the grouping is linear algebra on
:mod:`spanviz.spans.core`'s definition).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from spanviz.spans.config import SpanConfig, block_bits
from spanviz.spans.core import (
    QK_SIDES,
    SpanProjector,
    compute_dtype,
    no_autocast,
    qk4_alphas,
    qk_transform,
    ridge_gram,
    scale_score_grad,
)

Attend = Callable[[Tensor, Tensor, Tensor], Tensor]
"""``attend(q, k, v) -> y``: the model's fused attention, (B, H, T, d_head) → (B, H, T, d_v)."""

CHUNK_ELEMENTS = {"cpu": 2**20, "default": 2**26}
"""Elements of one (b, H, rows, keys) float32 tensor of the backward, per device type: 4 MB on a CPU (tiles
from 1 to 16 batch elements timed alike on a 2-core machine at T 512), 256 MB on an accelerator: there a step
is bound by kernel launches (an H100 issued the 4 tiles per layer of T 1024 in 36 ms for 12 ms of standard
step, 2026-11-27), so the whole (B, H, T, T) goes in one tile whenever it fits."""


# --------------------------------------------------------------------------------------- the projector

def _projector(X: Tensor, ridge: float) -> Callable[[Tensor], Tensor]:
    """M ↦ Π_X M for M (..., T, m): :class:`~spanviz.spans.core.SpanProjector`'s projector (same ridge), as
    X (G⁻¹ (Xᵀ M)) with G = XᵀX + λI — for the (T, d) matrices of the fused backward that is cheaper than forming X⁺
    (d×T), and it is two matrix products in the input dtype plus one d×d product.

    G⁻¹ is formed once, in float64 (float32 on MPS, which has no float64), from its Cholesky factor: cond(G) is
    at most about d/ε (the ridge), far below float64's 1/eps, so the factorisation cannot fail for a finite
    X ≠ 0 — where the definition in float32 may fall back on ``pinv`` — and X = 0 gets Π = 0 from a tiny floor on
    the diagonal. No branch, no host synchronisation, no batched ``cholesky_solve`` (slow on a GPU). For T ≤ d
    the definition's own projector runs (Π = I for full-rank X; its rank check synchronises on an accelerator —
    a teaching-sized case).
    """
    T, d = X.shape[-2:]
    if T <= d:
        return SpanProjector(X, ridge, X.dtype).left
    wide = torch.float32 if X.device.type == "mps" else torch.float64
    gram = ridge_gram(X, ridge).to(wide)  # (..., d, d)
    gram.diagonal(dim1=-2, dim2=-1).add_(torch.finfo(wide).tiny ** 0.5)  # X = 0: G = floor·I, Π M = 0
    chol = torch.linalg.cholesky_ex(gram)[0]  # G = L Lᵀ
    eye = torch.eye(d, dtype=wide, device=X.device)
    L_inv = torch.linalg.solve_triangular(chol, eye, upper=False)  # (..., d, d)
    G_inv = L_inv.mT @ L_inv  # G⁻¹ = L⁻ᵀ L⁻¹

    def left(M: Tensor) -> Tensor:
        # Π_X M = X (G⁻¹ (Xᵀ M))
        return X @ (G_inv @ (X.mT @ M).to(wide)).to(X.dtype)

    return left


# --------------------------------------------------------------------------------------- the grouping

def _weights(cfg: SpanConfig) -> dict[tuple[int, ...], float]:
    """w(bits) of every block, bits in slot-list order."""
    return dict(zip(block_bits(cfg.slots), cfg.block_weights()))


def _split(bits: tuple[int, ...], sides: Sequence[str]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(a, c): the bits of the left slots and of the right slots, each in slot-list order."""
    return (tuple(b for b, s in zip(bits, sides) if s == "left"), tuple(b for b, s in zip(bits, sides) if s == "right"))


Ops = Sequence[Callable[[Tensor], Tensor]]
Weights = dict[tuple[int, ...], float]


def _combine(M: Tensor, ops: Ops, w: Weights) -> Tensor | None:
    """Σ_bits w(bits) · F_1^{b1}(F_2^{b2}(⋯ F_n^{bn}(M))), ``ops`` = [F_1 … F_n] (the first outermost; F^0 = Π,
    F^1 = Π^⊥, applied as M − ΠM); weights not in ``w`` are 0. Only the projections a non-zero weight needs are
    made, and none where both halves carry the same weights (Π M + Π^⊥ M = M). None when every weight is 0."""
    if not any(w.values()):
        return None
    if not ops:
        a = w.get((), 0.0)
        return M if a == 1 else a * M
    *outer, inner = ops
    # w split by the innermost bit b_n: w_par(b_1..b_{n−1}) for F_n = Π, w_perp for F_n = Π^⊥
    w_par = {bits[:-1]: x for bits, x in w.items() if bits[-1] == 0}
    w_perp = {bits[:-1]: x for bits, x in w.items() if bits[-1] == 1}
    if {b: x for b, x in w_par.items() if x} == {b: x for b, x in w_perp.items() if x}:
        # equal weights on both halves: Σ w (F⋯)(Π M) + Σ w (F⋯)(Π^⊥ M) = Σ w (F⋯)(M), no projection
        return _combine(M, outer, w_par)
    # Π_n M
    par = inner(M)
    # Σ w_par (F_1⋯F_{n−1})(Π_n M) + Σ w_perp (F_1⋯F_{n−1})(M − Π_n M)
    terms = [_combine(par, outer, w_par), _combine(M - par, outer, w_perp) if any(w_perp.values()) else None]
    terms = [t for t in terms if t is not None]
    return None if not terms else terms[0] if len(terms) == 1 else terms[0] + terms[1]


def _combine_inner_first(M: Tensor, ops: Ops, w: Weights) -> Tensor | None:
    """As :func:`_combine` with the first op innermost: Σ w(bits) · F_n^{bn}(⋯ F_1^{b1}(M)), bits in ``ops`` order."""
    return _combine(M, list(ops)[::-1], {bits[::-1]: x for bits, x in w.items()})


def _plan(cfg: SpanConfig, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Callable[..., tuple[Tensor, Tensor]]]:
    """The matrices dS and dSᵀ are multiplied by, and how dQ and dK are assembled from the products.

    Args: cfg; q, k, v (B, H, T, d) in the compute dtype.
    Returns:
        (Y, Z, finish): Y (B, H, T, g·d) = [Y_1 … Y_g] and Z (B, H, T, g·d) = [Z_1 … Z_g], the g groups side
        by side; ``finish(G_Q, G_K)`` with G_Q = dS Y, G_K = dSᵀ Z (B, H, T, g·d) returns (dQ, dK) / s.
    """
    sides = [side for side, _ in cfg.slots]
    tensors = {"Q": q, "K": k, "V": v}
    projectors = {basis: _projector(tensors[basis], cfg.ridge) for basis in {b for _, b in cfg.slots}}
    ops = [projectors[basis] for _, basis in cfg.slots]  # M ↦ Π M on (T, d) matrices, whatever the side
    left = [op for op, side in zip(ops, sides) if side == "left"]
    right = [op for op, side in zip(ops, sides) if side == "right"]
    w = {_split(bits, sides): weight for bits, weight in _weights(cfg).items()}  # w[(a, c)]
    by_right = len(right) <= len(left)  # group by the side with fewer slots: fewer products with dS
    # For each group g (bits of the grouping side), the weights over the other side's bits
    group_w: dict[tuple[int, ...], Weights] = {}
    for (a, c), x in w.items():
        g, other = (c, a) if by_right else (a, c)
        group_w.setdefault(g, {})[other] = x
    groups = [g for g in sorted(group_w) if any(group_w[g].values())]  # all-zero groups never reach dQ, dK
    if not groups:  # every weight 0: dS' = 0
        zero = torch.zeros_like(q)
        return zero[..., :0], zero[..., :0], lambda GQ, GK: (zero, zero)
    if by_right:  # Y_c = R_c K,  Z_c = Σ_a w(a,c) L_aᵀ Q
        Y = [_combine_inner_first(k, right, {c: 1.0}) for c in groups]
        Z = [_combine_inner_first(q, left, group_w[c]) for c in groups]
    else:  # Y_a = Σ_c w(a,c) R_c K,  Z_a = L_aᵀ Q
        Y = [_combine_inner_first(k, right, group_w[a]) for a in groups]
        Z = [_combine_inner_first(q, left, {a: 1.0}) for a in groups]
    d = q.shape[-1]

    def finish(GQ: Tensor, GK: Tensor) -> tuple[Tensor, Tensor]:
        dQ = dK = 0
        for i, g in enumerate(groups):
            gq, gk = GQ[..., i * d:(i + 1) * d], GK[..., i * d:(i + 1) * d]
            if by_right:  # dQ += Σ_a w(a,c) L_a G_Q,c,  dK += R_cᵀ G_K,c
                dQ = dQ + _combine(gq, left, group_w[g])
                dK = dK + _combine(gk, right, {g: 1.0})
            else:  # dQ += L_a G_Q,a,  dK += Σ_c w(a,c) R_cᵀ G_K,a
                dQ = dQ + _combine(gq, left, {g: 1.0})
                dK = dK + _combine(gk, right, group_w[g])
        return dQ, dK

    def side_by_side(parts: list[Tensor]) -> Tensor:
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    return side_by_side(Y), side_by_side(Z), finish


# ---------------------------------------------------------------------------- the chunked backward

TILE_ROWS = {"cpu": 256, "default": 8192}
"""Query rows per tile at most, per device type: the keys of a tile end at its last row (causal), so shorter tiles
skip more of the masked upper triangle: ½ + ½·rows/T of the full T×T square is computed (flash attention's tiles
do the same). On a CPU that saving counts; an accelerator gains more from fewer, larger kernels."""


def _tiles(shape: torch.Size, device: torch.device) -> tuple[int, int]:
    """(batch elements, query rows) per tile: at most :data:`TILE_ROWS` rows, as many batch elements as keep one
    (b, H, rows, T) float32 tensor of the backward within :data:`CHUNK_ELEMENTS` (fewer rows when one batch
    element alone is over: a long T)."""
    B, H, T = shape[0], shape[1], shape[-2]
    budget = CHUNK_ELEMENTS.get(device.type, CHUNK_ELEMENTS["default"])
    rows = min(T, TILE_ROWS.get(device.type, TILE_ROWS["default"]), max(16, budget // (H * T)))
    return max(1, min(B, budget // (H * rows * T))), rows


def _score_products(q: Tensor, k: Tensor, v: Tensor, o: Tensor, dO: Tensor, mask: Tensor, Y: Tensor, Z: Tensor,
                    tile: tuple[int, int]) -> tuple[Tensor, Tensor, Tensor]:
    """G_Q = dS Y, G_K = dSᵀ Z and dV = Pᵀ dO, with dS and P rebuilt tile by tile (batch elements × query rows).

    Args: q, k, v, o, dO (B, H, T, d); mask (H, T, T) or (T, T) additive (0 / −inf, causal); Y, Z (B, H, T, e);
        tile: (batch elements, rows) per tile.
    Returns: G_Q, G_K (B, H, T, e), dV (B, H, T, d).
    """
    B, T = q.shape[0], q.shape[-2]
    q = q * q.shape[-1] ** -0.5  # S = (q s) kᵀ
    GQ = torch.empty_like(Y)
    GK = torch.zeros_like(Z)
    dV = torch.zeros_like(v)
    # rowsum(dP ⊙ P) = rowsum(dO ⊙ O): Σ_j (dO_i · v_j) P_ij = dO_i · O_i
    D = (dO * o).sum(-1, keepdim=True)  # (B, H, T, 1)
    nb, rows = tile
    for b0 in range(0, B, nb):
        b = slice(b0, b0 + nb)
        for r0 in range(0, T, rows):
            r = slice(r0, min(T, r0 + rows))
            keys = slice(0, r.stop)  # causal: these rows see keys before r.stop only
            # P_r = softmax(q_r kᵀ s + M_r)
            S = torch.matmul(q[b, :, r], k[b, :, keys].mT)  # (b, H, C, r1)
            S.add_(mask[..., r, keys])
            P = torch.softmax(S, dim=-1)
            del S
            # dS_r = P_r ⊙ (dO_r vᵀ − D_r)
            dS = torch.matmul(dO[b, :, r], v[b, :, keys].mT)  # (b, H, C, r1), dP_r first
            dS.sub_(D[b, :, r]).mul_(P)
            dV[b, :, keys] += torch.matmul(P.mT, dO[b, :, r])
            del P
            GQ[b, :, r] = torch.matmul(dS, Y[b, :, keys])
            GK[b, :, keys] += torch.matmul(dS.mT, Z[b, :, r])
    return GQ, GK, dV


class _SpanAttention(torch.autograd.Function):
    """y = attend(q, k, v); backward: dV plain, dQ and dK of the α-scaled score gradient (module docstring)."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, cfg: SpanConfig, attend: Attend,  # type: ignore[override]
                mask: Tensor) -> Tensor:
        y = attend(q, k, v)
        ctx.cfg, ctx.mask = cfg, mask
        ctx.save_for_backward(q, k, v, y)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        q, k, v, y = ctx.saved_tensors
        dtype = compute_dtype(q.dtype)
        with torch.no_grad(), no_autocast(q.device):
            q32, k32, v32, y32, dy32 = (t.to(dtype).contiguous() for t in (q, k, v, y, dy))
            Y, Z, finish = _plan(ctx.cfg, q32, k32, v32)
            GQ, GK, dV = _score_products(q32, k32, v32, y32, dy32, ctx.mask.to(dtype), Y, Z,
                                         _tiles(q.shape, q.device))
            dQ, dK = finish(GQ, GK)
            scale = q.shape[-1] ** -0.5
            return (dQ.mul_(scale).to(q.dtype), dK.mul_(scale).to(k.dtype), dV.to(v.dtype), None, None, None)


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; multiplies the gradient by a constant in backward."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, a: float) -> Tensor:  # type: ignore[override]
        ctx.a = a
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        return g * ctx.a, None


def span_attention(q: Tensor, k: Tensor, v: Tensor, cfg: SpanConfig, attend: Attend, mask: Tensor) -> Tensor:
    """Attention whose backward applies the span transform of ``cfg`` to the score gradient — the fused backward.

    Args:
        q, k: (B, H, T, d_head); v: (B, H, T, d_v), as the model's attention takes them.
        cfg: the setting (slots, α or ``block_alphas``, ridge; ``layers`` is the model's business).
        attend: the model's fused attention ``attend(q, k, v) -> y``; it *is* the forward, so the output equals
            the model's plain fused attention bit for bit, whatever the α.
        mask: the additive mask of ``attend`` (0 / −inf), (H, T, T) or (T, T), causal (−inf above the diagonal).
    Returns:
        y (B, H, T, d_v). Its backward gives dV as plain attention and dQ = dS' K/√d, dK = dS'ᵀ Q/√d with
        dS' = :func:`~spanviz.spans.core.scale_score_grad`'s transform of ∂L/∂S (equal to it to fp32 rounding, tested).
    Source: spanviz (see the module docstring).
    """
    weights = set(cfg.block_weights())
    if len(weights) == 1:  # dS' = a·dS: dQ and dK scale by a, the fused kernel's backward does the rest
        (a,) = weights
        if a != 1:
            q, k = _ScaleGrad.apply(q, a), _ScaleGrad.apply(k, a)
        return attend(q, k, v)
    return _SpanAttention.apply(q, k, v, cfg, attend, mask)


# ------------------------------------------------------------------------------ what the model installs

ScoreGradFn = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
"""``fn(dS, q, k, v) -> dS'``: dS (B, H, T, T) the gradient of the pre-mask scores, q, k, v (B, H, T, d_head)."""
QKGradFn = Callable[[Tensor, Tensor, str], Tensor]
"""``fn(grad, x, side) -> grad'``: ∂L/∂q (side "q", x = q) or ∂L/∂k (side "k", x = k), (B, H, T, d_head)."""


class ScoreTransform:
    """The score-gradient transform of one :class:`SpanConfig`, in its two forms.

    ``transform(dS, q, k, v) -> dS'``: the definition (:func:`~spanviz.spans.core.scale_score_grad`, grouped), a
    :data:`ScoreGradFn` for the gradient hook on the explicit scores. ``transform.attention(q, k, v, attend,
    mask) -> y``: the fused backward (:func:`span_attention`).
    """

    def __init__(self, cfg: SpanConfig) -> None:
        self.cfg = cfg

    def __call__(self, dS: Tensor, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return scale_score_grad(dS, q, k, v, self.cfg)

    def attention(self, q: Tensor, k: Tensor, v: Tensor, attend: Attend, mask: Tensor) -> Tensor:
        return span_attention(q, k, v, self.cfg, attend, mask)

    def __repr__(self) -> str:
        return f"ScoreTransform({self.cfg.label()})"


def build_grad_fns(cfg: SpanConfig) -> tuple[ScoreGradFn | None, QKGradFn | None]:
    """The backward transforms :meth:`spanviz.model.TinyGPT.set_span_scaling` installs on a layer.

    Returns:
        (score_grad_fn, None) for kv8, qkv8 and custom slots: a :class:`ScoreTransform`,
        ``score_grad_fn(dS, q, k, v) -> dS'`` with dS (B, H, T, T) the gradient of the pre-mask scores and q, k,
        v (B, H, T, d_head) detached, whose ``attention`` method is the fused backward the model trains with.
        (None, qk_grad_fn) for qk4: ``qk_grad_fn(grad, x, side) -> grad'`` applied to ∂L/∂q with x = q,
        side "q", and to ∂L/∂k with x = k, side "k" (the closed form :func:`~spanviz.spans.core.scale_qk_grad`;
        works with fused attention, for order α and for ``block_alphas`` alike; with the fused backward's projector,
        :func:`~spanviz.spans.core.qk_transform`).
        The hooks are installed even when every α is 1 (they then return the gradient unchanged).
    Raises:
        ValueError: cfg is not a SpanConfig.
    Source: spanviz.
    """
    if not isinstance(cfg, SpanConfig):
        raise ValueError(f"cfg must be a SpanConfig, got {type(cfg).__name__}")
    if cfg.preset == "qk4":
        pairs = {side: qk4_alphas(cfg, side) for side in QK_SIDES}

        def qk_grad_fn(grad: Tensor, x: Tensor, side: str) -> Tensor:
            alpha_par, alpha_perp = pairs[side]
            # the same closed form as scale_qk_grad, with this file's sync-free projector
            return qk_transform(alpha_par, alpha_perp, grad,
                                lambda g: _projector(x.detach().to(g.dtype).contiguous(), cfg.ridge)(g))

        return None, qk_grad_fn

    return ScoreTransform(cfg), None
