"""The static site as a person sees it: every page opened from file:// with every network request blocked, each
figure drawn, each control moving its own view, no console error; the page's α and masks agree with Python's to
the last drawn value. ``SPANVIZ_SITE_SHOTS=DIR`` saves a screenshot of each page there."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

from spanviz.local_global.demos import head_masks
from spanviz.plots.local_global import head_masks_data
from spanviz.plots.span_blocks import span_blocks_layout, span_blocks_traces
from spanviz.site import drive
from spanviz.site.sections import data_stand_in, run_cells
from spanviz.widgets.local_global import MASK_ZOOM

REPO = Path(__file__).resolve().parents[2]
PAGES = ["index", "00_tour", "01_spans_and_violations", "02_local_global_heads", "03_fp8_logit_bounds", "comparisons"]


def open_offline(browser, path: Path):
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    blocked = drive.block_network(page)
    timing = drive.open_page(page, path)
    return page, errors, blocked, timing


@pytest.mark.parametrize("name", PAGES)
def test_page_offline(browser, site: Path, name: str) -> None:
    page, errors, blocked, timing = open_offline(browser, site / f"{name}.html")
    try:
        figures = drive.drawn(page)
        if name not in ("index",):
            assert figures, f"{name}: no figure"
            print(f"{name}: first figure {timing['first_ms']:.0f} ms after navigation, {len(figures)} figures")
        shots = os.environ.get("SPANVIZ_SITE_SHOTS")
        if shots:
            Path(shots).mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(Path(shots) / f"{name}.png"), full_page=True)
        for fig in figures:
            assert fig["traces"] > 0 and fig["points"] > 0, f"{name}: {fig} drew nothing"
        for c in drive.controls(page):
            before = drive.signature(page, c["section"])
            new = c["index"] + 1 if c["index"] + 1 < c["n"] else c["index"] - 1
            drive.move(page, c["section"], c["name"], new)
            after = drive.signature(page, c["section"])
            assert any(after[k] != before[k] for k in after), f"{c['section']}: {c['name']} changed nothing"
        assert page.evaluate("() => window.__sv.errors") == []
        assert not errors, f"{name}: console errors {errors[:3]}"
        assert not blocked, f"{name}: requests to the network {blocked[:3]}"
    finally:
        page.close()


def notebook_panel(name: str):
    nb = json.loads((REPO / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
    ns = {"data": data_stand_in(8192), "lab": None}
    return run_cells(["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"], ns)["panel"]


def test_alpha_page_agrees_with_python(browser, site: Path) -> None:
    """The blocks at α and a pick moved in the page equal span_blocks_layout / span_blocks_traces (the one rule)."""
    panel = notebook_panel("01_spans_and_violations")
    page, errors, _, _ = open_offline(browser, site / "01_spans_and_violations.html")
    try:
        section = "01_spans_and_violations-spans"
        spec = page.evaluate(f"() => window.__sv.sections['{section}'].spec.controls")
        ctl = {c["name"]: c for c in spec}
        for alphas, pick in [((7, 30, 0, 40), (1, 1, 1)), ((0, 20, 41 - 1, 3), (0, 0, 1)), ((20, 0, 0, 0), (2, 1, 0))]:
            for i, k in enumerate(alphas):
                drive.move(page, section, f"alpha{i}", k)
            for n, k in zip(("preset", "layer", "head"), pick):
                if k < len(ctl[n]["values"]):
                    drive.move(page, section, n, k)
            shown = page.evaluate(f"""() => {{ const d = window.__sv.sections['{section}'].divs.blocks;
                return {{layout: d.layout, opacity: d.data.map((t) => t.opacity)}}; }}""")
            a = [ctl[f"alpha{i}"]["values"][k] for i, k in enumerate(alphas)]
            key = tuple(ctl[n]["values"][min(k, len(ctl[n]["values"]) - 1)]
                        for n, k in zip(("preset", "layer", "head"), pick))
            panel._load_head(key)
            cells = panel._cells[key]
            want, traces = span_blocks_layout(cells, a), span_blocks_traces(cells, a)
            n = len(cells["orders"])
            for o in sorted(set(cells["orders"])):
                axis = f"coloraxis{o + 2}"
                assert [shown["layout"][axis][k] for k in ("cmin", "cmax", "reversescale")] == \
                       [want[axis][k] for k in ("cmin", "cmax", "reversescale")], (a, key, axis)
            assert [s["y1"] for s in shown["layout"]["shapes"][n:2 * n]] == [s["y1"] for s in want["shapes"][n:2 * n]]
            assert shown["layout"]["yaxis2"]["range"] == want["yaxis2"]["range"]
            titles = [x["text"] for x in want["annotations"][:n]]
            assert [x["text"] for x in shown["layout"]["annotations"][:n]] == titles
            assert shown["opacity"][:n] == [t["opacity"] for t in traces[:n]]
        assert not errors
    finally:
        page.close()


def test_masks_page_agrees_with_python(browser, site: Path) -> None:
    """The masks the page computes (masks.js) equal head_masks_data of head_masks, for settings across the grid."""
    page, errors, _, _ = open_offline(browser, site / "02_local_global_heads.html")
    try:
        section = "02_local_global_heads-masks"
        ctl = {c["name"]: c for c in page.evaluate(f"() => window.__sv.sections['{section}'].spec.controls")}
        H = page.evaluate(f"() => window.__sv.sections['{section}'].spec.views[0].masks.H")
        for n_local, window, context in [(1, 5, 48), (3, 16, 512), (0, 1, 16), (H, 128, 160), (2, 3, 272)]:
            for name, value in (("n_local", n_local), ("window", window), ("context", context)):
                drive.move(page, section, name, ctl[name]["values"].index(value))
            z = page.evaluate(f"() => window.__sv.sections['{section}'].divs.masks.data.map((t) => t.z)")
            want = head_masks_data(head_masks(H, n_local, window, context), zoom=MASK_ZOOM)
            for got, trace in zip(z, want):
                w = np.asarray(trace["z"], dtype=float)
                g = np.array([[math.nan if v is None else v for v in row] for row in got], dtype=float)
                assert g.shape == w.shape, (n_local, window, context)
                assert np.allclose(g, w, atol=1e-6, equal_nan=True), (n_local, window, context)
        assert not errors
    finally:
        page.close()


def test_bounds_caption_and_table_state_the_drawn_numbers(browser, site: Path) -> None:
    """03's bounds: what the scale table and the caption say at r is what the figure draws at x = r (3 significant
    figures, as printed) — the bounds (drawn times the margin 2^m), the observed max |S|, and the caption's "×"
    ratio of the rank-aware bound at r (or 1) to the one at r = d_head — for settings across the grid of r, δ and
    margin."""
    page, errors, _, _ = open_offline(browser, site / "03_fp8_logit_bounds.html")
    section = "03_fp8_logit_bounds-bounds"
    try:
        ctl = {c["name"]: c for c in page.evaluate(f"() => window.__sv.sections['{section}'].spec.controls")}
        n_rank = len(ctl["rank"]["values"])
        for rank, delta, margin in [(n_rank - 1, 12, 0), (3, 0, 2), (0, len(ctl["delta"]["values"]) - 1, 4),
                                    (7, 5, 1)]:
            for name, index in (("rank", rank), ("delta", delta), ("margin", margin)):
                drive.move(page, section, name, index)
            shown = page.evaluate(f"""() => {{ const s = window.__sv.sections['{section}'];
                return {{caption: s.divs['bounds-caption'].innerText, table: s.divs['scales'].innerText,
                         traces: s.divs['bounds'].data.map((t) => [t.name, Array.from(t.x), Array.from(t.y)])}}; }}""")
            r, m = ctl["rank"]["values"][rank], ctl["margin"]["values"][margin]
            # the figure draws each bound times the margin 2^m ("rank-aware × 2^2"); the table states the bound
            suffix = f" × 2^{m}" if m else ""
            at = {name.removesuffix(suffix): dict(zip(x, y)) for name, x, y in shown["traces"]}
            rows = dict(re.findall(r"^(deterministic|rank-agnostic|rank-aware|dynamic)\t([0-9.e+-]+)\t",
                                   shown["table"], flags=re.M))
            drawn = {"deterministic": at["worst case"][r] / 2**m, "rank-agnostic": at["rank-agnostic"][r] / 2**m,
                     "rank-aware": at["rank-aware"][r] / 2**m, "dynamic": at["observed max |S|"][r]}
            assert sorted(rows) == sorted(drawn), shown["table"]
            for name, value in drawn.items():
                assert float(rows[name]) == pytest.approx(value, rel=6e-3), (r, m, name, rows[name], value)
            assert f"r = {r}," in shown["table"], shown["table"]
            observed = float(re.search(r"observed max \|S\| = ([0-9.]+)", shown["table"]).group(1))
            assert observed == pytest.approx(drawn["dynamic"], rel=6e-3)
            # "rank r = a instead of d_head makes the rank-aware bound only ×q as large, not the ×√(a/d_head) …"
            # (a = r, or 1 when r = d_head)
            said = re.search(r"rank r = (\d+) instead of (\d+) makes the rank-aware bound only ×([0-9.]+) as large, "
                             r"not the ×([0-9.]+)", shown["caption"])
            aware = at["rank-aware"]
            a, d_head = int(said.group(1)), int(said.group(2))
            assert (a, d_head) == ((r if r < max(aware) else min(aware)), max(aware)), shown["caption"]
            assert float(said.group(3)) == pytest.approx(aware[a] / aware[d_head], abs=6e-3), shown["caption"]
            assert float(said.group(4)) == pytest.approx(math.sqrt(a / d_head), abs=6e-3), shown["caption"]
        assert not errors
    finally:
        page.close()


def assert_one_plot_shown(page, section: str) -> dict:
    """Each figure view of the section shows one plot (visible, in the flow, the one ``divs`` names, the holder
    as tall as it); the others are hidden, absolutely placed over it; no view holds more than its bound."""
    views = drive.plots(page, section)
    for name, v in views.items():
        visible = [p for p in v["plots"] if p["visibility"] == "visible"]
        assert len(visible) == 1 and visible[0]["shown"], (name, v)
        assert visible[0]["position"] != "absolute" and visible[0]["drawn"], (name, v)
        assert all(p["position"] == "absolute" for p in v["plots"] if not p["shown"]), (name, v)
        assert abs(v["holder_height"] - visible[0]["height"]) < 1, (name, v)
        assert len(v["plots"]) <= v["capacity"], (name, v)
    return views


def test_kept_plots_show_what_a_fresh_draw_shows(browser, site: Path) -> None:
    """A view keeps the plots it drew: a control moved away and back shows again the plot drawn for that setting
    (the same element, showing the same), one plot per view visible; a plot drawn ahead while the page was idle,
    or redrawn after many settings, shows what a page drawing that setting for the first time shows; the WebGL
    view (the toy surface) holds at most two plots."""
    section = "01_spans_and_violations-spans"
    page, errors, _, _ = open_offline(browser, site / "01_spans_and_violations.html")
    fresh, fresh_errors, _, _ = open_offline(browser, site / "01_spans_and_violations.html")
    try:
        ctl = {c["name"]: c for c in drive.controls(page) if c["section"] == section}
        assert drive.plots(page, section)["toy"]["gl"] and drive.plots(page, section)["toy"]["capacity"] <= 2
        for name in ("alpha2", "layer", "alpha0", "preset"):
            a = ctl[name]["index"]
            b = a + 1 if a + 1 < ctl[name]["n"] else a - 1
            before = drive.signature(page, section)
            page.evaluate("([s]) => { window.__kept = { ...window.__sv.sections[s].divs }; }", [section])
            drive.move(page, section, name, b)
            assert drive.signature(page, section) != before, name
            assert_one_plot_shown(page, section)
            back = drive.move_timed(page, section, name, a)
            assert back["drawn_before"], (name, back)
            assert drive.signature(page, section) == before, name
            assert page.evaluate("([s]) => Object.entries(window.__kept).every(([k, d]) => "
                                 "window.__sv.sections[s].divs[k] === d)", [section]), name
            assert_one_plot_shown(page, section)

        # drawn ahead while idle: α3 at 6, rest, then one step to 7; the fresh page jumps to 7 (never drawn ahead)
        for k in range(1, 7):
            drive.move(page, section, "alpha3", k)
        drive.wait_idle(page)
        step = drive.move_timed(page, section, "alpha3", 7)
        assert step["drawn_before"], step
        drive.move(fresh, section, "alpha3", 7)
        assert drive.signature(page, section) == drive.signature(fresh, section)

        # more settings than a view keeps: plots are redrawn for new settings, and still show the right one
        for k in range(24):  # more than the blocks view keeps (18)
            drive.move(page, section, "alpha2", k)
        assert_one_plot_shown(page, section)  # 24 settings, at most 18 plots: plots were redrawn
        for k in (2, 30, 1):
            drive.move(page, section, "alpha2", k)
            drive.move(fresh, section, "alpha2", k)
            assert drive.signature(page, section) == drive.signature(fresh, section), k

        # the WebGL view: several values of α0, never more than two plots
        for k in (3, 4, 9, 4, 3, 12):
            drive.move(page, section, "alpha0", k)
            assert len(assert_one_plot_shown(page, section)["toy"]["plots"]) <= 2
        assert page.evaluate("() => window.__sv.errors") == [] and not errors and not fresh_errors
    finally:
        page.close()
        fresh.close()
