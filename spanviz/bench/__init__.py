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

``--quick`` without ``--only`` measures the headline ratios (:data:`QUICK`), in a few minutes on 2 cores;
the other sections say how to run them. With ``--only``, each named section runs in its own quick form (fewer
rounds). Every section records its wall time, the CPU time it cost (this process and its finished children) and
the load average when it ended.
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
from spanviz.provenance import code_identity

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]

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

READS_DATA = ("core", "sweep")
"""The sections that read the WikiText-2 folder (``data_dir``); the others time random tokens or tensors."""

QUICK: dict[str, str] = {
    "core": "the notebook config's steps per CPU-second and peak RSS in a fresh process (P6; no TinyGPT / plain "
            "step ratio)",
    "spans": "kv8 [1000], qk4 [1000] and explicit over the fused standard step at T 128",
    "growth": "kv8 [1000] and qk4 [1000] over the fused standard step at T 512 (P1 at T 512; no explicit path, no "
              "T 1024, no peak RSS)",
    "widgets": "the sliders' kernel-side latency at T 64 and 128 (P5; no live-dashboard overhead, no browser unless "
               "--browser)",
}
"""What ``spanviz bench --quick`` (without ``--only``) measures per section: the headline ratios."""
QUICK_SKIPPED: dict[str, str] = {
    "ls": "LS attention over dense causal attention (minutes): run `spanviz bench --only ls`",
    "fp8": "spectral norms as a share of a train step: run `spanviz bench --only fp8`",
    "notebooks": "tokens/s of every notebook run: run `spanviz bench --only notebooks`",
    "sweep": "the sweep times parallel worker processes (minutes): run `spanviz bench --only sweep`",
}
"""The sections ``--quick`` leaves out (without ``--only``), and how to run each."""


def _cpu_seconds() -> float:
    """CPU time of this process (every thread) and of its finished children [s]."""
    if resource is None:
        return time.process_time()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


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
        only, device, data_dir, quick: as ``spanviz bench``'s flags (``quick`` without ``only``: :data:`QUICK`,
            the sections of :data:`QUICK_SKIPPED` skipped; with ``only``: each named section's quick form; the
            sweep never runs quick). browser: measure the sliders in JupyterLab in Chromium too (the only
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
            "code": code_identity(),  # what ran: spanviz version, git commit (and whether dirty), source digest
        }
    }
    focus = quick and only is None  # --quick alone: the headline ratios (QUICK)
    if quick:
        results["environment"]["quick_measures"] = dict(QUICK) if focus else "each named section's quick form"
    for name in names:
        module_name, func_name = SECTIONS[name]
        func: Callable[..., dict] = getattr(importlib.import_module(module_name), func_name)
        offered = {"device": device, "quick": quick, "data_dir": data_dir, "browser": browser, "focus": focus}
        accepted = inspect.signature(func).parameters
        kwargs = {k: v for k, v in offered.items() if k in accepted}
        started, cpu_started = time.perf_counter(), _cpu_seconds()
        try:
            if quick and name in QUICK_SKIPPED and (focus or name == "sweep"):
                results[name] = {"skipped": f"--quick: {QUICK_SKIPPED[name]}"}
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
            results[name].setdefault("section_cpu_s", _cpu_seconds() - cpu_started)
            if hasattr(os, "getloadavg"):
                results[name].setdefault("section_end_load_average", os.getloadavg()[0])
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
