"""The statistics blocks of notebooks 01–03 as JupyterLab's Markdown renders them: a one-line takeaway a student reads
at a glance, and the statistics in a collapsed ``<details>`` one click away (scripts/render_docs.py writes them;
tests/test_render_docs.py checks their numbers and how CommonMark — GitHub's Markdown — parses them).

JupyterLab renders Markdown with marked and then sanitizes the HTML: the ``details`` element must survive both, with
the Markdown inside it RENDERED (bold, code), not shown as ``**`` and backticks.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from labpage import ACTIVE, Lab

RENDERED = f"{ACTIVE} .jp-RenderedMarkdown details"
BLOCKS = {"01_spans_and_violations.ipynb": 2, "02_local_global_heads.ipynb": 3, "03_fp8_logit_bounds.ipynb": 1}

# Each RENDERED <details> of the notebook in front: whether it is open, its summary, the paragraph before it, what of
# its inside is on screen, and whether Markdown inside it was RENDERED.
DETAILS_JS = """(els) => els.map((d) => {
  const inside = [...d.children].filter((c) => c.tagName !== 'SUMMARY');
  let lead = d.previousElementSibling;
  return {open: d.open, summary: d.querySelector('summary')?.innerText ?? null, lead: lead ? lead.innerText : null,
          shown: inside.map((c) => c.innerText).join(' ').trim(), strong: d.querySelectorAll('strong').length,
          raw: d.innerText.includes('**')};
})"""


@pytest.mark.timeout(600)
def test_statistics_blocks_show_a_takeaway_and_open_their_numbers_on_a_click(lab: dict, browser,
                                                                             screenshot_dir: Path) -> None:
    page = Lab(browser, lab)
    try:
        for notebook, count in BLOCKS.items():
            page.open(notebook)
            page.wait_until(f"the details of {notebook}", lambda n=count: page.page.locator(RENDERED).count() >= n, 60)
            blocks = page.page.eval_on_selector_all(RENDERED, DETAILS_JS)
            assert len(blocks) == count, blocks
            for block in blocks:
                assert block["lead"].startswith("In short: ") and not block["open"], block
                assert block["summary"].startswith("The numbers behind this") and block["shown"] == "", block
            first = page.page.locator(RENDERED).first
            first.scroll_into_view_if_needed()
            page.page.screenshot(path=str(screenshot_dir / f"takeaway-{Path(notebook).stem}.png"))
            first.locator("summary").click()
            opened = page.wait_until("the numbers shown", lambda: (b := page.page.eval_on_selector_all(
                RENDERED, DETAILS_JS)[0])["open"] and b["shown"] and b, 30)
            assert "p = " in opened["shown"] and opened["strong"] >= 1 and not opened["raw"], opened
            page.page.screenshot(path=str(screenshot_dir / f"takeaway-{Path(notebook).stem}-open.png"))
        assert not page.errors, "JavaScript errors:\n" + "\n".join(page.errors)
    finally:
        page.close()
