"""The spans panel: α0..α3, preset, layer/head over the score-gradient blocks; Train against standard.

Its analytic view, :class:`ScoreGradientViews`: a random-init :class:`~spanviz.model.TinyGPT` runs one
forward/backward pass on a fixed batch (:func:`spanviz.spans.capture_score_grads`); per layer that gives dS
(B, H, T, T) and q, k, v (B, H, T, d_head). The panel then shows, for batch element 0 and the picked head, the
blocks of dS for a preset (:func:`spanviz.spans.decompose`) and the principal angles between the token-space spans
of Q, K and V (:func:`spanviz.spans.principal_angle_cosines`). Each is computed once — blocks per (preset, layer),
angles per layer, for all heads at once — and cached, so moving the head picker or an α slider does no tensor work.
It builds a model, so it lives here, above the model, not in :mod:`spanviz.spans`.

Source: arXiv 2512.13033 (span / violation scaling); the block construction is spanviz's (docs/spans.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from itertools import product
from typing import Any

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go
import torch

from spanviz.contexts import torch_threads
from spanviz.model import GPTConfig, TinyGPT
from spanviz.plots.curves import relative_change_data, relative_change_figure, relative_change_series
from spanviz.plots.span_blocks import span_block_cells, span_blocks_figure, span_blocks_layout, span_blocks_traces
from spanviz.plots.spans import (
    energy_by_order_data,
    energy_by_order_figure,
    energy_series,
    span_toy_data,
    span_toy_figure,
    subspace_angles_data,
    subspace_angles_figure,
)
from spanviz.runner import TrainerLike
from spanviz.spans import SpanConfig, SpanProbe, capture_score_grads, decompose, principal_angle_cosines
from spanviz.spans.config import PRESETS, block_names, block_orders
from spanviz.spans.demos import span_toy
from spanviz.train import TrainConfig
from spanviz.widgets import captions
from spanviz.widgets.figure.block_scaler import BlockScaler
from spanviz.widgets.figure.view import FigureView, computing, side_by_side, slider
from spanviz.widgets.figure.widget import figure_state
from spanviz.widgets.panel import ANALYTIC_THREADS, Panel, analytic_threads
from spanviz.widgets.specs import LOSS_VIEW, History, LiveView, RunSpec

ANGLE_PAIRS = ("Q–K", "Q–V", "K–V")
"""The pairs of spans whose principal angles are shown, in this order."""


PREFETCH_MAX_STATES = 16
"""At most this many picks' blocks states are sent to a page ahead of its picks (:meth:`SpansPanel.prefetch`;
~130 KB each: the heatmaps are at most 64 × 64 cells), those nearest the first pick first."""
PREFETCH_MAX_T = 256
"""Above this context length no prefetch: its decompositions grow with T (for the notebook-01 model's 11 states
70 ms of kernel time at T 64, 89 at T 128, 167 at T 256, measured on a 2-core CPU), and the kernel would keep a
student's first inputs waiting; the picks are then computed when made."""


def pick_key(key: tuple[str, int, int]) -> str:
    """A (preset, layer, head) as the page names it: the dropdowns' labels joined by "|" (block_scaler.js)."""
    return "|".join(str(k) for k in key)


class ScoreGradientViews:
    """dS, q, k, v of one batch through a random-init model, and the blocks and angles drawn from them.

    Args:
        model_cfg: the model (its span transforms are switched off and dropout set to 0 for the pass).
        batch: (x, y) token ids (B, T); default B = 2 random windows of T = ``context_length`` from ``seed``.
        seed: torch seed of the model's initialisation (and of the default batch).
        threads: torch intra-op threads for the tensor work (None: leave torch's setting).

    Attributes:
        model, batch, captures: the model, the batch and ``capture_score_grads(model, batch)`` (per layer).
    Raises:
        What ``capture_score_grads`` raises (a bad batch).
    """

    def __init__(self, model_cfg: GPTConfig, batch: tuple[torch.Tensor, torch.Tensor] | None = None, seed: int = 0,
                 threads: int | None = None) -> None:
        self.threads = threads
        torch.manual_seed(seed)
        self.model = TinyGPT(replace(model_cfg, spans=None, dropout=0.0))
        if batch is None:
            gen = torch.Generator().manual_seed(seed)
            ids = torch.randint(model_cfg.vocab_size, (2, model_cfg.context_length + 1), generator=gen)  # (2, T + 1)
            batch = (ids[:, :-1], ids[:, 1:])  # (2, T) each
        self.batch = batch
        with torch_threads(threads):
            self.captures = capture_score_grads(self.model, batch)  # per layer: dS, q, k, v (B, H, T, ·)
        self._blocks: dict[tuple[str, int], np.ndarray] = {}
        self._angles: dict[int, dict[str, np.ndarray]] = {}

    def layer_blocks(self, preset: str, layer: int) -> np.ndarray:
        """Blocks (n_blocks, H, T, T) of dS for batch element 0 at one layer (they sum to dS); cached."""
        key = (preset, layer)
        if key not in self._blocks:
            cap = self.captures[layer]
            first = [t[0].float() for t in (cap.dS, cap.q, cap.k, cap.v)]  # (H, T, T), (H, T, d_head) ×3
            with torch_threads(self.threads):
                self._blocks[key] = decompose(*first, preset).numpy()  # (n_blocks, H, T, T)
        return self._blocks[key]

    def blocks(self, preset: str, layer: int, head: int) -> list[dict[str, Any]]:
        """The blocks of one head as ``plots.span_blocks_*`` takes them: ``{"name", "order", "block" (T, T)}``."""
        blocks = self.layer_blocks(preset, layer)[:, head]  # (n_blocks, T, T)
        return [{"name": n, "order": o, "block": b}
                for n, o, b in zip(block_names(preset), block_orders(preset), blocks)]

    def layer_angles(self, layer: int) -> dict[str, np.ndarray]:
        """Principal angles (H, d_head) in radians, ascending, between the spans of Q, K, V at one layer; cached."""
        if layer not in self._angles:
            cap = self.captures[layer]
            qkv = dict(zip("QKV", (t[0] for t in (cap.q, cap.k, cap.v))))  # (H, T, d_head): d_head-dim spans in R^T
            with torch_threads(self.threads):
                # θ = arccos(σ_i(Q_Xᵀ Q_Y)), the singular values of the product of orthonormal bases
                self._angles[layer] = {
                    pair: np.arccos(principal_angle_cosines(qkv[pair[0]], qkv[pair[-1]]).numpy())
                    for pair in ANGLE_PAIRS
                }
        return self._angles[layer]

    def angles(self, layer: int, head: int) -> dict[str, np.ndarray]:
        """``{"Q–K": (d_head,), "Q–V": ..., "K–V": ...}`` radians for one head, as ``plots.subspace_angles_*`` takes."""
        return {pair: a[head] for pair, a in self.layer_angles(layer).items()}


class SpansPanel(Panel):
    """Span / violation gradient scaling, interactively (arXiv 2512.13033; block construction per preset).

    Analytic views (instant, no training): a random-init TinyGPT computes ∂L/∂S once on a fixed batch
    (B = 2, T = ``model_cfg.context_length``); for the picked layer/head the panel shows the blocks of dS
    (heatmaps grouped by order, bars of ‖block‖/‖dS‖ before and after α scaling), the T = 3 toy with α0 on
    the span part and α1 on the violation, and the principal angles between the token-space spans of Q, K
    and V (:class:`ScoreGradientViews`). α sliders rescale cached blocks; the decomposition is
    computed once per (preset, layer) for all heads. In a browser the page rescales the blocks for α itself and
    redraws a preset, layer or head it has been sent before without asking the kernel (:class:`BlockScaler`);
    once the page is live the kernel sends it the other picks' states ahead (:meth:`prefetch`), so a first pick is
    drawn there at once too.

    Train: the α setting against the standard gradient (spans=None), same seed, plus the standard gradient
    with the next seed (the seed noise). Live: the α run's validation loss as a change in percent against
    standard with the seed-noise band (the two loss curves differ by a fraction of a percent and coincide on
    screen), the loss curves, and the energy share of dS by order at the picked layer in the α run
    (``spans.SpanProbe`` every ``probe_every`` steps, on the α run with its α and on the standard run with
    kv8 [1000] whatever the sliders say, so that only the α run retrains when α or the preset change).

    Args:
        model_cfg: model for the analytic views and training (default: 2 layers, 4 heads, d_model 128,
            T 64, i.e. d_head 32). vocab_size is replaced by the data's for training.
        train_cfg: a ``spanviz.train.TrainConfig`` for training (default :func:`default_train_cfg`).
        batch: (x, y) (B, T) for the analytic views; default random tokens from ``seed``.
        data, store, trainer_factory, static, refresh_hz: see :class:`TrainingPanel`.
    """

    def __init__(
        self,
        model_cfg: GPTConfig | None = None,
        *,
        train_cfg: TrainConfig | None = None,
        batch: tuple[torch.Tensor, torch.Tensor] | None = None,
        seed: int = 0,
        probe_every: int = 10,
        data: Any = None,
        store: Any = "auto",
        trainer_factory: Callable[[RunSpec, Any], TrainerLike] | None = None,
        static: bool | None = None,
        refresh_hz: float = 4.0,
    ) -> None:
        super().__init__(model_cfg, train_cfg, static, store=store, probe_every=probe_every)
        self.grads = ScoreGradientViews(self.model_cfg, batch, seed=seed, threads=ANALYTIC_THREADS)
        self.model, self.batch, self.captures = self.grads.model, self.grads.batch, self.grads.captures
        c = self.controls
        for i, default in enumerate((1.0, 0.0, 0.0, 0.0)):  # [1000], the paper's best setting
            c[f"alpha{i}"] = slider(W.FloatSlider, f"α{i}", default, min=0.0, max=2.0, step=0.05)
        c["preset"] = W.Dropdown(options=list(PRESETS), value="kv8", description="preset")
        c["layer"] = W.Dropdown(options=list(range(self.model_cfg.n_layer)), value=0, description="layer")
        c["head"] = W.Dropdown(options=list(range(self.model_cfg.n_head)), value=0, description="head")
        self._cells: dict[tuple[str, int, int], dict[str, Any]] = {}  # span_block_cells per (preset, layer, head)
        self._templates: dict[tuple[Any, ...], dict[str, Any]] = {}  # figure layout per block structure
        self.toy = span_toy(seed=seed)
        with analytic_threads():
            key = self._load_head()
            blocks_state = self._blocks_state()
            figures = {
                "toy": span_toy_figure(self.toy, self.alphas[:2]),
                "angles": subspace_angles_figure(self._angles()),
            }
            self._angles_shown = key[1:]  # (layer, head) of the angles view
        self.views["blocks"] = FigureView(go.Figure(*blocks_state), static=self.static, name="blocks")
        if not self.static:  # the state every later redraw sends (plain dicts, not plotly's validated copy), so that
            self.views["blocks"].show(*blocks_state)  # the page's first α redraw finds nothing else changed
        self.views.update({name: FigureView(fig, static=self.static, name=name) for name, fig in figures.items()})
        self.scaler: BlockScaler | None = None
        if not self.static:  # α in the browser: the page rescales the blocks itself (see BlockScaler)
            self.scaler = BlockScaler(self.views["blocks"].widget, [c[f"alpha{i}"] for i in range(4)],
                                      [c["preset"], c["layer"], c["head"]])
            self.scaler.set_cells(self._cells[key], self.views["blocks"].layout, pick_key(key))
            self.scaler.observe(lambda ch: self.prefetch() if ch["new"] else None, names="live")
        for name in ("alpha0", "alpha1", "alpha2", "alpha3"):
            c[name].observe(lambda _ch: self.update_alphas(), names="value")
        for name in ("preset", "layer", "head"):
            c[name].observe(lambda _ch: self.update_head(), names="value")
        self.busy = W.HTML("")
        self.probe_every, self._probe_label, self._trained_alphas = probe_every, "-", self.alphas
        self.angles_caption = W.HTML(self._angles_caption(), layout=W.Layout(width="100%"))
        self.angles_caption.add_class("spanviz-caption-angles")
        self._attach_training(
            [LiveView("delta", self._delta_data, self._delta_build, caption=self._delta_caption), LOSS_VIEW,
             LiveView("energy", self._energy_data, self._energy_build, self._energy_title)],
            data=data, store=store, trainer_factory=trainer_factory, refresh_hz=refresh_hz, keep_weights=True,
        )
        note = W.HTML(
            "<small>Blocks: spanviz's reconstruction (see docs/spans.md); α0 scales the bidirectional span "
            "part, α3 the pure violation. With T ≤ d_head every projector is the identity and α changes nothing."
            "</small>"
        )
        self.widget = W.VBox([
            W.HBox([W.VBox([c["alpha0"], c["alpha1"], c["alpha2"], c["alpha3"]]),
                    W.VBox([c["preset"], c["layer"], c["head"], self.busy])]),
            note,
            self.views["blocks"].widget,
            side_by_side((self.views["toy"].widget, "55%"), (self.views["angles"].widget, "45%")),
            self.angles_caption,
            self.training.widget,
            *([self.scaler] if self.scaler is not None else []),
        ])

    # ------------------------------------------------------------------------------------- analytic views
    @property
    def alphas(self) -> tuple[float, float, float, float]:
        """(α0, α1, α2, α3) from the sliders."""
        return tuple(float(self.controls[f"alpha{i}"].value) for i in range(4))  # type: ignore[return-value]

    def _key(self) -> tuple[str, int, int]:
        return tuple(self.controls[n].value for n in ("preset", "layer", "head"))  # type: ignore[return-value]

    def _load_head(self, key: tuple[str, int, int] | None = None) -> tuple[str, int, int]:
        """The blocks of a preset/layer/head (default: the one picked) and their α-independent heatmaps and norms
        (cached); returns that (preset, layer, head)."""
        key = key or self._key()
        if key not in self._cells:
            self._cells[key] = span_block_cells(self.grads.blocks(*key))
        return key

    def _blocks_state(self, key: tuple[str, int, int] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The blocks figure of a pick (default: the one picked; load it first) at the current α as (traces,
        layout): plain dicts from the cached cells (:func:`span_blocks_traces`, :func:`span_blocks_layout`) over the
        layout of plotly's validated figure of this block structure (its template; built once per structure)."""
        key = key or self._key()
        cells, a = self._cells[key], self.alphas
        shape = (tuple(cells["orders"]), tuple(cells["names"]), cells["T"])
        if shape not in self._templates:
            self._templates[shape] = figure_state(span_blocks_figure(self.grads.blocks(*key), a))[1]
        return span_blocks_traces(cells, a), {**self._templates[shape], **span_blocks_layout(cells, a)}

    def prefetch(self) -> list[str]:
        """Send the page the blocks states of the picks it has not been sent (:data:`PREFETCH_MAX_STATES`, nearest
        the current pick first: fewest dropdowns changed), so that block_scaler.js draws a first pick of a preset,
        layer or head at once, as it draws one it has seen. Called once a page is live; the kernel still draws
        every pick, the same state, which the page recognises. Nothing when the context is above
        :data:`PREFETCH_MAX_T` or no page runs the scaler. Returns the keys sent ("preset|layer|head")."""
        if self.scaler is None or self.model_cfg.context_length > PREFETCH_MAX_T:
            return []
        current = self._key()
        picks = product(PRESETS, range(self.model_cfg.n_layer), range(self.model_cfg.n_head))
        nearest = sorted(picks, key=lambda k: sum(a != b for a, b in zip(k, current)))  # stable: dropdown order
        keys = [k for k in nearest if k != current][:PREFETCH_MAX_STATES]
        states = {}
        with analytic_threads():
            for key in keys:
                self._load_head(key)
                states[pick_key(key)] = (self._cells[key], *self._blocks_state(key))
        self.scaler.prefetch(states)
        return list(states)

    def _angles(self) -> dict[str, np.ndarray]:
        return self.grads.angles(self.controls["layer"].value, self.controls["head"].value)

    def update_alphas(self) -> None:
        """Redraw the views that depend on α only (cached blocks rescaled, their titles say the α; the toy). When
        the page rescales the blocks itself (:class:`BlockScaler`), the kernel only keeps the state in step."""
        with analytic_threads():
            live = self.scaler is not None and self.scaler.live
            self.views["blocks"].show(*self._blocks_state(), redraw=not live)
            if not live and self.scaler is not None:
                self.scaler.sync_revision()
            self.views["toy"].update(span_toy_data(self.toy, self.alphas[:2]))

    def update_head(self) -> None:
        """Recompute the blocks for the picked preset/layer/head and redraw (saying "computing…" meanwhile, when not
        cached); the angles view only when the layer or head changed. Blocks are cached per (preset, layer),
        heatmaps per head and figures per block structure, so a preset, layer or head seen before costs no tensor
        work and no figure construction. In a page, a pick the kernel has drawn before is drawn there at once
        (:class:`BlockScaler` keeps the states it received); this redraw, of the same state, then changes nothing."""
        # "computing…" only where there is tensor work ahead: for a head seen before, its message and the frame the
        # page spends drawing it would only delay the figure (by 15–30 ms in JupyterLab on 2 cores)
        cached = self._key() in self._cells
        with contextlib.nullcontext() if cached else computing(self.busy, "the blocks"), analytic_threads():
            key = self._load_head()
            self.views["blocks"].show(*self._blocks_state())
            if self.scaler is not None:
                self.scaler.set_cells(self._cells[key], self.views["blocks"].layout, pick_key(key))
            if self._angles_shown != key[1:]:  # angles depend on layer and head, not on the preset
                self._angles_shown = key[1:]
                self.views["angles"].update(subspace_angles_data(self._angles()))
                self.angles_caption.value = self._angles_caption()
            if self.training.runner.histories:
                self.training.refresh()  # the energy-by-order view follows the picked layer

    # ------------------------------------------------------------------------------------------ training
    def _plan(self, v: Mapping[str, Any]) -> list[RunSpec]:
        data = self.training.data()
        base = replace(self.model_cfg, vocab_size=data.vocab_size, spans=None)
        train_cfg = self.train_cfg()
        cfg = SpanConfig(alphas=tuple(float(v[f"alpha{i}"]) for i in range(4)), preset=v["preset"])
        twin = replace(train_cfg, seed=train_cfg.seed + 1)
        # The standard run's probe does not follow the sliders (cfg=None: what kv8 [1000] would see there), so its
        # store key holds no α and no preset: changing them retrains the α run only, the standard runs replay.
        return [RunSpec("standard", base, train_cfg, (SpanProbe(every=self.probe_every),)),
                RunSpec(f"standard, seed {twin.seed}", base, twin),
                RunSpec(cfg.label(), replace(base, spans=cfg), train_cfg,
                        (SpanProbe(every=self.probe_every, cfg=cfg),))]

    def _planned(self, specs: list[RunSpec]) -> None:
        cfg = specs[-1].model_cfg.spans  # the α run's
        self._probe_label, self._trained_alphas = cfg.label(), cfg.alphas

    def _delta(self, histories: Mapping[str, History]) -> dict[str, Any] | None:
        """Steps where all three runs were evaluated, Δ val loss (%) of the α run against standard, and the
        same for the standard run with the next seed (the noise band)."""
        labels = list(histories)
        if "standard" not in histories or len(labels) < 3:
            return None
        (twin,) = [k for k in labels if k.startswith("standard, seed")]
        alpha = labels[-1]
        return relative_change_series(histories["standard"], {alpha: histories[alpha]}, noise=histories[twin])

    def _delta_caption(self, histories: Mapping[str, History]) -> str:
        """What the Δ figure shows, in words from the same runs (:func:`captions.spans_change_caption`)."""
        delta = self._delta(histories)
        if delta is None:
            return ""
        labels, cfg, train_cfg = list(histories), self.model_cfg, self.train_cfg()
        twin = next(k for k in labels if k.startswith("standard, seed"))
        return captions.spans_change_caption(
            delta, alpha_label=labels[-1], alphas=self._trained_alphas, twin_label=twin,
            seed=train_cfg.seed, d_head=cfg.d_head, d_model=cfg.d_model, n_layer=cfg.n_layer,
            steps_planned=train_cfg.steps)

    def _angles_caption(self) -> str:
        c = self.controls
        return captions.angles_caption(self._angles(), layer=c["layer"].value, head=c["head"].value,
                                       context=self.model_cfg.context_length, d_head=self.model_cfg.d_head)

    def _delta_data(self, histories: Mapping[str, History]) -> list[dict[str, Any]]:
        d = self._delta(histories)
        return [] if d is None else relative_change_data(**d)

    def _delta_build(self, histories: Mapping[str, History]) -> go.Figure:
        d = self._delta(histories) or {"steps": np.zeros(0), "changes": {}, "noise": None}
        return relative_change_figure(
            **d, title="validation loss against standard: below 0 = better; gray band = seed noise "
                       "(standard with the next seed)")

    def _energy(self, histories: Mapping[str, History]) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
        """Steps and per-order energy shares of the picked layer, from the last run that has them."""
        for history in reversed(list(histories.values())):
            energy = energy_series(history, self.controls["layer"].value)
            if energy is not None:
                return energy
        return None

    def _energy_title(self) -> str:
        return f"energy of dS by order in the run {self._probe_label}, layer {self.controls['layer'].value}"

    def _energy_data(self, histories: Mapping[str, History]) -> list[dict[str, Any]]:
        e = self._energy(histories)
        return [] if e is None else energy_by_order_data(*e)

    def _energy_build(self, histories: Mapping[str, History]) -> go.Figure:
        e = self._energy(histories)
        return energy_by_order_figure(*(e or (np.zeros(0), {})), title=self._energy_title())
