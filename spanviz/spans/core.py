"""The technique: split ∂L/∂S into blocks by projections onto the spans of Q, K, V, and scale them by order.

Source: arXiv 2512.13033 for the 8 blocks by order and the α brackets (what its abstract and the published
summaries say is in :mod:`spanviz.spans`); **the exact placement of the projections is spanviz's
reconstruction**, defined here and in docs/spans.md.

Notation, per (batch, head): Q, K, V ∈ R^{T×d} (d = d_head, T = context length), S = QKᵀ/√d (pre-mask),
dS = ∂L/∂S ∈ R^{T×T}.

* **Projector** (token space): Π_X = X (XᵀX)⁻¹ Xᵀ ∈ R^{T×T}, the orthogonal projector onto the column span
  of X (a d-dimensional subspace of R^T); Π_X^⊥ = I − Π_X. Only the d×d Gram XᵀX is inverted and no T×T
  matrix is formed: with X⁺ = (XᵀX + λI)⁻¹Xᵀ (d×T, by Cholesky), Π_X M = X (X⁺ M) and M Π_X = (M X) X⁺.
  Ridge λ = ε·tr(XᵀX)/d (ε = ``ridge``, default 1e-6); pinv fallback when Cholesky fails. The ridge
  under-projects by at most ε·κ(XᵀX) (:func:`~spanviz.spans.probe.ridge_bias`, which ``SpanProbe``
  reports with κ). If T ≤ d and X has rank T, Π_X = I exactly and Π_X^⊥ = 0: nothing to scale. If T ≤ d but
  rank(X) < T (e.g. K = 0, or ``qk_rank`` < T ≤ d_head for q), Π_X projects onto the smaller span.
* **Slot**: (side, basis) with side ∈ {left, right}, basis ∈ {Q, K, V}; it inserts I = Π + Π^⊥ on that
  side of dS. A **decomposition** is an ordered slot list; n slots give 2ⁿ **blocks**, one per choice of
  Π or Π^⊥ in each slot. A block's **order** is its number of Π^⊥ factors. On each side the first slot in
  the list is the outermost (farthest from dS): slots [L1, L2, R1, R2] give blocks L1 L2 · dS · R2 R1.
  Complements are always computed as M − ΠM, so the blocks sum to dS exactly, whatever the ridge.
* **Scaling**: dS' = Σ_blocks α_order(block) · block (or a per-block α, ``block_alphas``). dS' = dS when
  every α is 1. Negative α are allowed but leave the paper's setting (it only scales down parallel/violation
  parts); use them to explore, not to reproduce.
* **Presets** (:data:`~spanviz.spans.config.PRESET_SLOTS`): ``kv8`` (default) blocks Π_K^a Π_V^b · dS · Π_V^c,
  ``qkv8`` Π_Q^a · dS · Π_V^c Π_K^b, ``qk4`` Π_Q^a · dS · Π_K^b (its closed form: :func:`scale_qk_grad`).
  Blocks are named S1..S2ⁿ by order (:func:`~spanviz.spans.config.block_names`).

Read top to bottom: the projector; the blocks (:func:`decompose`); the α scaling by its definition — form the
2ⁿ blocks, weight, sum (the reference every faster computation is tested against); then, labelled, the **grouped
sum**: the same sum that :func:`scale_score_grad` runs by default (per-order sums, no block formed); the qk4 closed
form (:func:`qk_transform`, its projector passed in). The **fused backward** the model trains with — fused attention
forward, the same gradients recomputed from rows — and the transforms the model installs
(:func:`~spanviz.spans.fused.build_grad_fns`): :mod:`spanviz.spans.fused`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

import torch
from torch import Tensor

from spanviz.spans.config import DEFAULT_RIDGE, Slot, SpanConfig, block_bits, resolve_ridge, resolve_slots
from spanviz.validators import check_choice, check_tensor

logger = logging.getLogger(__name__)

METHODS = ("grouped", "blocks")
QK_SIDES = ("q", "k")


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32, or float64 when the input is float64 (half/bfloat16 are computed in float32): the precision of
    every projection here and in :mod:`spanviz.spans.fused`. Source: spanviz."""
    return torch.promote_types(dtype, torch.float32)


def no_autocast(device: torch.device) -> torch.autocast:
    """Autocast off on ``device``'s type (it would run the matmuls in bf16 under a bf16 autocast region), for the
    projections of this file and :mod:`spanviz.spans.fused`. Source: spanviz."""
    return torch.autocast(device_type=device.type, enabled=False)


def _check_qkv(dS: Tensor, q: Tensor, k: Tensor, v: Tensor, *, finite: bool) -> None:
    """Raise ``ValueError`` unless dS is (..., T, T) and q, k, v are (..., T, d_head) with dS's leading dims, all
    floating point (float16/bfloat16/float32/float64), non-empty, on dS's device, and — when ``finite`` — finite.

    ``finite`` costs a pass over each tensor and, on a GPU, a synchronisation: :func:`decompose` (a public door,
    called per figure) checks it; :func:`scale_score_grad` runs inside every training backward pass, where a
    non-finite gradient is the training guards' business (they stop the run), so it does not."""
    check_tensor("dS", dS, min_ndim=2, finite=finite)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, min_ndim=2, finite=finite, device=dS.device)
    T = dS.shape[-1]
    if dS.shape[-2] != T:
        raise ValueError(f"dS must have shape (..., T, T), got {tuple(dS.shape)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.shape[:-1] != dS.shape[:-1]:
            raise ValueError(f"{name} must have shape {tuple(dS.shape[:-1])} + (d_head,), got {tuple(t.shape)}")


# ---------------------------------------------------------------------------------------- projector

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
            The ridge under-projects by at most λ/(s_min² + λ) ≤ ε·κ(XᵀX)
            (see :func:`~spanviz.spans.probe.ridge_bias`).

    ``left(M)`` = Π_X M for M (..., T, m); ``right(M)`` = M Π_X for M (..., m, T). Each costs two matmuls,
    O(T·m·d). Source: spanviz reconstruction of the paper's "d×d Gram inverse" projectors.
    """

    def __init__(self, X: Tensor, ridge: float = DEFAULT_RIDGE, dtype: torch.dtype | None = None) -> None:
        X = X.detach()
        # One contiguous copy: q, k, v are (B, T, H, d) memory seen as (B, H, T, d), and every batched
        # matmul would otherwise copy them again.
        self.X = X.to(dtype or compute_dtype(X.dtype)).contiguous()  # (..., T, d)
        T, d = X.shape[-2], X.shape[-1]
        # T <= d: the span is all of R^T only if X has full row rank (K = 0 or a low-rank q has a smaller span)
        self.identity = T <= d and bool((torch.linalg.matrix_rank(self.X) == T).all())
        self.pinv = None if self.identity else _ridge_pinv(self.X, ridge)  # (..., d, T)

    def left(self, M: Tensor) -> Tensor:
        """Π_X M, M (..., T, m) → (..., T, m)."""
        # Π_X M = X (X⁺ M)
        return M if self.identity else self.X @ (self.pinv @ M)

    def right(self, M: Tensor) -> Tensor:
        """M Π_X, M (..., m, T) → (..., m, T)."""
        # M Π_X = (M X) X⁺
        return M if self.identity else (M @ self.X) @ self.pinv


def ridge_gram(X: Tensor, ridge: float) -> Tensor:
    """XᵀX + λI with λ = ridge·tr(XᵀX)/d; X (..., T, d) → (..., d, d)."""
    gram = X.transpose(-2, -1) @ X  # (..., d, d)
    d = gram.shape[-1]
    # λ = ε·tr(XᵀX)/d
    lam = ridge * gram.diagonal(dim1=-2, dim2=-1).sum(-1) / d  # (...,)
    gram.diagonal(dim1=-2, dim2=-1).add_(lam[..., None])
    return gram


def _ridge_pinv(X: Tensor, ridge: float) -> Tensor:
    """(XᵀX + λI)⁻¹ Xᵀ with λ = ridge·tr(XᵀX)/d; X (..., T, d) → (..., d, T)."""
    Xt = X.transpose(-2, -1)  # (..., d, T), a view: matmul and the solves take it without a copy
    # XᵀX + λI = L Lᵀ
    chol, info = torch.linalg.cholesky_ex(ridge_gram(X, ridge))  # (..., d, d), (...,)
    # (L Lᵀ)⁻¹ Xᵀ = L⁻ᵀ (L⁻¹ Xᵀ): two triangular solves — what cholesky_solve does (bit for bit on CPU), but
    # 3.5× faster on an H100 at (B 8, H 4, T 1024, d 64), where batched cholesky_solve took 0.50 ms.
    pinv = torch.linalg.solve_triangular(chol.mT, torch.linalg.solve_triangular(chol, Xt, upper=False), upper=True)
    failed = info != 0
    if bool(failed.any()):  # X is (numerically) rank deficient even with the ridge, e.g. X = 0
        logger.debug("Cholesky failed for %d of %d Gram matrices; using pinv", int(failed.sum()), failed.numel())
        pinv = torch.where(failed[..., None, None], torch.linalg.pinv(X), pinv)
    return pinv


# ------------------------------------------------------------------------------------------ the blocks

def _projectors(
    slots: Sequence[Slot], q: Tensor, k: Tensor, v: Tensor, ridge: float, dtype: torch.dtype
) -> dict[str, SpanProjector]:
    """One projector per basis used (kv8 builds Π_V once for its two V slots)."""
    tensors = {"Q": q, "K": k, "V": v}
    return {basis: SpanProjector(tensors[basis], ridge, dtype) for basis in {b for _, b in slots}}


def _slot_ops(slots: Sequence[Slot], projectors: Mapping[str, SpanProjector]) -> list[Callable[[Tensor], Tensor]]:
    """The linear map M ↦ Π M (left slot) or M ↦ M Π (right slot) of each slot, in slot-list order."""
    return [projectors[basis].left if side == "left" else projectors[basis].right for side, basis in slots]


def _all_blocks(dS: Tensor, ops: Sequence[Callable[[Tensor], Tensor]]) -> dict[tuple[int, ...], Tensor]:
    """Every block, keyed by its bits. Slots are applied innermost first (the last slot in the list);
    each projection splits a tensor M into (Π-part, M − Π-part). 2ⁿ − 1 projections in all."""
    blocks: dict[tuple[int, ...], Tensor] = {(): dS}
    for op in reversed(ops):  # slot i = n, n − 1, …, 1: the last slot in the list is the innermost factor
        split: dict[tuple[int, ...], Tensor] = {}
        for bits, M in blocks.items():  # M = F_{i+1} ⋯ F_n applied to dS, one block of the inner slots
            # Π_i M: Π M for a left slot, M Π for a right slot
            par = op(M)
            # M = Π_i M + Π_i^⊥ M with Π_i^⊥ M = M − Π_i M (by subtraction, so the blocks sum to dS whatever the
            # ridge); bit 0 = Π, bit 1 = Π^⊥, put in front because slot i is outside the slots already applied
            split[(0,) + bits], split[(1,) + bits] = par, M - par
        blocks = split
    # 2ⁿ blocks, keyed by bits (b_1 … b_n); the order of a block is Σ b_i, its number of Π^⊥ factors
    return blocks


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
        ValueError: naming the argument: bad shapes, preset or slots; a tensor that is not floating point
            (integer, bool, complex, float8), empty, non-finite, on the meta device or not on dS's device.
    Source: spanviz reconstruction (module docstring).
    """
    slots = resolve_slots(decomposition)
    ridge = resolve_ridge(decomposition, ridge)
    _check_qkv(dS, q, k, v, finite=True)
    with torch.no_grad(), no_autocast(dS.device):
        dS32 = dS.detach().to(compute_dtype(dS.dtype))
        blocks = _all_blocks(dS32, _slot_ops(slots, _projectors(slots, q, k, v, ridge, dS32.dtype)))
        return torch.stack([blocks[b] for b in block_bits(slots)]).to(dS.dtype)  # (2ⁿ, ..., T, T)


# ------------------------------------------------------------------------------ α scaling: the definition

def _weighted_sum(terms: Iterable[tuple[float, Tensor | None]]) -> Tensor | None:
    """Σ c·M over terms, skipping zero coefficients and dropped (None) tensors; None if nothing is left."""
    out = None
    for c, M in terms:
        if M is None or c == 0:
            continue
        # out ← out + c·M (no multiply for c = 1)
        term = M if c == 1 else c * M
        out = term if out is None else out + term
    return out


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
        method: "grouped" (default: the grouped sum, per-order α without forming the blocks, see
            ``_order_scaled``; returns α0·dS at once when all α are equal) or "blocks" (the definition: forms
            all 2ⁿ blocks and sums them — the readable reference). ``block_alphas`` always use "blocks".
    Returns:
        dS' with dS's shape and dtype (computed in float32, or float64 for float64 input).
    Raises:
        ValueError: bad shapes, cfg or method.
    Source: the α-per-order scaling is the paper's; the decomposition is spanviz's reconstruction.
    """
    cfg = SpanConfig() if cfg is None else cfg
    if not isinstance(cfg, SpanConfig):
        raise ValueError(f"cfg must be a SpanConfig or None, got {type(cfg).__name__}")
    check_choice("method", method, METHODS)
    _check_qkv(dS, q, k, v, finite=False)
    with torch.no_grad(), no_autocast(dS.device):
        dS32 = dS.to(compute_dtype(dS.dtype)).contiguous()  # (..., T, T)
        ops = _slot_ops(cfg.slots, _projectors(cfg.slots, q, k, v, cfg.ridge, dS32.dtype))
        if method == "blocks" or cfg.block_alphas is not None:
            # The definition: dS' = Σ_i α_i · S_i over the 2ⁿ blocks S_i, formed one by one
            blocks = _all_blocks(dS32, ops)
            out = _weighted_sum((w, blocks[b]) for w, b in zip(cfg.block_weights(), block_bits(cfg.slots)))
            out = torch.zeros_like(dS32) if out is None else out
        else:
            # The grouped sum: dS' = Σ_o α_o · D_o, D_o = Σ of the blocks of order o, without forming any block
            out = _order_scaled(dS32, ops, cfg.alphas)
        return out.to(dS.dtype)


# ----------------------------------------------------------------------------- α scaling: the grouped sum
#
# The same dS' as the definition above, by the default method "grouped": blocks of one order share α, so only
# the per-order sums are carried along the slots and no block is formed. Tested equal to the definition.

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
        # dS' = α_0 Σ_blocks S_i = α_0 dS
        return dS if alphas[0] == 1 else alphas[0] * dS
    # P_0 = dS before any slot (0 ⊥ factors)
    parts: list[Tensor | None] = [dS]
    for step, op in enumerate(reversed(ops[1:])):  # slots n, n − 1, …, 2, innermost first; slot 1 is folded below
        remaining = n - 1 - step  # slots still to apply after this one, the outermost included
        # A part with j ⊥ so far ends in orders j .. j + remaining: needed unless all those α are 0.
        needed = [any(alphas[j : j + remaining + 1]) for j in range(len(parts) + 1)]
        new: list[Tensor | None] = [None] * (len(parts) + 1)
        for j, M in enumerate(parts):  # M = P_j, the sum of the blocks so far with j ⊥ factors
            if M is None:
                continue
            # Π P_j (Π M for a left slot, M Π for a right one)
            par = op(M)
            if needed[j]:
                # P'_j = Π P_j + Π^⊥ P_{j−1}: the Π half keeps j ⊥ factors (Π^⊥ P_{j−1} was set at step j − 1)
                new[j] = par if new[j] is None else new[j] + par
            if needed[j + 1]:
                # P'_{j+1} starts with Π^⊥ P_j = P_j − Π P_j, one ⊥ factor more
                new[j + 1] = M - par
        parts = new
    outer = ops[0]
    # dS' = Σ_j α_{j+1} P_j + Π_outer (Σ_j (α_j − α_{j+1}) P_j)
    kept = _weighted_sum((alphas[j + 1], M) for j, M in enumerate(parts))
    diff = _weighted_sum((alphas[j] - alphas[j + 1], M) for j, M in enumerate(parts))
    out = _weighted_sum([(1, kept), (1, None if diff is None else outer(diff))])
    return torch.zeros_like(dS) if out is None else out


# ---------------------------------------------------------------------------------- qk4 closed form

def qk4_alphas(cfg: SpanConfig, side: str) -> tuple[float, float]:
    """(α on Π_X, α on Π_X^⊥) of the qk4 closed form for ∂L/∂q (side "q") or ∂L/∂k (side "k"); unchecked (cfg
    a qk4 SpanConfig, side in :data:`QK_SIDES`), shared with the training hook of :mod:`spanviz.spans.fused`.

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
    check_choice("side", side, QK_SIDES)
    if not isinstance(grad, Tensor) or not isinstance(x, Tensor) or grad.shape != x.shape or grad.dim() < 2:
        raise ValueError(f"grad and x must be tensors of the same shape (..., T, d_head), got "
                         f"{getattr(grad, 'shape', grad)!r} and {getattr(x, 'shape', x)!r}")
    alpha_par, alpha_perp = qk4_alphas(cfg, side)
    return qk_transform(alpha_par, alpha_perp, grad, lambda g: SpanProjector(x, cfg.ridge, g.dtype).left(g))


def qk_transform(alpha_par: float, alpha_perp: float, grad: Tensor, project: Callable[[Tensor], Tensor]) -> Tensor:
    """qk4's closed form g' = α_par Π_X g + α_perp (g − Π_X g) = α_perp g + (α_par − α_perp) Π_X g, unchecked: the
    body of :func:`scale_qk_grad` and of the hook the model trains with (:func:`~spanviz.spans.fused.build_grad_fns`),
    which differ only in the projector ``project``: g (..., T, d_head) ↦ Π_X g (the definition's
    :class:`SpanProjector` here, the fused backward's sync-free one there). grad (..., T, d_head); computed in float32
    (float64 for float64 input), returned in grad's dtype. Source: spanviz reconstruction (module docstring)."""
    if alpha_par == alpha_perp:
        return grad if alpha_par == 1 else alpha_par * grad
    with torch.no_grad(), no_autocast(grad.device):
        g = grad.to(compute_dtype(grad.dtype)).contiguous()  # (..., T, d_head)
        # g' = α_perp g + (α_par − α_perp) Π_X g
        return (alpha_perp * g + (alpha_par - alpha_perp) * project(g)).to(grad.dtype)
