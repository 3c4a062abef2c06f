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

import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import NOTEBOOKS, STEPS, cpu_load, jupyter_lab, load_workers
from labpage import ACTIVE, Lab

from spanviz.plots.span_blocks import DIM_OPACITY

REPO = Path(__file__).resolve().parents[2]
BUSY_LOAD = 4  # busy-loop processes of the multi-notebook test (on top of four training kernels)
TIMED_WAIT_S = 120  # a timed move whose figure has not drawn by then counts as lost
TIMED_MOVES = 6  # timed moves of each notebook's control in the multi-notebook test (4 × 6 = 24 latencies)


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
    "01_spans_and_violations.ipynb": Case(7, [  # the α response (from the bundle) + the panel's six
        _c("slider", "α0", {"blocks", "toy"}, "ArrowLeft"),
        _c("slider", "α1", {"blocks", "toy"}),
        _c("slider", "α2", {"blocks"}),
        _c("slider", "α3", {"blocks"}),
        _c("select", "head", {"blocks", "angles"}, "1"),
        _c("select", "layer", {"blocks", "angles", "train-energy"}, "1"),
        _c("select", "preset", {"blocks"}, "qk4"),
    ], report=r"best val loss", busy_control=1),
    "02_local_global_heads.ipynb": Case(7, [  # the growth lab's two (from the bundle) + five
        _c("slider", "lab learning rate", {"growth-sweep", "growth-curves"}, "ArrowLeft"),
        _c("slider", "n_local (local heads)", {"masks"}, "ArrowLeft"),
        _c("slider", "window p", {"masks"}, "ArrowLeft", 12),
        _c("slider", "context T", {"masks"}),
    ], busy_control=2),
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


def check_control(lab: Lab, notebook: str, control: Control, live_too: bool = True, timeout: float = 90.0) -> None:
    """The control redraws its own figures (each within ``timeout`` seconds), and no other figure's drawn data
    changes (``live_too=False``: training figures may change anyway, a run is going)."""
    before = {f["name"]: f for f in lab.figures()}
    done = move(lab, control)
    for view in sorted(control.own):
        lab.wait_figure_change(view, before[view], done, timeout=timeout)
    after = {f["name"]: f for f in lab.figures()}
    others = [v for v in before if v and v not in control.own and (live_too or not v.startswith("train-"))]
    moved = [v for v in others if after[v]["sig"] != before[v]["sig"]]
    assert not moved, f"{notebook}: {done} also changed the figures {moved}, not only {sorted(control.own)}"


BLOCKS_DRAWN_JS = """(gd) => ({
  heat: gd.data.filter((t) => t.type === 'heatmap').map((t) => ({axis: t.coloraxis, opacity: t.opacity ?? 1})),
  axes: Object.fromEntries(Object.keys(gd.layout).filter((k) => k.startsWith('coloraxis'))
    .map((k) => [k, {cmin: gd.layout[k].cmin, cmax: gd.layout[k].cmax}])),
  bars: gd.layout.shapes.map((s) => s.y1), top: gd.layout.yaxis2.range[1],
  titles: gd.layout.annotations.map((a) => a.text),
})"""


KEEP_JS = "(gd) => { window.__kept = {z: gd.data.map((t) => t.z), template: gd.layout.template}; }"
KEPT_JS = "(gd) => gd.data.every((t, i) => t.z === window.__kept.z[i]) && gd.layout.template === window.__kept.template"


def check_blocks_follow_alphas(lab: Lab) -> None:
    """The blocks figure the page draws shows α·block for the α each slider's readout says: the heatmaps of order o
    on a colour range ±zmax/α_o (the colour bar's ±zmax in units of α·entry), faded at α = 0; the scaled norm
    bars α_o times the unscaled ones, all inside the bars' axis; each title saying its α."""
    alphas = [float(lab.slider(f"α{o}").locator(".widget-readout").inner_text()) for o in range(4)]
    gd = lab.page.locator(f"{ACTIVE} .spanviz-view-blocks .js-plotly-plot").first
    drawn = gd.evaluate(BLOCKS_DRAWN_JS)
    n, zmax = len(drawn["heat"]), drawn["axes"]["coloraxis"]["cmax"]
    for i, heat in enumerate(drawn["heat"]):
        o = int(heat["axis"].removeprefix("coloraxis")) - 2
        a = alphas[o]
        assert drawn["axes"][heat["axis"]]["cmax"] == pytest.approx(zmax / a if a else zmax), (i, alphas, drawn)
        assert heat["opacity"] == (1 if a else pytest.approx(DIM_OPACITY)), (i, alphas)
        assert drawn["bars"][n + i] == pytest.approx(drawn["bars"][i] * a), (i, alphas, drawn["bars"])
        assert any(t.endswith(f"(order {o}) ×{a:g}") for t in drawn["titles"]), (o, a, drawn["titles"])
    assert max(drawn["bars"]) < drawn["top"]


# Before a pick: note the first drawing of the blocks figure that follows (its revision number and traces) and count
# plotly.js's redraws of it (plotly_react events) from now on.
PICK_PROBE_JS = """(gd) => {
  if (!gd.__reacts) { gd.__reacts = {n: 0}; gd.on('plotly_react', () => { gd.__reacts.n += 1; }); }
  const probe = window.__pick = {first: null, reacts: gd.__reacts.n};
  const seen = new MutationObserver(() => {
    seen.disconnect();
    probe.first = {revision: gd.dataset.revision, traces: gd.data.length};
  });
  seen.observe(gd, {attributes: true, attributeFilter: ['data-revision']});
}"""


def check_picks_in_the_page(lab: Lab) -> None:
    """A preset the kernel has drawn before (for this layer and head) is drawn by the page at once, from the state it
    kept (block_scaler.js), with the sliders' α; the kernel's own drawing of the pick, moments later, is the very
    same state, and figure.js does not hand it to plotly.js again."""
    gd = lab.page.locator(f"{ACTIVE} .spanviz-view-blocks .js-plotly-plot").first
    qk4 = lab.figure("blocks")  # qk4 as the kernel drew it, rescaled by the page for the α move
    for preset, traces in (("kv8", 8 + 1), ("qk4", 4 + 1)):  # kv8 at this layer and head: drawn for the layer pick
        revision = int(gd.get_attribute("data-revision"))
        gd.evaluate(PICK_PROBE_JS)
        lab.select("preset", preset)
        first = lab.wait_until(f"the blocks of {preset}", lambda: lab.page.evaluate("window.__pick.first"),
                               timeout=60, every=0.05)
        # drawn before the kernel's answer (which brings the next revision), with the new blocks
        assert first == {"revision": str(revision), "traces": traces}, (preset, revision, first)
        check_blocks_follow_alphas(lab)
        lab.wait_until(f"the kernel's drawing of {preset}", lambda r=revision: gd.get_attribute("data-revision") == str(
            r + 1), timeout=60, every=0.05)
        assert lab.page.evaluate("window.__pick.reacts") + 1 == gd.evaluate("gd => gd.__reacts.n"), (
            f"{preset}: the kernel's drawing of the pick differs from the page's, or was handed to plotly.js again")
    assert lab.figure("blocks")["sig"] == qk4["sig"]  # the very state the kernel drew for qk4, at the same α


def timed_moves(lab: Lab, control: Control, moves: int) -> list[dict]:
    """Move ``control`` back and forth ``moves`` times (one key press each) and time each input until its first own
    figure drew the new data (:meth:`Lab.timed`)."""
    assert control.kind == "slider", "timed moves are key presses on a slider"
    back = {"ArrowLeft": "ArrowRight", "ArrowRight": "ArrowLeft"}[control.value]
    view = sorted(control.own)[0]
    handle = lab.slider(control.label).locator(".noUi-handle").first
    readout = lab.slider(control.label).locator(".widget-readout")
    out = []
    for i in range(moves):
        key = back if i % 2 == 0 else control.value  # the check before moved it with control.value
        handle.focus()
        before = readout.inner_text()
        timed = lab.timed(view, lambda key=key: handle.press(key), timeout=TIMED_WAIT_S)
        out.append({**timed, "move": f"{before} → {readout.inner_text()}"})
    return out


def latency_summary(latencies: dict[str, list[dict]]) -> str:
    """Median, p95 (nearest rank) and max of the timed moves; a move never drawn counts as the longest."""
    ms = sorted(x["ms"] if x["ms"] is not None else math.inf for xs in latencies.values() for x in xs)
    if not ms:
        return "no timed moves"
    p95 = ms[min(len(ms) - 1, math.ceil(0.95 * len(ms)) - 1)]
    return (f"control → redraw over {len(ms)} moves: median {ms[len(ms) // 2] / 1000:.2f} s, p95 {p95 / 1000:.2f} s, "
            f"max {ms[-1] / 1000:.2f} s")


def check_clean(lab: Lab, notebook: str) -> None:
    warnings = lab.warning_boxes()
    assert not warnings, f"{notebook}: warning boxes in the outputs:\n" + "\n".join(warnings)
    assert not lab.errors, f"{notebook}: JavaScript errors:\n" + "\n".join(lab.errors)
    cut = lab.cut_titles()
    assert not cut, f"{notebook}: figure titles cut off at the figure's edge:\n" + "\n".join(cut)


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
        # the status names the replay while its rows are drawn; the buttons follow once the runner has ended
        page.wait_until("the replay to end: Train enabled, Stop disabled",
                        lambda: page.button("Train").is_enabled() and not page.button("Stop").is_enabled(), 60)
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
            assert page.figure("blocks")["traces"] == 4 + 1, "preset qk4: 4 blocks and the colour bar's trace"
            check_blocks_follow_alphas(page)  # as the kernel drew them (after the preset change) ...
            blocks = page.page.locator(f"{ACTIVE} .spanviz-view-blocks .js-plotly-plot").first
            blocks.evaluate(KEEP_JS)
            check_control(page, notebook, _c("slider", "α1", {"blocks", "toy"}))
            check_blocks_follow_alphas(page)  # ... and as the page rescaled them itself (block_scaler.js)
            # α changed no trace data: plotly.js got the same arrays and template objects again (figure.js keeps what
            # did not change), so it redrew colours, shapes and titles without recomputing the figure
            assert blocks.evaluate(KEPT_JS), "an α move handed plotly.js new data arrays: a full replot"
            check_picks_in_the_page(page)
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
    latencies: dict[str, list[dict]] = {}
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
                control = case.controls[case.busy_control]
                check_control(page, notebook, control, live_too=False, timeout=TIMED_WAIT_S)
                latencies[notebook] = timed_moves(page, control, TIMED_MOVES)
                page.wait_until("every figure of the panel out of its busy state",
                                lambda: page.page.locator(f"{ACTIVE} .spanviz-figure[aria-busy]").count() == 0, 90)
                page.wait_status(RUNNING)
                check_clean(page, notebook)
        except AssertionError as exc:
            shot = screenshot_dir / "FAILED-busy.png"
            page.page.screenshot(path=str(shot))
            raise AssertionError(f"{exc}\n{latency_summary(latencies)}: {latencies}\n(screenshot {shot}; console:\n"
                                 + "\n".join(page.console[-20:]) + ")") from None
        finally:
            page.close()
    print(f"four notebooks under load: opened and ran in {opened:.0f} s, checked in {time.monotonic() - t0:.0f} s; "
          + latency_summary(latencies) + f"; load average {os.getloadavg()[0]:.1f}")
    for notebook, xs in latencies.items():
        print(f"  {notebook}: " + ", ".join(f"{x['move']} {x['ms'] / 1000:.2f} s" if x["ms"] is not None else
                                            f"{x['move']} NOT DRAWN" for x in xs)
              + f"; busy right after the input: {[x['busy_at_input'] for x in xs]}")
    lost = [(nb, x["move"]) for nb, xs in latencies.items() for x in xs if x["ms"] is None]
    assert not lost, f"moves whose figure did not draw the new data within {TIMED_WAIT_S} s: {lost}"
    not_busy = [(nb, x["move"]) for nb, xs in latencies.items() for x in xs if x["busy_at_input"] != "true"]
    assert not not_busy, f"moves that showed no busy state right after the input: {not_busy}"
