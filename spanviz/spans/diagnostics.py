"""Span geometry and the explicit blocks, as tensors to look at: every block of dS (:func:`decompose`), the
energy share per order, principal angles between the spans of Q, K, V, Gram conditioning and the ridge's bias.
Pure tensor functions (no model); :mod:`spanviz.spans.probes` runs them on a model during training.

Source: spanviz (the decomposition is its reconstruction of arXiv 2512.13033, see :mod:`spanviz.spans.core`);
principal angles and condition numbers are the standard definitions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from spanviz.spans.config import DEFAULT_RIDGE, Slot, SpanConfig, _check_qkv, _resolve_ridge, _resolve_slots, block_bits
from spanviz.spans.core import _all_blocks, _compute_dtype, _no_autocast, _projectors, _slot_ops


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
    Source: spanviz reconstruction (:mod:`spanviz.spans.core`).
    """
    slots = _resolve_slots(decomposition)
    ridge = _resolve_ridge(decomposition, ridge)
    _check_qkv(dS, q, k, v)
    with torch.no_grad(), _no_autocast(dS.device):
        dS32 = dS.detach().to(_compute_dtype(dS.dtype))
        blocks = _all_blocks(dS32, _slot_ops(slots, _projectors(slots, q, k, v, ridge, dS32.dtype)))
        return torch.stack([blocks[b] for b in block_bits(slots)]).to(dS.dtype)  # (2ⁿ, ..., T, T)


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
    # share_o = ‖D_o‖² / Σ_o ‖D_o‖²
    energy = per_order.double().pow(2).sum(dim=(1, 3, 4))  # (n_orders, H)
    total = energy.sum(0, keepdim=True)
    return torch.where(total > 0, energy / total.clamp_min(1e-300), torch.zeros_like(energy)).float()


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
    qx = torch.linalg.qr(X.detach().double()).Q  # (..., T, d_x), orthonormal columns
    qy = torch.linalg.qr(Y.detach().double()).Q  # (..., T, d_y)
    # cos θ_i = σ_i(Q_Xᵀ Q_Y)
    return torch.linalg.svdvals(qx.transpose(-2, -1) @ qy).clamp(0.0, 1.0)


def gram_condition(X: Tensor) -> Tensor:
    """Condition number κ(XᵀX) = (σ_max/σ_min)² of the d×d Gram of X (..., T, d), in float64; inf when
    X is rank deficient (always when T < d). Returns (...,). Source: standard definition."""
    if X.dim() < 2:
        raise ValueError(f"X must have shape (..., T, d), got {tuple(X.shape)}")
    s = torch.linalg.svdvals(X.detach().double())  # (..., min(T, d)), largest first
    if X.shape[-2] < X.shape[-1]:
        return torch.full(s.shape[:-1], math.inf, dtype=torch.float64, device=s.device)
    # κ(XᵀX) = (σ_max/σ_min)²
    return torch.where(s[..., -1] > 0, (s[..., 0] / s[..., -1]).pow(2), torch.full_like(s[..., 0], math.inf))


def ridge_bias(X: Tensor, ridge: float = DEFAULT_RIDGE) -> Tensor:
    """How much the ridge under-projects: ‖Π_X − Π_X,ridge‖₂ = λ/(s_min² + λ), λ = ε·tr(XᵀX)/d.

    Π_X,ridge = X(XᵀX + λI)⁻¹Xᵀ has eigenvalues s_i²/(s_i² + λ) on the span of X (s_i its singular values),
    so the worst direction loses λ/(s_min² + λ) ≤ ε·(tr(XᵀX)/d)/s_min² ≤ ε·κ(XᵀX) of its length (at the
    default ε = 1e-6: ≈ 4e-6 at κ 8, ≈ 2.6e-4 at κ 3e3).

    Args: X: (..., T, d) with T > d; ridge: ε >= 0. Computed in float64.
    Returns: (...,) the bias, in [0, 1] (1 when X is rank deficient: a direction of the span is lost).
    Raises: ValueError for X with T <= d (no ridge is used there) or a bad ridge.
    Source: spanviz (spectral calculus of the ridge projector).
    """
    if X.dim() < 2 or X.shape[-2] <= X.shape[-1]:
        raise ValueError(f"X must have shape (..., T, d) with T > d, got {tuple(X.shape)}")
    ridge = _resolve_ridge(None, ridge)
    s2 = torch.linalg.svdvals(X.detach().double()).pow(2)  # (..., d)
    # λ = ε·tr(XᵀX)/d = ε·Σ s_i²/d
    lam = ridge * s2.sum(-1) / X.shape[-1]  # (...,)
    # bias = λ/(s_min² + λ)
    return torch.where(lam > 0, lam / (s2[..., -1] + lam), torch.zeros_like(lam))
