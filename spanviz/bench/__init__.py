"""``spanviz bench``: every benchmark of the project, each a ratio or rate measured within one run.

Sections (each in its own module, each returning a JSON-ready dict):

* ``core``    — TinyGPT step over a plain GPT; notebook config steps per CPU-second and peak RSS, fresh process
  (:mod:`.core`)
* ``spans``   — span-scaled step over the standard step (:mod:`.spans`)
* ``growth``  — step CPU time and peak RSS of standard, explicit, kv8 and qk4 as T grows 128 → 1024 (:mod:`.spans`)
* ``ls``      — local+global attention over dense causal attention, forward and forward+backward (:mod:`.ls`)
* ``fp8``     — spectral norms and power iteration as a share of a train step (:mod:`.fp8`)
* ``widgets`` — slider-to-figure latency (CPU time; in Chromium only with ``browser=True``) and live-dashboard
  overhead (:mod:`.widgets`)
* ``notebooks`` — tokens/s of each notebook's default runs on this device (:mod:`.notebooks`)
* ``sweep``   — an 8-run CPU sweep on the local executor vs Ray with 2 workers, wall time (:mod:`.sweep`)

Nothing here asserts a time: the targets are printed next to the measurements. How every section times
(thread CPU time of one thread as the primary figure, wall time beside it; synchronised wall time on an
accelerator): :mod:`spanviz.bench.core`. On a CPU each section runs with one torch thread and one BLAS thread
(a section that compares thread counts, ``sweep``, sets its own).
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import os
import platform
import time
import traceback
from collections.abc import Callable

import torch

from spanviz.bench.core import one_thread

logger = logging.getLogger(__name__)

SECTIONS: dict[str, tuple[str, str]] = {
    "core": ("spanviz.bench.core", "bench_core"),
    "spans": ("spanviz.bench.spans", "bench_spans"),
    "growth": ("spanviz.bench.spans", "bench_growth"),
    "ls": ("spanviz.bench.ls", "bench_ls"),
    "fp8": ("spanviz.bench.fp8", "bench_fp8"),
    "widgets": ("spanviz.bench.widgets", "bench_widgets"),
    "notebooks": ("spanviz.bench.notebooks", "bench_notebooks"),
    "sweep": ("spanviz.bench.sweep", "bench_sweep"),
}


def _resolve(device: str) -> str:
    if device != "auto":
        return device
    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


def run_benchmarks(
    only: str | None = None, device: str = "auto", data_dir: str | None = None, quick: bool = False,
    browser: bool = False, on_section: Callable[[str, dict], None] | None = None,
) -> dict:
    """Run the selected sections (comma-separated names; None = all) and collect their results.

    A section that fails records its error instead of stopping the others.

    Args:
        only, device, data_dir, quick: as ``spanviz bench``'s flags (``quick``: fewer rounds, the growth table at
            T 128 and 256 only, no sweep). browser: measure the sliders in JupyterLab in Chromium too (the only
            section part that starts a browser). on_section: ``fn(name, results)`` after each section (the CLI
            writes the JSON file there, so a long run leaves every finished section on disk).
    Raises:
        ValueError: an unknown section name.
    """
    names = list(SECTIONS) if only is None else [s.strip() for s in only.split(",") if s.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise ValueError(f"only: unknown benchmark section(s) {unknown}; allowed: {sorted(SECTIONS)}")
    device = _resolve(device)
    results: dict = {
        "environment": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "torch_threads": torch.get_num_threads(),
            "device": device,
            "cuda_device": torch.cuda.get_device_name() if device.startswith("cuda") else None,
            "quick": quick,
        }
    }
    for name in names:
        module_name, func_name = SECTIONS[name]
        func: Callable[..., dict] = getattr(importlib.import_module(module_name), func_name)
        offered = {"device": device, "quick": quick, "data_dir": data_dir, "browser": browser}
        accepted = inspect.signature(func).parameters
        kwargs = {k: v for k, v in offered.items() if k in accepted}
        started = time.perf_counter()
        try:
            if name == "sweep" and quick:
                results[name] = {"skipped": "--quick: the sweep times parallel worker processes (minutes); "
                                            "run `spanviz bench --only sweep`"}
            elif torch.device(device).type == "cpu" and name != "sweep":
                with one_thread():
                    results[name] = func(**kwargs)
            else:
                results[name] = func(**kwargs)
        except Exception as exc:  # one broken section must not hide the others' figures
            logger.exception("benchmark section %s failed", name)
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-1500:]}
        if isinstance(results[name], dict):
            results[name].setdefault("section_wall_s", time.perf_counter() - started)
        if on_section is not None:
            on_section(name, results)
    return results


def format_results(results: dict) -> str:
    """Readable text of :func:`run_benchmarks`' output (JSON sections, indented)."""
    lines = []
    for name, section in results.items():
        lines.append(f"== {name} ==")
        lines.append(json.dumps(section, indent=2, default=str))
    return "\n".join(lines)
