"""A notebook reopened after its kernel stopped (the next workshop day, a Binder restart), in a real Chromium.

The saved notebook still holds its widget outputs, but no kernel has their models: JupyterLab's widget renderer
writes "Error displaying widget: model not found" in their place and logs "widget model not found" to the console,
once per output. spanviz puts a one-line hint before every widget output
(spanviz.widgets.figure.widget.install_reopen_hint) whose style sheet shows it only then, in place of the error.
Running the notebook again brings the panel back.

The console messages are JupyterLab's (jupyterlab-manager's renderer logs each missing model); spanviz cannot stop
them without a lab extension of its own. The test pins them down: exactly one per stale output, nothing else.
"""

from __future__ import annotations

import json
import re
import shutil
import urllib.request
from pathlib import Path

from conftest import NOTEBOOKS
from labpage import ACTIVE, Lab

from spanviz.widgets.figure.widget import REOPEN_HINT, WIDGET_VIEW

NOTEBOOK = "03_fp8_logit_bounds.ipynb"
FIGURES = 3
STALE = f"{ACTIVE} .jp-OutputArea-output.jupyter-widgets"  # what jupyterlab-manager makes of a widget with no model
HINTS = f"{ACTIVE} .spanviz-reopen-hint"
MISSING_MODEL = re.compile(r"^console\.error: Error: widget model not found\b.*jupyterlab-manager", re.S)


def saved_outputs(path: Path) -> tuple[int, int]:
    """(widget outputs, reopen hints) in the notebook file."""
    cells = json.loads(path.read_text())["cells"]
    outputs = [o.get("data", {}) for c in cells for o in c.get("outputs", [])]
    return (sum(WIDGET_VIEW in d for d in outputs),
            sum("spanviz-reopen-hint" in "".join(d.get("text/html", "")) for d in outputs))


def visible(page: Lab, selector: str) -> list[str]:
    """innerText of the elements matching ``selector`` that are displayed."""
    return page.page.eval_on_selector_all(selector, "els => els.filter(e => e.offsetParent !== null)"
                                                    ".map(e => e.innerText.trim())")


def test_a_reopened_notebook_says_to_run_it_again_instead_of_showing_broken_widgets(
    lab: dict, browser, screenshot_dir: Path
) -> None:
    name = "_reopened_fp8.ipynb"  # a copy: the other tests open the notebook itself, without saved outputs
    shutil.copy(NOTEBOOKS / NOTEBOOK, lab["root"] / name)
    page = Lab(browser, lab)
    try:
        page.open(name)
        page.run_all(name)
        page.wait_all_drawn(FIGURES, "after Run All")
        assert visible(page, HINTS) == [], "a hint shows while the panel is live"
        page.page.locator(".lm-MenuBar-item", has_text=re.compile(r"^File$")).click()
        page.page.locator('.lm-Menu-item[data-command="docmanager:save"]').click()
        widgets, hints = page.wait_until("the notebook saved with its widget outputs",
                                         lambda: (n := saved_outputs(lab["root"] / name))[0] >= 2 and n)
        assert hints == widgets, f"{widgets} widget outputs saved, but {hints} reopen hints"

        # The kernel stops; the student opens the notebook again (a new page, a new kernel).
        for s in page.sessions():
            if s.get("path", "").endswith(name):
                urllib.request.urlopen(urllib.request.Request(f"{lab['url']}/api/sessions/{s['id']}",
                                                              method="DELETE"), timeout=60).close()
        page.errors.clear()
        page.page.goto(f"{lab['url']}/lab/tree/{name}?reset")
        page.wait_until(f"{name} in front", lambda: page.front() == name, timeout=120)
        page.wait_until("the widget renderer to give up on every saved output",
                        lambda: page.page.locator(STALE).count() == widgets, timeout=120)
        shown = page.wait_until("a hint per stale output", lambda: len(v := visible(page, HINTS)) == widgets and v)
        assert all(h == REOPEN_HINT for h in shown), shown
        text = page.page.locator(f"{ACTIVE} .jp-Notebook").inner_text()
        assert "Error displaying widget" not in text and "model not found" not in text
        assert visible(page, STALE) == []  # the stale outputs are hidden behind their hints
        assert len(page.errors) == widgets and all(MISSING_MODEL.match(e) for e in page.errors), page.errors
        page.page.locator(HINTS).first.evaluate("el => el.scrollIntoView({block: 'center'})")
        page.page.wait_for_timeout(500)
        page.page.screenshot(path=str(screenshot_dir / "reopened.png"))

        # Running the notebook again, as the hint says, brings the panel back; the hints disappear.
        page.wait_until(f"the kernel of {name} to start", lambda: page.kernel_state(name) == "idle", timeout=240)
        page.errors.clear()
        page.run_all(name)
        page.wait_all_drawn(FIGURES, "after running the reopened notebook again")
        assert visible(page, HINTS) == [] and page.page.locator(STALE).count() == 0
        assert not page.errors, "JavaScript errors:\n" + "\n".join(page.errors)
    except AssertionError as exc:
        shot = screenshot_dir / "FAILED-reopened.png"
        page.page.screenshot(path=str(shot))
        raise AssertionError(f"{exc}\n(screenshot {shot}; console:\n" + "\n".join(page.console[-20:]) + ")") from None
    finally:
        page.close()
    print(f"reopened-notebook screenshot: {screenshot_dir / 'reopened.png'}")
