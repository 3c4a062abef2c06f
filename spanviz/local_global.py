"""LS-attention (arXiv 2505.15548): local sliding-window heads plus a few global heads.

Masks are defined once, as predicates in FlexAttention ``mask_mod`` style, ``(b, h, q_idx, kv_idx) → bool``,
written with tensor operations so the same function serves the dense boolean mask, the additive mask of
the explicit path, and FlexAttention's block mask.

Convention (spanviz): a local head with window p sees **p keys including the token itself**:
allowed(i, j) ⇔ 0 <= i − j < p. (FlashAttention-2 expresses this as ``window_size=(p − 1, 0)``; the
author's later code used (p, 0), i.e. one more key.) Global heads are plain causal: allowed(i, j) ⇔ j <= i.
The first ``n_local`` heads are local, the remaining ``n_head − n_local`` global.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


def head_mask_mod(n_local: int = 0, window: int | None = None) -> MaskMod:
    """Mask predicate for heads ``h < n_local`` local (window p = ``window``) and the rest global.

    Args:
        n_local: number of local heads (>= 0). 0 gives a plain causal mask for every head.
        window: p >= 1 keys including the token itself; required when n_local > 0.
    Returns:
        ``mask_mod(b, h, q_idx, kv_idx) -> bool tensor`` (broadcasting integer tensors).
    Raises:
        ValueError: n_local < 0, or window missing / < 1 while n_local > 0.
    """
    if isinstance(n_local, bool) or not isinstance(n_local, int) or n_local < 0:
        raise ValueError(f"n_local must be an integer >= 0, got {n_local!r}")
    if n_local == 0:

        def causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return kv_idx <= q_idx

        return causal
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an integer >= 1 when n_local > 0, got {window!r}")

    def local_global(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        causal = kv_idx <= q_idx
        in_window = q_idx - kv_idx < window
        return causal & (in_window | (h >= n_local))

    return local_global


def dense_mask(mask_mod: MaskMod, n_head: int, T: int, device: torch.device | str = "cpu") -> Tensor:
    """Evaluate a mask predicate on every (head, query, key): bool tensor (n_head, T, T), True = allowed."""
    h = torch.arange(n_head, device=device).view(-1, 1, 1)
    q_idx = torch.arange(T, device=device).view(1, -1, 1)
    kv_idx = torch.arange(T, device=device).view(1, 1, -1)
    b = torch.zeros((), dtype=torch.long, device=device)
    return mask_mod(b, h, q_idx, kv_idx).expand(n_head, T, T).contiguous()


def flex_available() -> bool:
    """True when FlexAttention can run here (needs CUDA; its CPU backward is not implemented)."""
    if not torch.cuda.is_available():
        return False
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def flex_attention(q: Tensor, k: Tensor, v: Tensor, mask_mod: MaskMod) -> Tensor:
    """FlexAttention with a block mask built from ``mask_mod`` (CUDA only). q, k, v: (B, H, T, d_head)."""
    raise NotImplementedError("the FlexAttention backend is not built yet")
