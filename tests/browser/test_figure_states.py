"""What a figure's box shows besides the figure, in a real Chromium: the busy state while a redraw is queued, and a
one-line error inside the box when plotly.js or the figure's module fails (not only in the console).

Small notebooks of their own, written into the package's JupyterLab (see test_harness.py for the toolchain check).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from labpage import Lab

SLOW_S = 4.0  # the kernel takes this long to redraw in the busy-state notebook: long enough to look at the page

FIGURE = "document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .spanviz-view-{}')"


def write(lab: dict, name: str, source: str) -> str:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nbformat.write(nb, lab["root"] / name)
    return name


def box(page: Lab, view: str) -> dict:
    """The figure box of ``view``: its busy attribute, whether the busy badge shows, its status line and the text its
    style sheet puts into an empty box (with its visibility)."""
    return page.page.evaluate(f"""() => {{
      const el = {FIGURE.format(view)};
      const badge = el.querySelector('.spanviz-figure-busy');
      const status = el.querySelector('.spanviz-figure-status');
      const before = getComputedStyle(el, '::before');
      return {{busy: el.getAttribute('aria-busy'), badge: !!badge && getComputedStyle(badge).display !== 'none',
               status: status && !status.hidden ? status.textContent : null, kind: status?.dataset.kind ?? null,
               empty: el.childElementCount === 0, emptyText: before.content, emptyVisible: before.visibility}};
    }}""")


def test_a_queued_redraw_shows_busy_at_once_and_clears_when_drawn(lab: dict, browser, screenshot_dir: Path) -> None:
    name = write(lab, "_busy.ipynb", (
        "import time, ipywidgets as W, numpy as np, plotly.graph_objects as go\n"
        "from spanviz.widgets import FigureView\n"
        "x = np.linspace(0, 6, 60)\n"
        "view = FigureView(go.Figure(go.Scatter(x=x, y=np.sin(x))), name='slow')\n"
        "freq = W.IntSlider(value=1, min=1, max=5, description='freq')\n"
        "def redraw(_change):\n"
        f"    time.sleep({SLOW_S})  # a kernel busy with training, a long computation\n"
        "    view.update([{'type': 'scatter', 'y': np.sin(freq.value * x)}])\n"
        "freq.observe(redraw, names='value')\n"
        "W.VBox([freq, view.widget])"))
    page = Lab(browser, lab)
    try:
        page.open(name)
        page.run_all(name, timeout=180)
        (before,) = page.wait_all_drawn(1, "after Run All")
        assert box(page, "slow")["busy"] is None
        page.move_slider("freq", "ArrowRight")
        moved = page.wait_figure_change("slow", before, "freq 1 → 2")
        handle = page.slider("freq").locator(".noUi-handle").first
        handle.focus()
        handle.press("Home")
        # at once: figure.js marks it as soon as the slider has handled the key (a check right after Playwright's key
        # press may come before that on a loaded machine) — well before the answer, which takes SLOW_S
        page.wait_until("a busy state right after the input", lambda: box(page, "slow")["busy"] == "true",
                        timeout=SLOW_S / 2, every=0.02)
        # The plot dims and says "updating…" once the redraw takes longer than a blink (figure.js), while it waits.
        busy = page.wait_until("the badge of a slow redraw", lambda: (b := box(page, "slow"))["badge"] and b,
                               timeout=SLOW_S / 2, every=0.05)
        assert busy["busy"] == "true"
        page.page.screenshot(path=str(screenshot_dir / "busy.png"))
        drawn = page.wait_until("the busy state to end", lambda: box(page, "slow")["busy"] is None, timeout=60)
        assert drawn and not box(page, "slow")["badge"]
        assert page.figure("slow")["sig"] == before["sig"] != moved["sig"]  # freq back to 1: the first curve again
        # The page told the kernel which revision it has taken in (the back-pressure of live training updates).
        page.wait_until("the kernel to hear which revision the page has", lambda: (t := page.kernel_eval(
            name, "print(view.widget._seen, view.widget.revision)").split()) and t[0] == t[1] != "None")
        # A key press at the end of the range moves nothing and sends nothing: no busy state that would never end.
        handle.press("Home")
        page.page.wait_for_timeout(300)
        assert box(page, "slow")["busy"] is None
        assert not page.errors, "JavaScript errors:\n" + "\n".join(page.errors)
    finally:
        page.close()
    print(f"busy-state screenshot: {screenshot_dir / 'busy.png'}")


def test_plotly_js_that_fails_shows_one_line_in_the_box(lab: dict, browser, screenshot_dir: Path) -> None:
    name = write(lab, "_broken_plotly.ipynb", (
        "import plotly.graph_objects as go\n"
        "from spanviz.widgets.figure import widget as figure_widget\n"
        "from spanviz.widgets import FigureView\n"
        "figure_widget.plotly_source = lambda *build: b\"throw new Error('plotly.js broken on purpose')\"\n"
        "view = FigureView(go.Figure(go.Scatter(y=[1, 2, 3])), name='broken')\n"
        "view.widget._plotly_version = 'broken-on-purpose'  # not the page's cached plotly.js\n"
        "view.widget"))
    page = Lab(browser, lab)
    try:
        page.open(name)
        page.run_all(name, timeout=180)
        shown = page.wait_until("an error line in the box", lambda: (b := box(page, "broken"))["kind"] == "error" and b)
        assert shown["status"].startswith("⚠ figure not drawn: plotly.js did not load") and "\n" not in shown["status"]
        assert "run the cell again or reload the page" in shown["status"]
        assert any("plotly.js did not load" in e for e in page.errors)  # and the details in the console
    finally:
        page.page.screenshot(path=str(screenshot_dir / "broken-plotly.png"))
        page.close()


BROKEN_MODULES = {
    # figure.js (stage two) with a syntax error: loader.js says so in the box
    "module": ("_module", "export default { render( }", "its module did not load"),
    # the anywidget module loads but its render throws before drawing anything: figure.css says so in the empty box
    "loader": ("_esm", "export default { render() { throw new Error('broken on purpose'); } };",
               "its module has not loaded"),
}


@pytest.mark.parametrize("broken", sorted(BROKEN_MODULES))
def test_a_figure_module_that_fails_shows_one_line_in_the_box(lab: dict, browser, broken: str) -> None:
    trait, source, says = BROKEN_MODULES[broken]
    name = write(lab, f"_broken_{broken}.ipynb", (
        "import traitlets as T\n"
        "from spanviz.widgets.figure.widget import PlotlyFigure\n"
        "class Broken(PlotlyFigure):\n"
        f"    {trait} = T.Unicode({source!r}).tag(sync=True)\n"
        "fig = Broken()\n"
        "fig.add_class('spanviz-view-broken')\n"
        "fig"))
    page = Lab(browser, lab)
    try:
        page.open(name)
        page.run_all(name, timeout=180)
        if trait == "_module":
            shown = page.wait_until("an error line in the box", lambda: (b := box(page, "broken"))["kind"] == "error"
                                    and b)
            assert shown["status"].startswith(f"⚠ figure not drawn: {says} (") and "\n" not in shown["status"]
        else:
            shown = page.wait_until("the empty box to say why", lambda: (b := box(page, "broken"))["emptyVisible"] ==
                                    "visible" and b, timeout=60)
            assert shown["empty"] and f"figure not drawn: {says}" in shown["emptyText"]
    finally:
        page.close()


RESIZES_JS = """async () => {
  // count plotly.js's Plots.resize calls (figure.js calls it when the figure's element is resized), page-wide
  const Plotly = await Object.values(window.__spanviz_plotly__)[0];
  if (!Plotly.Plots.__counted) {
    const resize = Plotly.Plots.resize;
    window.__spanvizResizes = 0;
    Plotly.Plots.resize = (gd) => { window.__spanvizResizes += 1; return resize(gd); };
    Plotly.Plots.__counted = true;
  }
  // two frames: a resize observer's callbacks for the last layout change have run
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const gd = %s.querySelector('.js-plotly-plot');
  return {resizes: window.__spanvizResizes, height: gd.querySelector('.main-svg').getBoundingClientRect().height,
          width: gd.querySelector('.main-svg').getBoundingClientRect().width, box: gd.getBoundingClientRect().width};
}""" % FIGURE.format("tall")


def test_a_figure_lays_out_again_for_a_new_width_not_for_its_own_new_height(lab: dict, browser) -> None:
    # A redraw that changes the figure's height (the spans blocks of a preset with fewer orders) resizes its box too;
    # plotly.js's Plots.resize for that would replot the whole figure again (up to three times, in the way of the
    # next input). A new width must still be followed.
    name = write(lab, "_tall.ipynb", (
        "import ipywidgets as W, plotly.graph_objects as go\n"
        "from spanviz.widgets import FigureView\n"
        "view = FigureView(go.Figure(go.Scatter(y=[1, 2, 3]), layout={'height': 300}), name='tall')\n"
        "rows = W.IntSlider(value=1, min=1, max=3, description='rows')\n"
        "rows.observe(lambda ch: view.show([{'type': 'scatter', 'y': list(range(ch['new'] + 2))}],\n"
        "                                  {**view.layout, 'height': 150 + 150 * ch['new']}), names='value')\n"
        "scale = W.IntSlider(value=1, min=1, max=3, description='scale')  # new data, the same layout\n"
        "scale.observe(lambda ch: view.show([{'type': 'scatter', 'y': [ch['new'] * y for y in view.data[0]['y']]}],\n"
        "                                   view.layout), names='value')\n"
        "W.VBox([rows, scale, view.widget])"))
    page = Lab(browser, lab)
    try:
        page.open(name)
        page.run_all(name, timeout=180)
        (before,) = page.wait_all_drawn(1, "after Run All")
        first = page.page.evaluate(RESIZES_JS)
        assert abs(first["height"] - 300) < 1, first
        page.move_slider("rows", "ArrowRight")
        page.wait_figure_change("tall", before, "rows 1 → 2")
        taller = page.page.evaluate(RESIZES_JS)
        assert abs(taller["height"] - 450) < 1, taller  # the layout's new height is drawn ...
        assert taller["resizes"] == first["resizes"], (first, taller)  # ... and not laid out a second time
        size = page.page.viewport_size
        page.page.set_viewport_size({"width": size["width"] - 300, "height": size["height"]})
        try:
            narrower = page.wait_until("the figure to follow a narrower page", lambda: (
                s := page.page.evaluate(RESIZES_JS))["width"] < taller["width"] - 200 and s, timeout=30, every=0.2)
        finally:
            page.page.set_viewport_size(size)
        assert narrower["resizes"] > taller["resizes"] and abs(narrower["width"] - narrower["box"]) < 2, narrower
        assert abs(narrower["height"] - 450) < 1, narrower  # a new width keeps the layout's height ...
        before = page.figure("tall")
        page.move_slider("scale", "ArrowRight")
        page.wait_figure_change("tall", before, "scale 1 → 2")
        rescaled = page.page.evaluate(RESIZES_JS)
        assert abs(rescaled["height"] - 450) < 1, rescaled  # ... and so does the next redraw of the same layout
        assert not page.errors, "JavaScript errors:\n" + "\n".join(page.errors)
    finally:
        page.close()
