"""``spanviz runs``: list, export or import the results store."""

from __future__ import annotations

import sys

from spanviz.cli.options import RunsCommand, UsageError
from spanviz.experiments import format_table
from spanviz.files import check_writable_folder
from spanviz.store import ResultsStore


def cmd_runs(cmd: RunsCommand) -> int:
    store = ResultsStore(cmd.store)
    if store.root.exists() and not store.root.is_dir():
        raise UsageError(f"--store {store.root}: is a file, not a folder")
    if cmd.action == "list":
        if cmd.file is not None:
            raise UsageError(f"runs list takes no FILE, got {cmd.file}")
        good, bad = store.scan()
        rows = [{"key": key[:12], "status": record.status, "variant": record.config.get("variant"),
                 "seed": record.config.get("seed"), "best val loss": record.best_val_loss}
                for key, record in good.items()]  # fmt: skip
        if rows:
            print(format_table(rows, float_format=".4f"))
        for _, why in bad:
            print(f"warning: skipped a damaged entry: {why}", file=sys.stderr)
        print(f"{len(good)} runs in {store.root}" + (f" ({len(bad)} damaged, skipped)" if bad else ""))
        return 0
    if cmd.file is None:
        raise UsageError(f"runs {cmd.action} needs a FILE, e.g. spanviz runs {cmd.action} workshop.zip")
    if cmd.file.is_dir():
        raise UsageError(f"runs {cmd.action} {cmd.file}: is a folder; give a .zip file, e.g. {cmd.file / 'runs.zip'}")
    if cmd.action == "export":
        good, bad = store.scan()
        for _, why in bad:
            print(f"warning: not exported, damaged: {why}", file=sys.stderr)
        path = store.export(cmd.file, keys=list(good))
        print(f"exported {len(good)} runs to {path}" + (f" ({len(bad)} damaged entries left out)" if bad else ""))
        return 0
    check_writable_folder(store.root, f"the results store {store.root}")
    report = store.import_report(cmd.file, overwrite=cmd.overwrite)
    for entry, why in report.rejected:
        print(f"warning: rejected {entry}: {why}", file=sys.stderr)
    print(f"imported {len(report.written)} runs into {store.root}"
          + (f"; {len(report.kept)} already there, kept (--overwrite replaces them)" if report.kept else "")
          + (f"; {len(report.rejected)} rejected" if report.rejected else ""))
    return 0 if not report.rejected else 1
