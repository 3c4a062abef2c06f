"""Which plotly.js a page evaluates for a figure: the smallest build that draws every trace type it holds.

plotly.py bundles the whole of plotly.js (``plotly.min.js``, ≈ 4.8 MB, 47 trace types). spanviz draws five of them
(scatter, bar, heatmap; scatter3d and mesh3d in the 3-D toy), and compiling 4.8 MB of JavaScript is most of a
page's wait for its first figure on a slow machine (≈ 2.2 s of the main thread in Chromium on 2 cores, against
≈ 1.0 s for the cartesian build). So the figure widget and the static site use the official partial builds, shipped
in ``static/vendor/`` (``scripts/vendor_plotly.py`` refreshes them from npm):

========== ========================== ======== ==========================================================
build      file                       size     trace types
========== ========================== ======== ==========================================================
cartesian  plotly-cartesian.min.js    1.5 MB   :data:`CARTESIAN` (scatter, bar, heatmap, box, histogram, …)
gl3d       plotly-gl3d.min.js         1.8 MB   :data:`GL3D` (scatter, scatter3d, mesh3d, surface, …)
full       plotly.py's plotly.min.js  4.8 MB   every type
========== ========================== ======== ==========================================================

A partial build is used only while its version equals the plotly.js that the installed plotly.py bundles (the
figures' JSON comes from plotly.py, and its plotly.js is the one it is written for); otherwise every figure gets the
full build, as before. A page may hold several builds at once (each figure keeps the one that drew it).
Source: spanviz (the builds: plotly.js's own dist packages, MIT licence in ``static/vendor``).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from plotly.offline import get_plotlyjs, get_plotlyjs_version

logger = logging.getLogger(__name__)

VENDOR = Path(__file__).parent / "static" / "vendor"

CARTESIAN = frozenset({"bar", "box", "contour", "heatmap", "histogram", "histogram2d", "histogram2dcontour", "image",
                       "pie", "scatter", "scatterternary", "violin"})
"""The trace types of plotly.js's cartesian build (its ``Plotly.PlotSchema``; a browser test checks them)."""
GL3D = frozenset({"cone", "isosurface", "mesh3d", "scatter", "scatter3d", "streamtube", "surface", "volume"})
"""The trace types of plotly.js's gl3d build (its ``Plotly.PlotSchema``; a browser test checks them)."""
PARTIAL = {"cartesian": CARTESIAN, "gl3d": GL3D}
"""The partial builds, smallest first: :func:`build_for` takes the first that covers a figure."""
FULL = "full"
FILES = {"cartesian": "plotly-cartesian.min.js", "gl3d": "plotly-gl3d.min.js", FULL: "plotly.min.js"}
"""The file name of each build (the site copies them under these names)."""


def trace_types(data: Sequence[Mapping[str, Any]]) -> set[str]:
    """The trace types of a figure's traces (plotly's default type, scatter, where a trace names none)."""
    return {str(trace.get("type") or "scatter") for trace in data}


@functools.cache
def vendored_version() -> str | None:
    """The plotly.js version of the shipped partial builds (from the cartesian build's header), None if missing."""
    try:
        head = (VENDOR / FILES["cartesian"]).read_text(encoding="utf-8")[:300]
    except OSError:
        return None
    match = re.search(r"plotly\.js \([a-z0-9]+ - minified\) v(\S+)", head)
    return match.group(1) if match else None


@functools.cache
def partial_builds_usable() -> bool:
    """True when the shipped partial builds are the version of plotly.py's plotly.js (and are there)."""
    vendored, bundled = vendored_version(), get_plotlyjs_version()
    if vendored != bundled:
        logger.info("spanviz: plotly.js partial builds are v%s, plotly.py's is v%s: the full build is used",
                    vendored, bundled)
    return vendored == bundled and all((VENDOR / FILES[b]).is_file() for b in PARTIAL)


def build_for(types: Iterable[str]) -> str:
    """The smallest build that draws every trace type in ``types``: "cartesian", "gl3d" or "full" (also when the
    partial builds cannot be used, :func:`partial_builds_usable`). An empty figure gets the cartesian build."""
    wanted = set(types)
    if partial_builds_usable():
        for build, covered in PARTIAL.items():
            if wanted <= covered:
                return build
    return FULL


def version_key(build: str) -> str:
    """The page's cache key of a build: plotly.js's version, with ``+build`` for a partial one ("4.1.1+cartesian")."""
    if build != FULL and build not in PARTIAL:
        raise ValueError(f"build={build!r} is not a plotly.js build; allowed: {', '.join(FILES)}")
    version = get_plotlyjs_version()
    return version if build == FULL else f"{version}+{build}"


def build_of_key(key: str) -> str:
    """The build a cache key names (:func:`version_key`); "full" for a key with no known ``+build``."""
    build = key.partition("+")[2]
    return build if build in PARTIAL else FULL


def path(build: str) -> Path:
    """The file of a build (a partial one from ``static/vendor``, the full one from plotly.py's package data)."""
    if build == FULL:
        import plotly

        return Path(plotly.__file__).parent / "package_data" / FILES[FULL]
    if build not in PARTIAL:
        raise ValueError(f"build={build!r} is not a plotly.js build; allowed: {', '.join(FILES)}")
    return VENDOR / FILES[build]


@functools.cache
def source(build: str) -> bytes:
    """The build's JavaScript (UTF-8 bytes), what a page evaluates once per build.

    Raises:
        ValueError: an unknown build. OSError: its file cannot be read.
    """
    if build == FULL:
        return get_plotlyjs().encode("utf-8")
    return path(build).read_bytes()
