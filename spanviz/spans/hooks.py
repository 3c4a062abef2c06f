"""The backward transforms the model installs: the span technique of :mod:`spanviz.spans.core` as plug-in slots.

Where it sits in the model: :mod:`spanviz.model` registers the score transform on the gradient of the
**pre-mask** scores S; the mask is additive (S + M, M = 0 / −inf), so the softmax backward already gives
dS = 0 on masked entries and nothing downstream re-masks dS'. (A hook placed after a ``masked_fill`` would
see a gradient that the masked-fill backward then re-zeroes — a different, wrong result.)

Source: spanviz (the plumbing); the transforms are :mod:`spanviz.spans.core`'s.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from spanviz.spans.config import SpanConfig
from spanviz.spans.core import QK_SIDES, _qk4_alphas, _qk_transform, _score_transform

ScoreGradFn = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
"""``fn(dS, q, k, v) -> dS'``: dS (B, H, T, T) the gradient of the pre-mask scores, q, k, v (B, H, T, d_head)."""
QKGradFn = Callable[[Tensor, Tensor, str], Tensor]
"""``fn(grad, x, side) -> grad'``: ∂L/∂q (side "q", x = q) or ∂L/∂k (side "k", x = k), (B, H, T, d_head)."""


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
