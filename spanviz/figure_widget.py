"""A plotly figure as a small, state-synced widget: what the panels draw into in JupyterLab.

Why not plotly's own ``go.FigureWidget``: since plotly 6 it is an anywidget whose front-end module is the whole
plotly.js bundle (≈ 5 MB), sent with every figure and imported afresh by the browser for each one. anywidget
gives a model 2 s from its creation to import its module; past that it silently drops every message to that
model. plotly sends a figure's traces and layout in messages right *after* the one that creates the model, so
on a busy machine (several notebooks open, earlier kernels still training, the browser getting a fraction of
a core) a figure whose import took longer than 2 s stays blank for good — empty default axes, no title — and
ignores every later update. Each rebuilt figure is a new model and another chance to fail.

:class:`PlotlyFigure` avoids both halves of that: its module is a few kilobytes (imported well inside the
deadline), plotly.js travels once per kernel in a shared :class:`PlotlyJS` model and is evaluated once per page,
and the figure is *state*, not a stream of edit messages: the traits ``_data`` and ``_layout`` always hold the
whole figure, so a view draws the latest state whenever it comes to exist, and an update merged with another
one (ipywidgets holds messages while it handles one from the browser) loses nothing. A new figure structure
(another preset, a replay) is a new state of the same widget, never a new widget.

Arrays travel as binary buffers (numpy in, typed arrays out; NaN allowed, e.g. masked attention scores).
"""

from __future__ import annotations

import base64
import math
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import anywidget
import ipywidgets as W
import numpy as np
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs, get_plotlyjs_version
import traitlets as T

_NUMERIC_KINDS = "biuf"


def encode(value: Any) -> Any:
    """JSON-able state with numpy arrays as binary buffers: ``{"dtype", "shape", "buffer": memoryview}``.

    Numeric arrays become float64/float32/int32/uint8 buffers (int64 and bool are converted: browsers have no
    int64 typed array plotly.js can read); lists of plain numbers with a NaN or ±inf become float64 buffers
    (JSON has no NaN); non-finite floats elsewhere become None; strings, dicts, None pass through.
    """
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


def _to_json(value: Any, _widget: Any) -> Any:
    return encode(value)


class PlotlyJS(W.Widget):
    """plotly.js's source, shared by every :class:`PlotlyFigure` of a kernel (sent to the browser once).

    A plain ``@jupyter-widgets/base`` model: it has no view; figure views read ``source`` and evaluate it
    once per page and version.
    """

    source = T.Unicode("").tag(sync=True)
    version = T.Unicode("").tag(sync=True)


_PLOTLY_JS: PlotlyJS | None = None


def plotly_js() -> PlotlyJS:
    """The kernel's shared :class:`PlotlyJS` (made on first use, from the plotly.js bundled with plotly.py)."""
    global _PLOTLY_JS
    if _PLOTLY_JS is None or _PLOTLY_JS.comm is None:
        _PLOTLY_JS = PlotlyJS(source=get_plotlyjs(), version=get_plotlyjs_version())
    return _PLOTLY_JS


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

    _esm = pathlib.Path(__file__).parent / "static" / "figure.js"
    _data = T.List().tag(sync=True, to_json=_to_json)
    _layout = T.Dict().tag(sync=True, to_json=_to_json)
    _config = T.Dict().tag(sync=True)
    _revision = T.Int(0).tag(sync=True)
    _plotly = T.Instance(PlotlyJS).tag(sync=True, **W.widget_serialization)

    def __init__(self, fig: go.Figure | None = None, config: Mapping[str, Any] | None = None) -> None:
        data, layout = figure_state(fig if fig is not None else go.Figure())
        super().__init__(_plotly=plotly_js(), _data=data, _layout=layout,
                         _config=dict(config or {"responsive": True, "displaylogo": False}),
                         layout=W.Layout(width="100%"))

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
        the same figure already, e.g. :class:`spanviz.widgets.block_scaler.BlockScaler`'s α rescaling), views
        made later draw it.
        """
        with self.hold_sync():
            self._data = [dict(t) for t in data]
            if layout is not None:
                self._layout = dict(layout)
            if redraw:
                self._revision += 1

    def show_figure(self, fig: go.Figure) -> None:
        """Show another figure (new traces and layout) in this same widget."""
        self.show(*figure_state(fig))

    def to_figure(self) -> go.Figure:
        """The shown state as a ``go.Figure`` (validated by plotly; for tests and static export)."""
        return go.Figure(data=self._data, layout=self._layout)
