"""Figures: pure functions, data in, :class:`plotly.graph_objects.Figure` out. No widgets, no training, no torch:
this package imports only numpy and plotly.

One file per technique: :mod:`.curves` (loss curves with seed bands, relative change against a baseline),
:mod:`.spans`, :mod:`.local_global`, :mod:`.fp8`; :mod:`.common` holds the history contracts and helpers. Each
has the figures and the functions that turn run histories into their series (``*_series``).

Every figure comes in two parts so the same code serves static figures and live widgets:

* ``<name>_data(...) -> list[dict]`` returns the traces as plain property dicts (``"type"`` plus data such as
  ``x``, ``y``, ``z``, ``name``), in the order the figure holds them;
* ``<name>_figure(...) -> go.Figure`` lays those traces out (subplots, axes, titles).

A live view shows the figure once and afterwards pushes only the ``_data`` dicts (see
:class:`spanviz.widgets.FigureView`). When the number or types of traces change (another preset, more heads)
the view shows a newly built figure instead.

Input contracts (numpy arrays or anything ``np.asarray`` accepts; torch tensors are converted):

* a **history** is a mapping of equal-length lists keyed by metric (``step``, ``train_loss``, ``val_loss``,
  probe keys ...); ``None`` marks "not measured at this step" (as in ``spanviz.train.RunRecord.history``);
* **runs** for seed bands: ``{variant: [history_seed0, history_seed1, ...]}``;
* a score-gradient **block**: a mapping with ``name`` (str), ``order`` (int, number of ⊥ factors) and
  ``block`` (array (T, T)); see :func:`span_blocks_figure`.
"""

from spanviz.plots.common import COLORS, DASHES, ORDER_COLORS, History, Trace, keys_under, layer_series, series
from spanviz.plots.curves import (
    SYMBOLS, loss_curves_data, loss_curves_figure, relative_change_data, relative_change_figure,
    relative_change_series, seed_band, seed_peaks, seed_peaks_data, variant_widths,
)
from spanviz.plots.fp8 import (
    E4M3_MAX, FP8_ROWS, STRATEGY_COLORS, bound_color, bound_vs_rank_data, bound_vs_rank_figure, coinciding,
    fp8_panel_data, fp8_panel_figure, fp8_series,
)
from spanviz.plots.local_global import (
    attention_heads_data, attention_heads_figure, head_masks_data, head_masks_figure, max_logit_data, max_logit_figure,
)
from spanviz.plots.spans import (
    DIM_OPACITY, SPAN_BLOCK_CELLS, energy_by_order_data, energy_by_order_figure, energy_series, span_block_cells,
    span_block_shown, span_block_title, span_blocks_data, span_blocks_figure, span_blocks_traces, span_toy,
    span_toy_data, span_toy_figure, subspace_angles_data, subspace_angles_figure,
)

__all__ = [
    "COLORS", "DASHES", "DIM_OPACITY", "E4M3_MAX", "FP8_ROWS", "History", "ORDER_COLORS", "SPAN_BLOCK_CELLS",
    "STRATEGY_COLORS", "SYMBOLS", "Trace", "attention_heads_data", "attention_heads_figure", "bound_color",
    "bound_vs_rank_data", "bound_vs_rank_figure", "coinciding", "energy_by_order_data", "energy_by_order_figure",
    "energy_series", "fp8_panel_data", "fp8_panel_figure", "fp8_series", "head_masks_data", "head_masks_figure",
    "keys_under", "layer_series", "loss_curves_data", "loss_curves_figure", "max_logit_data", "max_logit_figure",
    "relative_change_data", "relative_change_figure", "relative_change_series", "seed_band", "seed_peaks",
    "seed_peaks_data", "series", "span_block_cells", "span_block_shown", "span_block_title", "span_blocks_data",
    "span_blocks_figure", "span_blocks_traces", "span_toy", "span_toy_data", "span_toy_figure",
    "subspace_angles_data", "subspace_angles_figure", "variant_widths",
]
