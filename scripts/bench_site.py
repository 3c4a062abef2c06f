"""Benchmark of the static site in Chromium: first figure per page, and per control the p95 of input → drawn.

    python scripts/bench_site.py [--site DIR] [--inputs 20] [--mode drag|first] [--json OUT]

Builds the site into a temporary folder unless ``--site`` names a built one; opens each page from file:// with the
network blocked (as tests/browser/test_site_browser.py does) and waits until the page's idle drawing is done (it
draws the settings next to the controls' ones ahead: ``window.__sv.idle``). Then, per control, it waits again for
the idle drawing (a person who rested before moving it) and moves it ``--inputs`` times, each input right after
the previous one is painted:

* ``--mode drag`` (default): back and forth between its value and a neighbouring one, as a person dragging it to
  and fro would: after the first two inputs every plot was drawn before.
* ``--mode first``: a first drag, only to values never visited before: one step at a time from its value to one
  end, then from the value below its start to the other end (a jump, then steps).

It reads the page's own timings (``window.__sv.timings``: from the input event to the redraw painted, and whether
every figure the input shows was drawn before, ``drawn_before``) and prints a Markdown table: per control, all
inputs, those that found their plots drawn (warm) and those that had to draw (cold), with their counts. A control
on a view with WebGL traces (one plot, redrawn) is cold at each new value. Measures, asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from spanviz.bench.browser import CHROMIUM_FLAGS, chromium_path
from spanviz.site import build_site, drive

PAGES = ["00_tour", "01_spans_and_violations", "02_local_global_heads", "03_fp8_logit_bounds", "comparisons"]


def p95(values: list[float]) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))]


def targets(index: int, n: int, inputs: int, mode: str) -> list[int]:
    """The values a control is moved to, from its value ``index`` (of ``n``)."""
    if mode == "first":
        return ([*range(index + 1, n), *range(index - 1, -1, -1)])[:inputs]
    other = index + 1 if index + 1 < n else index - 1
    return [other if i % 2 == 0 else index for i in range(inputs)]


def summary(records: list[dict]) -> dict:
    """Median and p95 (ms) of all inputs, of the warm ones (plots drawn before) and of the cold ones, and counts
    (a page from before the plots were kept records no ``drawn_before``: every input drew, cold)."""
    out: dict = {}
    for part, rows in (("all", records), ("warm", [r for r in records if r.get("drawn_before")]),
                       ("cold", [r for r in records if not r.get("drawn_before")])):
        ms = [r["ms"] for r in rows]
        out[part] = {"n": len(ms), "median_ms": statistics.median(ms) if ms else None,
                     "p95_ms": p95(ms) if ms else None, "max_ms": max(ms) if ms else None}
    return out


def bench(site: Path, inputs: int, mode: str = "drag") -> dict:
    from playwright.sync_api import sync_playwright

    result = {"mode": mode, "pages": {}, "controls": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(),
                                    args=[f for f in CHROMIUM_FLAGS if f != "--headless"])
        for name in PAGES:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            drive.block_network(page)
            result["pages"][name] = drive.open_page(page, site / f"{name}.html")["first_ms"]
            for c in drive.controls(page):
                drive.wait_idle(page)
                records = [drive.move_timed(page, c["section"], c["name"], k)
                           for k in targets(c["index"], c["n"], inputs, mode)]
                result["controls"].append({"control": f"{c['section']}:{c['name']}", **summary(records),
                                           "drawn": sorted({v for r in records for v in r.get("drawn", [])})})
            page.close()
        browser.close()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site", type=Path)
    ap.add_argument("--inputs", type=int, default=20)
    ap.add_argument("--mode", choices=["drag", "first"], default="drag")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        site = args.site or Path(tmp)
        if args.site is None or not (site / "index.html").exists():
            build_site(site)
        result = bench(site, args.inputs, args.mode)
    print("| page | first figure (ms after navigation) |\n|---|---|")
    for name, ms in result["pages"].items():
        print(f"| {name} | {ms:.0f} |")
    print(f"\nmode {args.mode}; warm: the input found its plots drawn before (only shown), cold: it drew one\n")
    print("| control | median ms | p95 ms | warm n | warm median | warm p95 | cold n | cold median | cold p95 | "
          "cold max | views drawn cold |\n|---|---|---|---|---|---|---|---|---|---|---|")
    f = lambda v: "–" if v is None else f"{v:.1f}"  # noqa: E731
    for row in result["controls"]:
        a, w, c = row["all"], row["warm"], row["cold"]
        print(f"| {row['control']} | {f(a['median_ms'])} | {f(a['p95_ms'])} | {w['n']} | {f(w['median_ms'])} | "
              f"{f(w['p95_ms'])} | {c['n']} | {f(c['median_ms'])} | {f(c['p95_ms'])} | {f(c['max_ms'])} | "
              f"{', '.join(row['drawn'])} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
