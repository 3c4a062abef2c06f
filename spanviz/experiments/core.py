"""Generic experiment machinery: train a grid of variants × seeds (replaying from a results store), summarize.

The technique experiments (:mod:`spanviz.experiments.spans`, ``ls``, ``fp8``) describe *what* to compare as
named ``(GPTConfig, TrainConfig)`` variants; this module trains each variant with each seed — or replays it
from a :class:`~spanviz.store.ResultsStore` when the same full configuration ran before — and reduces the runs
to one row per variant with an honest verdict about the seed-to-seed noise.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from spanviz.model import GPTConfig
from spanviz.store import STORABLE, ResultsStore
from spanviz.train import Probe, RunRecord, TrainConfig, Trainer, run_config, to_json_text

logger = logging.getLogger(__name__)

METRICS = ("best_val_loss", "final_val_loss", "final_train_loss")
"""Named metrics of :func:`metric_value`; any history key also works (its last measured value)."""


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
) -> list[RunRecord]:
    """Train every variant with every seed, or replay it from ``store``; returns the records in grid order.

    Each run uses the variant's configs with ``TrainConfig.seed`` replaced by the seed, and its
    ``record.config`` carries ``variant`` (the name), ``seed`` and ``tags`` (``{}`` when None) next to model,
    train, data and probes — all part of the store key. A configuration found in ``store`` is replayed
    (no training); a new run is put into ``store`` when it finished or diverged. A run that ends "stopped"
    (e.g. a UI Stop button: a callback called ``trainer.request_stop()``) ends the grid: the records so far
    are returned. Ctrl-C propagates (``KeyboardInterrupt``) after the trainer saved its record.

    Args:
        variants: name → (model config, train config); names are non-empty strings, e.g. "standard", "qk4".
        seeds: distinct integers >= 0.
        data: a :class:`spanviz.data.TokenData` (its ``describe()`` is part of the key).
        store: where to look up and keep runs; None = always train, keep nothing.
        probes_factory: ``fn(variant_name, model_cfg) -> probes``, called once per run (fresh probe objects,
            whose descriptions are part of the key).
        progress: ``fn(done, total, label)`` after each run, label e.g. ``"qk4 seed 1 (replayed)"``.
        tags: JSON-able experiment tags (e.g. ``{"experiment": "spans"}``), stored in ``config["tags"]``.
        callbacks: trainer callbacks ``cb(trainer, row)`` for every trained run (e.g. live plots).
    Returns:
        One :class:`RunRecord` per (variant, seed), variant-major, in the order given.
    Raises:
        ValueError: bad variants, seeds or tags — before any training.
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

    total = len(variants) * len(seeds)
    records: list[RunRecord] = []
    for name, (model_cfg, train_cfg) in variants.items():
        for seed in seeds:
            seeded = replace(train_cfg, seed=seed)
            probes = tuple(probes_factory(name, model_cfg)) if probes_factory is not None else ()
            extra = {"variant": name, "seed": seed, "tags": tags}
            record = store.get(run_config(model_cfg, seeded, data, probes, extra)) if store is not None else None
            replayed = record is not None
            if record is None:
                trainer = Trainer(model_cfg, seeded, data, probes=probes, callbacks=callbacks, extra_config=extra)
                record = trainer.run()
                if store is not None and record.status in STORABLE:
                    store.put(record)
            records.append(record)
            label = f"{name} seed {seed}" + (" (replayed)" if replayed else "")
            logger.info("run_grid %d/%d: %s: %s", len(records), total, label, record.status)
            if progress is not None:
                progress(len(records), total, label)
            if record.status == "stopped":
                logger.info("run_grid: %s was stopped; ending the grid", label)
                return records
    return records


def metric_value(record: RunRecord, metric: str | Callable[[RunRecord], float | None]) -> float | None:
    """One number of a run: a named metric (:data:`METRICS`), the last measured value of a history key, or
    ``metric(record)`` for a callable. None when the run never measured it.

    Raises:
        ValueError: an unknown metric name (neither in :data:`METRICS` nor a history key of the record).
    """
    if callable(metric):
        return metric(record)
    if metric == "best_val_loss":
        return record.best_val_loss
    key = {"final_val_loss": "val_loss", "final_train_loss": "train_loss"}.get(metric, metric)
    if key not in record.history:
        raise ValueError(f"metric {metric!r} is not one of {METRICS} nor a history key of the record "
                         f"(keys: {sorted(record.history)[:12]})")
    measured = [v for v in record.history[key] if v is not None]
    return measured[-1] if measured else None


def summarize(
    records: Sequence[RunRecord],
    metric: str | Callable[[RunRecord], float | None] = "best_val_loss",
    baseline: str | None = "standard",
    *,
    lower_is_better: bool = True,
) -> list[dict[str, Any]]:
    """One tidy row per variant: seeds, mean, spread, change vs the baseline, and a plain verdict.

    Statistics use the runs that finished with a finite metric (diverged runs are counted in
    ``n_diverged``, not averaged: their metric is not comparable). Rows, in order of first appearance:

    * ``variant``, ``metric`` (its name), ``n`` (runs used), ``n_diverged``;
    * ``mean``, ``std`` (sample standard deviation, ddof = 1; None for n < 2), ``min``, ``max``;
    * ``rel_change_pct``: 100·(mean − baseline mean)/|baseline mean| (None for the baseline itself or
      without a baseline);
    * ``verdict``: "baseline"; "cannot tell: one seed" when the variant or the baseline has fewer than 2
      runs; otherwise, with Δ = mean − baseline mean and the standard error of that difference
      SE = √(std²/n + std_b²/n_b) (Welch), "better" / "worse" (by ``lower_is_better``) when |Δ| > 2·SE, else
      "within seed noise" — with the numbers. ≈ a two-sided 95 % check for normal noise; with 2–3 seeds
      it is a rough screen, not a significance test. "; k of N runs diverged" is appended when some did.

    Args:
        records: run records whose ``config`` has a ``variant`` (as from :func:`run_grid`).
        metric: see :func:`metric_value`. baseline: the variant to compare with, or None for no comparison.
        lower_is_better: True for losses.
    Raises:
        ValueError: no records, a record without ``config["variant"]``, an unknown metric, or a baseline that
            is not among the variants.
    """
    records = list(records)
    if not records:
        raise ValueError("records must hold at least one RunRecord, got none")
    groups: dict[str, list[RunRecord]] = {}
    for i, record in enumerate(records):
        variant = record.config.get("variant") if isinstance(record, RunRecord) else None
        if not isinstance(variant, str):
            raise ValueError(f"records[{i}] has no config['variant'] (records from run_grid have one)")
        groups.setdefault(variant, []).append(record)
    if baseline is not None and baseline not in groups:
        raise ValueError(f"baseline={baseline!r} is not among the variants {list(groups)}; pass one of them or None")
    if isinstance(metric, str) and metric not in METRICS and not any(metric in r.history for r in records):
        raise ValueError(f"metric {metric!r} is not one of {METRICS} nor a history key of any record")
    metric_name = metric if isinstance(metric, str) else getattr(metric, "__name__", "custom")

    rows = {name: _describe_group(name, runs, metric, metric_name) for name, runs in groups.items()}
    base = rows.get(baseline) if baseline is not None else None
    for name, row in rows.items():
        row["rel_change_pct"] = None
        if base is None:
            row["verdict"] = ""
        elif name == baseline:
            row["verdict"] = "baseline"
        else:
            if row["mean"] is not None and base["mean"] not in (None, 0):
                row["rel_change_pct"] = 100.0 * (row["mean"] - base["mean"]) / abs(base["mean"])
            row["verdict"] = _verdict(row, base, lower_is_better)
        if row["n_diverged"]:
            row["verdict"] += f"; {row['n_diverged']} of {row['n_runs']} runs diverged"
        row["verdict"] = row["verdict"].lstrip("; ")
    return list(rows.values())


def _describe_group(name: str, runs: list[RunRecord], metric: Any, metric_name: str) -> dict[str, Any]:
    values = []
    for run in runs:
        value = metric_value(run, metric) if run.status == "finished" else None
        if isinstance(value, (int, float)) and math.isfinite(value):
            values.append(float(value))
    n = len(values)
    return {
        "variant": name,
        "metric": metric_name,
        "n": n,
        "n_diverged": sum(run.status == "diverged" for run in runs),
        "n_runs": len(runs),
        "mean": statistics.fmean(values) if n else None,
        "std": statistics.stdev(values) if n >= 2 else None,
        "min": min(values) if n else None,
        "max": max(values) if n else None,
    }


def _verdict(row: Mapping[str, Any], base: Mapping[str, Any], lower_is_better: bool) -> str:
    if row["n"] == 0 or base["n"] == 0:
        return "no finished runs" if row["n"] == 0 else "no finished baseline runs"
    if row["n"] < 2 or base["n"] < 2:
        return "cannot tell: one seed"
    diff = row["mean"] - base["mean"]
    se = math.sqrt(row["std"] ** 2 / row["n"] + base["std"] ** 2 / base["n"])
    numbers = f"|Δ| = {abs(diff):.3g} {'>' if abs(diff) > 2 * se else '<='} 2·SE = {2 * se:.3g}"
    if abs(diff) <= 2 * se:
        return f"within seed noise: {numbers}"
    better = (diff < 0) == lower_is_better
    return f"{'better' if better else 'worse'} than {base['variant']}: {numbers}"


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Plain-text table of row dicts (for the command line): one header line, one line per row.

    Args:
        rows: e.g. from :func:`summarize`. columns: which keys, in order; None = every key, in order of
            first appearance (``n_runs`` is left out for :func:`summarize` rows).
    Returns:
        The table; numbers with 4 significant digits, None as "-"; "" for no rows.
    """
    rows = list(rows)
    if not rows:
        return ""
    if columns is None:
        columns = []
        for row in rows:
            columns += [k for k in row if k not in columns and k != "n_runs"]

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value)

    table = [list(columns)] + [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    lines = ["  ".join(text.ljust(width) for text, width in zip(line, widths)).rstrip() for line in table]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


__all__ = ["METRICS", "format_table", "metric_value", "run_grid", "summarize"]
