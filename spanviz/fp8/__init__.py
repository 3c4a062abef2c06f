"""Rank-aware spectral bounds on attention logits for FP8 scaling (arXiv 2602.18851).

Emadi, "Rank-Aware Spectral Bounds on Attention Logits for Stable Low-Precision Training" (Feb 2026).
Only the paper's abstract and problem statement are public. The formulas marked **spanviz
reconstruction** were rebuilt by us so that they reproduce every stated fact; they are not quoted from the
paper. See ``docs/fp8_bounds.md`` for the derivation sketch.

Read :mod:`spanviz.fp8.core` first: it is the technique, top to bottom. Beside it:

* :mod:`~spanviz.fp8.core` — spectral norms without forming d×d products (:func:`spectral_norms_exact`,
  CholeskyQR with a Householder fallback; grouped-query weights accepted), the bounds
  (:func:`worst_case_bound`, :func:`solve_gamma`, :func:`alpha_agnostic`, :func:`alpha_star`,
  :func:`logit_bounds`) and the scale (:func:`scale_from_bound`, :func:`geometry_scale`);
* :mod:`~spanviz.fp8.folding` — LayerNorm gain/bias and q/k biases folded into the weights so that ρ² = d
  (+1) exactly: :func:`fold_qk`, :func:`normalized_input`, :func:`layer_sigma`;
* :mod:`~spanviz.fp8.power` — :class:`PowerIteration` (implicit, warm-started, *under*-estimates σ);
* :mod:`~spanviz.fp8.scaling` — strategies: :func:`strategy_alpha`, :class:`CalibratedAlpha`,
  Transformer Engine-style :class:`DelayedScaling`, and dynamic (current-amax) :func:`dynamic_scale`;
* :mod:`~spanviz.fp8.casting` — FP8 mechanics: :func:`fake_quantize`, :func:`count_overflow`,
  :func:`utilisation`;
* :mod:`~spanviz.fp8.probe` — the training probe :class:`FP8Probe` and :func:`with_dynamic` (the dynamic
  strategy's columns from any probe history);
* :mod:`~spanviz.fp8.demos` — the rank-knob demo :func:`random_bounds_vs_rank`, :func:`bounds_at_delta` (its
  rows at another δ), :func:`bound_scales` (the scale each bound gives, as notebook 03's table shows it) and
  :class:`BoundsVsRank` (the draw cached for the panel's sliders).

Every public name is importable from ``spanviz.fp8`` itself.
"""

from spanviz.fp8.casting import CAST_OVERFLOW, OVERFLOW_COUNTS, count_overflow, fake_quantize, utilisation
from spanviz.fp8.core import (
    EXACT_METHODS,
    FORMATS,
    FP8_MAX,
    alpha_agnostic,
    alpha_star,
    geometry_scale,
    logit_bounds,
    scale_from_bound,
    solve_gamma,
    spectral_norms_exact,
    worst_case_bound,
)
from spanviz.fp8.demos import (
    BOUND_KEYS, STRATEGY_LABELS, BoundsVsRank, bound_scales, bounds_at_delta, random_bounds_vs_rank,
)
from spanviz.fp8.folding import FoldedQK, fold_qk, layer_sigma, normalized_input
from spanviz.fp8.power import PowerIteration
from spanviz.fp8.probe import FP8Probe, with_dynamic
from spanviz.fp8.scaling import (
    ALPHA_CHOICES,
    AMAX_EPS,
    DELAYED_ALGOS,
    STRATEGIES,
    CalibratedAlpha,
    DelayedScaling,
    dynamic_scale,
    strategy_alpha,
)

__all__ = [
    "ALPHA_CHOICES", "AMAX_EPS", "BOUND_KEYS", "BoundsVsRank", "STRATEGY_LABELS", "CAST_OVERFLOW", "DELAYED_ALGOS",
    "EXACT_METHODS", "FORMATS", "FP8_MAX",
    "OVERFLOW_COUNTS", "STRATEGIES", "CalibratedAlpha", "DelayedScaling", "FP8Probe", "FoldedQK", "PowerIteration",
    "alpha_agnostic", "alpha_star", "bound_scales", "bounds_at_delta", "count_overflow", "dynamic_scale",
    "fake_quantize", "fold_qk",
    "geometry_scale", "layer_sigma", "logit_bounds", "normalized_input", "random_bounds_vs_rank",
    "scale_from_bound", "solve_gamma", "spectral_norms_exact", "strategy_alpha", "utilisation", "with_dynamic",
    "worst_case_bound",
]  # fmt: skip
