"""Real-browser fixtures: JupyterLab servers driven by Debian's Chromium through Python Playwright, and a bounded
CPU load.

A server (:func:`spanviz.bench.browser.jupyter_lab`) runs from this interpreter on a free port, with an empty
token and password and XSRF checks off, on a temporary copy of ``notebooks/``. Its config, runtime, workspace
and user-settings folders are temporary; ``JUPYTER_DATA_DIR`` is left alone so the lab extensions installed in
the environment (ipywidgets manager, anywidget) stay visible.

The kernels run the notebooks in their **default** parameters (no ``SPANVIZ_SMOKE``) with fewer training steps
(``SPANVIZ_STEPS``), the offline WikiText-2 folder, ``SPANVIZ_HOME`` in a temporary folder (token cache warmed
once), **no** ``SPANVIZ_BLOCKING`` (the browser exercises the background-thread path, so Stop works) and no
warning filter (a warning printed in a cell is a failure, so it must be visible).

Environment knobs: ``SPANVIZ_BROWSER_LOAD=N`` runs *every* browser test under N busy-loop processes (the
contention run of the issue: ``SPANVIZ_BROWSER_LOAD=4 bash scripts/test.sh tests/browser``; the multi-notebook
test always runs under load); ``SPANVIZ_UPDATE_SCREENSHOTS=1`` writes ``docs/screenshots/<nb>.png`` (otherwise
they go to a temporary folder, so CI never rewrites tracked files); ``SPANVIZ_BROWSER_DEBUG=1`` prints the
server logs at the end. Skips (with the reason) only when Chromium or Playwright is missing.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spanviz.bench.browser import CHROMIUM_FLAGS, chromium_path, jupyter_lab

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
WIKITEXT = REPO.parent / "shared" / "data" / "wikitext-2"
STEPS = 40  # training steps per run in the per-notebook tests: a run long enough to Stop, short enough to finish
LOAD_MAX_S = 1800  # a load process ends by itself after this long, even if its test never stops it


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.browser)


@contextlib.contextmanager
def cpu_load(workers: int, max_s: float = LOAD_MAX_S) -> Iterator[list[int]]:
    """``workers`` busy-loop processes for the duration of the block (each also ends by itself after ``max_s``).

    Yields their pids. The processes are ours: they are killed by pid when the block ends.
    """
    code = f"import time\nend = time.monotonic() + {max_s}\nwhile time.monotonic() < end:\n    pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(max(0, workers))]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=30)


def load_workers() -> int:
    """Busy-loop processes requested for every browser test (``SPANVIZ_BROWSER_LOAD``; 0 when unset)."""
    raw = os.environ.get("SPANVIZ_BROWSER_LOAD", "").strip()
    if not raw:
        return 0
    if not raw.isdigit():
        raise ValueError(f"SPANVIZ_BROWSER_LOAD must be a number of busy-loop processes, got {raw!r}")
    return int(raw)


@pytest.fixture(scope="session")
def chromium() -> str:
    path = chromium_path()
    if path is None:
        pytest.skip("Chromium not found (install Debian's `chromium` package, or set SPANVIZ_CHROMIUM)")
    pytest.importorskip("playwright.sync_api", reason="Python Playwright is not installed (pip install playwright)")
    return path


@pytest.fixture(scope="package", autouse=True)
def contention() -> Iterator[int]:
    """The load every browser test of this package runs under (``SPANVIZ_BROWSER_LOAD``, default none)."""
    workers = load_workers()
    with cpu_load(workers):
        yield workers


@pytest.fixture(scope="package")
def spanviz_home(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for the kernels: offline data, a temporary SPANVIZ_HOME with the token cache warmed once."""
    home = tmp_path_factory.mktemp("spanviz-home")
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPANVIZ_BLOCKING", "SPANVIZ_SMOKE", "SPANVIZ_STATIC", "JUPYTER_PATH", "PYTHONWARNINGS")}
    env.update(SPANVIZ_HOME=str(home), HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", SPANVIZ_OFFLINE="1")
    if WIKITEXT.is_dir():
        env.setdefault("SPANVIZ_WIKITEXT_DIR", str(WIKITEXT))
    if env.get("SPANVIZ_WIKITEXT_DIR"):
        env.setdefault("SPANVIZ_TRAIN_SPLIT", "validation")
        env.setdefault("SPANVIZ_EVAL_SPLIT", "test")
        # Warm the token cache once (the README's command), so no kernel spends its first Train tokenizing.
        subprocess.run([str(Path(sys.executable).with_name("spanviz")), "prepare-data"], env=env, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    return env


@pytest.fixture
def leave_the_store_as_found(spanviz_home: dict[str, str]) -> Iterator[None]:
    """Remove what a test adds to the kernels' results store (a default run it trained, the bundle its notebooks
    imported), so that a later test's Train with the defaults trains instead of replaying this test's run. The test
    shuts its kernels down before this runs (``Lab.close``)."""
    root = Path(spanviz_home["SPANVIZ_HOME"]) / "runs"
    before = set(root.rglob("*")) if root.exists() else set()
    yield
    for path in sorted(set(root.rglob("*")) - before if root.exists() else (), reverse=True):
        if path.is_file() or path.is_symlink():
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


@pytest.fixture(scope="package")
def lab(chromium: str, spanviz_home: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The JupyterLab of the per-notebook tests: runs of :data:`STEPS` steps."""
    with jupyter_lab(tmp_path_factory.mktemp("lab"), {**spanviz_home, "SPANVIZ_STEPS": str(STEPS)},
                     sorted(NOTEBOOKS.glob("*.ipynb"))) as server:
        yield server


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


@pytest.fixture(scope="package")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The static site (``spanviz site``), built once for the site tests of every browser."""
    from spanviz.site import build_site

    out = tmp_path_factory.mktemp("site")
    build_site(out)
    return out
