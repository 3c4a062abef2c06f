"""What the notebook panels show, computed from the techniques: the analytic views, no widgets and no figures.

* :mod:`.spans` — :class:`~spanviz.views.spans.ScoreGradientViews`: the blocks of dS per preset, layer and head,
  and the principal angles between the spans of Q, K and V, from one batch of a random-init TinyGPT (cached);
* :mod:`.local_global` — :func:`~spanviz.views.local_global.head_masks` and the heads' labels;
* :mod:`.fp8` — :class:`~spanviz.views.fp8.BoundsVsRank`: bounds and observed max |S| versus the rank r, and the
  E4M3 scale each strategy picks (``fp8.geometry_scale``, ``fp8.utilisation``).

:mod:`spanviz.widgets` calls these and hands the results to :mod:`spanviz.plots`.
"""

from spanviz.views.fp8 import BOUND_NAMES, BoundsVsRank, scale_table
from spanviz.views.local_global import head_labels, head_masks
from spanviz.views.spans import ANGLE_PAIRS, ScoreGradientViews

__all__ = ["ANGLE_PAIRS", "BOUND_NAMES", "BoundsVsRank", "ScoreGradientViews", "head_labels", "head_masks",
           "scale_table"]
