"""The explorables of the four notebooks, recorded from the notebooks' own objects (see :mod:`spanviz.site.explore`).

The panels are made by the notebooks' own cells (the parameters cell, the model cell, the panel cell; run here with
the data when it loads, else a stand-in with the vocabulary size), so the site shows the notebook's defaults; the
replays come from a results store holding the shipped bundle. Source: spanviz.
"""

from __future__ import annotations

import ast
import contextlib
import io
import itertools
import types
from collections.abc import Mapping, Sequence
from html import escape as html_escape
from typing import Any

import ipywidgets as W
import plotly.graph_objects as go

from spanviz.experiments.results import summarize
from spanviz.plots.curves import loss_curves_figure
from spanviz.site.explore import Pool, control_spec, fixed, record, widget_values
from spanviz.store.listing import sweep_records
from spanviz.widgets.alphas import COMMAND as ALPHAS_COMMAND
from spanviz.widgets.alphas import AlphaResponse, response_records
from spanviz.widgets.figure.block_scaler import page_cells, slider_values
from spanviz.widgets.figure.view import FigureView
from spanviz.widgets.figure.widget import PlotlyFigure
from spanviz.widgets.growth import COMMAND as GROWTH_COMMAND
from spanviz.widgets.growth import GrowthLab, lab_records
from spanviz.widgets.local_global import MASK_ZOOM
from spanviz.widgets.spans import pick_key

SAFE_CELLS = ("SMOKE =", "= GPTConfig(", "Panel(")
"""Code cells the builder runs (as the notebook would): the parameters, the model's configuration, the panels."""


def run_cells(sources: Sequence[str], namespace: dict[str, Any], force: bool = False) -> dict[str, Any]:
    """Run the notebook's safe code cells (:data:`SAFE_CELLS`; every one given with ``force``) in ``namespace``,
    their prints discarded; a cell that fails is skipped (the page then says what to run instead)."""
    for src in sources:
        if force or any(s in src for s in SAFE_CELLS) and "panel.train" not in src:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(Exception):
                exec(compile(src, "<notebook cell>", "exec"), namespace)  # noqa: S102 - the repository's notebook
    return namespace


FIGURE_CELL = "FigureView("
"""A code cell that shows a figure it computes itself (notebook 02's logit gap and toy fits)."""
NOT_FIGURE_CELL = ("panel", "trainers", "data", "AttentionInspector(")
"""...unless it reads what training, the data or a panel made (those are recorded from the panels)."""


def is_figure_cell(src: str) -> bool:
    """True for a code cell that draws a figure of its own computing: :data:`FIGURE_CELL` and none of
    :data:`NOT_FIGURE_CELL`."""
    return FIGURE_CELL in src and not any(w in src for w in NOT_FIGURE_CELL)


def figure_cell(pool: Pool, src: str, namespace: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The figure a figure cell (:func:`is_figure_cell`) shows, as a fixed view named ``name``: the cell run as the
    notebook runs it (its last expression is what the notebook displays: a FigureView, its widget or a go.Figure).
    None when the cell fails or shows no figure (the page then keeps its code only)."""
    tree = ast.parse(src)
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return None
    shown = ast.Assign(targets=[ast.Name("_sv_shown", ast.Store())], value=tree.body[-1].value)
    tree.body[-1] = ast.fix_missing_locations(ast.copy_location(shown, tree.body[-1]))
    namespace.pop("_sv_shown", None)
    run_cells([ast.unparse(tree)], namespace, force=True)
    out = namespace.pop("_sv_shown", None)
    if isinstance(out, PlotlyFigure):
        out = types.SimpleNamespace(data=out.data, layout=out.figure_layout)
    elif isinstance(out, go.Figure):
        out = FigureView(out, static=True)
    if not (isinstance(out, (FigureView, types.SimpleNamespace)) and out.data):
        return None
    return fixed(pool, {name: out})


SAMPLE_TEMPERATURES = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0)
"""The temperatures the page offers for the tour's samples (the notebook's slider has 40 steps of 0.05; each
setting is a recorded sample)."""


def samples_explorable(pool: Pool, samples: Any) -> dict[str, Any] | None:
    """Notebook 00's "what the model writes" (a :class:`~spanviz.widgets.sampling.SamplesView`): the texts each model
    writes from the notebook's prompt, seed and length, for every top-k and the temperatures
    :data:`SAMPLE_TEMPERATURES` (the notebook's own sampling, run here per setting). None when it has no model."""
    if not samples.models:
        return None
    c = samples.controls
    temperature = W.SelectionSlider(options=[(f"{t:g}", t) for t in SAMPLE_TEMPERATURES],
                                    value=min(SAMPLE_TEMPERATURES, key=lambda t: abs(t - c["temperature"].value)),
                                    description="temperature")
    temperature.observe(lambda change: setattr(c["temperature"], "value", change["new"]), names="value")
    c["temperature"].value = temperature.value

    def texts() -> str:
        settings = (f"<p class='sv-note'>prompt “{html_escape(c['prompt'].value)}”, {c['max_new_tokens'].value} "
                    f"new words, seed {c['seed'].value}: other prompts, lengths and seeds in the notebook</p>")
        columns = "".join(f"<div style='flex:1 1 0;min-width:0;padding:0 8px'>{w.value}</div>"
                          for w in samples.texts.values())
        return settings + f"<div style='display:flex'>{columns}</div>"

    return record(pool, {"temperature": temperature, "top_k": c["top_k"]},
                  {"samples": (texts, ["temperature", "top_k"])})


def data_stand_in(vocab_size: int) -> Any:
    """What the panel cells read of ``data`` when WikiText-2 is not at hand: its vocabulary size only."""
    return types.SimpleNamespace(vocab_size=vocab_size)


def replay(pool: Pool, panel: Any, store: Any, data_ok: bool, command: str) -> dict[str, Any]:
    """The panel's Train at its defaults, replayed from ``store`` when every run is there (nothing trains); else
    a note naming what to run. Returns an explorable of the live views, captions and status."""
    training = getattr(panel, "training", panel)
    training.store = store
    specs = panel._specs() if hasattr(panel, "_specs") else list(training.specs())
    if not data_ok or not all(training.stored(s) for s in specs):
        why = "WikiText-2 was not at hand when this site was built" if not data_ok else \
            "the shipped bundle has no run of these settings"
        return fixed(pool, {"status": f"<p class='sv-note'>Train: {why}. Run it yourself: <code>{command}</code>"
                                      "</p>"})
    with contextlib.redirect_stdout(io.StringIO()):
        training.train(blocking=True)
    views: dict[str, Any] = {"status": f"<p class='sv-note'>Train, replayed from the shipped bundle: "
                                       f"{training.status.value}</p>"}
    for name, view in training.views.items():
        views[f"train-{name}"] = view
        if name in getattr(training, "captions", {}):
            views[f"train-{name}-caption"] = training.captions[name].value
    return fixed(pool, views)


CONTROL_KINDS = (W.IntSlider, W.FloatSlider, W.SelectionSlider, W.Dropdown, W.ToggleButtons, W.Checkbox)


def cell_explorable(pool: Pool, namespace: Mapping[str, Any], before: set[str]) -> dict[str, Any] | None:
    """The controls and figure views a notebook cell made (names new in ``namespace`` since ``before``), every view
    recorded for every combination of the controls (e.g. notebook 00's look inside the replayed model). None when
    the cell made no figure view."""
    new = [k for k in namespace if k not in before]
    controls = {k: namespace[k] for k in new if isinstance(namespace[k], CONTROL_KINDS)}
    views = {k: namespace[k] for k in new if isinstance(namespace[k], FigureView)}
    for k in new:  # a widget object holding its controls and one view (notebook 00's AttentionInspector)
        obj = namespace[k]
        if isinstance(getattr(obj, "view", None), FigureView) and isinstance(getattr(obj, "controls", None), Mapping):
            # every control but a window's position (each of its values would be another full set of states)
            controls.update({n: c for n, c in obj.controls.items() if isinstance(c, CONTROL_KINDS) and n != "first"})
            views[k] = obj.view
    if not views:
        return None
    return record(pool, controls, {k: (lambda v=v: v, list(controls)) for k, v in views.items()})


def spans_explorable(pool: Pool, panel: Any) -> dict[str, Any]:
    """Notebook 01's panel: α0..α3 over the blocks (the α table, :func:`page_cells`) and the toy; preset, layer
    and head over the blocks, the angles and their caption (every pick recorded)."""
    c = panel.controls
    picks = record(pool, {n: c[n] for n in ("preset", "layer", "head")}, {
        "blocks": (lambda: panel.views["blocks"], ["preset", "layer", "head"]),
        "angles": (lambda: panel.views["angles"], ["layer", "head"]),
        "angles-caption": (lambda: panel.angles_caption.value, ["layer", "head"]),
    })
    toy = record(pool, {"alpha0": c["alpha0"], "alpha1": c["alpha1"]},
                 {"toy": (lambda: panel.views["toy"], ["alpha0", "alpha1"])})
    values = [slider_values(c[f"alpha{i}"]) for i in range(4)]
    cells = {}
    options = [widget_values(c[n])[0] for n in ("preset", "layer", "head")]
    for idx in itertools.product(*(range(len(o)) for o in options)):
        key = tuple(o[i] for o, i in zip(options, idx))
        panel._load_head(key)
        layout = panel._blocks_state(key)[1]
        cells["|".join(map(str, idx))] = page_cells(panel._cells[key], layout, pick_key(key), values)
    controls = [*toy["controls"], control_spec("alpha2", c["alpha2"]), control_spec("alpha3", c["alpha3"]),
                *picks["controls"]]
    views = picks["views"] + toy["views"]
    views[0]["alpha"] = {"controls": [f"alpha{i}" for i in range(4)], "cells": cells}
    return {"controls": controls, "views": views}


def masks_explorable(pool: Pool, panel: Any) -> dict[str, Any]:
    """Notebook 02's masks: n_local, window p and context T. The figure of each T is recorded (its layout and
    axes); the page fills in the masks of n_local and p with masks.js and the heads' titles from the table of
    ``head_labels`` recorded here (the annotations the panel writes)."""
    c = panel.controls
    def template() -> Any:  # the figure of this T without its masks (the page computes them)
        view = panel.views["masks"]
        return types.SimpleNamespace(data=[{**t, "z": []} for t in view.data], layout=view.layout)

    by_t = record(pool, {"context": c["context"]}, {"masks": (template, ["context"])})
    H = panel.model_cfg.n_head
    n_locals, windows = widget_values(c["n_local"])[0], widget_values(c["window"])[0]
    labels = {}
    start = (c["n_local"].value, c["window"].value)
    for i, nl in enumerate(n_locals):
        for j, p in enumerate(windows):
            c["n_local"].value, c["window"].value = nl, p
            labels[f"{i}|{j}"] = panel._labels()
    c["n_local"].value, c["window"].value = start
    view = by_t["views"][0]
    view["masks"] = {"H": H, "zoom": MASK_ZOOM, "max_cells": 128, "labels": labels,
                     "n_local": [int(v) for v in n_locals], "window": [int(v) for v in windows],
                     "context": [int(v) for v in widget_values(c["context"])[0]]}
    controls = [control_spec("n_local", c["n_local"]), control_spec("window", c["window"]), *by_t["controls"]]
    return {"controls": controls, "views": [view]}


def fp8_explorable(pool: Pool, panel: Any) -> dict[str, Any]:
    """Notebook 03's bounds: rank r, δ and margin over the bounds-vs-rank figure, the scale table and the caption,
    every combination evaluated by the panel (:class:`spanviz.fp8.demos.BoundsVsRank`)."""
    c = panel.controls
    on = ["rank", "delta", "margin"]
    return record(pool, {n: c[n] for n in on}, {
        "bounds": (lambda: panel.views["bounds"], on),
        "scales": (lambda: panel.scales.value, on),
        "bounds-caption": (lambda: panel.bounds_caption.value, on),
    })


def alphas_explorable(pool: Pool, store: Any) -> dict[str, Any]:
    """Notebook 01's α response, from the store's ``spanviz sweep alphas`` runs."""
    response = AlphaResponse(response_records(store), static=False)
    if "response" not in response.views:
        return fixed(pool, {"missing": f"<p class='sv-note'>No α-response runs: <code>{ALPHAS_COMMAND}</code></p>"})
    return fixed(pool, {"caption": response.caption.value, "response": response.views["response"]})


def growth_explorable(pool: Pool, store: Any) -> tuple[dict[str, Any], Any]:
    """Notebook 02's logit-growth lab: its learning-rate selector over the sweep and the curves; and the lab."""
    lab = GrowthLab(lab_records(store), static=False)
    if not lab.views:
        note = f"<p class='sv-note'>No growth-lab runs: <code>{GROWTH_COMMAND}</code></p>"
        return fixed(pool, {"missing": note}), lab
    out = record(pool, {"lr": lab.controls["lr"]}, {"sweep": (lambda: lab.views["sweep"], ["lr"]),
                                                    "curves": (lambda: lab.views["curves"], ["lr"])})
    out["views"].insert(0, fixed(pool, {"caption": lab.caption.value})["views"][0])
    return out, lab


BASELINES = ("standard", "[1111]", "mhsa")
"""A sweep's baseline variant: the first whose name is or ends with one of these (else description only)."""


def comparison_html(rows: Sequence[Mapping[str, Any]]) -> str:
    """A sweep's summary as an HTML table: variant, seeds, mean ± std of the best validation loss, verdict."""
    def num(x: Any) -> str:
        return "–" if x is None else f"{x:.4f}"
    body = "".join(f"<tr><td>{r['variant']}</td><td>{r['n']}/{r['n_runs']}</td><td>{num(r['mean'])} ± "
                   f"{num(r['std'])}</td><td>{r['verdict']}</td></tr>" for r in rows)
    return ("<table class='sv-table'><tr><th>variant</th><th>seeds</th><th>best val loss (mean ± std)</th>"
            f"<th>verdict (spanviz.experiments.stats)</th></tr>{body}</table>")


def comparisons_explorable(pool: Pool, store: Any) -> dict[str, Any] | None:
    """Every stored sweep in ``store`` other than the α response and the growth lab (which have their own views):
    a selector over (experiment, size) and, per sweep, the loss curves with seed bands and the summary table."""
    sweeps = sorted({(r.config["tags"]["experiment"], r.config["tags"]["size"]) for _, r in store.records()
                     if isinstance(r.config.get("tags"), dict) and r.config["tags"].get("experiment") not in
                     (None, "alphas", "growth")})
    if not sweeps:
        return None
    states: dict[str, Any] = {"figure": {}, "table": {}}
    for i, (experiment, size) in enumerate(sweeps):
        records = sweep_records(store, experiment, size)
        groups: dict[str, list[Any]] = {}
        for r in sorted(records, key=lambda r: (str(r.config.get("variant")), r.config.get("seed") or 0)):
            groups.setdefault(str(r.config["variant"]), []).append(r)
        runs = {v: [r.history for r in rs] for v, rs in groups.items()}
        fig = loss_curves_figure(runs, title=f"{experiment} sweep ({size}): validation loss, mean ± std over seeds")
        rows = []
        for prefix in sorted({v.split("/")[0] if "/" in v else "" for v in groups}):
            part = [r for v, rs in groups.items() if (v.split("/")[0] if "/" in v else "") == prefix for r in rs]
            names = list(dict.fromkeys(str(r.config["variant"]) for r in part))
            base = next((n for n in names if any(n == b or n.endswith(b) for b in BASELINES)), None)
            rows += summarize(part, "best_val_loss", base)
        states["figure"][str(i)] = [pool.add(fig.to_dict()["data"]), pool.add(fig.to_dict()["layout"])]
        states["table"][str(i)] = pool.add(comparison_html(rows))
    labels = [f"{e} ({s})" for e, s in sweeps]
    control = {"name": "sweep", "label": "stored sweep", "kind": "select", "labels": labels, "values": labels,
               "index": 0}
    return {"controls": [control], "views": [
        {"name": "comparison", "kind": "figure", "on": ["sweep"], "states": states["figure"]},
        {"name": "comparison-table", "kind": "html", "on": ["sweep"], "states": states["table"]}]}
