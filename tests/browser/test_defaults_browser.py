"""Defaults in a real Chromium (issue 38, items 2 and 3), on notebook 03 (one run: the quickest to train).

Run All trains the defaults (``conftest.STEPS`` steps) and stores them. Then, as a student: one arrow key right and
one left on "LR spike ×" and on δ (a log slider) gives back the default exactly — the readout, no " •" mark, "Reset
to defaults" disabled again (the kernel compares the value it received with the default, ``==``); a changed
control is marked and named; Train at a changed setting says how long it has left and that the defaults replay at
once; "Reset to defaults" returns every control, and Train then replays from the store.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import STEPS
from labpage import Lab

NOTEBOOK = "03_fp8_logit_bounds.ipynb"
SUMMARY = ".spanviz-changed-summary"


def label(lab: Lab, slider: str) -> str:
    return lab.slider(slider).locator(".widget-label").inner_text().strip()


def readout(lab: Lab, slider: str) -> str:
    return lab.slider(slider).locator(".widget-readout").inner_text().strip()


def summary(lab: Lab) -> str:
    return lab.page.locator(f"{lab.scope} {SUMMARY}").first.inner_text().strip()


def state(lab: Lab, slider: str) -> dict:
    """What a student sees of a slider and of the panel's defaults row."""
    return {"readout": readout(lab, slider), "label": label(lab, slider), "summary": summary(lab),
            "reset enabled": not lab.button("Reset to defaults").is_disabled()}


def wait_state(lab: Lab, slider: str, expected: dict, what: str, timeout: float = 60.0) -> None:
    seen: list[dict] = []

    def match() -> bool:
        seen.append(state(lab, slider))
        return all(seen[-1][k] == v if not callable(v) else v(seen[-1][k]) for k, v in expected.items())

    try:
        lab.wait_until(what, match, timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the page shows {seen[-1]}") from None


def at_default(lab: Lab, slider: str, value: str, what: str) -> None:
    wait_state(lab, slider, {"readout": value, "label": slider, "summary": "", "reset enabled": False}, what)


@pytest.mark.usefixtures("leave_the_store_as_found")
def test_a_nudge_and_back_keeps_the_default_and_reset_and_time_left(lab: dict, browser, screenshot_dir: Path) -> None:
    page = Lab(browser, lab)
    try:
        page.open(NOTEBOOK)
        page.run_all(NOTEBOOK)
        page.wait_status(rf"^done: {STEPS}/{STEPS} steps per run", timeout=600)
        at_default(page, "LR spike ×", "30", "LR spike × at its default")
        assert not page.button("Train").is_disabled()

        # A nudge and back, on the grid of explicit factors and on δ's log grid: the default, unmarked.
        for slider, default, moved in (("LR spike ×", "30", "50"), ("δ", "0.001", "0.003")):
            _, after = page.move_slider(slider, "ArrowRight")
            assert after == moved, after
            wait_state(page, slider, {"readout": moved, "label": f"{slider} •", "reset enabled": True,
                                      "summary": lambda t, s=slider, m=moved, d=default: f"{s} {m} (default {d})" in t},
                       f"{slider} marked as changed")
            page.move_slider(slider, "ArrowLeft")
            at_default(page, slider, default, f"{slider} back at its default, unmarked")

        # Off the defaults, Train trains live: the status says how long, and that the defaults replay.
        page.move_slider("LR spike ×", "ArrowRight")
        page.move_slider("rank r", "ArrowLeft", 2)
        page.wait_until("two controls marked", lambda: summary(page).count("default") == 2, timeout=60)
        shot = screenshot_dir / "03-changed-controls.png"
        page.page.locator(f"{page.scope} .spanviz-panel").first.screenshot(path=str(shot))
        print(f"screenshot: {shot}")
        page.button("Train").click()
        status = page.wait_status(r"about \d+ (s|min) left", timeout=300)
        assert "the defaults replay at once: Reset to defaults, then Train" in status, status
        page.button("Stop").click()
        page.wait_status(r"^stopped: ", timeout=120)

        page.button("Reset to defaults").click()
        at_default(page, "LR spike ×", "30", "every control back at its default")
        assert label(page, "rank r") == "rank r"
        page.button("Train").click()
        status = page.wait_status(r"^replayed from the store: ", timeout=120)
        assert not re.search(r"left", status), status
        assert not page.errors, page.errors
    finally:
        page.close()
