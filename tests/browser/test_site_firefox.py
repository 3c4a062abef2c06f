"""The static site in Firefox (Debian's ``firefox-esr``, driven over WebDriver BiDi by puppeteer-core from
``tests/browser/firefox``; nothing is downloaded): every page opened from file:// with the network blocked draws
every figure, each control changes its own view, and no console error — what test_site_browser.py checks in
Chromium, read with the same page-side snippets (spanviz.site.drive). Skipped where Firefox, Node.js or the
driver (``npm ci --prefix tests/browser/firefox``, which scripts/test.sh runs) is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from spanviz.site import drive

HERE = Path(__file__).resolve().parent / "firefox"
PAGES = ["index", "00_tour", "01_spans_and_violations", "02_local_global_heads", "03_fp8_logit_bounds", "comparisons"]


def firefox_path() -> str | None:
    """``SPANVIZ_FIREFOX``, else ``firefox-esr`` or ``firefox`` on PATH."""
    return os.environ.get("SPANVIZ_FIREFOX") or shutil.which("firefox-esr") or shutil.which("firefox")


@pytest.mark.timeout(900)
def test_site_in_firefox(site: Path, tmp_path: Path) -> None:
    firefox, node = firefox_path(), shutil.which("node")
    if firefox is None or node is None:
        pytest.skip("Firefox or Node.js not found (Debian: apt-get install firefox-esr nodejs)")
    if not (HERE / "node_modules" / "puppeteer-core").is_dir():
        pytest.skip("the Firefox driver is not installed: "
                    "PUPPETEER_SKIP_DOWNLOAD=1 npm ci --prefix tests/browser/firefox")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"firefox": firefox, "site": str(site.resolve()), "pages": PAGES, "js": {
        "ready": drive.READY_JS, "drawn": drive.DRAWN_JS, "controls": drive.CONTROLS_JS,
        "signature": drive.SIGNATURE_JS, "move": drive.MOVE_JS}}))
    run = subprocess.run([node, str(HERE / "site.mjs"), str(plan)], capture_output=True, text=True, timeout=840,
                         env={**os.environ, "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert sorted(result) == sorted(PAGES)
    for name, page in result.items():
        assert not page["errors"], f"{name}: errors in Firefox: {page['errors'][:3]}"
        assert not page["blocked"], f"{name}: requests to the network: {page['blocked'][:3]}"
        if name == "index":
            continue
        assert page["figures"], f"{name}: no figure drawn in Firefox"
        for fig in page["figures"]:
            assert fig["traces"] > 0 and fig["points"] > 0, f"{name}: {fig} drew nothing in Firefox"
        assert page["moved"], f"{name}: no control found"
        unchanged = [m["control"] for m in page["moved"] if not m["changed"]]
        assert not unchanged, f"{name}: in Firefox these controls changed nothing: {unchanged}"
        print(f"{name}: first figure {page['first_ms']:.0f} ms after navigation in Firefox, "
              f"{len(page['figures'])} figures, {len(page['moved'])} controls moved")
