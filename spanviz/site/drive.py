"""Driving a built site's page in a browser (Playwright's sync API, passed in): what the browser test and
``scripts/bench_site.py`` share. Nothing here imports Playwright. Source: spanviz."""

from __future__ import annotations

from pathlib import Path
from typing import Any

READY_JS = "() => window.__sv && window.__sv.ready"
# the plot each figure view shows now (a view keeps the plots it drew before, hidden: class sv-hidden)
DRAWN_JS = """() => Array.from(document.querySelectorAll('section.sv-x .sv-fig:not(.sv-hidden)')).map((d) => ({
  section: d.closest('section').dataset.x, view: d.dataset.view,
  traces: d._fullData ? d._fullData.length : 0,
  points: d._fullData ? d._fullData.reduce((s, t) => s + ['x', 'y', 'z'].reduce(
    (a, k) => a + (t[k] && t[k].length ? t[k].length : 0), 0), 0) : 0,
}))"""
CONTROLS_JS = """() => Array.from(document.querySelectorAll('section.sv-x')).flatMap((s) =>
  (window.__sv.sections[s.dataset.x] || {spec: {controls: []}}).spec.controls.map((c) => ({
    section: s.dataset.x, name: c.name, n: c.labels.length, index: window.__sv.sections[s.dataset.x].idx[c.name]})))"""
SIGNATURE_JS = """([section]) => { const s = window.__sv.sections[section]; const out = {};
  for (const [name, div] of Object.entries(s.divs)) out[name] = div.data
    ? JSON.stringify([div.data.map((t) => [t.z && t.z.length, t.opacity, t.x && Array.from(t.x).slice(0, 50),
        t.y && Array.from(t.y).slice(0, 200),
        t.z && Array.isArray(t.z) ? JSON.stringify(t.z).length + JSON.stringify(t.z).slice(0, 4000) : '']),
        div.layout.annotations, div.layout.shapes, div.layout.title, div.layout.yaxis2,
        ['coloraxis2', 'coloraxis3', 'coloraxis4', 'coloraxis5'].map((k) => div.layout[k])])
    : div.innerHTML;
  return out; }"""
MOVE_JS = """([section, name, index]) => new Promise((resolve) => {
  const input = document.querySelector(`section[data-x="${section}"] [name="${name}"]`);
  const before = window.__sv.timings.length;
  input.value = String(index);
  input.dispatchEvent(new Event('input', {bubbles: true}));
  const wait = () => window.__sv.timings.length > before
    ? resolve(window.__sv.timings[window.__sv.timings.length - 1]) : setTimeout(wait, 1);
  wait(); })"""
IDLE_JS = "() => window.__sv && window.__sv.ready && window.__sv.idle !== false"  # a page without it: idle
PLOTS_JS = """([section]) => { const s = window.__sv.sections[section]; const out = {};
  for (const [name, v] of Object.entries(s.views)) out[name] = {gl: v.gl, capacity: v.capacity,
    plots: v.plots().map((d) => { const st = getComputedStyle(d);
      return {shown: d === s.divs[name], visibility: st.visibility, position: st.position,
              height: d.getBoundingClientRect().height, drawn: !!d._fullData}; }),
    holder_height: s.divs[name] ? s.divs[name].parentElement.getBoundingClientRect().height : 0};
  return out; }"""


def block_network(page: Any) -> list[str]:
    """Abort every request that is not a ``file://`` one; returns the list the aborted URLs are appended to."""
    blocked: list[str] = []

    def route(r: Any) -> None:
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    return blocked


def open_page(page: Any, path: Path, timeout_ms: float = 120_000) -> dict[str, Any]:
    """Open a built page from disk and wait until every view is drawn; returns ``{"first_ms"}``: from navigation
    to the first figure drawn (``window.__sv.first``)."""
    page.goto(Path(path).resolve().as_uri())
    page.wait_for_function(READY_JS, timeout=timeout_ms)
    return {"first_ms": page.evaluate("() => window.__sv.first")}


def drawn(page: Any) -> list[dict[str, Any]]:
    """Every figure the page shows (one plot per figure view: the one shown now): section, view, number of traces
    and of drawn values (x, y, z lengths)."""
    return page.evaluate(DRAWN_JS)


def controls(page: Any) -> list[dict[str, Any]]:
    """Every control of the page: section, name, number of values, index now."""
    return page.evaluate(CONTROLS_JS)


def signature(page: Any, section: str) -> dict[str, str]:
    """A comparable summary of what each view of a section shows now."""
    return page.evaluate(SIGNATURE_JS, [section])


def move_timed(page: Any, section: str, name: str, index: int) -> dict[str, Any]:
    """Set a control to its value ``index`` as a person would (an input event); returns the page's record of it:
    ``{"control", "ms"`` (from the input to the redraw painted)``, "drawn_before"`` (every figure it shows was
    drawn already: only shown, not drawn)``, "drawn"`` (the views it had to draw)``}``."""
    return page.evaluate(MOVE_JS, [section, name, index])


def move(page: Any, section: str, name: str, index: int) -> float:
    """Set a control to its value ``index`` as a person would (an input event); returns ms from the input to the
    redraw painted, as the page measured it."""
    return float(move_timed(page, section, name, index)["ms"])


def wait_idle(page: Any, timeout_ms: float = 120_000) -> None:
    """Wait until the page's idle drawing (the settings next to the controls' ones, drawn ahead) is done."""
    page.wait_for_function(IDLE_JS, timeout=timeout_ms)


def plots(page: Any, section: str) -> dict[str, dict[str, Any]]:
    """The plots each figure view of a section holds: ``{view: {"gl", "capacity", "holder_height", "plots":
    [{"shown"`` (the one ``__sv.sections[section].divs[view]`` names)``, "visibility", "position", "height",
    "drawn"}]}}``."""
    return page.evaluate(PLOTS_JS, [section])
