"""Colour-blind and grayscale readers tell every series of every figure apart (issue 38, item 6).

Each figure of :mod:`spanviz.plots` is built from representative data, and the colours it draws are read from the
figure object (line, marker, fill or bar colour, with its opacity over white). For every two series of one plot
(same axes, each with a legend entry) the test asks: do they differ in a second cue — the dash, the marker symbol
(when markers are drawn) or the fill pattern? If not, their colours must stay apart

* under deuteranopia: the simulation of Machado, Oliveira and Fernandes (2009), "A Physiologically-based Model for
  Simulation of Color Vision Deficiency", IEEE TVCG 15(6):1291–1298, severity 1.0 — their 3×3 matrix applied to
  *linear* RGB (sRGB decoded first, clipped to [0, 1] after); ΔE (CIE76, in CIELAB, D65 white) at least
  :data:`MIN_DELTA_E`;
* in grayscale: CIE lightness L* of the relative luminance Y (what a grayscale print keeps); |ΔL*| at least
  :data:`MIN_DELTA_L`.

The threshold: ΔE76 ≈ 2.3 is a just-noticeable difference for large patches side by side (Sharma, *Digital Color
Imaging Handbook*, 2003); the colour of a thin line or a small marker is judged far less finely — Szafir (2018,
"Modeling Color Difference for Visualization Design", IEEE TVCG 24(1)) measured several times larger differences
for small marks — and series are matched to a legend, not compared side by side. We require 10 (about four JNDs)
in both tests: our choice, not a standard, a margin that the old palette's pairs fail (d3's red and green 7 under
deuteranopia; red and brown 4.5 in grayscale) and Okabe–Ito's pass under deuteranopia.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import plotly.graph_objects as go
import pytest

from spanviz import plots
from spanviz.experiments.growth import LABELS, VARIANTS
from spanviz.fp8.demos import BoundsVsRank
from spanviz.plots.alphas import alpha_response_figure
from spanviz.plots.fp8_training import STRATEGY_ORDER
from spanviz.plots.growth import growth_curves_figure, lr_sweep_figure
from spanviz.spans.demos import span_toy

MIN_DELTA_E = 10.0
MIN_DELTA_L = 10.0

MACHADO_DEUTERANOPIA = np.array([  # Machado et al. 2009, deuteranomaly at severity 1.0, on linear RGB
    [0.367322, 0.860646, -0.227968],
    [0.280085, 0.672501, 0.047413],
    [-0.011820, 0.042940, 0.968881],
])
SRGB_TO_XYZ = np.array([  # IEC 61966-2-1, D65
    [0.4124564, 0.3575761, 0.1804375],
    [0.2126729, 0.7151522, 0.0721750],
    [0.0193339, 0.1191920, 0.9503041],
])


# ------------------------------------------------------------------------------------------------ colour science
CSS_NAMES = {"black": "#000000", "white": "#ffffff", "gray": "#808080", "grey": "#808080", "lightgray": "#d3d3d3",
             "red": "#ff0000", "orange": "#ffa500"}
"""The few CSS colour names a figure might use (CSS Color Module Level 4 values)."""


def parse(color: str, opacity: float = 1.0) -> np.ndarray:
    """A CSS colour ("#rrggbb", "rgb(...)", "rgba(...)", a name of :data:`CSS_NAMES`) → sRGB in [0, 1], drawn over
    white."""
    color = CSS_NAMES.get(color.strip().lower(), color.strip())
    if m := re.fullmatch(r"#([0-9a-fA-F]{6})", color):
        rgb, alpha = [int(m.group(1)[i:i + 2], 16) for i in (0, 2, 4)], 1.0
    elif m := re.fullmatch(r"rgba?\(([^)]*)\)", color):
        parts = [float(p) for p in m.group(1).split(",")]
        rgb, alpha = parts[:3], parts[3] if len(parts) == 4 else 1.0
    else:
        raise AssertionError(f"colour {color!r} not parsed: use hex, rgb(a) or one of {sorted(CSS_NAMES)}")
    a = alpha * opacity
    return a * np.asarray(rgb, float) / 255 + (1 - a) * np.ones(3)


def linear(srgb: np.ndarray) -> np.ndarray:
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


def lab(lin: np.ndarray) -> np.ndarray:
    """Linear RGB → CIELAB (D65)."""
    xyz = SRGB_TO_XYZ @ lin / (SRGB_TO_XYZ @ np.ones(3))
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def deuteranopia_lab(srgb: np.ndarray) -> np.ndarray:
    return lab(np.clip(MACHADO_DEUTERANOPIA @ linear(srgb), 0, 1))


def gray_lightness(srgb: np.ndarray) -> float:
    return float(lab(linear(srgb))[0])


def apart(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(ΔE76 under deuteranopia, |ΔL*| in grayscale) of two drawn sRGB colours."""
    return (float(np.linalg.norm(deuteranopia_lab(a) - deuteranopia_lab(b))),
            abs(gray_lightness(a) - gray_lightness(b)))


# ------------------------------------------------------------------------------------------------ what is drawn
def series(fig: go.Figure) -> list[dict]:
    """The series a reader tells apart: each trace with a legend entry, and each legend-named shape (a band).

    Each: name, plot (the axes or scene it is drawn in), colour (sRGB over white) and cue (dash, symbol, pattern),
    a shape's cue its edge (None without one: compared by colour only, with every series of the figure)."""
    out = []
    for t in fig.data:
        if t.showlegend is False or t.visible is False or t.type in ("heatmap",):
            continue
        plot = (t.scene or "scene") if t.type in ("scatter3d", "mesh3d") else f"{t.xaxis or 'x'}{t.yaxis or 'y'}"
        opacity = 1.0 if t.opacity is None else t.opacity
        if t.type == "mesh3d":
            out.append({"name": t.name, "plot": plot, "color": parse(t.color, opacity), "cue": ("surface",)})
            continue
        if t.type == "bar":
            cue = ("", "", t.marker.pattern.shape or "")
            out.append({"name": t.name, "plot": plot, "color": parse(t.marker.color, opacity), "cue": cue})
            continue
        mode = t.mode or "lines"
        lines, marks = "lines" in mode, "markers" in mode
        filled = bool(getattr(t, "stackgroup", None)) or (getattr(t, "fill", None) not in (None, "none"))
        if filled:
            color = t.fillcolor or t.line.color
        elif lines:
            color = t.line.color
        else:
            color = t.marker.color
            if isinstance(color, str) and color.replace(" ", "").endswith(",0)"):  # a ring: its outline is drawn
                color = t.marker.line.color
        assert isinstance(color, str), f"{t.name}: a colour per series expected, got {color!r}"
        pattern = getattr(getattr(t, "fillpattern", None), "shape", None) or ""
        cue = ((t.line.dash or "solid") if lines else "", (t.marker.symbol or "circle") if marks else "", pattern)
        out.append({"name": t.name, "plot": plot, "color": parse(color, opacity), "cue": cue})
    for shape in fig.layout.shapes:
        if shape.showlegend and shape.fillcolor:
            plot = f"{(shape.xref or 'x').split(' ')[0]}{(shape.yref or 'y').split(' ')[0]}"
            edged = shape.line.width is None or shape.line.width > 0  # plotly draws a 2-px edge unless told not to
            out.append({"name": shape.name, "plot": plot, "color": parse(shape.fillcolor, shape.opacity or 1.0),
                        "cue": ("band", shape.line.dash or "solid") if edged else None})
    return out


def confusions(fig: go.Figure) -> list[str]:
    """Pairs of series of one plot with the same cue whose colours are not apart (see the module docstring)."""
    found = []
    drawn = series(fig)
    for a, b in itertools.combinations(drawn, 2):
        if a["plot"] != b["plot"] and a["cue"] is not None and b["cue"] is not None:
            continue
        if a["cue"] is not None and b["cue"] is not None and a["cue"] != b["cue"]:
            continue
        de, dl = apart(a["color"], b["color"])
        if de < MIN_DELTA_E or dl < MIN_DELTA_L:
            found.append(f"{a['name']!r} vs {b['name']!r}: ΔE {de:.1f} under deuteranopia, ΔL* {dl:.1f} in grayscale")
    return found


# ----------------------------------------------------------------------------------------- representative figures
def history(seed: int, steps: int = 300, every: int = 30, layers: int = 2) -> dict:
    rng = np.random.default_rng(seed)
    s = np.arange(steps)
    train = 7 * np.exp(-s / 80) + 5 + 0.05 * rng.standard_normal(steps)
    return {"step": s.tolist(), "train_loss": train.tolist(),
            "val_loss": [float(v) if i % every == every - 1 else None for i, v in enumerate(train)],
            "logits/max_per_layer": [list(5 + np.arange(layers) + 0.02 * i * (1 + seed) + rng.random(layers))
                                     if i % 10 == 0 else None for i in range(steps)]}


def figures() -> dict[str, go.Figure]:
    steps = np.arange(0, 300, 10)
    n = len(steps)
    rng = np.random.default_rng(1)
    bounds = BoundsVsRank(d_model=64, d_head=16, n_tokens=64).curves(1e-3, 0, 8)
    observed = 10 + np.cumsum(rng.random(n))
    return {
        "loss curves": plots.loss_curves_figure(
            {"standard": [history(0), history(1)], "kv8 [1 0 0 0]": [history(2), history(3)], "qk4": history(4)},
            ("train_loss", "val_loss")),
        "relative change": plots.relative_change_figure(
            steps, {"kv8 [1 0 0 0]": rng.normal(0, 1, n), "qk4 [1 1 0 0]": rng.normal(0, 1, n)}, rng.random(n)),
        "max logit": plots.max_logit_figure({"MHSA": history(0), "LS (3 local, p=16)": history(1)}),
        "energy by order": plots.energy_by_order_figure(
            steps, {f"order {k}": np.full(n, 0.25) for k in range(4)}),
        "principal angles": plots.subspace_angles_figure(
            {pair: np.sort(rng.random(8)) * np.pi / 2 for pair in ("Q–K", "Q–V", "K–V")}),
        "T = 3 toy": plots.span_toy_figure(span_toy(seed=0), (1.0, 0.0)),
        "bounds vs rank": plots.bound_vs_rank_figure(**bounds),
        "FP8 training": plots.fp8_training_figure(
            steps, observed, {"worst case": observed * 9, "rank-agnostic": observed * 3, "rank-aware": observed * 2},
            {s: rng.integers(0, 5, n) for s in STRATEGY_ORDER},
            {s: rng.integers(0, 5, n) for s in STRATEGY_ORDER}, {s: rng.integers(0, 5, n) for s in STRATEGY_ORDER},
            spike=(80, 5, 30.0), max_step=300),
        "LR sweep (growth lab)": lr_sweep_figure(lab_runs(), labels=LABELS),
        "max logit at one LR (growth lab)": growth_curves_figure(lab_runs(), 0.1, labels=LABELS),
        "α response": alpha_response_figure(*alpha_rows()),
        "logit gap (02)": plots.logit_gap_figure(
            np.arange(64), {"global, ε=0.1": np.log1p(np.arange(64.0)), "global, ε=0.01": np.log1p(np.arange(64.0)) + 2,
                            "local head": np.zeros(64)}, p=32),
        "toy band fits (02)": plots.toy_band_figure(
            {head: {"step": np.arange(0, 600, 5), "max_logit": rng.random(120) * 10, "final_kl": 0.01}
             for head in ("global", "local")}, n=256, r=8, p=16),
    }


def lab_runs() -> list[dict]:
    rng = np.random.default_rng(2)
    return [{"variant": v, "lr": lr, "seed": seed, "status": "finished", "final_val_loss": 5.8 + rng.random() / 10,
             "peak_max_logit": 10 * (1 + k) * lr * 100 * (1 + rng.random()), "probe_step": list(range(0, 150, 10)),
             "max_logit": list(np.cumsum(rng.random(15)) * (1 + k))}
            for k, v in enumerate(VARIANTS) for lr in (0.01, 0.1) for seed in (0, 1)]  # fmt: skip


def alpha_rows() -> tuple[list[dict], dict[int, float]]:
    def row(variant, order, alpha, change):
        return {"variant": variant, "order": order, "alpha": alpha, "rel_change_pct": change, "verdict": "within noise",
                "rel_ci_low_pct": None if change is None else change - 0.5,
                "rel_ci_high_pct": None if change is None else change + 0.5}

    rows = [row("standard", None, 1.0, None), row("[1000]", None, None, -0.3), row("[0000]", None, None, 0.2)]
    rows += [row(f"α{o}={a:g}", o, a, 0.1 * o - a / 10) for o in range(4) for a in (0.0, 2.0)]
    return rows, {0: 0.1, 1: 0.2, 2: 0.35, 3: 0.35}


FIGURES = figures()


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_every_two_series_of_a_plot_stay_apart_for_colour_blind_and_grayscale_readers(name: str) -> None:
    fig = FIGURES[name]
    assert len(series(fig)) >= 2, f"{name}: fewer than two series read from the figure"
    assert confusions(fig) == [], name


def test_the_check_catches_the_old_palettes_confusions() -> None:
    old = go.Figure([go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="g⊥", line={"color": "#d62728"}),
                     go.Scatter(x=[0, 1], y=[1, 0], mode="lines", name="1·g∥ + 0·g⊥", line={"color": "#2ca02c"}),
                     go.Scatter(x=[0, 1], y=[1, 1], mode="lines", name="dynamic", line={"color": "#8c564b"})])
    found = confusions(old)
    assert len(found) == 2 and "'g⊥' vs '1·g∥ + 0·g⊥'" in found[0] and "'g⊥' vs 'dynamic'" in found[1], found
    old.data[1].line.dash = "dash"  # a second cue makes a pair readable whatever the colours
    assert len(confusions(old)) == 1
    de, dl = apart(parse("#d62728"), parse("#d62728", 0.25))
    assert de > MIN_DELTA_E and dl > MIN_DELTA_L  # a pale band of a colour is apart from its line
