"""LS-attention (arXiv 2505.15548): local sliding-window heads plus a few global heads.

Masks are defined once, as predicates in FlexAttention ``mask_mod`` style, ``(b, h, q_idx, kv_idx) → bool``,
written with tensor operations so the same function serves the dense boolean mask (explicit and SDPA
backends) and FlexAttention's block mask.

Convention (spanviz): a local head with window p sees **p keys including the token itself**:
allowed(i, j) ⇔ 0 <= i − j < p. (FlashAttention-2 expresses this as ``window_size=(p − 1, 0)``; the
author's later code used (p, 0), i.e. one more key.) Global heads are plain causal: allowed(i, j) ⇔ j <= i.
The first ``n_local`` heads are local, the remaining ``n_head − n_local`` global. A local head with
p >= T is identical to a global head (every causal key is inside the window).

Contents:

* masks: :func:`head_mask_mod`, :func:`dense_mask`, :func:`block_mask` (cached FlexAttention block mask);
* backends computing the same function: :func:`explicit_attention` (exposes the logits),
  :func:`sdpa_attention` (boolean mask, causality folded in), :func:`flex_attention` (block-sparse,
  compiled, CUDA), and the dispatcher :func:`attention`;
* measurements: :func:`max_logits`, :func:`attention_entropy` and the trainer probe :class:`LogitProbe`;
* teaching demos: :func:`required_logit_gap` (softmax margin) and :func:`toy_band_fit` (logit growth of a
  low-rank global head fitting a dense local band).
"""

from __future__ import annotations

import functools
import logging
import math
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from spanviz.threads import torch_threads

log = logging.getLogger(__name__)

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
BACKENDS = ("explicit", "sdpa", "flex")


# ============================================================================================= masks
def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


@functools.lru_cache(maxsize=None)
def _build_mask_mod(n_local: int, window: int | None) -> MaskMod:
    # Cached so that every layer of a model (and every model with the same setting) shares one predicate
    # object — and therefore one cached block mask.
    if n_local == 0:

        def causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return kv_idx <= q_idx

        mask_mod = causal
    else:

        def local_global(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            causal = kv_idx <= q_idx
            in_window = q_idx - kv_idx < window
            return causal & (in_window | (h >= n_local))

        mask_mod = local_global
    mask_mod.n_local = n_local  # type: ignore[attr-defined]
    mask_mod.window = window  # type: ignore[attr-defined]
    return mask_mod


def head_mask_mod(n_local: int = 0, window: int | None = None) -> MaskMod:
    """Mask predicate for heads ``h < n_local`` local (window p = ``window``) and the rest global.

    Args:
        n_local: number of local heads (>= 0). 0 gives a plain causal mask for every head (``window`` is
            then ignored).
        window: p >= 1 keys including the token itself: allowed(i, j) ⇔ 0 <= i − j < p on local heads;
            required when n_local > 0. p >= T makes a local head identical to a global one; p = 1 lets a
            local head see only itself.
    Returns:
        ``mask_mod(b, h, q_idx, kv_idx) -> bool tensor`` (broadcasting integer tensors; True = allowed),
        usable directly by ``torch.nn.attention.flex_attention.create_block_mask``. Equal arguments
        return the same function object, with attributes ``n_local`` and ``window``.
    Raises:
        ValueError: n_local not an integer >= 0, or window missing / not an integer >= 1 while n_local > 0.
    Source: arXiv 2505.15548 (local + global heads); window convention: spanviz.
    """
    if isinstance(n_local, bool) or not isinstance(n_local, int) or n_local < 0:
        raise ValueError(f"n_local must be an integer >= 0, got {n_local!r}")
    if n_local == 0:
        return _build_mask_mod(0, None)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an integer >= 1 when n_local > 0, got {window!r}")
    return _build_mask_mod(n_local, window)


def dense_mask(mask_mod: MaskMod, n_head: int, T: int, device: torch.device | str = "cpu") -> Tensor:
    """Evaluate a mask predicate on every (head, query, key).

    Args:
        mask_mod: predicate ``(b, h, q_idx, kv_idx) -> bool`` (see :func:`head_mask_mod`).
        n_head: H >= 1. T: context length >= 1 (queries and keys). device: where to build the mask.
    Returns:
        bool tensor (H, T, T), True = key may be attended (a fresh tensor; callers may cache it).
    Raises:
        ValueError: n_head or T not an integer >= 1.
    """
    _check_int("n_head", n_head, 1)
    _check_int("T", T, 1)
    h = torch.arange(n_head, device=device).view(-1, 1, 1)
    q_idx = torch.arange(T, device=device).view(1, -1, 1)
    kv_idx = torch.arange(T, device=device).view(1, 1, -1)
    b = torch.zeros((), dtype=torch.long, device=device)
    return mask_mod(b, h, q_idx, kv_idx).expand(n_head, T, T).contiguous()


# Caches keyed by the predicate's identity (weakly: a dropped predicate drops its masks), then (H, T, device);
# at most _CACHE_PER_MOD entries per predicate (oldest dropped), so sliding T in a notebook cannot pile up masks.
_DENSE_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_BLOCK_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_CACHE_PER_MOD = 8


def _cached(cache: weakref.WeakKeyDictionary, mask_mod: MaskMod, key: tuple, build: Callable[[], Any]) -> Any:
    per_mod = cache.setdefault(mask_mod, {})
    if key not in per_mod:
        if len(per_mod) >= _CACHE_PER_MOD:
            del per_mod[next(iter(per_mod))]  # dicts keep insertion order: the oldest entry
        per_mod[key] = build()
    return per_mod[key]


def _dense_mask_cached(mask_mod: MaskMod, n_head: int, T: int, device: torch.device) -> Tensor:
    key = (n_head, T, str(device))
    return _cached(_DENSE_CACHE, mask_mod, key, lambda: dense_mask(mask_mod, n_head, T, device))


def block_mask(mask_mod: MaskMod, n_head: int, T: int, device: torch.device | str = "cuda"):
    """FlexAttention ``BlockMask`` for ``mask_mod`` over (H = n_head, T queries, T keys); cached.

    Built with ``torch.nn.attention.flex_attention.create_block_mask(mask_mod, None, n_head, T, T)`` (batch
    broadcast, one mask per head, FlexAttention's default 128×128 tiles); tiles with no allowed pair are
    skipped by the kernel, which is where local heads save time. The cache is keyed by (mask_mod identity, H,
    T, device) and held weakly on mask_mod.

    Why 128×128 and not 64×64 for short windows: on an H100 (torch 2.11) 64×64 tiles measured no faster for
    p = 50 at T 2048 (direct compiled calls, 0.30 vs 0.32 ms forward), and FlexAttention failed to compile
    them at all for 64 < T < 128 (``NoValidChoicesError``).

    Raises:
        ValueError: n_head or T not an integer >= 1.
    """
    from torch.nn.attention.flex_attention import create_block_mask

    _check_int("n_head", n_head, 1)
    _check_int("T", T, 1)
    device = torch.device(device)
    key = (n_head, T, str(device))
    return _cached(_BLOCK_CACHE, mask_mod, key, lambda: create_block_mask(mask_mod, None, n_head, T, T, device=device))


# ========================================================================================== backends
def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a 4-D tensor (B, H, T, d_head), got {shape}")
    if q.shape != k.shape or q.shape[:-1] != v.shape[:-1]:
        raise ValueError(
            f"q, k, v must share (B, H, T) and q, k must share d_head, got q={tuple(q.shape)}, "
            f"k={tuple(k.shape)}, v={tuple(v.shape)}"
        )


def explicit_attention(
    q: Tensor, k: Tensor, v: Tensor, mask_mod: MaskMod, *, return_scores: bool = False
) -> Tensor | tuple[Tensor, Tensor]:
    """Reference attention: S = q kᵀ/√d_head, mask (−inf where not allowed), softmax, times v.

    Args:
        q, k, v: (B, H, T, d_head) (v may have its own last dimension). mask_mod: see :func:`head_mask_mod`.
        return_scores: also return the pre-mask scores S (B, H, T, T) — the logits the probes measure.
    Returns:
        out (B, H, T, d_v), or (out, S) with ``return_scores``. Differentiable (CPU and GPU).
    Raises:
        ValueError: q, k, v not 4-D or with mismatched shapes.
    """
    _check_qkv(q, k, v)
    B, H, T, dh = q.shape
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(dh))  # (B, H, T, T), pre-mask
    allowed = _dense_mask_cached(mask_mod, H, T, q.device)
    pattern = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)  # rows sum to 1
    out = pattern @ v
    return (out, scores) if return_scores else out


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, mask_mod: MaskMod) -> Tensor:
    """``F.scaled_dot_product_attention`` with the boolean (H, T, T) mask of ``mask_mod``.

    Causality lives inside the mask (``is_causal`` is not passed together with a mask). The dense mask
    costs O(H·T²) memory and brings no speed-up; it is the portable fused path (CPU, CUDA, MPS).

    Args/Returns: as :func:`explicit_attention` (no scores). Raises: ValueError on bad shapes.
    """
    _check_qkv(q, k, v)
    _, H, T, _ = q.shape
    return F.scaled_dot_product_attention(q, k, v, attn_mask=_dense_mask_cached(mask_mod, H, T, q.device))


FLEX_MIN_D_HEAD = 16
"""FlexAttention's CUDA kernel needs d_head >= 16 (Triton's ``tl.dot``)."""


def flex_available(q: Tensor | None = None) -> bool:
    """True when FlexAttention can run here: CUDA present (its CPU backward is not implemented).

    With ``q`` (B, H, T, d_head) also checks that q is on CUDA and d_head >= :data:`FLEX_MIN_D_HEAD`.
    """
    if not torch.cuda.is_available():
        return False
    if q is not None and (not q.is_cuda or q.size(-1) < FLEX_MIN_D_HEAD):
        return False
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


FLEX_RECOMPILE_LIMIT = 64
"""Compiled variants of FlexAttention a process may build (dynamo's default, 8, is too few, see below)."""


@functools.cache
def _compiled_flex() -> Callable[..., Tensor]:
    """``torch.compile(flex_attention)``, built once per process (compiled kernels are reused per shape).

    Every new (shape, dtype, grad mode, block size) compiles once more. A notebook that slides the context
    length, or a sweep that trains and evaluates three variants in one process, passes dynamo's default
    limit of 8 recompiles, after which torch silently runs the *unfused* reference path (it materialises the
    scores: measured 6× slower per step on an H100). So the limit is raised to at least
    :data:`FLEX_RECOMPILE_LIMIT` for the process.
    """
    from torch.nn.attention.flex_attention import flex_attention as _flex

    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # torch < 2.6
    setattr(config, name, max(getattr(config, name), FLEX_RECOMPILE_LIMIT))
    return torch.compile(_flex, dynamic=False)


def flex_attention(q: Tensor, k: Tensor, v: Tensor, mask_mod: MaskMod) -> Tensor:
    """FlexAttention with the cached block mask of ``mask_mod`` (:func:`block_mask`).

    On CUDA: ``torch.compile``-d ``flex_attention`` (compiled once per process), block-sparse forward and
    backward — the path where local heads actually save time. On CPU: the uncompiled reference
    implementation, forward only (``torch`` has no CPU FlexAttention backward), useful to check the block
    mask; it materialises the scores and is slow.

    Args:
        q, k, v: (B, H, T, d_head); mask_mod: see :func:`head_mask_mod`.
    Returns:
        out (B, H, T, d_head), equal to :func:`sdpa_attention` to fp32 tolerance.
    On CUDA it runs in autocast's dtype while autocast is on (FlexAttention is not an autocast op), else in
    the promoted dtype of q, k, v. Each new (shape, dtype, grad mode) compiles once more, up to
    :data:`FLEX_RECOMPILE_LIMIT` per process (see :func:`_compiled_flex`).

    Raises:
        ValueError: bad shapes; d_head < 16 on CUDA; or a non-CUDA input with ``requires_grad=True``, with
        or without grad mode (no FlexAttention backward there, and torch rejects such inputs even under
        ``torch.no_grad()``: ``.detach()`` them, or use "sdpa").
    Source: PyTorch FlexAttention (``torch.nn.attention.flex_attention``).
    """
    from torch.nn.attention.flex_attention import flex_attention as _flex

    _check_qkv(q, k, v)
    _, H, T, _ = q.shape
    if q.is_cuda:
        if q.size(-1) < FLEX_MIN_D_HEAD:
            raise ValueError(
                f"d_head must be >= {FLEX_MIN_D_HEAD} for FlexAttention on CUDA, got d_head={q.size(-1)}; "
                "use attn_backend='sdpa' or a wider head"
            )
        # Autocast does not cover FlexAttention: run it in one dtype (autocast's while autocast is on) with
        # autocast off. Then q, k and v always agree (QK-norm hands over fp32 q, k beside a bf16 v) and the
        # autocast state never forces a recompile.
        dtype = (torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda")
                 else torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype))
        with torch.autocast("cuda", enabled=False):
            return _compiled_flex()(q.to(dtype), k.to(dtype), v.to(dtype),
                                    block_mask=block_mask(mask_mod, H, T, q.device))
    if any(t.requires_grad for t in (q, k, v)):  # torch refuses these even under torch.no_grad()
        raise ValueError(
            f"flex_attention on device={q.device.type!r} supports forward only (no FlexAttention backward "
            "outside CUDA) and refuses inputs with requires_grad=True, even under torch.no_grad(); pass "
            "q.detach(), k.detach(), v.detach(), or use attn_backend='sdpa' or 'explicit'"
        )
    with warnings.catch_warnings():  # "called without torch.compile()": intended here, see docstring
        warnings.simplefilter("ignore", UserWarning)
        return _flex(q, k, v, block_mask=block_mask(mask_mod, H, T, q.device))


def attention(q: Tensor, k: Tensor, v: Tensor, mask_mod: MaskMod, backend: str = "sdpa") -> Tensor:
    """Masked attention through one of :data:`BACKENDS` ("explicit", "sdpa", "flex"); same function.

    Args/Returns: as :func:`explicit_attention`. Raises: ValueError for an unknown backend (or as the
    chosen backend raises).
    """
    if backend == "explicit":
        return explicit_attention(q, k, v, mask_mod)
    if backend == "sdpa":
        return sdpa_attention(q, k, v, mask_mod)
    if backend == "flex":
        return flex_attention(q, k, v, mask_mod)
    raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


# ====================================================================================== measurements
def _check_tokens(x: Any, model: nn.Module) -> None:
    if not isinstance(x, Tensor) or x.dim() != 2 or x.dtype != torch.long:
        desc = f"{tuple(x.shape)} {x.dtype}" if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must be a (B, T) tensor of token ids (torch.long), got {desc}")
    if not hasattr(model, "blocks") or not hasattr(model, "hooks"):
        raise ValueError(f"model must be a spanviz TinyGPT, got {type(model).__name__}")


@torch.no_grad()
def _logit_stats(model: nn.Module, x: Tensor, entropy: bool) -> tuple[Tensor, Tensor | None]:
    """(max |S| over allowed pairs (L, H), mean row entropy (L, H) or None), fp32, explicit path, eval mode."""
    _check_tokens(x, model)
    n_layer, n_head = len(model.blocks), model.blocks[0].attn.n_head
    max_abs = torch.zeros(n_layer, n_head)
    ent = torch.zeros(n_layer, n_head) if entropy else None

    def on_scores(layer: int) -> Callable[[Tensor], None]:
        def fn(scores: Tensor) -> None:  # (B, H, T, T), pre-mask
            allowed = model.blocks[layer].attn.allowed(scores.size(-1), scores.device)  # (H, T, T)
            s = scores.float().abs().masked_fill(~allowed, 0.0)  # |S| >= 0: a masked 0 never beats an allowed pair
            max_abs[layer] = s.amax(dim=(0, 2, 3)).cpu()

        return fn

    def on_pattern(layer: int) -> Callable[[Tensor], None]:
        def fn(pattern: Tensor) -> None:  # (B, H, T, T), rows sum to 1
            row_entropy = torch.special.entr(pattern.float()).sum(-1)  # (B, H, T), nats
            ent[layer] = row_entropy.mean(dim=(0, 2)).cpu()

        return fn

    hooks: dict[str, Callable[[Tensor], None]] = {}
    for i in range(n_layer):
        hooks[f"blocks.{i}.attn.hook_attn_scores"] = on_scores(i)
        if entropy:
            hooks[f"blocks.{i}.attn.hook_pattern"] = on_pattern(i)
    was_training = model.training
    device_type = x.device.type
    model.eval()
    try:
        with torch.autocast(device_type=device_type, enabled=False), model.hooks(hooks):
            model(x)
    finally:
        model.train(was_training)
    return max_abs, ent


def max_logits(model: nn.Module, x: Tensor) -> Tensor:
    """Max |q·k|/√d_head over **allowed** (query, key) pairs, per layer and head, on tokens x.

    Runs one forward pass of ``model`` (a :class:`spanviz.model.TinyGPT`) in eval mode, without autocast
    (fp32 for an fp32 model), through the explicit path (hooks on ``hook_attn_scores`` force it); the
    pre-mask scores are masked with ``block.attn.allowed(T, device)``. The model's train/eval mode is
    restored.

    Args:
        model: TinyGPT. x: (B, T) long token ids, T <= context_length.
    Returns:
        float32 CPU tensor (n_layer, n_head), dimensionless logits.
    Raises:
        ValueError: x not a (B, T) long tensor, or model not a TinyGPT.
    Source: the metric of arXiv 2505.15548 ("max logit"), measured as in spanviz's reconstruction.
    """
    return _logit_stats(model, x, entropy=False)[0]


def attention_entropy(model: nn.Module, x: Tensor) -> Tensor:
    """Mean attention entropy per layer and head: −Σ_j a_ij log a_ij averaged over batch and queries i.

    Same pass as :func:`max_logits` (explicit path, eval mode, no autocast).

    Returns:
        float32 CPU tensor (n_layer, n_head) in nats. A local head's entropy is at most log p; a uniform
        global row at position i has log(i + 1).
    Raises:
        ValueError: as :func:`max_logits`.
    """
    return _logit_stats(model, x, entropy=True)[1]


class LogitProbe:
    """Trainer probe: max logits over allowed pairs and attention entropy on the trainer's fixed batch.

    Protocol (``spanviz.train``): attributes ``name`` and ``every``; ``probe(trainer)`` is called every
    ``every`` steps and returns a JSON-able dict. Reads ``trainer.model`` (TinyGPT) and
    ``trainer.probe_batch`` (x, y) — x (B, T) long; one extra forward pass (explicit path, eval mode, no
    grad, no autocast: fp32 for an fp32 model), which materialises (B, H, T, T) scores one layer at a time;
    nothing is computed when the probe is not installed.

    Returned keys:
        ``logits/max``: float, max over layers and heads;
        ``logits/max_per_layer``: list (n_layer) of floats;
        ``logits/max_per_head``: list (n_layer) of lists (n_head) of floats;
        ``attn/entropy_per_head``: list (n_layer) of lists (n_head), nats (only with ``entropy=True``).

    Args:
        every: probe period in steps (integer >= 1).
        entropy: also record attention entropy per head (default True).
        name: probe name (non-empty string), default "logits".
    Raises:
        ValueError: every not an integer >= 1, or name not a non-empty string.
    """

    def __init__(self, every: int = 50, *, entropy: bool = True, name: str = "logits") -> None:
        _check_int("every", every, 1)
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if not isinstance(entropy, bool):
            raise ValueError(f"entropy must be True or False, got {entropy!r}")
        self.every, self.entropy, self.name = int(every), entropy, name

    def __call__(self, trainer: Any) -> dict[str, Any]:
        x = trainer.probe_batch[0]
        max_abs, ent = _logit_stats(trainer.model, x, entropy=self.entropy)
        out: dict[str, Any] = {
            "logits/max": float(max_abs.max()),
            "logits/max_per_layer": max_abs.amax(dim=1).tolist(),
            "logits/max_per_head": max_abs.tolist(),
        }
        if ent is not None:
            out["attn/entropy_per_head"] = ent.tolist()
        return out

    def __repr__(self) -> str:
        return f"LogitProbe(every={self.every}, entropy={self.entropy}, name={self.name!r})"


# ====================================================================================== teaching demos
def required_logit_gap(i: int | Sequence[int] | np.ndarray, p: int, eps: float, head: str = "global"):
    """Softmax margin: the logit gap a head needs to put mass >= 1 − ε on the p most recent keys.

    Query i (0-based) sees i + 1 keys; with in-band logits a and out-of-band logits b the in-band mass is
    p·e^a / (p·e^a + (i + 1 − p)·e^b), which is >= 1 − ε iff

        a − b >= log((i + 1 − p)/p) + log((1 − ε)/ε).

    The requirement grows like log i with the context; a **local** head (window p) has no out-of-band keys
    and needs no gap (returns 0). Rows with i + 1 <= p also have no out-of-band keys (0). Negative values
    (few out-of-band keys, large ε) mean the in-band logits may even sit below the others.

    Args:
        i: query position(s) >= 0 (int or array-like). p: band width >= 1. eps: out-of-band mass in (0, 1).
        head: "global" or "local".
    Returns:
        float for an int i, else a float numpy array of i's shape (nats, i.e. logit units).
    Raises:
        ValueError: i negative / not integer, p not an integer >= 1, eps outside (0, 1), unknown head.
    Source: spanviz reconstruction of the argument in arXiv 2505.15548.
    """
    _check_int("p", p, 1)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0.0 < eps < 1.0:
        raise ValueError(f"eps must be a number in (0, 1), got {eps!r}")
    if head not in ("global", "local"):
        raise ValueError(f"head must be 'global' or 'local', got {head!r}")
    scalar = isinstance(i, (int, np.integer)) and not isinstance(i, bool)
    arr = np.asarray(i)
    if arr.dtype.kind not in "iu" or (arr < 0).any():
        raise ValueError(f"i must be integer query position(s) >= 0, got {i!r}")
    out_of_band = arr + 1 - p
    gap = np.zeros(arr.shape, dtype=float)
    if head == "global":
        has_out = out_of_band > 0
        gap[has_out] = np.log(out_of_band[has_out] / p) + math.log((1.0 - eps) / eps)
    return float(gap) if scalar else gap


def band_target(n: int, p: int) -> Tensor:
    """Target attention (n, n): row i uniform over the last p keys incl. itself (over all i + 1 if i < p).

    Raises: ValueError for n or p not an integer >= 1. Source: spanviz reconstruction (toy demo).
    """
    _check_int("n", n, 1)
    _check_int("p", p, 1)
    band = dense_mask(head_mask_mod(1, p), 1, n)[0].float()
    return band / band.sum(-1, keepdim=True)


def _sinusoidal(n: int, dim: int) -> Tensor:
    """Fixed sinusoidal position features (n, dim): sin/cos at geometric frequencies (Transformer style)."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10_000.0) * torch.arange(dim // 2, dtype=torch.float32) / (dim // 2))
    return torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], dim=-1)


class _PositionQK(nn.Module):
    """Q, K (n, r) from a fixed-size MLP of sinusoidal features: capacity does not grow with n."""

    def __init__(self, n: int, r: int, features: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.register_buffer("phi", _sinusoidal(n, features))
        self.q = nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, r))
        self.k = nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, r))

    def forward(self) -> tuple[Tensor, Tensor]:
        return self.q(self.phi), self.k(self.phi)


class _FreeQK(nn.Module):
    """Free per-position vectors Q, K ∈ R^{n×r}, N(0, 1) init."""

    def __init__(self, n: int, r: int) -> None:
        super().__init__()
        self.Q = nn.Parameter(torch.randn(n, r))
        self.K = nn.Parameter(torch.randn(n, r))

    def forward(self) -> tuple[Tensor, Tensor]:
        return self.Q, self.K


def toy_band_fit(
    n: int = 256,
    r: int = 8,
    p: int = 32,
    head: str = "global",
    steps: int = 1500,
    param: str = "free",
    lr: float = 0.02,
    seed: int = 0,
    log_every: int = 1,
    threads: int | None = 1,
) -> dict[str, Any]:
    """Fit one attention head to a dense local band and watch its max logit (teaching demo 2).

    Learns Q, K ∈ R^{n×r} so that softmax(Q Kᵀ/√r + mask) matches the target "row i uniform over the last
    p keys" (:func:`band_target`), minimising the mean over rows of KL(target ‖ attention) with Adam.
    mask = causal for ``head="global"``, window p for ``head="local"``. A rank-r global head can only
    approximate the band by inflating logits (max |logit| keeps rising); a local head matches it exactly
    with all logits equal (e.g. zero).

    Measured with the defaults (seed 0, CPU): global max |logit| 5.0 → 6.4 (step 100) → 17.8 (500) → 46.6
    (1500, still rising), KL 0.156 → 0.026 → 0.015; local KL 2·10⁻³ (100) → 10⁻⁶ (1500), max |logit|
    4.6 → 0.7. Seeds 1 and 2 reach 25.0 and 29.0 at step 1500.

    Args:
        n: positions (>= 2). r: rank / head width (>= 1). p: band width (1 <= p <= n).
        head: "global" or "local". steps: Adam steps (>= 1). lr: Adam learning rate (> 0).
        param: "free" (free Q, K, N(0, 1) init) or "position" (Q, K = small MLPs of sinusoidal position
            features: fixed parameter count, so larger n is harder).
        seed: initialisation seed. log_every: record the curves every this many steps (>= 1; step 0 and
            the last step are always recorded).
        threads: torch intra-op threads during the fit (a process-wide setting, restored afterwards); the
            problem is tiny, so 1 is fastest — on a busy 2-core machine more threads were ~10× slower.
            None keeps torch's current setting.
    Returns:
        dict with ``config`` (the arguments), ``step``, ``max_logit`` (max |QKᵀ/√r| over allowed pairs),
        ``kl`` (nats, mean over rows) — lists; entry s is the state after s Adam updates (0 = init) — and
        ``final_max_logit``, ``final_kl``, ``seconds`` (wall) and ``cpu_seconds`` (process CPU time).
    Raises:
        ValueError: naming the offending argument.
    Source: spanviz reconstruction of the mechanism claimed in arXiv 2505.15548.
    """
    _check_int("n", n, 2)
    _check_int("r", r, 1)
    _check_int("p", p, 1)
    if p > n:
        raise ValueError(f"p must be <= n, got p={p}, n={n}")
    if head not in ("global", "local"):
        raise ValueError(f"head must be 'global' or 'local', got {head!r}")
    if param not in ("free", "position"):
        raise ValueError(f"param must be 'free' or 'position', got {param!r}")
    _check_int("steps", steps, 1)
    _check_int("log_every", log_every, 1)
    _check_int("seed", seed, 0)
    if threads is not None:
        _check_int("threads", threads, 1)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
        raise ValueError(f"lr must be a number > 0, got {lr!r}")

    config = dict(n=n, r=r, p=p, head=head, steps=steps, param=param, lr=lr, seed=seed)
    with torch_threads(threads):
        return _toy_band_fit(config, log_every)


def _toy_band_fit(config: dict[str, Any], log_every: int) -> dict[str, Any]:
    n, r, p, head, steps = (config[k] for k in ("n", "r", "p", "head", "steps"))
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.random.fork_rng(devices=[]):  # seeded init without disturbing torch's global RNG
        torch.manual_seed(config["seed"])
        qk: nn.Module = _FreeQK(n, r) if config["param"] == "free" else _PositionQK(n, r)
    opt = torch.optim.Adam(qk.parameters(), lr=config["lr"])
    target = band_target(n, p)
    log_target = torch.log(target.clamp_min(1e-30))
    allowed = dense_mask(head_mask_mod(1 if head == "local" else 0, p), 1, n)[0]  # (n, n)
    on_target = target > 0

    def evaluate() -> tuple[Tensor, Tensor]:
        Q, K = qk()
        logits = Q @ K.T / math.sqrt(r)  # (n, n)
        log_attn = torch.log_softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
        # KL(target ‖ attn) over the target's support (always inside the allowed set); mean over rows.
        kl = (target * (log_target - log_attn.masked_fill(~on_target, 0.0))).sum(-1).mean()
        return kl, logits

    record: dict[str, list] = {"step": [], "max_logit": [], "kl": []}
    for step in range(steps + 1):  # step s = the state after s Adam updates (0 = initialisation)
        kl, logits = evaluate()
        if step % log_every == 0 or step == steps:
            record["step"].append(step)
            record["max_logit"].append(float(logits.detach().abs().masked_fill(~allowed, 0.0).max()))
            record["kl"].append(float(kl.detach()))
        if step == steps:
            break
        opt.zero_grad(set_to_none=True)
        kl.backward()
        opt.step()
    log.debug("toy_band_fit %s done in %.2f s", config, time.perf_counter() - t0)
    return {
        "config": config,
        **record,
        "final_max_logit": record["max_logit"][-1],
        "final_kl": record["kl"][-1],
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
    }
