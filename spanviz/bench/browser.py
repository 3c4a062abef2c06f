"""JupyterLab in a real Chromium: a throw-away server, and the slider-to-drawn latency a person sees.

:func:`jupyter_lab` starts a JupyterLab server on a copy of some notebooks (temporary config, runtime, workspace
and settings folders; empty token; XSRF off) — the browser tests use it too. :func:`bench_browser` measures,
in the page, the time from a key press on a slider (or a pick in a dropdown) until the panel's figure has drawn
the new data (``Plotly.react`` resolved): browser → kernel → figure update → browser → draw, everything a
student waits for. Needs Python Playwright and a Chromium (Debian's ``chromium``; ``SPANVIZ_CHROMIUM`` names
another); without them the bench says so instead of measuring.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium_path() -> str | None:
    """The Chromium to drive: ``SPANVIZ_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH."""
    for name in (os.environ.get("SPANVIZ_CHROMIUM"), "chromium", "chromium-browser"):
        if name and (found := shutil.which(name)):
            return found
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_settings(settings_dir: Path) -> None:
    """Lab user settings: no virtual scrolling (all cells in the DOM), no news or update checks."""
    files = {
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
            "fetchNews": "false", "checkForUpdates": False},
    }
    for rel, content in files.items():
        path = settings_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content))


@contextlib.contextmanager
def jupyter_lab(base: Path, env: Mapping[str, str], notebooks: Sequence[Path] = ()) -> Iterator[dict[str, Any]]:
    """A running JupyterLab whose root folder ``base/notebooks`` holds copies of ``notebooks``.

    Args:
        base: an empty folder for the server's files (root, config, runtime, settings, log).
        env: the server's (and so its kernels') environment.
    Yields:
        ``{"url", "root", "env", "log", "runtime"}``.
    Raises:
        RuntimeError: the server exited, or did not answer within 180 s (with the end of its log).
    """
    root = base / "notebooks"
    root.mkdir(parents=True)
    for nb in notebooks:
        shutil.copy(nb, root / nb.name)
    settings = base / "user-settings"
    _write_settings(settings)
    env = {**env, "JUPYTER_CONFIG_DIR": str(base / "config"), "JUPYTER_RUNTIME_DIR": str(base / "runtime")}
    log_path = base / "server.log"
    port = _free_port()
    cmd = [
        sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
        "--IdentityProvider.token=", "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True",
        f"--ServerApp.root_dir={root}", f"--LabApp.user_settings_dir={settings}",
        f"--LabApp.workspaces_dir={base / 'workspaces'}", "--LabApp.news_url=",
        "--ServerApp.open_browser=False", "--LanguageServerManager.autodetect=False",
        "--LabApp.extension_manager=readonly",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
        deadline = time.monotonic() + 180
        try:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}")
                try:
                    with urllib.request.urlopen(f"{url}/api/status", timeout=5) as r:
                        if r.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"jupyter lab did not answer in 180 s:\n{log_path.read_text()[-4000:]}")
                time.sleep(0.5)
            yield {"url": url, "root": root, "env": env, "log": log_path, "runtime": str(base / "runtime")}
        finally:
            proc.terminate()  # shuts its kernels down too
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


# ------------------------------------------------------------------------------------- latency in the page
# For each control: (panel, kind, label in the page, the two values it alternates between, the view it redraws);
# kind "picks": a sequence of (dropdown label, value) picks instead, each measured (FIRST_PICKS).
FIRST_PICKS = (("preset", "qkv8"), ("preset", "qk4"), ("head", "1"), ("preset", "qkv8"), ("preset", "kv8"),
               ("layer", "1"), ("preset", "qkv8"), ("preset", "qk4"), ("head", "0"), ("preset", "qkv8"),
               ("preset", "kv8"))
"""The spans panel's first visits: from its first pick (kv8, layer 0, head 0), one dropdown at a time, every
(preset, layer, head) of the notebook model (3 presets × 2 layers × 2 heads) once — each a pick the kernel has not
drawn before (no warm-up input: each is a first time). The page draws them from the states the kernel sent ahead
(:meth:`spanviz.widgets.SpansPanel.prefetch`)."""

BROWSER_CONTROLS = {
    "spans_first_pick": ("spans", "picks", "", FIRST_PICKS, "blocks"),  # first, while every pick is new
    "spans_alpha": ("spans", "slider", "α1", ("ArrowRight", "ArrowLeft"), "blocks"),
    "spans_layer": ("spans", "select", "layer", ("1", "0"), "blocks"),
    "spans_head": ("spans", "select", "head", ("1", "0"), "blocks"),
    "spans_preset": ("spans", "select", "preset", ("qk4", "kv8"), "blocks"),
    "masks_n_local": ("masks", "slider", "n_local (local heads)", ("ArrowLeft", "ArrowRight"), "masks"),
    "masks_window": ("masks", "slider", "window p", ("ArrowLeft", "ArrowRight"), "masks"),
    "fp8_rank": ("fp8", "slider", "rank r", ("ArrowLeft", "ArrowRight"), "bounds"),
    "fp8_delta": ("fp8", "slider", "δ", ("ArrowLeft", "ArrowRight"), "bounds"),
    "fp8_margin": ("fp8", "slider", "margin (2^m headroom)", ("ArrowRight", "ArrowLeft"), "bounds"),
}

# Time the next user input (capture phase: before any widget handles it) and the next drawn revision of a view.
_ARM_JS = """(view) => {
  const gd = document.querySelector(`.spanviz-view-${view} .js-plotly-plot`);
  window.__spanvizBench = {input: null, drawn: null};
  const input = () => { if (window.__spanvizBench.input === null) window.__spanvizBench.input = performance.now(); };
  document.addEventListener('keydown', input, {capture: true, once: true});
  document.addEventListener('change', input, {capture: true, once: true});
  const seen = new MutationObserver(() => { seen.disconnect(); window.__spanvizBench.drawn = performance.now(); });
  seen.observe(gd, {attributes: true, attributeFilter: ['data-revision']});
}"""


def _notebook(T: int, models: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A notebook that shows the three analytic panels at context T (no data, no store: nothing trains)."""

    def cell(source: str) -> dict[str, Any]:
        return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": source}

    head = "from spanviz import widgets\nfrom spanviz.model import GPTConfig\n"
    panels = {"spans": "SpansPanel", "masks": "LocalGlobalPanel", "fp8": "FP8Panel"}
    cells = [cell(head)]
    for name, cls in panels.items():
        cfg = {**models[name], "context_length": T}
        setup = f"\n{name}.controls['context'].value = {T}" if name == "masks" else ""
        cells.append(cell(f"{name} = widgets.{cls}(GPTConfig(**{cfg!r}), store=None){setup}\n{name}.widget"))
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                        "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def bench_browser(
    models: Mapping[str, Mapping[str, Any]],
    contexts: Sequence[int] = (64, 128),
    repeats: int = 30,
    controls: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Latency (ms) from an input in the page to the new figure drawn, per control and context T.

    Args:
        models: ``{"spans" | "masks" | "fp8": GPTConfig keyword arguments}`` of the panels (context_length is
            replaced by each T).
        contexts: the context lengths T to measure at.
        repeats: inputs per control (alternating between two values), after one warm-up input; the spans panel's
            first visits (``spans_first_pick``) are the :data:`FIRST_PICKS` instead, each counted.
        controls: names from :data:`BROWSER_CONTROLS` (default: all).
    Returns:
        ``{"T64": {control: {"wall_ms": [latency in ms, one per input], "page_thread_cpu_ms": [...],
        "page_process_cpu_ms": [...]}, ...}, ...}`` — the wall time a person waits, and the CPU time the page's
        main thread and its renderer process spent from before the input to after the draw (Chrome DevTools
        Protocol ``Performance.getMetrics`` ``ThreadTime`` / ``ProcessTime``; left out where Chromium does not
        report them: the CPU time tells the page's own work from waiting for a busy machine's CPU or the
        kernel), or ``{"skipped": reason}`` without Chromium or Playwright.
    Raises:
        ValueError: an unknown control name.
    """
    names = list(BROWSER_CONTROLS) if controls is None else list(controls)
    unknown = [n for n in names if n not in BROWSER_CONTROLS]
    if unknown:
        raise ValueError(f"controls: unknown {unknown}; allowed: {sorted(BROWSER_CONTROLS)}")
    names.sort(key=lambda n: n != "spans_first_pick")  # first visits before any control revisits a pick
    chromium = chromium_path()
    if chromium is None:
        return {"skipped": "no Chromium found (install Debian's chromium, or set SPANVIZ_CHROMIUM)"}
    try:
        from playwright.sync_api import sync_playwright  # lazily: Playwright drives the browser, a test extra
    except ImportError:
        return {"skipped": "Python Playwright is not installed (pip install playwright)"}
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="spanviz-bench-") as tmp:
        tmp_path = Path(tmp)
        env = {k: v for k, v in os.environ.items() if k not in ("SPANVIZ_STATIC", "JUPYTER_PATH")}
        with jupyter_lab(tmp_path / "lab", env) as server, sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                str(tmp_path / "profile"), executable_path=chromium, args=CHROMIUM_FLAGS, headless=True,
                viewport={"width": 1400, "height": 1000})
            try:
                for T in contexts:
                    name = f"bench_T{T}.ipynb"
                    (server["root"] / name).write_text(json.dumps(_notebook(T, models)))
                    out[f"T{T}"] = _measure_notebook(context.new_page(), server["url"], name, names, repeats)
            finally:
                context.close()
    return out


def _measure_notebook(page: Any, url: str, notebook: str, names: Sequence[str], repeats: int) -> dict[str, Any]:
    page.set_default_timeout(180_000)
    page.goto(f"{url}/lab/tree/{notebook}?reset")
    page.locator(".jp-NotebookPanel .jp-Notebook").first.wait_for(state="visible")
    page.wait_for_timeout(2000)
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
    page.locator('.lm-Menu-item[data-command="runmenu:run-all"]').click()
    for view in ("blocks", "masks", "bounds"):
        page.locator(f".spanviz-view-{view} .js-plotly-plot[data-revision]").first.wait_for(timeout=600_000)
    results: dict[str, Any] = {}
    cdp = page.context.new_cdp_session(page)  # the page's CPU time per input (Chrome DevTools Protocol metrics)
    cdp.send("Performance.enable")

    def renderer_cpu() -> dict[str, float]:
        metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
        return {k: metrics[k] for k in ("ThreadTime", "ProcessTime") if k in metrics}

    def control(kind: str, label: str) -> Any:
        rx = re.compile(rf"^{re.escape(label)}$")
        if kind == "slider":
            box = page.locator(".widget-slider").filter(has=page.locator(".widget-label", has_text=rx)).first
            return box.locator(".noUi-handle").first
        box = page.locator(".widget-dropdown").filter(has=page.locator("label", has_text=rx)).first
        return box.locator("select")

    for name in names:
        _panel, kind, label, values, view = BROWSER_CONTROLS[name]
        if kind == "picks":  # each pick measured, none a warm-up
            inputs = [("select", control("select", lab), value) for lab, value in values]
        else:  # the first input warms caches up and is not counted
            target = control(kind, label)
            # a dropdown already at the first value (left there by an earlier control) starts at the second: a pick
            # of the value shown changes nothing and would never be drawn
            shift = int(kind == "select" and target.evaluate("(s) => s.options[s.selectedIndex].text") == values[0])
            inputs = [(kind, target, values[(i + shift) % 2]) for i in range(repeats + 1)]
        inputs[0][1].scroll_into_view_if_needed()
        times: dict[str, list[float]] = {"wall_ms": [], "page_thread_cpu_ms": [], "page_process_cpu_ms": []}
        for i, (how, target, value) in enumerate(inputs):
            page.evaluate(_ARM_JS, view)
            cpu0 = renderer_cpu()
            if how == "slider":
                target.focus()
                target.press(value)
            else:
                target.select_option(label=value)
            page.wait_for_function("window.__spanvizBench.drawn !== null && window.__spanvizBench.input !== null",
                                   timeout=120_000)
            cpu1 = renderer_cpu()
            timing = page.evaluate("window.__spanvizBench")
            if i or kind == "picks":
                times["wall_ms"].append(timing["drawn"] - timing["input"])
                for key, metric in (("page_thread_cpu_ms", "ThreadTime"), ("page_process_cpu_ms", "ProcessTime")):
                    if metric in cpu0 and metric in cpu1:
                        times[key].append(1e3 * (cpu1[metric] - cpu0[metric]))
        results[name] = {k: v for k, v in times.items() if v}
    page.close()
    return results
