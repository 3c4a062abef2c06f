"""Benchmark of the static site in Chromium: first figure per page, and per control the p95 of input → drawn.

    python scripts/bench_site.py [--site DIR] [--inputs 20] [--json OUT]

Builds the site into a temporary folder unless ``--site`` names a built one; opens each page from file:// with the
network blocked (as tests/browser/test_site_browser.py does), then moves every control ``--inputs`` times back and
forth between two neighbouring values, as a person dragging it would, and reads the page's own timings
(``window.__sv``: from the input event to the redraw painted). Prints a Markdown table; measures, asserts nothing.
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


def bench(site: Path, inputs: int) -> dict:
    from playwright.sync_api import sync_playwright

    result = {"pages": {}, "controls": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(),
                                    args=[f for f in CHROMIUM_FLAGS if f != "--headless"])
        for name in PAGES:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            drive.block_network(page)
            result["pages"][name] = drive.open_page(page, site / f"{name}.html")["first_ms"]
            for c in drive.controls(page):
                a = c["index"]
                b = a + 1 if a + 1 < c["n"] else a - 1
                times = [drive.move(page, c["section"], c["name"], b if i % 2 == 0 else a) for i in range(inputs + 1)]
                times = times[1:]  # the first input of a control parses its states: reported apart
                result["controls"].append({"control": f"{c['section']}:{c['name']}", "first_ms": None,
                                           "median_ms": statistics.median(times), "p95_ms": p95(times),
                                           "max_ms": max(times), "n": len(times)})
            page.close()
        browser.close()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site", type=Path)
    ap.add_argument("--inputs", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        site = args.site or Path(tmp)
        if args.site is None or not (site / "index.html").exists():
            build_site(site)
        result = bench(site, args.inputs)
    print("| page | first figure (ms after navigation) |\n|---|---|")
    for name, ms in result["pages"].items():
        print(f"| {name} | {ms:.0f} |")
    print("\n| control | median ms | p95 ms | max ms | inputs |\n|---|---|---|---|---|")
    for row in result["controls"]:
        print(f"| {row['control']} | {row['median_ms']:.1f} | {row['p95_ms']:.1f} | {row['max_ms']:.1f} | {row['n']} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
