"""A panel's defaults: sliders whose grid holds the default (a nudge and back gives it exactly), a mark on every
control moved off its default, and "reset to defaults" (:class:`Defaults`).

A default matters beyond the figure it draws: the results store is keyed by the exact configuration, so the
default learning rate 0.003 replays the shipped GPU runs while 0.00316 (one step of a 10^0.1 log grid away and
back) trains two runs on the CPU for minutes. Learning rates and factors are therefore picked from explicit
values (:func:`grid_slider`, a ``SelectionSlider`` whose value is the number itself, not its label). A log slider
(``FloatLogSlider``) cannot be trusted with a default even on its grid: the page computes base ** position from
noUiSlider's position, and in Chromium δ = 0.001 moved one step right and one left came back as another float
(tests/browser/test_defaults_browser.py found it).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import ipywidgets as W

LR_GRID = (1e-4, 2e-4, 3e-4, 5e-4, 1e-3, 2e-3, 3e-3, 5e-3, 1e-2, 2e-2, 3e-2, 5e-2, 1e-1)
"""Learning rates of the LR sliders: 1, 2, 3, 5 per decade (the values papers and sweeps use)."""
FACTOR_GRID = (1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 50.0, 100.0)
"""Factors of the LR spike slider (1 = no spike)."""
DELTA_GRID = (1e-9, 3e-9, 1e-8, 3e-8, 1e-7, 3e-7, 1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1)
"""Failure probabilities δ of the FP8 bounds: 1 and 3 per decade, 1e-9 .. 0.1."""

CHANGED_MARK = " •"
"""Appended to the description of a control that is not at its default (with a tooltip saying the default, and
bold through the CSS class :data:`CHANGED_CLASS`): a text mark, not colour alone."""
CHANGED_CLASS = "spanviz-changed"


def grid_values(values: Iterable[float], default: float) -> list[float]:
    """``values`` sorted, with ``default`` among them (added when it is not one of them)."""
    return sorted({float(v) for v in values} | {float(default)})


def grid_slider(description: str, values: Sequence[float], default: float, continuous: bool = False,
                fmt: Callable[[float], str] = "{:g}".format) -> W.SelectionSlider:
    """A slider over explicit numbers (``values`` plus ``default``; see :func:`grid_values`): its value is the number
    itself (a ``float``: a store key sees 0.003, the same float the config holds), its readout ``fmt(value)``.

    Raises:
        ValueError: ``default`` is not a finite number.
    """
    if not isinstance(default, (int, float)) or not math.isfinite(default):
        raise ValueError(f"default of {description!r} must be a finite number, got {default!r}")
    options = [(fmt(v), v) for v in grid_values(values, default)]
    return W.SelectionSlider(options=options, value=float(default), description=description,
                             continuous_update=continuous, style={"description_width": "initial"},
                             layout=W.Layout(width="280px"))


def on_grid(control: W.Widget, value: Any) -> bool:
    """Whether a slider gives ``value`` back exactly after a move away and back: one of a selection's options, or
    ``min + k·step`` of a linear numeric slider within its range; never for a log slider (see the module docstring)."""
    if isinstance(control, (W.SelectionSlider, W.Dropdown, W.ToggleButtons, W.RadioButtons)):
        return value in _option_values(control)
    if isinstance(control, W.FloatLogSlider):
        return False
    if isinstance(control, (W.IntSlider, W.FloatSlider)):
        if not control.min <= value <= control.max:
            return False
        k = (value - control.min) / control.step
        return abs(k - round(k)) < 1e-9 and control.min + round(k) * control.step == value
    return True


def _option_values(control: W.Widget) -> list[Any]:
    return [o[1] if isinstance(o, tuple) else o for o in control.options]


def _label(control: W.Widget, value: Any) -> str:
    if isinstance(control, W.SelectionSlider):
        return next((o[0] for o in control.options if isinstance(o, tuple) and o[1] == value), f"{value:g}")
    fmt = getattr(control, "readout_format", None)  # what the slider's readout shows, e.g. ".3g"
    if isinstance(value, float) and fmt:
        return format(value, fmt)
    return f"{value:g}" if isinstance(value, float) else str(value)


class Defaults:
    """The defaults of a panel's controls, the mark on every control moved off its default, a summary line and a
    "Reset to defaults" button.

    Args:
        controls: name → value widget (sliders, dropdowns); their current values are the defaults.

    Attributes:
        values: name → default. reset_button: the button (disabled while every control is at its default).
        summary: an HTML line naming the changed controls (empty when none is). widget: both, in a row.

    A control is "changed" when its value is not exactly (``==``) its default: 0.00316 is not 0.003, and the store
    would not replay it either.
    """

    def __init__(self, controls: Mapping[str, W.Widget]) -> None:
        self.controls = dict(controls)
        self.values = {name: c.value for name, c in self.controls.items()}
        self._descriptions = {name: c.description for name, c in self.controls.items()}
        self.reset_button = W.Button(description="Reset to defaults", icon="undo", disabled=True,
                                     tooltip="set every control back to its default",
                                     layout=W.Layout(width="auto"))
        self.reset_button.add_class("spanviz-reset")
        self.reset_button.on_click(lambda _b: self.reset())
        self.summary = W.HTML("")
        self.summary.add_class("spanviz-changed-summary")
        self.widget = W.HBox([self.reset_button, self.summary], layout=W.Layout(align_items="center"))
        for name, control in self.controls.items():
            control.observe(lambda _ch, name=name: self._mark(name), names="value")

    def set(self, **values: Any) -> None:
        """Set controls to ``values`` and make those their defaults (what a notebook's parameters cell chose).

        Raises:
            ValueError: an unknown control, or a value its slider cannot show exactly (off its grid or range).
        """
        for name, value in values.items():
            if name not in self.controls:
                raise ValueError(f"control must be one of {sorted(self.controls)}, got {name!r}")
            control = self.controls[name]
            if isinstance(control, W.SelectionSlider) and not on_grid(control, value):
                control.options = [(f"{v:g}", v) for v in grid_values(_option_values(control), value)]
            if not on_grid(control, value):
                raise ValueError(f"{name} must lie on its slider's grid ({control.min}..{control.max} in steps of "
                                 f"{control.step}), got {value!r}")
        for name, value in values.items():
            self.values[name] = value
            self.controls[name].value = value
            self._mark(name)

    def changed(self) -> dict[str, Any]:
        """name → current value of the controls not at their default."""
        return {n: c.value for n, c in self.controls.items() if c.value != self.values[n]}

    @property
    def at_defaults(self) -> bool:
        return not self.changed()

    def reset(self) -> None:
        """Set every control back to its default (each redraws what it redraws)."""
        for name, value in self.values.items():
            if self.controls[name].value != value:
                self.controls[name].value = value

    def _mark(self, name: str) -> None:
        control, default = self.controls[name], self.values[name]
        changed = control.value != default
        control.description = self._descriptions[name] + (CHANGED_MARK if changed else "")
        control.tooltip = f"changed — default {_label(control, default)}" if changed else None
        (control.add_class if changed else control.remove_class)(CHANGED_CLASS)
        moved = self.changed()
        self.reset_button.disabled = not moved
        names = ", ".join(f"{self._descriptions[n]} {_label(self.controls[n], v)} (default "
                          f"{_label(self.controls[n], self.values[n])})" for n, v in moved.items())
        self.summary.value = f"<small>• changed: {html.escape(names)}</small>" if moved else ""

