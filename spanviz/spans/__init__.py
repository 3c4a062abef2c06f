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

The package, one file per job (every name is re-exported here: ``from spanviz.spans import SpanConfig``):

* :mod:`~spanviz.spans.core` — the technique, read top to bottom: the projector Π_X, the blocks, α scaling of
  the score gradient in the backward pass, the qk4 closed form;
* :mod:`~spanviz.spans.fused` — the fast path of the same transform: fused attention forward, the α-scaled dQ, dK
  from rows recomputed in chunks in the backward (:func:`span_attention`);
* :mod:`~spanviz.spans.hooks` — :func:`build_grad_fns`, the backward transforms the model installs;
* :mod:`~spanviz.spans.config` — :class:`SpanConfig`, the presets and slots, the paper's α brackets
  ("[1000]"), the block names S1..S2ⁿ.
* :mod:`~spanviz.spans.diagnostics` — tensors to look at: every block (:func:`decompose`), energy share per
  order, principal angles between spans, Gram conditioning, the ridge's bias.
* :mod:`~spanviz.spans.probes` — measurements on a model: captured score gradients, blocks per layer and
  head, dQ/dK alignment, and the training probe :class:`SpanProbe`.
"""

from spanviz.spans.config import (
    BASES,
    CUSTOM,
    DEFAULT_RIDGE,
    MAX_SLOTS,
    PRESET_SLOTS,
    PRESETS,
    SIDES,
    Slot,
    SpanConfig,
    block_bits,
    block_formulas,
    block_names,
    block_orders,
    block_table,
    parse_alphas,
)
from spanviz.spans.core import (
    METHODS,
    QK_SIDES,
    SpanProjector,
    _order_scaled as _order_scaled,  # private names re-exported for tests/test_spans.py
    _qk_transform as _qk_transform,
    _slot_ops as _slot_ops,
    scale_qk_grad,
    scale_score_grad,
)
from spanviz.spans.fused import span_attention
from spanviz.spans.hooks import QKGradFn, ScoreGradFn, ScoreTransform, build_grad_fns
from spanviz.spans.diagnostics import decompose, gram_condition, order_energy_share, principal_angle_cosines, ridge_bias
from spanviz.spans.probes import (
    LayerBlocks,
    ScoreGradCapture,
    SpanProbe,
    capture_score_grads,
    grad_alignment,
    score_grad_blocks,
)

__all__ = [
    "BASES", "CUSTOM", "DEFAULT_RIDGE", "MAX_SLOTS", "METHODS", "PRESETS", "PRESET_SLOTS", "QKGradFn", "QK_SIDES",
    "SIDES", "LayerBlocks", "ScoreGradCapture", "ScoreGradFn", "ScoreTransform", "Slot", "SpanConfig", "SpanProbe", "SpanProjector",
    "block_bits", "block_formulas", "block_names", "block_orders", "block_table", "build_grad_fns",
    "capture_score_grads", "decompose", "grad_alignment", "gram_condition", "order_energy_share", "parse_alphas",
    "principal_angle_cosines", "ridge_bias", "scale_qk_grad", "scale_score_grad", "score_grad_blocks", "span_attention",
]
