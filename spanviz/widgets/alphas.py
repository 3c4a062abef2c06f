"""Notebook 01's "what α does to training" view: the α-response sweep replayed from the results store (nothing trains).

The runs are those of ``spanviz sweep alphas`` (:mod:`spanviz.experiments.alphas`): the shipped bundle's, or the
student's own; without them the view says which command makes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets as W

from spanviz.experiments import alphas
from spanviz.plots.alphas import alpha_response_figure
from spanviz.store import ResultsStore
from spanviz.store.listing import sweep_records
from spanviz.train import RunRecord
from spanviz.widgets import captions
from spanviz.widgets.figure.view import FigureView

COMMAND = "spanviz sweep alphas --out results/alphas.json"
"""What makes the runs (about 30 minutes on 2 CPU cores; the shipped bundle has them)."""


def response_records(store: Any = None, size: str = "cpu") -> list[RunRecord]:
    """The α-response runs in a results store (default ``$SPANVIZ_HOME/runs``), one per (variant,
    seed): :func:`~spanviz.store.listing.sweep_records`."""
    return sweep_records(ResultsStore() if store is None else store, "alphas", size)


class AlphaResponse:
    """The change of best validation loss against standard as one order's α is removed or doubled, over seeds,
    beside each order's share of ‖dS‖²; a caption in plain words first, its statistics one click away.

    Args:
        records: the sweep's run records (default: :func:`response_records` of the default store).
        static: see :class:`FigureView`.
    Attributes:
        widget; views (``{"response"}``, empty without runs); summary
        (:func:`spanviz.experiments.alphas.summarize_alphas`).
    """

    def __init__(self, records: Sequence[RunRecord] | None = None, *, static: bool | None = None) -> None:
        records = response_records() if records is None else list(records)
        self.views: dict[str, FigureView] = {}
        self.summary = alphas.summarize_alphas(records) if records else {"rows": [], "shares": {}}
        if not self.summary["rows"]:
            self.widget = W.HTML(f"<p><b>The α-response runs are not in your results store.</b> Run the bundle cell "
                                 f"above (it ships them), or make them: <code>{COMMAND}</code> (about 30 minutes on 2 "
                                 f"CPU cores).</p>")
            return
        fig = alpha_response_figure(self.summary["rows"], self.summary["shares"])
        self.views["response"] = FigureView(fig, static=static, name="alpha-response")
        self.caption = W.HTML(captions.alpha_response_caption(self.summary["rows"], self.summary["shares"]))
        self.widget = W.VBox([self.caption, self.views["response"].widget])
