"""The backward transforms the model installs: the span technique of :mod:`spanviz.spans.core` as plug-in slots.

Where it sits in the model: :mod:`spanviz.model` registers the score transform on the gradient of the
**pre-mask** scores S; the mask is additive (S + M, M = 0 / −inf), so the softmax backward already gives
dS = 0 on masked entries and nothing downstream re-masks dS'. (A hook placed after a ``masked_fill`` would
see a gradient that the masked-fill backward then re-zeroes — a different, wrong result.)

The score transform comes in two forms that give the same gradients (tested for every preset and α): called
on dS it is :mod:`spanviz.spans.core`'s definition (the explicit path, where probes and hooks see S and P); its
``attention`` method is the fast path of :mod:`spanviz.spans.fused` (the model's fused attention forward, the
transform applied in the backward from recomputed rows, no (B, H, T, T) tensor). The model takes the fast path
whenever it can (no hook on the scores or pattern, no attention dropout while training, backend not
"explicit").

Source: spanviz (the plumbing); the transforms are :mod:`spanviz.spans.core`'s.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from spanviz.spans.config import SpanConfig
from spanviz.spans.core import QK_SIDES, _qk4_alphas, _score_transform
from spanviz.spans.fused import Attend, qk_transform, span_attention

ScoreGradFn = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
"""``fn(dS, q, k, v) -> dS'``: dS (B, H, T, T) the gradient of the pre-mask scores, q, k, v (B, H, T, d_head)."""
QKGradFn = Callable[[Tensor, Tensor, str], Tensor]
"""``fn(grad, x, side) -> grad'``: ∂L/∂q (side "q", x = q) or ∂L/∂k (side "k", x = k), (B, H, T, d_head)."""


class ScoreTransform:
    """The score-gradient transform of one :class:`SpanConfig`, in its two forms.

    ``transform(dS, q, k, v) -> dS'``: the definition (:func:`spanviz.spans.scale_score_grad`, grouped), a
    :data:`ScoreGradFn` for the gradient hook on the explicit scores. ``transform.attention(q, k, v, attend,
    mask) -> y``: the fast path (:func:`spanviz.spans.fused.span_attention`).
    """

    def __init__(self, cfg: SpanConfig) -> None:
        self.cfg = cfg

    def __call__(self, dS: Tensor, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return _score_transform(self.cfg, "grouped", dS, q, k, v)

    def attention(self, q: Tensor, k: Tensor, v: Tensor, attend: Attend, mask: Tensor) -> Tensor:
        return span_attention(q, k, v, self.cfg, attend, mask)

    def __repr__(self) -> str:
        return f"ScoreTransform({self.cfg.label()})"


def build_grad_fns(cfg: SpanConfig) -> tuple[ScoreGradFn | None, QKGradFn | None]:
    """The backward transforms :meth:`spanviz.model.TinyGPT.set_span_scaling` installs on a layer.

    Returns:
        (score_grad_fn, None) for kv8, qkv8 and custom slots: a :class:`ScoreTransform`,
        ``score_grad_fn(dS, q, k, v) -> dS'`` with dS (B, H, T, T) the gradient of the pre-mask scores and q, k,
        v (B, H, T, d_head) detached, whose ``attention`` method is the fast path the model trains with.
        (None, qk_grad_fn) for qk4: ``qk_grad_fn(grad, x, side) -> grad'`` applied to ∂L/∂q with x = q,
        side "q", and to ∂L/∂k with x = k, side "k" (the closed form :func:`scale_qk_grad`; works with
        fused attention, for order α and for ``block_alphas`` alike; with the fast path's projector,
        :func:`spanviz.spans.fused.qk_transform`).
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
            return qk_transform(alpha_par, alpha_perp, cfg.ridge, grad, x)

        return None, qk_grad_fn

    return ScoreTransform(cfg), None
