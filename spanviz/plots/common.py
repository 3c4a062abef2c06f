"""Shared pieces of the figures: history contracts (:func:`series`, :func:`layer_series`), the palette and the
second cues (dashes, marker symbols, fill patterns), and the small helpers every figure file uses
(:func:`as_array`, :func:`cycle_color`, :func:`rgba`, :func:`block_mean`).

The palette is Okabe & Ito's colour-universal-design set (M. Okabe and K. Ito, "Color Universal Design (CUD): how
to make figures and presentations that are friendly to colorblind people", 2008, https://jfly.uni-koeln.de/color/;
also Wong, "Points of view: Color blindness", Nature Methods 8:441, 2011): its hues stay apart for protan and
deutan readers. Its colours do not stay apart in grayscale (vermillion, bluish green and reddish purple have about
the same lightness), so every figure gives series of one plot a second cue besides the colour — a dash, a marker
symbol or a fill pattern (tests/test_colours.py checks the drawn figures under a deuteranopia simulation and in
grayscale)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

Trace = dict[str, Any]
History = Mapping[str, Sequence[Any]]

OKABE_ITO = {
    "black": "#000000", "orange": "#E69F00", "sky blue": "#56B4E9", "bluish green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "reddish purple": "#CC79A7",
}
"""The eight colours of Okabe & Ito's palette (see the module docstring)."""
COLORS = tuple(OKABE_ITO[n] for n in ("blue", "vermillion", "bluish green", "reddish purple", "orange", "sky blue"))
"""Series colours in order (Okabe–Ito without black and yellow, which lines of other colours and white need)."""
BLACK, GRAY = OKABE_ITO["black"], "#888888"
ORDER_COLORS = tuple(OKABE_ITO[n] for n in ("blue", "bluish green", "orange", "vermillion"))
"""Order 0 (parallel) .. 3 (all violation)."""
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star")
"""Marker symbols of series in order: a second cue beside the colour, and curves on top of each other told apart."""
PATTERNS = ("", "/", ".", "x", "-", "|")
"""Fill patterns of bars and areas in order (plotly's ``marker.pattern.shape`` / ``fillpattern.shape``)."""
MAX_MARKERS = 12
"""A long line shows at most this many markers (plotly's ``marker.maxdisplayed``): its symbol stays visible as a
second cue without a marker at every step."""


def markers(n_points: int, **marker: Any) -> dict[str, Any]:
    """The mode and marker of a line with ``n_points`` points: a marker on every point up to :data:`MAX_MARKERS`,
    thinned to that many beyond (the symbol is a second cue, not a reading of each point: several lines with a marker
    at every step merge into one band)."""
    thin = {"maxdisplayed": MAX_MARKERS} if n_points > MAX_MARKERS else {}
    return {"mode": "lines+markers", "marker": {**marker, **thin}}


def as_array(x: Any, dtype: Any = float) -> np.ndarray:
    """``np.asarray(x, dtype)`` that also takes torch tensors (detached, moved to CPU); same shape as ``x``."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def cycle_color(i: int) -> str:
    """The i-th color of the palette (:data:`COLORS`, Okabe–Ito), cycling; any int i >= 0."""
    return COLORS[i % len(COLORS)]


def rgba(hex_color: str, alpha: float) -> str:
    """``"#rrggbb"`` and an opacity alpha in [0, 1] → ``"rgba(r,g,b,alpha)"`` (for seed bands and faded lines)."""
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def _check_history(history: History, keys: Sequence[str], what: str = "history") -> int:
    """Length of the history's columns; ValueError when a needed key is missing or lengths differ."""
    if not isinstance(history, Mapping):
        raise ValueError(f"{what} must be a mapping of equal-length lists, got {type(history).__name__}")
    for key in keys:
        if key not in history:
            raise ValueError(f"{what} has no key {key!r}; keys: {sorted(history)}")
    lengths = {len(history[k]) for k in keys}
    if len(lengths) > 1:
        raise ValueError(f"{what} columns {list(keys)} have different lengths {sorted(lengths)}")
    return lengths.pop() if lengths else 0


def block_mean(m: np.ndarray, max_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """(T, T) → at most (max_cells, max_cells): the mean of each f×f block (f = ceil(T / max_cells)), and the
    first position of each block (n,) for the axis. A screen cannot show more cells than that anyway; NaN
    padding of the last block is ignored by the mean."""
    T = m.shape[-1]
    f = max(1, math.ceil(T / max_cells))
    if f == 1:
        return m, np.arange(T)
    n = math.ceil(T / f)
    padded = np.full((n * f, n * f), np.nan)
    padded[:T, :T] = m
    return np.nanmean(padded.reshape(n, f, n, f), axis=(1, 3)), np.arange(n) * f


def series(history: History, key: str, step_key: str = "step") -> tuple[np.ndarray, np.ndarray]:
    """The measured points of one scalar metric.

    Args:
        history: mapping of equal-length lists; ``None`` (or a missing value) marks "not measured".
        key: metric name, e.g. ``"val_loss"``.
    Returns:
        (steps (N,), values (N,)) as float arrays, only the steps where ``key`` was measured.
    Raises:
        ValueError: when ``key`` or ``step_key`` is missing or the columns differ in length.
    """
    _check_history(history, (step_key, key))
    pairs = [(s, v) for s, v in zip(history[step_key], history[key]) if v is not None]
    if not pairs:
        return np.zeros(0), np.zeros(0)
    steps, values = zip(*pairs)
    return as_array(steps), as_array(values)


def layer_series(history: History, key: str, step_key: str = "step") -> tuple[np.ndarray, np.ndarray]:
    """A per-layer metric as a matrix.

    Accepts either one key whose entries are sequences of length L (e.g. ``logits/max_per_layer`` holding
    ``[max_layer0, max_layer1, ...]`` per step) or L scalar keys ``f"{key}/{i}"`` (i = 0..L-1).

    Returns:
        (steps (N,), values (N, L)) over the steps where the metric was measured (``None`` rows dropped).
    Raises:
        ValueError: when neither form is present or rows differ in length.
    """
    if key in history:
        steps, rows = [], []
        _check_history(history, (step_key, key))
        for s, v in zip(history[step_key], history[key]):
            if v is None:
                continue
            steps.append(s)
            rows.append(np.atleast_1d(as_array(v)))
        if not rows:
            return np.zeros(0), np.zeros((0, 0))
        if len({r.shape for r in rows}) > 1:
            raise ValueError(f"history[{key!r}] rows have different lengths")
        return as_array(steps), np.stack(rows)
    n_layer = 0
    while f"{key}/{n_layer}" in history:
        n_layer += 1
    if n_layer == 0:
        raise ValueError(f"history has neither {key!r} nor {key + '/0'!r}; keys: {sorted(history)}")
    columns = [f"{key}/{i}" for i in range(n_layer)]
    _check_history(history, (step_key, *columns))
    keep = [i for i in range(len(history[step_key])) if all(history[c][i] is not None for c in columns)]
    steps = as_array([history[step_key][i] for i in keep])
    values = np.array([[history[c][i] for c in columns] for i in keep], dtype=float).reshape(len(keep), n_layer)
    return steps, values


def keys_under(history: Mapping[str, Any], prefix: str) -> list[str]:
    """Names below ``prefix/`` in a history, e.g. ``keys_under(h, "fp8/overflow") -> ["delayed", ...]``."""
    p = prefix.rstrip("/") + "/"
    return sorted(k[len(p) :] for k in history if k.startswith(p))
