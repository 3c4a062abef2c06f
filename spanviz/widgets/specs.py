"""What a panel trains and shows, and the panels' defaults: :class:`RunSpec` (one run), :class:`LiveView` (a
figure kept up to date from the run histories; :data:`LOSS_VIEW`, the loss curves every panel shows), and the
default data, results store, training settings and thread count the panels use (:class:`~.training.TrainingPanel`
trains them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from spanviz.data import load_tokens
from spanviz.model import GPTConfig
from spanviz.plots.curves import loss_curves_data, loss_curves_figure, loss_delta_data
from spanviz.settings import OFFLINE_SPLITS, resolve_data_source
from spanviz.store import ResultsStore
from spanviz.train import TrainConfig
from spanviz.widgets import captions

History = dict[str, list[Any]]

TRAIN_THREADS = 1
"""torch intra-op threads while a panel trains. The notebook models are small: on a quiet 2-core machine one
thread costs little, on a busy one (Binder, a workshop laptop, a shared server, where torch still starts one
thread per visible core) more threads wait for each other — the FP8 notebook trained at 0.6 steps/s with 2
threads and 4.7 with 1 on the loaded 2-core test machine."""


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
    ``caption(histories)``, when given, is HTML shown under the figure and refreshed with it: what the figure
    shows, in words made from the same histories (:mod:`spanviz.widgets.captions`).
    """

    name: str
    data: Callable[[Mapping[str, History]], list[dict[str, Any]]]
    build: Callable[[Mapping[str, History]], go.Figure]
    title: Callable[[], str] | None = None
    caption: Callable[[Mapping[str, History]], str] | None = None


def _loss_data(histories: Mapping[str, History]) -> list[dict[str, Any]]:
    return loss_curves_data(histories, ("train_loss", "val_loss"))


def _loss_build(histories: Mapping[str, History]) -> go.Figure:
    return loss_curves_figure(histories, ("train_loss", "val_loss"), title="loss (solid: train, dashed: val)")


LOSS_VIEW = LiveView("loss", _loss_data, _loss_build, caption=captions.loss_caption)
"""The loss curves of every run (train solid, val dashed)."""
LOSS_DELTA_VIEW = LiveView(
    "loss", lambda hs: [*_loss_data(hs), *loss_delta_data(hs)],
    lambda hs: loss_curves_figure(hs, ("train_loss", "val_loss"), delta=True,
                                  title="loss (solid: train, dashed: val); below: val loss against the first run's, "
                                        "in % (one seed each: no seed band here)"),
    caption=captions.loss_caption)
""":data:`LOSS_VIEW` with a lower row: each run's val loss against the first run's, in percent — for panels whose
runs end close together (their curves lie on top of each other above; the difference does not)."""

_DATA_CACHE: dict[Any, Any] = {}


def default_data(data_dir: str | None = None, max_vocab: int = 8192) -> Any:
    """WikiText-2 token ids for the panels (cached per process): :func:`spanviz.data.load_tokens`, the split
    policy of :mod:`spanviz.settings` — ``SPANVIZ_TRAIN_SPLIT`` / ``SPANVIZ_EVAL_SPLIT``, else with a local folder
    (``data_dir``, ``SPANVIZ_WIKITEXT_DIR`` or the remembered one) its splits (train on validation and evaluate on
    test for a folder given here or in the environment: the offline copy has no train split), else the hub's
    train/validation.

    Returns a :class:`spanviz.data.TokenData`. Raises what :func:`spanviz.data.prepare_tokens` raises.
    """
    folder, splits = resolve_data_source(data_dir, local_splits=OFFLINE_SPLITS)
    key = (folder, max_vocab, tuple(splits.items()))
    if key not in _DATA_CACHE:
        _DATA_CACHE[key] = load_tokens(data_dir, max_vocab=max_vocab)
    return _DATA_CACHE[key]


def default_store() -> ResultsStore:
    """The panels' results store: ``spanviz.store.ResultsStore()`` at its default root. Runs found there
    replay at once instead of training; finished panel runs are put there."""
    return ResultsStore()


def default_train_cfg(**changes: Any) -> TrainConfig:
    """The panels' training settings: a ``TrainConfig`` sized for a laptop CPU (200 steps, batch 8, evaluation
    every 25 steps on 4 batches, 20 warm-up steps), with ``changes`` applied."""
    base = dict(steps=200, batch_size=8, eval_interval=25, eval_iters=4, warmup_steps=20, lr=3e-3)
    return TrainConfig(**{**base, **changes})


def notebook_train_config(steps: int, batch_size: int, lr: float, *, smoke: bool = False,
                          device: str = "auto") -> TrainConfig:
    """The notebooks' training settings from their parameters cell: ``steps`` updates at ``lr`` with a warm-up of
    min(20, steps / 5) updates, ten evaluations over the run (every steps / 10 updates) on 10 batches (1 in smoke
    mode), on ``device``. The shipped bundle's runs are keyed by exactly these settings (change them and Train
    trains instead of replaying).

    Raises: ValueError: what ``TrainConfig`` refuses (steps < 1, lr <= 0, ...)."""
    return TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup_steps=min(20, steps // 5),
                       eval_interval=max(1, steps // 10), eval_iters=1 if smoke else 10, device=device)
