"""Drive JupyterLab 4 through Playwright the way a person does, and read what the page *draws*.

One :class:`Lab` is one browser page with JupyterLab; notebooks open in it as tabs (the first through the URL,
the next ones from the file browser), and every query is scoped to the notebook tab in front.

DOM facts relied on (JupyterLab 4.6, ipywidgets 8.1, spanviz's figure widget, plotly.js 4):
- menus are Lumino: ``.lm-MenuBar-item`` / ``.lm-Menu-item`` with ``data-command``;
- code-cell prompts read ``[n]:`` once executed, ``[*]:`` while queued or running;
- ipywidgets 8 sliders are noUiSlider: ``.widget-slider`` holding a ``.widget-label`` (description), a
  focusable ``.noUi-handle`` (arrow keys move it by one step) and a ``.widget-readout``; a Dropdown is a
  ``.widget-dropdown`` with a label and a ``<select>``; ToggleButtons are ``.widget-toggle-button``s;
- every plotly figure is a ``.js-plotly-plot`` element whose ``data`` property holds the traces plotly.js
  drew; spanviz's panels put each figure inside an element with the class ``spanviz-view-<name>``.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from playwright.sync_api import BrowserContext, Locator

DONE_PROMPT = re.compile(r"^\[\d+\]:?$")
ACTIVE = ".jp-NotebookPanel:not(.lm-mod-hidden)"

# For each .js-plotly-plot of the notebook in front: its spanviz view name, the number of traces, whether one
# of them holds data (x, y or z with at least one value), and a signature of all drawn numbers (count, sum and
# position-weighted sum per trace of x, y, z and opacity, and of the layout's shapes and colour-axis ranges), which
# changes when the drawn data changes (an α slider of the spans panel changes only colour ranges, rectangles and
# opacity: spanviz.plots.span_blocks.span_blocks_layout).
FIGURES_JS = """(els) => els.map((gd) => {
  const view = gd.closest('[class*="spanviz-view-"]');
  const name = view ? [...view.classList].find((c) => c.startsWith('spanviz-view-')).slice(13) : '';
  const numbers = (v, out) => {
    if (v == null) return out;
    if (typeof v === 'number') { out.push(v); return out; }
    if (typeof v === 'string') { out.push(v.length); return out; }
    if (typeof v === 'object' && typeof v.bdata === 'string') { out.push(v.bdata.length); return out; }
    if (typeof v.length === 'number') { for (const x of v) numbers(x, out); }
    return out;
  };
  const size = (v) => v == null ? 0 : (typeof v.bdata === 'string' ? v.bdata.length : (v.length || 0));
  const traces = gd.data || [];
  const summary = (xs) => {
    let s = 0, w = 0;
    xs.forEach((x, i) => { if (Number.isFinite(x)) { s += x; w += (i + 1) * x; } });
    return `${xs.length}:${s.toPrecision(8)}:${w.toPrecision(8)}`;
  };
  const layout = gd.layout || {};
  const scales = Object.keys(layout).filter((k) => k.startsWith('coloraxis')).sort()
    .map((k) => [layout[k].cmin, layout[k].cmax, layout[k].reversescale ? 1 : 0]);
  const shapes = (layout.shapes || []).map((r) => [r.x0, r.x1, r.y0, r.y1]);
  const sig = traces.map((t) => [...['x', 'y', 'z'].map((k) => summary(numbers(t[k], []))), t.opacity ?? 1].join('|'))
    .join(';') + `#${summary(numbers(scales, []))}#${summary(numbers(shapes, []))}`;
  return {name, traces: traces.length, drawn: traces.some((t) => ['x', 'y', 'z'].some((k) => size(t[k]) > 0)), sig,
          title: ((gd.layout || {}).title || {}).text || ''};
})"""


# The titles (and subtitles) of the figures that the page cuts off: plotly.js does not wrap a title, so a long one runs
# past the edge of its figure's drawing and is clipped there — a student reads half a sentence.
CUT_TITLES_JS = """(els) => els.flatMap((gd) => {
  const svg = gd.querySelector('.main-svg');
  if (!svg) return [];
  const box = svg.getBoundingClientRect();
  return [...gd.querySelectorAll('.g-gtitle text')].map((t) => [t, t.getBoundingClientRect()])
    .filter(([, r]) => r.width > 0 && (r.left < box.left - 1 || r.right > box.right + 1))
    .map(([t, r]) => `${t.textContent} (${Math.round(r.width)} px wide, the figure ${Math.round(box.width)})`);
})"""


# Time the next user input (capture phase: before any widget handles it) until the figure of ``view`` in the notebook
# in front marks a newer drawn revision (``data-revision``, set once Plotly.react resolved): what a student waits.
ARM_JS = """(view) => {
  const gd = document.querySelector(`.jp-NotebookPanel:not(.lm-mod-hidden) .spanviz-view-${view} .js-plotly-plot`);
  const t = window.__spanvizTimed = {input: null, drawn: null, busyAtInput: null};
  const input = () => {
    if (t.input !== null) return;
    t.input = performance.now();
    // what the page shows right after the input reached the control (the control's own handlers ran first)
    setTimeout(() => { t.busyAtInput = gd.closest('.spanviz-figure')?.getAttribute('aria-busy') ?? null; }, 0);
  };
  document.addEventListener('keydown', input, {capture: true, once: true});
  document.addEventListener('change', input, {capture: true, once: true});
  const seen = new MutationObserver(() => { seen.disconnect(); t.drawn = performance.now(); });
  seen.observe(gd, {attributes: true, attributeFilter: ['data-revision']});
}"""


class Lab:
    """A JupyterLab page; console errors and page errors are collected in :attr:`errors`.

    Every query is scoped to :attr:`scope` (the notebook tab in front; a Voilà page sets its own).
    """

    scope = ACTIVE

    def __init__(self, context: BrowserContext, server: dict, init_script: str | None = None) -> None:
        self.url, self.runtime = server["url"], server.get("runtime")
        self.page = context.new_page()
        if init_script:
            self.page.add_init_script(init_script)
        self.page.set_default_timeout(120_000)
        self.errors: list[str] = []
        self.console: list[str] = []  # every console message, for failure reports
        self.page.on("console", self._on_console)
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.opened: list[str] = []

    def _on_console(self, msg: Any) -> None:
        self.console.append(f"{msg.type}: {msg.text[:500]}")
        if msg.type == "error":
            self.errors.append(f"console.error: {msg.text} @ {msg.location.get('url', '')}")

    # ------------------------------------------------------------------------------------------ kernels
    def sessions(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.url}/api/sessions", timeout=30) as r:
            return json.load(r)

    def kernel_state(self, notebook: str) -> str | None:
        for s in self.sessions():
            if s.get("path", "").endswith(notebook) and s.get("kernel"):
                return s["kernel"].get("execution_state")
        return None

    def kernel_eval(self, notebook: str, code: str, timeout: float = 60.0) -> str:
        """Run ``code`` in the notebook's kernel through a second client (for failure reports); its output."""
        from pathlib import Path

        from jupyter_client import BlockingKernelClient

        found = [s for s in self.sessions() if s.get("path", "").endswith(notebook)]
        if not found or not self.runtime:
            return "(no kernel session found)"
        client = BlockingKernelClient()
        client.load_connection_file(str(Path(self.runtime) / f"kernel-{found[0]['kernel']['id']}.json"))
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

    # ------------------------------------------------------------------------------------------ notebooks
    def open(self, notebook: str) -> None:
        """Open ``notebook`` as a new tab: through the URL for the first, from the file browser afterwards."""
        if not self.opened:
            self.page.goto(f"{self.url}/lab/tree/{notebook}?reset")
        else:
            self.page.locator(".jp-DirListing-itemText", has_text=re.compile(rf"^{re.escape(notebook)}$")).dblclick()
        self.opened.append(notebook)
        self.wait_until(f"{notebook} in front", lambda: self.front() == notebook, timeout=120)
        self.page.locator(f"{self.scope} .jp-Notebook").first.wait_for(state="visible", timeout=120_000)
        self.wait_until(f"the kernel of {notebook} to start", lambda: self.kernel_state(notebook) == "idle",
                        timeout=240)

    def front(self) -> str | None:
        tab = self.page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel")
        return tab.first.inner_text().strip() if tab.count() else None

    def activate(self, notebook: str) -> None:
        self.page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab",
                          has=self.page.locator(".lm-TabBar-tabLabel", has_text=re.compile(
                              rf"^{re.escape(notebook)}$"))).first.click()
        self.wait_until(f"{notebook} in front", lambda: self.front() == notebook, timeout=60)

    def prompts(self) -> list[str]:
        return self.page.eval_on_selector_all(f"{self.scope} .jp-CodeCell .jp-InputPrompt",
                                              "els => els.map(e => e.textContent.trim())")

    def start_run_all(self) -> None:
        """Run > Run All Cells in the notebook in front, without waiting for the cells."""
        self.page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
        self.page.locator('.lm-Menu-item[data-command="runmenu:run-all"]').click()

    def run_all(self, notebook: str, timeout: float = 600.0) -> None:
        """Run > Run All Cells in the notebook in front; wait until every code cell has run."""
        self.start_run_all()

        def finished() -> bool:
            prompts = self.prompts()
            return bool(prompts) and all(DONE_PROMPT.match(p) for p in prompts) and \
                self.kernel_state(notebook) == "idle"

        self.wait_until(f"Run All of {notebook}", finished, timeout=timeout, every=1.0)
        errors = self.cell_errors()
        assert not errors, f"{notebook}: cells raised in the browser kernel:\n" + "\n".join(errors)

    def cell_errors(self) -> list[str]:
        return self.page.eval_on_selector_all(
            f"{self.scope} .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']",
            "els => els.map(e => e.textContent.slice(0, 2000))")

    def warning_boxes(self) -> list[str]:
        """Everything a cell (or a widget output inside it) wrote to stderr: warnings, logged errors."""
        return self.page.eval_on_selector_all(
            f"{self.scope} .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
            "els => els.map(e => e.textContent.slice(0, 2000))")

    # ------------------------------------------------------------------------------------------ figures
    def figures(self) -> list[dict]:
        """What the notebook in front draws: one dict per plotly figure (see :data:`FIGURES_JS`)."""
        return self.page.eval_on_selector_all(f"{self.scope} .js-plotly-plot", FIGURES_JS)

    def cut_titles(self) -> list[str]:
        """Titles of the notebook in front's figures that run past their figure's edges (see :data:`CUT_TITLES_JS`)."""
        return self.page.eval_on_selector_all(f"{self.scope} .js-plotly-plot", CUT_TITLES_JS)

    def figure(self, view: str) -> dict:
        found = [f for f in self.figures() if f["name"] == view]
        assert len(found) == 1, f"expected one figure of view {view!r}, found {[f['name'] for f in self.figures()]}"
        return found[0]

    def wait_all_drawn(self, at_least: int, moment: str, timeout: float = 180.0) -> list[dict]:
        """Wait until at least ``at_least`` figures are on the page and every one draws data; returns them."""
        seen: list[list[dict]] = []

        def all_drawn() -> list[dict] | None:
            figs = self.figures()
            seen.append(figs)
            return figs if len(figs) >= at_least and all(f["drawn"] for f in figs) else None

        try:
            return self.wait_until(f"every figure drawn ({moment})", all_drawn, timeout=timeout)
        except AssertionError as exc:
            blank = [(f["name"] or "?", f["title"][:60], f["traces"]) for f in seen[-1] if not f["drawn"]]
            raise AssertionError(f"{exc}: {len(seen[-1])} figures on the page, blank (view, title, traces): "
                                 f"{blank}") from None

    def wait_figure_change(self, view: str, before: dict, what: str, timeout: float = 90.0) -> dict:
        return self.wait_until(f"figure {view!r} to draw new data after {what}",
                               lambda: (f := self.figure(view))["sig"] != before["sig"] and f["drawn"] and f,
                               timeout=timeout)

    def timed(self, view: str, action: Callable[[], Any], timeout: float = 120.0) -> dict:
        """Run ``action`` (an input on a control) and wait until the figure ``view`` draws a new revision.

        Returns ``{"ms": input → drawn in milliseconds (None: nothing drawn within ``timeout``), "busy_at_input":
        the figure's aria-busy right after the input}``.
        """
        self.page.evaluate(ARM_JS, view)
        action()
        deadline = time.monotonic() + timeout
        while True:
            t = self.page.evaluate("window.__spanvizTimed")
            if t["drawn"] is not None and t["input"] is not None:
                return {"ms": t["drawn"] - t["input"], "busy_at_input": t["busyAtInput"]}
            if time.monotonic() > deadline:
                return {"ms": None, "busy_at_input": t["busyAtInput"], "input_seen": t["input"] is not None}
            self.page.wait_for_timeout(100)

    # ------------------------------------------------------------------------------------------ controls
    def slider(self, label: str) -> Locator:
        """The ipywidgets slider whose description is exactly ``label`` (in the notebook in front), with or without
        the " •" that marks a control moved off its default."""
        found = self.page.locator(f"{self.scope} .widget-slider").filter(
            has=self.page.locator(".widget-label", has_text=re.compile(rf"^{re.escape(label)}( •)?$")))
        assert found.count() >= 1, f"no slider labelled {label!r}"
        return found.first

    def move_slider(self, label: str, key: str = "ArrowRight", times: int = 1) -> tuple[str, str]:
        """Focus the slider's handle and press ``key``; returns the readout before and after."""
        s = self.slider(label)
        readout = s.locator(".widget-readout")
        before = readout.inner_text()
        handle = s.locator(".noUi-handle").first
        handle.scroll_into_view_if_needed()
        handle.focus()
        for _ in range(times):
            handle.press(key)
        after = self.wait_until(f"slider {label!r} readout to change",
                                lambda: (t := readout.inner_text()) != before and t, timeout=30)
        return before, after

    def select(self, label: str, value: str) -> None:
        """Pick ``value`` in the Dropdown labelled ``label``."""
        box = self.page.locator(f"{self.scope} .widget-dropdown").filter(
            has=self.page.locator("label", has_text=re.compile(rf"^{re.escape(label)}( •)?$"))).first
        box.locator("select").select_option(label=value)

    def toggle(self, text: str) -> None:
        self.page.locator(f"{self.scope} .widget-toggle-button", has_text=re.compile(rf"^\s*{re.escape(text)}\s*$")).click()

    def button(self, text: str) -> Locator:
        return self.page.locator(f"{self.scope} button.jupyter-button",
                                 has_text=re.compile(rf"^\s*{re.escape(text)}\s*$")).first

    def output_text(self, pattern: str) -> str | None:
        """The text of the first widget output area (an ipywidgets ``Output``) matching ``pattern``, or None."""
        texts = self.page.eval_on_selector_all(f"{self.scope} .jupyter-widgets.widget-output",
                                               "els => els.map(e => e.innerText)")
        return next((t for t in texts if re.search(pattern, t)), None)

    def status(self) -> str:
        """The training panel's status line: the HTML widget in the same row as the Train button."""
        row = self.button("Train").locator("xpath=..")
        return row.locator(".widget-html").last.inner_text().strip()

    def wait_status(self, pattern: str, timeout: float = 180.0) -> str:
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
        """Close the page and shut down the kernels of the notebooks it opened."""
        self.page.close()
        for s in self.sessions():
            if any(s.get("path", "").endswith(nb) for nb in self.opened):
                req = urllib.request.Request(f"{self.url}/api/sessions/{s['id']}", method="DELETE")
                urllib.request.urlopen(req, timeout=60).close()
