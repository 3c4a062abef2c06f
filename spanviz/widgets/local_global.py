"""The local/global panel: n_local, window p, context T, learning rate over the per-head masks; Train MHSA vs LS."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go

from spanviz.local_global import LogitProbe
from spanviz.local_global.demos import head_labels, head_masks
from spanviz.model import GPTConfig
from spanviz.plots.local_global import head_masks_data, head_masks_figure, max_logit_data, max_logit_figure
from spanviz.runner import TrainerLike
from spanviz.train import TrainConfig
from spanviz.widgets import captions
from spanviz.widgets.defaults import LR_GRID, grid_slider
from spanviz.widgets.figure.view import FigureView, computing, slider
from spanviz.widgets.panel import ANALYTIC_THREADS, Panel
from spanviz.widgets.specs import LOSS_DELTA_VIEW, History, LiveView, RunSpec


def _logit_runs(histories: Mapping[str, History]) -> dict[str, History]:
    return {k: h for k, h in histories.items() if "logits/max_per_layer" in h}


MAX_LOGIT_VIEW = LiveView("max_logit", lambda hs: max_logit_data(_logit_runs(hs)),
                          lambda hs: max_logit_figure(_logit_runs(hs)),
                          caption=lambda hs: captions.max_logit_caption(_logit_runs(hs)))

MASK_ZOOM = 24
"""The masks' zoom row shows the first MASK_ZOOM positions cell by cell (a window of a few keys is readable)."""


class LocalGlobalPanel(Panel):
    """LS-attention (arXiv 2505.15548): local sliding-window heads + global heads, interactively.

    Analytic view (instant): the per-head masks for n_local, window p and context T (the first n_local heads
    are local: allowed(i, j) ⇔ 0 <= i − j < p; the rest causal). Train: MHSA (all heads global) vs LS at
    context T and learning rate lr, same seed; live loss and max logit per layer (``LogitProbe``).

    Args:
        model_cfg: base model (default 2 layers, 4 heads, d_model 128); context_length, n_local, window are
            taken from the sliders.
        train_cfg: base ``TrainConfig`` (default :func:`default_train_cfg`); lr from the slider (its default: this
            config's lr, among the values of :data:`~spanviz.widgets.defaults.LR_GRID`).
        probe_every: LogitProbe period in steps.
        data, store, trainer_factory, static, refresh_hz: see :class:`TrainingPanel`.
    """

    def __init__(
        self,
        model_cfg: GPTConfig | None = None,
        *,
        train_cfg: TrainConfig | None = None,
        probe_every: int = 10,
        data: Any = None,
        store: Any = "auto",
        trainer_factory: Callable[[RunSpec, Any], TrainerLike] | None = None,
        static: bool | None = None,
        refresh_hz: float = 4.0,
    ) -> None:
        super().__init__(model_cfg, train_cfg, static, default_model=GPTConfig(
            vocab_size=8192, context_length=128, n_layer=2, n_head=4, d_model=128), store=store,
            probe_every=probe_every)
        self.probe_every = probe_every
        H = self.model_cfg.n_head
        c = self.controls
        c["n_local"] = slider(W.IntSlider, "n_local (local heads)", max(H - 1, 0), min=0, max=H)
        c["window"] = slider(W.IntSlider, "window p", 16, min=1, max=128)
        T = min(self.model_cfg.context_length, 64)  # steps of 16 (of gcd(16, T): the default on the grid)
        c["context"] = slider(W.IntSlider, "context T", T, continuous=False, min=min(16, T), max=512,
                              step=math.gcd(16, T))  # large T: H·T² mask cells, redraw on release
        c["lr"] = grid_slider("learning rate", LR_GRID, self.train_cfg().lr)  # the default replays stored runs
        self.views["masks"] = FigureView(self._masks_figure(), static=self.static, name="masks")
        for name in ("n_local", "window"):
            c[name].observe(lambda _ch: self.update_masks(), names="value")
        self.busy = W.HTML("")
        c["context"].observe(lambda _ch: self.update_context(), names="value")
        self._attach_training([MAX_LOGIT_VIEW, LOSS_DELTA_VIEW], data=data, store=store,
                              trainer_factory=trainer_factory, refresh_hz=refresh_hz, keep_weights=True)
        note = W.HTML("<small>n_local, window p and context T redraw the masks now; context T, the split and the "
                      "learning rate apply to the next <b>Train</b>.</small>")
        self.widget = W.VBox([
            W.HBox([W.VBox([c["n_local"], c["window"]]), W.VBox([c["context"], c["lr"], self.busy])]),
            note,
            self.views["masks"].widget,
            self.training.widget,
        ])

    def masks(self) -> np.ndarray:
        """Current per-head masks, bool (H, T, T)."""
        c = self.controls
        return head_masks(self.model_cfg.n_head, int(c["n_local"].value), int(c["window"].value),
                          int(c["context"].value), threads=ANALYTIC_THREADS)

    def _labels(self) -> list[str]:
        return head_labels(self.model_cfg.n_head, int(self.controls["n_local"].value),
                           int(self.controls["window"].value))

    def _masks_title(self) -> str:
        return f"attention masks per head at T = {int(self.controls['context'].value)} (rows: query i, columns: key j)"

    def _masks_figure(self) -> go.Figure:
        return head_masks_figure(self.masks(), labels=self._labels(), zoom=MASK_ZOOM, title=self._masks_title())

    def update_context(self) -> None:
        """Redraw the masks at a new context T (other sizes and titles: a new figure in the same widget)."""
        with computing(self.busy, "the masks"):
            self.views["masks"].replace(self._masks_figure())

    def update_masks(self) -> None:
        """Redraw the masks for n_local and window p (the heads' subplot titles follow); a new context T
        rebuilds the figure instead (other sizes, other titles)."""
        view, labels = self.views["masks"], self._labels()
        annotations = list(view.layout["annotations"])
        annotations[: len(labels)] = [{**a, "text": label} for a, label in zip(annotations, labels)]
        view.update(head_masks_data(self.masks(), zoom=MASK_ZOOM), build=self._masks_figure,
                    layout={"annotations": annotations})

    def _plan(self, v: Mapping[str, Any]) -> list[RunSpec]:
        data = self.training.data()
        T = int(v["context"])
        base = replace(self.model_cfg, vocab_size=data.vocab_size, context_length=T, n_local=0, window=None)
        train_cfg = replace(self.train_cfg(), lr=float(v["lr"]))
        ls = replace(base, n_local=int(v["n_local"]), window=int(v["window"]))
        probe = LogitProbe(every=self.probe_every, entropy=False)
        label_ls = f"LS ({ls.n_local} local, p={ls.window})"
        return [RunSpec("MHSA", base, train_cfg, (probe,)), RunSpec(label_ls, ls, train_cfg, (probe,))]
