"""LS-attention (arXiv 2505.15548): local sliding-window heads plus a few global heads.

The first ``n_local`` heads of a layer are local (window p: allowed(i, j) ⇔ 0 <= i − j < p, **p keys including
the token itself**), the remaining ``n_head − n_local`` global (plain causal). A local head with p >= T is
identical to a global head. The settings live in :class:`spanviz.model.GPTConfig` (``n_local``, ``window``);
:class:`spanviz.model.Attention` is the one attention implementation that applies the masks.

Files, read in this order (the same template as :mod:`spanviz.spans` and :mod:`spanviz.fp8`):

* :mod:`~spanviz.local_global.core` — **the technique**: the masks as FlexAttention ``mask_mod`` predicates
  composed with ``and_masks`` / ``or_masks`` (:func:`head_mask_mod`), evaluated densely by broadcasting
  (:func:`dense_mask`: ``create_mask``'s entries; cached boolean and additive masks) and with
  ``create_block_mask`` (:func:`block_mask`); the
  head split's one check (``check_head_split``) and the paper's shape (``PAPER``);
* :mod:`~spanviz.local_global.flex` — FlexAttention with the block mask (:func:`flex_attention`, CUDA,
  compiled): where local heads skip work;
* :mod:`~spanviz.local_global.probe` — :func:`max_logits`, ``attention_entropy`` and the trainer probe
  :class:`LogitProbe`;
* :mod:`~spanviz.local_global.demos` — teaching demos: :func:`required_logit_gap` (softmax margin),
  :func:`toy_band_fit` (logit growth of a low-rank global head fitting a dense local band), the masks of
  notebook 02, and ``print_masks`` (what ``python -m spanviz.local_global`` prints).

Nothing here imports :mod:`spanviz.model` (which imports ``core`` and ``flex``); probes read a model by duck typing.
This face holds the names the notebooks and docs use; every other name is imported from its defining module.
"""

from spanviz.local_global.core import block_mask, dense_mask, head_mask_mod
from spanviz.local_global.demos import required_logit_gap, toy_band_fit
from spanviz.local_global.flex import flex_attention
from spanviz.local_global.probe import LogitProbe, max_logits

__all__ = [
    "LogitProbe", "block_mask", "dense_mask", "flex_attention", "head_mask_mod", "max_logits", "required_logit_gap",
    "toy_band_fit",
]  # fmt: skip
