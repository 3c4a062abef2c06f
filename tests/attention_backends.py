"""Test helpers: masked attention as plain functions of (q, k, v, mask_mod), through the model's own attention code.

There is one attention implementation, :mod:`spanviz.model`'s. These wrappers check the shapes and call the
functions that :class:`spanviz.model.Attention` itself runs — its explicit path
(:func:`spanviz.model.explicit_attention`: scores, additive mask, softmax; exposes the logits) and its fused path
(:func:`spanviz.model.fused_attention`: SDPA with the boolean mask, or FlexAttention). All backends compute the
same function (tested to fp32 tolerance, forward and backward). Only the tests use them,
so they live with the tests, above the model (no package cycle).
"""

from __future__ import annotations

from torch import Tensor

from spanviz import model
from spanviz.local_global.core import MaskMod
from spanviz.local_global.flex import check_qkv
from spanviz.validators import check_choice

BACKENDS = ("explicit", "sdpa", "flex")


def explicit_attention(
    q: Tensor, k: Tensor, v: Tensor, mask_mod: MaskMod, *, return_scores: bool = False
) -> Tensor | tuple[Tensor, Tensor]:
    """Reference attention: S = q kᵀ/√d_head, softmax(S + M) with M = 0 / −inf from ``mask_mod``, times v.

    Args:
        q, k, v: (B, H, T, d_head) (v may have its own last dimension). mask_mod: see
            :func:`spanviz.local_global.core.head_mask_mod`.
        return_scores: also return the pre-mask scores S (B, H, T, T) — the logits the probes measure.
    Returns:
        out (B, H, T, d_v), or (out, S) with ``return_scores``. Differentiable (CPU and GPU).
    Raises:
        ValueError: q, k, v not 4-D or with mismatched shapes.
    """
    check_qkv(q, k, v)
    seen: list[Tensor] = []

    def keep(scores: Tensor) -> Tensor:
        seen.append(scores)
        return scores

    out = model.explicit_attention(q, k, v, mask_mod, hook_scores=keep)
    return (out, seen[0]) if return_scores else out


def attention(q: Tensor, k: Tensor, v: Tensor, mask_mod: MaskMod, backend: str = "sdpa") -> Tensor:
    """Masked attention through one of :data:`BACKENDS` ("explicit", "sdpa", "flex"); same function.

    "sdpa" is ``F.scaled_dot_product_attention`` with the boolean (H, T, T) mask of ``mask_mod`` (``is_causal``
    for the plain causal predicate); "flex" is :func:`spanviz.local_global.flex.flex_attention`.

    Args/Returns: as :func:`explicit_attention`. Raises: ValueError for an unknown backend (or as the
    chosen backend raises).
    """
    check_choice("backend", backend, BACKENDS)
    if backend == "explicit":
        return explicit_attention(q, k, v, mask_mod)
    check_qkv(q, k, v)
    return model.fused_attention(q, k, v, mask_mod, backend=backend)


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, mask_mod: MaskMod) -> Tensor:
    """``F.scaled_dot_product_attention`` with the boolean (H, T, T) mask of ``mask_mod``: ``attention(..., "sdpa")``.

    Causality lives inside the mask (``is_causal`` is not passed together with a mask). The dense mask
    costs O(H·T²) memory and brings no speed-up; it is the portable fused path (CPU, CUDA, MPS).

    Args/Returns: as :func:`explicit_attention` (no scores). Raises: ValueError on bad shapes.
    """
    return attention(q, k, v, mask_mod, backend="sdpa")
