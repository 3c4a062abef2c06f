"""A sweep's results on disk and on screen: the summary JSON with its per-seed table (JSON and CSV) beside it,
and the plain-text table the command line prints (the one table formatter of spanviz)."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spanviz.files import atomic_write
from spanviz.train import to_json_text


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
        rows: e.g. from :func:`~spanviz.experiments.stats.summarize`. columns: which keys, in order; None = every
            key, in order of first appearance (``n_runs`` is left out for ``summarize`` rows).
        float_format: the format spec of floats (default 4 significant digits).
    Returns:
        The table, columns left-aligned; None as "-"; "" for no rows.
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
        return str(value)

    table = [list(columns)] + [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    lines = ["  ".join(text.ljust(width) for text, width in zip(line, widths)).rstrip() for line in table]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


__all__ = ["format_table", "read_per_seed", "save_sweep"]
