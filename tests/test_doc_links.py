"""Every link a reader can click in the README, docs/ and the notebooks' text lands somewhere: a relative link names
a file or folder of the repository, and a ``#fragment`` into a Markdown file names one of its headings (GitHub's
anchor: the heading's text, lower case, punctuation dropped, spaces as hyphens). Links to the web are not followed
(no internet here). Jinja templates (docs/templates) are fragments of these files and checked through them."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import nbformat
import pytest
from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "docs" / "results" / "README.md"]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
MD = MarkdownIt("commonmark").enable("table")


def github_anchor(text: str) -> str:
    """GitHub's id for a heading of rendered text ``text``."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def _inline_text(token) -> str:
    return "".join(child.content for child in token.children or [] if child.type in ("text", "code_inline"))


def headings(markdown: str) -> set[str]:
    """The anchors of a Markdown text's headings (a repeated heading gets -1, -2, ... as on GitHub)."""
    tokens, seen = MD.parse(markdown), {}
    anchors = set()
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            base = github_anchor(_inline_text(tokens[i + 1]))
            n = seen.get(base, 0)
            seen[base] = n + 1
            anchors.add(base if n == 0 else f"{base}-{n}")
    return anchors


def links(markdown: str) -> list[str]:
    """Every link target and image source of a Markdown text."""
    found = []
    for token in MD.parse(markdown):
        for child in token.children or []:
            if child.type == "link_open":
                found.append(child.attrs["href"])
            elif child.type == "image":
                found.append(child.attrs["src"])
    return found


def sources() -> list[tuple[str, Path, str]]:
    """(name, folder the links are relative to, Markdown text) of each document and notebook."""
    out = [(str(p.relative_to(REPO)), p.parent, p.read_text(encoding="utf-8")) for p in DOCS]
    for nb_path in NOTEBOOKS:
        nb = nbformat.read(nb_path, as_version=4)
        text = "\n\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")
        out.append((str(nb_path.relative_to(REPO)), nb_path.parent, text))
    return out


def broken_links(name: str, folder: Path, markdown: str) -> list[str]:
    broken = []
    for target in links(markdown):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...: the web, not followed here
            continue
        path_part, _, fragment = target.partition("#")
        if not path_part:  # into this text itself (only Markdown files have GitHub's anchors)
            if name.endswith(".md") and fragment not in headings(markdown):
                broken.append(f"{target} (no heading with the anchor #{fragment})")
            continue
        path = (folder / unquote(path_part)).resolve()
        if not path.exists():
            broken.append(f"{target} (no such file)")
        elif REPO not in path.parents and path != REPO:
            broken.append(f"{target} (outside the repository)")
        elif fragment and path.suffix == ".md" and fragment not in headings(path.read_text(encoding="utf-8")):
            broken.append(f"{target} (no heading with the anchor #{fragment})")
    return broken


@pytest.mark.parametrize("name, folder, markdown", sources(), ids=[s[0] for s in sources()])
def test_every_relative_link_lands_on_a_file_and_heading(name, folder, markdown):
    assert broken_links(name, folder, markdown) == []


def test_the_parser_reads_the_readmes_links():
    found = links((REPO / "README.md").read_text(encoding="utf-8"))
    assert "#determinism-on-cpu" in found and "docs/gpu.md" in found and len(found) >= 10


def test_the_check_finds_a_missing_file_and_a_missing_heading():
    text = "# Top\n\n## CPU and GPU\n\n[a](#cpu-and-gpu) [b](#determinism-on-cpu) [c](nope.md) [d](README.md#spanviz)"
    assert headings(text) == {"top", "cpu-and-gpu"}
    assert broken_links("README.md", REPO, text) == ["#determinism-on-cpu (no heading with the anchor "
                                                     "#determinism-on-cpu)", "nope.md (no such file)"]


@pytest.mark.parametrize("heading, anchor", [
    ("Sweeps: a laptop, a multi-GPU box, a cluster", "sweeps-a-laptop-a-multi-gpu-box-a-cluster"),
    ("Workshop recipe: precompute on a GPU, replay on Binder", "workshop-recipe-precompute-on-a-gpu-replay-on-binder"),
    ("The `spans` probe", "the-spans-probe"), ("α and order", "α-and-order")])
def test_anchors_follow_github(heading, anchor):
    assert github_anchor(heading) == anchor
