"""Figures: pure functions, data in, :class:`plotly.graph_objects.Figure` out. No widgets, no training, no torch:
this package imports only numpy and plotly.

One file per technique: :mod:`.curves` (loss curves with seed bands, relative change against a baseline),
:mod:`.spans` (its score-gradient blocks in :mod:`.span_blocks`), :mod:`.local_global`, :mod:`.fp8`;
:mod:`.common` holds the history contracts and helpers. Each has the figures and the functions that turn run
histories into their series (``*_series``). This face exports the figures (``*_figure``) and what the notebooks
name; every other function is imported from its file, e.g.
``from spanviz.plots.span_blocks import span_blocks_data``.

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

from spanviz.plots.curves import loss_curves_figure, relative_change_figure, seed_peaks, seed_peaks_data
from spanviz.plots.fp8 import bound_vs_rank_figure
from spanviz.plots.fp8_training import fp8_training_figure
from spanviz.plots.local_global import (
    attention_heads_data,
    attention_heads_figure,
    head_masks_figure,
    logit_gap_figure,
    max_logit_figure,
    toy_band_figure,
)
from spanviz.plots.span_blocks import span_blocks_figure
from spanviz.plots.spans import energy_by_order_figure, span_toy_figure, subspace_angles_figure

__all__ = [
    "attention_heads_data", "attention_heads_figure", "bound_vs_rank_figure", "energy_by_order_figure",
    "fp8_training_figure", "head_masks_figure", "logit_gap_figure", "loss_curves_figure", "max_logit_figure",
    "relative_change_figure", "seed_peaks", "seed_peaks_data", "span_blocks_figure", "span_toy_figure",
    "subspace_angles_figure", "toy_band_figure",
]
