"""``spanviz bench``: the benchmarks of :mod:`spanviz.bench`, as text or JSON."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

from spanviz.bench import READS_DATA, format_results, run_benchmarks
from spanviz.bench import SECTIONS as BENCH_SECTIONS
from spanviz.cli.common import UsageError, announce_smoke, as_flags, smoke
from spanviz.data.wikitext import split_files
from spanviz.files import atomic_write, check_file_target, check_writable_folder, expand_user
from spanviz.settings import OFFLINE_SPLITS, resolve_data_source
from spanviz.train.config import resolve_device


@dataclass(frozen=True)
class BenchCommand:
    """Benchmarks: ratios measured within one run (the test suite never times anything)."""

    json: bool = False
    """print JSON."""
    only: Annotated[str | None, tyro.conf.arg(help=f"comma-separated sections: {', '.join(BENCH_SECTIONS)} "
                                                   "(default: all).")] = None
    device: str = "auto"
    """auto, cpu, cuda, cuda:<index> or mps."""
    quick: bool = False
    """the headline ratios only (spanviz.bench.QUICK); with --only, each section's quick form (minutes on 2 cores)."""
    browser: bool = False
    """also time the sliders in JupyterLab in Chromium (the only part that starts a browser)."""
    out: Path | None = None
    """write the JSON to this file after every section (a long run leaves each finished section on disk)."""
    data_dir: Path | None = None
    """WikiText-2 folder for the notebook-config benchmark (default: as for train)."""
    verbose: bool = False
    """log at INFO level."""


def cmd_bench(cmd: BenchCommand) -> int:
    """Run the benchmarks and print them; returns 0, or 1 when a section failed.

    Raises:
        UsageError: a bad --device, --only, --data-dir or --out (before anything is timed).
    """
    try:
        resolve_device(cmd.device)
    except ValueError as error:
        raise UsageError(as_flags(str(error))) from None
    only = cmd.only
    if only is not None:
        names = [s.strip() for s in only.split(",") if s.strip()]
        unknown = [n for n in names if n not in BENCH_SECTIONS]
        if unknown or not names:
            raise UsageError(f"--only {only}: sections are {', '.join(BENCH_SECTIONS)} (comma-separated)")
    quick, data_dir = cmd.quick, cmd.data_dir
    if data_dir is not None and only is not None and not set(names) & set(READS_DATA):
        raise UsageError(f"--data-dir {data_dir}: no section of --only {only} reads it (they time random tokens or "
                         f"tensors); the sections that read the WikiText-2 folder are {', '.join(READS_DATA)}")
    if data_dir is None:
        folder, _ = resolve_data_source()
        data_dir = Path(folder) if folder is not None else None
    if data_dir is not None and not smoke():  # the notebook benchmarks read its validation and test splits
        origin = f"--data-dir {cmd.data_dir}" if cmd.data_dir is not None else f"the WikiText-2 folder {data_dir}"
        try:
            split_files(expand_user(data_dir, "--data-dir"), OFFLINE_SPLITS)
        except ValueError as error:
            raise UsageError(f"{origin}: {as_flags(str(error))}") from None
    if smoke():
        only, quick, data_dir = "core", True, None
        announce_smoke("the quick core step-ratio benchmark only (no notebook-config run)")
    out = cmd.out
    if out is not None:
        try:
            check_writable_folder(out.parent, f"--out {out}")
            check_file_target(out, f"--out {out}")
        except ValueError as error:
            raise UsageError(str(error)) from None

    def section_done(name: str, results: dict) -> None:
        print(f"bench: section {name} done", file=sys.stderr, flush=True)
        if out is not None:
            atomic_write(out, (json.dumps(results, indent=2, default=str) + "\n").encode())

    results = run_benchmarks(only=only, device=cmd.device, data_dir=None if data_dir is None else str(data_dir),
                             quick=quick, browser=cmd.browser, on_section=section_done)
    print(json.dumps(results, indent=2) if cmd.json else format_results(results))
    failed = [name for name, section in results.items() if isinstance(section, dict) and "error" in section]
    for name in failed:
        print(f"warning: benchmark section {name} failed: {results[name]['error']}", file=sys.stderr)
    return 1 if failed else 0
