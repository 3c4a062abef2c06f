"""FlexAttention with the LS block mask: the kernel in which local heads skip work (CUDA, compiled).

:class:`spanviz.model.Attention` calls :func:`flex_attention` on its fused path for local heads on CUDA
("auto" backend without dropout) and for ``attn_backend="flex"``. What an H100 taught (``docs/gpu.md``):
the compiled kernel must stay compiled across many shapes (:data:`FLEX_RECOMPILE_LIMIT`), it runs in
autocast's dtype with autocast off (FlexAttention is not an autocast op), and every head runs in one
FlexAttention call over the whole LS mask. Running the global heads apart on FlashAttention (dense causal SDPA)
and only the local heads on FlexAttention was measured and dropped: at the paper's shape forward+backward took
1.8× one call over all heads (2026-11-27, H100, ``docs/gpu.md``): two kernels, the slices and the concatenation
cost more than FlexAttention loses on one dense causal head.

Source: PyTorch FlexAttention (``torch.nn.attention.flex_attention``); spanviz's measurements.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable

import torch
from torch import Tensor
from torch.nn.attention.flex_attention import flex_attention as _flex

from spanviz.local_global.core import MaskMod, block_mask

FLEX_MIN_D_HEAD = 16
"""FlexAttention's CUDA kernel needs d_head >= 16 (Triton's ``tl.dot``)."""

FLEX_RECOMPILE_LIMIT = 64
"""Compiled variants of FlexAttention a process may build (dynamo's default, 8, is too few, see below)."""


def check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Raise ValueError unless q, k, v are 4-D (B, H, T, d_head) sharing (B, H, T), q and k sharing d_head."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a 4-D tensor (B, H, T, d_head), got {shape}")
    if q.shape != k.shape or q.shape[:-1] != v.shape[:-1]:
        raise ValueError(
            f"q, k, v must share (B, H, T) and q, k must share d_head, got q={tuple(q.shape)}, "
            f"k={tuple(k.shape)}, v={tuple(v.shape)}"
        )


def flex_available(q: Tensor | None = None) -> bool:
    """True when FlexAttention can run here: CUDA present (its CPU backward is not implemented).

    With ``q`` (B, H, T, d_head) also checks that q is on CUDA and d_head >= :data:`FLEX_MIN_D_HEAD`.
    """
    if not torch.cuda.is_available():
        return False
    return q is None or (q.is_cuda and q.size(-1) >= FLEX_MIN_D_HEAD)


@functools.cache
def compiled_flex() -> Callable[..., Tensor]:
    """``torch.compile(flex_attention)``, built once per process (compiled kernels are reused per shape).

    Every new (shape, dtype, grad mode, block size) compiles once more. A notebook that slides the context
    length, or a sweep that trains and evaluates three variants in one process, passes dynamo's default
    limit of 8 recompiles, after which torch silently runs the *unfused* reference path (it materialises the
    scores: measured 6× slower per step on an H100). So the limit is raised to at least
    :data:`FLEX_RECOMPILE_LIMIT` for the process.
    """
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # torch < 2.6
    setattr(config, name, max(getattr(config, name), FLEX_RECOMPILE_LIMIT))
    return torch.compile(_flex, dynamic=False)


def flex_attention(q: Tensor, k: Tensor, v: Tensor, mask_mod: MaskMod) -> Tensor:
    """FlexAttention with the cached block mask of ``mask_mod`` (:func:`spanviz.local_global.block_mask`).

    On CUDA: ``torch.compile``-d ``flex_attention`` (compiled once per process), block-sparse forward and
    backward — the path where local heads actually save time. On CPU: the uncompiled reference
    implementation, forward only (``torch`` has no CPU FlexAttention backward), useful to check the block
    mask; it materialises the scores and is slow.

    Args:
        q, k, v: (B, H, T, d_head); mask_mod: see :func:`spanviz.local_global.head_mask_mod`.
    Returns:
        out (B, H, T, d_head), equal to SDPA with the dense mask (:func:`spanviz.model.fused_attention`) to fp32
        tolerance (tested).
    On CUDA it runs in autocast's dtype while autocast is on (FlexAttention is not an autocast op), else in
    the promoted dtype of q, k, v. Each new (shape, dtype, grad mode) compiles once more, up to
    :data:`FLEX_RECOMPILE_LIMIT` per process (see :func:`compiled_flex`).

    Raises:
        ValueError: bad shapes; d_head < 16 on CUDA; or a non-CUDA input with ``requires_grad=True``, with
        or without grad mode (no FlexAttention backward there, and torch rejects such inputs even under
        ``torch.no_grad()``: ``.detach()`` them, or use "sdpa").
    Source: PyTorch FlexAttention (``torch.nn.attention.flex_attention``).
    """
    check_qkv(q, k, v)
    _, H, T, _ = q.shape
    if q.is_cuda:
        if q.size(-1) < FLEX_MIN_D_HEAD:
            raise ValueError(
                f"d_head must be >= {FLEX_MIN_D_HEAD} for FlexAttention on CUDA, got d_head={q.size(-1)}; "
                "use attn_backend='sdpa' or a wider head"
            )
        # Autocast does not cover FlexAttention: run it in one dtype (autocast's while autocast is on) with
        # autocast off. Then q, k and v always agree (QK-norm hands over fp32 q, k beside a bf16 v) and the
        # autocast state never forces a recompile. Host time matters here (a call is ~0.3 ms of GPU work at
        # the paper's shape): no autocast context and no casts when there is nothing to change.
        autocast = torch.is_autocast_enabled("cuda")
        dtype = (torch.get_autocast_dtype("cuda") if autocast
                 else torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype))
        q, k, v = (t if t.dtype == dtype else t.to(dtype) for t in (q, k, v))
        with torch.autocast("cuda", enabled=False) if autocast else contextlib.nullcontext():
            return compiled_flex()(q, k, v, block_mask=block_mask(mask_mod, H, T, q.device))
    if any(t.requires_grad for t in (q, k, v)):  # torch refuses these even under torch.no_grad()
        raise ValueError(
            f"flex_attention on device={q.device.type!r} supports forward only (no FlexAttention backward "
            "outside CUDA) and refuses inputs with requires_grad=True, even under torch.no_grad(); pass "
            "q.detach(), k.detach(), v.detach(), or use attn_backend='sdpa' or 'explicit'"
        )
    with warnings.catch_warnings():  # "called without torch.compile()": intended here, see docstring
        warnings.simplefilter("ignore", UserWarning)
        return _flex(q, k, v, block_mask=block_mask(mask_mod, H, T, q.device))
