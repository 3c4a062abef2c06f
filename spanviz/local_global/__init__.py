"""LS-attention (arXiv 2505.15548): local sliding-window heads plus a few global heads.

The first ``n_local`` heads of a layer are local (window p: allowed(i, j) ⇔ 0 <= i − j < p, **p keys including
the token itself**), the remaining ``n_head − n_local`` global (plain causal). A local head with p >= T is
identical to a global head. The settings live in :class:`spanviz.model.GPTConfig` (``n_local``, ``window``);
:class:`spanviz.model.Attention` is the one attention implementation that applies the masks.

Files, read in this order:

* :mod:`~spanviz.local_global.core` — **the technique**: the masks as FlexAttention ``mask_mod`` predicates
  composed with ``and_masks`` / ``or_masks`` (:func:`head_mask_mod`), evaluated with ``create_mask``
  (:func:`dense_mask`, cached boolean and additive masks) and ``create_block_mask`` (:func:`block_mask`);
  ``python -m spanviz.local_global`` prints them;
* :mod:`~spanviz.local_global.flex` — FlexAttention with the block mask (:func:`flex_attention`, CUDA,
  compiled): where local heads skip work;
* :mod:`~spanviz.local_global.config` — the head split's one check and the paper's shape;
* :mod:`~spanviz.local_global.backends` — :func:`attention`, :func:`explicit_attention`,
  :func:`sdpa_attention`: masked attention of (q, k, v) without a model, through :mod:`spanviz.model`'s code;
* :mod:`~spanviz.local_global.probes` — :func:`max_logits`, :func:`attention_entropy` and the trainer probe
  :class:`LogitProbe`;
* :mod:`~spanviz.local_global.demos` — teaching demos: :func:`required_logit_gap` (softmax margin) and
  :func:`toy_band_fit` (logit growth of a low-rank global head fitting a dense local band).

Layers: ``core``, ``flex`` and ``config`` sit below :mod:`spanviz.model` (which imports them); ``backends``,
``probes`` and ``demos`` above it.
"""

from spanviz.local_global.config import PAPER, check_head_split
from spanviz.local_global.core import (
    _BLOCK_CACHE,  # noqa: F401  (the mask caches, read by tests)
    _CACHE_PER_MOD,  # noqa: F401
    _DENSE_CACHE,  # noqa: F401
    MaskMod,
    additive_mask,
    block_mask,
    causal_mask,
    dense_mask,
    dense_mask_cached,
    generate_global_heads,
    generate_local_global,
    generate_sliding_window,
    head_mask_mod,
)
from spanviz.local_global.flex import (
    FLEX_MIN_D_HEAD,
    FLEX_RECOMPILE_LIMIT,
    check_qkv,
    compiled_flex,
    flex_attention,
    flex_available,
)
from spanviz.local_global.backends import BACKENDS, attention, explicit_attention, sdpa_attention
from spanviz.local_global.demos import band_target, head_labels, head_masks, required_logit_gap, toy_band_fit
from spanviz.local_global.probes import LogitProbe, attention_entropy, max_logits

__all__ = [
    "BACKENDS", "FLEX_MIN_D_HEAD", "FLEX_RECOMPILE_LIMIT", "LogitProbe", "MaskMod", "PAPER", "additive_mask",
    "attention", "attention_entropy", "band_target", "block_mask", "causal_mask", "check_head_split", "check_qkv",
    "compiled_flex", "dense_mask", "dense_mask_cached", "explicit_attention",
    "flex_attention", "flex_available", "generate_global_heads", "generate_local_global",
    "generate_sliding_window", "head_labels", "head_mask_mod", "head_masks", "max_logits", "required_logit_gap",
    "sdpa_attention", "toy_band_fit",
]
