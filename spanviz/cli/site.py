"""``spanviz site OUT``: the notebooks as static pages that open from disk, offline
(:func:`spanviz.site.build_site`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tyro

from spanviz.site import build_site


@dataclass(frozen=True)
class SiteCommand:
    """Build the notebooks as a folder of static pages (open OUT/index.html in a browser: no Python, no network)."""

    out: tyro.conf.Positional[Path]
    """the folder to write (created; pages of the same names replaced)."""
    bundle: Path | None = None
    """a runs archive to replay from (default: the shipped workshop bundle)."""
    notebooks: Path | None = None
    """the folder of notebooks (default: the repository's notebooks/)."""
    verbose: bool = False
    """log at INFO level."""


def cmd_site(cmd: SiteCommand) -> int:
    """Build the site and print its pages and size; returns 0.

    Raises:
        ValueError: no notebooks in ``--notebooks``.
    """
    result = build_site(cmd.out, bundle=cmd.bundle, notebooks=cmd.notebooks)
    n = sum(len(v) for v in result["explorables"].values())
    print(f"{len(result['pages'])} pages, {n} explorables, {result['bytes'] / 1e6:.1f} MB in {cmd.out}: "
          f"open {Path(cmd.out) / 'index.html'}")
    return 0
