"""Notebook panels: ipywidgets controls + plotly figures, live training in a background thread.

Panels (each a class with ``.widget`` to display, ``.controls`` and ``.views`` dicts, and ``train()``):

* :class:`SpansPanel` — α0..α3, preset, layer/head: the score-gradient blocks of one head on a fixed batch,
  the T = 3 toy, principal angles; Train compares the α setting against the standard gradient and its seed
  noise.
* :class:`LocalGlobalPanel` — n_local, window p, context T, learning rate: per-head masks; Train compares
  MHSA with LS-attention (max logit per layer and loss, live).
* :class:`FP8Panel` — rank r, δ, margin: bounds vs rank (analytic); Train with an LR spike shows observed max
  logit, bounds, scales and overflow counts per strategy, live.
* :class:`TrainingPanel` — the generic part: Train / Continue / Stop, progress per run, status / error area,
  live loss curves with seed bands, results-store replays. The technique panels embed one.

Rendering: a :class:`FigureView` holds a :class:`spanviz.figure_widget.PlotlyFigure` (JupyterLab, Notebook 7;
the figure's whole state is synced, see that module for why not ``go.FigureWidget``) or, where custom widgets
render unreliably (Colab, VS Code), a static ``go.Figure`` re-rendered into an ``Output`` (:func:`use_static`;
override with ``static=`` or ``SPANVIZ_STATIC=1`` / ``0``). Updates push only trace data (``plots.*_data``);
a new trace structure shows a newly built figure in the same widget.

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import torch

from spanviz import plots
from spanviz.figure_widget import PlotlyFigure, figure_state
from spanviz.model import GPTConfig, TinyGPT
from spanviz.runner import Job, Runner, TrainerLike
from spanviz.threads import torch_threads

logger = logging.getLogger(__name__)

History = dict[str, list[Any]]


ANALYTIC_THREADS = 1
"""torch intra-op threads for the panels' analytic views (decompositions, masks, bounds): their tensors are tiny,
and on a busy CPU more threads spin-wait for each other — a 1 ms decomposition took 0.3–0.5 s with 2 threads
on a loaded 2-core machine."""

TRAIN_THREADS = 1
"""torch intra-op threads while a panel trains. The notebook models are small: on a quiet 2-core machine one
thread costs little, on a busy one (Binder, a workshop laptop, a shared server, where torch still starts one
thread per visible core) more threads wait for each other — the FP8 notebook trained at 0.6 steps/s with 2
threads and 4.7 with 1 on the loaded 2-core test machine."""

# The panels' model when none is given: the notebook size (d_head 32 < T 64, so spans are non-trivial).
DEFAULT_PANEL_MODEL = GPTConfig(vocab_size=8192, context_length=64, n_layer=2, n_head=4, d_model=128)


# ====================================================================================== rendering mode
def use_static(static: bool | None = None) -> bool:
    """Whether panels should draw static figures into an ``Output`` instead of live figure widgets.

    Precedence: the ``static`` argument; then the environment variable ``SPANVIZ_STATIC`` ("1"/"true" →
    static, "0"/"false" → widgets); then auto-detection: static in Colab (``google.colab`` imported) and in
    VS Code (``VSCODE_PID`` set), where custom widgets render unreliably.

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


DATA_KEYS = frozenset({"x", "y", "z", "i", "j", "k", "text", "customdata", "name"})
"""Trace properties a live update pushes; everything else (styles, axes, colors) is set when the figure is
built and is assumed to follow from the trace structure (a different structure rebuilds the figure)."""


class FigureView:
    """One figure on screen: a :class:`~spanviz.figure_widget.PlotlyFigure`, or a static ``go.Figure``
    re-rendered into an ``Output`` (:func:`use_static`).

    The view keeps the figure as plain data (``data``: trace dicts, ``layout``: a dict), exactly what the
    browser is sent. A rebuild (another trace structure: a preset, a replay) shows the new figure in the *same*
    widget, so it draws as reliably as an update.

    Args:
        fig: the first figure to show.
        static: see :func:`use_static`.
        name: names the view on the page: its widget gets the CSS class ``spanviz-view-<name>`` (for styling
            and for browser tests that check a control moves *its* figure).

    Attributes:
        widget: the ipywidget to place in a layout.
        data / layout: what is shown (trace dicts with numpy arrays; layout dict).
        figure: the shown state as a ``go.Figure`` (built on access; for tests and export).
        static: True in static mode.
        updates / rebuilds: counters (for tests and benchmarks).
    """

    def __init__(self, fig: go.Figure, static: bool | None = None, name: str | None = None) -> None:
        self.static = use_static(static)
        self.updates = 0
        self.rebuilds = 0
        self._lock = threading.RLock()
        self.data, self.layout = figure_state(fig)
        if self.static:
            self.widget = W.Output(layout=W.Layout(width="100%"))
            self._render()
        else:
            self.widget = PlotlyFigure(fig)
        if name:
            self.widget.add_class(f"spanviz-view-{name.replace('/', '-')}")

    @property
    def figure(self) -> go.Figure:
        return go.Figure(data=self.data, layout=self.layout)

    def _render(self) -> None:
        if self.static:
            self.widget.outputs = (_display_bundle(self.figure),)
        else:
            self.widget.show(self.data, self.layout)

    def _matches(self, data: Sequence[Mapping[str, Any]]) -> bool:
        if len(data) != len(self.data):
            return False
        return all(d.get("type", "scatter") == t.get("type", "scatter") for d, t in zip(data, self.data))

    def update(
        self,
        data: Sequence[Mapping[str, Any]],
        build: Callable[[], go.Figure] | None = None,
        layout: Mapping[str, Any] | None = None,
    ) -> str:
        """Show new trace data.

        Args:
            data: trace dicts as returned by a ``plots.*_data`` function (same order as the figure's traces);
                only their :data:`DATA_KEYS` are pushed.
            build: makes the full figure; called when the trace count or types differ from the current
                figure (e.g. another preset). Without it a mismatch raises.
            layout: top-level layout entries to replace in the same message (e.g. ``{"annotations": [...]}``).
        Returns:
            "patched" (data updated, one message to the browser) or "rebuilt".
        Raises:
            ValueError: structure mismatch and no ``build``.
        """
        with self._lock:
            self.updates += 1
            if not self._matches(data):
                if build is None:
                    raise ValueError(f"figure has {len(self.data)} traces, update has {len(data)}; "
                                     "pass build= to rebuild")
                self.replace(build())
                return "rebuilt"
            self.data = [{**old, **{k: v for k, v in new.items() if k in DATA_KEYS}}
                         for old, new in zip(self.data, data)]
            if layout is not None:
                self.layout = {**self.layout, **layout}
            self._render()
            return "patched"

    def replace(self, fig: go.Figure) -> None:
        """Show a new figure (new layout and traces) in the same widget."""
        with self._lock:
            self.rebuilds += 1
            self.data, self.layout = figure_state(fig)
            self._render()


@contextlib.contextmanager
def _computing(note: W.HTML, what: str) -> Iterator[None]:
    """Show "computing <what>…" in ``note`` while the block runs (a redraw slower than a blink: a preset, a
    context length). The message reaches the browser before the figure does."""
    note.value = f"<i style='color:#666'>computing {html.escape(what)}…</i>"
    try:
        yield
    finally:
        note.value = ""


def _side_by_side(*items: tuple[W.Widget, str]) -> W.HBox:
    """An HBox whose children get the given widths (e.g. "55%"), so none is pushed off the page."""
    for widget, width in items:
        widget.layout.width = width
        widget.layout.min_width = "0"
    return W.HBox([widget for widget, _ in items], layout=W.Layout(width="100%"))


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
    """Train / Continue / Stop, progress, status and live figures for runs described by :class:`RunSpec`s.

    Args:
        specs: ``fn() -> [RunSpec, ...]``, read when Train is pressed (so it sees the current sliders).
        live: the live :class:`LiveView`s in the order shown; :data:`LOSS_VIEW` is put first unless listed.
        data: a ``spanviz.data.TokenData`` or ``fn() -> TokenData`` (called in the worker thread, once);
            default :func:`default_data`.
        store: a ``spanviz.store.ResultsStore`` (``get(config)`` / ``put(record)``) — a configuration found
            there is replayed at once instead of trained; completed runs are put there. None = no store;
            "auto" = :func:`default_store` (the panels' default).
        trainer_factory: ``fn(spec, data) -> trainer`` (default: ``spanviz.train.Trainer``).
        static: see :func:`use_static`. refresh_hz: live refresh rate (default 4 Hz).
        threads: torch intra-op threads while training (default :data:`TRAIN_THREADS`; None = leave torch's).

    Buttons: **Train** starts afresh with the current settings (replaying what the store has); **Stop** ends the
    run after the current step; **Continue** (after Stop) trains the same runs on from where they stopped.

    Attributes:
        widget: the VBox to display. controls: ``start``, ``resume``, ``stop`` buttons, ``progress``.
        status: HTML line. error: HTML area that shows a run's exception and traceback.
        views: name → :class:`FigureView`. runner: the :class:`spanviz.runner.Runner`.
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
        threads: int | None = TRAIN_THREADS,
    ) -> None:
        self.specs, self.store, self.static = specs, _resolve_store(store), use_static(static)
        self._data = data
        self.trainer_factory = trainer_factory or _default_trainer_factory
        self.live = list(live) if LOSS_VIEW in live else [LOSS_VIEW, *live]
        self.views = {v.name: FigureView(v.build({}), static=self.static, name=f"train/{v.name}") for v in self.live}
        self.runner = Runner(on_update=self._on_update, on_finish=self._on_finish, refresh_hz=refresh_hz,
                             threads=threads)
        start = W.Button(description="Train", icon="play", button_style="success",
                         tooltip="train the current settings from scratch (replays runs the store has)")
        resume = W.Button(description="Continue", icon="forward", disabled=True,
                          tooltip="train the stopped runs on from where they stopped")
        stop = W.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        progress = W.IntProgress(value=0, min=0, max=1, description="steps", layout=W.Layout(width="260px"))
        start.on_click(lambda _b: self.train())
        resume.on_click(lambda _b: self.resume())
        stop.on_click(lambda _b: self.stop(wait=False))
        self.controls: dict[str, W.Widget] = {"start": start, "resume": resume, "stop": stop, "progress": progress}
        self.status = W.HTML("ready: press Train")
        self.error = W.HTML("")
        self._reports: list[tuple[W.Output, Callable[[dict[str, History]], Any]]] = []
        self.widget = W.VBox(
            [W.HBox([start, resume, stop, progress, self.status]), self.error, *[v.widget for v in self.views.values()]]
        )

    @property
    def replayed(self) -> list[str]:
        """Labels of the runs the last Train replayed from the store."""
        return list(self.runner.replayed)

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
        jobs = []
        for spec in specs:
            stored = None
            if self.store is not None:
                stored = self.store.get(self._store_config(spec))
            if stored is not None:
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
        """Start training the current specs afresh (replaying stored ones).

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
        self._running_controls()
        self.status.value = "starting…"
        self.runner.start(jobs, blocking=blocking)
        return self.runner

    def resume(self, blocking: bool | None = None) -> Runner:
        """Continue the stopped runs from where they stopped (the Continue button); see :meth:`Runner.resume`."""
        if self.runner.running or not self.runner.resumable:
            return self.runner
        self.error.value = ""
        self._running_controls()
        self.status.value = "continuing…"
        self.runner.resume(blocking=blocking)
        return self.runner

    def _running_controls(self) -> None:
        c = self.controls
        c["start"].disabled, c["resume"].disabled, c["stop"].disabled = True, True, False

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
                print(f"(run {self.runner.state} after {self._per_run()} steps per run)")
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
            title = None if view.title is None else {"title": {**self.views[view.name].layout.get("title", {}),
                                                               "text": view.title()}}
            self.views[view.name].update(view.data(ready), build=lambda view=view: view.build(ready), layout=title)

    def _per_run(self) -> str:
        """Steps done of steps planned, per run: "12/40", or "11–12/40" while runs of the same length are a
        step apart (they take turns); runs of different lengths are listed one by one."""
        r = self.runner
        planned = set(r.steps_planned.values())
        if len(planned) == 1:
            done = [r.steps_done[label] for label in r.steps_planned]
            low, high = min(done), max(done)
            return f"{high}/{planned.pop()}" if low == high else f"{low}–{high}/{planned.pop()}"
        return ", ".join(f"{label} {r.steps_done[label]}/{steps}" for label, steps in r.steps_planned.items())

    def _replay_note(self) -> str:
        r = self.runner
        if not r.replayed:
            return ""
        rows = {len(r.histories[label].get("step", [])) for label in r.replayed}
        steps = f" ({rows.pop()} steps{' each' * (len(r.replayed) > 1)})" if len(rows) == 1 else ""
        return f"replayed from the store: {', '.join(r.replayed)}{steps}"

    def _on_update(self, runner: Runner) -> None:
        self.refresh()
        progress = self.controls["progress"]
        planned = list(runner.steps_planned.values())
        progress.max = max(planned, default=1) or 1
        progress.value = min((runner.steps_done[label] for label in runner.steps_planned), default=progress.max)
        parts = []
        if runner.steps_planned:
            n = len(planned)
            parts.append(f"{self._per_run()} steps per run ({n} run{'s' * (n > 1)}) · "
                         f"{runner.steps_per_s:.1f} steps/s")
        if runner.replayed:
            parts.append(self._replay_note())
        self.status.value = html.escape(" · ".join(parts))

    def _on_finish(self, runner: Runner) -> None:
        c = self.controls
        c["start"].disabled, c["stop"].disabled = False, True
        c["resume"].disabled = not runner.resumable
        if runner.state == "error":
            self._show_error(runner.error, runner.error_text)
            self.status.value = f"<b style='color:#b00'>error</b> after {self._per_run()} steps per run"
        elif runner.steps_planned:
            note = " — Continue, or Train to start afresh" if runner.resumable else ""
            replay = f" · {self._replay_note()}" if runner.replayed else ""
            self.status.value = html.escape(f"{runner.state}: {self._per_run()} steps per run{note}{replay}")
        else:
            self.status.value = html.escape(self._replay_note())
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

    Train: the α setting against the standard gradient (spans=None), same seed, plus the standard gradient
    with the next seed (the seed noise). Live: the α run's validation loss as a change in percent against
    standard with the seed-noise band (the two loss curves differ by a fraction of a percent and coincide on
    screen), the loss curves, and the energy share of dS by order at the picked layer in the α run
    (``spans.SpanProbe`` every ``probe_every`` steps, on the standard and the α run).

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
        with torch_threads(ANALYTIC_THREADS):
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
        figures = {
            "blocks": plots.span_blocks_figure(self._blocks, self.alphas),
            "toy": plots.span_toy_figure(self.toy, self.alphas[:2]),
            "angles": plots.subspace_angles_figure(self._angles()),
        }
        self.views = {name: FigureView(fig, static=self.static, name=name) for name, fig in figures.items()}
        for name in ("alpha0", "alpha1", "alpha2", "alpha3"):
            c[name].observe(lambda _ch: self.update_alphas(), names="value")
        for name in ("preset", "layer", "head"):
            c[name].observe(lambda _ch: self.update_head(), names="value")
        self.busy = W.HTML("")
        self.probe_every, self._probe_label = probe_every, "-"
        self.training = TrainingPanel(
            self._specs,
            live=[LiveView("delta", self._delta_data, self._delta_build), LOSS_VIEW,
                  LiveView("energy", self._energy_data, self._energy_build, self._energy_title)],
            data=data,
            store=store,
            trainer_factory=trainer_factory, static=self.static, refresh_hz=refresh_hz,
        )
        self.views.update({f"train/{k}": v for k, v in self.training.views.items()})
        self.controls.update(self.training.controls)
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
            _side_by_side((self.views["toy"].widget, "55%"), (self.views["angles"].widget, "45%")),
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
            with torch_threads(ANALYTIC_THREADS):
                self._block_cache[key] = spans.decompose(*first, preset).numpy()
        return self._block_cache[key]

    def _layer_angles(self, layer: int) -> dict[str, np.ndarray]:
        """Principal angles (H, d_head) in radians, ascending, between the spans of Q, K, V; cached per layer."""
        from spanviz import spans

        if layer not in self._angle_cache:
            cap = self.captures[layer]
            q, k, v = (t[0] for t in (cap.q, cap.k, cap.v))  # (H, T, d_head): d_head-dim spans in R^T
            pairs = {"Q–K": (q, k), "Q–V": (q, v), "K–V": (k, v)}
            with torch_threads(ANALYTIC_THREADS):
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
        """Redraw the views that depend on α only (cached blocks rescaled, their titles say the α; the toy)."""
        a, view = self.alphas, self.views["blocks"]
        titles = {b["name"]: plots.span_block_title(b["name"], b["order"], a[b["order"]]) for b in self._blocks}
        annotations = [{**x, "text": titles.get(x["text"].split(" ")[0], x["text"])}
                       for x in view.layout.get("annotations", [])]
        view.update(plots.span_blocks_data(self._blocks, a), build=lambda: plots.span_blocks_figure(self._blocks, a),
                    layout={"annotations": annotations})
        self.views["toy"].update(plots.span_toy_data(self.toy, a[:2]))

    def update_head(self) -> None:
        """Recompute the blocks for the picked preset/layer/head and redraw (saying "computing…" meanwhile)."""
        with _computing(self.busy, "the blocks"):
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
        twin = replace(train_cfg, seed=train_cfg.seed + 1)
        return [RunSpec("standard", base, train_cfg, (probe,)),
                RunSpec(f"standard, seed {twin.seed}", base, twin),
                RunSpec(cfg.label(), replace(base, spans=cfg), train_cfg, (probe,))]

    def _delta(self, histories: Mapping[str, History]) -> dict[str, Any] | None:
        """Steps where all three runs were evaluated, Δ val loss (%) of the α run against standard, and the
        same for the standard run with the next seed (the noise band)."""
        labels = list(histories)
        if "standard" not in histories or len(labels) < 3:
            return None
        (twin,) = [k for k in labels if k.startswith("standard, seed")]
        alpha = labels[-1]
        measured = [dict(zip(*plots.series(histories[k], "val_loss"))) for k in ("standard", twin, alpha)]
        steps = sorted(set(measured[0]) & set(measured[1]) & set(measured[2]))
        base = np.array([measured[0][t] for t in steps])

        def change(m: dict) -> np.ndarray:
            return 100.0 * (np.array([m[t] for t in steps]) - base) / base

        return {"steps": np.array(steps, dtype=float), "changes": {alpha: change(measured[2])},
                "noise": change(measured[1])}

    def _delta_data(self, histories: Mapping[str, History]) -> list[dict[str, Any]]:
        d = self._delta(histories)
        return [] if d is None else plots.relative_change_data(**d)

    def _delta_build(self, histories: Mapping[str, History]) -> go.Figure:
        d = self._delta(histories) or {"steps": np.zeros(0), "changes": {}, "noise": None}
        return plots.relative_change_figure(
            **d, title="validation loss against standard: below 0 = better; gray band = seed noise "
                       "(standard with the next seed)")

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
        return f"energy of dS by order in the run {self._probe_label}, layer {self.controls['layer'].value}"

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


MASK_ZOOM = 24
"""The masks' zoom row shows the first MASK_ZOOM positions cell by cell (a window of a few keys is readable)."""


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
        self.views = {"masks": FigureView(self._masks_figure(), static=self.static, name="masks")}
        for name in ("n_local", "window"):
            c[name].observe(lambda _ch: self.update_masks(), names="value")
        self.busy = W.HTML("")
        c["context"].observe(lambda _ch: self.update_context(), names="value")
        self.training = TrainingPanel(
            self._specs, live=[MAX_LOGIT_VIEW, LOSS_VIEW], data=data, store=store, trainer_factory=trainer_factory,
            static=self.static, refresh_hz=refresh_hz,
        )
        self.views.update({f"train/{k}": v for k, v in self.training.views.items()})
        self.controls.update(self.training.controls)
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
        from spanviz import local_global

        c = self.controls
        mod = local_global.head_mask_mod(n_local=int(c["n_local"].value), window=int(c["window"].value))
        with torch_threads(ANALYTIC_THREADS):
            return local_global.dense_mask(mod, self.model_cfg.n_head, int(c["context"].value)).numpy()

    def _labels(self) -> list[str]:
        n_local, p = int(self.controls["n_local"].value), int(self.controls["window"].value)
        heads = range(self.model_cfg.n_head)
        return [f"head {h}: local (p={p})" if h < n_local else f"head {h}: global" for h in heads]

    def _masks_title(self) -> str:
        return f"attention masks per head at T = {int(self.controls['context'].value)} (rows: query i, columns: key j)"

    def _masks_figure(self) -> go.Figure:
        return plots.head_masks_figure(self.masks(), labels=self._labels(), zoom=MASK_ZOOM, title=self._masks_title())

    def update_context(self) -> None:
        """Redraw the masks at a new context T (other sizes and titles: a new figure in the same widget)."""
        with _computing(self.busy, "the masks"):
            self.views["masks"].replace(self._masks_figure())

    def update_masks(self) -> None:
        """Redraw the masks for n_local and window p (the heads' subplot titles follow); a new context T
        rebuilds the figure instead (other sizes, other titles)."""
        view, labels = self.views["masks"], self._labels()
        annotations = list(view.layout["annotations"])
        annotations[: len(labels)] = [{**a, "text": label} for a, label in zip(annotations, labels)]
        view.update(plots.head_masks_data(self.masks(), zoom=MASK_ZOOM), build=self._masks_figure,
                    layout={"annotations": annotations})

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




class FP8Panel:
    """Rank-aware FP8 logit bounds (arXiv 2602.18851; bounds are spanviz's reconstruction), interactively.

    Analytic view (instant): for random weights of one head (d_model, d_head from ``model_cfg``) the worst
    case, rank-agnostic and rank-aware bounds (times 2^margin: the largest |S| the scale picked from each
    holds) and the observed max |S| versus the rank r of W^Q W^Kᵀ (``fp8.random_bounds_vs_rank``), the
    picked r ringed; a table of the E4M3 scale each strategy would use at
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
        self.views = {"bounds": FigureView(self._bounds_figure(), static=self.static, name="bounds")}
        self._update_scales()
        for name in ("rank", "delta", "margin"):
            c[name].observe(lambda _ch: self.update_bounds(), names="value")
        self._spike, self._max_step = self._planned_spike()
        self.training = TrainingPanel(
            self._specs, live=[LiveView("fp8", _fp8_data, self._fp8_build), LOSS_VIEW], data=data, store=store,
            trainer_factory=trainer_factory, static=self.static, refresh_hz=refresh_hz,
        )
        for name in ("spike_step", "spike_factor", "spike_steps"):
            c[name].observe(lambda _ch: self._mark_spike(), names="value")
        self.views.update({f"train/{k}": v for k, v in self.training.views.items()})
        self.controls.update(self.training.controls)
        note = W.HTML(
            "<small>The LR spike sliders apply to the next <b>Train</b>; the orange band marks the spike. The jump "
            "of the max logit in the first few dozen steps, and the bump in the loss with it, is the heads starting "
            "to attend (their logits start near 0 and grow as the learning rate warms up), not the spike.</small>")
        self.widget = W.VBox([
            W.HBox([
                W.VBox([c["rank"], c["delta"], c["margin"]]),
                W.VBox([c["spike_step"], c["spike_factor"], c["spike_steps"]]),
            ]),
            _side_by_side((self.views["bounds"].widget, "64%"), (self.scales, "36%")),
            note,
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
            with torch_threads(ANALYTIC_THREADS):
                self._rows = fp8.random_bounds_vs_rank(cfg.d_model, cfg.d_head, range(1, cfg.d_head + 1),
                                                       delta=delta, n_tokens=n)
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
        """Arguments of ``plots.bound_vs_rank_*``: each bound times 2^margin — the largest |S| the E4M3 scale
        picked from that bound can hold (s = 448 / (2^margin · B)); at margin 0, the bounds themselves."""
        rows = self.rows()
        m = int(self.controls["margin"].value)
        headroom, suffix = 2.0**m, f" × 2^{m}" if m else ""
        col = lambda k: np.array([row[k] for row in rows])  # noqa: E731
        names = {"worst case": "worst_case", "rank-agnostic": "agnostic", "rank-aware": "rank_aware"}
        return {
            "ranks": col("r"),
            "bounds": {f"{name}{suffix}": headroom * col(key) for name, key in names.items()},
            "observed": col("observed_max"),
            "r": int(self.controls["rank"].value),
        }

    def _bounds_figure(self) -> go.Figure:
        return plots.bound_vs_rank_figure(
            **self._bounds_args(), title="largest |S| each strategy's E4M3 scale holds (bound × 2^margin) vs rank r")

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
        train_cfg = self._spiked_train_cfg()
        self._spike, self._max_step = self._planned_spike(train_cfg)
        probe = fp8.FP8Probe(every=1, delta=float(c["delta"].value), margin=float(c["margin"].value))
        return [RunSpec(f"rank {r}", cfg, train_cfg, (probe,))]

    def _spiked_train_cfg(self) -> Any:
        c = self.controls
        train_cfg = self._train_cfg if self._train_cfg is not None else default_train_cfg()
        factor = float(c["spike_factor"].value)
        start = min(int(c["spike_step"].value), train_cfg.steps - 1)
        return replace(train_cfg, lr_spike_factor=factor, lr_spike_start=start,
                       lr_spike_steps=int(c["spike_steps"].value) if factor != 1.0 else 0)

    def _planned_spike(self, train_cfg: Any = None) -> tuple[tuple[int, int, float] | None, int]:
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

    def _fp8_build(self, histories: Mapping[str, History]) -> go.Figure:
        s = _fp8_runs(histories)
        if s is None:
            empty = np.zeros(0)
            s = {"steps": empty, "observed": empty, "bounds": {}, "scales": {}, "overflows": {}}
        return plots.fp8_panel_figure(**s, spike=self._spike, max_step=self._max_step)

    def train(self, blocking: bool | None = None) -> Runner:
        """Train with the LR spike and watch FP8 overflows (see :meth:`TrainingPanel.train`)."""
        return self.training.train(blocking=blocking)

    def stop(self, wait: bool = True) -> bool:
        return self.training.stop(wait=wait)
