"""Helpers that drive a JupyterLab 4 page through Playwright: open, run all, read plots, move sliders, click.

DOM facts relied on (JupyterLab 4.6, ipywidgets 8.1, plotly 7.1 FigureWidget via anywidget):
- menus are Lumino: ``.lm-MenuBar-item`` / ``.lm-Menu-item`` with ``data-command``;
- code-cell prompts read ``[n]:`` once executed, ``[*]:`` while queued or running;
- ipywidgets 8 sliders are noUiSlider: ``.widget-slider`` holding a ``.widget-label`` (description), a
  focusable ``.noUi-handle`` (arrow keys move it by one step) and a ``.widget-readout``;
- a FigureWidget renders a ``.js-plotly-plot`` whose ``svg.main-svg`` children hold the drawn traces.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from playwright.sync_api import BrowserContext, Locator, Page

DONE_PROMPT = re.compile(r"^\[\d+\]:?$")


class LabPage:
    """One notebook open in JupyterLab, with the browser's console errors collected."""

    def __init__(self, context: BrowserContext, url: str, notebook: str, runtime_dir: str | None = None) -> None:
        self.url, self.notebook, self.runtime_dir = url, notebook, runtime_dir
        self.page: Page = context.new_page()
        self.errors: list[str] = []
        self.console: list[str] = []  # every console message, for failure reports
        self.page.on("console", self._on_console)
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.set_default_timeout(60_000)

    def _on_console(self, msg: Any) -> None:
        self.console.append(f"{msg.type}: {msg.text[:500]}")
        if msg.type == "error":
            self.errors.append(f"console.error: {msg.text} @ {msg.location.get('url', '')}")

    # ------------------------------------------------------------------------------------------ kernel
    def _kernel_state(self) -> str | None:
        with urllib.request.urlopen(f"{self.url}/api/sessions", timeout=10) as r:
            sessions = json.load(r)
        for s in sessions:
            if s.get("path", "").endswith(self.notebook) and s.get("kernel"):
                return s["kernel"].get("execution_state")
        return None

    def kernel_eval(self, code: str, timeout: float = 30.0) -> str:
        """Run ``code`` in the notebook's kernel through a second client (for failure reports); its stdout."""
        from pathlib import Path

        from jupyter_client import BlockingKernelClient

        with urllib.request.urlopen(f"{self.url}/api/sessions", timeout=10) as r:
            sessions = [s for s in json.load(r) if s.get("path", "").endswith(self.notebook)]
        if not sessions or not self.runtime_dir:
            return "(no kernel session found)"
        client = BlockingKernelClient()
        client.load_connection_file(str(Path(self.runtime_dir) / f"kernel-{sessions[0]['kernel']['id']}.json"))
        client.start_channels()
        out: list[str] = []
        try:
            client.execute_interactive(code, timeout=timeout, output_hook=lambda m: out.append(
                m["content"].get("text", "") or str(m["content"].get("evalue", ""))) if m["msg_type"] in (
                "stream", "error") else None)
        except Exception as exc:  # noqa: BLE001 - a diagnostic must not hide the real failure
            out.append(f"(kernel_eval failed: {exc!r})")
        finally:
            client.stop_channels()
        return "".join(out)

    def wait_until(self, what: str, fn: Callable[[], Any], timeout: float = 120.0, every: float = 0.5) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = fn()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
            self.page.wait_for_timeout(int(every * 1000))

    # -------------------------------------------------------------------------------------------- open
    def open(self) -> None:
        self.page.goto(f"{self.url}/lab/tree/{self.notebook}?reset")
        self.page.locator(".jp-NotebookPanel .jp-Notebook").first.wait_for(state="visible", timeout=120_000)
        self.wait_until("the kernel to start", lambda: self._kernel_state() == "idle", timeout=120)

    def prompts(self) -> list[str]:
        return self.page.eval_on_selector_all(
            ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt",
            "els => els.map(e => e.textContent.trim())")

    def run_all(self, timeout: float = 240.0) -> None:
        """Run > Run All Cells, then wait for every code cell to have an execution count."""
        self.page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
        self.page.locator('.lm-Menu-item[data-command="runmenu:run-all"]').click()

        def finished() -> bool:
            prompts = self.prompts()
            if any("*" in p for p in prompts):
                return False
            if self._kernel_state() != "idle":
                return False
            return True

        self.page.wait_for_timeout(1000)
        self.wait_until("Run All to finish", finished, timeout=timeout)
        errors = self.cell_errors()
        assert not errors, f"{self.notebook}: cells raised in the browser kernel:\n" + "\n".join(errors)
        prompts = self.prompts()
        not_run = [i for i, p in enumerate(prompts) if not DONE_PROMPT.match(p)]
        assert not not_run, f"{self.notebook}: code cells {not_run} did not run (prompts {prompts})"

    def cell_errors(self) -> list[str]:
        return self.page.eval_on_selector_all(
            '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"], '
            ".jp-OutputArea-output .jp-RenderedText[data-mime-type='application/vnd.jupyter.error']",
            "els => els.filter(e => /Traceback|Error/.test(e.textContent)).map(e => e.textContent.slice(0, 2000))")

    # ------------------------------------------------------------------------------------------- plots
    def plots(self) -> Locator:
        return self.page.locator(".js-plotly-plot")

    def wait_for_plots(self, n: int = 1, timeout: float = 120.0) -> int:
        """Wait until at least ``n`` plotly figures have drawn their SVG; returns how many there are."""
        def rendered() -> int:
            c = self.page.eval_on_selector_all(
                ".js-plotly-plot", "els => els.filter(e => e.querySelector('svg.main-svg .cartesianlayer, "
                "svg.main-svg .pielayer, svg.main-svg .polarlayer')).length")
            return c if c >= n else 0

        return self.wait_until(f"{n} plotly figure(s) to render", rendered, timeout=timeout)

    def plot_signatures(self) -> list[str]:
        """What each figure draws: the trace layers of every ``svg.main-svg`` (hover and modebar excluded)."""
        return self.page.eval_on_selector_all(
            ".js-plotly-plot",
            """els => els.map(el => Array.from(el.querySelectorAll('svg.main-svg'))
                 .map(svg => Array.from(svg.children)
                   .filter(c => !c.classList.contains('hoverlayer') && !c.classList.contains('modebar'))
                   .map(c => c.outerHTML).join('')).join('|'))""",
        )

    def wait_for_plot_change(self, before: list[str], timeout: float = 60.0) -> list[int]:
        """Wait until some figure draws something else than in ``before``; returns the changed indices."""

        def changed() -> list[int]:
            after = self.plot_signatures()
            return [i for i, (a, b) in enumerate(zip(before, after)) if a != b] or (
                [len(before)] if len(after) != len(before) else [])

        return self.wait_until("a plot to change", changed, timeout=timeout)

    # ----------------------------------------------------------------------------------------- widgets
    def slider(self, label: str) -> Locator:
        """The ipywidgets slider whose description is exactly ``label``."""
        found = self.page.locator(".widget-slider").filter(
            has=self.page.locator(".widget-label", has_text=re.compile(rf"^{re.escape(label)}$")))
        assert found.count() >= 1, f"no slider labelled {label!r}"
        return found.first

    def move_slider(self, label: str, key: str = "ArrowRight", times: int = 1) -> tuple[str, str]:
        """Focus the slider's handle and press ``key``; returns the readout before and after."""
        s = self.slider(label)
        readout = s.locator(".widget-readout")
        before = readout.inner_text() if readout.count() else ""
        handle = s.locator(".noUi-handle").first
        handle.scroll_into_view_if_needed()
        handle.focus()
        for _ in range(times):
            handle.press(key)
        after = self.wait_until(f"slider {label!r} readout to change",
                                lambda: (t := readout.inner_text()) != before and t, timeout=15)
        return before, after

    def output_text(self, pattern: str) -> str | None:
        """The text of the first widget output area (an ipywidgets ``Output``) matching ``pattern``, or None."""
        texts = self.page.eval_on_selector_all(".jupyter-widgets.widget-output", "els => els.map(e => e.innerText)")
        return next((t for t in texts if re.search(pattern, t)), None)

    def button(self, text: str) -> Locator:
        return self.page.locator("button.jupyter-button", has_text=re.compile(rf"^\s*{re.escape(text)}\s*$")).first

    def status(self) -> str:
        """The training panel's status line: the HTML widget in the same row as the Train button."""
        row = self.button("Train").locator("xpath=..")
        return row.locator(".widget-html").last.inner_text().strip()

    def wait_status(self, pattern: str, timeout: float = 120.0) -> str:
        rx = re.compile(pattern)
        seen: list[str] = []

        def match() -> str | None:
            text = self.status()
            seen.append(text)
            return text if rx.search(text) else None

        try:
            return self.wait_until(f"status matching {pattern!r}", match, timeout=timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last status: {seen[-1:]!r}") from None

    def close(self) -> None:
        """Close the page and shut its kernel down (kernels outlive pages; the next notebook needs the CPU)."""
        self.page.close()
        with urllib.request.urlopen(f"{self.url}/api/sessions", timeout=10) as r:
            sessions = json.load(r)
        for s in sessions:
            if s.get("path", "").endswith(self.notebook):
                req = urllib.request.Request(f"{self.url}/api/sessions/{s['id']}", method="DELETE")
                urllib.request.urlopen(req, timeout=30).close()
