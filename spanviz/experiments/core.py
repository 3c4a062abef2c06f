"""Generic experiment machinery: train a grid of variants × seeds (replaying from a results store), summarize.

The technique experiments (:mod:`spanviz.experiments.spans`, ``ls``, ``fp8``) describe *what* to compare as
named ``(GPTConfig, TrainConfig)`` variants; this module trains each variant with each seed — or replays it
from a :class:`~spanviz.store.ResultsStore` when the same full configuration ran before — and reduces the runs
to a per-seed table and one row per variant with an honest verdict about the seed-to-seed noise. The runs to
train go to an executor (:mod:`spanviz.experiments.executors`): one after another in this process, or as tasks
on a Ray cluster, each finished run entering the store as it completes.

The statistics (paired t-tests over seeds, Holm's correction, verdicts) are in :mod:`spanviz.experiments.stats`,
the files and the printed table in :mod:`spanviz.experiments.results`.
"""


from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from spanviz.experiments.executors import Executor, LocalExecutor, make_executor
from spanviz.model import GPTConfig
from spanviz.store import ResultsStore
from spanviz.store.keys import STORABLE
from spanviz.train import RunRecord, TrainConfig, Trainer
from spanviz.train.callbacks import Probe
from spanviz.train.record import run_config, to_json_text

logger = logging.getLogger(__name__)


MAX_SEEDS = 1000
"""Most seeds a sweep takes (a count, or a list): each seed is a run per variant."""
GRID_TRAIN_FIELDS = {
    "seed": "each run's seed is set by the sweep's seeds (seeds=N: 0..N-1)",
    "steps": "the sweep's steps argument sets it (and the evaluation and warm-up that follow from it)",
    "checkpoint_interval": "sweep runs write no checkpoints (they have no output folder), so it changes nothing",
}
"""TrainConfig fields a sweep's ``train`` overrides may not set, and why: the grid sets them, or they do nothing."""


def check_train_overrides(train: Mapping[str, Any] | None) -> dict[str, Any]:
    """A sweep's TrainConfig overrides, refusing those the grid would ignore (:data:`GRID_TRAIN_FIELDS`).

    Raises: ValueError naming the field and why it cannot apply.
    """
    train = dict(train or {})
    for name, why in GRID_TRAIN_FIELDS.items():
        if name in train:
            raise ValueError(f"train override {name}={train[name]!r} cannot apply: {why}")
    return train


def seed_list(seeds: int | Sequence[int]) -> list[int]:
    """A count n → seeds 0..n−1; a sequence → its distinct integers >= 0 as a list (at most :data:`MAX_SEEDS`).

    Raises: ValueError (naming ``seeds``) for a count < 1 or above :data:`MAX_SEEDS`, an empty or too long
    sequence, repeats, or non-integers.
    """
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds < 1 or seeds > MAX_SEEDS:
            raise ValueError(f"seeds must be a count in [1, {MAX_SEEDS}] or a list of seeds, got {seeds}")
        return list(range(seeds))
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence):
        raise ValueError(f"seeds must be a count >= 1 or a sequence of distinct integers >= 0, got {seeds!r}")
    if len(seeds) > MAX_SEEDS:
        raise ValueError(f"seeds must list at most {MAX_SEEDS} seeds, got {len(seeds)}")
    seeds = list(seeds)
    if not seeds or len(set(seeds)) != len(seeds) or any(
        isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds
    ):
        raise ValueError(f"seeds must be a count >= 1 or a non-empty list of distinct integers >= 0, got {seeds}")
    return seeds


@dataclass(frozen=True)
class GridRun:
    """One (variant, seed) of :func:`run_grid`, everything a worker needs to train it (picklable)."""

    variant: str
    seed: int
    model_cfg: GPTConfig
    train_cfg: TrainConfig
    probes: tuple[Probe, ...]
    callbacks: tuple[Callable[[Trainer, dict[str, Any]], None], ...]
    extra: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.variant} seed {self.seed}"


def train_run(run: GridRun, shared: tuple[Any, ResultsStore | None]) -> RunRecord:
    """Train one grid run and put it into the store when it finished or diverged (on a worker, or here)."""
    data, store = shared
    trainer = Trainer(run.model_cfg, run.train_cfg, data, probes=run.probes, callbacks=run.callbacks,
                      extra_config=run.extra)
    record = trainer.run()
    if store is not None and record.status in STORABLE:
        try:
            store.put(record)
        except OSError as error:  # e.g. a worker on another machine without that folder: run_grid stores it
            logger.warning("results store %s not writable here (%s); the sweep's process stores the run",
                           store.root, error)
    return record


class RunsFailedError(RuntimeError):
    """Runs of a grid raised on their workers; the others finished (and are in the results store).

    Attributes:
        failures: one dict per failed run: ``variant``, ``seed``, ``error`` ("Type: message"), ``traceback``
            (the worker's), ``config`` (``{"model": ..., "train": ...}`` as dicts).
        records: the runs that did finish or replay, in grid order. total: the runs of the grid.
    """

    def __init__(self, failures: list[dict[str, Any]], records: list[RunRecord], total: int) -> None:
        self.failures, self.records, self.total = failures, records, total
        listed = "; ".join(f"{f['variant']} seed {f['seed']}: {f['error']}" for f in failures)
        super().__init__(f"{len(failures)} of {total} runs failed ({listed})")


def run_grid(
    variants: Mapping[str, tuple[GPTConfig, TrainConfig]],
    seeds: Sequence[int],
    data: Any,
    *,
    store: ResultsStore | None = None,
    probes_factory: Callable[[str, GPTConfig], Sequence[Probe]] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    tags: Mapping[str, Any] | None = None,
    callbacks: Sequence[Callable[[Trainer, dict[str, Any]], None]] = (),
    callbacks_factory: Callable[[str], Sequence[Callable[[Trainer, dict[str, Any]], None]]] | None = None,
    executor: str | Executor = "local",
) -> list[RunRecord]:
    """Train every variant with every seed, or replay it from ``store``; returns the records in grid order.

    Each run uses the variant's configs with ``TrainConfig.seed`` replaced by the seed, and its
    ``record.config`` carries ``variant`` (the name), ``seed`` and ``tags`` (``{}`` when None) next to model,
    train, data and probes — all part of the store key. Every configuration found in ``store`` is replayed
    first (no training); the others go to ``executor``, and each new run is put into ``store`` as soon as it
    finished or diverged (by the worker that trained it). A run that ends "stopped" (e.g. a UI Stop button: a
    callback called ``trainer.request_stop()``) ends the grid: the records so far are returned. Ctrl-C
    propagates (``KeyboardInterrupt``) after the trainer saved its record.

    Args:
        variants: name → (model config, train config); names are non-empty strings, e.g. "standard", "qk4".
        seeds: distinct integers >= 0.
        data: a :class:`spanviz.data.TokenData` (its ``describe()`` is part of the key).
        store: where to look up and keep runs; None = always train, keep nothing.
        probes_factory: ``fn(variant_name, model_cfg) -> probes``, called once per run (fresh probe objects,
            whose descriptions are part of the key).
        progress: ``fn(done, total, label)`` after each run (replayed ones first, then as runs finish), label
            e.g. ``"qk4 seed 1 (replayed)"``, ``"qk4 seed 1"`` or ``"qk4 seed 1 (failed)"``.
        tags: JSON-able experiment tags (e.g. ``{"experiment": "spans"}``), stored in ``config["tags"]``.
        callbacks: trainer callbacks ``cb(trainer, row)`` for every trained run (e.g. live plots); local
            executor only (they observe this process).
        callbacks_factory: ``fn(variant_name) -> callbacks``, called once per trained run, for callbacks that
            are part of the experiment (e.g. a weight swap): describe what they do in ``tags``, which are part
            of the key — the callbacks themselves are not. They travel to the workers.
        executor: ``"local"`` (one run after another in this process), ``"ray"`` (Ray tasks on a local
            cluster, one worker per core; ``pip install "spanviz[distributed]"``) or an executor object, e.g.
            ``RayExecutor(workers=2)`` (see :mod:`spanviz.experiments.executors`). With equal torch threads
            per run, every executor gives the same records for the same seeds (CPU).
    Returns:
        One :class:`RunRecord` per (variant, seed), variant-major, in the order given.
    Raises:
        ValueError: bad variants, seeds, tags or executor, or ``callbacks`` with a distributed executor — before
            any training. MissingExtraError: executor "ray" without Ray installed.
        RunsFailedError: some runs raised on a distributed executor; every other run finished first and is in
            ``store`` (the local executor lets the first exception propagate, as it always did).
    """
    if not isinstance(variants, Mapping) or not variants:
        raise ValueError(f"variants must be a non-empty mapping name → (GPTConfig, TrainConfig), got {variants!r}")
    for name, pair in variants.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"variant names must be non-empty strings, got {name!r}")
        if (not isinstance(pair, tuple) or len(pair) != 2 or not isinstance(pair[0], GPTConfig)
                or not isinstance(pair[1], TrainConfig)):
            raise ValueError(f"variants[{name!r}] must be a (GPTConfig, TrainConfig) tuple, got {pair!r}")
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must hold at least one integer, got none")
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seeds must be integers >= 0, got {seed!r}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct, got {seeds}")
    if tags is not None and not isinstance(tags, Mapping):
        raise ValueError(f"tags must be a mapping or None, got {tags!r}")
    tags = dict(tags or {})
    to_json_text(tags)  # JSON-able, or ValueError now rather than after training
    executor = make_executor(executor)
    if callbacks and not isinstance(executor, LocalExecutor):
        raise ValueError(f"callbacks observe runs in this process, but {executor!r} trains them elsewhere: pass "
                         "callbacks only with the local executor (progress reports every finished run)")

    grid = [
        GridRun(name, seed, model_cfg, replace(train_cfg, seed=seed),
                tuple(probes_factory(name, model_cfg)) if probes_factory is not None else (), (),
                {"variant": name, "seed": seed, "tags": tags})
        for name, (model_cfg, train_cfg) in variants.items()
        for seed in seeds
    ]  # fmt: skip
    total, done = len(grid), 0
    records: dict[int, RunRecord] = {}

    def report(run: GridRun, outcome: str) -> None:
        nonlocal done
        done += 1
        label = run.label + (f" ({outcome})" if outcome in ("replayed", "failed") else "")
        logger.info("run_grid %d/%d: %s: %s", done, total, label, outcome)
        if progress is not None:
            progress(done, total, label)

    todo = []
    for i, run in enumerate(grid):
        config = run_config(run.model_cfg, run.train_cfg, data, run.probes, run.extra) if store is not None else None
        record = store.get(config) if store is not None else None
        if record is None:
            todo.append(i)
        else:
            records[i] = record
            report(run, "replayed")
    tasks = [replace(grid[i], callbacks=(*callbacks, *(callbacks_factory(grid[i].variant) if callbacks_factory
                                                        else ()))) for i in todo]  # fmt: skip
    gpu = any(t.train_cfg.device == "auto" or t.train_cfg.device.startswith("cuda") for t in tasks)
    failures = []
    with contextlib.closing(executor.map(train_run, tasks, (data, store), gpu=gpu)) as outcomes:
        for j, outcome in outcomes:
            run = tasks[j]
            if isinstance(outcome, BaseException):
                failures.append({"variant": run.variant, "seed": run.seed, "error": str(outcome),
                                 "traceback": getattr(outcome, "traceback", ""),
                                 "config": {"model": run.model_cfg.to_dict(), "train": run.train_cfg.to_dict()}})
                report(run, "failed")
                continue
            if store is not None and outcome.status in STORABLE and outcome not in store:
                store.put(outcome)  # a worker on another machine wrote to its own disk
            records[todo[j]] = outcome
            report(run, outcome.status)
            if outcome.status == "stopped":
                logger.info("run_grid: %s was stopped; ending the grid", run.label)
                break
    ordered = [records[i] for i in sorted(records)]
    if failures:
        raise RunsFailedError(failures, ordered, total)
    return ordered


__all__ = ["GRID_TRAIN_FIELDS", "MAX_SEEDS", "GridRun", "RunsFailedError", "check_train_overrides", "run_grid",
           "seed_list", "train_run"]
