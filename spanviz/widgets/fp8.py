"""The FP8 panel: rank r, δ, margin over the bounds vs rank and the scale table; Train with an LR spike."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go

from spanviz.fp8.casting import utilisation
from spanviz.fp8.demos import BoundsVsRank
from spanviz.fp8.probe import FP8Probe, with_dynamic
from spanviz.fp8.scaling import dynamic_scale
from spanviz.fp8.strategies import PRACTICAL
from spanviz.model import GPTConfig
from spanviz.plots.fp8 import bound_vs_rank_data, bound_vs_rank_figure
from spanviz.plots.fp8_training import fp8_series, fp8_training_data, fp8_training_figure
from spanviz.runner import TrainerLike
from spanviz.train import TrainConfig
from spanviz.widgets import captions
from spanviz.widgets.defaults import DELTA_GRID, FACTOR_GRID, grid_slider
from spanviz.widgets.figure.view import FigureView, side_by_side, slider
from spanviz.widgets.fp8_caption import fp8_training_caption
from spanviz.widgets.panel import ANALYTIC_THREADS, Panel
from spanviz.widgets.specs import LOSS_VIEW, History, LiveView, RunSpec

STRATEGIES = ("delayed", "dynamic", "theory", "deterministic", "calibrated")
"""The per-tensor strategies the panel's probe records (beside the per-row / block / tile ones of PRACTICAL)."""


def _fp8_history(histories: Mapping[str, History]) -> History | None:
    return next((h for h in histories.values() if any(k.startswith("fp8/L") for k in h)), None)


class FP8Panel(Panel):
    """Rank-aware FP8 logit bounds (arXiv 2602.18851; bounds are spanviz's reconstruction), interactively.

    Analytic view (instant): for random weights of one head (d_model, d_head from ``model_cfg``) the worst
    case, rank-agnostic and rank-aware bounds (times 2^margin: the largest |S| the scale picked from each
    holds) and the observed max |S| versus the rank r of W^Q W^Kᵀ (:class:`spanviz.fp8.demos.BoundsVsRank`), the
    picked r ringed, with the √(r/d_head) reference and a caption on γ(r); a table of the E4M3 scale each strategy
    would use at r with the δ and margin sliders (dynamic scaling beside them). Train: a TinyGPT with rank-r
    queries, an LR spike (× factor at a step), live observed max logit vs bounds, where it broke them, scales and
    overflow counts per strategy (``FP8Probe``; the dynamic strategy's columns follow from its recorded amax:
    :func:`spanviz.fp8.with_dynamic`), and a caption with the counts.

    Args:
        model_cfg: base model (default 2 layers, 4 heads, d_model 128, T 64); qk_rank from the slider.
        train_cfg: base ``TrainConfig`` (default :func:`default_train_cfg`); the sliders set its
            ``lr_spike_start`` / ``lr_spike_factor`` / ``lr_spike_steps`` (factor 1 = no spike).
        data, store, trainer_factory, static, refresh_hz: see :class:`TrainingPanel`.
    """

    def __init__(
        self,
        model_cfg: GPTConfig | None = None,
        *,
        train_cfg: TrainConfig | None = None,
        data: Any = None,
        store: Any = "auto",
        trainer_factory: Callable[[RunSpec, Any], TrainerLike] | None = None,
        static: bool | None = None,
        refresh_hz: float = 4.0,
    ) -> None:
        super().__init__(model_cfg, train_cfg, static, store=store)
        cfg = self.model_cfg
        dh = cfg.d_head
        self.bounds = BoundsVsRank(cfg.d_model, dh, cfg.context_length, threads=ANALYTIC_THREADS)
        c = self.controls
        c["rank"] = slider(W.IntSlider, "rank r", dh, min=1, max=dh)
        c["delta"] = grid_slider("δ", DELTA_GRID, 1e-3, continuous=True)
        c["margin"] = slider(W.IntSlider, "margin (2^m headroom)", 0, min=0, max=4)
        steps = self.train_cfg().steps  # the spike starts within the run, on its slider's grid (10s in a long run)
        every = 10 if steps >= 100 else 1
        c["spike_step"] = slider(W.IntSlider, "LR spike at step", min(100, steps // 2) // every * every,
                                 continuous=False, min=0, max=max(steps - 1, 1), step=every)
        c["spike_factor"] = grid_slider("LR spike ×", FACTOR_GRID, 10.0)
        c["spike_steps"] = slider(W.IntSlider, "LR spike length", 5, continuous=False, min=1, max=50)
        self.scales = W.HTML()
        self.bounds_caption = W.HTML("", layout=W.Layout(width="100%"))
        self.bounds_caption.add_class("spanviz-caption-bounds")
        self.views["bounds"] = FigureView(self._bounds_figure(), static=self.static, name="bounds")
        self._update_scales()
        for name in ("rank", "delta", "margin"):
            c[name].observe(lambda _ch: self.update_bounds(), names="value")
        self._spike, self._max_step = self._planned_spike()
        self._probe_margin, self._probe_rank = float(c["margin"].value), int(c["rank"].value)
        self._n_keys = self.train_cfg().batch_size * cfg.n_head * cfg.context_length  # N = B·H·T of the probe batch
        self._attach_training([LiveView("fp8", self._fp8_data, self._fp8_build, caption=self._fp8_caption), LOSS_VIEW],
                              data=data, store=store, trainer_factory=trainer_factory, refresh_hz=refresh_hz)
        for name in ("spike_step", "spike_factor", "spike_steps"):
            c[name].observe(lambda _ch: self._mark_spike(), names="value")
        note = W.HTML(
            "<small>The LR spike sliders apply to the next <b>Train</b>; the gray band marks the spike. The jump "
            "of the max logit in the first few dozen steps, and the bump in the loss with it, is the heads starting "
            "to attend (their logits start near 0 and grow as the learning rate warms up), not the spike.</small>")
        self.widget = W.VBox([
            W.HBox([
                W.VBox([c["rank"], c["delta"], c["margin"]]),
                W.VBox([c["spike_step"], c["spike_factor"], c["spike_steps"]]),
            ]),
            side_by_side((self.views["bounds"].widget, "64%"), (self.scales, "36%")),
            self.bounds_caption,
            note,
            self.training.widget,
        ])

    def _settings(self) -> tuple[float, int, int]:
        """(δ, margin, r) from the sliders."""
        c = self.controls
        return float(c["delta"].value), int(c["margin"].value), int(c["rank"].value)

    def rows(self) -> list[dict[str, float]]:
        """Bounds vs rank for r = 1..d_head at the current δ: ``fp8.random_bounds_vs_rank`` rows
        (:meth:`spanviz.fp8.demos.BoundsVsRank.rows`: the random draw is made once, a new δ re-evaluates only the
        bounds)."""
        return self.bounds.rows(float(self.controls["delta"].value))

    def _bounds_figure(self) -> go.Figure:
        return bound_vs_rank_figure(
            **self.bounds.curves(*self._settings()),
            title="largest |S| each strategy's E4M3 scale holds", subtitle="bound × 2^margin, vs the rank r")

    def _update_scales(self) -> None:
        delta, margin, r = self._settings()
        row = self.bounds.row(delta, r)
        amax = row["observed_max"]
        dynamic = {"strategy": "dynamic", "bound": amax, "scale": dynamic_scale(amax, margin=margin)}
        dynamic["used"] = utilisation(amax, dynamic["scale"])  # the scale from the observed max |S| itself
        lines = [f"<tr><td>{s['strategy']}</td><td>{s['bound']:.3g}</td><td>{s['scale']:.3g}</td>"
                 f"<td>{s['used']:.1%}</td></tr>" for s in [*self.bounds.scales(delta, margin, r), dynamic]]
        self.scales.value = (
            f"<b>r = {r}</b>, γ = {row['gamma']:.3g} (for N = {self.bounds.n_tokens} keys), σ = {row['sigma']:.3g}, "
            f"observed max |S| = {row['observed_max']:.3g}<table><tr><th>strategy</th><th>bound</th><th>E4M3 scale</th>"
            f"<th>range used</th></tr>{''.join(lines)}</table>"
            "<small>dynamic: the scale from the observed max |S| itself (torchao's default) — never overflows, "
            "but every logit must be computed and reduced to its max before the cast; the bounds need only the "
            "weights.</small>"
        )
        curves = self.bounds.curves(delta, margin, r)
        sigma = [x["sigma"] for x in self.bounds.rows(delta)]
        self.bounds_caption.value = captions.bounds_caption(
            curves, sigma=sigma, d=self.bounds.d_model, d_head=self.bounds.d_head, delta=delta,
            n_keys=self.bounds.n_tokens)

    def update_bounds(self) -> None:
        """Redraw the bounds-vs-rank view and the scale table for the current r, δ, margin."""
        self.views["bounds"].update(bound_vs_rank_data(**self.bounds.curves(*self._settings())),
                                    build=self._bounds_figure)
        self._update_scales()

    def _plan(self, v: Mapping[str, Any]) -> list[RunSpec]:
        data = self.training.data()
        r = int(v["rank"])
        cfg = replace(self.model_cfg, vocab_size=data.vocab_size, qk_rank=None if r == self.model_cfg.d_head else r)
        probe = FP8Probe(every=1, delta=float(v["delta"]), margin=float(v["margin"]), strategies=STRATEGIES,
                             practical=PRACTICAL)
        return [RunSpec(f"rank {r}", cfg, self._spiked_train_cfg(v), (probe,))]

    def _planned(self, specs: list[RunSpec]) -> None:
        (spec,) = specs
        self._spike, self._max_step = self._planned_spike(spec.train_cfg)
        self._probe_margin = spec.probes[0].margin
        self._probe_rank = spec.model_cfg.qk_rank or spec.model_cfg.d_head
        self._n_keys = spec.train_cfg.batch_size * spec.model_cfg.n_head * spec.model_cfg.context_length

    def _spiked_train_cfg(self, v: Mapping[str, Any] | None = None) -> TrainConfig:
        v = self.values() if v is None else v
        train_cfg = self.train_cfg()
        factor = float(v["spike_factor"])
        start = min(int(v["spike_step"]), train_cfg.steps - 1)
        return replace(train_cfg, lr_spike_factor=factor, lr_spike_start=start,
                       lr_spike_steps=int(v["spike_steps"]) if factor != 1.0 else 0)

    def _planned_spike(self, train_cfg: TrainConfig | None = None) -> tuple[tuple[int, int, float] | None, int]:
        """((first step, steps, factor) of the LR spike or None, the run's last step) for ``train_cfg``
        (default: what the sliders would train)."""
        cfg = train_cfg or self._spiked_train_cfg()
        spike = (cfg.lr_spike_start, cfg.lr_spike_steps, cfg.lr_spike_factor) if cfg.lr_spike_steps else None
        return spike, cfg.steps

    def _mark_spike(self) -> None:
        """Move the spike mark to the sliders' setting (not while a run is going: it trains the old one)."""
        if self.training.runner.running:
            return
        self._spike, self._max_step = self._planned_spike()
        ready = {k: h for k, h in self.training.histories.items() if h.get("step")}
        self.views["train/fp8"].replace(self._fp8_build(ready))

    def _fp8_runs(self, histories: Mapping[str, History]) -> dict[str, Any] | None:
        """The FP8 figure's series of the run, the dynamic strategy included (derived from the recorded amax with
        the margin the run was probed with)."""
        h = _fp8_history(histories)
        return None if h is None else fp8_series(with_dynamic(h, margin=self._probe_margin))

    def _fp8_data(self, histories: Mapping[str, History]) -> list[dict[str, Any]]:
        s = self._fp8_runs(histories)
        return [] if s is None else fp8_training_data(**s)

    def _fp8_caption(self, histories: Mapping[str, History]) -> str:
        s = self._fp8_runs(histories)
        if s is None:
            return ""
        h = _fp8_history(histories)
        gamma = next((g for g in h.get("fp8/L0/gamma", []) if g is not None), None)
        return fp8_training_caption(s, gamma=gamma, r=self._probe_rank, n_keys=self._n_keys, spike=self._spike)

    def _fp8_build(self, histories: Mapping[str, History]) -> go.Figure:
        s = self._fp8_runs(histories)
        if s is None:
            empty = np.zeros(0)
            s = {"steps": empty, "observed": empty, "bounds": {}, "overflows": {}}
        return fp8_training_figure(**s, spike=self._spike, max_step=self._max_step)
