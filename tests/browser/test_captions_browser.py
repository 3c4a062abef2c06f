"""Every notebook in its default replay, read as a student reads it: the text next to each generated figure quotes
numbers, and each number must be the one the figure draws (``gd.data`` in the page).

The kernels run the notebooks with their **default** parameters and the shipped workshop bundle (no
``SPANVIZ_STEPS``): ``panel.train()`` replays the default runs from the bundle at once, on a CPU, as on Binder.
Per notebook: Run All, wait for the replay, then for each caption (:mod:`spanviz.widgets.captions`, and the
caption under notebook 02's H100 figure) parse the numbers it quotes and compare them with the drawn data of its
figure, to the digits shown. A screenshot of each panel (the whole element, taller than the window) is written to
the screenshot folder as ``<notebook>-replay.png`` (``docs/screenshots`` with ``SPANVIZ_UPDATE_SCREENSHOTS=1``).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import NOTEBOOKS, jupyter_lab
from labpage import ACTIVE, Lab

REPLAYED = r"^replayed from the store: "

# The traces of the figure inside the element (a spanviz view or a notebook output), as plain numbers.
TRACES_JS = """(el) => {
  const gd = el.classList.contains('js-plotly-plot') ? el : el.querySelector('.js-plotly-plot');
  if (!gd || !gd.data) return null;
  const arr = (v) => v == null ? null : Array.from(v, (x) => (typeof x === 'number' ? x : (x == null ? null : x)));
  return gd.data.map((t) => ({name: t.name || '', x: arr(t.x), y: arr(t.y), customdata: arr(t.customdata),
                               color: (t.line || {}).color || null, meta: t.meta || null}));
}"""


def numbers(text: str) -> list[float]:
    """The numbers of a caption, in order ("−3.29" and "450,600" included)."""
    return [float(m.replace("−", "-").replace(",", "")) for m in re.findall(r"[−+-]?\d[\d,]*(?:\.\d+)?", text)]


def shown(value: float, text: str) -> bool:
    """Whether ``text`` (a number as the caption prints it) is ``value`` to the digits printed."""
    t = text.replace("−", "-").replace(",", "")
    decimals = len(t.split(".")[1]) if "." in t else 0
    digits = len(re.sub(r"\D", "", t).lstrip("0")) or 1
    return any(f(value) == float(t) for f in (lambda v: round(v, decimals),
                                             lambda v: float(f"{v:.{digits}g}")))


def expect(caption: str, pattern: str) -> re.Match:
    m = re.search(pattern, caption)
    assert m, f"caption does not say {pattern!r}:\n{caption}"
    return m


def check(text: str, value: float, what: str, caption: str) -> None:
    assert shown(value, text), f"{what}: the caption says {text}, the figure draws {value!r}\n{caption}"


@pytest.fixture(scope="module")
def replay_lab(chromium: str, spanviz_home: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A JupyterLab whose kernels run the notebooks as shipped: default steps, the bundle replaying the defaults."""
    env = {k: v for k, v in spanviz_home.items() if k not in ("SPANVIZ_STEPS", "SPANVIZ_GPU_BUNDLE")}
    with jupyter_lab(tmp_path_factory.mktemp("replay-lab"), env, sorted(NOTEBOOKS.glob("*.ipynb"))) as server:
        yield server


class Page:
    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    def traces(self, selector: str) -> list[dict]:
        """The drawn traces of the figure in ``selector`` (waiting for the figure to draw data)."""
        el = self.lab.page.locator(f"{ACTIVE} {selector}").first

        def drawn() -> list[dict] | None:
            data = el.evaluate(TRACES_JS)
            return data if data and any(t["x"] or t["y"] for t in data) else None

        return self.lab.wait_until(f"a drawn figure in {selector}", drawn, timeout=120)

    def caption(self, name: str) -> str:
        el = self.lab.page.locator(f"{ACTIVE} .spanviz-caption-{name}").first
        return self.lab.wait_until(f"caption {name!r}", lambda: el.inner_text().strip(), timeout=120)

    def trace(self, traces: list[dict], name: str) -> dict:
        """The trace called ``name`` (or ``name (= … here)``, when it coincides with another)."""
        found = [t for t in traces if t["name"] == name or t["name"].startswith(f"{name} (= ")]
        assert len(found) == 1, f"no single trace {name!r} in {[t['name'] for t in traces]}"
        return found[0]


def open_replayed(browser, replay_lab: dict, notebook: str) -> tuple[Lab, Page]:
    lab = Lab(browser, replay_lab)
    lab.open(notebook)
    lab.run_all(notebook, timeout=900)
    lab.wait_status(REPLAYED, timeout=300)
    return lab, Page(lab)


def screenshot(lab: Lab, selector: str, path: Path) -> None:
    """The whole element, however tall: the window is made taller than it for the shot (JupyterLab scrolls inside
    its notebook panel, so a normal window would cut it), then put back."""
    el = lab.page.locator(f"{ACTIVE} {selector}").first
    size = lab.page.viewport_size
    height = el.evaluate("el => el.getBoundingClientRect().height")
    lab.page.set_viewport_size({"width": size["width"], "height": int(height) + 400})
    try:
        el.evaluate("el => el.scrollIntoView({block: 'start'})")
        lab.page.wait_for_timeout(2500)  # the figures' relayout to the new window
        el.screenshot(path=str(path))
    finally:
        lab.page.set_viewport_size(size)


def check_loss_caption(page: Page, caption: str) -> None:
    """"<label> 5.411 (step 299)" per run: the last point of the run's dashed validation-loss curve."""
    traces = page.traces(".spanviz-view-train-loss")
    runs = re.findall(r"([^:;]+?) (\d+\.\d+) \(step (\d+)\)", caption.split(":", 1)[1])
    assert runs, caption
    for label, value, step in runs:
        val = page.trace(traces, f"{label.strip()} · val loss")
        assert int(step) == val["x"][-1], f"{label}: step {step} vs the curve's last step {val['x'][-1]}"
        check(value, val["y"][-1], f"{label} last val loss", caption)
    names = {t["name"].split(" · ")[0] for t in traces if " · " in t["name"]}
    assert {label.strip() for label, _, _ in runs} == names, "the caption names every run of the figure"


# ---------------------------------------------------------------------------------------------------------- 00
@pytest.mark.timeout(1200)
def test_tour_says_what_its_loss_figure_draws(browser, replay_lab: dict, screenshot_dir: Path) -> None:
    lab, page = open_replayed(browser, replay_lab, "00_tour.ipynb")
    try:
        caption = page.caption("train-loss")
        check_loss_caption(page, caption)
        steps = int(expect(lab.status(), r"\((\d+) steps?[,)]").group(1))  # "(300 steps, on a CPU)"
        train = page.trace(page.traces(".spanviz-view-train-loss"), "tiny GPT · train loss")
        assert len(train["x"]) == steps, f"the status says {steps} steps, the loss curve has {len(train['x'])}"
        screenshot(lab, ".jp-OutputArea-output:has(.spanviz-view-train-loss)", screenshot_dir / "00_tour-replay.png")
    finally:
        lab.close()


# ---------------------------------------------------------------------------------------------------------- 01
@pytest.mark.timeout(1200)
def test_spans_captions_quote_the_drawn_change_band_and_angles(browser, replay_lab: dict,
                                                               screenshot_dir: Path) -> None:
    lab, page = open_replayed(browser, replay_lab, "01_spans_and_violations.ipynb")
    try:
        caption = page.caption("train-delta")
        traces = page.traces(".spanviz-view-train-delta")
        band = page.trace(traces, "seed noise")
        alpha = next(t for t in traces if t["name"] != "seed noise")
        n = len(alpha["x"])
        upper = [abs(v) for v in band["y"][:n]]  # the band polygon: +|noise| along x, then −|noise| back
        m = expect(caption, r"\(step (\d+)\) the α run (.+?) had a validation loss ([+−]\d+\.\d+) % against standard "
                            r"\((higher|lower)\)")
        assert int(m.group(1)) == alpha["x"][-1] and m.group(2) == alpha["name"]
        check(m.group(3), alpha["y"][-1], "change at the last evaluation", caption)
        assert m.group(4) == ("higher" if alpha["y"][-1] > 0 else "lower")
        m = expect(caption, r"is ±(\d+\.\d+) % there and at most ±(\d+\.\d+) % over the run \(step (\d+)\)")
        check(m.group(1), upper[-1], "band at the last evaluation", caption)
        check(m.group(2), max(upper), "widest band", caption)
        assert int(m.group(3)) == alpha["x"][upper.index(max(upper))]
        last = abs(alpha["y"][-1])
        verdict = ("outside the band, wider than any seed difference" if last > max(upper) else
                   "outside the band at this step, but not wider" if last > upper[-1] else "inside the band")
        assert verdict in caption, f"the change {alpha['y'][-1]:+.2f} % against the band: expected {verdict!r}"
        m = expect(caption, r"Largest change over the run: ([+−]\d+\.\d+) % \(step (\d+)\)")
        k = max(range(n), key=lambda i: abs(alpha["y"][i]))
        check(m.group(1), alpha["y"][k], "largest change", caption)
        assert int(m.group(2)) == alpha["x"][k]
        # why it can differ: the model of the run on screen (the notebook's parameters: d_head 32, 300 steps)
        expect(caption, r"d_head = 32 here, below the d_head ≥ 64")
        expect(caption, rf"{alpha['x'][-1] + 1} steps of a 2-layer model with d_model 64")
        check_loss_caption(page, page.caption("train-loss"))

        angles = page.caption("angles")
        bars = {t["name"]: t["y"] for t in page.traces(".spanviz-view-angles")}
        pattern = r"(\w–\w) (\d+\.\d)°"
        smallest = re.findall(pattern, angles.split("Smallest:")[1].split(";")[0])
        median = re.findall(pattern, angles.split("median:")[1].split("All three")[0])
        assert [p for p, _ in smallest] == [p for p, _ in median] == list(bars), angles
        for (pair, low), (_, mid) in zip(smallest, median):
            check(low, min(bars[pair]), f"smallest angle {pair}", angles)
            check(mid, statistics.median(bars[pair]), f"median angle {pair}", angles)
        screenshot(lab, ".jp-OutputArea-output:has(.spanviz-view-blocks)", screenshot_dir /
                   "01_spans_and_violations-replay.png")
    finally:
        lab.close()


# ---------------------------------------------------------------------------------------------------------- 02
@pytest.mark.timeout(1200)
def test_local_global_captions_quote_the_drawn_peaks(browser, replay_lab: dict, screenshot_dir: Path) -> None:
    lab, page = open_replayed(browser, replay_lab, "02_local_global_heads.ipynb")
    try:
        caption = page.caption("train-max_logit")
        traces = page.traces(".spanviz-view-train-max_logit")
        peaks = re.findall(r"([^:;]+?) (\d+(?:\.\d+)?) \(layer (\d+), step (\d+)\)", caption.split(":", 1)[1])
        assert len(peaks) == 2, caption
        drawn = {}
        for label, value, layer, step in peaks:
            line = page.trace(traces, f"{label.strip()} · layer {layer}")
            runs = [t for t in traces if t["name"].startswith(f"{label.strip()} · layer ")]
            top = max(max(t["y"]) for t in runs)
            check(value, top, f"{label} peak", caption)
            assert max(line["y"]) == top and line["x"][line["y"].index(top)] == int(step)
            drawn[label.strip()] = top
        (first, a), (second, b) = drawn.items()
        m = expect(caption, rf"{re.escape(second)} against {re.escape(first)}: ([+−]\d+\.\d+) %")
        check(m.group(1), 100 * (b / a - 1), "LS against MHSA", caption)
        check_loss_caption(page, page.caption("train-loss"))
        screenshot(lab, ".jp-OutputArea-output:has(.spanviz-view-masks)", screenshot_dir /
                   "02_local_global_heads-replay.png")

        # The H100 figure: the caption's per-seed peaks are its stars, in the panel's names and colors.
        peaks_text = lab.wait_until("the H100 caption", lambda: lab.page.locator(
            f"{ACTIVE} .spanviz-caption-peaks").first.inner_text().strip(), timeout=60)
        cell = ".jp-Cell:has(.spanviz-caption-peaks)"
        h100 = page.traces(f"{cell} .js-plotly-plot")
        names = [t["name"] for t in h100 if t["name"].endswith(": peak of each seed")]
        assert [n.split(":")[0] for n in names] == ["MHSA", "LS (5 local, p=50)", "QK-norm"], names
        for name in names:
            variant = name.split(":")[0]
            stars = page.trace(h100, name)["y"]
            m = expect(peaks_text, rf"{re.escape(variant)} ([\d., ]+?) \(mean (\d+(?:\.\d+)?) ± (\d+(?:\.\d+)?)\)")
            quoted = [v.strip() for v in m.group(1).split(", ")]
            assert len(quoted) == len(stars)
            for text, value in zip(quoted, stars):
                check(text, value, f"{variant} seed peak", peaks_text)
            check(m.group(2), statistics.fmean(stars), f"{variant} mean", peaks_text)
            check(m.group(3), statistics.stdev(stars), f"{variant} std", peaks_text)
        # ... in the colors of the panel's figures: MHSA and LS as there
        screenshot(lab, cell, screenshot_dir / "02_local_global_heads-replay-h100.png")
        panel_color = {t["name"].split(" ")[0]: t["color"] for t in traces}  # MHSA, LS
        h100_color = {t["name"].split(" ")[0]: t["color"] for t in h100 if "(mean of" in t["name"]}
        assert panel_color == {k: h100_color.get(k) for k in panel_color}, (panel_color, h100_color)
    finally:
        lab.close()


# ---------------------------------------------------------------------------------------------------------- 03
@pytest.mark.timeout(1200)
def test_fp8_captions_quote_the_drawn_bounds_crossings_and_overflows(browser, replay_lab: dict,
                                                                      screenshot_dir: Path) -> None:
    lab, page = open_replayed(browser, replay_lab, "03_fp8_logit_bounds.ipynb")
    try:
        caption = page.caption("train-fp8")
        traces = page.traces(".spanviz-view-train-fp8")

        def row(kind: str) -> dict[str, dict]:
            return {t["meta"]["name"]: t for t in traces if (t.get("meta") or {}).get("row") == kind}

        over, under, ratio = row("overflow"), row("underflow"), row("ratio")
        assert {"delayed", "deterministic", "dynamic", "rowwise", "mx", "tile_1x128"} <= set(over), sorted(over)
        assert set(under) == set(over), "every strategy's underflows are drawn (the default replay records them)"
        m = expect(caption, r"over (\d+) steps (.+?) overflowed; (.+?) never did\.")
        assert int(m.group(1)) == len(over["delayed"]["x"])
        def value(v: float | None) -> float:  # a gap (no overflow / no underflow yet) is drawn as null or NaN
            return 0.0 if v is None or math.isnan(v) else v

        hit = {s for s, t in over.items() if any(value(v) for v in t["y"])}
        assert (set() if m.group(2) == "none" else set(m.group(2).split(", "))) == hit, (m.group(2), hit)
        assert (set() if m.group(3) == "none" else set(m.group(3).split(", "))) == set(over) - hit
        m = expect(caption, r"(\w+) flushed ([\d,]+) scores to zero and ([\d,]+) to subnormals; (\w+) flushed ([\d,]+) "
                            r"and ([\d,]+) — and paid ([\d,]+) scale values")
        for name, zero, sub in ((m.group(1), m.group(2), m.group(3)), (m.group(4), m.group(5), m.group(6))):
            drawn = round(value(under[name]["y"][-1]))  # the drawn sum up to the last step
            assert int(zero.replace(",", "")) + int(sub.replace(",", "")) == drawn, (name, drawn, caption)
        if "a guarantee, not a measurement" in caption:
            assert max(value(v) for v in ratio["worst case"]["y"]) <= 1.0  # the bottom row agrees

        # one line in plain words, the derivation collapsed under it: a click on its summary opens it
        takeaway = page.caption("bounds")
        assert takeaway.startswith("In short: rank r = ") and "γ = " not in takeaway, takeaway
        lab.page.locator(f"{ACTIVE} .spanviz-caption-bounds summary").first.click()
        bounds = lab.wait_until("the derivation opened", lambda: (t := page.caption("bounds")) != takeaway and t, 30)
        curves = page.traces(".spanviz-view-bounds")
        aware = next(t for t in curves if t["name"].startswith("rank-aware"))
        reference = next(t for t in curves if t["name"].startswith("√(r/d_head)"))
        m = expect(bounds, r"Rank r = (\d+) against r = d_head = (\d+) \(δ = [\d.e-]+\): the rank-aware bound goes "
                           r"from (\d+(?:\.\d+)?) to (\d+(?:\.\d+)?), ×(\d\.\d\d) — not ×(\d\.\d\d)")
        low, d_head = int(m.group(1)), int(m.group(2))
        i, j = aware["x"].index(low), aware["x"].index(d_head)
        check(m.group(3), aware["y"][j], "rank-aware at d_head", bounds)
        check(m.group(4), aware["y"][i], f"rank-aware at r = {low}", bounds)
        check(m.group(5), aware["y"][i] / aware["y"][j], "ratio", bounds)
        check(m.group(6), reference["y"][i] / reference["y"][j], "the dotted reference's ratio", bounds)
        m = expect(bounds, rf"γ = (\d+(?:\.\d+)?) at r = {d_head}, (\d+(?:\.\d+)?) at r = {low}")
        check(m.group(1), aware["customdata"][j], "γ(d_head)", bounds)
        check(m.group(2), aware["customdata"][i], f"γ({low})", bounds)
        factors = [float(x) for x in re.findall(r"×(\d\.\d\d) · ×(\d\.\d\d) = ×\d\.\d\d", bounds)[0]]
        assert math.isclose(factors[0] * factors[1], aware["y"][i] / aware["y"][j], abs_tol=0.011)
        screenshot(lab, ".jp-OutputArea-output:has(.spanviz-view-bounds)", screenshot_dir /
                   "03_fp8_logit_bounds-replay.png")
    finally:
        lab.close()
