"""A notebook's Markdown cell as HTML, at build time: markdown-it-py for the text, latex2mathml for ``$…$`` and
``$$…$$`` (MathML: every browser draws it, nothing is fetched when the page is viewed). A formula latex2mathml
cannot read stays TeX, in ``<code>``. Source: spanviz."""

from __future__ import annotations

import html
import re

from markdown_it import MarkdownIt

_CODE = re.compile(r"(`+)(.+?)\1", re.S)
_DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
_INLINE = re.compile(r"(?<![\\$\w])\$(?![\s$])([^$\n]+?)(?<![\s\\])\$(?![\w$])")
_MD = MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")


def tex_to_html(tex: str, display: bool = False) -> str:
    """One formula as MathML (``display``: a block), or its TeX in ``<code>`` when it cannot be converted."""
    try:
        from latex2mathml.converter import convert

        return convert(tex.strip(), display="block" if display else "inline")
    except Exception:  # noqa: BLE001 - any macro latex2mathml does not know: show the TeX itself
        return f"<code class='tex'>{html.escape(tex)}</code>"


def render_markdown(text: str) -> str:
    """HTML of a Markdown cell: math outside code spans becomes MathML, the rest CommonMark with tables and raw
    HTML (the notebooks' generated-block comments pass through)."""
    formulas: list[str] = []

    def keep(display: bool):
        def sub(m: re.Match[str]) -> str:
            formulas.append(tex_to_html(m.group(1), display))
            return f"SVMATH{len(formulas) - 1}X"
        return sub

    parts, last = [], 0
    for m in _CODE.finditer(text):  # math inside `code` stays code
        parts.append(_INLINE.sub(keep(False), _DISPLAY.sub(keep(True), text[last:m.start()])))
        parts.append(m.group(0))
        last = m.end()
    parts.append(_INLINE.sub(keep(False), _DISPLAY.sub(keep(True), text[last:])))
    out = _MD.render("".join(parts))
    return re.sub(r"SVMATH(\d+)X", lambda m: formulas[int(m.group(1))], out)
