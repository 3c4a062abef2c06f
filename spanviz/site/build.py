"""``spanviz site OUT``: the notebooks as a folder of static pages that work opened from disk, offline.

One page per notebook: its Markdown (math as MathML), its code (folded, "runs in the notebook"), and where the
notebook shows a panel or a replayed sweep, that view as an *explorable*: the figures and captions the notebook's
own objects draw, recorded at build time for every value of the controls that need no training
(:mod:`spanviz.site.sections`), and redrawn in the page by ``static/site.js`` with plotly.js (copied from the
installed plotly package). Train becomes the replay of the stored run of the default settings (the shipped bundle),
or the command to run. A last page holds the bundle's other sweeps with seed bands and verdicts. All data is inline
JSON or ``<script src>`` files (``file://`` pages may not fetch), nothing is fetched from the network.
Source: spanviz.
"""

from __future__ import annotations

import html
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import plotly

from spanviz.site import sections as S
from spanviz.site.explore import Pool, dumps
from spanviz.site.markdown import render_markdown
from spanviz.store import ResultsStore, load_bundle
from spanviz.widgets.figure.block_scaler import STATIC as WIDGET_STATIC

HERE = Path(__file__).parent
REPO_NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
SCRIPTS = ("plotly.min.js", "span_alpha.js", "masks.js", "site.js")
MAX_VOCAB = 8192


def _load_data() -> Any:
    try:
        from spanviz.data import load_tokens

        return load_tokens(max_vocab=MAX_VOCAB)
    except Exception:  # noqa: BLE001 - no WikiText-2 here: the pages say what to run instead of replaying
        return None


def _section(xid: str, spec: dict[str, Any], title: str = "") -> str:
    head = f"<h4>{html.escape(title)}</h4>" if title else ""
    return (f"<section class='sv-x' data-x='{xid}' id='{xid}'>{head}"
            f"<script type='application/json' class='sv-spec'>{dumps(spec)}</script></section>")


def _page(title: str, body: str, pool: Pool, nav: str) -> str:
    scripts = "".join(f"<script src='{s}'></script>" for s in SCRIPTS)
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<link rel='stylesheet' href='site.css'></head><body><nav>{nav}</nav>{body}"
            f"<script type='application/json' id='sv-pool'>{pool.json().replace('</', '<' + chr(92) + '/')}</script>"
            f"{scripts}</body></html>")


def _notebook_page(nb_path: Path, store: ResultsStore, data: Any) -> tuple[str, Pool, list[str]]:
    """The body of one notebook's page, its pool of states and the explorables' ids."""
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    pool, parts, ids = Pool(), [], []
    ns: dict[str, Any] = {"data": data}
    name = nb_path.stem
    command = f"bash scripts/lab.sh, open notebooks/{nb_path.name} and press Train"

    def add(key: str, spec: dict[str, Any] | None, title: str = "") -> None:
        if spec is not None:
            ids.append(f"{name}-{key}")
            parts.append(_section(f"{name}-{key}", spec, title))

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
    shutil.copyfile(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", out / "plotly.min.js")
    shutil.copyfile(WIDGET_STATIC / "span_alpha.js", out / "span_alpha.js")
    for f in ("masks.js", "site.js", "site.css"):
        shutil.copyfile(HERE / "static" / f, out / f)
    data = _load_data() if isinstance(data, str) and data == "auto" else data
    titles, explorables = {}, {}
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
        pool = Pool()
        spec = S.comparisons_explorable(pool, store)
        body = "<h1>Stored sweeps: configurations × seeds</h1><p>Every sweep the shipped bundle holds (besides the " \
               "α response and the growth lab, on their notebooks' pages): validation loss with the seed band " \
               "(mean ± std over seeds) and, for the best validation loss, the verdict words of " \
               "<code>spanviz.experiments.stats</code> against the sweep's baseline (seeds paired, Holm across " \
               "that sweep's comparisons here: <code>spanviz sweep</code>'s own summary may group them otherwise)." \
               "</p>"
        body += _section("comparisons", spec) if spec else "<p>The bundle holds no other sweep.</p>"
        (out / "comparisons.html").write_text(_page("stored sweeps", body, pool, nav), encoding="utf-8")
        explorables["comparisons.html"] = ["comparisons"] if spec else []
    items = "".join(f"<li><a href='{f}'>{html.escape(t)}</a></li>" for f, t in titles.items())
    index = ("<h1>spanviz in your browser</h1><p>The notebooks of spanviz as pages: the text, every figure, and "
             "every control that needs no training, working here without Python or a network. Train shows the "
             "runs the shipped bundle stored for the notebook's settings; for anything else, run the notebook "
             "(<code>bash scripts/lab.sh</code>).</p>"
             f"<ul>{items}<li><a href='comparisons.html'>stored sweeps: configurations × seeds</a></li></ul>")
    (out / "index.html").write_text(_page("spanviz", index, Pool(), nav), encoding="utf-8")
    files = sorted(f.name for f in out.iterdir() if f.is_file())
    return {"pages": ["index.html", *(f for _, f in pages), "comparisons.html"], "explorables": explorables,
            "files": files, "bytes": sum((out / f).stat().st_size for f in files)}
