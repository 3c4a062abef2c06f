"""The shipped partial plotly.js builds (spanviz/widgets/figure/static/vendor, :mod:`spanviz.widgets.figure.plotly_js`)
in Chromium: each registers exactly the trace types spanviz's table says it does, and draws a spanviz figure of its
kind (with plotly.py's default template, which names every trace type) without a console error."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from spanviz.widgets.figure import plotly_js
from spanviz.widgets.figure.widget import figure_state

pytestmark = pytest.mark.skipif(not plotly_js.partial_builds_usable(),
                                reason="plotly.py's plotly.js is not the version of the shipped partial builds")

FIGURES = {
    "cartesian": go.Figure([go.Heatmap(z=[[1, 2], [3, 4]]), go.Scatter(y=[1, 3, 2], mode="lines+markers"),
                            go.Bar(y=[2, 1])]),
    "gl3d": go.Figure([go.Scatter3d(x=[0, 1], y=[0, 1], z=[0, 1], mode="markers"),
                       go.Mesh3d(x=[0, 1, 0], y=[0, 0, 1], z=[0, 0, 0], opacity=0.3)]),
}


@pytest.mark.parametrize("build", sorted(plotly_js.PARTIAL))
def test_partial_build_has_its_trace_types_and_draws_a_figure(browser, build: str) -> None:
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.set_content("<div id='g' style='width:500px;height:400px'></div>")
        page.add_script_tag(path=str(plotly_js.path(build)))
        assert page.evaluate("Plotly.version") == plotly_js.vendored_version()
        traces = page.evaluate("Object.keys(Plotly.PlotSchema.get().traces)")
        assert set(traces) == plotly_js.PARTIAL[build]
        data, layout = figure_state(FIGURES[build])
        assert plotly_js.build_for(plotly_js.trace_types(data)) == build
        assert "heatmap" in json.dumps(layout["template"])  # the default template names every trace type
        drawn = page.evaluate(
            "async ([data, layout]) => { const gd = document.getElementById('g');"
            " await Plotly.newPlot(gd, data, layout); return gd._fullData.map((t) => t.type); }",
            [json.loads(json.dumps(data, default=lambda a: a.tolist())), layout])
        assert drawn == [t["type"] for t in data]
        assert not errors, errors
    finally:
        page.close()
