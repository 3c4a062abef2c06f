"""Real-browser fixtures: a JupyterLab server (session) driven by Debian's Chromium through Python Playwright.

The server runs from this interpreter (``python -m jupyterlab``) on a free port, with an empty token and
password and XSRF checks off, on a temporary copy of ``notebooks/`` (plus a tiny harness notebook). Its
config, runtime, workspace and user-settings folders are temporary; ``JUPYTER_DATA_DIR`` is left alone so the
lab extensions installed in the environment (ipywidgets manager, plotly, anywidget) stay visible.

The kernels inherit the server's environment: ``SPANVIZ_SMOKE=1`` (tiny models), the offline WikiText-2
folder, ``SPANVIZ_HOME`` in a temporary folder (token cache warmed once here), **no** ``SPANVIZ_BLOCKING``
(the browser exercises the background-thread path so Stop works), and ``SPANVIZ_STEPS`` large so a run is
still going when the test presses Stop.

Environment knobs: ``SPANVIZ_UPDATE_SCREENSHOTS=1`` writes ``docs/screenshots/<nb>.png`` (otherwise the
screenshots go to a temporary folder, so CI never rewrites tracked files); ``SPANVIZ_BROWSER_DEBUG=1``
prints the server log at the end. Skips (with the reason) only when Chromium or Playwright is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
WIKITEXT = REPO.parent / "shared" / "data" / "wikitext-2"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]
HARNESS = "_harness.ipynb"


def chromium_path() -> str | None:
    for name in (os.environ.get("SPANVIZ_CHROMIUM"), "chromium", "chromium-browser"):
        if name and (found := shutil.which(name)):
            return found
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.browser)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _harness_notebook() -> nbformat.NotebookNode:
    """The toolchain check: an IntSlider that rewrites a plotly FigureWidget's trace."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(
        "import ipywidgets as W, numpy as np, plotly.graph_objects as go\n"
        "x = np.linspace(0, 6, 60)\n"
        "fig = go.FigureWidget(go.Scatter(x=x, y=np.sin(x)))\n"
        "freq = W.IntSlider(value=1, min=1, max=5, description='freq')\n"
        "def redraw(_change):\n"
        "    with fig.batch_update():\n"
        "        fig.data[0].y = np.sin(freq.value * x)\n"
        "freq.observe(redraw, names='value')\n"
        "W.VBox([freq, fig])"
    )]
    return nb


def _write_settings(settings_dir: Path) -> None:
    """Lab user settings for testing: no virtual scrolling (all cells in the DOM), no news/update fetches."""
    files = {
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
            "fetchNews": "false", "checkForUpdates": False},
    }
    for rel, content in files.items():
        path = settings_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content))


@pytest.fixture(scope="session")
def chromium() -> str:
    path = chromium_path()
    if path is None:
        pytest.skip("Chromium not found (install Debian's `chromium` package, or set SPANVIZ_CHROMIUM)")
    pytest.importorskip("playwright.sync_api", reason="Python Playwright is not installed (pip install playwright)")
    return path


@pytest.fixture(scope="package")
def lab(chromium: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A running JupyterLab: ``{"url", "root", "env", "log"}``."""
    base = tmp_path_factory.mktemp("lab")
    root, home = base / "notebooks", base / "spanviz-home"
    root.mkdir()
    for nb in NOTEBOOKS.glob("*.ipynb"):
        shutil.copy(nb, root / nb.name)
    nbformat.write(_harness_notebook(), root / HARNESS)
    settings = base / "user-settings"
    _write_settings(settings)

    env = {k: v for k, v in os.environ.items() if k not in ("SPANVIZ_BLOCKING", "JUPYTER_PATH")}
    env.update(
        SPANVIZ_SMOKE="1", SPANVIZ_HOME=str(home), SPANVIZ_STEPS="100000", SPANVIZ_STATIC="0",
        JUPYTER_CONFIG_DIR=str(base / "config"), JUPYTER_RUNTIME_DIR=str(base / "runtime"),
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
        HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", SPANVIZ_OFFLINE="1", PYTHONWARNINGS="ignore",
    )
    if WIKITEXT.is_dir():
        env.setdefault("SPANVIZ_WIKITEXT_DIR", str(WIKITEXT))
    if env.get("SPANVIZ_WIKITEXT_DIR"):
        env.setdefault("SPANVIZ_TRAIN_SPLIT", "validation")
        env.setdefault("SPANVIZ_EVAL_SPLIT", "test")
        # Warm the token cache once, so no kernel spends its first Train tokenizing.
        subprocess.run([sys.executable, "-m", "spanviz.cli", "prepare-data"], env=env, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)

    port = _free_port()
    log_path = base / "server.log"
    log = open(log_path, "w")  # noqa: SIM115 - closed at teardown
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
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    url = f"http://127.0.0.1:{port}"
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
                raise RuntimeError(f"jupyter lab did not answer /api/status in 180 s:\n{log_path.read_text()[-4000:]}")
            time.sleep(0.5)
        yield {"url": url, "root": root, "env": env, "log": log_path}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        if os.environ.get("SPANVIZ_BROWSER_DEBUG"):
            print(log_path.read_text()[-8000:])


@pytest.fixture(scope="package")
def browser(chromium: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as p:
        # A persistent context is the supported way to pass a fresh --user-data-dir.
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=chromium, args=CHROMIUM_FLAGS, headless=True,
            viewport={"width": 1400, "height": 1000},
        )
        yield context
        context.close()


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("SPANVIZ_UPDATE_SCREENSHOTS") == "1":
        out = REPO / "docs" / "screenshots"
        out.mkdir(parents=True, exist_ok=True)
        return out
    return tmp_path_factory.mktemp("screenshots")
