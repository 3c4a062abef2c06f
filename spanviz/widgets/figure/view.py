"""Figures on screen: a :class:`FigureView` holds a live :class:`~spanviz.widgets.figure.widget.PlotlyFigure` or,
where custom widgets render unreliably (Colab, VS Code), a static figure re-rendered into an ``Output``
(:func:`use_static`); and the small layout helpers the panels share (sliders, side by side, "computing…")."""

from __future__ import annotations

import contextlib
import html
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import ipywidgets as W
import plotly.graph_objects as go
import plotly.io as pio

from spanviz.settings import ENV_STATIC, env_flag
from spanviz.widgets.figure.widget import PlotlyFigure, figure_state, page_plotly

logger = logging.getLogger(__name__)


def use_static(static: bool | None = None) -> bool:
    """Whether panels should draw static figures into an ``Output`` instead of live figure widgets.

    Precedence: the ``static`` argument; then the environment variable ``SPANVIZ_STATIC`` ("1"/"true" →
    static, "0"/"false" → widgets; :func:`spanviz.settings.env_flag`, empty = unset); then auto-detection: static
    in Colab (``google.colab`` imported) and in VS Code (``VSCODE_PID`` set), where custom widgets render
    unreliably.

    Raises:
        ValueError: ``SPANVIZ_STATIC`` set to something other than 1/0/true/false/yes/no/on/off.
    """
    if static is not None:
        return bool(static)
    flag = env_flag(ENV_STATIC) if os.environ.get(ENV_STATIC, "").strip() else None
    if flag is not None:
        return flag
    return "google.colab" in sys.modules or "VSCODE_PID" in os.environ


def start_plotly_js() -> None:
    """In a live kernel whose figures are widgets (not :func:`use_static`), send plotly.js to the page now, before
    the first figure (:func:`~spanviz.widgets.figure.widget.page_plotly`, the build of 2-D figures): the page
    evaluates it (about 1 s of its main thread on 2 cores) while the kernel goes on importing and computing, so the
    first figure draws at once.
    ``spanviz.widgets`` calls this when it is imported, before its heavier modules (torch, scipy). Nothing happens
    outside an IPython kernel (scripts, tests, the command line); a failure is logged, never raised."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None and getattr(shell, "kernel", None) is not None and not use_static():
            page_plotly()
    except Exception as exc:  # noqa: BLE001 - a figure asks its kernel for plotly.js itself if this fails
        logger.debug("spanviz: plotly.js not sent early: %s", exc)


def _display_bundle(fig: go.Figure) -> dict[str, Any]:
    """An Output display item for a static figure: the plotly mimetype (VS Code, JupyterLab) plus HTML."""
    spec = json.loads(pio.to_json(fig, validate=False))
    return {
        "output_type": "display_data",
        "data": {
            "application/vnd.plotly.v1+json": {"data": spec.get("data", []), "layout": spec.get("layout", {})},
            "text/html": pio.to_html(fig, include_plotlyjs="cdn", full_html=False),
            "text/plain": f"<plotly figure: {len(fig.data)} traces>",
        },
        "metadata": {},
    }


DATA_KEYS = frozenset({"x", "y", "z", "i", "j", "k", "text", "customdata", "name", "opacity"})
"""Trace properties a live update pushes; everything else (styles, axes, colors) is set when the figure is
built and is assumed to follow from the trace structure (a different structure rebuilds the figure)."""


class FigureView:
    """One figure on screen: a :class:`~spanviz.widgets.figure.widget.PlotlyFigure`, or a static ``go.Figure``
    re-rendered into an ``Output`` (:func:`use_static`).

    The view keeps the figure as plain data (``data``: trace dicts, ``layout``: a dict), exactly what the
    browser is sent. A rebuild (another trace structure: a preset, a replay) shows the new figure in the *same*
    widget, so it draws as reliably as an update.

    Args:
        fig: the first figure to show.
        static: see :func:`use_static`.
        name: names the view on the page: its widget gets the CSS class ``spanviz-view-<name>`` (for styling
            and for browser tests that check a control moves *its* figure).

    Attributes:
        widget: the ipywidget to place in a layout.
        data / layout: what is shown (trace dicts with numpy arrays; layout dict).
        figure: the shown state as a ``go.Figure`` (built on access; for tests and export).
        static: True in static mode.
        updates / rebuilds: counters (for tests and benchmarks).
    """

    def __init__(self, fig: go.Figure, static: bool | None = None, name: str | None = None) -> None:
        self.static = use_static(static)
        self.updates = 0
        self.rebuilds = 0
        self._lock = threading.RLock()
        self.data, self.layout = figure_state(fig)
        if self.static:
            self.widget = W.Output(layout=W.Layout(width="100%"))
            self._render()
        else:
            self.widget = PlotlyFigure(fig)
        if name:
            self.widget.add_class(f"spanviz-view-{name.replace('/', '-')}")

    @property
    def figure(self) -> go.Figure:
        return go.Figure(data=self.data, layout=self.layout)

    def _render(self, redraw: bool = True) -> None:
        if self.static:
            self.widget.outputs = (_display_bundle(self.figure),)
        else:
            self.widget.show(self.data, self.layout, redraw=redraw)

    def show(self, data: Sequence[Mapping[str, Any]], layout: Mapping[str, Any], redraw: bool = True) -> None:
        """Show this whole state: trace dicts and a layout dict (e.g. a cached figure's, with new data) — no
        ``go.Figure`` is built. ``redraw=False``: the page has drawn it already (see
        :meth:`~spanviz.widgets.figure.widget.PlotlyFigure.show`); a static view always re-renders."""
        with self._lock:
            self.updates += 1
            self.data, self.layout = [dict(t) for t in data], dict(layout)
            self._render(redraw)

    def _matches(self, data: Sequence[Mapping[str, Any]]) -> bool:
        if len(data) != len(self.data):
            return False
        return all(d.get("type", "scatter") == t.get("type", "scatter") for d, t in zip(data, self.data))

    def update(
        self,
        data: Sequence[Mapping[str, Any]],
        build: Callable[[], go.Figure] | None = None,
        layout: Mapping[str, Any] | None = None,
    ) -> str:
        """Show new trace data.

        Args:
            data: trace dicts as returned by a ``plots.*_data`` function (same order as the figure's traces);
                only their :data:`DATA_KEYS` are pushed.
            build: makes the full figure; called when the trace count or types differ from the current
                figure (e.g. another preset). Without it a mismatch raises.
            layout: top-level layout entries to replace in the same message (e.g. ``{"annotations": [...]}``).
        Returns:
            "patched" (data updated, one message to the browser) or "rebuilt".
        Raises:
            ValueError: structure mismatch and no ``build``.
        """
        with self._lock:
            self.updates += 1
            if not self._matches(data):
                if build is None:
                    raise ValueError(f"figure has {len(self.data)} traces, update has {len(data)}; "
                                     "pass build= to rebuild")
                self.replace(build())
                return "rebuilt"
            self.data = [{**old, **{k: v for k, v in new.items() if k in DATA_KEYS}}
                         for old, new in zip(self.data, data)]
            if layout is not None:
                self.layout = {**self.layout, **layout}
            self._render()
            return "patched"

    def replace(self, fig: go.Figure) -> None:
        """Show a new figure (new layout and traces) in the same widget."""
        with self._lock:
            self.rebuilds += 1
            self.data, self.layout = figure_state(fig)
            self._render()


@contextlib.contextmanager
def computing(note: W.HTML, what: str) -> Iterator[None]:
    """Show "computing <what>…" in ``note`` while the block runs (a redraw slower than a blink: a preset, a
    context length). The message reaches the browser before the figure does."""
    note.value = f"<i style='color:#666'>computing {html.escape(what)}…</i>"
    try:
        yield
    finally:
        note.value = ""


def side_by_side(*items: tuple[W.Widget, str]) -> W.HBox:
    """An HBox whose children get the given widths (e.g. "55%"), so none is pushed off the page."""
    for widget, width in items:
        widget.layout.width = width
        widget.layout.min_width = "0"
    return W.HBox([widget for widget, _ in items], layout=W.Layout(width="100%"))


def slider(kind: type, description: str, value: Any, continuous: bool = True, **kw: Any) -> W.Widget:
    return kind(
        value=value,
        description=description,
        continuous_update=continuous,
        style={"description_width": "initial"},
        layout=W.Layout(width="280px"),
        **kw,
    )
