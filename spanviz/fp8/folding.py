"""From a GPT block to the bilinear form the bounds need: LayerNorm gain/bias and q/k biases folded into W^Q, W^K.

With x̂ the LayerNorm output *without* gain (‖x̂‖² <= d_model), q_h = (g ⊙ x̂ + β) W^Q_h + b^Q_h =
[x̂, 1] · [diag(g) W^Q_h ; β W^Q_h + b^Q_h] (same for k), so ρ² = d_model, or d_model + 1 with the constant-1
column, holds for every input and σ^(ℓ) = max_h ‖W̃^Q_h W̃^K_hᵀ‖₂ (:func:`layer_sigma`) is what the scale uses.
Reads ``block.ln_1`` and ``block.attn.qk_weights()`` (:class:`spanviz.model.Block` by duck typing; no import).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from spanviz.fp8.core import spectral_norms_exact


@dataclass(frozen=True)
class FoldedQK:
    """Query/key weights of one layer with norm gain, norm bias and q/k biases folded in.

    Fields:
        W_Q, W_K: (n_head, d_in, d_head), detached. With x̃ = :func:`normalized_input`, the layer's
            pre-mask scores are S_h = x̃ W_Q[h] (x̃ W_K[h])ᵀ / √d_head exactly.
        augmented: True when a constant-1 input column carries the biases (d_in = d_model + 1).
        rank: upper bound on rank(W_Q[h] W_K[h]ᵀ): qk_rank (or d_head), +1 when augmented, <= d_head.
    """

    W_Q: Tensor
    W_K: Tensor
    augmented: bool
    rank: int

    @property
    def n_head(self) -> int:
        return self.W_Q.shape[0]

    @property
    def d_in(self) -> int:
        """Input dimension of the bilinear form (d_model, +1 when augmented)."""
        return self.W_Q.shape[1]

    @property
    def d_head(self) -> int:
        return self.W_Q.shape[2]

    @property
    def rho2(self) -> float:
        """ρ² = max ‖x̃‖² = d_in (LayerNorm output without gain has ‖x̂‖² = d_model up to eps)."""
        return float(self.d_in)


def check_bilinear(attn: nn.Module) -> None:
    """Raise ValueError when ``attn`` uses QK-norm: its logits are then not bilinear in the layer input."""
    if getattr(attn, "q_norm", None) is not None or getattr(attn, "k_norm", None) is not None:
        raise ValueError(
            "qk_norm=True: the attention logits are not bilinear in the layer input, so the spectral "
            "FP8 bounds do not apply; use a model with qk_norm=False"
        )


@torch.no_grad()
def fold_qk(block: nn.Module) -> FoldedQK:
    """Fold a pre-LN block's LayerNorm (gain g, bias β) and q/k biases into per-head weights.

    q_h = (g ⊙ x̂ + β) W^Q_h + b^Q_h = [x̂, 1] · [diag(g) W^Q_h ; β W^Q_h + b^Q_h] (same for k), where
    x̂ = (x − mean)/√(var + eps) is the LayerNorm output *without* gain, ‖x̂‖² = d_model·var/(var+eps)
    <= d_model. So ρ² = d_model (no biases anywhere) or d_model + 1 (augmented) holds for every input.

    Args:
        block: a module with ``ln_1`` (``nn.LayerNorm``) and ``attn`` (:class:`spanviz.model.Attention`,
            providing ``qk_weights()``), e.g. ``model.blocks[i]``.
    Returns: :class:`FoldedQK`.
    Raises: ValueError when the attention uses qk_norm (logits not bilinear) or ``ln_1`` is not a LayerNorm.
    Source: **spanviz reconstruction** of the folding step sketched in arXiv 2602.18851.
    """
    ln, attn = block.ln_1, block.attn
    if not isinstance(ln, nn.LayerNorm):
        raise ValueError(f"block.ln_1 must be an nn.LayerNorm, got {type(ln).__name__}")
    check_bilinear(attn)
    W_Q, b_Q, W_K, b_K = (None if t is None else t.detach() for t in attn.qk_weights())
    d = W_Q.shape[1]
    gain = ln.weight.detach() if ln.weight is not None else torch.ones(d, dtype=W_Q.dtype, device=W_Q.device)
    beta = ln.bias.detach() if ln.bias is not None else None
    augmented = beta is not None or b_Q is not None or b_K is not None

    def fold(W: Tensor, b: Tensor | None) -> Tensor:
        if not augmented:
            # W̃ = diag(g) W
            return gain.view(1, d, 1) * W  # (H, d, d_head)
        # W̃ = [diag(g) W ; β W + b]
        out = W.new_empty(W.shape[0], d + 1, W.shape[2])  # (H, d + 1, d_head)
        torch.mul(gain.view(1, d, 1), W, out=out[:, :d])
        if beta is None:
            out[:, d] = b  # augmented by a q/k bias alone
        else:
            out[:, d] = beta @ W if b is None else beta @ W + b  # (d,) @ (H, d, d_head) -> (H, d_head)
        return out

    d_head = W_Q.shape[2]
    rank = getattr(attn.W_Q, "rank", None) or d_head
    rank = min(d_head, rank + 1) if augmented else rank
    return FoldedQK(fold(W_Q, b_Q), fold(W_K, b_K), augmented, rank)


def normalized_input(x: Tensor, ln: nn.LayerNorm, augmented: bool) -> Tensor:
    """LayerNorm output *without* gain and bias, x̂ = (x − mean)/√(var + eps), optionally augmented.

    Args:
        x: (..., d_model) residual stream entering the block.
        ln: the block's ``ln_1`` (only ``eps`` and ``normalized_shape`` are used).
        augmented: append a constant-1 column (matches :attr:`FoldedQK.augmented`).
    Returns: (..., d_model) or (..., d_model + 1); ‖x̂‖² <= d_model (equality up to eps).
    """
    # x̂ = (x − mean) / √(var + eps)
    x_hat = torch.nn.functional.layer_norm(x, ln.normalized_shape, eps=ln.eps)
    if augmented:
        x_hat = torch.cat([x_hat, torch.ones_like(x_hat[..., :1])], dim=-1)  # (..., d_model + 1): [x̂, 1]
    return x_hat


def layer_sigma(block: nn.Module) -> tuple[float, FoldedQK]:
    """σ^(ℓ) = max over heads of the exact spectral norm of the folded W̃^Q_h W̃^K_hᵀ.

    Returns (σ^(ℓ) as float, the :class:`FoldedQK` it was computed from). Raises as :func:`fold_qk`.
    """
    folded = fold_qk(block)
    # σ^(ℓ) = max_h ‖W̃^Q_h W̃^K_hᵀ‖₂
    return float(spectral_norms_exact(folded.W_Q, folded.W_K).max()), folded
