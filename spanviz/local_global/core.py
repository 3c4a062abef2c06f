"""LS-attention (arXiv 2505.15548): local sliding-window heads plus a few global heads — the masks.

In language modelling nearly every token depends densely on its near neighbours, but a head's logit matrix
Q Kᵀ/√d_head has rank <= d_head: a global head can only sharpen a dense local band by inflating q·k (the
"logit explosion"). LS-attention gives the short-range work to **local** heads, whose mask is a sliding
window, and keeps a few **global** heads with the plain causal mask for sparse long-range dependencies. Same
projections, same parameters as multi-head attention: only the mask differs per head.

Definition (H heads; the first ``n_local`` local, the remaining ``n_global = H − n_local`` global):

* global head: allowed(i, j) ⇔ j <= i;
* local head with window p: allowed(i, j) ⇔ 0 <= i − j < p — **p keys including the token itself**
  (spanviz's convention; FlashAttention-2 writes it ``window_size=(p − 1, 0)``; the author's later code used
  (p, 0), one key more). A local head with p >= T equals a global head.

A mask is written once, as a FlexAttention ``mask_mod`` — a predicate ``(b, h, q_idx, kv_idx) → bool`` on
integer tensors — composed from small named predicates with FlexAttention's own ``and_masks`` /
``or_masks``. The same predicate gives every backend its mask: :func:`dense_mask` evaluates it densely (the
(H, T, T) boolean and additive masks of the explicit and SDPA paths of :class:`spanviz.model.Attention`),
``create_block_mask`` block-sparsely (FlexAttention skips the 128×128 tiles with no allowed pair, which is
where local heads save time: :mod:`spanviz.local_global.flex`). Masks are cached per predicate.

The settings are fields of :class:`spanviz.model.GPTConfig` (``n_local``, ``window``), so a run's store key holds
them; :func:`check_head_split` is the one check of the head split, shared by ``GPTConfig`` and the benchmarks.
``python -m spanviz.local_global`` prints the masks of a small example (:func:`spanviz.local_global.demos.print_masks`).
Source: arXiv 2505.15548 (local + global heads; :data:`PAPER`, the author's defaults, from the public nanoGPT fork);
the window convention and the code are spanviz's.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.nn.attention.flex_attention import and_masks, create_block_mask, or_masks

from spanviz.validators import check_device, check_int

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
"""``mask_mod(b, h, q_idx, kv_idx) -> bool tensor``, True where key kv_idx may be attended from query q_idx."""

PAPER: dict[str, Any] = dict(n_layer=6, d_model=192, n_head=6, d_head=32, n_local=5, window=50, context_length=2048)
"""The author's defaults: 6 layers, d_model 192 = 6 heads × d_head 32, 5 local heads with p = 50 + 1 global, T 2048
(PG-19, 10k SentencePiece vocabulary). The revision used 11 local + 1 global heads with p = 100."""


# ======================================================================================== predicates
def causal_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    """A global head: allowed(i, j) ⇔ j <= i. Also what :func:`head_mask_mod` gives for ``n_local=0``."""
    return kv_idx <= q_idx


causal_mask.n_local, causal_mask.window = 0, None  # type: ignore[attr-defined]


def generate_sliding_window(window: int) -> MaskMod:
    """The band of a local head with window p = ``window``: i − j < p (combine with :func:`causal_mask`)."""

    def sliding_window(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        # in the window: i − j < p  (with causality, 0 <= i − j < p: p keys including the token itself)
        return q_idx - kv_idx < window

    sliding_window.__name__ = f"sliding_window_{window}"
    return sliding_window


def generate_global_heads(n_local: int) -> MaskMod:
    """The heads that are global: h >= n_local (every key passes; combine with :func:`causal_mask`)."""

    def global_heads(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return h >= n_local

    global_heads.__name__ = f"global_heads_from_{n_local}"
    return global_heads


@functools.cache
def generate_local_global(n_local: int, window: int) -> MaskMod:
    """Heads h < n_local local with window p, the rest global (arguments unchecked: see :func:`head_mask_mod`).

    Cached, so that every layer of a model (and every model with the same setting) shares one predicate
    object — and therefore one cached dense mask and one cached block mask.
    """
    # allowed(h, i, j) = (j <= i) and (i − j < p or h >= n_local)
    mask_mod = and_masks(causal_mask, or_masks(generate_sliding_window(window), generate_global_heads(n_local)))
    mask_mod.__name__ = f"local_global_{n_local}_{window}"
    mask_mod.n_local, mask_mod.window = n_local, window  # type: ignore[attr-defined]
    return mask_mod


def head_mask_mod(n_local: int | None = None, window: int | None = None) -> MaskMod:
    """Mask predicate for heads ``h < n_local`` local (window p = ``window``) and the rest global.

    Args:
        n_local: number of local heads (>= 0). 0 gives a plain causal mask for every head (``window`` is
            then ignored). None (the default) is 0 when ``window`` is None too; a ``window`` without ``n_local``
            is refused (it would silently give the causal mask).
        window: p >= 1 keys including the token itself: allowed(i, j) ⇔ 0 <= i − j < p on local heads;
            required when n_local > 0. p >= T makes a local head identical to a global one; p = 1 lets a
            local head see only itself.
    Returns:
        ``mask_mod(b, h, q_idx, kv_idx) -> bool tensor`` (True = allowed), usable directly by
        ``torch.nn.attention.flex_attention.create_mask`` / ``create_block_mask``. Equal arguments return
        the same function object, with attributes ``n_local`` and ``window``.
    Raises:
        ValueError: n_local not an integer >= 0, or window missing / not an integer >= 1 while n_local > 0, or
            window given without n_local.
    Source: arXiv 2505.15548 (local + global heads); window convention: spanviz.
    """
    if n_local is None and window is not None:
        raise ValueError(f"n_local must be given with window={window!r} (the number of local heads, >= 1; "
                         "n_local=0 means every head global, the window then unused), got n_local=None")
    n_local = check_int("n_local", 0 if n_local is None else n_local, 0)
    if n_local == 0:
        return causal_mask
    if window is None:
        raise ValueError(f"window must be an integer >= 1 when n_local > 0, got {window!r}")
    return generate_local_global(n_local, check_int("window", window, 1))


def check_head_split(n_head: int, n_local: Any, window: Any) -> tuple[int, int | None]:
    """Check an LS head split: ``n_local`` in [0, n_head]; ``window`` None or an integer >= 1 (required if n_local > 0).

    Args:
        n_head: H, heads per layer (already checked by the caller). n_local: local heads. window: p, keys a local
            head sees including the token itself (may be set with n_local = 0: it then has no effect).
    Returns:
        (n_local, window) as ints (window None when it was None).
    Raises:
        ValueError: naming ``n_local`` or ``window``, the value and what is allowed.
    Source: spanviz's checks (the head split of arXiv 2505.15548).
    """
    n_local = check_int("n_local", n_local, 0, n_head)
    if window is None:
        if n_local > 0:
            raise ValueError(f"window must be set (>= 1) when n_local > 0, got window=None, n_local={n_local}")
        return n_local, None
    return n_local, check_int("window", window, 1)


# ============================================================================================= masks
def dense_mask(mask_mod: MaskMod, n_head: int, T: int, device: torch.device | str = "cpu") -> Tensor:
    """Evaluate a mask predicate on every (head, query, key) at once, by broadcasting.

    A ``mask_mod`` is elementwise (FlexAttention requires it: ``create_mask`` vmaps it over scalars), so it is
    called once on index tensors of shapes (1, 1, 1) for b, (H, 1, 1) for h, (1, T, 1) for q_idx and (1, 1, T) for
    kv_idx — the same entries as ``create_mask(mask_mod, 1, H, T, T)[0]``, without its first call importing
    ``torch._dynamo`` (about 1 s on 2 cores: the first explicit-attention forward of a process, e.g. the tour's
    look inside the model).

    Args:
        mask_mod: predicate ``(b, h, q_idx, kv_idx) -> bool`` (see :func:`head_mask_mod`).
        n_head: H >= 1. T: context length >= 1 (queries and keys). device: where to build the mask.
    Returns:
        bool tensor (H, T, T), True = key may be attended (a fresh tensor; callers may cache it).
    Raises:
        ValueError: n_head or T not an integer >= 1, n_head·T² above :data:`MAX_MASK_ELEMENTS`, mask_mod not
            callable or not an elementwise predicate (its answer is not a bool tensor that broadcasts to
            (H, T, T)), or a device that is not available here.
    """
    if not callable(mask_mod):
        raise ValueError(f"mask_mod must be a mask predicate (b, h, q_idx, kv_idx) -> bool, e.g. head_mask_mod(...), "
                         f"got {mask_mod!r}")
    check_int("n_head", n_head, 1)
    check_int("T", T, 1)
    if n_head * T * T > MAX_MASK_ELEMENTS:
        raise ValueError(f"n_head·T² = {n_head}·{T}² is more than the {MAX_MASK_ELEMENTS:.1e} mask entries a dense "
                         "mask may hold; lower T or n_head (long contexts use block_mask)")
    device = check_device("device", device)
    b = torch.zeros((1, 1, 1), dtype=torch.long, device=device)
    h = torch.arange(n_head, device=device).view(n_head, 1, 1)
    q_idx, kv_idx = torch.arange(T, device=device).view(1, T, 1), torch.arange(T, device=device).view(1, 1, T)
    allowed = mask_mod(b, h, q_idx, kv_idx)
    name = getattr(mask_mod, "__name__", mask_mod)
    if not isinstance(allowed, Tensor) or allowed.dtype != torch.bool or allowed.dim() > 3:
        raise ValueError(f"mask_mod={name!r} must answer a bool tensor on broadcast index tensors (an elementwise "
                         f"predicate), got {allowed!r:.80}")
    try:
        return torch.broadcast_to(allowed, (n_head, T, T)).clone()  # (H, T, T), its own memory
    except RuntimeError as error:
        raise ValueError(f"mask_mod={name!r} answered shape "
                         f"{tuple(allowed.shape)}, not one that broadcasts to (H, T) = ({n_head}, {T}, {T}): "
                         f"{error}") from None


MAX_MASK_ELEMENTS = 2**32
"""Largest n_head·T² of a dense mask (4 GiB of bools; T = 32768 for one head)."""

# Caches keyed by the predicate's identity (weakly: a dropped predicate drops its masks), then (H, T, device[,
# dtype]); at most _CACHE_PER_MOD entries per predicate (oldest dropped), so sliding T in a notebook cannot pile
# up masks. Every model with the same setting shares them, also across threads (a widget trains in one): a lock.
_DENSE_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_ADDITIVE_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_BLOCK_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_CACHE_PER_MOD = 8
_CACHE_LOCK = threading.RLock()  # re-entrant: the additive mask is built from the cached dense mask


def _cached(cache: weakref.WeakKeyDictionary, mask_mod: MaskMod, key: tuple, build: Callable[[], Any]) -> Any:
    with _CACHE_LOCK:
        per_mod = cache.setdefault(mask_mod, {})
        if key not in per_mod:
            if len(per_mod) >= _CACHE_PER_MOD:
                del per_mod[next(iter(per_mod))]  # dicts keep insertion order: the oldest entry
            per_mod[key] = build()
        return per_mod[key]


def dense_mask_cached(mask_mod: MaskMod, n_head: int, T: int, device: torch.device | str = "cpu") -> Tensor:
    """:func:`dense_mask`, cached per (mask_mod, H, T, device): bool (H, T, T), True = allowed. Do not modify it."""
    key = (n_head, T, str(device))
    return _cached(_DENSE_CACHE, mask_mod, key, lambda: dense_mask(mask_mod, n_head, T, device))


def additive_mask(mask_mod: MaskMod, n_head: int, T: int, device: torch.device | str, dtype: torch.dtype) -> Tensor:
    """The additive form M of the mask, cached: (H, T, T) in ``dtype``, 0 where allowed and −inf elsewhere.

    softmax(S + M) is the masked softmax of the scores S; the gradient of S + M passes to S unchanged, so a
    hook on the pre-mask S sees ∂L/∂S (0 at masked pairs, from the softmax backward) and nothing re-masks it.
    """
    key = (n_head, T, str(device), dtype)

    def build() -> Tensor:
        allowed = dense_mask_cached(mask_mod, n_head, T, device)
        zero = torch.zeros((), dtype=dtype, device=device)
        ninf = torch.full((), float("-inf"), dtype=dtype, device=device)
        # M_hij = 0 if allowed(h, i, j) else −inf
        return torch.where(allowed, zero, ninf)

    return _cached(_ADDITIVE_CACHE, mask_mod, key, build)


def block_mask(mask_mod: MaskMod, n_head: int, T: int, device: torch.device | str = "cuda"):
    """FlexAttention ``BlockMask`` for ``mask_mod`` over (H = n_head, T queries, T keys); cached.

    Built with ``create_block_mask(mask_mod, None, n_head, T, T)`` (batch broadcast, one mask per head,
    FlexAttention's default 128×128 tiles); tiles with no allowed pair are skipped by the kernel, which is where
    local heads save time. The cache is keyed by (mask_mod identity, H, T, device) and held weakly on mask_mod.

    Why 128×128 and not 64×64 for short windows: on an H100 (torch 2.11) 64×64 tiles measured no faster for
    p = 50 at T 2048 (direct compiled calls, 0.30 vs 0.32 ms forward), and FlexAttention failed to compile
    them at all for 64 < T < 128 (``NoValidChoicesError``).

    Raises:
        ValueError: n_head or T not an integer >= 1.
    """
    key = (n_head, T, str(device))
    hit = _BLOCK_CACHE.get(mask_mod, {}).get(key)  # the hot path (every FlexAttention call): no checks, no lock
    if hit is not None:
        return hit
    check_int("n_head", n_head, 1)
    check_int("T", T, 1)
    device = torch.device(device)
    return _cached(_BLOCK_CACHE, mask_mod, key, lambda: create_block_mask(mask_mod, None, n_head, T, T, device=device))
