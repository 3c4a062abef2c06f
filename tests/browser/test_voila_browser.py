"""The Voilà view of every notebook (``bash scripts/lab.sh voila``, README "The notebooks"), in a real Chromium.

The README's command starts the server (the venv active, the kernels' environment of the other browser tests:
offline data, a temporary ``SPANVIZ_HOME``, runs of ``conftest.STEPS`` steps). Per notebook, opened at
``/voila/render/<notebook>`` as a workshop participant would: no code on the page, every plotly figure draws data,
one control moves its own figure (and no other analytic one), no error or warning output, no JavaScript error
(except the two font style sheets Voilà's page template asks a CDN for, which an offline machine cannot load: the
icons come from the copy bundled with Voilà — listed, not hidden).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import STEPS
from labpage import Lab
from test_notebooks_browser import CASES, check_clean, check_control

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def voila(chromium: str, spanviz_home: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """``bash scripts/lab.sh voila`` running until the module ends; ``{"url", "log"}``."""
    tmp = tmp_path_factory.mktemp("voila")
    port = _free_port()
    venv_bin = Path(sys.executable).parent
    env = {**spanviz_home, "VIRTUAL_ENV": sys.prefix, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}",
           "SPANVIZ_STEPS": str(STEPS), "JUPYTER_CONFIG_DIR": str(tmp / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"), "JUPYTER_ARGS": f"--no-browser --port={port}"}
    log = tmp / "voila.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(["bash", "scripts/lab.sh", "voila"], cwd=REPO, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://localhost:{port}"
    try:
        deadline = time.monotonic() + 600  # the set-up may install spanviz into this venv first
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"lab.sh voila exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            # Voilà runs behind the token it prints, as JupyterLab does (issue 39 finding 11)
            found = re.search(rf"http://localhost:{port}/\?token=([0-9a-f]+)", log.read_text())
            try:
                if found:
                    with urllib.request.urlopen(f"{url}/?token={found.group(1)}", timeout=5) as answer:
                        if answer.status == 200:
                            token = found.group(1)
                            break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"lab.sh voila did not answer in 600 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield {"url": url, "log": log, "token": token}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # lab.sh exec's voila: this is the server (and its kernels)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        if os.environ.get("SPANVIZ_BROWSER_DEBUG") == "1":
            print(log.read_text()[-6000:])


class VoilaPage(Lab):
    """One notebook's Voilà page: the same reading of figures and controls as :class:`Lab`, on the whole page."""

    scope = "#rendered_cells"

    def __init__(self, context, server: dict) -> None:
        super().__init__(context, {"url": server["url"]})
        self.token = server["token"]
        self.outside: list[str] = []  # what the page asked of another machine (a CDN): offline, an error each
        self.page.on("request", lambda r: None if r.url.startswith((self.url, "data:", "blob:"))
                     else self.outside.append(r.url))

    def open(self, notebook: str) -> None:
        self.page.goto(f"{self.url}/voila/render/{notebook}?token={self.token}")  # the token's cookie for the rest
        self.opened.append(notebook)

    def code_on_page(self) -> int:
        """Code a person could see: code cells' input areas, editors, prompts (Voilà strips the sources: none).
        Markdown cells render inside their input area: they are the page's text, not code."""
        return self.page.eval_on_selector_all(
            ".jp-CodeCell .jp-InputArea, .cm-editor, .CodeMirror, .jp-InputPrompt",
            "els => els.filter(e => e.offsetParent !== null && e.innerText.trim()).length")

    def close(self) -> None:
        self.page.close()  # Voilà shuts the page's kernel down when its page goes


@pytest.mark.timeout(900)
@pytest.mark.parametrize("notebook", sorted(CASES))
def test_voila_view_draws_and_responds(notebook: str, voila: dict, browser, screenshot_dir: Path) -> None:
    case = CASES[notebook]
    control = case.controls[case.busy_control]
    t0 = time.monotonic()
    page = VoilaPage(browser, voila)
    try:
        page.open(notebook)
        page.wait_all_drawn(case.figures, "in the Voilà view", timeout=600)
        drawn = time.monotonic() - t0
        assert page.code_on_page() == 0, "the Voilà view shows code"
        assert page.page.locator("#rendered_cells .jp-CodeCell").count() > 0  # the cells ran, their outputs shown
        assert not page.cell_errors(), page.cell_errors()
        body = page.page.inner_text("body")
        assert "There was an error when executing cell" not in body, body[-2000:]
        check_control(page, notebook, control, live_too=False)  # a run may still be training
        page.wait_all_drawn(case.figures, f"after moving {control.label}")
        shot = page.page.locator(f"#rendered_cells {case.shot}").first
        shot.evaluate("el => el.scrollIntoView({block: 'start'})")
        page.page.wait_for_timeout(1000)
        page.page.screenshot(path=str(screenshot_dir / f"voila-{Path(notebook).stem}.png"))
        check_clean(page, notebook)
        assert page.outside == [], f"the Voilà page fetched from outside this machine: {page.outside}"
    except AssertionError as exc:
        shot_path = screenshot_dir / f"FAILED-voila-{Path(notebook).stem}.png"
        page.page.screenshot(path=str(shot_path))
        raise AssertionError(f"{exc}\n(screenshot {shot_path}; console:\n" + "\n".join(page.console[-20:])
                             + f"\nserver log:\n{voila['log'].read_text()[-2000:]})") from None
    finally:
        page.close()
    print(f"voila {notebook}: every figure drawn {drawn:.0f} s after the page opened; {control.label} redrew "
          f"{sorted(control.own)}")
