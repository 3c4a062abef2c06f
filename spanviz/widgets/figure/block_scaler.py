"""α in the browser: the blocks figure rescaled by the page itself when an α slider moves, no kernel round trip.

An α slider changes nothing of the blocks figure's trace data (:func:`spanviz.plots.span_blocks_figure`): its
heatmaps hold the unscaled blocks, and α sets each order's colour range, the heights of the scaled norm bars
(rectangles), the bars' axis range, the blocks' titles and, at α = 0, a heatmap's opacity. :class:`BlockScaler`
sends what that needs once per preset, layer and head (names, orders, and the α table: ~25 KB); its front-end
module (``spanviz/widgets/figure/static/block_scaler.js``; it reaches the other widgets' models through anywidget's
host API, ``host.getModel``, nothing JupyterLab-specific) listens to the α
sliders' models in the page and writes those few layout values into the blocks figure's model there, which redraws
at once — and, since no trace data changed, plotly.js redraws only colours, shapes and titles (~15 ms in
JupyterLab, against ~55 ms for a figure whose heatmaps change). The kernel keeps the figure's state in step without
asking the page to draw again (``redraw=False``), so a view made later draws the same figure. Where the module does
not run (no front end, a static figure), nothing changes: the kernel redraws.

The same module draws a preset, layer or head that the kernel has drawn before at once, without a round trip: it
keeps each figure state the kernel drew with its cells, keyed by "preset|layer|head" (the states the page has
received anyway: nothing more is sent), and when a pick in the page's dropdowns names a kept one it puts that state
into the figure's model with the sliders' α applied. The kernel draws the pick as always, moments later: the same
state, which the figure's view (figure.js) recognises as the one it has drawn and does not hand to plotly.js again.
Once the page is live the kernel sends it the states of the picks it has not drawn yet (:meth:`BlockScaler.prefetch`,
from :meth:`spanviz.widgets.SpansPanel.prefetch`), which the page keeps the same way: a first pick is drawn at once
too. A pick kept nowhere (beyond the prefetch's limits) is drawn by the kernel.

The kernel and the page draw the same figure, from one rule: the page does no α arithmetic of its own; it looks
every α-dependent value up in the table :func:`page_cells` sends with each state
(:func:`spanviz.plots.span_blocks.span_block_alpha_table`, made by the functions that draw the figure in Python)
with ``spanviz/widgets/figure/static/span_alpha.js``, which the static site (:mod:`spanviz.site`) uses too.
Source: spanviz.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import anywidget
import ipywidgets as W
import traitlets as T

from spanviz.plots.span_blocks import DIM_OPACITY, order_coloraxis, span_block_alpha_table
from spanviz.widgets.figure.widget import PlotlyFigure, encode_trait

STATIC = pathlib.Path(__file__).parent / "static"
ALPHA_VALUES = tuple(round(0.05 * k, 10) for k in range(41))
"""The α sliders' values (0 to 2 in steps of 0.05): the page's α table holds these."""


def slider_values(slider: Any) -> list[float]:
    """The values a FloatSlider can take (min to max in steps of step), rounded as its readout would be."""
    lo, hi, step = float(slider.min), float(slider.max), float(slider.step)
    return [round(lo + k * step, 10) for k in range(int(round((hi - lo) / step)) + 1)]


def page_cells(cells: Mapping[str, Any], layout: Mapping[str, Any], key: str = "",
               values: Sequence[Sequence[float]] = (ALPHA_VALUES,) * 4) -> dict[str, Any]:
    """What span_alpha.js needs to rescale a blocks state for α (see :meth:`BlockScaler.set_cells`): where the
    titles are, the colour axes, and the α table (:func:`~spanviz.plots.span_blocks.span_block_alpha_table`) for
    the sliders' ``values`` (per order)."""
    names, orders = list(cells["names"]), [int(o) for o in cells["orders"]]
    annotations = [a.get("text", "") for a in layout.get("annotations", [])]
    titles = {name: i for i, text in enumerate(annotations) for name in names if text.startswith(f"{name} (")}
    return {"names": names, "orders": orders, "rel": [float(r) for r in cells["rel"]], "zmax": float(cells["zmax"]),
            "coloraxes": [order_coloraxis(o) for o in range(4)], "titles": [titles.get(n, -1) for n in names],
            "key": str(key), "table": span_block_alpha_table(cells, values)}


class BlockScaler(anywidget.AnyWidget):
    """Rescales a blocks figure (:func:`spanviz.plots.span_blocks_figure`) in the browser as α sliders move, and
    redraws a pick of preset, layer or head there from a state the kernel drew before.

    Args:
        figure: the :class:`~spanviz.widgets.figure.widget.PlotlyFigure` that shows the blocks.
        sliders: the α0..α3 slider widgets, in order.
        pickers: the dropdowns whose picks name a blocks state (preset, layer, head): their labels joined by "|"
            are the ``key`` of :meth:`set_cells`. None: only α is handled in the page. The page keeps one state
            per key it was sent (~150 KB each: 8 heatmaps of 64 × 64 float32 and the layout).

    Attributes:
        live: True once a front end listens to the sliders (set by the page). While False the kernel must
            redraw the figure itself for an α change.
    """

    # the α lookup (span_alpha.js, shared with the static site) and then the module that uses it
    _esm = "".join((STATIC / f).read_text(encoding="utf-8") for f in ("span_alpha.js", "block_scaler.js"))
    _figure = T.Instance(PlotlyFigure).tag(sync=True, **W.widget_serialization)
    _sliders = T.List(T.Instance(W.Widget)).tag(sync=True, **W.widget_serialization)
    _pickers = T.List(T.Instance(W.Widget)).tag(sync=True, **W.widget_serialization)
    _cells = T.Dict().tag(sync=True)
    _prefetched = T.Dict().tag(sync=True, to_json=encode_trait)
    _revision = T.Int(-1).tag(sync=True)
    _dim = T.Float(DIM_OPACITY).tag(sync=True)
    live = T.Bool(False).tag(sync=True)

    def __init__(self, figure: PlotlyFigure, sliders: Sequence[W.Widget], pickers: Sequence[W.Widget] = ()) -> None:
        super().__init__(_figure=figure, _sliders=list(sliders), _pickers=list(pickers),
                         layout=W.Layout(display="none"))

    def set_cells(self, cells: Mapping[str, Any], layout: Mapping[str, Any], key: str = "") -> None:
        """What α changes in the figure now shown (from :func:`spanviz.plots.span_blocks.span_block_cells`): block
        names, orders, norms ‖block‖/‖dS‖, the colour range zmax, where the blocks' titles are; the pick the state
        belongs to (``key``, "preset|layer|head": the page keeps the state under it); and the figure revision they
        belong to (call after the figure is shown). Heatmap i is trace i and its scaled bar ``shapes[n + i]``
        (:func:`spanviz.plots.span_blocks.span_blocks_layout`)."""
        with self.hold_sync():
            self._cells = page_cells(cells, layout, key, self._values())
            self.sync_revision()

    def prefetch(self, states: Mapping[str, tuple[Mapping[str, Any], Sequence[Mapping[str, Any]],
                                                  Mapping[str, Any]]]) -> None:
        """Blocks states of picks the kernel has not drawn yet, for the page to keep as it keeps those it drew:
        ``{key: (cells, traces, layout)}`` (key "preset|layer|head"; traces and layout as the figure would show
        them). Sent once (~130 KB per state); a page that loads later gets them with the widget's state."""
        self._prefetched = {key: {"data": [dict(t) for t in data], "layout": dict(layout),
                                  "cells": page_cells(cells, layout, key, self._values())}
                            for key, (cells, data, layout) in states.items()}

    def _values(self) -> list[list[float]]:
        return [slider_values(s) for s in self._sliders]

    def sync_revision(self) -> None:
        """Mark the cells valid for the figure's current revision (after a redraw the kernel made)."""
        self._revision = self._figure.revision
