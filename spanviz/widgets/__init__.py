"""Notebook panels: ipywidgets controls + plotly figures, live training in a background thread.

Panels (each a class with ``.widget`` to display, ``.controls`` and ``.views`` dicts, and ``train()``):

* :class:`SpansPanel` — α0..α3, preset, layer/head: the score-gradient blocks of one head on a fixed batch,
  the T = 3 toy, principal angles; Train compares the α setting against the standard gradient and its seed
  noise.
* :class:`LocalGlobalPanel` — n_local, window p, context T, learning rate: per-head masks; Train compares
  MHSA with LS-attention (max logit per layer and loss, live).
* :class:`FP8Panel` — rank r, δ, margin: bounds vs rank (analytic); Train with an LR spike shows observed max
  logit, bounds, scales and overflow counts per strategy, live.
* :class:`GrowthLab` — notebook 02's learning-rate sweep (MHSA and five fixes of logit growth), replayed from the
  results store: peak max logit and final loss against the learning rate; nothing trains.
* :class:`AlphaResponse` — notebook 01's α response: best validation loss change against each α_o (removed or
  doubled), replayed from the results store, beside each order's share of ‖dS‖²; nothing trains.
* :class:`AttentionInspector` — notebook 00's look inside a model: every head's logits S or pattern P of a layer
  for a window of text, the tokens on the axes; the replayed model, the one training here, or an untrained one.
* :class:`TrainingPanel` — the generic part: Train / Continue / Stop, progress per run, status / error area,
  live loss curves with seed bands, results-store replays. The technique panels embed one.

Layout of the package: controls and layout only. :mod:`.figure` (the figure front end: :class:`FigureView`, static
mode, layout helpers, the figure widget itself), :mod:`.training` (:class:`TrainingPanel`), :mod:`.specs`
(:class:`RunSpec`, live views, default data / store / settings), :mod:`.panel` (the base class :class:`Panel` of
the three technique panels), one file per technique panel. What a panel computes comes
from the technique packages (:func:`spanviz.spans.capture_score_grads`, :func:`spanviz.local_global.demos.head_masks`,
:class:`spanviz.fp8.demos.BoundsVsRank`) and what it draws from :mod:`spanviz.plots`.

Rendering: a :class:`FigureView` holds a :class:`spanviz.widgets.figure.widget.PlotlyFigure` (JupyterLab, Notebook
7; the figure's whole state is synced, see that module for why not ``go.FigureWidget``) or, where custom widgets
render unreliably (Colab, VS Code), a static ``go.Figure`` re-rendered into an ``Output``
(:func:`.figure.view.use_static`; override with ``static=`` or ``SPANVIZ_STATIC=1`` / ``0``). Updates push only
trace data (``plots.*_data``); a new trace structure shows a newly built figure in the same widget.

Training: :class:`spanviz.runner.Runner` — a daemon thread, refreshes at most ``refresh_hz`` (4 Hz) so the
kernel stays responsive; Stop ends a run after the current optimizer step; errors are shown in the panel.
``train(blocking=True)`` or ``SPANVIZ_BLOCKING=1`` runs in the caller's thread (scripts, CI).
"""

from spanviz.widgets.figure.view import start_plotly_js

start_plotly_js()  # in a notebook: plotly.js travels to the page while the modules below import (torch, scipy)

from spanviz.widgets import captions  # noqa: E402
from spanviz.widgets.alphas import AlphaResponse  # noqa: E402
from spanviz.widgets.attention import AttentionInspector  # noqa: E402
from spanviz.widgets.figure.view import FigureView  # noqa: E402
from spanviz.widgets.fp8 import FP8Panel  # noqa: E402
from spanviz.widgets.growth import GrowthLab  # noqa: E402
from spanviz.widgets.local_global import LocalGlobalPanel  # noqa: E402
from spanviz.widgets.panel import Panel  # noqa: E402
from spanviz.widgets.spans import SpansPanel  # noqa: E402
from spanviz.widgets.specs import RunSpec, notebook_train_config  # noqa: E402
from spanviz.widgets.training import TrainingPanel  # noqa: E402

__all__ = [
    "AlphaResponse", "AttentionInspector", "FP8Panel", "FigureView", "GrowthLab", "LocalGlobalPanel", "Panel",
    "RunSpec", "SpansPanel", "TrainingPanel", "captions", "notebook_train_config",
]  # fmt: skip
