"""Notebook panels: ipywidgets controls + plotly ``FigureWidget``s, live training in a background thread.

Panels (each a class with ``.widget`` to display, ``.controls`` and ``.views`` dicts, and ``train()``):

* :class:`SpansPanel` — α0..α3, preset, layer/head: the score-gradient blocks of one head on a fixed batch,
  the T = 3 toy, principal angles; Train compares the α setting against the standard gradient.
* :class:`LocalGlobalPanel` — n_local, window p, context T, learning rate: per-head masks; Train compares
  MHSA with LS-attention (loss and max logit per layer, live).
* :class:`FP8Panel` — rank r, δ, margin: bounds vs rank (analytic); Train with an LR spike shows observed max
  logit, bounds, scales and overflow counts per strategy, live.
* :class:`TrainingPanel` — the generic part: Start / Stop, progress bar, status / error area, live loss curves
  with seed bands, results-store replays. The technique panels embed one.

Rendering: a :class:`FigureView` holds a ``go.FigureWidget`` (JupyterLab, Notebook 7) or, where
FigureWidget renders unreliably (Colab, VS Code), a static ``go.Figure`` re-rendered into an ``Output``
(:func:`use_static`; override with ``static=`` or ``SPANVIZ_STATIC=1`` / ``0``). Updates push only trace
data (``plots.*_data``) inside ``batch_update``; the figure is rebuilt only when its trace structure changes.

Training: :class:`spanviz.runner.Runner` — a daemon thread, refreshes at most ``refresh_hz`` (4 Hz) so the
kernel stays responsive; Stop ends a run after the current optimizer step; errors are shown in the panel.
``train(blocking=True)`` or ``SPANVIZ_BLOCKING=1`` runs in the caller's thread (scripts, CI).
"""

from __future__ import annotations

import contextlib
import html
import io
import json
import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import torch

from spanviz import plots
from spanviz.model import GPTConfig, TinyGPT
from spanviz.runner import Job, Runner, TrainerLike

logger = logging.getLogger(__name__)

History = dict[str, list[Any]]


# The panels' model when none is given: the notebook size (d_head 32 < T 64, so spans are non-trivial).
DEFAULT_PANEL_MODEL = GPTConfig(vocab_size=8192, context_length=64, n_layer=2, n_head=4, d_model=128)


# ====================================================================================== rendering mode
def use_static(static: bool | None = None) -> bool:
    """Whether panels should draw static figures into an ``Output`` instead of ``FigureWidget``s.

    Precedence: the ``static`` argument; then the environment variable ``SPANVIZ_STATIC`` ("1"/"true" →
    static, "0"/"false" → widgets); then auto-detection: static in Colab (``google.colab`` imported) and in
    VS Code (``VSCODE_PID`` set), where FigureWidget renders unreliably.

    Raises:
        ValueError: ``SPANVIZ_STATIC`` set to something other than 1/0/true/false/yes/no/on/off.
    """
    if static is not None:
        return bool(static)
    env = os.environ.get("SPANVIZ_STATIC", "").strip().lower()
    if env in ("1", "true", "yes", "on"):
        return True
    if env in ("0", "false", "no", "off"):
        return False
    if env:
        raise ValueError(f"SPANVIZ_STATIC must be 1 or 0 (true/false, yes/no, on/off), got {env!r}")
    return "google.colab" in sys.modules or "VSCODE_PID" in os.environ


def _display_bundle(fig: go.Figure) -> dict[str, Any]:
    """An Output display item for a static figure: the plotly mimetype (VS Code, JupyterLab) plus HTML."""
    spec = json.loads(pio.to_json(fig, validate=False))
    return {
        "output_type": "display_data",
        "data": {
            "application/vnd.plotly.v1+json": {"data": spec.get("data", []), "layout": spec.get("layout", {})},
            "text/html": pio.to_html(fig, include_plotlyjs="cdn", full_html=False),
            "text/plain": f"<plotly figure: {len(fig.data)} traces>",
        },
        "metadata": {},
    }


DATA_KEYS = frozenset({"x", "y", "z", "i", "j", "k", "text", "name"})
"""Trace properties a live update pushes; everything else (styles, axes, colors) is set when the figure is
built and is assumed to follow from the trace structure (a different structure rebuilds the figure)."""


class FigureView:
    """One figure on screen: a ``go.FigureWidget``, or a static ``go.Figure`` shown in an ``Output``.

    Attributes:
        widget: the ipywidget to place in a layout (a ``Box`` whose child is replaced on rebuilds).
        figure: the current figure (``go.FigureWidget`` or ``go.Figure``); its ``data`` is what is drawn.
        static: True in static mode.
        updates / rebuilds: counters (for tests and benchmarks).
    """

    def __init__(self, fig: go.Figure, static: bool | None = None) -> None:
        self.static = use_static(static)
        self.updates = 0
        self.rebuilds = 0
        self._lock = threading.RLock()
        self.widget = W.Box(layout=W.Layout(width="100%"))
        self._output = W.Output(layout=W.Layout(width="100%")) if self.static else None
        self._set(fig)

    def _set(self, fig: go.Figure) -> None:
        if self.static:
            self.figure = go.Figure(fig)
            self._render()
            self.widget.children = (self._output,)
        else:
            self.figure = go.FigureWidget(fig)
            self.widget.children = (self.figure,)

    def _render(self) -> None:
        self._output.outputs = (_display_bundle(self.figure),)

    def _matches(self, data: Sequence[Mapping[str, Any]]) -> bool:
        if len(data) != len(self.figure.data):
            return False
        return all(d.get("type", "scatter") == t.type for d, t in zip(data, self.figure.data))

    def update(
        self,
        data: Sequence[Mapping[str, Any]],
        build: Callable[[], go.Figure] | None = None,
        layout: Callable[[go.Figure], None] | None = None,
    ) -> str:
        """Show new trace data.

        Args:
            data: trace dicts as returned by a ``plots.*_data`` function (same order as the figure's traces);
                only their :data:`DATA_KEYS` are pushed.
            build: makes the full figure; called when the trace count or types differ from the current
                figure (e.g. another preset). Without it a mismatch raises.
            layout: ``fn(figure)`` applied inside the same ``batch_update`` when patching (titles, labels).
        Returns:
            "patched" (data updated in place, in one ``batch_update``) or "rebuilt".
        Raises:
            ValueError: structure mismatch and no ``build``.
        """
        with self._lock:
            self.updates += 1
            if not self._matches(data):
                if build is None:
                    raise ValueError(
                        f"figure has {len(self.figure.data)} traces, update has {len(data)}; pass build= to rebuild"
                    )
                self.replace(build())
                return "rebuilt"
            with self.figure.batch_update():
                for trace, props in zip(self.figure.data, data):
                    trace.update({k: v for k, v in props.items() if k in DATA_KEYS})
                if layout is not None:
                    layout(self.figure)
            if self.static:
                self._render()
            return "patched"

    def replace(self, fig: go.Figure) -> None:
        """Show a new figure (new layout and traces)."""
        with self._lock:
            self.rebuilds += 1
            self._set(fig)


def _slider(kind: type, description: str, value: Any, continuous: bool = True, **kw: Any) -> W.Widget:
    return kind(
        value=value,
        description=description,
        continuous_update=continuous,
        style={"description_width": "initial"},
        layout=W.Layout(width="280px"),
        **kw,
    )


# ================================================================================ generic training panel
@dataclass
class RunSpec:
    """One run a panel trains: a label, the model and training configs, and the probes to install.

    ``train_cfg`` is a :class:`spanviz.train.TrainConfig`; ``probes`` are probe objects (e.g.
    ``local_global.LogitProbe``). ``seed`` is informational (it lives in ``train_cfg``).
    """

    label: str
    model_cfg: GPTConfig
    train_cfg: Any
    probes: Sequence[Any] = ()


@dataclass
class LiveView:
    """A figure the training panel keeps up to date from the run histories.

    ``data(histories)`` returns trace dicts; ``build(histories)`` returns the full figure (used when the trace
    structure changes). ``histories`` is ``{label: history}`` for the runs that have at least one row.
    ``title()``, when given, is re-applied on every refresh (a title that follows the controls).
    """

    name: str
    data: Callable[[Mapping[str, History]], list[dict[str, Any]]]
    build: Callable[[Mapping[str, History]], go.Figure]
    title: Callable[[], str] | None = None


def _loss_data(histories: Mapping[str, History]) -> list[dict[str, Any]]:
    return plots.loss_curves_data(histories, ("train_loss", "val_loss"))


def _loss_build(histories: Mapping[str, History]) -> go.Figure:
    return plots.loss_curves_figure(histories, ("train_loss", "val_loss"), title="loss (solid: train, dashed: val)")


LOSS_VIEW = LiveView("loss", _loss_data, _loss_build)

_DATA_CACHE: dict[Any, Any] = {}


def default_data(data_dir: str | None = None, max_vocab: int = 8192) -> Any:
    """WikiText-2 token ids for the panels (cached per process).

    Splits follow :func:`spanviz.data.splits_from_env`: ``SPANVIZ_TRAIN_SPLIT`` / ``SPANVIZ_EVAL_SPLIT``, else
    with a local folder (``data_dir`` or ``SPANVIZ_WIKITEXT_DIR``) train on validation and evaluate on test
    (the offline copy has no train split), else the hub's train/validation.
    Returns a :class:`spanviz.data.TokenData`. Raises what :func:`spanviz.data.prepare_tokens` raises.
    """
    from spanviz import data as sdata

    folder = data_dir or os.environ.get("SPANVIZ_WIKITEXT_DIR")
    splits = sdata.splits_from_env(local=bool(folder))
    key = (folder, max_vocab, tuple(splits.items()))
    if key not in _DATA_CACHE:
        _DATA_CACHE[key] = sdata.prepare_tokens(folder, splits=splits, max_vocab=max_vocab)
    return _DATA_CACHE[key]


def default_store() -> Any:
    """The panels' results store: ``spanviz.store.ResultsStore()`` at its default root. Runs found there
    replay at once instead of training; finished panel runs are put there."""
    from spanviz.store import ResultsStore

    return ResultsStore()


def _resolve_store(store: Any) -> Any:
    return default_store() if isinstance(store, str) and store == "auto" else store


def _default_trainer_factory(spec: RunSpec, data: Any) -> TrainerLike:
    from spanviz.train import Trainer

    return Trainer(spec.model_cfg, spec.train_cfg, data, probes=tuple(spec.probes))


class TrainingPanel:
    """Start / Stop, progress, status and live figures for runs described by :class:`RunSpec`s.

    Args:
        specs: ``fn() -> [RunSpec, ...]``, read when Start is pressed (so it sees the current sliders).
        live: extra :class:`LiveView`s besides the loss curves (e.g. max logit per layer).
        data: a ``spanviz.data.TokenData`` or ``fn() -> TokenData`` (called in the worker thread, once);
            default :func:`default_data`.
        store: a ``spanviz.store.ResultsStore`` (``get(config)`` / ``put(record)``) — a configuration found
            there is replayed at once instead of trained; completed runs are put there. None = no store;
            "auto" = :func:`default_store` (the technique panels' default).
        trainer_factory: ``fn(spec, data) -> trainer`` (default: ``spanviz.train.Trainer``).
        static: see :func:`use_static`. refresh_hz: live refresh rate (default 4 Hz).

    Attributes:
        widget: the VBox to display. controls: ``start``, ``stop`` buttons, ``progress``. status: HTML line.
        error: HTML area that shows a run's exception and traceback. views: name → :class:`FigureView`.
        runner: the :class:`spanviz.runner.Runner`.
    """

    def __init__(
        self,
        specs: Callable[[], Sequence[RunSpec]],
        *,
        live: Sequence[LiveView] = (),
        data: Any = None,
        store: Any = None,
        trainer_factory: Callable[[RunSpec, Any], TrainerLike] | None = None,
        static: bool | None = None,
        refresh_hz: float = 4.0,
    ) -> None:
        self.specs, self.store, self.static = specs, _resolve_store(store), use_static(static)
        self._data = data
        self.trainer_factory = trainer_factory or _default_trainer_factory
        self.live = [LOSS_VIEW, *live]
        self.views = {v.name: FigureView(v.build({}), static=self.static) for v in self.live}
        self.runner = Runner(on_update=self._on_update, on_finish=self._on_finish, refresh_hz=refresh_hz)
        start = W.Button(description="Train", icon="play", button_style="success")
        stop = W.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        progress = W.IntProgress(value=0, min=0, max=1, description="steps", layout=W.Layout(width="320px"))
        start.on_click(lambda _b: self.train())
        stop.on_click(lambda _b: self.stop(wait=False))
        self.controls: dict[str, W.Widget] = {"start": start, "stop": stop, "progress": progress}
        self.status = W.HTML("ready")
        self.error = W.HTML("")
        self.replayed: list[str] = []
        self._reports: list[tuple[W.Output, Callable[[dict[str, History]], Any]]] = []
        self.widget = W.VBox(
            [W.HBox([start, stop, progress, self.status]), self.error, *[v.widget for v in self.views.values()]]
        )

    # ------------------------------------------------------------------------------------------ data
    def data(self) -> Any:
        """The token data (loaded on first use)."""
        if self._data is None:
            self._data = default_data()
        elif callable(self._data) and not hasattr(self._data, "train_ids"):
            self._data = self._data()
        return self._data

    def _store_config(self, spec: RunSpec) -> dict[str, Any]:
        """The results-store key of a run: ``spanviz.train.run_config`` (model, train, data, probes)."""
        from spanviz.train import run_config

        return run_config(spec.model_cfg, spec.train_cfg, self.data(), spec.probes)

    def _jobs(self, specs: Sequence[RunSpec]) -> list[Job]:
        jobs, self.replayed = [], []
        for spec in specs:
            stored = None
            if self.store is not None:
                stored = self.store.get(self._store_config(spec))
            if stored is not None:
                self.replayed.append(spec.label)
                history = stored.history if hasattr(stored, "history") else stored["history"]
                jobs.append(Job(spec.label, replay=history))
                continue

            def make(spec: RunSpec = spec) -> TrainerLike:
                return self.trainer_factory(spec, self.data())

            on_complete = None
            if self.store is not None:
                def on_complete(trainer: Any, spec: RunSpec = spec) -> None:
                    self.store.put(trainer.record)
            jobs.append(Job(spec.label, steps=spec.train_cfg.steps, make_trainer=make, on_complete=on_complete))
        return jobs

    # --------------------------------------------------------------------------------------- control
    def train(self, blocking: bool | None = None) -> Runner:
        """Start training the current specs (replaying stored ones).

        Args:
            blocking: wait for the end in this thread (None: ``SPANVIZ_BLOCKING``). A blocking run re-raises
                its error after showing it.
        Returns:
            the runner (``runner.state``, ``runner.snapshot()``).
        """
        if self.runner.running:
            return self.runner
        self.error.value = ""
        try:
            jobs = self._jobs(list(self.specs()))
        except Exception as exc:  # noqa: BLE001 - shown, not lost
            self._show_error(exc, None)
            raise
        self.controls["start"].disabled, self.controls["stop"].disabled = True, False
        self.status.value = "starting…"
        self.runner.start(jobs, blocking=blocking)
        return self.runner

    def stop(self, wait: bool = True, timeout: float = 2.0) -> bool:
        """Stop the run after the current step; returns True when it has ended (see Runner.stop)."""
        return self.runner.stop(wait=wait, timeout=timeout)

    @property
    def histories(self) -> dict[str, History]:
        """``{label: history}`` of the last run so far."""
        return self.runner.snapshot()

    def report(self, fn: Callable[[dict[str, History]], Any]) -> W.Output:
        """An area that shows ``fn(histories)`` whenever a run has ended (and now, if none is running).

        Training runs in the background, so a cell that reads the results right after ``train()`` would see a
        half-finished run. ``report`` waits instead: what ``fn`` prints (and its return value, if not None) is
        redrawn into the returned ``Output`` after every run (done, stopped or failed), so pressing Train
        again refreshes it. While a run is in progress the area says so.

        Args:
            fn: ``fn({label: history}) -> Any``, e.g. a function printing a table of best validation losses.
        Returns:
            an ``ipywidgets.Output`` to display (the last expression of a cell).
        Errors raised by ``fn`` are shown in the area (with the traceback), not raised.
        """
        out = W.Output()
        self._reports.append((out, fn))
        if self.runner.running:
            out.append_stdout("training in progress: the results appear here when the run ends\n")
        else:
            self._render_report(out, fn, self.histories)
        return out

    def _render_report(
        self, out: W.Output, fn: Callable[[dict[str, History]], Any], histories: dict[str, History]
    ) -> None:
        # Captured text goes in with append_stdout: no kernel "current cell" is involved, so this works from
        # a callback on the event loop and outside a kernel alike.
        buffer = io.StringIO()
        result = None
        with contextlib.redirect_stdout(buffer):
            if self.runner.state in ("stopped", "error"):
                done, total = self.runner.progress
                print(f"(run {self.runner.state} after {done}/{total} steps)")
            try:
                result = fn(histories)
            except Exception:  # noqa: BLE001 - shown where the results would be, not lost
                print(traceback.format_exc())
        out.outputs = ()
        out.append_stdout(buffer.getvalue())
        if result is not None:
            out.append_display_data(result)

    # -------------------------------------------------------------------------------------- callbacks
    def refresh(self, histories: Mapping[str, History] | None = None) -> None:
        """Redraw the live views from ``histories`` (default: the runner's snapshot)."""
        histories = self.runner.snapshot() if histories is None else histories
        ready = {k: h for k, h in histories.items() if h.get("step")}
        for view in self.live:
            relabel = None if view.title is None else (lambda fig, t=view.title: fig.update_layout(title_text=t()))
            self.views[view.name].update(view.data(ready), build=lambda view=view: view.build(ready), layout=relabel)

    def _on_update(self, runner: Runner) -> None:
        self.refresh()
        done, total = runner.progress
        self.controls["progress"].max = max(total, 1)
        self.controls["progress"].value = done
        note = f" · replayed: {', '.join(self.replayed)}" if self.replayed else ""
        self.status.value = f"{done}/{total} steps · {runner.steps_per_s:.1f} steps/s{html.escape(note)}"

    def _on_finish(self, runner: Runner) -> None:
        self.controls["start"].disabled, self.controls["stop"].disabled = False, True
        done, total = runner.progress
        if runner.state == "error":
            self._show_error(runner.error, runner.error_text)
            self.status.value = f"<b style='color:#b00'>error</b> after {done}/{total} steps"
        else:
            self.status.value = f"{runner.state}: {done}/{total} steps"
        histories = self.histories
        for out, fn in self._reports:
            self._render_report(out, fn, histories)

    def _show_error(self, exc: BaseException | None, text: str | None) -> None:
        detail = html.escape(text or f"{type(exc).__name__}: {exc}")
        self.error.value = (
            f"<div style='color:#b00'><b>{html.escape(type(exc).__name__)}: {html.escape(str(exc))}</b>"
            f"<details><summary>traceback</summary><pre>{detail}</pre></details></div>"
        )


def default_train_cfg(**changes: Any) -> Any:
    """The panels' training settings: a ``TrainConfig`` sized for a laptop CPU (200 steps, batch 8, evaluation
    every 25 steps on 4 batches, 20 warm-up steps), with ``changes`` applied."""
    from spanviz.train import TrainConfig

    base = dict(steps=200, batch_size=8, eval_interval=25, eval_iters=4, warmup_steps=20, lr=3e-3)
    return TrainConfig(**{**base, **changes})


# ============================================================================================ spans panel
class SpansPanel:
    """Span / violation gradient scaling, interactively (arXiv 2512.13033; block construction per preset).

    Analytic views (instant, no training): a random-init TinyGPT computes ∂L/∂S once on a fixed batch
    (B = 2, T = ``model_cfg.context_length``); for the picked layer/head the panel shows the blocks of dS
    (heatmaps grouped by order, bars of ‖block‖/‖dS‖ before and after α scaling), the T = 3 toy with α0 on
    the span part and α1 on the violation, and the principal angles between the token-space spans of Q, K
    and V. α sliders rescale cached blocks; the decomposition is computed once per (preset, layer) for all heads.

    Train: the α setting against the standard gradient (spans=None): live loss curves, and the energy share
    of dS by order at the picked layer (``spans.SpanProbe`` every ``probe_every`` steps, on both runs).

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
        train_cfg: Any = None,
        batch: tuple[torch.Tensor, torch.Tensor] | None = None,
        seed: int = 0,
        probe_every: int = 10,
        data: Any = None,
        store: Any = "auto",
        trainer_factory: Callable[[RunSpec, Any], TrainerLike] | None = None,
        static: bool | None = None,
        refresh_hz: float = 4.0,
    ) -> None:
        from spanviz import spans

        self.model_cfg = model_cfg or DEFAULT_PANEL_MODEL
        self._train_cfg = train_cfg
        self.static = use_static(static)
        torch.manual_seed(seed)
        self.model = TinyGPT(replace(self.model_cfg, spans=None, dropout=0.0))
        if batch is None:
            gen = torch.Generator().manual_seed(seed)
            ids = torch.randint(self.model_cfg.vocab_size, (2, self.model_cfg.context_length + 1), generator=gen)
            batch = (ids[:, :-1], ids[:, 1:])
        self.batch = batch
        self.captures = spans.capture_score_grads(self.model, batch)  # per layer: dS, q, k, v (B, H, T, ·)
        self.controls: dict[str, W.Widget] = {}
        c = self.controls
        for i, default in enumerate((1.0, 0.0, 0.0, 0.0)):  # [1000], the paper's best setting
            c[f"alpha{i}"] = _slider(W.FloatSlider, f"α{i}", default, min=0.0, max=2.0, step=0.05)
        c["preset"] = W.Dropdown(options=list(spans.PRESETS), value="kv8", description="preset")
        c["layer"] = W.Dropdown(options=list(range(self.model_cfg.n_layer)), value=0, description="layer")
        c["head"] = W.Dropdown(options=list(range(self.model_cfg.n_head)), value=0, description="head")
        self._blocks: list[dict] = []
        self._block_cache: dict[tuple[str, int], np.ndarray] = {}
        self._angle_cache: dict[int, dict[str, np.ndarray]] = {}
        self._load_head()
        self.toy = plots.span_toy(seed=seed)
        self.views = {
            "blocks": FigureView(plots.span_blocks_figure(self._blocks, self.alphas), static=self.static),
            "toy": FigureView(plots.span_toy_figure(self.toy, self.alphas[:2]), static=self.static),
            "angles": FigureView(plots.subspace_angles_figure(self._angles()), static=self.static),
        }
        for name in ("alpha0", "alpha1", "alpha2", "alpha3"):
            c[name].observe(lambda _ch: self.update_alphas(), names="value")
        for name in ("preset", "layer", "head"):
            c[name].observe(lambda _ch: self.update_head(), names="value")
        self.probe_every, self._probe_label = probe_every, "-"
        self.training = TrainingPanel(
            self._specs,
            live=[LiveView("energy", self._energy_data, self._energy_build, self._energy_title)],
            data=data,
            store=store,
            trainer_factory=trainer_factory, static=self.static, refresh_hz=refresh_hz,
        )
        self.views.update({f"train/{k}": v for k, v in self.training.views.items()})
        self.controls.update(self.training.controls)
        note = W.HTML(
            "<small>Blocks: spanviz's reconstruction (see techniques/spans.md); α0 scales the bidirectional span "
            "part, α3 the pure violation. With T ≤ d_head every projector is the identity and α changes nothing."
            "</small>"
        )
        self.widget = W.VBox([
            W.HBox([W.VBox([c["alpha0"], c["alpha1"], c["alpha2"], c["alpha3"]]),
                    W.VBox([c["preset"], c["layer"], c["head"]])]),
            note,
            self.views["blocks"].widget,
            W.HBox([self.views["toy"].widget, self.views["angles"].widget]),
            self.training.widget,
        ])

    # ------------------------------------------------------------------------------------- analytic views
    @property
    def alphas(self) -> tuple[float, float, float, float]:
        """(α0, α1, α2, α3) from the sliders."""
        return tuple(float(self.controls[f"alpha{i}"].value) for i in range(4))  # type: ignore[return-value]

    def _layer_blocks(self, preset: str, layer: int) -> np.ndarray:
        """Blocks (n_blocks, H, T, T) of batch element 0 at one layer, cached per (preset, layer)."""
        from spanviz import spans

        key = (preset, layer)
        if key not in self._block_cache:
            cap = self.captures[layer]
            first = [t[0].float() for t in (cap.dS, cap.q, cap.k, cap.v)]  # (H, T, T), (H, T, d_head) ×3
            self._block_cache[key] = spans.decompose(*first, preset).numpy()
        return self._block_cache[key]

    def _layer_angles(self, layer: int) -> dict[str, np.ndarray]:
        """Principal angles (H, d_head) in radians, ascending, between the spans of Q, K, V; cached per layer."""
        from spanviz import spans

        if layer not in self._angle_cache:
            cap = self.captures[layer]
            q, k, v = (t[0] for t in (cap.q, cap.k, cap.v))  # (H, T, d_head): d_head-dim spans in R^T
            pairs = {"Q–K": (q, k), "Q–V": (q, v), "K–V": (k, v)}
            self._angle_cache[layer] = {
                name: np.arccos(spans.principal_angle_cosines(a, b).numpy()) for name, (a, b) in pairs.items()
            }
        return self._angle_cache[layer]

    def _load_head(self) -> None:
        from spanviz import spans

        preset, layer, head = (self.controls[n].value for n in ("preset", "layer", "head"))
        blocks = self._layer_blocks(preset, layer)[:, head]
        self._blocks = [
            {"name": n, "order": o, "block": b}
            for n, o, b in zip(spans.block_names(preset), spans.block_orders(preset), blocks)
        ]

    def _angles(self) -> dict[str, np.ndarray]:
        layer, head = self.controls["layer"].value, self.controls["head"].value
        return {name: a[head] for name, a in self._layer_angles(layer).items()}

    def update_alphas(self) -> None:
        """Redraw the views that depend on α only (cached blocks rescaled; the toy)."""
        a = self.alphas
        self.views["blocks"].update(plots.span_blocks_data(self._blocks, a),
                                    build=lambda: plots.span_blocks_figure(self._blocks, a))
        self.views["toy"].update(plots.span_toy_data(self.toy, a[:2]))

    def update_head(self) -> None:
        """Recompute the blocks for the picked preset/layer/head and redraw."""
        self._load_head()
        a = self.alphas
        self.views["blocks"].update(plots.span_blocks_data(self._blocks, a),
                                    build=lambda: plots.span_blocks_figure(self._blocks, a))
        self.views["angles"].update(plots.subspace_angles_data(self._angles()))
        if self.training.runner.histories:
            self.training.refresh()  # the energy-by-order view follows the picked layer

    # ------------------------------------------------------------------------------------------ training
    def _specs(self) -> list[RunSpec]:
        from spanviz import spans

        data = self.training.data()
        base = replace(self.model_cfg, vocab_size=data.vocab_size, spans=None)
        train_cfg = self._train_cfg if self._train_cfg is not None else default_train_cfg()
        cfg = spans.SpanConfig(alphas=self.alphas, preset=self.controls["preset"].value)
        # The same probe on both runs: on the standard run it says what this decomposition would see there.
        probe = spans.SpanProbe(every=self.probe_every, cfg=cfg)
        self._probe_label = cfg.label()
        return [RunSpec("standard", base, train_cfg, (probe,)),
                RunSpec(cfg.label(), replace(base, spans=cfg), train_cfg, (probe,))]

    def _energy(self, histories: Mapping[str, History]) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
        """Steps and per-order energy shares of the picked layer, from the last run that has them."""
        layer = self.controls["layer"].value
        for history in reversed(list(histories.values())):
            names = [k for k in plots.keys_under(history, f"spans/L{layer}") if k.startswith("share_order")]
            if names:
                cols = {n: plots.series(history, f"spans/L{layer}/{n}") for n in sorted(names)}
                steps = next(iter(cols.values()))[0]
                return steps, {n.replace("share_", "").replace("order", "order "): v for n, (_, v) in cols.items()}
        return None

    def _energy_title(self) -> str:
        return f"energy of dS by order, layer {self.controls['layer'].value} (probe: {self._probe_label})"

    def _energy_data(self, histories: Mapping[str, History]) -> list[dict[str, Any]]:
        e = self._energy(histories)
        return [] if e is None else plots.energy_by_order_data(*e)

    def _energy_build(self, histories: Mapping[str, History]) -> go.Figure:
        e = self._energy(histories)
        return plots.energy_by_order_figure(*(e or (np.zeros(0), {})), title=self._energy_title())

    def train(self, blocking: bool | None = None) -> Runner:
        """Train the α setting against the standard gradient (see :meth:`TrainingPanel.train`)."""
        return self.training.train(blocking=blocking)

    def stop(self, wait: bool = True) -> bool:
        return self.training.stop(wait=wait)


# ===================================================================================== local/global panel
def _max_logit_data(histories: Mapping[str, History]) -> list[dict[str, Any]]:
    runs = {k: h for k, h in histories.items() if "logits/max_per_layer" in h}
    return plots.max_logit_data(runs)


def _max_logit_build(histories: Mapping[str, History]) -> go.Figure:
    runs = {k: h for k, h in histories.items() if "logits/max_per_layer" in h}
    return plots.max_logit_figure(runs)


MAX_LOGIT_VIEW = LiveView("max_logit", _max_logit_data, _max_logit_build)


class LocalGlobalPanel:
    """LS-attention (arXiv 2505.15548): local sliding-window heads + global heads, interactively.

    Analytic view (instant): the per-head masks for n_local, window p and context T (the first n_local heads
    are local: allowed(i, j) ⇔ 0 <= i − j < p; the rest causal). Train: MHSA (all heads global) vs LS at
    context T and learning rate lr, same seed; live loss and max logit per layer (``LogitProbe``).

    Args:
        model_cfg: base model (default 2 layers, 4 heads, d_model 128); context_length, n_local, window are
            taken from the sliders.
        train_cfg: base ``TrainConfig`` (default :func:`default_train_cfg`); lr from the slider.
        probe_every: LogitProbe period in steps.
        data, store, trainer_factory, static, refresh_hz: see :class:`TrainingPanel`.
    """

    def __init__(
        self,
        model_cfg: GPTConfig | None = None,
        *,
        train_cfg: Any = None,
        probe_every: int = 10,
        data: Any = None,
        store: Any = "auto",
        trainer_factory: Callable[[RunSpec, Any], TrainerLike] | None = None,
        static: bool | None = None,
        refresh_hz: float = 4.0,
    ) -> None:
        self.model_cfg = model_cfg or GPTConfig(vocab_size=8192, context_length=128, n_layer=2, n_head=4, d_model=128)
        self._train_cfg, self.probe_every = train_cfg, probe_every
        self.static = use_static(static)
        H = self.model_cfg.n_head
        self.controls: dict[str, W.Widget] = {}
        c = self.controls
        c["n_local"] = _slider(W.IntSlider, "n_local (local heads)", max(H - 1, 0), min=0, max=H)
        c["window"] = _slider(W.IntSlider, "window p", 16, min=1, max=128)
        c["context"] = _slider(W.IntSlider, "context T", min(self.model_cfg.context_length, 64), continuous=False,
                               min=16, max=512, step=16)  # large T: H·T² mask cells, redraw on release
        c["lr"] = _slider(W.FloatLogSlider, "learning rate", 3e-3, continuous=False, base=10, min=-4, max=-1, step=0.1)
        self.views = {"masks": FigureView(self._masks_figure(), static=self.static)}
        for name in ("n_local", "window", "context"):
            c[name].observe(lambda _ch: self.update_masks(), names="value")
        self.training = TrainingPanel(
            self._specs, live=[MAX_LOGIT_VIEW], data=data, store=store, trainer_factory=trainer_factory,
            static=self.static, refresh_hz=refresh_hz,
        )
        self.views.update({f"train/{k}": v for k, v in self.training.views.items()})
        self.controls.update(self.training.controls)
        self.widget = W.VBox([
            W.HBox([W.VBox([c["n_local"], c["window"]]), W.VBox([c["context"], c["lr"]])]),
            self.views["masks"].widget,
            self.training.widget,
        ])

    def masks(self) -> np.ndarray:
        """Current per-head masks, bool (H, T, T)."""
        from spanviz import local_global

        c = self.controls
        mod = local_global.head_mask_mod(n_local=int(c["n_local"].value), window=int(c["window"].value))
        return local_global.dense_mask(mod, self.model_cfg.n_head, int(c["context"].value)).numpy()

    def _labels(self) -> list[str]:
        n_local, p = int(self.controls["n_local"].value), int(self.controls["window"].value)
        heads = range(self.model_cfg.n_head)
        return [f"head {h}: local (p={p})" if h < n_local else f"head {h}: global" for h in heads]

    def _masks_figure(self) -> go.Figure:
        return plots.head_masks_figure(self.masks(), labels=self._labels())

    def update_masks(self) -> None:
        """Redraw the masks for the current sliders (subplot titles change → layout annotations updated)."""
        labels = self._labels()

        def relabel(fig: go.Figure) -> None:
            for annotation, label in zip(fig.layout.annotations, labels):
                annotation.text = label

        self.views["masks"].update(plots.head_masks_data(self.masks()), build=self._masks_figure, layout=relabel)

    def _specs(self) -> list[RunSpec]:
        from spanviz import local_global

        c = self.controls
        data = self.training.data()
        T = int(c["context"].value)
        base = replace(self.model_cfg, vocab_size=data.vocab_size, context_length=T, n_local=0, window=None)
        train_cfg = self._train_cfg if self._train_cfg is not None else default_train_cfg()
        train_cfg = replace(train_cfg, lr=float(c["lr"].value))
        ls = replace(base, n_local=int(c["n_local"].value), window=int(c["window"].value))
        probe = local_global.LogitProbe(every=self.probe_every, entropy=False)
        label_ls = f"LS ({ls.n_local} local, p={ls.window})"
        return [RunSpec("MHSA", base, train_cfg, (probe,)), RunSpec(label_ls, ls, train_cfg, (probe,))]

    def train(self, blocking: bool | None = None) -> Runner:
        """Train MHSA vs LS (see :meth:`TrainingPanel.train`)."""
        return self.training.train(blocking=blocking)

    def stop(self, wait: bool = True) -> bool:
        return self.training.stop(wait=wait)


# ============================================================================================ FP8 panel
def fp8_series(history: History, layer: int | None = None) -> dict[str, Any]:
    """Arguments of :func:`plots.fp8_panel_figure` from an ``FP8Probe`` history.

    Args:
        history: with ``step`` and the ``fp8/…`` keys of :class:`spanviz.fp8.FP8Probe`.
        layer: one layer ℓ (keys ``fp8/L{ℓ}/…``); None = the worst layer (max over layers of observed max,
            bounds and overflows; min of scales).
    Returns:
        dict with ``steps``, ``observed``, ``bounds``, ``scales``, ``overflows`` (arrays over probed steps).
    Raises:
        ValueError: no FP8 keys in the history.
    """
    layers = sorted({int(k.split("/")[1][1:]) for k in history if k.startswith("fp8/L") and k.count("/") >= 2})
    if not layers:
        raise ValueError(f"history has no fp8/L<layer>/... keys (FP8Probe); keys: {sorted(history)[:10]}")
    picked = layers if layer is None else [layer]
    rows = [i for i, v in enumerate(history[f"fp8/L{picked[0]}/max_abs_logit"]) if v is not None]

    def col(name: str, reduce: Callable = np.max) -> np.ndarray:
        m = np.array([[history[f"fp8/L{ell}/{name}"][i] for ell in picked] for i in rows], dtype=float)
        return reduce(m, axis=1) if len(rows) else np.zeros(0)

    strategies = plots.keys_under(history, f"fp8/L{picked[0]}/scale")
    bound_names = {
        "worst case": "bound_worst_case", "rank-agnostic": "bound_agnostic", "rank-aware": "bound_rank_aware"
    }
    return {
        "steps": np.array([history["step"][i] for i in rows], dtype=float),
        "observed": col("max_abs_logit"),
        "bounds": {label: col(key) for label, key in bound_names.items()},
        "scales": {s: col(f"scale/{s}", np.min) for s in strategies},
        "overflows": {s: col(f"overflow/{s}", np.sum) for s in strategies},
    }


def _fp8_runs(histories: Mapping[str, History]) -> dict[str, Any] | None:
    for h in histories.values():
        if any(k.startswith("fp8/L") for k in h):
            return fp8_series(h)
    return None


def _fp8_data(histories: Mapping[str, History]) -> list[dict[str, Any]]:
    s = _fp8_runs(histories)
    return [] if s is None else plots.fp8_panel_data(**s)


def _fp8_build(histories: Mapping[str, History]) -> go.Figure:
    s = _fp8_runs(histories)
    if s is None:
        empty = np.zeros(0)
        s = {"steps": empty, "observed": empty, "bounds": {}, "scales": {}, "overflows": {}}
    return plots.fp8_panel_figure(**s)


FP8_VIEW = LiveView("fp8", _fp8_data, _fp8_build)


class FP8Panel:
    """Rank-aware FP8 logit bounds (arXiv 2602.18851; bounds are spanviz's reconstruction), interactively.

    Analytic view (instant): for random weights of one head (d_model, d_head from ``model_cfg``) the worst
    case, rank-agnostic and rank-aware bounds and the observed max |S| versus the rank r of W^Q W^Kᵀ
    (``fp8.random_bounds_vs_rank``), the picked r ringed; a table of the E4M3 scale each strategy would use at
    r with the δ and margin sliders. Train: a TinyGPT with rank-r queries, an LR spike (× factor at a step),
    live observed max logit vs bounds, scales and overflow counts per strategy (``FP8Probe``).

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
        train_cfg: Any = None,
        data: Any = None,
        store: Any = "auto",
        trainer_factory: Callable[[RunSpec, Any], TrainerLike] | None = None,
        static: bool | None = None,
        refresh_hz: float = 4.0,
    ) -> None:
        self.model_cfg = model_cfg or DEFAULT_PANEL_MODEL
        self._train_cfg = train_cfg
        self.static = use_static(static)
        dh = self.model_cfg.d_head
        self.controls: dict[str, W.Widget] = {}
        c = self.controls
        c["rank"] = _slider(W.IntSlider, "rank r", dh, min=1, max=dh)
        c["delta"] = _slider(W.FloatLogSlider, "δ", 1e-3, base=10, min=-9, max=-1, step=0.5)
        c["margin"] = _slider(W.IntSlider, "margin (2^m headroom)", 0, min=0, max=4)
        c["spike_step"] = _slider(W.IntSlider, "LR spike at step", 100, continuous=False, min=0, max=1000, step=10)
        c["spike_factor"] = _slider(W.FloatLogSlider, "LR spike ×", 10.0, continuous=False, base=10, min=0, max=2,
                                    step=0.25)
        c["spike_steps"] = _slider(W.IntSlider, "LR spike length", 5, continuous=False, min=1, max=50)
        self._rows_key: float | None = None
        self._rows: list[dict[str, float]] = []
        self.scales = W.HTML()
        self.views = {"bounds": FigureView(self._bounds_figure(), static=self.static)}
        self._update_scales()
        for name in ("rank", "delta", "margin"):
            c[name].observe(lambda _ch: self.update_bounds(), names="value")
        self.training = TrainingPanel(
            self._specs, live=[FP8_VIEW], data=data, store=store, trainer_factory=trainer_factory,
            static=self.static, refresh_hz=refresh_hz,
        )
        self.views.update({f"train/{k}": v for k, v in self.training.views.items()})
        self.controls.update(self.training.controls)
        self.widget = W.VBox([
            W.HBox([
                W.VBox([c["rank"], c["delta"], c["margin"]]),
                W.VBox([c["spike_step"], c["spike_factor"], c["spike_steps"]]),
            ]),
            W.HBox([self.views["bounds"].widget, self.scales]),
            self.training.widget,
        ])

    def rows(self) -> list[dict[str, float]]:
        """Bounds vs rank for r = 1..d_head at the current δ: ``fp8.random_bounds_vs_rank`` rows.

        The random weights, σ and observed max |S| do not depend on δ, so they are drawn once; a new δ only
        re-evaluates ``fp8.logit_bounds`` per rank (what keeps the δ slider instant).
        """
        from spanviz import fp8

        cfg, delta = self.model_cfg, float(self.controls["delta"].value)
        n = cfg.context_length
        if not self._rows:
            self._rows = fp8.random_bounds_vs_rank(cfg.d_model, cfg.d_head, range(1, cfg.d_head + 1), delta=delta,
                                                   n_tokens=n)
            self._rows_key = delta
        if delta != self._rows_key:
            for row in self._rows:
                b = fp8.logit_bounds(row["sigma"], cfg.d_model, cfg.d_head, r=int(row["r"]), n_pairs=n * n,
                                     n_keys=n, delta=delta)
                row.update(gamma=b["gamma"], worst_case=b["worst_case"], agnostic=b["agnostic"],
                           rank_aware=b["rank_aware"])
            self._rows_key = delta
        return self._rows

    def _bounds_args(self) -> dict[str, Any]:
        rows = self.rows()
        col = lambda k: np.array([row[k] for row in rows])  # noqa: E731
        return {
            "ranks": col("r"),
            "bounds": {"worst case": col("worst_case"), "rank-agnostic": col("agnostic"),
                       "rank-aware": col("rank_aware")},
            "observed": col("observed_max"),
            "r": int(self.controls["rank"].value),
        }

    def _bounds_figure(self) -> go.Figure:
        return plots.bound_vs_rank_figure(**self._bounds_args())

    def _update_scales(self) -> None:
        from spanviz import fp8

        r = int(self.controls["rank"].value)
        row = next(x for x in self.rows() if x["r"] == r)
        m = 2.0 ** float(self.controls["margin"].value)
        fmax = fp8.FP8_MAX["e4m3"]
        lines = []
        bound_keys = (("deterministic", "worst_case"), ("rank-agnostic", "agnostic"), ("rank-aware", "rank_aware"))
        for label, key in bound_keys:
            scale = fmax / (m * row[key]) if row[key] > 0 else 1.0
            used = row["observed_max"] * scale / fmax
            lines.append(f"<tr><td>{label}</td><td>{row[key]:.3g}</td><td>{scale:.3g}</td><td>{used:.1%}</td></tr>")
        self.scales.value = (
            f"<b>r = {r}</b>, γ = {row['gamma']:.3g}, σ = {row['sigma']:.3g}, observed max |S| = "
            f"{row['observed_max']:.3g}<table><tr><th>strategy</th><th>bound</th><th>E4M3 scale</th>"
            f"<th>range used</th></tr>{''.join(lines)}</table>"
        )

    def update_bounds(self) -> None:
        """Redraw the bounds-vs-rank view and the scale table for the current r, δ, margin."""
        self.views["bounds"].update(plots.bound_vs_rank_data(**self._bounds_args()), build=self._bounds_figure)
        self._update_scales()

    def _specs(self) -> list[RunSpec]:
        from spanviz import fp8

        c = self.controls
        data = self.training.data()
        r = int(c["rank"].value)
        cfg = replace(self.model_cfg, vocab_size=data.vocab_size, qk_rank=None if r == self.model_cfg.d_head else r)
        train_cfg = self._train_cfg if self._train_cfg is not None else default_train_cfg()
        factor = float(c["spike_factor"].value)
        start = min(int(c["spike_step"].value), train_cfg.steps - 1)
        train_cfg = replace(train_cfg, lr_spike_factor=factor, lr_spike_start=start,
                            lr_spike_steps=int(c["spike_steps"].value) if factor != 1.0 else 0)
        probe = fp8.FP8Probe(every=1, delta=float(c["delta"].value), margin=float(c["margin"].value))
        return [RunSpec(f"rank {r}", cfg, train_cfg, (probe,))]

    def train(self, blocking: bool | None = None) -> Runner:
        """Train with the LR spike and watch FP8 overflows (see :meth:`TrainingPanel.train`)."""
        return self.training.train(blocking=blocking)

    def stop(self, wait: bool = True) -> bool:
        return self.training.stop(wait=wait)
