"""``spanviz runs``: list (label, experiment, steps, device, origin; filters), export or import the results store."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import tyro

from spanviz.cli.common import UsageError
from spanviz.experiments.results import format_table
from spanviz.files import check_writable_folder
from spanviz.store import ResultsStore
from spanviz.store.listing import matches, run_row, shipped_runs
from spanviz.validators import printable


@dataclass(frozen=True)
class RunsCommand:
    """List, export or import the results store: runs that replay instantly, e.g. for a workshop."""

    action: tyro.conf.Positional[Literal["list", "export", "import"]]
    """list the stored runs, export them into FILE (.zip), or import FILE."""
    file: tyro.conf.Positional[Path | None] = None
    """the archive to write or read (.zip)."""
    store: Path | None = None
    """the store folder (default: $SPANVIZ_HOME/runs)."""
    overwrite: bool = False
    """import: replace runs already in the store."""
    origin: Literal["bundle", "imported", "local"] | None = None
    """list/export only the runs of the workshop bundle shipped with spanviz (bundle), those imported from another
    archive (imported), or those trained with this store (local)."""
    device: str | None = None
    """list/export only the runs whose device contains this text, any case (cpu, cuda, H100)."""
    experiment: str | None = None
    """list/export only the runs of this experiment: spans, ls, fp8 (sweeps; or e.g. ls/gpu) or notebook (panels)."""
    verbose: bool = False
    """log at INFO level."""


def _filters(cmd: RunsCommand) -> dict[str, str]:
    return {name: value for name in ("origin", "device", "experiment")
            if (value := getattr(cmd, name)) is not None}


def _describe(filters: dict[str, str]) -> str:
    return " matching " + " ".join(f"--{k} {v}" for k, v in filters.items()) if filters else ""


def cmd_runs(cmd: RunsCommand) -> int:
    """List, export or import the results store; returns 0, or 1 when an import rejected entries.

    Raises:
        UsageError: a store that is a file, a missing or folder FILE, filters with import.
    """
    store = ResultsStore(cmd.store)
    if store.root.exists() and not store.root.is_dir():
        raise UsageError(f"--store {store.root}: is a file, not a folder")
    filters = _filters(cmd)
    if cmd.action == "import" and filters:
        raise UsageError(f"runs import takes no filter (got {_describe(filters).strip()}); it imports every "
                         "good run of FILE")
    if cmd.action == "list":
        if cmd.file is not None:
            raise UsageError(f"runs list takes no FILE, got {cmd.file}")
        good, bad = store.scan()
        shipped = shipped_runs()
        rows = [row for key, record in good.items() if matches(row := run_row(key, record, shipped), **filters)]
        rows.sort(key=lambda r: (r["origin"], r["experiment"], r["label"], str(r["seed"])))
        if rows:
            print(format_table(rows, float_format=".4f"))
        for _, why in bad:
            print(f"warning: skipped a damaged entry: {printable(why, 300)}", file=sys.stderr)
        counts = {o: sum(r["origin"] == o for r in rows) for o in ("bundle", "imported", "local")}
        print(f"{len(rows)} runs{_describe(filters)} in {store.root} ({counts['local']} trained here, "
              f"{counts['imported']} imported, {counts['bundle']} from the shipped workshop bundle)"
              + (f"; {len(good) - len(rows)} others" if filters else "")
              + (f"; {len(bad)} damaged, skipped" if bad else ""))
        return 0
    if cmd.file is None:
        raise UsageError(f"runs {cmd.action} needs a FILE, e.g. spanviz runs {cmd.action} workshop.zip")
    if cmd.file.is_dir():
        raise UsageError(f"runs {cmd.action} {cmd.file}: is a folder; give a .zip file, e.g. {cmd.file / 'runs.zip'}")
    if cmd.action == "export":
        good, bad = store.scan()
        for _, why in bad:
            print(f"warning: not exported, damaged: {printable(why, 300)}", file=sys.stderr)
        if filters:
            shipped = shipped_runs()
            good = {key: record for key, record in good.items() if matches(run_row(key, record, shipped), **filters)}
        path = store.export(cmd.file, keys=list(good))
        print(f"exported {len(good)} runs{_describe(filters)} to {path}"
              + (f" ({len(bad)} damaged entries left out)" if bad else ""))
        return 0
    check_writable_folder(store.root, f"the results store {store.root}")
    report = store.import_report(cmd.file, overwrite=cmd.overwrite)
    for entry, why in report.rejected:
        print(f"warning: rejected {printable(entry)}: {printable(why, 300)}", file=sys.stderr)
    print(f"imported {len(report.written)} runs into {store.root}"
          + (f"; {len(report.kept)} already there, kept (--overwrite replaces them)" if report.kept else "")
          + (f"; {len(report.rejected)} rejected" if report.rejected else ""))
    return 0 if not report.rejected else 1
