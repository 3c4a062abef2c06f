"""A sweep's results: the per-seed table of its run records (:func:`per_seed_table`, one number per run:
:func:`metric_value`) and its summary against a baseline (:func:`summarize`, the tests of
:mod:`spanviz.experiments.stats`); on disk, the summary JSON with its per-seed table (JSON and CSV) beside it; on
screen, the plain-text table the command line prints (the one table formatter of spanviz)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from spanviz.experiments.stats import ALPHA, compare_groups
from spanviz.files import atomic_write
from spanviz.train.record import RunRecord, to_json_text
from spanviz.validators import printable

METRICS = ("best_val_loss", "final_val_loss", "final_train_loss")
"""Named metrics of :func:`metric_value`; any history key also works (its last measured value)."""


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


def per_seed_table(
    records: Sequence[RunRecord],
    metrics: Mapping[str, str | Callable[[RunRecord], float | None]] | Sequence[str] = ("best_val_loss",),
    *,
    info: Callable[[RunRecord], Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One row per run: ``variant``, ``seed``, ``status``, each metric, and ``info(record)`` columns.

    A metric is None for a run that did not finish (a diverged run's numbers are not comparable) or never
    measured it. This table is what the statistics use: :func:`compare_groups` recomputes every verdict from
    it, so a sweep's ``per_seed`` file (see :func:`~spanviz.experiments.results.save_sweep`) lets anyone check them.

    Args:
        records: run records with ``config["variant"]`` and ``config["seed"]`` (as from :func:`run_grid`).
        metrics: names (see :func:`metric_value`) or name → metric (a name or a callable).
        info: optional extra JSON-able columns per run (e.g. n_head, d_head).
    Raises:
        ValueError: a record without ``config["variant"]`` or an unknown metric name.
    """
    if not isinstance(metrics, Mapping):
        metrics = {name: name for name in metrics}
    table = []
    for i, record in enumerate(records):
        variant = record.config.get("variant") if isinstance(record, RunRecord) else None
        if not isinstance(variant, str):
            raise ValueError(f"records[{i}] has no config['variant'] (records from run_grid have one)")
        row: dict[str, Any] = {"variant": variant, "seed": record.config.get("seed"), "status": record.status}
        if info is not None:
            row.update(info(record))
        for name, metric in metrics.items():
            value = metric_value(record, metric) if record.status == "finished" else None
            row[name] = float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
        table.append(row)
    return table


def summarize(
    records: Sequence[RunRecord] | Sequence[Mapping[str, Any]],
    metric: str | Callable[[RunRecord], float | None] = "best_val_loss",
    baseline: str | None = "standard",
    *,
    lower_is_better: bool = True,
    alpha: float = ALPHA,
) -> list[dict[str, Any]]:
    """One row per variant against ``baseline``: paired t-test, Welch check, Holm across these comparisons.

    A shortcut for :func:`compare_groups` with one comparison (every variant against the baseline) on
    :func:`per_seed_table` of the records. Several summaries of one sweep must share one Holm family: build
    their per-seed table once and call :func:`compare_groups` with all comparisons instead.

    Args:
        records: run records (``config["variant"]`` and ``["seed"]``, as from :func:`run_grid`), or per-seed
            rows (dicts with ``variant``, ``seed``, the metric column).
        metric: see :func:`metric_value` (with per-seed rows: a column name). baseline: a variant, or None for
            description only. lower_is_better: True for losses. alpha: the family-wise level.
    Returns:
        :func:`compare_groups` rows (``metric`` is the metric's name; a callable's ``__name__``).
    Raises:
        ValueError: no records, a record without ``config["variant"]``, an unknown metric, or a baseline that
            is not among the variants.
    """
    records = list(records)
    if not records:
        raise ValueError("records must hold at least one RunRecord, got none")
    name = metric if isinstance(metric, str) else getattr(metric, "__name__", "custom")
    if all(isinstance(r, Mapping) for r in records):
        table = records
    else:
        if isinstance(metric, str) and metric not in METRICS and not any(
            isinstance(r, RunRecord) and metric in r.history for r in records
        ):
            raise ValueError(f"metric {metric!r} is not one of {METRICS} nor a history key of any record")
        table = per_seed_table(records, {name: metric})
    variants = list(dict.fromkeys(row.get("variant") for row in table))
    if baseline is not None and baseline not in variants:
        raise ValueError(f"baseline={baseline!r} is not among the variants {variants}; pass one of them or None")
    spec = {"baseline": baseline, "metric": name, "lower_is_better": lower_is_better, "variants": variants}
    return compare_groups(table, [spec], alpha=alpha)


def save_sweep(result: Mapping[str, Any], path: str | os.PathLike[str], *, runs: bool = True) -> list[Path]:
    """Write a sweep's result as JSON at ``path`` and its per-seed table beside it, as JSON and CSV.

    ``results.json`` gives ``results.json`` (everything but the per-seed table), ``results.per_seed.json`` and
    ``results.per_seed.csv`` (one row per run and, for the FP8 sweep, strategy; empty CSV cells are None).
    Each file is written atomically.

    Args:
        result: a sweep's result dict with a ``per_seed`` list. path: the summary file (".json").
        runs: keep ``result["runs"]`` (curves; large for long runs) in the summary; the per-seed table and the
            results store hold what the statistics need either way.
    Returns:
        The paths written: summary, per-seed JSON, per-seed CSV.
    Raises:
        ValueError: no ``per_seed`` list in ``result``, or a path that does not end in ".json".
    """
    path = Path(path)
    if path.suffix != ".json":
        raise ValueError(f"path must end in '.json', got {str(path)!r}")
    table = result.get("per_seed") if isinstance(result, Mapping) else None
    if not isinstance(table, list):
        raise ValueError("result must be a sweep result with a 'per_seed' list")
    summary = {k: v for k, v in result.items() if k != "per_seed" and (runs or k != "runs")}
    stem = path.with_suffix("")
    json_path, csv_path = Path(f"{stem}.per_seed.json"), Path(f"{stem}.per_seed.csv")
    for target, obj in ((path, summary), (json_path, table)):  # strict JSON (non-finite floats as strings)
        atomic_write(target, (json.dumps(json.loads(to_json_text(obj)), indent=2) + "\n").encode())
    columns = list(dict.fromkeys(k for row in table for k in row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in table:
        writer.writerow({k: "" if row.get(k) is None else row[k] for k in columns})
    atomic_write(csv_path, buffer.getvalue().encode())
    return [path, json_path, csv_path]


def read_per_seed(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a per-seed table written by :func:`save_sweep` (``.per_seed.json`` or ``.per_seed.csv``).

    CSV cells come back as int or float where they parse as numbers, None where empty, else as text.
    Raises: ValueError for another suffix or a JSON file that is not a list of objects.
    """
    path = Path(path)
    if path.suffix == ".json":
        table = json.loads(path.read_text())
        if not isinstance(table, list) or not all(isinstance(row, dict) for row in table):
            raise ValueError(f"{path} does not hold a list of per-seed rows")
        return table
    if path.suffix != ".csv":
        raise ValueError(f"path must end in '.json' or '.csv', got {str(path)!r}")
    with path.open(newline="") as handle:
        return [{k: _parse_cell(v) for k, v in row.items()} for row in csv.DictReader(handle)]


def _parse_cell(text: str) -> Any:
    if text == "":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, *,
                 float_format: str = ".4g") -> str:
    """Plain-text table of row dicts (for the command line and logs): a header line, a rule, one line per row.

    Args:
        rows: e.g. from :func:`summarize`. columns: which keys, in order; None = every
            key, in order of first appearance (``n_runs`` is left out for ``summarize`` rows).
        float_format: the format spec of floats (default 4 significant digits).
    Returns:
        The table, columns left-aligned; None as "-"; "" for no rows. Cells other than floats are
        :func:`~spanviz.validators.printable` (escapes shown, at most 120 characters).
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
            return format(value, float_format)
        return printable(value)  # values may come from files: no terminal escapes, no line breaks, capped

    table = [list(columns)] + [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    lines = ["  ".join(text.ljust(width) for text, width in zip(line, widths)).rstrip() for line in table]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


__all__ = ["format_table", "read_per_seed", "save_sweep"]
