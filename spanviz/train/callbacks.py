"""What is measured and shown during training, kept out of the loop: probes and the progress bar.

The trainer knows two kinds of callback (as in minGPT's trainer, the loop triggers them and knows nothing of
what they measure):

* **probes** (:class:`~spanviz.train.protocols.Probe`) measure: after an update (and its evaluation, when due)
  each due probe adds its keys to the update's row, before the row enters the history. :class:`ProbeSet` runs
  them and checks what they return;
* **row callbacks** ``cb(trainer, row)`` watch: called after the row was recorded (checkpoint written), e.g.
  a UI refresh or :class:`ProgressBar`.

The history itself is grown in one place only: :func:`spanviz.train.record.append_rows`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tqdm.auto import tqdm

from spanviz.contexts import eval_mode
from spanviz.train.protocols import Probe, TrainerView  # Probe: also importable from here, as before
from spanviz.train.record import CORE_KEYS, to_json_value


def check_probes(probes: Sequence[Any]) -> None:
    """ValueError unless every probe has a non-empty unique ``name``, an integer ``every >= 1`` and is callable."""
    names = []
    for i, probe in enumerate(probes):
        name, every = getattr(probe, "name", None), getattr(probe, "every", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"probes[{i}].name must be a non-empty string, got {name!r}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"probes[{i}].every (probe {name!r}) must be an integer >= 1, got {every!r}")
        if not callable(probe):
            raise ValueError(f"probes[{i}] (probe {name!r}) must be callable as probe(trainer) -> dict")
        names.append(name)
    if len(set(names)) != len(names):
        raise ValueError(f"probe names must be unique, got {names}")


class ProbeSet:
    """A trainer's probes: runs the due ones after an update, checks their keys, carries their state.

    Args:
        probes: :class:`Probe` objects (checked by :func:`check_probes`).
    Raises:
        ValueError: bad probes; later, a probe that returns no dict, a core key or another probe's key.
    """

    def __init__(self, probes: Sequence[Probe]) -> None:
        self.probes = tuple(probes)
        check_probes(self.probes)
        self._key_owner: dict[str, str] = {}  # probe key → probe name

    def measure(self, trainer: TrainerView, row: dict[str, Any], last: bool) -> None:
        """Add to ``row`` the values of the probes due after update ``row["step"]`` (all of them when ``last``)."""
        for probe in self.probes:
            if row["step"] % probe.every == 0 or last:
                row.update(self._run(probe, trainer))

    def _run(self, probe: Probe, trainer: TrainerView) -> dict[str, Any]:
        with eval_mode(trainer.model):
            out = probe(trainer)
        if not isinstance(out, Mapping):
            raise ValueError(f"probe {probe.name!r} must return a dict, got {type(out).__name__}")
        values = {}
        for key, value in out.items():
            if not isinstance(key, str) or key in CORE_KEYS:
                raise ValueError(f"probe {probe.name!r} returned key {key!r}; keys must be strings other than "
                                 f"the core keys {CORE_KEYS}")
            owner = self._key_owner.setdefault(key, probe.name)
            if owner != probe.name:
                raise ValueError(f"probe {probe.name!r} returned key {key!r}, already used by probe {owner!r}; "
                                 "prefix probe keys with the probe name")
            values[key] = to_json_value(value, f"probe {probe.name!r} key {key!r}")
        return values

    def state_dict(self) -> dict[str, Any]:
        """``{probe name: state}`` of the probes that have ``state_dict()`` (JSON-able, for checkpoints)."""
        return {p.name: p.state_dict() for p in self.probes if callable(getattr(p, "state_dict", None))}

    def load_state_dict(self, states: Mapping[str, Any]) -> None:
        """Give each probe that has ``load_state_dict`` its state from ``states`` (matched by name)."""
        for probe in self.probes:
            if probe.name in states and callable(getattr(probe, "load_state_dict", None)):
                probe.load_state_dict(states[probe.name])


class ProgressBar:
    """A ``tqdm.auto`` progress bar over a trainer's updates, showing the training and validation loss.

    Use as a context manager and pass it as ``progress`` to :meth:`Trainer.run` (``run(progress=True)`` does
    both); it is called with each row.

    Args:
        trainer: the trainer (its ``train_cfg.steps`` is the total, ``step_count`` the start).
        desc: the bar's label.
    """

    def __init__(self, trainer: TrainerView, desc: str = "train") -> None:
        self.bar = tqdm(total=trainer.train_cfg.steps, initial=trainer.step_count, desc=desc, unit="step",
                        dynamic_ncols=True)

    def __call__(self, row: Mapping[str, Any]) -> None:
        self.bar.update(1)
        postfix = {"loss": f"{row['train_loss']:.3f}"}
        if row.get("val_loss") is not None:
            postfix["val"] = f"{row['val_loss']:.3f}"
        self.bar.set_postfix(postfix, refresh=False)

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()
