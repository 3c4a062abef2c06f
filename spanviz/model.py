"""TinyGPT: a small pre-LN GPT whose attention is explicit enough to study and fast when nobody looks.

Shapes: B batch, T context length (tokens), H = n_head, d = d_model, d_head = d_model / n_head, V vocab.

The one attention implementation of spanviz has two paths that compute the same function (to fp32 tolerance,
tested): :func:`explicit_attention` forms the scores S = Q Kᵀ/√d_head (B, H, T, T) *before* the mask and passes
every intermediate through a named :class:`~spanviz.hook_points.HookPoint` (TransformerLens naming: ``hook_q``,
``hook_k``, ``hook_v``, ``hook_attn_scores``, ``hook_pattern``) so probes can read and replace them;
:func:`fused_attention` calls ``scaled_dot_product_attention`` (or FlexAttention on CUDA for local/global heads)
and never materialises the T×T matrices. The fused path runs whenever nothing needs the explicit tensors.

The techniques plug in through these imports, and no others: :mod:`spanviz.local_global.core` (the per-head masks
of LS-attention, arXiv 2505.15548: ``mask_mod``), :mod:`spanviz.local_global.flex` (FlexAttention's block-sparse
kernel for them, CUDA only), :mod:`spanviz.local_global.stabilisers` (the logit-growth baselines: soft-capping,
QK-Clip, Gemma 3's per-layer local/global pattern), :mod:`spanviz.spans.config` (:class:`SpanConfig`, a field of
:class:`GPTConfig`, so a run's store key holds it) and :mod:`spanviz.spans.fused` (``build_grad_fns``: the
score-gradient transforms of span / violation scaling, arXiv 2512.13033, set into each :class:`Attention`'s
``score_grad_fn`` / ``qk_grad_fn`` slots). Probes (logit growth, FP8 bounds) live in the technique packages and read
the hook points and :meth:`Attention.qk_weights`. A new mask or gradient transform needs no edit here: set the slots
at run time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Annotated, Any, Literal

import torch
import torch.nn.functional as F
import tyro
from torch import Tensor, nn

from spanviz.hook_points import HookedRootModule, HookPoint
from spanviz.lm_loss import lm_cross_entropy
from spanviz.local_global.core import (
    MaskMod,
    additive_mask,
    causal_mask,
    check_head_split,
    dense_mask_cached,
    head_mask_mod,
)
from spanviz.local_global.flex import flex_attention, flex_available
from spanviz.local_global.stabilisers import is_global_layer, qk_clip_, qk_clip_factors, soft_cap
from spanviz.spans.config import SpanConfig
from spanviz.spans.fused import build_grad_fns
from spanviz.validators import (
    check_bool,
    check_choice,
    check_fields,
    check_float,
    check_int,
    check_model_size,
    check_tensor,
)

ATTN_BACKENDS = ("auto", "explicit", "sdpa", "flex")
HOOK_NAMES = ("hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern")


@dataclass(frozen=True)
class GPTConfig:
    """Architecture of a :class:`TinyGPT`. Validated on construction. Units are in brackets.

    Attributes:
        vocab_size: V [tokens], >= 1.
        context_length: T_max [tokens], the longest sequence the model accepts, >= 1.
        n_layer: number of transformer blocks, 1..1024 (the whole model <= ~2^35 parameters: check_model_size).
        n_head: H, attention heads per layer, >= 1, must divide d_model.
        d_model: residual width d, >= 1.
        dropout: probability in [0, 1) used on embeddings, attention weights and residual branches.
        bias: whether linear layers and LayerNorms have biases (GPT-2 style when True).
        n_local: LS-attention — the first ``n_local`` heads are local, the rest global; 0 <= n_local <= n_head.
        window: p, keys a local head sees *including the token itself* (allowed(i, j) ⇔ 0 <= i - j < p);
            required (>= 1) when n_local > 0; p >= T makes a local head identical to a global one.
        qk_norm: normalise q and k per head (RMSNorm over d_head, learnable gain) — the QK-norm stabiliser.
        qk_rank: r, constrains each head's W^Q_h to rank r (so W^Q_h W^K_hᵀ has rank <= r); None = full
            rank d_head. 1 <= r <= d_head.
        logit_softcap: c > 0, Gemma 2's soft-capping of the attention logits, S ← c·tanh(S/c) (explicit path);
            None = off. logit_softcap, qk_clip, global_every: :mod:`spanviz.local_global.stabilisers`.
        qk_clip: τ > 0, Kimi K2's QK-Clip: after each update, heads whose largest logit exceeded τ have W^Q_h,
            W^K_h scaled by √(τ/S_max^h) (:meth:`TinyGPT.apply_qk_clip`); None = off. Not with qk_norm.
        global_every: k >= 1, Gemma 3's per-layer pattern: layers k−1, 2k−1, … keep the head split, every head of
            the others is local with ``window`` (required); None = off.
        spans: span / violation gradient scaling setting (:class:`spanviz.spans.SpanConfig`), or None.
        attn_backend: "auto" (fused unless something needs the explicit tensors; FlexAttention for
            local heads on CUDA), "explicit", "sdpa" or "flex" (CUDA only).

    Raises:
        ValueError: naming the field, the value and what is allowed.
    """

    vocab_size: Annotated[int, tyro.conf.Suppress] = 8192  # the command line takes it from the data
    context_length: int = 128
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    dropout: float = 0.0
    bias: bool = True
    n_local: int = 0
    window: int | None = None
    qk_norm: bool = False
    qk_rank: int | None = None
    logit_softcap: float | None = None
    qk_clip: float | None = None
    global_every: int | None = None
    spans: Annotated[SpanConfig | None, tyro.conf.Suppress] = None  # the command line: --spans-preset etc.
    attn_backend: Literal[ATTN_BACKENDS] = "auto"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context_length", "n_layer", "n_head", "d_model"):  # numpy integers become ints
            object.__setattr__(self, name, check_int(name, getattr(self, name), 1))
        if self.d_model % self.n_head:
            raise ValueError(f"d_model must be divisible by n_head, got d_model={self.d_model}, n_head={self.n_head}")
        check_model_size(self.n_layer, self.d_model, self.vocab_size, self.context_length)  # before building
        object.__setattr__(self, "dropout", check_float("dropout", self.dropout, 0.0, 1.0, high_open=True))  # 0 → 0.0
        for name in ("bias", "qk_norm"):
            check_bool(name, getattr(self, name))
        n_local, window = check_head_split(self.n_head, self.n_local, self.window)
        object.__setattr__(self, "n_local", n_local)
        object.__setattr__(self, "window", window)
        if self.qk_rank is not None:
            object.__setattr__(self, "qk_rank", check_int("qk_rank", self.qk_rank, 1, self.d_head))
        for name in ("logit_softcap", "qk_clip"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_float(name, getattr(self, name), 0.0, low_open=True))
        if self.qk_clip is not None and self.qk_norm:
            raise ValueError(f"qk_clip must be None with qk_norm=True (the logits are then not q·k of the "
                             f"projections QK-Clip rescales), got qk_clip={self.qk_clip}")
        if self.global_every is not None:
            object.__setattr__(self, "global_every", check_int("global_every", self.global_every, 1))
            if self.window is None:
                raise ValueError(f"window must be set (>= 1) when global_every is set (the local layers' window p), "
                                 f"got window=None, global_every={self.global_every}")
        if isinstance(self.spans, Mapping):
            try:
                object.__setattr__(self, "spans", SpanConfig(**self.spans))
            except (TypeError, ValueError) as exc:  # unknown key, or a bad value inside the dict
                raise ValueError(f"spans: {exc}") from exc
        if self.spans is not None:
            if not isinstance(self.spans, SpanConfig):
                raise ValueError(f"spans must be a spanviz.spans.SpanConfig, a dict or None, got {self.spans!r}")
            self.spans.check_layers(self.n_layer)
        check_choice("attn_backend", self.attn_backend, ATTN_BACKENDS)

    @property
    def d_head(self) -> int:
        """Width of one head, d_model / n_head."""
        return self.d_model // self.n_head

    @property
    def n_global(self) -> int:
        """Number of global (plain causal) heads, n_head - n_local."""
        return self.n_head - self.n_local

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (``spans`` nested as a dict)."""
        out = asdict(self)
        if self.spans is not None:
            out["spans"] = self.spans.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GPTConfig:
        """Inverse of :meth:`to_dict`. Unknown keys raise ``ValueError``."""
        return cls(**check_fields(cls, d))


class LowRankQuery(nn.Module):
    """Query projection whose per-head matrix W^Q_h = A_h B_h has rank <= r (the FP8 "rank knob"):
    x (B, T, d_model) → (B, T, n_head·d_head). A_h: d_model×r (one shared ``down`` Linear), B_h: r×d_head.
    Source: spanviz's own construction for arXiv 2602.18851's rank experiments.
    """

    def __init__(self, d_model: int, n_head: int, d_head: int, rank: int, bias: bool) -> None:
        super().__init__()
        self.n_head, self.d_head, self.rank = n_head, d_head, rank
        self.down = nn.Linear(d_model, n_head * rank, bias=False)
        # std 1/sqrt(r) keeps q's scale equal to a full-rank N(0, 0.02) projection at init.
        self.up = nn.Parameter(torch.randn(n_head, rank, d_head) / math.sqrt(rank))
        self.bias = nn.Parameter(torch.zeros(n_head * d_head)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        z = self.down(x).view(B, T, self.n_head, self.rank)  # (B, T, H, r)
        q = torch.einsum("bthr,hrd->bthd", z, self.up).reshape(B, T, self.n_head * self.d_head)  # (B, T, H·d_head)
        return q if self.bias is None else q + self.bias

    def per_head_weight(self) -> Tensor:
        """W^Q_h as a (n_head, d_model, d_head) tensor (input-major: q_h = x @ W^Q_h + b_h)."""
        a = self.down.weight.view(self.n_head, self.rank, -1).transpose(1, 2)  # (H, d_model, r)
        return a @ self.up


def explicit_attention(
    q: Tensor, k: Tensor, v: Tensor, mask_mod: MaskMod, *, hook_scores: Callable[[Tensor], Tensor] = nn.Identity(),
    hook_pattern: Callable[[Tensor], Tensor] = nn.Identity(), score_grad_fn: Callable[..., Tensor] | None = None,
    dropout: Callable[[Tensor], Tensor] = nn.Identity(), softcap: float | None = None,
) -> Tensor:
    """The explicit path: scores, additive mask, softmax, times v — every intermediate visible.

    Args:
        q, k: (B, H, T, d_head); v: (B, H, T, d_v). mask_mod: the mask predicate (its additive mask M is cached).
        hook_scores, hook_pattern: tensor → tensor on the pre-mask scores S and on the pattern P (hook points).
        score_grad_fn: (dS, q, k, v) → dS' on ∂L/∂S during backward (q, k, v detached). dropout: on P.
        softcap: c, Gemma 2's cap S ← c·tanh(S/c) after ``hook_scores`` (which sees the logits before the cap).
    Returns: y (B, H, T, d_v), equal to :func:`fused_attention`'s to fp32 tolerance (tested).
    """
    B, H, T, d_head = q.shape
    # S = q kᵀ / √d_head
    scores = hook_scores((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d_head)))  # (B, H, T, T), pre-mask
    if score_grad_fn is not None and scores.requires_grad:
        refs = (q.detach(), k.detach(), v.detach())
        # The hook sees ∂L/∂S of the *pre-mask* scores: the mask is additive, so nothing re-masks dS'.
        scores.register_hook(lambda g: score_grad_fn(g, *refs))
    if softcap is not None:
        scores = soft_cap(scores, softcap)  # c·tanh(S/c): |S| < c
    # P = softmax(S + M), M = 0 where allowed and −inf elsewhere
    mask = additive_mask(mask_mod, H, T, scores.device, scores.dtype)  # (H, T, T)
    pattern = hook_pattern(torch.softmax(scores + mask, dim=-1))  # (B, H, T, T), rows sum to 1
    # y = P v
    return dropout(pattern) @ v  # (B, H, T, d_v)


def fused_attention(
    q: Tensor, k: Tensor, v: Tensor, mask_mod: MaskMod, *, dropout_p: float = 0.0, backend: str = "auto"
) -> Tensor:
    """The fused path: SDPA (FlashAttention where it can) or FlexAttention; no T×T matrix is materialised.

    Args: q, k, v, mask_mod as :func:`explicit_attention`; dropout_p on the attention weights; backend "flex"
    (FlexAttention; CUDA for gradients), "sdpa", or "auto" (FlexAttention for a mask that is not plain causal,
    on CUDA, without dropout; else SDPA). Returns: y (B, H, T, d_v).
    Raises: ValueError for "flex" with dropout_p > 0, or as :func:`spanviz.local_global.flex_attention` raises.
    """
    if backend == "flex" and dropout_p > 0:
        raise ValueError(f"attn_backend='flex' does not support dropout, got dropout={dropout_p}")
    causal = mask_mod is causal_mask
    # FlexAttention pays off for local heads on CUDA; it has no dropout, so "auto" uses it only without.
    if backend == "flex" or (backend == "auto" and not causal and dropout_p == 0 and flex_available(q)):
        return flex_attention(q, k, v, mask_mod)
    if causal:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    allowed = dense_mask_cached(mask_mod, q.size(1), q.size(2), q.device)  # (H, T, T)
    # Causality is folded into the boolean mask; is_causal must not be passed together with a mask.
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout_p)


class Attention(nn.Module):
    """Multi-head causal self-attention with per-head masks, hook points and gradient-transform slots.

    Input and output: (B, T, d_model). Slots (from the config; replaceable, e.g. :meth:`TinyGPT.set_span_scaling`):
        mask_mod: predicate (b, h, q_idx, kv_idx) → bool tensor, True where key kv_idx may be attended.
        score_grad_fn: (dS, q, k, v) → dS' on ∂L/∂S of the pre-mask scores (B, H, T, T); q, k, v detached. The
            definition runs on the explicit path; a transform with an ``attention(q, k, v, attend, mask)`` method
            (:class:`spanviz.spans.fused.ScoreTransform`) keeps the fused forward and applies the same transform
            in its backward, unless a hook or attention dropout while training needs the explicit tensors. A
            plain function forces the explicit path while gradients are on.
        qk_grad_fn: (grad, x, side) → grad' on ∂L/∂q (x = q, side "q") and ∂L/∂k (x = k, side "k"),
            (B, H, T, d_head).
    """

    def __init__(self, cfg: GPTConfig, layer: int) -> None:
        super().__init__()
        d, H, dh = cfg.d_model, cfg.n_head, cfg.d_head
        self.n_head, self.d_head, self.layer = H, dh, layer
        self.W_Q: nn.Module = (
            nn.Linear(d, d, bias=cfg.bias) if cfg.qk_rank is None else LowRankQuery(d, H, dh, cfg.qk_rank, cfg.bias)
        )
        self.W_K = nn.Linear(d, d, bias=cfg.bias)
        self.W_V = nn.Linear(d, d, bias=cfg.bias)
        self.W_O = nn.Linear(d, d, bias=cfg.bias)
        self.q_norm = nn.RMSNorm(dh) if cfg.qk_norm else None
        self.k_norm = nn.RMSNorm(dh) if cfg.qk_norm else None
        self.dropout = cfg.dropout
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.resid_drop = nn.Dropout(cfg.dropout)
        self.backend = cfg.attn_backend
        n_local = cfg.n_local if is_global_layer(layer, cfg.global_every) else H  # Gemma 3: all heads local
        self.mask_mod = head_mask_mod(n_local=n_local, window=cfg.window)
        self.softcap, self.qk_clip = cfg.logit_softcap, cfg.qk_clip
        self.max_logit_seen: Tensor | None = None  # (H,) S_max^h of the last training forward pass (QK-Clip)
        self.score_grad_fn: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor] | None = None
        self.qk_grad_fn: Callable[[Tensor, Tensor, str], Tensor] | None = None
        for name in HOOK_NAMES:
            setattr(self, name, HookPoint())

    def allowed(self, T: int, device: torch.device | str = "cpu") -> Tensor:
        """Boolean mask (H, T, T) of allowed (query, key) pairs, built from ``mask_mod``; cached."""
        return dense_mask_cached(self.mask_mod, self.n_head, T, device)

    def needs_explicit(self, grad_enabled: bool) -> bool:
        """True when this call must go through the explicit path (hooks, forced backend, a score transform
        without a fused backward or with attention dropout while training: the fused backward recomputes P)."""
        fast = hasattr(self.score_grad_fn, "attention") and not (self.training and self.dropout > 0)
        if self.backend == "explicit" or self.softcap is not None or (
                self.score_grad_fn is not None and grad_enabled and not fast):
            return True
        return any(getattr(self, name).active for name in ("hook_attn_scores", "hook_pattern"))

    def qk_weights(self) -> tuple[Tensor, Tensor | None, Tensor, Tensor | None]:
        """Per-head query/key weights as used in ``q_h = x @ W_Q[h] + b_Q[h]`` (x = LayerNorm output): returns
        (W_Q (H, d_model, d_head), b_Q (H, d_head) or None, W_K (H, d_model, d_head), b_K or None). W^Q_h W^K_hᵀ is
        the d_model×d_model bilinear form of head h's logits (times 1/√d_head). With ``qk_norm`` the logits are
        not bilinear in x; FP8 bounds then do not apply."""
        H, dh = self.n_head, self.d_head
        low_rank = isinstance(self.W_Q, LowRankQuery)
        wq = self.W_Q.per_head_weight() if low_rank else self.W_Q.weight.view(H, dh, -1).transpose(1, 2)
        wk = self.W_K.weight.view(H, dh, -1).transpose(1, 2)  # (d, d) -> (H, d_head, d_model) -> (H, d_model, d_head)
        bq, bk = (None if b is None else b.view(H, dh) for b in (self.W_Q.bias, self.W_K.bias))  # (H, d_head)
        return wq, bq, wk, bk

    def _max_logit(self, q: Tensor, k: Tensor) -> Tensor:
        """S_max^h (H,): the largest logit q·k/√d_head over allowed pairs and the batch, signed (QK-Clip)."""
        scores = (q @ k.transpose(-2, -1)).float() * (1.0 / math.sqrt(self.d_head))  # (B, H, T, T)
        allowed = self.allowed(q.size(2), q.device)  # (H, T, T)
        return scores.masked_fill(~allowed, -math.inf).amax(dim=(0, 2, 3))  # (H,)

    def apply_qk_clip(self) -> None:
        """QK-Clip after an optimizer update: scale W^Q_h, W^K_h (and biases) by √γ_h, γ_h = min(1, τ/S_max^h),
        S_max^h from the last training forward pass (nothing happens without one, or with ``qk_clip`` None)."""
        if self.qk_clip is None or self.max_logit_seen is None:
            return
        H, dh = self.n_head, self.d_head
        gamma = qk_clip_factors(self.max_logit_seen, self.qk_clip)  # (H,)
        # per head: (H, d_head, d_model) rows of W_Q and W_K, or LowRankQuery's (H, r, d_head) up-projections
        w_q = self.W_Q.up if isinstance(self.W_Q, LowRankQuery) else self.W_Q.weight.view(H, dh, -1)
        b_q, b_k = (None if b is None else b.view(H, dh) for b in (self.W_Q.bias, self.W_K.bias))
        qk_clip_(w_q, b_q, self.W_K.weight.view(H, dh, -1), b_k, gamma)
        self.max_logit_seen = None

    def _attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """The fused attention of this layer without dropout (the forward of a score transform's fused backward)."""
        return fused_attention(q, k, v, self.mask_mod, backend=self.backend)

    def forward(self, x: Tensor) -> Tensor:
        B, T, d = x.shape
        H, dh = self.n_head, self.d_head
        q = self.W_Q(x).view(B, T, H, dh).transpose(1, 2)  # (B, H, T, d_head)
        k = self.W_K(x).view(B, T, H, dh).transpose(1, 2)  # (B, H, T, d_head)
        v = self.W_V(x).view(B, T, H, dh).transpose(1, 2)  # (B, H, T, d_head)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        if self.qk_grad_fn is not None and q.requires_grad:
            fn, q_ref, k_ref = self.qk_grad_fn, q.detach(), k.detach()
            q.register_hook(lambda g: fn(g, q_ref, "q"))
            k.register_hook(lambda g: fn(g, k_ref, "k"))
        grad_enabled = torch.is_grad_enabled()
        if self.qk_clip is not None and self.training and grad_enabled:
            self.max_logit_seen = self._max_logit(q.detach(), k.detach())
        if self.needs_explicit(grad_enabled):  # manual attention, every intermediate hooked
            y = explicit_attention(q, k, v, self.mask_mod, hook_scores=self.hook_attn_scores,
                                   hook_pattern=self.hook_pattern, score_grad_fn=self.score_grad_fn,
                                   dropout=self.attn_drop, softcap=self.softcap)  # (B, H, T, d_head)
        elif self.score_grad_fn is not None and grad_enabled:  # the same transform's fused backward: fused forward
            mask = additive_mask(self.mask_mod, H, T, q.device, torch.float32)  # (H, T, T), for the backward
            y = self.score_grad_fn.attention(q, k, v, self._attend, mask)  # (B, H, T, d_head)
        else:  # efficient attention using fused kernels
            p = self.dropout if self.training else 0.0
            y = fused_attention(q, k, v, self.mask_mod, dropout_p=p, backend=self.backend)  # (B, H, T, d_head)
        y = y.transpose(1, 2).reshape(B, T, d)  # (B, T, d_model): heads side by side
        return self.resid_drop(self.W_O(y))


class MLP(nn.Module):
    """d_model → 4·d_model → GELU → d_model."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model, bias=cfg.bias)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))  # (B, T, d) -> (B, T, 4d) -> (B, T, d)


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(LN(x)), then x + mlp(LN(x))."""

    def __init__(self, cfg: GPTConfig, layer: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.attn = Attention(cfg, layer)
        self.ln_2 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(HookedRootModule):
    """A small GPT-2-style language model: learned positions, pre-LN blocks, GELU MLP, tied embeddings.

    Init (GPT-2): N(0, 0.02) for all weights, N(0, 0.02/√(2·n_layer)) for the residual output projections (W_O and
    the MLP's down-projection), zero biases. Call: ``logits, loss = model(idx, targets)`` with idx, targets (B, T)
    long, T <= context_length; logits (B, T, V) float; loss the mean cross-entropy in nats (None without targets).
    ``_, loss = model(idx, targets, return_logits=False)`` gives the same loss (to fp32 rounding) without ever
    holding the (B·T, V) logits (:func:`spanviz.lm_loss.lm_cross_entropy`, a chunk of rows at a time) — what
    training and evaluation use. Raises ``ValueError`` when idx is not 2-D or T exceeds ``cfg.context_length``.
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        if not isinstance(cfg, GPTConfig):
            raise ValueError(f"cfg must be a GPTConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.context_length, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.apply(self.init_weights)
        residual_std = 0.02 / math.sqrt(2 * cfg.n_layer)
        for block in self.blocks:
            nn.init.normal_(block.attn.W_O.weight, std=residual_std)
            nn.init.normal_(block.mlp.proj.weight, std=residual_std)
        self.set_span_scaling(cfg.spans)

    @staticmethod
    def init_weights(module: nn.Module) -> None:
        """GPT-2's init of one module (``model.apply``): Linear and Embedding weights N(0, 0.02), biases 0."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def set_span_scaling(self, span_cfg: SpanConfig | None) -> None:
        """Install (or remove, with None) span / violation gradient scaling on the configured layers: changes
        only the backward pass; ``self.cfg`` is updated so run records stay truthful."""
        if span_cfg is not None:
            span_cfg.check_layers(self.cfg.n_layer)
        self.cfg = replace(self.cfg, spans=span_cfg)
        for block in self.blocks:
            attn = block.attn
            attn.score_grad_fn, attn.qk_grad_fn = None, None
            if span_cfg is not None and span_cfg.applies_to(attn.layer):
                attn.score_grad_fn, attn.qk_grad_fn = build_grad_fns(span_cfg)

    def forward(self, idx: Tensor, targets: Tensor | None = None, *,
                return_logits: bool = True) -> tuple[Tensor | None, Tensor | None]:
        """Logits and loss of token ids.

        Args:
            idx: (B, T) integer token ids in [0, vocab_size), 1 <= T <= context_length, on the model's device.
            targets: None, or the next-token ids, (B, T) like ``idx``.
            return_logits: False with targets gives (None, loss) without forming the (B·T, V) logits.
        Returns:
            (logits (B, T, V) or None, loss (scalar, mean cross-entropy in nats) or None).
        Raises:
            ValueError: naming ``idx`` or ``targets``: not an integer tensor of that shape, empty, on the meta or
                another device, longer than context_length, or (on the CPU) holding an id outside [0, vocab_size).
        Source: GPT-2 (pre-LN), our reconstruction.
        """
        self._check_ids("idx", idx)
        if idx.dim() != 2:
            raise ValueError(f"idx must have shape (B, T), got {tuple(idx.shape)}")
        T = idx.size(1)
        if T > self.cfg.context_length:
            raise ValueError(f"sequence length T={T} exceeds context_length={self.cfg.context_length}")
        if targets is not None:
            self._check_ids("targets", targets)
            if targets.shape != idx.shape:
                raise ValueError(f"targets must have idx's shape {tuple(idx.shape)}, got {tuple(targets.shape)}")
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, d_model)
        for block in self.blocks:
            x = block(x)
        h = self.ln_f(x)  # (B, T, d_model)
        if targets is not None and not return_logits:  # the loss alone: never all (B·T, V) logits at once
            return None, lm_cross_entropy(h.flatten(0, 1), self.lm_head.weight, targets.flatten())
        logits = self.lm_head(h)  # (B, T, V)
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        return logits, loss

    def _check_ids(self, name: str, ids: Tensor) -> None:
        """dtype, shape and device always (metadata: free); the id range only on the CPU. The training loop calls
        forward every update: on a GPU, ``ids.min()`` / ``ids.max()`` read back to the host would synchronise each
        step, so there the range is left to the doors that take ids from a user (:func:`spanviz.sampling.generate`,
        the probes) and to the data, whose vocabulary sets vocab_size. On the CPU the two reductions cost O(B·T),
        nothing beside the forward."""
        check_tensor(name, ids, ndim=2, kind="integer", device=self.wte.weight.device)
        if ids.device.type == "cpu":
            low, high = int(ids.min()), int(ids.max())
            if low < 0 or high >= self.cfg.vocab_size:
                raise ValueError(f"{name} must hold token ids in [0, {self.cfg.vocab_size}) (the model's vocab_size), "
                                 f"got {low if low < 0 else high}")

    def apply_qk_clip(self) -> None:
        """QK-Clip (``cfg.qk_clip``) on every layer after an optimizer update: see :meth:`Attention.apply_qk_clip`."""
        for block in self.blocks:
            block.attn.apply_qk_clip()

    def num_params(self) -> int:
        """Number of distinct parameters (tied embeddings counted once)."""
        return sum(p.numel() for p in self.parameters())
