"""Measured numbers typed in prose, and the sources they cite.

Every number with a unit of time, size, share or ratio in README.md, docs/*.md and the notebooks' markdown is
either rendered from docs/results/ (a generated block), labelled "not recomputable" where it stands, or listed in
docs/prose_numbers.txt with its reason — a dated measurement, a definition, a paper's figure, a setting, a number a
test checks, or a field of a shipped file that ``scripts/render_docs.py --check`` compares with it
(tests/test_render_docs.py plants a changed field). A new number typed into prose fails here.

The LS-attention sources (A, S, F, R) are defined, with links where a reader can check them, in the legend of
docs/ls_attention.md ("### Sources"); every label the docs and notebooks use is one of them.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest
from test_render_docs import render_docs  # the script, loaded once

ROOT = Path(__file__).resolve().parents[1]


def untracked(root: Path) -> list[tuple[str, str]]:
    allowed = render_docs.allowed_numbers(root)
    return sorted({(rel, literal) for rel, literal, _ in render_docs.prose_numbers(root)
                   if (rel, literal) not in allowed})


def copy_texts(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("screenshots", "results"))
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    return tmp_path


def test_every_measured_number_in_prose_is_generated_labelled_or_listed_with_its_reason():
    missing = untracked(ROOT)
    assert not missing, (
        "numbers typed in prose that are neither generated, labelled 'not recomputable' where they stand, nor "
        f"listed in {render_docs.PROSE_NUMBERS} with a reason: {missing}")


def test_every_listed_number_is_still_in_the_prose_and_has_a_reason():
    found = {(rel, literal) for rel, literal, _ in render_docs.prose_numbers(ROOT)}
    allowed = render_docs.allowed_numbers(ROOT)  # raises for a line without one of the reasons
    stale = sorted(set(allowed) - found)
    assert not stale, f"{render_docs.PROSE_NUMBERS} lists numbers the prose no longer types: {stale}"
    for (rel, literal), reason in allowed.items():
        if reason.startswith("not recomputable"):
            assert re.search(r"20\d\d-\d\d-\d\d", reason), (rel, literal, reason)  # when it was measured
        if reason.startswith("checked by"):
            assert (ROOT / reason.split()[2]).is_file(), (rel, literal, reason)


@pytest.mark.parametrize(("where", "planted"), [
    ("docs/spans.md", "A kv8 step took 3.2 s on the laptop."),
    ("README.md", "The tour trains 1.8× faster with two threads."),
    ("notebook", "Each update takes about 41 ms here."),
])
def test_a_number_typed_into_prose_fails_and_a_label_or_a_listed_reason_passes(tmp_path, where, planted):
    root = copy_texts(tmp_path)
    literal = render_docs.MEASURED.search(planted)[0]
    if where == "notebook":
        path = root / "notebooks" / "00_tour.ipynb"
        notebook = nbformat.read(path, as_version=4)
        cell = next(c for c in notebook.cells if c.cell_type == "markdown")
        original, rel = cell.source, "notebooks/00_tour.ipynb"

        def write(extra: str) -> None:
            cell.source = original + "\n\n" + extra
            path.write_text(nbformat.writes(notebook) + "\n")
    else:
        path, rel = root / where, where
        original = path.read_text()

        def write(extra: str) -> None:
            path.write_text(original + "\n\n" + extra + "\n")

    write(planted)
    assert untracked(root) == [(rel, literal)]
    write(planted.rstrip(".") + " (not recomputable: measured 2026-12-02 on a laptop, not kept).")
    assert untracked(root) == []
    write(planted)
    listing = root / render_docs.PROSE_NUMBERS
    listing.write_text(listing.read_text() + f"{rel} | {literal} | a setting: planted by a test\n")
    assert untracked(root) == []
    listing.write_text(listing.read_text().replace("a setting: planted by a test", "because I say so"))
    with pytest.raises(render_docs.RenderError, match="with a reason starting with one of"):
        untracked(root)


def test_numbers_inside_generated_blocks_and_code_are_not_prose(tmp_path):
    root = copy_texts(tmp_path)
    doc = root / "docs" / "spans.md"
    doc.write_text(doc.read_text() + "\nRun `spanviz bench --min-time 0.5 s` (code).\n\n```\nstep 12.5 ms\n```\n")
    assert untracked(root) == []
    assert render_docs.MEASURED.search("6 heads × 32") is None and render_docs.MEASURED.search("128×128") is None


# =========================================================================================== the sources' labels
LEGEND = ROOT / "docs" / "ls_attention.md"
LABEL = re.compile(r"\[([ASFR])\](?!\()|\| ((?:[ASFR](?: \([^)|]*\))?, )*[ASFR](?: \([^)|]*\))?) \|")
"""A source label as the LS docs and notebooks write it: "[A]" in a sentence, or a claims table's source cell
("| A, S |", "| A (36 %, v1 abstract), R (44 %) |")."""


def legend() -> dict[str, str]:
    section = LEGEND.read_text().split("### Sources", 1)[1].split("\n\n**", 1)[0]
    return {m[1]: m[2] for m in re.finditer(r"^\| \*\*([A-Z])\*\* \| .*? \| (.*) \|$", section, re.MULTILINE)}


def used_labels() -> dict[str, set[str]]:
    used: dict[str, set[str]] = {}
    texts = [(p.relative_to(ROOT).as_posix(), p.read_text()) for p in sorted((ROOT / "docs").glob("*.md"))]
    texts += [(p.relative_to(ROOT).as_posix(), c.source) for p in sorted((ROOT / "notebooks").glob("*.ipynb"))
              for c in nbformat.read(p, as_version=4).cells if c.cell_type == "markdown"]
    for rel, text in texts:
        for m in LABEL.finditer(text):
            for label in re.findall(r"\b[ASFR]\b", m[1] or re.sub(r"\([^)]*\)", "", m[2])):
                used.setdefault(label, set()).add(rel)
    return used


def test_every_source_label_used_in_the_docs_and_notebooks_is_defined_in_the_legend():
    defined, used = legend(), used_labels()
    assert set(defined) == {"A", "S", "F", "R"}, defined
    assert used and set(used) <= set(defined), {k: v for k, v in used.items() if k not in defined}
    assert {"A", "R"} <= set(used) and "notebooks/02_local_global_heads.ipynb" in used["A"]


def test_each_legend_entry_links_its_source_or_says_why_not():
    for label, where in legend().items():
        links = re.findall(r"\]\((https://[^)]+)\)", where)
        assert links or "not linked" in where or "not in our record" in where, (label, where)
        assert all(re.fullmatch(r"https://arxiv\.org/abs/2505\.15548v\d", u) for u in links), links
    assert "https://arxiv.org/abs/2505.15548v1" in legend()["A"]  # the version that states 36 %, 2/5, 1/20


def test_where_the_sources_disagree_both_are_given():
    text = LEGEND.read_text()
    assert "≈ 2/5" in text and "~38 vs ~112, make ≈ 1/3" in text and "44 % (R)" in text
