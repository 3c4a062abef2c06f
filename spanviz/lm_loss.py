"""The language-model loss without the (B·T, V) logits: lm_head and cross-entropy a chunk of rows at a time.

The plain loss ``F.cross_entropy(h @ Wᵀ, y)`` materialises the logits (N, V) with N = B·T, their log-softmax and,
in the backward, their gradient — three float32 arrays of N·V: 67 MB each at the notebook size (B 16, T 128,
V 8192), 537 MB at T 1024. Arrays that large are mapped from the operating system and handed back at every
step, so every step also pays for about 10⁵ fresh page faults. Here the same loss and gradients come from
chunks of ``rows`` rows:

    for rows c:  z_c = h_c Wᵀ (c, V);  ℓ_c = logsumexp(z_c) − z_c[y_c];  g_c = softmax(z_c) − onehot(y_c)
                 ∂L/∂h_c = g_c W / N,   ∂L/∂W += g_cᵀ h_c / N

with the gradients computed in the forward pass (the chunk of logits is at hand then) and scaled by the
incoming gradient in the backward. Three matrix products of N·V·d, as the plain loss needs; the largest array is
one chunk (``rows``·V). Equal to the plain loss and its gradients to float32 rounding (tested).

Under autocast the products run in the autocast dtype and the softmax in float32, as ``lm_head`` under autocast
followed by ``.float()`` and ``F.cross_entropy`` do. Source: spanviz (the chunking is the common "fused linear
cross-entropy" of large-vocabulary training).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

CHUNK_ELEMENTS = 2**21
"""Logits per chunk (8 MB of float32): 256 rows at V 8192 — small enough for a CPU's cache and never handed
back to the operating system, large enough that the products stay efficient."""


def chunk_rows(vocab_size: int, elements: int = CHUNK_ELEMENTS) -> int:
    """Rows per chunk for a vocabulary of ``vocab_size``: about ``elements`` logits, at least 16 rows."""
    return max(16, elements // max(1, vocab_size))


def _chunk_logits(h: Tensor, weight: Tensor) -> Tensor:
    """z = h Wᵀ for one chunk, in float32 or wider (computed in the autocast dtype when autocast is on)."""
    z = h @ weight.mT  # (c, V)
    return z.to(torch.promote_types(z.dtype, torch.float32))


def lm_cross_entropy(h: Tensor, weight: Tensor, targets: Tensor, rows: int | None = None) -> Tensor:
    """Mean cross-entropy of the logits h Wᵀ against ``targets`` [nats], never forming all logits at once.

    Args:
        h: (N, d) final hidden states (after the last LayerNorm).
        weight: (V, d) the output embedding (lm_head's weight).
        targets: (N,) int64 in [0, V).
        rows: rows per chunk; None = :func:`chunk_rows`.
    Returns:
        A scalar: mean_i [logsumexp_j (h Wᵀ)_ij − (h Wᵀ)_{i, y_i}], equal to
        ``F.cross_entropy((h @ weight.T).float(), targets)`` to float32 rounding, with its gradients for h and
        weight (when they require grad and grad mode is on).
    Raises:
        ValueError: shapes that do not fit.
    Source: spanviz (module docstring).
    """
    if h.dim() != 2 or weight.dim() != 2 or h.shape[1] != weight.shape[1] or targets.shape != h.shape[:1]:
        raise ValueError(f"h (N, d), weight (V, d) and targets (N,) must fit, got {tuple(h.shape)}, "
                         f"{tuple(weight.shape)} and {tuple(targets.shape)}")
    rows = chunk_rows(weight.shape[0]) if rows is None else rows
    if torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad):
        return _LMCrossEntropy.apply(h, weight, targets, rows)
    total = h.new_zeros((), dtype=torch.float32)
    for r0 in range(0, h.shape[0], rows):
        total = total + F.cross_entropy(_chunk_logits(h[r0:r0 + rows], weight), targets[r0:r0 + rows],
                                        reduction="sum")
    return total / h.shape[0]


class _LMCrossEntropy(torch.autograd.Function):
    """Loss and gradients chunk by chunk in the forward; the backward scales the stored gradients."""

    @staticmethod
    def forward(ctx: Any, h: Tensor, weight: Tensor, targets: Tensor, rows: int) -> Tensor:  # type: ignore[override]
        N = h.shape[0]
        total = h.new_zeros((), dtype=torch.float32)
        dh = torch.empty_like(h)
        dW = torch.zeros(weight.shape, dtype=torch.promote_types(weight.dtype, torch.float32), device=weight.device)
        autocast = torch.is_autocast_enabled(h.device.type)
        for r0 in range(0, N, rows):
            hc, yc = h[r0:r0 + rows], targets[r0:r0 + rows, None]
            z = _chunk_logits(hc, weight)  # (c, V) float32
            z_y = z.gather(1, yc)  # (c, 1)
            # ℓ_i = logsumexp(z_i) − z_{i, y_i} = m_i + log Σ_j exp(z_ij − m_i) − z_{i, y_i},  m_i = max_j z_ij
            m = z.amax(dim=1, keepdim=True)
            e = z.sub_(m).exp_()  # in place: z is not needed any more
            s = e.sum(dim=1, keepdim=True)
            total = total + (m + s.log() - z_y).sum()
            # g = softmax(z) − onehot(y) = ∂ℓ_i/∂z_i
            g = e.div_(s)
            g.scatter_add_(1, yc, g.new_full(yc.shape, -1.0))
            # ∂/∂h_c = g W,  ∂/∂W += gᵀ h_c  (the 1/N comes in the backward). Under autocast the products run in
            # its dtype, as the plain loss's backward casts the logits' gradient; without, they write in place.
            if autocast:
                dh[r0:r0 + rows] = g @ weight
                dW += g.mT @ hc
            else:
                torch.matmul(g, weight, out=dh[r0:r0 + rows])
                dW.addmm_(g.mT, hc)
        ctx.save_for_backward(dh, dW)
        ctx.weight_dtype, ctx.n = weight.dtype, N
        return total / N

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        dh, dW = ctx.saved_tensors
        scale = grad / ctx.n
        dh_out = dh * scale.to(dh.dtype) if ctx.needs_input_grad[0] else None
        dW_out = (dW * scale).to(ctx.weight_dtype) if ctx.needs_input_grad[1] else None
        return dh_out, dW_out, None, None
