"""Background training for the widget panels: Start / Stop, throttled refreshes, errors kept, replays.

A :class:`Runner` trains one or more *jobs* side by side (one optimizer step of each in turn, so their curves
grow together) in a daemon thread, or in the caller's thread when blocking. It never touches widgets
itself: it calls ``on_update(runner)`` at most ``refresh_hz`` times per second (and once at the end) and
``on_finish(runner)`` when the run ends — normally, stopped, or with an error. The panel draws in those
callbacks.

Where the callbacks run: on the event loop of the thread that called :meth:`Runner.start` when it has one
(in a notebook, the kernel's loop: Train buttons and cells run there), handed over with
``loop.call_soon_threadsafe``; otherwise (blocking mode, plain scripts, tests) directly. Widget state should
only change on the kernel's loop: ipywidgets is not thread-safe, and it merges the messages a widget sends
while the kernel handles one from the browser for that widget.

The user interface wins over training: a background training thread lowers its own CPU priority
(:func:`lower_thread_priority`, :data:`TRAIN_NICE`), so the kernel's own thread — which handles a slider's message
and computes the redraw — and the browser drawing it get the CPU first when both want it; on an idle machine
training runs as fast as before.

Why a thread: a blocking training loop in a notebook cell streams plot updates, but a Stop click is only
handled after the cell ends (the kernel reads the click's message once the cell's code returns). Scripts and
notebook execution in CI want the blocking path instead: ``start(..., blocking=True)`` or the environment
variable ``SPANVIZ_BLOCKING=1``.

A job either trains (``make_trainer`` gives an object with ``step(n) -> list[row dict]``, e.g.
:class:`spanviz.train.Trainer`) or replays a stored history (``replay``), which appears at the first refresh
without training. A stopped run keeps its trainers: :meth:`Runner.resume` continues it (Continue button).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

from spanviz.contexts import torch_threads
from spanviz.settings import ENV_BLOCKING, env_flag
from spanviz.train.record import append_rows  # the one history appender; re-exported for the panels

logger = logging.getLogger(__name__)

STATES = ("idle", "running", "done", "stopped", "error")

TRAIN_NICE = 10
"""The nice value a background training thread gives itself (Linux, where the priority is per thread; elsewhere
nothing changes). At 10 a thread gets about a tenth of the CPU share of a normal-priority one that wants the CPU at
the same time — the kernel thread handling a control, the browser, the server (within one scheduling group: see
:func:`lower_thread_priority`) — and all the CPU nobody else wants. 19 (the lowest) starved training behind any
other busy program (measured once, under load, while the panels were tuned; not recomputed by a test)."""


class TrainerLike(Protocol):
    """What the runner needs from a trainer (``spanviz.train.Trainer`` satisfies it)."""

    def step(self, n: int = 1) -> list[dict[str, Any]]: ...


@dataclass
class Job:
    """One curve family of a panel run.

    Attributes:
        label: name shown in legends; unique within a run.
        steps: optimizer steps to train (>= 1); ignored for a replay.
        make_trainer: builds the trainer; called in the worker thread (so model construction does not block
            the notebook). None for a replay.
        replay: a stored history (mapping of equal-length lists) shown at once instead of training.
        on_complete: called with the trainer after its last step when the job ran to the end (not stopped,
            no error), e.g. to put the run record into a results store.
    """

    label: str
    steps: int = 0
    make_trainer: Callable[[], TrainerLike] | None = None
    replay: Mapping[str, Sequence[Any]] | None = None
    on_complete: Callable[[TrainerLike], None] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label:
            raise ValueError(f"label must be a non-empty string, got {self.label!r}")
        if (self.make_trainer is None) == (self.replay is None):
            raise ValueError(f"job {self.label!r}: give exactly one of make_trainer and replay")
        if self.replay is None and (isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1):
            raise ValueError(f"job {self.label!r}: steps must be an integer >= 1, got {self.steps!r}")


class Runner:
    """Trains jobs step by step in a background thread (or blocking), with throttled refresh callbacks.

    Args:
        on_update: ``fn(runner)``, called at most ``refresh_hz`` times per second while a run trains, once at
            the start of a run with replays, and once after the last step; read :meth:`snapshot` there.
        on_finish: ``fn(runner)``, called once when a run ends (state "done", "stopped" or "error").
        refresh_hz: maximum refresh rate (> 0), default 4 Hz.
        threads: torch intra-op threads while training (restored afterwards; torch's setting is global to
            the process); None = leave torch's setting.
        nice: the nice value the background thread gives itself (:data:`TRAIN_NICE`; 0 to 19; None = leave its
            priority). Blocking runs never change the caller's priority (it could not be raised back).
    Raises:
        ValueError: refresh_hz <= 0, threads < 1, nice outside 0..19.

    Attributes:
        state: one of :data:`STATES`. histories: ``{label: history}`` (read with :meth:`snapshot`).
        steps_done: ``{label: steps}`` trained per job in this run (a replay counts 0).
        steps_planned: ``{label: steps}`` for the training jobs. replayed: labels of the replayed jobs.
        error / error_text: the exception of a failed run and its traceback.

    Thread safety: :meth:`start`, :meth:`resume`, :meth:`stop`, :meth:`snapshot` may be called from any
    thread. Exceptions raised by a trainer or by ``on_update`` end the run with state "error" (``on_finish``
    still runs, so a panel can show it).
    """

    def __init__(self, on_update: Callable[[Runner], None] | None = None,
                 on_finish: Callable[[Runner], None] | None = None, refresh_hz: float = 4.0,
                 threads: int | None = None, nice: int | None = TRAIN_NICE) -> None:
        if not refresh_hz > 0:
            raise ValueError(f"refresh_hz must be > 0, got {refresh_hz!r}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be an integer >= 1 or None, got {threads!r}")
        if nice is not None and (isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= 19):
            raise ValueError(f"nice must be an integer in 0..19 or None, got {nice!r}")
        self.on_update, self.on_finish, self.refresh_hz = on_update, on_finish, float(refresh_hz)
        self.threads, self.nice = threads, nice
        self.state = "idle"
        self.error: BaseException | None = None
        self.error_text: str | None = None
        self.histories: dict[str, dict[str, list[Any]]] = {}
        self.steps_done: dict[str, int] = {}
        self.steps_planned: dict[str, int] = {}
        self.replayed: list[str] = []
        self.refreshes = 0
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self._started_with = 0  # steps done before this run (or continuation) started
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._jobs: list[Job] = []
        self._trainers: dict[str, TrainerLike] = {}  # kept after Stop, for resume()
        self._loop: asyncio.AbstractEventLoop | None = None  # where callbacks run; None = directly
        self._update_pending = threading.Event()  # an on_update is queued on the loop: don't queue another

    # ------------------------------------------------------------------------------------------- control
    @property
    def running(self) -> bool:
        """True while a run is in progress."""
        return self.state == "running"

    @property
    def resumable(self) -> bool:
        """True when the last run was stopped with training jobs left unfinished (see :meth:`resume`)."""
        return self.state == "stopped" and any(self.steps_done[label] < steps
                                               for label, steps in self.steps_planned.items())

    def start(self, jobs: Sequence[Job], blocking: bool | None = None, raise_errors: bool | None = None) -> None:
        """Start a run of ``jobs`` (a fresh start: earlier histories and trainers are dropped).

        Args:
            jobs: at least one :class:`Job`, labels unique.
            blocking: run in the caller's thread and return when done; None = the environment variable
                ``SPANVIZ_BLOCKING`` (read by :func:`spanviz.settings.env_flag`).
            raise_errors: re-raise an error of the run after recording it (default: when blocking, so that
                notebook execution in CI fails loudly).
        Raises:
            RuntimeError: a run is already in progress.
            ValueError: no jobs or duplicate labels; a ``SPANVIZ_BLOCKING`` that is not a true/false word.
        """
        jobs = list(jobs)
        if not jobs:
            raise ValueError("jobs must hold at least one Job, got none")
        labels = [j.label for j in jobs]
        if len(set(labels)) != len(labels):
            raise ValueError(f"job labels must be unique, got {labels}")
        with self._lock:
            if self.running:
                raise RuntimeError("a run is already in progress; stop it first")
            self.histories = {j.label: {k: list(v) for k, v in (j.replay or {}).items()} for j in jobs}
            self.steps_done = {j.label: 0 for j in jobs}
            self.steps_planned = {j.label: j.steps for j in jobs if j.replay is None}
            self.replayed = [j.label for j in jobs if j.replay is not None]
            self._jobs, self._trainers = jobs, {}
            self._begin()
        self._launch(blocking, raise_errors, replays=bool(self.replayed))

    def resume(self, blocking: bool | None = None, raise_errors: bool | None = None) -> None:
        """Continue a stopped run: the same trainers go on from their last step; histories grow. Raises
        ``RuntimeError`` when there is nothing to continue (no run was stopped, or every job had finished)."""
        with self._lock:
            if not self.resumable:
                raise RuntimeError(f"nothing to continue: the last run is {self.state!r}, not a stopped one with "
                                   "steps left; start a new run instead")
            self._begin()
        self._launch(blocking, raise_errors, replays=False)

    def _begin(self) -> None:
        self.state = "running"
        self.error, self.error_text = None, None
        self.refreshes = 0
        self.started_at, self.finished_at = time.perf_counter(), None
        self._started_with = sum(self.steps_done.values())
        self._stop.clear()

    def _launch(self, blocking: bool | None, raise_errors: bool | None, replays: bool) -> None:
        blocking = bool(env_flag(ENV_BLOCKING)) if blocking is None else bool(blocking)
        raise_errors = blocking if raise_errors is None else bool(raise_errors)
        self._loop = None if blocking else _running_loop()
        self._update_pending.clear()
        if blocking:
            self._work(replays)
            if raise_errors and self.error is not None:
                raise self.error
        else:
            self._thread = threading.Thread(target=self._background, args=(replays,), name="spanviz-runner",
                                            daemon=True)
            self._thread.start()

    def stop(self, wait: bool = True, timeout: float = 2.0) -> bool:
        """Ask the run to stop after the current optimizer step of its current job; with ``wait``, block until the
        worker thread ended (at most ``timeout`` seconds). Returns True when no run is in progress any more."""
        self._stop.set()
        if wait:
            self.join(timeout)
        return not self.running

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the background thread; returns True when the run has ended."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        return not self.running

    def snapshot(self) -> dict[str, dict[str, list[Any]]]:
        """A copy of every job's history so far: ``{label: {key: list}}`` (safe to read from any thread)."""
        with self._lock:
            return {label: {k: list(v) for k, v in h.items()} for label, h in self.histories.items()}

    @property
    def progress(self) -> tuple[int, int]:
        """(steps done, steps planned) summed over the training jobs (replays count 0)."""
        return sum(self.steps_done.values()), sum(self.steps_planned.values())

    @property
    def steps_per_s(self) -> float:
        """Optimizer steps per second (all jobs) since this run (or continuation) started; 0 before any step."""
        if self.started_at is None:
            return 0.0
        end = self.finished_at or time.perf_counter()
        done = sum(self.steps_done.values()) - self._started_with
        return done / (end - self.started_at) if end > self.started_at else 0.0

    # -------------------------------------------------------------------------------------------- worker
    def _refresh(self) -> None:
        self.refreshes += 1
        if self.on_update is None:
            return
        if self._loop is None:
            self.on_update(self)
        elif not self._update_pending.is_set():  # coalesce: the queued update will read the newest data
            self._update_pending.set()
            self._call_on_loop(self._deliver_update)

    def _deliver_update(self) -> None:
        self._update_pending.clear()
        try:
            self.on_update(self)
        except Exception as exc:  # noqa: BLE001 - shown in the panel like an error of the run
            self.error, self.error_text = exc, traceback.format_exc()
            self.state = "error"
            self._stop.set()
            logger.warning("spanviz live update failed: %s", exc)

    def _finish(self) -> None:
        if self.on_finish is None:
            return
        if self._loop is not None:
            self._call_on_loop(self._deliver_finish)
        else:
            self._deliver_finish()

    def _deliver_finish(self) -> None:
        try:
            self.on_finish(self)
        except Exception:  # noqa: BLE001
            logger.exception("on_finish callback failed")

    def _call_on_loop(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the captured event loop (FIFO with earlier calls); directly if the loop is gone."""
        try:
            self._loop.call_soon_threadsafe(fn)
        except RuntimeError:  # the loop was closed (kernel shutting down): nobody is watching, just run it
            fn()

    def _background(self, replays: bool) -> None:
        lower_thread_priority(self.nice)
        self._work(replays)

    def _work(self, replays: bool) -> None:
        with torch_threads(self.threads) if self.threads is not None else nullcontext():
            self._train(replays)

    def _train(self, replays: bool) -> None:
        period = 1.0 / self.refresh_hz
        last = float("-inf")
        active = [j for j in self._jobs if j.replay is None and self.steps_done[j.label] < j.steps]
        try:
            if replays:
                self._refresh()  # replays appear at once
                last = time.perf_counter()
            while active and not self._stop.is_set():
                for job in list(active):
                    if self._stop.is_set():
                        break
                    trainer = self._trainers.get(job.label)
                    if trainer is None:
                        trainer = job.make_trainer()
                        with self._lock:
                            self._trainers[job.label] = trainer
                        if self._stop.is_set():  # stop() may have run while the trainer was being built
                            break
                    rows = trainer.step(1)
                    with self._lock:
                        append_rows(self.histories[job.label], rows)
                        self.steps_done[job.label] += len(rows)
                    finished = self.steps_done[job.label] >= job.steps
                    if finished and job.on_complete is not None:
                        job.on_complete(trainer)
                    if finished or not rows:
                        active.remove(job)
                    now = time.perf_counter()
                    if now - last >= period:
                        self._refresh()
                        last = time.perf_counter()
            self._refresh()
            if self.error is None:  # a failed live update (delivered on the loop) has set "error" already
                self.state = "stopped" if self._stop.is_set() and active else "done"
        except Exception as exc:  # noqa: BLE001 - everything is shown in the panel, nothing is lost
            self.error, self.error_text = exc, traceback.format_exc()
            self.state = "error"
            logger.warning("spanviz run failed: %s", exc)
        finally:
            self.finished_at = time.perf_counter()
            if self.state != "stopped":
                with self._lock:
                    self._trainers = {}
            self._finish()


def lower_thread_priority(nice: int | None) -> int | None:
    """Give the calling thread the nice value ``nice`` unless it is nicer already (Linux: ``os.setpriority`` on the
    thread's native id sets that thread's priority only). Returns the thread's nice value afterwards, or None where
    per-thread priorities are not available (other systems) or ``nice`` is None. Never raises: a refused change is
    logged and training goes on at the old priority.

    One limit: where Linux schedules each session as a group (autogroup, ``/proc/sys/kernel/sched_autogroup_enabled``
    = 1, and Jupyter starts every kernel in a session of its own), a nice value ranks threads only *within* their
    group — the kernel's own thread still wins over its training thread, but a training kernel as a whole keeps a
    group's share against the browser. What keeps the browser from falling behind several training kernels is the
    back-pressure of live updates (:meth:`spanviz.widgets.figure.widget.PlotlyFigure.behind`).
    """
    if nice is None or not sys.platform.startswith("linux"):
        return None
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        if current < nice:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        return os.getpriority(os.PRIO_PROCESS, tid)
    except OSError as exc:
        logger.info("spanviz: could not lower the training thread's priority: %s", exc)
        return None


def _in_kernel() -> bool:
    """True inside a Jupyter kernel (where widgets live and the kernel's loop runs cells and messages)."""
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return shell is not None and hasattr(shell, "kernel")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The kernel's event loop when called inside a kernel (from a cell or a widget callback), else None.

    Outside a kernel, a loop that merely looks running (e.g. one held by another library's sync API) may
    never process our callbacks, so we call them directly there.
    """
    if not _in_kernel():
        return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
