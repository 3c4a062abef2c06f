"""Span / violation gradient scaling: split ∂L/∂S into blocks by projections onto the spans of Q, K, V.

Source: Kim, Yun, Yoon, "Scaling Bidirectional Spans and Span Violations in Attention Mechanism",
arXiv 2512.13033 (2025). **Its abstract** states: an asymmetric projection splits the backward-pass gradients
into parallel spans and orthogonal violations; the forward pass is unchanged; scaling mainly the 0th-order
bidirectional parallel spans helps (0.56 % lower validation loss on WikiText-2). **Published secondary
summaries of the paper** (not checked against its body) add: the score gradient is split into 8 blocks
S1..S8 by how many orthogonal ("violation") projections each involves — orders 0..3 with 1, 3, 3, 1 blocks —
using projection operators built from K and V with d×d Gram inverses; each order gets a scale α0..α3,
written as a bracket [α0 α1 α2 α3] ([1111] = standard gradient, [1000] = keep only the 0th-order
"bidirectional parallel span"); V's gradient passes through unmodified; a cheaper 4-component variant
exists. **The exact placement of the projections is spanviz's reconstruction**, defined precisely in
:mod:`spanviz.spans.core` and docs/spans.md; users can switch it (presets, or their own slot lists).

The package, one file per job; the names a user needs are re-exported here (``from spanviz.spans import
SpanConfig``), everything else is imported from its module:

* :mod:`~spanviz.spans.core` — the technique, read top to bottom: the projector Π_X, the blocks
  (:func:`decompose`), α scaling of the score gradient by its definition, then the grouped sum, the qk4 closed
  form;
* :mod:`~spanviz.spans.fused` — the fused backward the model trains with: fused attention forward, the α-scaled dQ, dK
  from rows recomputed in chunks in the backward (``span_attention``), and ``build_grad_fns``, the backward
  transforms the model installs;
* :mod:`~spanviz.spans.config` — :class:`SpanConfig`, the presets and slots, the paper's α brackets
  ("[1000]"), the block names S1..S2ⁿ (:func:`block_table`);
* :mod:`~spanviz.spans.probe` — measurements: span geometry (principal angles, Gram conditioning, the ridge's
  bias), captured score gradients and their blocks per layer and head, dQ/dK alignment, the training probe
  :class:`SpanProbe`;
* :mod:`~spanviz.spans.demos` — the T = 3 toy of the notebook's panel: a span plane in token space R³ and a
  gradient split into its span and violation parts.
"""

from spanviz.spans.config import SpanConfig, block_table
from spanviz.spans.core import decompose, scale_score_grad
from spanviz.spans.probe import (
    SpanProbe,
    capture_score_grads,
    grad_alignment,
    gram_condition,
    principal_angle_cosines,
    ridge_bias,
    score_grad_blocks,
)

__all__ = [
    "SpanConfig", "SpanProbe", "block_table", "capture_score_grads", "decompose", "grad_alignment",
    "gram_condition", "principal_angle_cosines", "ridge_bias", "scale_score_grad", "score_grad_blocks",
]
