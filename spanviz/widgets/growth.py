"""The logit-growth lab of notebook 02: the learning-rate sweep replayed from the results store, one LR selector.

Nothing trains here: the lab shows the runs of ``spanviz sweep growth`` (:mod:`spanviz.experiments.growth`) that
the results store holds — the shipped bundle's, or the student's own — and says which command makes them when
there are none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import ipywidgets as W

from spanviz.experiments import growth
from spanviz.plots.curves import loss_curves_figure, seed_peaks, seed_peaks_data
from spanviz.plots.growth import growth_curves_data, growth_curves_figure, lr_sweep_figure, selected_lr_shapes
from spanviz.store import ResultsStore
from spanviz.store.listing import sweep_records
from spanviz.train import RunRecord
from spanviz.widgets import captions
from spanviz.widgets.figure.view import FigureView

COMMAND = "spanviz sweep growth --out results/growth.json"
"""What makes the lab's runs (about 90 min on 2 CPU cores; the shipped bundle has them)."""


def lab_records(store: Any = None, size: str = "cpu") -> list[RunRecord]:
    """The lab's runs in a results store (default ``$SPANVIZ_HOME/runs``), one per (variant,
    seed): :func:`~spanviz.store.listing.sweep_records`."""
    return sweep_records(ResultsStore() if store is None else store, "growth", size)


class GrowthLab:
    """Peak max logit and final loss against the learning rate for MHSA and five fixes, with seed bands; the
    max-logit curves at the selected learning rate below.

    Args:
        records: the lab's run records (default: :func:`lab_records` of the default store). static: see
            :class:`FigureView`. lr: the learning rate selected first (default: the largest at which every
            variant finished all its seeds, else the largest).
    Attributes:
        widget, controls (``{"lr": SelectionSlider}``), views (``{"sweep", "curves"}``; empty without runs),
        runs (:func:`spanviz.experiments.growth.run_summary` of each record), summary
        (:func:`spanviz.experiments.growth.summarize_growth`).
    """

    def __init__(self, records: Sequence[RunRecord] | None = None, *, static: bool | None = None,
                 lr: float | None = None) -> None:
        records = lab_records() if records is None else list(records)
        self.runs = [growth.run_summary(r) for r in records]
        self.summary = growth.summarize_growth(records) if records else {"rows": [], "verdict": ""}
        self.controls: dict[str, W.Widget] = {}
        self.views: dict[str, FigureView] = {}
        if not self.runs:
            self.widget = W.HTML(f"<p><b>The logit-growth lab's runs are not in your results store.</b> Run the "
                                 f"bundle cell above (it ships them), or make them: <code>{COMMAND}</code> "
                                 f"(about 90 minutes on 2 CPU cores).</p>")
            return
        lrs = sorted({r["lr"] for r in self.runs})
        lr = self.default_lr(lrs) if lr is None else min(lrs, key=lambda x: abs(x - lr))
        self.controls["lr"] = W.SelectionSlider(options=[(f"{x:g}", x) for x in lrs], value=lr,
                                                description="lab learning rate", style={"description_width": "initial"},
                                                continuous_update=True, layout=W.Layout(width="420px"))
        self.views["sweep"] = FigureView(lr_sweep_figure(self.runs, labels=growth.LABELS, selected_lr=lr),
                                         static=static, name="growth-sweep")
        self.views["curves"] = FigureView(growth_curves_figure(self.runs, lr, labels=growth.LABELS), static=static,
                                          name="growth-curves")
        self.caption = W.HTML(captions.growth_caption(self.summary["rows"], growth.LABELS))
        self.controls["lr"].observe(lambda change: self.select(change["new"]), names="value")
        self.widget = W.VBox([self.caption, self.views["sweep"].widget, self.controls["lr"],
                              self.views["curves"].widget])

    def default_lr(self, lrs: Sequence[float]) -> float:
        """The largest learning rate at which no run diverged (the widest spread that still has every curve)."""
        fine = [lr for lr in lrs if all(r["status"] == "finished" for r in self.runs if r["lr"] == lr)]
        return max(fine or lrs)

    def follow(self, slider: W.Widget) -> None:
        """Let another learning-rate control (e.g. the local/global panel's) pick the lab's nearest learning rate (in
        log scale) whenever it moves (not now: the lab opens on its own choice). Without runs nothing happens."""
        if "lr" not in self.controls:
            return
        options = [value for _, value in self.controls["lr"].options]

        def pick(value: float) -> None:
            self.controls["lr"].value = min(options, key=lambda x: abs(math.log(x / value)))

        slider.observe(lambda change: pick(change["new"]), names="value")

    def select(self, lr: float) -> None:
        """Mark ``lr`` on the sweep figure and draw the max-logit curves of its runs below."""
        self.views["sweep"].update(self.views["sweep"].data, layout={"shapes": selected_lr_shapes(lr)})
        fig = growth_curves_figure(self.runs, lr, labels=growth.LABELS)
        self.views["curves"].update(growth_curves_data(self.runs, lr, growth.LABELS), build=lambda: fig,
                                    layout={"title": fig.layout.title.to_plotly_json()})


GPU_NAMES = {"mhsa": "MHSA", "ls": "LS ({n_local} local, p={window})", "qk_norm": "QK-norm"}
"""The panel's names of the ``ls/gpu`` sweep's variants (so their colors match: MHSA first, LS second)."""


def ls_gpu_view(store: Any = None) -> W.Widget:
    """Notebook 02's GPU figure: the max logit of the ``ls/gpu`` sweep's runs (T 2048, an H100; MHSA, LS, QK-norm)
    over training, mean ± std over seeds with each seed's peak as a star, and the peaks in a caption above; or a line
    saying that the results store has no such runs. ``store``: a ``ResultsStore`` (default: the default one)."""
    sweep = (ResultsStore() if store is None else store).sweep("ls", "gpu")
    if not sweep:
        return W.HTML("No GPU runs in the results store: run the bundle cell near the top first.")
    runs = {GPU_NAMES[v].format(**sweep[v][0].config["model"]): [r.history for r in sweep[v]]
            for v in GPU_NAMES if v in sweep}
    fig = loss_curves_figure(runs, "logits/max", title="max logit at T 2048 on an H100 (mean ± std over seeds; "
                                   "stars: each seed's peak)")
    fig.add_traces(seed_peaks_data(runs, "logits/max"))
    fig.update_layout(yaxis_title="max |q·k|/√d_head")
    caption = captions.seed_peaks_caption(seed_peaks(runs, "logits/max"), what="peak max logit")
    return W.VBox([W.HTML(caption), FigureView(fig, name="gpu-max-logit").widget])
