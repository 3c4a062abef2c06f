"""The figure widget alone in a real Chromium: the toolchain check, and the cause of the blank figures.

A tiny notebook with an IntSlider that rewrites a :class:`spanviz.widgets.figure.widget.PlotlyFigure` trace: run it,
move the slider with the keyboard, and see the drawn data change. If this fails, the notebook tests cannot mean
anything.

The second test replays the cause of issue 12's blank figures on purpose: the page gets plotly.js 2.5 s late
(with its main thread free meanwhile — what a starved browser on a busy machine does). plotly's own
``go.FigureWidget`` ships plotly.js as its anywidget module, and anywidget drops every message to a model whose
module took more than 2 s to load — the figure stays blank. spanviz's figure must draw anyway, and respond.
"""

from __future__ import annotations

import nbformat
import pytest
from labpage import Lab

HARNESS = "_harness.ipynb"
LATE_PLOTLY_MS = 2500
# Every script over 1 MB (plotly.js) arrives LATE_PLOTLY_MS late, whether imported as a module or loaded as a
# classic script; the page's main thread stays free meanwhile.
LATE_PLOTLY_JS = """
(() => {
  const DELAY = %d;
  const create = URL.createObjectURL.bind(URL);
  const realOf = new Map();
  URL.createObjectURL = (blob) => {
    if (!(blob && blob.size > 1e6)) return create(blob);
    const real = create(blob);
    const late = create(new Blob([`const m = await import("${real}");
      await new Promise((r) => setTimeout(r, ${DELAY})); export default m.default;`], {type: 'text/javascript'}));
    realOf.set(late, real);
    return late;
  };
  const append = Element.prototype.appendChild;
  Element.prototype.appendChild = function (node) {
    if (node && node.tagName === 'SCRIPT' && realOf.has(node.src)) {
      node.src = realOf.get(node.src);
      setTimeout(() => append.call(this, node), DELAY);
      return node;
    }
    return append.call(this, node);
  };
})();
""" % LATE_PLOTLY_MS


@pytest.fixture(scope="module")
def harness(lab: dict) -> str:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(
        "import ipywidgets as W, numpy as np, plotly.graph_objects as go\n"
        "from spanviz.widgets import FigureView\n"
        "x = np.linspace(0, 6, 60)\n"
        "view = FigureView(go.Figure(go.Scatter(x=x, y=np.sin(x))), name='sine')\n"
        "freq = W.IntSlider(value=1, min=1, max=5, description='freq')\n"
        "freq.observe(lambda _c: view.update([{'type': 'scatter', 'y': np.sin(freq.value * x)}]), names='value')\n"
        "W.VBox([freq, view.widget])"
    )]
    nbformat.write(nb, lab["root"] / HARNESS)
    return HARNESS


@pytest.mark.parametrize("late", [False, True], ids=["plotly-on-time", "plotly-2.5s-late"])
def test_slider_moves_the_figure(harness: str, lab: dict, browser, late: bool) -> None:
    page = Lab(browser, lab, init_script=LATE_PLOTLY_JS if late else None)
    try:
        page.open(harness)
        page.run_all(harness, timeout=180)
        (before,) = page.wait_all_drawn(1, "after Run All")
        assert before["traces"] == 1 and before["name"] == "sine"
        assert page.move_slider("freq") == ("1", "2")
        page.wait_figure_change("sine", before, "moving freq")
        assert not page.errors, "JavaScript errors:\n" + "\n".join(page.errors)
    finally:
        page.close()
