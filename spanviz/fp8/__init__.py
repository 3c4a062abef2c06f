"""Rank-aware spectral bounds on attention logits for FP8 scaling (arXiv 2602.18851).

Emadi, "Rank-Aware Spectral Bounds on Attention Logits for Stable Low-Precision Training" (Feb 2026).
Only the paper's abstract and problem statement are public. The formulas marked **spanviz
reconstruction** were rebuilt by us so that they reproduce every stated fact; they are not quoted from the
paper. See ``docs/fp8_bounds.md`` for the derivation sketch.

Files, read in this order (the same template as :mod:`spanviz.spans` and :mod:`spanviz.local_global`):

* :mod:`~spanviz.fp8.core` — **the technique**, top to bottom: spectral norms without forming d×d products
  (:func:`spectral_norms_exact`, CholeskyQR with a Householder fallback), the bounds (``worst_case_bound``,
  ``solve_gamma``, ``alpha_agnostic``, ``alpha_star``, :func:`logit_bounds`) and the scale (``scale_from_bound``,
  :func:`geometry_scale`);
* :mod:`~spanviz.fp8.probe` — the training probe :class:`FP8Probe` and :func:`with_dynamic` (the dynamic
  strategy's columns from any probe history);
* :mod:`~spanviz.fp8.demos` — the rank-knob demo :func:`random_bounds_vs_rank`, its rows at another δ, the scale
  each bound gives, and ``BoundsVsRank`` (the draw cached for notebook 03's sliders);

and what only this technique needs:

* :mod:`~spanviz.fp8.folding` — LayerNorm gain/bias and q/k biases folded into the weights so that ρ² = d
  (+1) exactly: ``fold_qk``, ``normalized_input``, ``layer_sigma``;
* :mod:`~spanviz.fp8.power` — ``PowerIteration`` (implicit, warm-started, *under*-estimates σ);
* :mod:`~spanviz.fp8.scaling` — strategies: ``strategy_alpha``, ``CalibratedAlpha``, Transformer Engine-style
  ``DelayedScaling``, and dynamic (current-amax) ``dynamic_scale``;
* :mod:`~spanviz.fp8.casting` — FP8 mechanics: :func:`fake_quantize`, :func:`count_overflow`, ``utilisation``.
* :mod:`~spanviz.fp8.strategies` — FP8 scaling as practitioners do it: per row (torchao), power of two, MX blocks
  of 32 (OCP MX v1.0), 1×128 tiles (DeepSeek-V3); ``cast_stats`` (overflows, underflows to zero / subnormal, cast
  errors) and ``scale_cost`` (scales stored, reductions before the cast).

This face holds the names notebook 03 and the docs use; every other name is imported from its defining module.
"""

from spanviz.fp8.casting import count_overflow, fake_quantize
from spanviz.fp8.core import geometry_scale, logit_bounds, spectral_norms_exact
from spanviz.fp8.demos import random_bounds_vs_rank
from spanviz.fp8.probe import FP8Probe, with_dynamic

__all__ = [
    "FP8Probe", "count_overflow", "fake_quantize", "geometry_scale", "logit_bounds", "random_bounds_vs_rank",
    "spectral_norms_exact", "with_dynamic",
]  # fmt: skip
