"""The generic training part of every panel: Train / Continue / Stop, progress, status, errors, live figures of
the run histories, results-store replays (:class:`TrainingPanel`). What it trains and shows, and the panels'
defaults: :mod:`spanviz.widgets.specs`."""

from __future__ import annotations

import contextlib
import copy
import html
import io
import logging
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as W

from spanviz.model import GPTConfig, TinyGPT
from spanviz.runner import Job, Runner, TrainerLike
from spanviz.store.bundle import replay_note
from spanviz.store.results import Found
from spanviz.train import Trainer
from spanviz.train.config import count_parameters
from spanviz.train.record import describe_probe, run_config
from spanviz.widgets import kernel_runs
from spanviz.widgets.eta import StepRate, time_left
from spanviz.widgets.figure.view import FigureView, use_static
from spanviz.widgets.figure.widget import PlotlyFigure
from spanviz.widgets.specs import LOSS_VIEW, TRAIN_THREADS, History, LiveView, RunSpec, default_data, default_store

logger = logging.getLogger(__name__)


def check_store(store: Any) -> None:
    """Raise ``ValueError`` unless ``store`` is "auto", None, or a results store (``find`` or ``get``, and ``put``)."""
    if isinstance(store, str) and store == "auto" or store is None:
        return
    if not (callable(getattr(store, "put", None)) and (callable(getattr(store, "find", None))
                                                      or callable(getattr(store, "get", None)))):
        raise ValueError(f"store must be 'auto' (the default results store), None (no store) or a ResultsStore, got "
                         f"{store!r:.80}")


def _resolve_store(store: Any) -> Any:
    check_store(store)
    return default_store() if isinstance(store, str) and store == "auto" else store


def _default_trainer_factory(spec: RunSpec, data: Any) -> TrainerLike:
    return Trainer(spec.model_cfg, spec.train_cfg, data, probes=tuple(spec.probes))


class TrainingPanel:
    """Train / Continue / Stop, progress, status and live figures for runs described by :class:`RunSpec`s.

    Args:
        specs: ``fn() -> [RunSpec, ...]``, read when Train is pressed (so it sees the current sliders).
        live: the live :class:`LiveView`s in the order shown; :data:`LOSS_VIEW` is put first unless a view named
            "loss" is listed (e.g. :data:`~spanviz.widgets.specs.LOSS_DELTA_VIEW`).
        data: a ``spanviz.data.TokenData`` or ``fn() -> TokenData`` (called in the worker thread, once);
            default :func:`default_data`.
        store: a ``spanviz.store.ResultsStore`` (``find(config)`` or ``get(config)``, and ``put(record)``) — a
            configuration found there is replayed at once instead of trained, also when it was trained on another
            variant of the data (the status then says which); completed runs are put there. None = no store;
            "auto" = :func:`default_store` (the panels' default).
        keep_weights: also store each completed run's final weights, so that :meth:`replayed_model` can give the
            trained model after a replay (small models only: the tour's takes 2.9 MB).
        trainer_factory: ``fn(spec, data) -> trainer`` (default: ``spanviz.train.Trainer``).
        static: see :func:`use_static`. refresh_hz: live refresh rate (default 4 Hz).
        threads: torch intra-op threads while training (default :data:`TRAIN_THREADS`; None = leave torch's).
        hint: ``fn() -> str``, asked when a Train trains live: a line for the status while it trains (e.g. that the
            defaults would replay at once); "" for none.

    Buttons: **Train** starts afresh with the current settings (replaying what the store has); **Stop** ends the
    run after the current step; **Continue** (after Stop) trains the same runs on from where they stopped. Where
    exactly these runs are training already in this kernel — their page was closed and opened again, and its cells
    run again — Train follows them here instead of starting them a second time (:mod:`.kernel_runs`; the status
    says so, as it says when a panel is made while other runs train in the kernel).

    Attributes:
        widget: the VBox to display. controls: ``start``, ``resume``, ``stop`` buttons, ``progress``.
        status: HTML line (for a replay: the runs, steps, devices and — when not the student's — data, see
        :func:`spanviz.store.replay_note`). error: HTML area that shows a run's exception and traceback.
        views: name → :class:`FigureView`. captions: name → the HTML under a live figure whose view has a
        caption. runner: the :class:`spanviz.runner.Runner`. run_keys: the (label, settings) pairs of the last
        Train's runs. following: this panel follows runs another panel of this kernel started.
        found: label → the :class:`spanviz.store.Found` the last Train replayed (record, key, data differences).
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
        keep_weights: bool = False,
        hint: Callable[[], str] | None = None,
    ) -> None:
        self.specs, self.store, self.static = specs, _resolve_store(store), use_static(static)
        self.keep_weights = bool(keep_weights)
        self.found: dict[str, Found] = {}  # label → the stored run the last Train replayed
        self._data = data
        self.trainer_factory = trainer_factory or _default_trainer_factory
        self.live = list(live) if any(v.name == LOSS_VIEW.name for v in live) else [LOSS_VIEW, *live]
        self.views = {v.name: FigureView(v.build({}), static=self.static, name=f"train/{v.name}") for v in self.live}
        self._held = False  # a live update was skipped: the page had not taken in the one before
        self.hint, self._hint = hint, ""
        self.rate = StepRate()  # the measured step rate behind "about N s left"
        self.run_keys: frozenset[tuple[str, str]] = frozenset()
        self._made: dict[str, Any] = {}  # label → the trainer the last Train made (what the model is now)
        self.following = False
        self.runner = Runner(on_update=self._on_update, on_finish=self._on_finish, refresh_hz=refresh_hz,
                             threads=threads)
        start = W.Button(description="Train", icon="play", button_style="success", layout=W.Layout(width="110px"),
                         tooltip="train the current settings from scratch (replays runs the store has)")
        resume = W.Button(description="Continue", icon="forward", disabled=True, layout=W.Layout(width="110px"),
                          tooltip="train the stopped runs on from where they stopped")
        stop = W.Button(description="Stop", icon="stop", button_style="danger", disabled=True,
                        layout=W.Layout(width="110px"))
        progress = W.IntProgress(value=0, min=0, max=1, description="steps",
                                 style={"description_width": "initial"}, layout=W.Layout(width="200px"))
        start.on_click(lambda _b: self.train())
        resume.on_click(lambda _b: self.resume())
        stop.on_click(lambda _b: self.stop(wait=False))
        self.controls: dict[str, W.Widget] = {"start": start, "resume": resume, "stop": stop, "progress": progress}
        # The status takes the rest of the row at its full text width; when that does not fit it moves, whole, to
        # a line of its own (the row wraps) instead of breaking its text over two lines.
        self.status = W.HTML("ready: press Train", layout=W.Layout(width="auto", flex="1 0 auto", max_width="100%"))
        if elsewhere := kernel_runs.describe(kernel_runs.training_elsewhere(self)):
            self.status.value = html.escape(f"ready: press Train — still training in this kernel, from a page opened "
                                            f"before: {elsewhere}; Train with those settings follows it here")
        kernel_runs.register(self)
        self.error = W.HTML("")
        self.captions = {v.name: W.HTML("", layout=W.Layout(width="100%")) for v in self.live if v.caption}
        for name, caption in self.captions.items():
            caption.add_class(f"spanviz-caption-train-{name}")
        self._reports: list[tuple[W.Output, Callable[[dict[str, History]], Any]]] = []
        figures = []
        for v in self.live:
            figures.append(self.views[v.name].widget)
            if v.name in self.captions:
                figures.append(self.captions[v.name])
        self.widget = W.VBox([
            W.HBox([start, resume, stop, progress, self.status],
                   layout=W.Layout(flex_flow="row wrap", align_items="center")),
            self.error, *figures,
        ])

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
        return run_config(spec.model_cfg, spec.train_cfg, self.data(), spec.probes)

    def stored(self, spec: RunSpec) -> bool:
        """Whether Train would replay ``spec`` from the store (it has the run, possibly of other data)."""
        return self.store is not None and self._lookup(spec) is not None

    def _lookup(self, spec: RunSpec) -> Any:
        """The store's answer for a spec: a :class:`~spanviz.store.Found` (``find``), a record (a store with
        ``get`` only), or None."""
        config = self._store_config(spec)
        find = getattr(self.store, "find", None)
        return find(config) if callable(find) else self.store.get(config)

    def _jobs(self, specs: Sequence[RunSpec]) -> list[Job]:
        jobs, self.found, self._made = [], {}, {}
        for spec in specs:
            stored = self._lookup(spec) if self.store is not None else None
            if isinstance(stored, Found):
                self.found[spec.label] = stored
                if callable(getattr(self.store, "run_vocabulary", None)) and self.store.has_weights(stored.key):
                    self.store.run_vocabulary(stored, self.data())  # decided now: the status line says which words
                stored = stored.record
            if stored is not None:
                history = stored.history if hasattr(stored, "history") else stored["history"]
                jobs.append(Job(spec.label, replay=history))
                continue

            def make(spec: RunSpec = spec) -> TrainerLike:
                self._made[spec.label] = trainer = self.trainer_factory(spec, self.data())
                return trainer

            on_complete = None
            if self.store is not None:
                def on_complete(trainer: Any, spec: RunSpec = spec) -> None:
                    if self.keep_weights:
                        self.store.put(trainer.record, weights=trainer.model.state_dict())
                    else:
                        self.store.put(trainer.record)
            jobs.append(Job(spec.label, steps=spec.train_cfg.steps, make_trainer=make, on_complete=on_complete))
        trained = [spec for spec, job in zip(specs, jobs) if job.replay is None]
        if trained and callable(getattr(self.store, "check_room", None)):  # a full store found now, not after training
            self.store.check_room([s.train_cfg.steps for s in trained],
                                  sum(2 * count_parameters(s.model_cfg) for s in trained) if self.keep_weights else 0)
        return jobs

    def replayed_model(self, label: str) -> TinyGPT | None:
        """The final model of the run ``label`` when the last Train replayed it and the store kept its weights
        (see ``keep_weights``; stored in float16, given back in float32, on the CPU, in eval mode); else None
        (it trained here: read the trainer's model instead; or the replayed run's vocabulary cannot be had here —
        :meth:`~spanviz.store.results.ResultsStore.run_vocabulary` — and its model cannot be read with any words).
        Its ids are :meth:`replayed_tokenizer`'s words, which may not be your data's.

        Raises:
            ValueError: the kept weights do not fit the run's model configuration.
        """
        found = self.found.get(label)
        if found is None or label not in self.runner.replayed or not hasattr(self.store, "replay_weights"):
            return None
        replayed = self.store.replay_weights(found, self.data())  # None where its words cannot be had here
        if replayed is None:
            return None
        model = TinyGPT(GPTConfig.from_dict(found.record.config["model"]))
        try:
            model.load_state_dict(replayed.state)
        except RuntimeError as error:
            raise ValueError(f"the weights kept for {label!r} do not fit its model: {str(error)[:200]}") from None
        return model.eval()

    def models(self) -> dict[str, tuple[Any, Any]]:
        """``{label: (model, tokenizer)}`` of the last Train's runs, for :class:`~spanviz.widgets.sampling.SamplesView`
        (the same prompt and seed for every model): a replayed run's final weights where the store kept them, read
        with the words its ids mean (:meth:`replayed_model`, :meth:`replayed_tokenizer`); a run trained here as its
        model is now (a copy, on the CPU, with the data's tokenizer); a run that has neither is left out."""
        out: dict[str, tuple[Any, Any]] = {}
        for label in self.runner.histories:
            model = self.replayed_model(label)
            if model is not None:
                out[label] = (model, self.replayed_tokenizer(label))
            elif label in self._made and label not in self.runner.replayed and hasattr(self._made[label], "model"):
                out[label] = (copy.deepcopy(self._made[label].model).cpu().eval(), self.data().tokenizer)
        return out

    def replayed_tokenizer(self, label: str) -> Any:
        """The tokenizer whose words the ids of :meth:`replayed_model` mean, when the last Train replayed the run
        ``label``: your data's when it trained on your text, else its own, fitted again here on its split and
        checked by the text's sha256 (the one decision:
        :meth:`~spanviz.store.results.ResultsStore.run_vocabulary`). None when it trained here (use the data's
        tokenizer) or its vocabulary cannot be had here (then :meth:`replayed_model` is None too).
        """
        found = self.found.get(label)
        if found is None or label not in self.runner.replayed or not hasattr(self.store, "run_vocabulary"):
            return None
        vocabulary = self.store.run_vocabulary(found, self.data())
        return vocabulary.tokenizer if vocabulary.shown else None

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
            specs = list(self.specs())
            keys = frozenset(  # what the runs are, without loading the data
                (spec.label, repr((spec.model_cfg, spec.train_cfg, [describe_probe(p) for p in spec.probes])))
                for spec in specs)
            if (running := kernel_runs.same_runs(self, keys)) is not None:
                return self._follow(running)
            jobs = self._jobs(specs)
        except Exception as exc:  # noqa: BLE001 - shown, not lost
            self._show_error(exc, None)
            raise
        self.run_keys, self.following = keys, False
        self._running_controls()
        self.status.value = "starting…"
        self._hint = self._ask_hint() if any(job.replay is None for job in jobs) else ""
        self.rate.reset()
        self.runner.start(jobs, blocking=blocking)
        return self.runner

    def _follow(self, other: TrainingPanel) -> Runner:
        """Show and control the runs ``other`` (a panel of an earlier page) is training, from now on here."""
        self.runner, self.found, self._hint, self.rate = other.runner, other.found, other._hint, other.rate
        self.run_keys, self.following, self._made = other.run_keys, True, other._made
        self.runner.on_update, self.runner.on_finish = self._on_update, self._on_finish
        self._running_controls()
        self.status.value = "following the runs already training in this kernel (started from a page opened before)"
        return self.runner

    def resume(self, blocking: bool | None = None) -> Runner:
        """Continue the stopped runs from where they stopped (the Continue button); see :meth:`Runner.resume`."""
        if self.runner.running or not self.runner.resumable:
            return self.runner
        self.error.value = ""
        self._running_controls()
        self.status.value = "continuing…"
        self.rate.reset(self.runner.progress[0])
        self.runner.resume(blocking=blocking)
        return self.runner

    def _ask_hint(self) -> str:
        try:
            return self.hint() if self.hint is not None else ""
        except Exception:  # noqa: BLE001 - a missing hint must not keep a run from starting
            logger.exception("the status hint failed")
            return ""

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
            if view.caption is not None:
                text = view.caption(ready)
                if text != self.captions[view.name].value:
                    self.captions[view.name].value = text

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
        """What the last Train replayed: the runs, their steps, devices and — when not the student's — data."""
        r = self.runner
        if not r.replayed:
            return ""
        found = {label: self.found[label] for label in r.replayed if label in self.found}
        if len(found) == len(r.replayed):
            return replay_note(found)
        rows = {len(r.histories[label].get("step", [])) for label in r.replayed}  # a store with get() only
        steps = f" ({rows.pop()} steps{' each' * (len(r.replayed) > 1)})" if len(rows) == 1 else ""
        return f"replayed from the store: {', '.join(r.replayed)}{steps}"

    @property
    def replay_note(self) -> str:
        """The status line's account of the last replay (runs, steps, devices, data when not yours), or ""."""
        return self._replay_note()

    def _behind(self) -> bool:
        """A page shows a live figure and has not taken in its last update yet (:meth:`PlotlyFigure.behind`)."""
        return any(isinstance(v.widget, PlotlyFigure) and v.widget.behind() for v in self.views.values())

    def _on_update(self, runner: Runner, hold: bool = True) -> None:
        # Back-pressure: while the page has not taken in the last update, this one is skipped (the next carries the
        # newest data, and the run's end always draws): several notebooks training never send a busy browser more
        # than it takes in, so a slider's redraw does not wait behind a backlog of training updates.
        if hold and self._behind():
            self._held = True
            return
        self._held = False
        self.refresh()
        progress = self.controls["progress"]
        planned = list(runner.steps_planned.values())
        progress.max = max(planned, default=1) or 1
        progress.value = min((runner.steps_done[label] for label in runner.steps_planned), default=progress.max)
        parts = ["following the runs started from a page opened before"] if self.following and runner.running else []
        if runner.steps_planned:
            n = len(planned)
            done, total = runner.progress
            parts.append(f"{self._per_run()} steps per run ({n} run{'s' * (n > 1)}) · "
                         f"{runner.steps_per_s:.1f} steps/s")
            if runner.running and done < total:
                self.rate.add(done)
                parts.append(time_left(self.rate.seconds_left(total - done)))
                if self._hint:
                    parts.append(self._hint)
        if runner.replayed:
            parts.append(self._replay_note())
        self.status.value = html.escape(" · ".join(parts))

    def _on_finish(self, runner: Runner) -> None:
        if self._held:
            self._on_update(runner, hold=False)
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
