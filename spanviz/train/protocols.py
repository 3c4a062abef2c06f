"""What the trainer asks of the code plugged into it, and what it shows that code: the :class:`Probe` protocol and
the :class:`TrainerView` a probe (or a progress bar) reads.

Both are structural (``typing.Protocol``): a technique's probe (:class:`spanviz.spans.SpanProbe`,
:class:`spanviz.local_global.LogitProbe`, :class:`spanviz.fp8.FP8Probe`) needs no import of :mod:`spanviz.train`,
and the modules of this package that handle probes (:mod:`spanviz.train.callbacks`, :mod:`spanviz.train.record`)
annotate against these two instead of importing the :class:`~spanviz.train.Trainer` that runs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only
    from torch import Tensor, nn

    from spanviz.train.config import TrainConfig


class TrainerView(Protocol):
    """What a probe or a progress bar reads of a trainer (:class:`spanviz.train.Trainer` has all of it).

    Attributes:
        model: the model being trained (a :class:`spanviz.model.TinyGPT`), on the trainer's device.
        probe_batch: ``(x, y)``, both (B', T) long token ids: the first B' <= B consecutive windows of the eval
            split, the same at every call.
        step_count: optimizer updates done.
        train_cfg: the run's :class:`~spanviz.train.config.TrainConfig` (``steps`` is the total of updates).
    """

    @property
    def model(self) -> nn.Module: ...

    @property
    def probe_batch(self) -> tuple[Tensor, Tensor]: ...

    @property
    def step_count(self) -> int: ...

    @property
    def train_cfg(self) -> TrainConfig: ...


class Probe(Protocol):
    """An opt-in measurement taken during training: each technique has one (:class:`spanviz.spans.SpanProbe`,
    :class:`spanviz.local_global.LogitProbe`, :class:`spanviz.fp8.FP8Probe`).

    Attributes:
        name: non-empty, unique among a trainer's probes.
        every: run after updates s with ``s % every == 0`` (so after the first update) and after the last.
    Call:
        ``probe(trainer) -> dict[str, JSON-able]``, after the optimizer step (and after evaluation, when
        due), with the model in eval mode (train mode restored afterwards) and gradients enabled (the
        parameters' ``.grad`` still hold this update's clipped gradients; a probe may overwrite them). A probe
        may draw random numbers: the trainer's own RNG stream is separate, so a probe never changes the
        loss curve. ``trainer`` is a :class:`TrainerView`. The keys go into the history *as returned*: by
        convention a probe prefixes them itself (``"fp8/..."``); they must not be core keys
        (:data:`~spanviz.train.record.CORE_KEYS`) nor keys of another probe (``ValueError``). Tensors and numpy
        values are converted with ``.tolist()``.
    Optional:
        ``describe() -> dict`` (JSON-able settings for the run config and the results-store key; without it
        the public scalar / tuple attributes are recorded), ``state_dict() -> dict`` (JSON-able) and
        ``load_state_dict(state)`` to carry probe state (e.g. delayed-scaling histories) through checkpoints.
    """

    name: str
    every: int

    def __call__(self, trainer: TrainerView) -> Mapping[str, Any]: ...
