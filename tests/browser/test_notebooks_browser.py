"""The four notebooks in a real Chromium, as a student uses them, asserting what the page *draws*.

Per notebook, in its default parameters (runs shortened to ``conftest.STEPS`` steps through ``SPANVIZ_STEPS``):
Run All; every plotly figure on the page draws at least one trace with data — after Run All, after Stop, after
Continue, after Train replays the finished run from the results store, and after a preset change; each control
changes the drawn data of *its own* figure and of no other; no JavaScript console error; no warning box (stderr)
in any output.

Then the harder case the issue describes: the four notebooks opened one after another in *one* JupyterLab page,
every kernel left training, under a CPU load the test starts and stops itself — every figure of every notebook
drawn, a control of each moving its own figure.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import NOTEBOOKS, STEPS, cpu_load, jupyter_lab, load_workers
from labpage import ACTIVE, Lab

REPO = Path(__file__).resolve().parents[2]
BUSY_LOAD = 4  # busy-loop processes of the multi-notebook test (on top of four training kernels)


@dataclass
class Control:
    """A control and the figures it must redraw (``own``); every other analytic figure must stay as it was."""

    kind: str  # "slider" (arrow keys), "select" (a Dropdown), "toggle" (a ToggleButton) or "button"
    label: str
    value: str = "ArrowRight"  # the key for a slider, the option for a select
    presses: int = 1
    own: frozenset[str] = field(default_factory=frozenset)


def _c(kind: str, label: str, own: set[str], value: str = "ArrowRight", presses: int = 1) -> Control:
    return Control(kind, label, value, presses, frozenset(own))


@dataclass
class Case:
    figures: int  # plotly figures on the page once everything is drawn
    controls: list[Control]
    report: str | None = None  # what the notebook's report area prints once a run ended
    busy_control: int = 0  # the control the multi-notebook test moves
    shot: str = ".jp-OutputArea-output .widget-vbox"  # the top of the screenshot (docs/screenshots)
    before_shot: Control | None = None  # a control operated (and checked) before the screenshot


CASES = {
    "00_tour.ipynb": Case(2, [
        _c("slider", "layer", {"attention"}),
        _c("toggle", "pattern P", {"attention"}),
    ], shot=".widget-vbox:has(> .spanviz-view-attention)",
        before_shot=_c("button", "Look at model", {"attention"})),  # the trained model, not the untrained one
    "01_spans_and_violations.ipynb": Case(6, [
        _c("slider", "α0", {"blocks", "toy"}, "ArrowLeft"),
        _c("slider", "α1", {"blocks", "toy"}),
        _c("slider", "α2", {"blocks"}),
        _c("slider", "α3", {"blocks"}),
        _c("select", "head", {"blocks", "angles"}, "1"),
        _c("select", "layer", {"blocks", "angles", "train-energy"}, "1"),
        _c("select", "preset", {"blocks"}, "qk4"),
    ], report=r"best val loss", busy_control=1),
    "02_local_global_heads.ipynb": Case(5, [
        _c("slider", "n_local (local heads)", {"masks"}, "ArrowLeft"),
        _c("slider", "window p", {"masks"}, "ArrowLeft", 12),
        _c("slider", "context T", {"masks"}),
    ], busy_control=1),
    "03_fp8_logit_bounds.ipynb": Case(3, [
        _c("slider", "rank r", {"bounds"}, "ArrowLeft", 4),
        _c("slider", "δ", {"bounds"}),
        _c("slider", "margin (2^m headroom)", {"bounds"}),
    ], report=r"E4M3 overflows over the run"),
}
RUNNING = r"^(\d+–)?[1-9]\d*/\d+ steps per run"  # "11–12/40 steps per run (3 runs) · 3.1 steps/s": a step done
STOPPED = r"^stopped: (?:\d+–)?(\d+)/(\d+) steps per run"  # groups: the most steps done of a run, planned
DONE = rf"^done: {STEPS}/{STEPS} steps per run"
REPLAYED = r"^replayed from the store: "


def test_every_notebook_has_a_case() -> None:
    assert sorted(CASES) == sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))


def move(lab: Lab, control: Control) -> str:
    """Operate ``control`` like a person; returns what was done (for messages)."""
    if control.kind == "slider":
        old, new = lab.move_slider(control.label, control.value, control.presses)
        return f"{control.label} {old} → {new}"
    if control.kind == "select":
        lab.select(control.label, control.value)
        return f"{control.label} → {control.value}"
    if control.kind == "toggle":
        lab.toggle(control.label)
    else:
        lab.button(control.label).click()
    return f"{control.label} pressed"


def check_control(lab: Lab, notebook: str, control: Control, live_too: bool = True) -> None:
    """The control redraws its own figures, and no other figure's drawn data changes (``live_too=False``:
    training figures may change anyway, a run is going)."""
    before = {f["name"]: f for f in lab.figures()}
    done = move(lab, control)
    for view in sorted(control.own):
        lab.wait_figure_change(view, before[view], done)
    after = {f["name"]: f for f in lab.figures()}
    others = [v for v in before if v and v not in control.own and (live_too or not v.startswith("train-"))]
    moved = [v for v in others if after[v]["sig"] != before[v]["sig"]]
    assert not moved, f"{notebook}: {done} also changed the figures {moved}, not only {sorted(control.own)}"


def check_clean(lab: Lab, notebook: str) -> None:
    warnings = lab.warning_boxes()
    assert not warnings, f"{notebook}: warning boxes in the outputs:\n" + "\n".join(warnings)
    assert not lab.errors, f"{notebook}: JavaScript errors:\n" + "\n".join(lab.errors)


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("notebook", sorted(CASES))
def test_notebook_draws_and_responds(notebook: str, lab: dict, browser, screenshot_dir: Path) -> None:
    case = CASES[notebook]
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    page = Lab(browser, lab)
    try:
        page.open(notebook)
        page.run_all(notebook)
        timings["run all"] = time.monotonic() - t0
        # The run started by the notebook's `panel.train()` streams into the figures ...
        page.wait_status(RUNNING)
        page.wait_all_drawn(case.figures, "after Run All, while training")
        timings["first curves"] = time.monotonic() - t0
        if case.report:  # the report area waits for the run instead of printing half of it
            assert page.output_text("training in progress") and not page.output_text(case.report)
        # ... Stop ends it ...
        page.button("Stop").click()
        done, planned = map(int, re.search(STOPPED, page.wait_status(STOPPED)).groups())
        assert done < planned == STEPS, "the run ended before Stop took effect: nothing was stopped"
        page.wait_all_drawn(case.figures, "after Stop")
        if case.report:
            report = page.wait_until("the report area to fill in", lambda: page.output_text(case.report), 60)
            assert re.search(r"\(run stopped after [\d–]+/\d+ steps per run\)", report), report
        # ... Continue trains the same runs on to the end ...
        page.button("Continue").click()
        page.wait_status(DONE, timeout=600)
        page.wait_all_drawn(case.figures, "after Continue")
        timings["trained"] = time.monotonic() - t0
        if case.report:
            page.wait_until("the report of the finished run",
                            lambda: (t := page.output_text(case.report)) and "stopped after" not in t, 60)
        # ... and Train with the same settings replays the finished runs from the store, drawn.
        page.button("Train").click()
        page.wait_status(REPLAYED)
        page.wait_all_drawn(case.figures, "after a replay")
        assert page.button("Train").is_enabled() and not page.button("Stop").is_enabled()
        if case.before_shot:
            check_control(page, notebook, case.before_shot)
        page.page.locator(f"{ACTIVE} {case.shot}").first.evaluate(
            "el => el.scrollIntoView({block: 'start'})")  # the panel, at its default settings, a finished run in
        page.page.wait_for_timeout(1000)
        page.page.screenshot(path=str(screenshot_dir / f"{Path(notebook).stem}.png"))

        # Every control moves its own figure (nothing is training now).
        for control in case.controls:
            check_control(page, notebook, control)
            page.wait_all_drawn(case.figures, f"after moving {control.label}")
        if notebook.startswith("01"):
            assert page.figure("blocks")["traces"] == 4 + 2, "preset qk4: 4 blocks and 2 bar traces"
        timings["controls"] = time.monotonic() - t0
        check_clean(page, notebook)
    except AssertionError as exc:
        shot = screenshot_dir / f"FAILED-{Path(notebook).stem}.png"
        page.page.screenshot(path=str(shot))
        raise AssertionError(f"{exc}\n(screenshot {shot}; console:\n" + "\n".join(page.console[-20:]) + ")") from None
    finally:
        page.close()
    print(f"{notebook}: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
          + f" (Stop after {done}/{planned} steps)")


@pytest.mark.timeout(1800)
def test_four_notebooks_in_one_lab_kernels_training_under_load(
    browser, spanviz_home: dict, tmp_path_factory: pytest.TempPathFactory, screenshot_dir: Path
) -> None:
    """The issue's scenario: one JupyterLab page, the notebooks opened one after another, every kernel left
    training (runs that do not end), busy-loop processes on top — every figure drawn, controls responsive."""
    t0 = time.monotonic()
    extra = 0 if load_workers() else BUSY_LOAD  # under SPANVIZ_BROWSER_LOAD the package load is running already
    with cpu_load(extra), jupyter_lab(tmp_path_factory.mktemp("busy-lab"), {**spanviz_home, "SPANVIZ_STEPS": "100000"},
                                      sorted(NOTEBOOKS.glob("*.ipynb"))) as server:
        page = Lab(browser, server)
        try:
            for notebook in CASES:
                page.open(notebook)
                page.run_all(notebook, timeout=900)
                page.wait_status(RUNNING, timeout=300)  # its kernel trains on while the next one opens
            opened = time.monotonic() - t0
            for notebook, case in CASES.items():
                page.activate(notebook)
                page.wait_all_drawn(case.figures, f"{notebook}, four notebooks open, all training", timeout=300)
                check_control(page, notebook, case.controls[case.busy_control], live_too=False)
                page.wait_status(RUNNING)
                check_clean(page, notebook)
        except AssertionError as exc:
            shot = screenshot_dir / "FAILED-busy.png"
            page.page.screenshot(path=str(shot))
            raise AssertionError(f"{exc}\n(screenshot {shot}; console:\n" + "\n".join(page.console[-20:]) + ")") \
                from None
        finally:
            page.close()
    print(f"four notebooks under load: opened and ran in {opened:.0f} s, checked in {time.monotonic() - t0:.0f} s")
