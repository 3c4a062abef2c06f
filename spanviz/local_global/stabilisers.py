"""What practitioners use today against attention-logit growth, beside LS-attention — the formulas.

Three baselines of notebook 02's logit-growth lab, each a setting of :class:`spanviz.model.GPTConfig` (so a run's
store key holds it) applied by :class:`spanviz.model.Attention`; QK-norm (``qk_norm``, OLMo 2; Wortsman et al.,
arXiv 2309.14322) is the fourth and lives in the model as an ``nn.RMSNorm``.

* **Logit soft-capping** (Gemma 2, arXiv 2408.00118, §2; nanochat): the pre-softmax logits pass through
  S ← c · tanh(S / c), so |S| < c however large q·k grows (Gemma 2: c = 50 for attention). The logits *before*
  the cap still grow; only what the softmax sees is bounded.
* **QK-Clip** (Kimi K2's MuonClip, arXiv 2507.20534, §2.1): after each optimizer update, every head h whose
  largest pre-softmax logit S_max^h in that update's forward pass exceeded the threshold τ has its query and key
  projections rescaled, W^Q_h ← √γ_h · W^Q_h and W^K_h ← √γ_h · W^K_h with γ_h = τ / S_max^h, so the same input
  gives logits γ_h times smaller (the paper splits the factor as η^α, η^(1−α) with α = ½ for MHA; Kimi K2: τ =
  100). spanviz scales the heads' biases by √γ_h too (q_h = x W^Q_h + b^Q_h), which keeps the rescaling exact.
* **A per-layer local/global pattern** (Gemma 3, arXiv 2503.19786, §2: 5 local layers to 1 global, the
  ``sliding_window_pattern`` of its released configs): in each group of ``global_every`` layers the last is
  global (plain causal) and every head of the others is local with the window p. LS-attention instead mixes local
  and global heads *within* each layer.

Source: the papers named above (formulas as they state them); the code is spanviz's.
"""

from __future__ import annotations

import torch
from torch import Tensor


# ============================================================================================ soft-capping
def soft_cap(scores: Tensor, cap: float) -> Tensor:
    """Gemma 2's logit soft-capping: c · tanh(S / c), elementwise.

    Args:
        scores: S, any shape (the attention scores are (B, H, T, T)), dimensionless logits. cap: c > 0.
    Returns:
        A tensor of S's shape with |value| < c; ≈ S where |S| ≪ c (tanh x ≈ x), monotone, so it keeps each row's
        order of keys.
    Source: Gemma 2 (arXiv 2408.00118), §2 "Logit soft-capping".
    """
    # S' = c · tanh(S / c)
    return cap * torch.tanh(scores / cap)


# ================================================================================================ QK-Clip
def qk_clip_factors(max_logit: Tensor, tau: float) -> Tensor:
    """γ_h = min(1, τ / S_max^h): the factor each head's logits are scaled by (1 = untouched).

    Args:
        max_logit: S_max (H,), each head's largest pre-softmax logit q·k/√d_head over the update's forward pass
            (signed: a large negative logit needs no clipping). tau: τ > 0.
    Returns:
        (H,) float tensor in (0, 1].
    Source: MuonClip (arXiv 2507.20534), §2.1, Eq. for η = min(τ / S_max^h, 1).
    """
    # γ_h = min(1, τ / S_max^h); S_max <= τ (also S_max <= 0) leaves the head as it is
    return torch.where(max_logit > tau, tau / max_logit.clamp_min(tau), torch.ones_like(max_logit))


@torch.no_grad()
def qk_clip_(w_q: Tensor, b_q: Tensor | None, w_k: Tensor, b_k: Tensor | None, gamma: Tensor) -> None:
    """Rescale the query and key projections of each head in place by √γ_h, so its logits scale by γ_h.

    Args:
        w_q, w_k: (H, d_head, d_model) views of the projection weights (output rows of head h first); b_q, b_k:
            (H, d_head) views of their biases, or None. gamma: (H,) factors from :func:`qk_clip_factors`.
    Returns: None (the tensors, views of the parameters, are changed).
    Source: MuonClip (arXiv 2507.20534), §2.1, with α = ½ (query and key each take √γ).
    """
    root = gamma.sqrt().to(w_q.dtype)  # (H,)
    for t in (w_q, w_k, b_q, b_k):
        if t is not None:
            t.mul_(root.view(-1, *([1] * (t.dim() - 1))))  # (H, 1, 1) or (H, 1): one factor per head


# ================================================================================== per-layer pattern
def local_layers(n_layer: int, global_every: int | None) -> list[int]:
    """The layers whose heads are all local under Gemma 3's pattern: all but every ``global_every``-th.

    Args:
        n_layer: layers in the model, >= 1. global_every: k (>= 1) — layers k−1, 2k−1, … are global; None = no
            per-layer pattern (no layer is made local here).
    Returns:
        sorted layer indices, e.g. ``local_layers(6, 6) == [0, 1, 2, 3, 4]`` (Gemma 3's 5:1) and
        ``local_layers(2, 2) == [0]``.
    Source: Gemma 3 (arXiv 2503.19786), §2 "5:1 interleaving of local/global layers".
    """
    if global_every is None:
        return []
    return [layer for layer in range(n_layer) if (layer + 1) % global_every != 0]


def is_global_layer(layer: int, global_every: int | None) -> bool:
    """Whether ``layer`` keeps its configured heads (True) or is all-local under the pattern (False)."""
    return global_every is None or (layer + 1) % global_every == 0

