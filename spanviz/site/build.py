"""``spanviz site OUT``: the notebooks as a folder of static pages that work opened from disk, offline.

One page per notebook: its Markdown (math as MathML), its code (folded, "runs in the notebook"), and where the
notebook shows a panel or a replayed sweep, that view as an *explorable*: the figures and captions the notebook's
own objects draw, recorded at build time for every value of the controls that need no training
(:mod:`spanviz.site.sections`), and redrawn in the page by ``static/site.js`` with plotly.js: the smallest build that
draws the page's first figure (:mod:`spanviz.widgets.figure.plotly_js`: the cartesian one, 1.5 MB, where the full
4.8 MB of plotly.py's took twice as long to start), and the build a later view needs (the 3-D toy's gl3d) when that
view is first drawn. Train becomes the replay of the stored run of the default settings (the shipped bundle),
or the command to run. A last page holds the bundle's other sweeps with seed bands and verdicts. All data is inline
JSON or ``<script src>`` files (``file://`` pages may not fetch), nothing is fetched from the network.
Source: spanviz.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from spanviz.site import sections as S
from spanviz.site.explore import Pool, dumps
from spanviz.site.markdown import render_markdown
from spanviz.store import ResultsStore, load_bundle
from spanviz.widgets.figure import plotly_js
from spanviz.widgets.figure.block_scaler import STATIC as WIDGET_STATIC

HERE = Path(__file__).parent
REPO_NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
SCRIPTS = ("span_alpha.js", "masks.js", "site.js")  # after the page's plotly.js build (PagePool.builds)
MAX_VOCAB = 8192


def _load_data() -> Any:
    try:
        from spanviz.data import load_tokens

        return load_tokens(max_vocab=MAX_VOCAB)
    except Exception:  # noqa: BLE001 - no WikiText-2 here: the pages say what to run instead of replaying
        return None


class PagePool(Pool):
    """A page's pool of states, and the plotly.js build of each of its figure views in page order (``builds``)."""

    def __init__(self) -> None:
        super().__init__()
        self.builds: list[str] = []


def _name_builds(spec: dict[str, Any], pool: PagePool) -> None:
    """Name in each figure view of ``spec`` the plotly.js build that draws every state it holds (``view["plotly"]``,
    its file name; :func:`spanviz.widgets.figure.plotly_js.build_for`), and note it in the pool."""
    for view in spec["views"]:
        if view["kind"] != "figure":
            continue
        types: set[str] = set()
        for index in {state[0] for state in view["states"].values()}:
            types |= plotly_js.trace_types(json.loads(pool.texts[index]))
        build = plotly_js.build_for(types)
        view["plotly"] = plotly_js.FILES[build]
        pool.builds.append(build)


def _section(xid: str, spec: dict[str, Any], pool: PagePool, title: str = "") -> str:
    _name_builds(spec, pool)
    head = f"<h4>{html.escape(title)}</h4>" if title else ""
    return (f"<section class='sv-x' data-x='{xid}' id='{xid}'>{head}"
            f"<script type='application/json' class='sv-spec'>{dumps(spec)}</script></section>")


def _page(title: str, body: str, pool: PagePool, nav: str) -> str:
    """The page: its script tags load the plotly.js build of its first figure (none on a page without figures);
    site.js loads another build when a view that needs it is first drawn."""
    first = [plotly_js.FILES[pool.builds[0]]] if pool.builds else []
    scripts = "".join(f"<script src='{s}'></script>" for s in [*first, *SCRIPTS])
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<link rel='stylesheet' href='site.css'></head><body data-plotly='{''.join(first)}'><nav>{nav}</nav>{body}"
            f"<script type='application/json' id='sv-pool'>{pool.json().replace('</', '<' + chr(92) + '/')}</script>"
            f"{scripts}</body></html>")


def _notebook_page(nb_path: Path, store: ResultsStore, data: Any) -> tuple[str, PagePool, list[str]]:
    """The body of one notebook's page, its pool of states and the explorables' ids."""
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    pool, parts, ids = PagePool(), [], []
    ns: dict[str, Any] = {"data": data}
    name = nb_path.stem
    command = f"bash scripts/lab.sh, open notebooks/{nb_path.name} and press Train"

    def add(key: str, spec: dict[str, Any] | None, title: str = "") -> None:
        if spec is not None:
            ids.append(f"{name}-{key}")
            parts.append(_section(f"{name}-{key}", spec, pool, title))

    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            parts.append(render_markdown(src))
            continue
        if cell["cell_type"] != "code":
            continue
        parts.append(f"<details class='sv-code'><summary>code (runs in the notebook)</summary><pre><code>"
                     f"{html.escape(src)}</code></pre></details>")
        if "AlphaResponse(" in src:
            add("alpha-response", S.alphas_explorable(pool, store))
        elif "GrowthLab(" in src:
            spec, ns["lab"] = S.growth_explorable(pool, store)
            add("growth", spec)
        elif "AttentionInspector(" in src and data is not None and ns.get("panel") is not None:  # look inside
            before = set(ns)
            S.run_cells([src], ns, force=True)
            add("look", S.cell_explorable(pool, ns, before), "look inside the replayed model")
        elif "SamplesView(" in src and ns.get("inspector") is not None:  # what the replayed model writes
            S.run_cells([src], ns, force=True)
            if ns.get("samples") is not None:
                add("samples", S.samples_explorable(pool, ns["samples"]), "what the replayed model writes")
        elif S.is_figure_cell(src):  # a figure the cell computes itself (02's logit gap, toy fits)
            found = re.search(r"name=[\"']([\w-]+)[\"']", src)
            key = found.group(1) if found else f"figure-{len(ids) + 1}"
            add(key, S.figure_cell(pool, src, ns, key))
        elif any(s in src for s in S.SAFE_CELLS):
            if "data" in ns and ns["data"] is None or not hasattr(ns.get("data"), "vocab_size"):
                ns["data"] = S.data_stand_in(int(ns.get("MAX_VOCAB", MAX_VOCAB)))
            ns.pop("panel", None) if "Panel(" in src else None
            S.run_cells([src], ns)
            panel = ns.get("panel") if "Panel(" in src else None
            if panel is None:
                continue
            kind = type(panel).__name__
            if kind == "SpansPanel":
                add("spans", S.spans_explorable(pool, panel), "the panel (no kernel: every pick recorded)")
            elif kind == "LocalGlobalPanel":
                add("masks", S.masks_explorable(pool, panel), "the panel: masks")
            elif kind == "FP8Panel":
                add("bounds", S.fp8_explorable(pool, panel), "the panel: bounds vs rank")
            add("train", S.replay(pool, panel, store, data is not None, command), "Train (replay)")
    return "".join(parts), pool, ids


def build_site(out_dir: str | Path, bundle: str | Path | None = None, notebooks: str | Path | None = None,
               data: Any = "auto") -> dict[str, Any]:
    """Write the static site into ``out_dir`` (created; files of the same names replaced).

    Args:
        out_dir: the folder.
        bundle: a runs archive to replay from (default: the shipped ``spanviz/bundles/workshop-gpu.zip``).
        notebooks: the folder of ``*.ipynb`` (default: the repository's ``notebooks/``).
        data: the token data the panels' Train would use ("auto": WikiText-2 as the notebooks load it, None when
            it is not at hand: then Train shows the command instead of replaying).
    Returns:
        ``{"pages": [file names], "explorables": {page: [ids]}, "bytes": total size}``.
    Raises:
        ValueError: no notebooks in ``notebooks``.
    """
    out = Path(out_dir)
    nb_dir = Path(notebooks) if notebooks is not None else REPO_NOTEBOOKS
    paths = sorted(nb_dir.glob("*.ipynb"))
    if not paths:
        raise ValueError(f"notebooks={str(nb_dir)!r} holds no .ipynb file")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(WIDGET_STATIC / "span_alpha.js", out / "span_alpha.js")
    for f in ("masks.js", "site.js", "site.css"):
        shutil.copyfile(HERE / "static" / f, out / f)
    data = _load_data() if isinstance(data, str) and data == "auto" else data
    titles, explorables, builds = {}, {}, set()
    with tempfile.TemporaryDirectory() as tmp:
        store = ResultsStore(tmp)
        load_bundle(bundle, store=store) if bundle is not None else load_bundle(store=store)
        pages = [(p, f"{p.stem}.html") for p in paths]
        for p, file in pages:
            nb = json.loads(p.read_text(encoding="utf-8"))
            first = next((c for c in nb["cells"] if c["cell_type"] == "markdown"), None)
            titles[file] = "".join(first["source"]).splitlines()[0].lstrip("# ") if first else p.stem
        nav = "<a href='index.html'>spanviz</a>" + "".join(
            f"<a href='{f}'>{html.escape(t.split('·')[0].strip())}</a>" for f, t in titles.items()) + \
            "<a href='comparisons.html'>stored sweeps</a>"
        for p, file in pages:
            body, pool, ids = _notebook_page(p, store, data)
            (out / file).write_text(_page(titles[file], body, pool, nav), encoding="utf-8")
            explorables[file] = ids
            builds |= set(pool.builds)
        pool = PagePool()
        spec = S.comparisons_explorable(pool, store)
        body = "<h1>Stored sweeps: configurations × seeds</h1><p>Every sweep the shipped bundle holds (besides the " \
               "α response and the growth lab, on their notebooks' pages): validation loss with the seed band " \
               "(mean ± std over seeds) and, for the best validation loss, the verdict words of " \
               "<code>spanviz.experiments.stats</code> against the sweep's baseline (seeds paired, Holm across " \
               "that sweep's comparisons here: <code>spanviz sweep</code>'s own summary may group them otherwise)." \
               "</p>"
        body += _section("comparisons", spec, pool) if spec else "<p>The bundle holds no other sweep.</p>"
        (out / "comparisons.html").write_text(_page("stored sweeps", body, pool, nav), encoding="utf-8")
        explorables["comparisons.html"] = ["comparisons"] if spec else []
        builds |= set(pool.builds)
    for build in builds:  # the plotly.js builds some page uses
        shutil.copyfile(plotly_js.path(build), out / plotly_js.FILES[build])
    items = "".join(f"<li><a href='{f}'>{html.escape(t)}</a></li>" for f, t in titles.items())
    index = ("<h1>spanviz in your browser</h1><p>The notebooks of spanviz as pages: the text, every figure, and "
             "every control that needs no training, working here without Python or a network. Train shows the "
             "runs the shipped bundle stored for the notebook's settings; for anything else, run the notebook "
             "(<code>bash scripts/lab.sh</code>).</p>"
             f"<ul>{items}<li><a href='comparisons.html'>stored sweeps: configurations × seeds</a></li></ul>")
    (out / "index.html").write_text(_page("spanviz", index, PagePool(), nav), encoding="utf-8")
    files = sorted(f.name for f in out.iterdir() if f.is_file())
    return {"pages": ["index.html", *(f for _, f in pages), "comparisons.html"], "explorables": explorables,
            "files": files, "bytes": sum((out / f).stat().st_size for f in files)}
