"""Each notebook in a real Chromium: Run All, widgets render, live training streams, Stop stops it, a slider
redraws its figure, Train + Stop work again, and the page logs no JavaScript errors.

The kernel runs with ``SPANVIZ_SMOKE=1`` and ``SPANVIZ_STEPS=100000`` (see conftest), so the run started by
the notebook's ``panel.train()`` cell is still going when the test presses Stop; the slider is moved only
after training stopped, so a changed figure can only come from the slider.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from labpage import LabPage

REPO = Path(__file__).resolve().parents[2]

# notebook → (slider label, key to press, presses, min. number of plotly figures once rendered).
# Several presses where one step is too small to be visible (α by 0.05 moves a bar by less than a pixel).
CASES = {
    "00_tour.ipynb": ("layer", "ArrowRight", 1, 2),
    "01_spans_and_violations.ipynb": ("α1", "ArrowRight", 10, 4),
    "02_local_global_heads.ipynb": ("n_local (local heads)", "ArrowLeft", 1, 5),
    "03_fp8_logit_bounds.ipynb": ("rank r", "ArrowLeft", 4, 3),
}
# notebook → what its `panel.training.report(...)` area prints once a run has ended.
REPORTS = {
    "01_spans_and_violations.ipynb": r"(best val loss|no evaluation yet)",
    "03_fp8_logit_bounds.ipynb": r"E4M3 overflows over the run",
}
RUNNING = r"^[1-9]\d*/\d+ steps"      # "12/200000 steps · 3.1 steps/s": at least one step done
STOPPED = r"^stopped: \d+/\d+ steps"


def test_all_notebooks_have_a_case() -> None:
    assert sorted(CASES) == sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("notebook", sorted(CASES))
def test_notebook_in_browser(notebook: str, lab: dict, browser, screenshot_dir: Path, tmp_path: Path) -> None:
    label, key, presses, n_plots = CASES[notebook]
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    nb = LabPage(browser, lab["url"], notebook, runtime_dir=lab["env"]["JUPYTER_RUNTIME_DIR"])
    try:
        nb.open()
        timings["open"] = time.monotonic() - t0
        nb.run_all(timeout=300)
        timings["run_all"] = time.monotonic() - t0
        assert nb.wait_for_plots(n_plots) >= n_plots

        # The run started by the notebook's `panel.train()` streams into the figures ...
        nb.wait_status(RUNNING, timeout=180)
        streaming = nb.plot_signatures()
        nb.wait_for_plot_change(streaming, timeout=120)
        if notebook in REPORTS:  # the report area waits for the run instead of printing half of it
            assert nb.output_text("training in progress") and not nb.output_text(REPORTS[notebook])
        # ... and Stop ends it.
        nb.button("Stop").click()
        stopped = nb.wait_status(STOPPED, timeout=120)
        steps_at_stop = int(re.search(r"(\d+)/", stopped).group(1))
        timings["stopped"] = time.monotonic() - t0
        if notebook in REPORTS:
            report = nb.wait_until("the report area to fill in", lambda: nb.output_text(REPORTS[notebook]), 30)
            assert re.search(r"\(run stopped after \d+/\d+ steps\)", report), report

        # A slider redraws a figure (nothing else is running now).
        before = nb.plot_signatures()
        old, new = nb.move_slider(label, key, presses)
        assert old != new
        try:
            nb.wait_for_plot_change(before, timeout=60)  # raises when nothing changed
        except AssertionError:
            shot = tmp_path / f"FAILED-{Path(notebook).stem}.png"
            nb.page.screenshot(path=str(shot))
            kernel = nb.kernel_eval(
                "print({k: getattr(c, 'value', None) for k, c in panel.controls.items()}, "
                "{k: (v.updates, v.rebuilds) for k, v in panel.views.items()}, panel.training.runner.state)")
            raise AssertionError(f"moving {label!r} from {old} to {new} changed no figure (screenshot {shot}); "
                                 f"kernel: {kernel}; status "
                                 f"{nb.status()!r}; console:\n" + "\n".join(nb.console[-30:])) from None
        timings["slider"] = time.monotonic() - t0
        nb.slider(label).evaluate("el => el.scrollIntoView({block: 'start'})")
        nb.page.wait_for_timeout(500)
        nb.page.screenshot(path=str(screenshot_dir / f"{Path(notebook).stem}.png"))

        # Train again, then Stop again.
        assert nb.button("Train").is_enabled()
        nb.button("Train").click()
        nb.wait_status(RUNNING, timeout=180)
        nb.button("Stop").click()
        nb.wait_status(STOPPED, timeout=120)
        assert nb.button("Train").is_enabled() and not nb.button("Stop").is_enabled()
        timings["train_stop"] = time.monotonic() - t0

        assert not nb.errors, "JavaScript errors:\n" + "\n".join(nb.errors)
    finally:
        nb.close()
    print(f"{notebook}: " + ", ".join(f"{k} {v:.0f}s" for k, v in timings.items())
          + f" (first run stopped after {steps_at_stop} steps)")
