"""The one base class of the technique panels: what SpansPanel, LocalGlobalPanel and FP8Panel share."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import ipywidgets as W
from threadpoolctl import ThreadpoolController

from spanviz.contexts import torch_threads
from spanviz.model import GPTConfig
from spanviz.runner import Runner, TrainerLike
from spanviz.train import TrainConfig
from spanviz.validators import check_int
from spanviz.widgets.defaults import Defaults
from spanviz.widgets.figure.view import FigureView, use_static
from spanviz.widgets.figure.widget import PlotlyFigure
from spanviz.widgets.specs import LiveView, RunSpec, default_train_cfg
from spanviz.widgets.training import TrainingPanel, check_store

ANALYTIC_THREADS = 1
"""torch intra-op threads and numpy BLAS threads for the panels' analytic views (decompositions, masks, bounds):
their tensors are tiny, and on a busy CPU more threads spin-wait for each other — a 1 ms decomposition took
0.3–0.5 s with 2 threads on a loaded 2-core machine, and numpy's norms of a T 128 block ran on two OpenBLAS
threads that waited on each other (45 ms per α move against 6.8 ms on one)."""

_BLAS: ThreadpoolController | None = None


@contextlib.contextmanager
def analytic_threads() -> Iterator[None]:
    """Within the block, torch and numpy's BLAS (and OpenMP) pools use :data:`ANALYTIC_THREADS` threads, restored
    afterwards — what every panel callback runs under, so no slider waits on a worker thread. The pools are found
    once per process (threadpoolctl, about 25 ms); each use then costs microseconds."""
    global _BLAS
    if _BLAS is None:
        _BLAS = ThreadpoolController()
    with torch_threads(ANALYTIC_THREADS), _BLAS.limit(limits=ANALYTIC_THREADS, user_api="blas"):
        yield

PANEL_CLASS = "spanviz-panel"
"""CSS class of a panel's box: a figure's busy state (static/figure.js) covers the controls inside it."""

_DISPLAYS = (W.IntProgress, W.FloatProgress, W.HTML, W.HTMLMath, W.Label, W.Valid)
"""Value widgets that only display (changed by the kernel, never by a person): no settle after them."""

DEFAULT_PANEL_MODEL = GPTConfig(vocab_size=8192, context_length=64, n_layer=2, n_head=4, d_model=128)
"""The panels' model when none is given: the notebook size (d_head 32 < T 64, so spans are non-trivial)."""


def check_panel_args(model_cfg: Any, train_cfg: Any, store: Any, probe_every: Any) -> None:
    """A panel's arguments, checked before anything is built (``model_cfg={}`` was read as the default model,
    ``store='bogus'`` failed at the first Train, ``probe_every=0`` never probed).

    Raises:
        ValueError: ``model_cfg`` not a GPTConfig or None, ``train_cfg`` not a TrainConfig or None, ``store`` not
            "auto", None or a results store (``find`` or ``get``, and ``put``), ``probe_every`` not an int >= 1.
    """
    for name, value, cls in (("model_cfg", model_cfg, GPTConfig), ("train_cfg", train_cfg, TrainConfig)):
        if value is not None and not isinstance(value, cls):
            raise ValueError(f"{name} must be a {cls.__name__} or None (the panel's default), got {value!r:.80}"
                             f"{' — build one: ' + cls.__name__ + '(**d)' if isinstance(value, dict) else ''}")
    check_store(store)
    if probe_every is not None:
        check_int("probe_every", probe_every, 1)


class Panel:
    """A technique panel: controls and analytic views on top, a :class:`TrainingPanel` below.

    Its arguments (``model_cfg``, ``train_cfg``, ``store``, ``probe_every``) are checked first, before anything is
    built (:func:`check_panel_args`: ``ValueError`` naming the argument).

    A subclass builds its controls (``self.controls``) and analytic views (``self.views``), then calls
    :meth:`_attach_training` with its live views, implements :meth:`_specs` (the runs Train starts, read
    from the controls when Train is pressed), and assigns ``self.widget`` last, once every control's own
    callbacks are registered.

    Assigning ``widget`` marks the box as a panel (CSS class ``spanviz-panel``: the figures' busy state covers the
    panel), takes the controls' values as their defaults (:class:`~spanviz.widgets.defaults.Defaults`: a control
    moved off its default is marked, and a "Reset to defaults" row heads the box; a notebook's own defaults are
    set with :meth:`set_defaults`), and makes every control (a value control or a button) end with :meth:`settle`,
    after its own callbacks have redrawn what they redraw.

    Args:
        model_cfg: the panel's model (None: ``default_model``).
        train_cfg: a ``spanviz.train.TrainConfig`` for training (None: :func:`default_train_cfg`).
        static: see :func:`use_static`.

    Attributes:
        widget: the VBox to display. controls: name → widget (the training buttons included). views: name →
        :class:`FigureView` (``train/<name>`` for the live ones). training: the :class:`TrainingPanel`.
    """

    _widget: W.Box | None = None

    def __init__(self, model_cfg: GPTConfig | None, train_cfg: TrainConfig | None, static: bool | None,
                 default_model: GPTConfig = DEFAULT_PANEL_MODEL, *, store: Any = "auto",
                 probe_every: int | None = None) -> None:
        check_panel_args(model_cfg, train_cfg, store, probe_every)
        self.model_cfg = model_cfg if model_cfg is not None else default_model
        self._train_cfg = train_cfg
        self.static = use_static(static)
        self.controls: dict[str, W.Widget] = {}
        self.views: dict[str, FigureView] = {}

    def _attach_training(self, live: Sequence[LiveView], *, data: Any, store: Any,
                         trainer_factory: Callable[[RunSpec, Any], TrainerLike] | None,
                         refresh_hz: float, keep_weights: bool = False) -> TrainingPanel:
        """Make the training part: its buttons join ``controls`` and its live figures ``views`` (``train/…``);
        ``keep_weights``: the store keeps each run's final weights (so what the models write can be read after a
        replay: :meth:`TrainingPanel.models`)."""
        self.training = TrainingPanel(self._specs, live=live, data=data, store=store, trainer_factory=trainer_factory,
                                      static=self.static, refresh_hz=refresh_hz, hint=self.replay_hint,
                                      keep_weights=keep_weights)
        self.views.update({f"train/{k}": v for k, v in self.training.views.items()})
        self.controls.update(self.training.controls)
        return self.training

    @property
    def widget(self) -> W.Box:
        """The panel's box (what a notebook displays)."""
        if self._widget is None:
            raise AttributeError(f"{type(self).__name__} has not built its widget yet")
        return self._widget

    @widget.setter
    def widget(self, box: W.Box) -> None:
        self._widget = box
        box.add_class(PANEL_CLASS)
        self.defaults = Defaults({name: c for name, c in self.controls.items()
                                  if isinstance(c, W.ValueWidget) and not isinstance(c, _DISPLAYS)})
        self.controls["reset"] = self.defaults.reset_button
        box.children = (self.defaults.widget, *box.children)
        for control in self.controls.values():
            if isinstance(control, W.Button):
                control.on_click(lambda _button: self.settle())
            elif isinstance(control, W.ValueWidget) and not isinstance(control, _DISPLAYS):
                control.observe(lambda _change: self.settle(), names="value")

    def settle(self) -> None:
        """Tell every figure of the panel that the input it shows busy for is handled (its redraws, if any, were sent
        before this): :meth:`spanviz.widgets.figure.widget.PlotlyFigure.settled`. Static figures have no busy state."""
        for view in self.views.values():
            if isinstance(view.widget, PlotlyFigure):
                view.widget.settled()

    def set_defaults(self, **values: object) -> None:
        """Set controls (by name) and make these values their defaults — "Reset to defaults" returns to them
        (a notebook's parameters, e.g. ``panel.set_defaults(lr=LR)``).

        Raises:
            ValueError: an unknown control, or a value off its slider's grid (see :meth:`Defaults.set`).
        """
        self.defaults.set(**values)

    def reset(self) -> None:
        """Set every control back to its default (the "Reset to defaults" button)."""
        self.defaults.reset()

    def train_cfg(self) -> TrainConfig:
        """The training settings the panel was given, else :func:`default_train_cfg`."""
        return self._train_cfg if self._train_cfg is not None else default_train_cfg()

    def values(self) -> dict[str, Any]:
        """name → value of every control a person sets (sliders, dropdowns)."""
        return {n: c.value for n, c in self.controls.items() if isinstance(c, W.ValueWidget)
                and not isinstance(c, _DISPLAYS)}

    def _plan(self, values: dict[str, Any]) -> list[RunSpec]:
        """The runs Train starts for these control values (no side effects: also asked for the defaults)."""
        raise NotImplementedError

    def _planned(self, specs: list[RunSpec]) -> None:
        """Note what the live views need to know of the runs about to train (a subclass's hook)."""

    def _specs(self) -> list[RunSpec]:
        specs = self._plan(self.values())
        self._planned(specs)
        return specs

    def replay_hint(self) -> str:
        """A line for the status while runs train live: when the controls are off their defaults and the store has
        every run of the defaults, that those replay at once; else ""."""
        if self.defaults.at_defaults:
            return ""
        specs = self._plan({**self.values(), **self.defaults.values})
        if specs and all(self.training.stored(spec) for spec in specs):
            return "the defaults replay at once: Reset to defaults, then Train"
        return ""

    def train(self, blocking: bool | None = None) -> Runner:
        """Train the runs of the current controls (see :meth:`TrainingPanel.train`)."""
        return self.training.train(blocking=blocking)

    def stop(self, wait: bool = True) -> bool:
        """Stop the run after the current step (see :meth:`TrainingPanel.stop`)."""
        return self.training.stop(wait=wait)
