"""Explorables: a widget object's views recorded for every value of its controls, by the objects themselves.

An explorable is what a page needs to redraw a view when a control moves, without Python: the controls (their
values' labels and the default), and per view the control values it depends on (``on``) and, for each
combination of their indices (the key "i|j|…"), the state the Python object drew for it. States go into a
:class:`Pool` shared by the page, each distinct figure data, layout or HTML once. The states are recorded by
moving the object's own ipywidgets controls and reading its views (``FigureView.data`` / ``.layout``, an
``HTML`` widget's value): the notebook's code draws every state. Source: spanviz.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as W
import numpy as np
from plotly.io.json import to_json_plotly

from spanviz.widgets.figure.block_scaler import slider_values


class Pool:
    """Distinct JSON texts, each stored once: ``add(obj) → index``. ``json()`` is the JSON list of them (as
    strings)."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self._index: dict[str, int] = {}

    def add_text(self, text: str) -> int:
        if text not in self._index:
            self._index[text] = len(self.texts)
            self.texts.append(text)
        return self._index[text]

    def add(self, obj: Any) -> int:
        return self.add_text(compact_json(obj))

    def json(self) -> str:
        """The JSON list of the texts, each as a JSON string: the page parses a state when it first draws it."""
        return json.dumps(self.texts, separators=(",", ":"))


TYPED_MIN = 64
"""Numeric arrays of at least this many values go to the page as plotly.js typed arrays (base64 ``bdata``)."""
DIGITS = 7
"""Significant digits of a float written out in the page's JSON (float32 precision: invisible on screen)."""
_LONG_FLOAT = re.compile(r"-?\d+\.\d{8,}(?:e[-+]?\d+)?")


def _typed(obj: Any) -> Any:
    if isinstance(obj, np.ndarray) and obj.dtype.kind in "fiub" and obj.size >= TYPED_MIN:
        arr = np.ascontiguousarray(obj, dtype=np.float32 if obj.dtype.kind == "f" else np.int32)
        out = {"dtype": "f4" if arr.dtype == np.float32 else "i4", "bdata": base64.b64encode(arr.tobytes()).decode()}
        return {**out, "shape": ",".join(map(str, arr.shape))} if arr.ndim > 1 else out
    if isinstance(obj, dict):
        return {k: _typed(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_typed(v) for v in obj]
    return obj


def compact_json(obj: Any) -> str:
    """JSON of a figure's data or layout for the page: large numeric arrays as float32/int32 typed arrays, other
    floats to :data:`DIGITS` significant digits (plotly's JSON encoder for the rest)."""
    text = to_json_plotly(_typed(obj))
    return _LONG_FLOAT.sub(lambda m: repr(float(f"{float(m.group()):.{DIGITS}g}")), text)


def widget_values(w: W.Widget) -> tuple[list[Any], list[str]]:
    """The values a control can take and their labels as its readout shows them.

    Raises:
        ValueError: a widget kind without a finite set of values.
    """
    if isinstance(w, (W.SelectionSlider, W.Dropdown, W.ToggleButtons, W.RadioButtons)):
        values = [v for _, v in w.options] if isinstance(w.options[0], tuple) else list(w.options)
        return values, list(w._options_labels)
    if isinstance(w, W.IntSlider):
        values = list(range(int(w.min), int(w.max) + 1, int(w.step)))
        return values, [str(v) for v in values]
    if isinstance(w, W.FloatSlider):
        values = slider_values(w)
        return values, [f"{v:g}" for v in values]
    if isinstance(w, W.Checkbox):
        return [False, True], ["off", "on"]
    raise ValueError(f"control {type(w).__name__} has no finite set of values (sliders, dropdowns, checkboxes)")


def control_spec(name: str, w: W.Widget, label: str | None = None) -> dict[str, Any]:
    """A control as the page draws it: ``{"name", "label", "kind" ("range" | "select"), "labels", "index"}``."""
    values, labels = widget_values(w)
    index = min(range(len(values)), key=lambda i: 0 if values[i] == w.value else 1)
    kind = "select" if isinstance(w, (W.Dropdown, W.ToggleButtons, W.RadioButtons)) else "range"
    return {"name": name, "label": label or str(getattr(w, "description", name)), "kind": kind, "labels": labels,
            "values": [v if isinstance(v, (int, float, str, bool)) else str(v) for v in values], "index": index}


Reader = Callable[[], Any]
"""Reads a view's state now: a FigureView-like object (``data``, ``layout``) or an HTML string."""


def record(pool: Pool, controls: Mapping[str, W.Widget], views: Mapping[str, tuple[Reader, Sequence[str]]],
           labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Move ``controls`` through every combination of their values and record each view's state.

    Args:
        pool: where the states go.
        controls: name → the object's own control widget (moved here; put back at the end).
        views: name → (reader, the control names the view depends on). A view is read once per combination of
            its own controls' values.
        labels: control name → label shown (default: the widget's description).
    Returns:
        ``{"controls": [control_spec], "views": [{"name", "kind" ("figure" | "html"), "on", "states": {key:
        [data, layout] | html}}]}``, keys the indices of the ``on`` controls' values joined by "|".
    """
    labels = labels or {}
    specs = [control_spec(n, w, labels.get(n)) for n, w in controls.items()]
    start = {n: w.value for n, w in controls.items()}
    out_views = [{"name": n, "on": list(on), "states": {}, "kind": ""} for n, (_, on) in views.items()]
    names = [s["name"] for s in specs]
    for combo in itertools.product(*(range(len(s["values"])) for s in specs)):
        pending = [v for v in out_views if _key(v["on"], names, combo) not in v["states"]]
        if not pending:
            continue
        for i, n in zip(combo, names):
            value = widget_values(controls[n])[0][i]
            if controls[n].value != value:
                controls[n].value = value
        for v in pending:
            state = views[v["name"]][0]()
            if isinstance(state, str):
                v["kind"], v["states"][_key(v["on"], names, combo)] = "html", pool.add(state)
            else:
                v["kind"] = "figure"
                v["states"][_key(v["on"], names, combo)] = [pool.add(state.data), pool.add(state.layout)]
    for n, w in controls.items():
        w.value = start[n]
    return {"controls": specs, "views": out_views}


def _key(on: Sequence[str], names: Sequence[str], combo: Sequence[int]) -> str:
    return "|".join(str(combo[names.index(n)]) for n in on)


def fixed(pool: Pool, views: Mapping[str, Any]) -> dict[str, Any]:
    """Views with no control: ``{"controls": [], "views": [...]}`` with one state each (key "")."""
    out = []
    for name, state in views.items():
        if isinstance(state, str):
            out.append({"name": name, "kind": "html", "on": [], "states": {"": pool.add(state)}})
        else:
            out.append({"name": name, "kind": "figure", "on": [],
                        "states": {"": [pool.add(state.data), pool.add(state.layout)]}})
    return {"controls": [], "views": out}


def dumps(obj: Any) -> str:
    """JSON for a ``<script type="application/json">`` (``</`` escaped)."""
    return json.dumps(obj, separators=(",", ":")).replace("</", "<\\/")
