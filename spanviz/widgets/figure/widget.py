"""A plotly figure as a small, state-synced widget: what the panels draw into in JupyterLab.

The messages between kernel and page are described once, in :mod:`spanviz.widgets.figure`.

Why not plotly's own ``go.FigureWidget``: since plotly 6 it is an anywidget whose front-end module is the whole
plotly.js bundle (≈ 5 MB), sent with every figure and imported afresh by the browser for each one. anywidget
gives a model 2 s from its creation to import its module; past that it silently drops every message to that
model. plotly sends a figure's traces and layout in messages right *after* the one that creates the model, so
on a busy machine (several notebooks open, earlier kernels still training, the browser getting a fraction of
a core) a figure whose import took longer than 2 s stays blank for good — empty default axes, no title — and
ignores every later update. Each rebuilt figure is a new model and another chance to fail.

:class:`PlotlyFigure` avoids both halves of that: its module is a few kilobytes (imported well inside the
deadline), plotly.js travels once per kernel and build (:mod:`.plotly_js`: the smallest that draws the figure's
traces) in the state of a :class:`PlotlySource` widget (the cartesian build's created when ``spanviz.widgets`` is
imported in a kernel, :func:`~.view.start_plotly_js`, any other just before the first figure that needs it; never
displayed; no other widget model is looked up, so nothing depends on anywidget's
``widget_manager``) and is evaluated once per page and version, and the figure is *state*, not a stream of edit
messages: the traits ``_data`` and ``_layout`` always hold the
whole figure, so a view draws the latest state whenever it comes to exist, and an update merged with another
one (ipywidgets holds messages while it handles one from the browser) loses nothing.

A figure's first drawing needs nothing from its kernel: its state and module come in the message that creates its
model, plotly.js in the one that created the PlotlySource before it. A kernel running the notebook's next cells
answers the page only once it is idle — when plotly.js was fetched with a custom message, no figure of a notebook
was drawn before its last cell ended. The custom message remains a fallback
for a view that finds no PlotlySource of its version in the page within 3 s. A new figure structure
(another preset, a replay) is a new state of the same widget, never a new widget.

Arrays travel as binary buffers (numpy in, typed arrays out; NaN allowed, e.g. masked attention scores).

A reopened notebook (its kernel stopped: the next day, a Binder restart) still holds every widget output, but no
kernel has their models, and JupyterLab shows "Error displaying widget: model not found" in their place. So in a
kernel that shows a spanviz figure, every widget output is preceded by a one-line hint to run the notebook again
(:func:`install_reopen_hint`); its style sheet hides it while the widget is live and, in a trusted notebook (the
usual case: one the student saved), hides the stale error in its place.

The front end is ``static/loader.js`` (the anywidget module: a few lines that import ``static/figure.js``, synced
in ``_module``, once per page), ``figure.js``, ``static/figure.css`` and ``static/plotly_source.js``
(PlotlySource's). What the box shows besides the figure: a line while plotly.js loads; a one-line error when
plotly.js, a redraw or the figure module fails (and, from the style sheet, when even the loader never ran); and a
busy state from the moment a control of the same panel moves until the redraw is drawn, or until the kernel says
the input is handled (:meth:`PlotlyFigure.settled`, which :class:`spanviz.widgets.Panel` calls after every control
change).

Live updates have back-pressure: each view tells its kernel which revision the page has taken in, and a panel that
streams training updates skips one while the page has not taken in the last (:meth:`PlotlyFigure.behind`). So
several notebooks training never send a busy browser more than it takes in: a backlog would make a slider's redraw
wait behind it and, once the server's websocket ping goes unanswered for 90 s, drop the kernel's connection
("Connection lost, reconnecting") with the messages in flight.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import pathlib
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import anywidget
import ipywidgets as W
import numpy as np
import plotly.graph_objects as go
import traitlets as T
from IPython.display import publish_display_data

from spanviz.widgets.figure import plotly_js

_NUMERIC_KINDS = "biuf"


def encode(value: Any) -> Any:
    """JSON-able state with numpy arrays as binary buffers: ``{"dtype", "shape", "buffer": memoryview}``.

    Numeric arrays become float64/float32/int32/uint8 buffers (int64 and bool are converted: browsers have no
    int64 typed array plotly.js can read); lists of plain numbers with a NaN or ±inf become float64 buffers
    (JSON has no NaN); non-finite floats elsewhere become None; strings, dicts, None pass through. A dict or list
    that is plain JSON already (no array, no numpy scalar, no NaN or ±inf anywhere inside) is returned as it is.
    """
    if isinstance(value, (Mapping, list, tuple)) and _plain_json(value):
        return value  # e.g. a layout's plotly template: ~450 values walked below on every redraw, ~7 ms per α move
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _NUMERIC_KINDS:
            return encode(value.tolist())
        if value.dtype.kind == "b" or value.dtype.itemsize > 4 and value.dtype.kind in "iu":
            value = value.astype(np.float64)
        elif value.dtype.kind == "f" and value.dtype.itemsize < 4:
            value = value.astype(np.float32)
        array = np.ascontiguousarray(value)
        return {"dtype": str(array.dtype), "shape": list(array.shape), "buffer": memoryview(array).cast("B")}
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in value):
            if not all(math.isfinite(v) for v in value):
                return encode(np.asarray(value, dtype=np.float64))
            return [v.item() if isinstance(v, np.number) else v for v in value]
        return [encode(v) for v in value]
    if isinstance(value, np.generic):
        return encode(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _plain_json(value: Any) -> bool:
    """True when ``value`` is JSON as it is: str-keyed dicts, lists, str, int, finite float, bool, None (checked by
    the json module's C encoder, which stops at the first array, numpy integer or non-finite float)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def encode_trait(value: Any, _widget: Any) -> Any:
    """A traitlets ``to_json`` serializer that sends a synced trait as :func:`encode` does (arrays as buffers)."""
    return encode(value)


PLOTLY_REQUEST = "spanviz-plotly-js"
"""The custom message a view sends to ask for plotly.js, and the kind of the answer (the source in one buffer)."""
SETTLED = "spanviz-settled"
"""The custom message that ends a view's busy state (see :meth:`PlotlyFigure.settled`)."""
SEEN = "spanviz-seen"
"""The custom message a view sends once the page has taken in a revision (``{"kind", "revision"}``): the
back-pressure of live updates (see :meth:`PlotlyFigure.behind`)."""
HOLD_MAX_S = 5.0
"""The longest :meth:`PlotlyFigure.behind` holds live updates back for a view that does not answer (a closed page)."""

logger = logging.getLogger(__name__)


_STATIC = pathlib.Path(__file__).parent / "static"
_FIGURE_MODULE = (_STATIC / "figure.js").read_text(encoding="utf-8")

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
REOPEN_HINT = ("↻ This interactive output needs the notebook's kernel: run the notebook again (Run → Run All Cells); "
               "runs still training in the kernel are picked up there, not started twice.")
"""The line shown in place of a widget whose kernel is gone (see :func:`install_reopen_hint`)."""

# JupyterLab (and Notebook 7) render a widget output in an output element of its own; when the widget's model is not
# found, jupyterlab-manager writes an error text into that element and gives it the class "jupyter-widgets", while a
# live view puts that class on a child instead. The hint is hidden unless its output area holds such a stale element,
# which it then hides. Without the style sheet (an untrusted notebook, GitHub, nbviewer) the hint simply shows.
_STALE = ".jp-OutputArea-output.jupyter-widgets"
_REOPEN_HINT_HTML = (
    "<style>.spanviz-reopen-hint{display:none}"
    f".jp-OutputArea:has({_STALE}) .spanviz-reopen-hint{{display:block}}"
    f".jp-OutputArea:has(.spanviz-reopen-hint)>.jp-OutputArea-child:has(>{_STALE}){{display:none}}</style>"
    '<div class="spanviz-reopen-hint" style="padding:3px 8px;border-left:3px solid #e0a800;background:#fff8e1;'
    f'color:#5d4200;font-size:13px">{REOPEN_HINT.replace("Run → Run All Cells", "<b>Run → Run All Cells</b>")}</div>'
)


def reopen_hint_bundle() -> dict[str, str]:
    """The hint's display data: HTML with its style sheet, and the plain line."""
    return {"text/html": _REOPEN_HINT_HTML, "text/plain": REOPEN_HINT}


def _hinted_bundle(widget: W.DOMWidget) -> dict[str, Any] | None:
    bundle = widget._repr_mimebundle_()
    if bundle and WIDGET_VIEW in bundle:
        publish_display_data(reopen_hint_bundle())
    return bundle


def install_reopen_hint() -> bool:
    """In a Jupyter kernel, make every widget output (``ipywidgets.DOMWidget``, a panel or any other) come with the
    reopen hint, published just before it. Idempotent; the widget's own output is unchanged.

    It registers a printer for ``DOMWidget`` with IPython's mime-bundle formatter (the registered API for a type's
    display). Outside a kernel (a script, a terminal IPython) it does nothing.

    Returns:
        True when the hint is installed in this process's kernel.
    """
    shell = _kernel_shell()
    if shell is None:
        return False
    formatter = shell.display_formatter.mimebundle_formatter
    if formatter.type_printers.get(W.DOMWidget) is not _hinted_bundle:
        formatter.for_type(W.DOMWidget, _hinted_bundle)
    return True


def _kernel_shell() -> Any:
    """The IPython shell of the Jupyter kernel this runs in, else None."""
    shell = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
    return shell if shell is not None and hasattr(shell, "kernel") else None


def plotly_source(build: str = plotly_js.FULL) -> bytes:
    """plotly.js in one of its builds (UTF-8; :mod:`.plotly_js`: "cartesian" ≈ 1.5 MB, "gl3d" ≈ 1.8 MB, "full" — as
    bundled with plotly.py — ≈ 4.8 MB), what a page evaluates once per build."""
    return plotly_js.source(build)


class PlotlySource(anywidget.AnyWidget):
    """plotly.js for the page, in the state of a widget that is never displayed (one per kernel and plotly.js build:
    :func:`page_plotly`).

    Its state (the source as one binary buffer, its cache key ``_version``, :func:`.plotly_js.version_key`, or the
    reason it could not be read) arrives with the message that creates its model; its module
    (``static/plotly_source.js``) hands the source to the page's figures at once, so their first drawing waits for
    nothing from a busy kernel.
    """

    _esm = _STATIC / "plotly_source.js"
    _version = T.Unicode().tag(sync=True)
    _source = T.Bytes(b"").tag(sync=True)
    _error = T.Unicode("").tag(sync=True)


_page_plotly: dict[str, PlotlySource] = {}


def page_plotly(build: str | None = None) -> PlotlySource:
    """The kernel's :class:`PlotlySource` of a plotly.js build (default: the build of a figure with no traces, the
    cartesian one where it can be used), created (with the source read once) if there is none or it was closed.

    Raises:
        ValueError: an unknown build.
    """
    build = plotly_js.build_for(()) if build is None else build
    key = plotly_js.version_key(build)
    if key not in _page_plotly or _page_plotly[key].comm is None:
        try:
            source, error = plotly_source(build), ""
        except Exception as exc:  # noqa: BLE001 - the views show the reason inside their boxes
            logger.warning("spanviz: plotly.js could not be read: %s", exc)
            source, error = b"", f"plotly.js could not be read in the kernel: {exc}"
        _page_plotly[key] = PlotlySource(_version=key, _source=source, _error=error)
    return _page_plotly[key]


def _arrays(value: Any) -> Any:
    """plotly's typed-array specs ``{"dtype", "bdata" (base64), "shape"}`` (what ``Figure.to_dict`` makes of
    numpy arrays) back to numpy arrays, anywhere in a nested structure."""
    if isinstance(value, dict):
        if "bdata" in value and "dtype" in value:
            array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
            shape = value.get("shape")
            return array.reshape([int(n) for n in str(shape).split(",")]) if shape else array
        return {k: _arrays(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_arrays(v) for v in value]
    return value


def figure_state(fig: go.Figure) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(traces, layout) of a plotly figure as plain dicts with numpy arrays — what :class:`PlotlyFigure` holds."""
    spec = _arrays(fig.to_dict())
    return list(spec.get("data", [])), dict(spec.get("layout", {}))


class PlotlyFigure(anywidget.AnyWidget):
    """A plotly figure in JupyterLab / Notebook 7 whose whole state is synced (see the module docstring).

    Args:
        fig: the figure to show first (a ``go.Figure``; None = empty).
        config: plotly.js config (default: responsive, no logo).

    Attributes:
        data: the traces as shown (list of dicts; numpy arrays where the caller gave them).
        figure_layout: the figure's layout as shown (dict; ``layout`` is the widget's own, as in ipywidgets).
        revision: bumped by every :meth:`show`; a view marks the drawn revision in ``data-revision``.
    """

    _esm = _STATIC / "loader.js"  # a few lines that import _module and say in the box when it fails
    _css = _STATIC / "figure.css"
    _module = T.Unicode(_FIGURE_MODULE).tag(sync=True)
    _data = T.List().tag(sync=True, to_json=encode_trait)
    _layout = T.Dict().tag(sync=True, to_json=encode_trait)
    _config = T.Dict().tag(sync=True)
    _revision = T.Int(0).tag(sync=True)
    _plotly_version = T.Unicode().tag(sync=True)  # the plotly.js build's cache key (plotly_js.version_key)

    def __init__(self, fig: go.Figure | None = None, config: Mapping[str, Any] | None = None) -> None:
        data, layout = figure_state(fig if fig is not None else go.Figure())
        build = plotly_js.build_for(plotly_js.trace_types(data))
        page_plotly(build)  # plotly.js's model first: the page has it before this figure's model
        super().__init__(_data=data, _layout=layout, _plotly_version=plotly_js.version_key(build),
                         _config=dict(config or {"responsive": True, "displaylogo": False}),
                         layout=W.Layout(width="100%"))
        self.add_class("spanviz-figure")
        self._seen: int | None = None  # the newest revision a view on a page has taken in (None: no view said so)
        self._shown_at = time.monotonic()
        self.on_msg(self._answer)
        install_reopen_hint()

    def _answer(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """A view asks for plotly.js: send it (or, if it cannot be read, say why in one line); or it says which
        revision the page has taken in (:meth:`behind`)."""
        if not isinstance(content, dict):
            return
        if content.get("kind") == SEEN and isinstance(content.get("revision"), int):
            self._seen = max(self._seen if self._seen is not None else -1, content["revision"])
            return
        if content.get("kind") != PLOTLY_REQUEST:
            return
        try:
            source = plotly_source(plotly_js.build_of_key(self._plotly_version))
        except Exception as exc:  # noqa: BLE001 - the view shows the reason inside its box
            logger.warning("spanviz: plotly.js could not be read: %s", exc)
            self.send({"kind": PLOTLY_REQUEST, "error": f"plotly.js could not be read in the kernel: {exc}"})
            return
        self.send({"kind": PLOTLY_REQUEST, "version": self._plotly_version}, buffers=[source])

    def settled(self) -> None:
        """Tell the views that the kernel has handled the input they show busy for: a view leaves its busy state once
        every redraw sent before this message is drawn. Does nothing when the widget is closed."""
        if self.comm is not None:
            self.send({"kind": SETTLED})

    def behind(self) -> bool:
        """True while a page shows this figure and has not yet taken in its newest revision: a live update sent now
        would only queue behind the last one (on the websocket and in the page's one main thread), so a caller that
        streams updates (:class:`spanviz.widgets.TrainingPanel`) skips it, and the next one carries the newest data.

        Views say which revision they have taken in (a ``"spanviz-seen"`` message, sent when a revision arrives,
        drawn or not). False when no view has ever said so (no page: a script, a notebook run headless) and once the
        newest revision is :data:`HOLD_MAX_S` old (a page that closed meanwhile), so updates never stop for good.
        """
        if self._seen is None or self._seen >= self._revision:
            return False
        return time.monotonic() - self._shown_at < HOLD_MAX_S

    @property
    def data(self) -> list[dict[str, Any]]:
        return self._data

    @property
    def figure_layout(self) -> dict[str, Any]:
        return self._layout

    @property
    def revision(self) -> int:
        return self._revision

    def show(self, data: Sequence[Mapping[str, Any]], layout: Mapping[str, Any] | None = None,
             redraw: bool = True) -> None:
        """Replace the traces (and the layout, when given) in one message; views redraw with Plotly.react.

        ``redraw=False`` changes the state without a new revision: views that exist do not redraw (the page drew
        the same figure already, e.g. :class:`spanviz.widgets.figure.block_scaler.BlockScaler`'s α rescaling), views
        made later draw it.
        """
        data = [dict(t) for t in data]
        build = plotly_js.build_for(plotly_js.trace_types(data))
        if build != plotly_js.build_of_key(self._plotly_version):
            page_plotly(build)  # another build for these traces (3-D after 2-D): the page gets it first
        with self.hold_sync():
            self._plotly_version = plotly_js.version_key(build)
            self._data = data
            if layout is not None:
                self._layout = dict(layout)
            if redraw:
                self._revision += 1
        if redraw:
            self._shown_at = time.monotonic()

    def show_figure(self, fig: go.Figure) -> None:
        """Show another figure (new traces and layout) in this same widget."""
        self.show(*figure_state(fig))

    def to_figure(self) -> go.Figure:
        """The shown state as a ``go.Figure`` (validated by plotly; for tests and static export)."""
        return go.Figure(data=self._data, layout=self._layout)
