"""The figure widget's messages to its views, the reopen hint, the panels' settle message, and the training thread's
priority — without a browser (tests/browser checks what the page then shows)."""

from __future__ import annotations

import json
import os
import sys
import threading
from types import SimpleNamespace

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go
import pytest
from IPython.core.formatters import DisplayFormatter
from plotly.offline import get_plotlyjs_version

from spanviz import widgets
from spanviz.model import GPTConfig
from spanviz.runner import TRAIN_NICE, Job, Runner, lower_thread_priority
from spanviz.widgets.figure import plotly_js
from spanviz.widgets.figure import widget as figure_widget
from spanviz.widgets.figure.widget import (
    HOLD_MAX_S,
    PLOTLY_REQUEST,
    REOPEN_HINT,
    SEEN,
    SETTLED,
    WIDGET_VIEW,
    PlotlyFigure,
)

SMALL = GPTConfig(vocab_size=64, context_length=24, n_layer=1, n_head=2, d_model=32)


def sent_by(widget: W.Widget, monkeypatch: pytest.MonkeyPatch) -> list[tuple[dict, list | None]]:
    """Every comm message the widget sends from now on: (message, buffers)."""
    sent: list[tuple[dict, list | None]] = []
    monkeypatch.setattr(widget, "_send", lambda msg, buffers=None: sent.append((msg, buffers)))
    return sent


CARTESIAN = plotly_js.version_key("cartesian")
GL3D = plotly_js.version_key("gl3d")
pytestmark_builds = pytest.mark.skipif(not plotly_js.partial_builds_usable(),
                                       reason="plotly.py's plotly.js is not the version of the shipped partial builds")


def test_a_view_asking_for_plotly_js_gets_the_source_of_its_build_in_one_buffer(monkeypatch):
    fig = PlotlyFigure(go.Figure(go.Scatter(y=[1, 2])))
    sent = sent_by(fig, monkeypatch)
    fig._handle_custom_msg({"kind": "something else"}, [])
    assert sent == []  # not ours: no answer
    fig._handle_custom_msg({"kind": PLOTLY_REQUEST}, [])
    (msg, buffers), = sent
    key = fig.get_state()["_plotly_version"]  # the views' cache key
    assert msg == {"method": "custom", "content": {"kind": PLOTLY_REQUEST, "version": key}}
    build = plotly_js.build_of_key(key)
    assert len(buffers) == 1 and bytes(buffers[0]) == figure_widget.plotly_source(build)
    head = bytes(buffers[0])[:300].decode()
    assert head.startswith("/**") and f"v{get_plotlyjs_version()}" in head  # a plotly.js of plotly.py's version


@pytestmark_builds
def test_each_figure_gets_the_smallest_plotly_js_build_that_draws_its_traces(monkeypatch):
    """2-D figures get the cartesian build (1.5 MB), the 3-D toy the gl3d one (1.8 MB), a mix both need the full
    one (4.8 MB); a figure whose traces change to 3-D switches build, and the page gets that source first."""
    monkeypatch.setattr(figure_widget, "_page_plotly", {})
    heat = PlotlyFigure(go.Figure([go.Heatmap(z=[[1, 2]]), go.Scatter(y=[1]), go.Bar(y=[2])]))
    assert heat.get_state()["_plotly_version"] == CARTESIAN
    assert PlotlyFigure().get_state()["_plotly_version"] == CARTESIAN  # empty: 2-D axes
    toy = go.Figure([go.Scatter3d(x=[0], y=[0], z=[0]), go.Mesh3d(x=[0, 1, 0], y=[0, 0, 1], z=[0, 0, 0])])
    assert PlotlyFigure(toy).get_state()["_plotly_version"] == GL3D
    mixed = go.Figure([go.Heatmap(z=[[1]]), go.Scatter3d(x=[0], y=[0], z=[0])])
    assert PlotlyFigure(mixed).get_state()["_plotly_version"] == get_plotlyjs_version()  # the full build
    assert set(figure_widget._page_plotly) == {CARTESIAN, GL3D, get_plotlyjs_version()}
    sizes = {k: len(bytes(s.get_state()["_source"])) for k, s in figure_widget._page_plotly.items()}
    assert sizes[CARTESIAN] < 2e6 and sizes[GL3D] < 2e6 and sizes[get_plotlyjs_version()] > 4e6
    # the same widget, 2-D then 3-D: the new build's source is in the page before the state that needs it
    figure_widget._page_plotly.clear()
    opened: list[str] = []
    real_open = W.Widget.open
    monkeypatch.setattr(W.Widget, "open", lambda self: (opened.append(self.get_state().get("_version")),
                                                         real_open(self))[1])
    fig = PlotlyFigure(go.Figure(go.Scatter(y=[1, 2])))
    sent = sent_by(fig, monkeypatch)
    fig.show_figure(toy)
    assert opened[-1] == GL3D and fig.get_state()["_plotly_version"] == GL3D
    (msg, _), = sent  # one message: the build's key travels with the traces that need it
    assert msg["state"]["_plotly_version"] == GL3D and msg["state"]["_data"][0]["type"] == "scatter3d"


def test_plotly_js_builds_fall_back_to_the_full_one_when_versions_differ(monkeypatch):
    """The partial builds are used only with the plotly.js version plotly.py writes its figures for."""
    monkeypatch.setattr(plotly_js, "vendored_version", lambda: "0.0.1")
    plotly_js.partial_builds_usable.cache_clear()
    try:
        assert plotly_js.build_for({"scatter"}) == plotly_js.build_for({"scatter3d"}) == "full"
        assert PlotlyFigure(go.Figure(go.Scatter(y=[1]))).get_state()["_plotly_version"] == get_plotlyjs_version()
    finally:
        plotly_js.partial_builds_usable.cache_clear()
    with pytest.raises(ValueError, match="build='webgl' is not a plotly.js build; allowed: cartesian, gl3d, full"):
        plotly_js.version_key("webgl")


def test_plotly_js_that_cannot_be_read_is_answered_with_the_reason(monkeypatch):
    fig = PlotlyFigure()
    sent = sent_by(fig, monkeypatch)

    def unreadable(build: str = "full") -> bytes:
        raise OSError("plotly.min.js: no such file")

    monkeypatch.setattr(figure_widget, "plotly_source", unreadable)
    fig._handle_custom_msg({"kind": PLOTLY_REQUEST}, [])
    (msg, buffers), = sent
    assert msg["content"]["kind"] == PLOTLY_REQUEST and "no such file" in msg["content"]["error"] and not buffers


def test_plotly_js_reaches_the_page_in_a_models_state_before_the_first_figure(monkeypatch):
    """A figure's first drawing asks nothing of its kernel (which may be running the next cells): plotly.js comes in
    the state of the kernel's one PlotlySource of that build, whose model is created before the figure's."""
    opened: list[str] = []
    monkeypatch.setattr(figure_widget, "_page_plotly", {})
    real_open = W.Widget.open
    monkeypatch.setattr(W.Widget, "open", lambda self: (opened.append(type(self).__name__), real_open(self))[1])
    fig = PlotlyFigure(go.Figure(go.Scatter(y=[1, 2])))
    assert opened.index("PlotlySource") < opened.index("PlotlyFigure")
    source = figure_widget.page_plotly()
    state = source.get_state()
    key = fig.get_state()["_plotly_version"]
    assert bytes(state["_source"]) == figure_widget.plotly_source(plotly_js.build_of_key(key)) and state["_error"] == ""
    assert state["_version"] == key and key.startswith(get_plotlyjs_version())
    assert "initialize" in state["_esm"]  # its module hands the source over when the model is created
    PlotlyFigure()
    assert figure_widget.page_plotly() is source  # one per kernel and build
    source.close()
    PlotlyFigure()
    assert figure_widget.page_plotly() is not source and figure_widget.page_plotly().comm is not None


def test_plotly_js_that_cannot_be_read_comes_with_the_reason_in_the_sources_state(monkeypatch):
    def unreadable(build: str = "full") -> bytes:
        raise OSError("plotly.min.js: no such file")

    monkeypatch.setattr(figure_widget, "_page_plotly", {})
    monkeypatch.setattr(figure_widget, "plotly_source", unreadable)
    state = figure_widget.page_plotly().get_state()
    assert state["_source"] == b"" and "no such file" in state["_error"]


def test_a_figure_is_behind_while_a_page_has_not_taken_in_its_newest_revision(monkeypatch):
    fig = PlotlyFigure(go.Figure(go.Scatter(y=[1, 2])))
    fig.show([{"type": "scatter", "y": [2, 3]}])
    assert not fig.behind()  # no view has ever answered: no page to wait for (a script, a headless run)
    fig._handle_custom_msg({"kind": SEEN, "revision": fig.revision}, [])
    assert not fig.behind()
    fig.show([{"type": "scatter", "y": [3, 4]}])
    assert fig.behind()
    fig._handle_custom_msg({"kind": SEEN, "revision": fig.revision - 1}, [])  # a second, slower view
    assert fig.behind()
    fig._handle_custom_msg({"kind": SEEN, "revision": fig.revision}, [])
    assert not fig.behind()
    fig._handle_custom_msg({"kind": SEEN, "revision": "1"}, [])  # not a revision: ignored
    fig.show([{"type": "scatter", "y": [4, 5]}])
    assert fig.behind()
    now = figure_widget.time.monotonic()
    monkeypatch.setattr(figure_widget.time, "monotonic", lambda: now + HOLD_MAX_S + 0.1)
    assert not fig.behind()  # a page that never answers (closed meanwhile) holds nothing back for good


def test_the_figure_module_depends_on_no_other_widget_model():
    state = PlotlyFigure().get_state()
    refs = [k for k, v in state.items() if isinstance(v, str) and v.startswith("IPY_MODEL_")]
    assert refs == ["layout"]  # ipywidgets' own Layout, resolved by ipywidgets; the module looks up no model
    static = figure_widget.pathlib.Path(figure_widget.__file__).parent / "static"
    assert state["_module"] == (static / "figure.js").read_text()  # what loader.js (the anywidget module) imports
    # the figure's own front end (block_scaler.js, the spans panel's α in the page, is another widget's module)
    assert not [name for name in ("loader.js", "figure.js") if "widget_manager" in (static / name).read_text()]
    assert "spanviz-figure" in state["_dom_classes"]


# ---------------------------------------------------------------------------------------------- reopen hint
class FakeKernelShell:
    """What install_reopen_hint needs of IPython's kernel shell: a display formatter, and a kernel."""

    def __init__(self) -> None:
        self.display_formatter = DisplayFormatter()
        self.kernel = object()


@pytest.fixture
def kernel_shell(monkeypatch):
    ipython = pytest.importorskip("IPython")
    shell = FakeKernelShell()
    monkeypatch.setattr(ipython, "get_ipython", lambda: shell)
    published: list[dict] = []
    monkeypatch.setattr(figure_widget, "publish_display_data", lambda data, **kw: published.append(data))
    shell.published = published
    return shell


def test_in_a_kernel_every_widget_output_comes_after_the_reopen_hint(kernel_shell):
    assert figure_widget.install_reopen_hint() and figure_widget.install_reopen_hint()  # idempotent
    box = W.VBox([W.IntSlider()])
    data, _ = kernel_shell.display_formatter.format(box)
    assert data[WIDGET_VIEW]["model_id"] == box.model_id  # the widget's own output, unchanged
    (hint,) = kernel_shell.published  # published first: it lands just before the widget
    assert hint["text/plain"] == REOPEN_HINT and "Run → Run All Cells" in REOPEN_HINT
    assert 'class="spanviz-reopen-hint"' in hint["text/html"] and "<style>" in hint["text/html"]
    kernel_shell.display_formatter.format(np.arange(3))
    assert len(kernel_shell.published) == 1  # other outputs get no hint


def test_a_figure_installs_the_hint_in_its_kernel_and_nothing_outside_one(kernel_shell, monkeypatch):
    PlotlyFigure()
    kernel_shell.display_formatter.format(W.Output())
    assert len(kernel_shell.published) == 1
    monkeypatch.setattr(sys.modules["IPython"], "get_ipython", lambda: None)  # a script, a terminal
    assert figure_widget.install_reopen_hint() is False


# ----------------------------------------------------------------------------------------------- settling
def test_a_control_settles_every_figure_of_its_panel_after_its_own_redraw(monkeypatch):
    panel = widgets.FP8Panel(SMALL, static=False, store=None)
    assert "spanviz-panel" in panel.widget._dom_classes
    sent = {name: sent_by(view.widget, monkeypatch) for name, view in panel.views.items()}
    panel.controls["rank"].value = 4
    kinds = {name: [m["method"] if m["method"] != "custom" else m["content"]["kind"] for m, _ in msgs]
             for name, msgs in sent.items()}
    assert kinds["bounds"] == ["update", SETTLED]  # the redraw first, then the settle
    assert all(k == [SETTLED] for name, k in kinds.items() if name != "bounds"), kinds
    panel.controls["progress"].value = 1  # a display, not an input: no settle
    assert [len(msgs) for msgs in sent.values()] == [len(k) for k in kinds.values()]
    panel.controls["stop"].click()  # a button: its handler (nothing to stop), then the settle
    assert all(msgs[-1][0]["content"]["kind"] == SETTLED and len(msgs) == len(kinds[name]) + 1
               for name, msgs in sent.items())


def test_a_static_panel_settles_nothing():
    panel = widgets.FP8Panel(SMALL, static=True, store=None)
    panel.controls["rank"].value = 4  # no live figure: nothing to tell, and no error
    assert "spanviz-panel" in panel.widget._dom_classes


def test_scipy_stats_is_imported_only_when_a_test_is_computed():
    """Importing scipy.stats takes about 1 s on 2 cores: ``spanviz.widgets`` and a panel whose first figure needs no
    paired test (03's bounds) draw without it; the first comparison imports it (issue 38: the first figure sooner)."""
    import subprocess

    code = ("import sys; from spanviz import widgets; from spanviz.model import GPTConfig; "
            "widgets.FP8Panel(GPTConfig(vocab_size=64, context_length=24, n_layer=1, n_head=2, d_model=32), "
            "static=False, store=None); print('scipy.stats' in sys.modules); "
            "from spanviz.experiments.stats import paired_comparison; "
            "row = paired_comparison({0: 1.0, 1: 2.0, 2: 3.5}, {0: 1.5, 1: 2.1, 2: 4.0}); "
            "print('scipy.stats' in sys.modules, round(row['p'], 6))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    before, after = out.stdout.split("\n")[:2]
    assert before == "False"
    from scipy import stats

    p = stats.ttest_rel([1.5, 2.1, 4.0], [1.0, 2.0, 3.5]).pvalue
    assert after == f"True {round(float(p), 6)}"


# ----------------------------------------------------------------------------------------------- priority
def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


class NiceProbe:
    """A trainer that records the nice value of the thread running its steps."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.record = SimpleNamespace(history={})

    def step(self, n: int = 1) -> list[dict]:
        self.seen.append(_nice())
        return [{"step": len(self.seen), "train_loss": 1.0}]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priorities are Linux's")
def test_background_training_runs_at_a_lower_priority_and_the_caller_keeps_its_own():
    before = _nice()
    probe = NiceProbe()
    runner = Runner()
    runner.start([Job("a", steps=3, make_trainer=lambda: probe)], blocking=False)
    assert runner.join(30) and runner.state == "done"
    assert probe.seen == [max(before, TRAIN_NICE)] * 3
    assert _nice() == before  # the priority belongs to the training thread only
    blocking = NiceProbe()
    Runner().start([Job("b", steps=2, make_trainer=lambda: blocking)], blocking=True)
    assert blocking.seen == [before] * 2  # a blocking run never lowers the caller (it could not raise it back)


def test_priority_arguments_are_checked():
    with pytest.raises(ValueError, match="nice must be an integer in 0..19"):
        Runner(nice=20)
    with pytest.raises(ValueError, match="nice"):
        Runner(nice=True)
    assert lower_thread_priority(None) is None


def test_encode_passes_plain_json_through_and_still_converts_what_json_cannot_hold():
    from spanviz.widgets.figure.widget import encode

    template = {"layout": {"colorway": ["#636efa", "#EF553B"], "xaxis": {"gridcolor": "white", "ticks": ""},
                           "colorscale": {"sequential": [[0.0, "#0d0887"], [1.0, "#f0f921"]]}}, "n": [1, 2.5, None]}
    assert encode(template) is template  # plain JSON: nothing to walk
    # anything JSON cannot hold, at any depth, is still converted as before
    arr = np.arange(6, dtype=np.int64).reshape(2, 3)
    out = encode({"a": [{"z": arr, "name": "x"}], "b": [1.0, float("nan")], "c": {"d": float("inf")},
                  "e": np.int64(3), "f": {1: "one"}})
    z = out["a"][0]["z"]
    assert z["dtype"] == "float64" and z["shape"] == [2, 3] and out["a"][0]["name"] == "x"
    assert np.frombuffer(z["buffer"], dtype=np.float64).tolist() == [0, 1, 2, 3, 4, 5]
    assert out["b"]["dtype"] == "float64" and np.isnan(np.frombuffer(out["b"]["buffer"])[1])
    assert out["c"] == {"d": None} and out["e"] == 3 and type(out["e"]) is int
    assert json.loads(json.dumps(out["f"])) == {"1": "one"}  # as the comm sends it


def test_plotly_js_starts_for_the_page_when_spanviz_widgets_is_imported_in_a_kernel(kernel_shell, monkeypatch):
    """In a kernel, importing spanviz.widgets sends plotly.js (start_plotly_js → page_plotly) before any figure;
    not where figures are static, and not outside a kernel (a script, the command line)."""
    from spanviz.widgets.figure import view

    sent: list[int] = []
    monkeypatch.setattr(view, "page_plotly", lambda: sent.append(1))
    monkeypatch.delenv("SPANVIZ_STATIC", raising=False)
    view.start_plotly_js()
    assert sent == [1]
    monkeypatch.setenv("SPANVIZ_STATIC", "1")
    view.start_plotly_js()
    assert sent == [1]
    monkeypatch.delenv("SPANVIZ_STATIC")
    kernel_shell.kernel = None  # IPython without a kernel (a terminal)
    view.start_plotly_js()
    assert sent == [1]
    import IPython

    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    view.start_plotly_js()
    assert sent == [1]
