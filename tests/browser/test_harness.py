"""Toolchain check: JupyterLab 4 + ipywidgets 8 + plotly FigureWidget (anywidget) in a real Chromium.

A notebook with an IntSlider that rewrites a FigureWidget trace: run it, move the slider with the keyboard,
and see the drawn SVG path change. If this fails, the notebook tests cannot mean anything.
"""

from __future__ import annotations

import time

from conftest import HARNESS
from labpage import LabPage


def test_slider_moves_figurewidget(lab: dict, browser) -> None:
    t0 = time.monotonic()
    nb = LabPage(browser, lab["url"], HARNESS)
    try:
        nb.open()
        nb.run_all(timeout=120)
        nb.wait_for_plots(1)
        before = nb.plot_signatures()
        old, new = nb.move_slider("freq", "ArrowRight")
        assert (old, new) == ("1", "2")
        changed = nb.wait_for_plot_change(before)
        assert changed == [0]
        assert not nb.errors, "JavaScript errors:\n" + "\n".join(nb.errors)
    finally:
        nb.close()
    print(f"harness: {time.monotonic() - t0:.1f} s")
