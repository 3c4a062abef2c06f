"""The static site (``spanviz site OUT``, :func:`spanviz.site.build_site`): pages, figures with drawn data, size,
the α table against the Python layout, Markdown and math rendered at build time. The browser test
(tests/browser/test_site_browser.py) opens the pages from file://."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest

from spanviz import local_global
from spanviz.plots.span_blocks import span_block_alpha_table, span_block_cells, span_blocks_layout
from spanviz.site import build_site
from spanviz.site import sections as S
from spanviz.site.markdown import render_markdown
from spanviz.widgets.figure import plotly_js

MAX_BYTES = 30_000_000


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("site")
    return out, build_site(out)


def page_json(path: Path) -> tuple[list, list[dict]]:
    text = path.read_text(encoding="utf-8")
    texts = json.loads(re.search(r"id='sv-pool'>(.*?)</script>", text, re.S).group(1).replace("<\\/", "</"))
    pool = [json.loads(t) for t in texts]
    specs = [json.loads(s.replace("<\\/", "</")) for s in re.findall(r"class='sv-spec'>(.*?)</script>", text, re.S)]
    return pool, specs


def values_in(trace: dict) -> int:
    n = 0
    for key in ("x", "y", "z"):
        v = trace.get(key)
        if isinstance(v, dict) and "bdata" in v:
            n += len(base64.b64decode(v["bdata"]))
        elif isinstance(v, list):
            n += len(v)
    return n


def test_pages_and_files(site):
    out, result = site
    for name in ("index.html", "00_tour.html", "01_spans_and_violations.html", "02_local_global_heads.html",
                 "03_fp8_logit_bounds.html", "comparisons.html", "span_alpha.js", "masks.js", "site.js", "site.css"):
        assert (out / name).is_file(), name
    assert result["bytes"] <= MAX_BYTES, f"the site is {result['bytes'] / 1e6:.1f} MB, over 30 MB"
    assert sum((out / f).stat().st_size for f in result["files"]) == result["bytes"]
    for page in result["pages"]:  # nothing a page loads comes from elsewhere (links to papers are for people)
        text = (out / page).read_text(encoding="utf-8")
        assert not re.search(r"""(src=|<link[^>]*href=)['"](https?:)?//""", text), page


def test_each_page_loads_the_smallest_plotly_js_build_of_its_first_figure(site):
    """A page's script tag loads the plotly.js build its first figure needs (cartesian: 1.5 MB instead of 4.8); a view
    that needs another (the 3-D toy: gl3d) names it, and every build a page names is in the folder."""
    out, result = site
    named: dict[str, set[str]] = {}
    for page in result["pages"]:
        text = (out / page).read_text(encoding="utf-8")
        tags = re.findall(r"<script src='(plotly[^']*)'>", text)
        _, specs = page_json(out / page)
        files = [view["plotly"] for spec in specs for view in spec["views"] if view["kind"] == "figure"]
        assert tags == files[:1], page  # one plotly.js tag: the first figure's build (none without figures)
        assert re.search(rf"<body data-plotly='{tags[0] if tags else ''}'>", text), page
        named[page] = set(files)
        for f in files:
            assert (out / f).is_file(), (page, f)
    if plotly_js.partial_builds_usable():
        assert named["index.html"] == set() and "plotly.min.js" not in result["files"]
        for page in ("00_tour.html", "02_local_global_heads.html", "03_fp8_logit_bounds.html", "comparisons.html"):
            assert named[page] == {"plotly-cartesian.min.js"}, page
        assert named["01_spans_and_violations.html"] == {"plotly-cartesian.min.js", "plotly-gl3d.min.js"}
        _, specs = page_json(out / "01_spans_and_violations.html")
        toy = [v for spec in specs for v in spec["views"] if v["name"] == "toy"]
        assert toy and all(v["plotly"] == "plotly-gl3d.min.js" for v in toy)


def test_every_figure_has_drawn_data(site):
    out, result = site
    if "00_tour-train" in result["explorables"]["00_tour.html"]:  # WikiText-2 at hand: the tour's model replays
        assert "00_tour-look" in result["explorables"]["00_tour.html"]  # and its look inside is recorded
    figures = 0
    for page, ids in result["explorables"].items():
        pool, specs = page_json(out / page)
        assert len(specs) == len(ids) > 0 or page == "index.html"
        for spec in specs:
            for view in spec["views"]:
                assert view["states"], (page, view["name"])
                for state in view["states"].values():
                    if view["kind"] == "html":
                        assert pool[state].strip(), (page, view["name"])
                        continue
                    figures += 1
                    data = pool[state[0]]
                    assert data, (page, view["name"])
                    drawn = sum(values_in(t) for t in data)
                    assert drawn > 0 or "masks" in view, (page, view["name"])
    assert figures > 100


def array(value) -> np.ndarray:
    """A trace's x or y as the page gets it: a list, or plotly's typed array {"dtype", "bdata"}."""
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).astype(float)
    return np.asarray(value, dtype=float)


def test_figure_cells_are_on_the_page_where_the_notebook_draws_them(site):
    """Notebook 02's figures of its own computing (the logit gap a head needs, the toy band fits) are on its page
    after their code, with the values the notebook's cells compute."""
    out, result = site
    ids = result["explorables"]["02_local_global_heads.html"]
    at = {k: ids.index(f"02_local_global_heads-{k}") for k in ("growth", "logit-gap", "toy-band", "masks")}
    assert at["growth"] < at["logit-gap"] < at["toy-band"] < at["masks"]  # the notebook's order
    pool, specs = page_json(out / "02_local_global_heads.html")
    views = {v["name"]: v for spec in specs for v in spec["views"]}
    gap = pool[views["logit-gap"]["states"][""][0]]
    i = np.arange(2048)
    expected = [local_global.required_logit_gap(i, p=32, eps=0.1), local_global.required_logit_gap(i, p=32, eps=0.01),
                local_global.required_logit_gap(i, p=32, eps=0.01, head="local")]
    assert [t["name"] for t in gap] == ["global, ε=0.1", "global, ε=0.01", "local head"]
    for trace, want in zip(gap, expected):
        np.testing.assert_allclose(array(trace["y"]), want, rtol=1e-6)
    toy = pool[views["toy-band"]["states"][""][0]]
    assert [t["name"].split(" (")[0] for t in toy] == ["global head", "local head"]
    for trace in toy:
        steps, max_logit = array(trace["x"]), array(trace["y"])
        assert steps[0] == 0 and steps[-1] >= 600 - 5 and len(steps) == len(max_logit) > 100
        assert np.isfinite(max_logit).all() and re.search(r"final KL \d\.\d{3}\)$", trace["name"])


def test_the_tours_samples_are_recorded_per_temperature_and_top_k(site):
    """00's "what the model writes": the replayed model's text from the notebook's prompt for every top-k and the
    page's temperatures; greedy (top-k 1) is the same text at every temperature, top-k all is not."""
    out, result = site
    if "00_tour-look" not in result["explorables"]["00_tour.html"]:
        pytest.skip("WikiText-2 is not at hand here: the tour's model does not replay, so it writes nothing")
    assert "00_tour-samples" in result["explorables"]["00_tour.html"]
    pool, specs = page_json(out / "00_tour.html")
    spec = next(s for s in specs if any(v["name"] == "samples" for v in s["views"]))
    controls = {c["name"]: c for c in spec["controls"]}
    assert controls["temperature"]["values"] == list(S.SAMPLE_TEMPERATURES)
    assert controls["temperature"]["labels"][controls["temperature"]["index"]] == "0.8"  # the notebook's default
    top_k = controls["top_k"]["labels"]
    assert top_k[0] == "1 (greedy)" and top_k[-1] == "all" and top_k[controls["top_k"]["index"]] == "40"
    states = spec["views"][0]["states"]
    assert len(states) == len(S.SAMPLE_TEMPERATURES) * len(top_k)
    texts = {key: pool[i] for key, i in states.items()}
    assert all("The game was released in" in t and "final model" in t for t in texts.values())
    greedy = {texts[f"{t}|0"] for t in range(len(S.SAMPLE_TEMPERATURES))}
    assert len(greedy) == 1
    every = len(top_k) - 1
    assert texts[f"0|{every}"] != texts[f"{len(S.SAMPLE_TEMPERATURES) - 1}|{every}"]


def test_markdown_and_math_rendered_at_build_time(site):
    out, _ = site
    text = (out / "01_spans_and_violations.html").read_text(encoding="utf-8")
    assert "<math" in text and "<h1>" in text
    html = render_markdown("A `$x$` stays code, $x^2$ becomes MathML, and $$\\frac{a}{b}$$ a block.")
    assert "<code>$x$</code>" in html and html.count("<math") == 2 and 'display="block"' in html


def test_controls_of_the_issue_are_there(site):
    out, _ = site
    names = {p: {c["name"] for s in page_json(out / p)[1] for c in s["controls"]} for p in
             ("01_spans_and_violations.html", "02_local_global_heads.html", "03_fp8_logit_bounds.html",
              "comparisons.html")}
    assert {"alpha0", "alpha1", "alpha2", "alpha3", "preset", "layer", "head"} <= names["01_spans_and_violations.html"]
    assert {"n_local", "window", "context", "lr"} <= names["02_local_global_heads.html"]
    assert {"rank", "delta", "margin"} <= names["03_fp8_logit_bounds.html"]
    assert "sweep" in names["comparisons.html"]
    verdicts = (out / "comparisons.html").read_text(encoding="utf-8")
    assert "within noise" in verdicts or "significant at 5 %" in verdicts


def test_alpha_table_is_the_python_layout():
    """The page's α values are the ones span_blocks_layout draws: one rule (spanviz.plots.span_blocks)."""
    rng = np.random.default_rng(0)
    blocks = [{"name": f"S{i}", "order": o, "block": rng.normal(size=(16, 16))}
              for i, o in enumerate((0, 1, 1, 1, 2, 2, 2, 3))]
    cells = span_block_cells(blocks)
    values = [[0.0, 0.5, 1.0, 2.0]] * 4
    table = span_block_alpha_table(cells, values)
    for ks in [(0, 1, 2, 3), (2, 0, 0, 0), (3, 3, 1, 0)]:
        a = [values[o][k] for o, k in enumerate(ks)]
        layout = span_blocks_layout(cells, a)
        for o in range(4):
            axis = layout[f"coloraxis{o + 2}"]
            assert {k: axis[k] for k in ("cmin", "cmax", "reversescale")} == table["color"][o][ks[o]]
        for i, o in enumerate(cells["orders"]):
            assert layout["shapes"][8 + i]["y1"] == table["bar"][i][ks[o]]
            assert layout["annotations"][i]["text"] == table["title"][i][ks[o]]
        assert layout["yaxis2"]["range"][1] == max(table["reach"][i][ks[o]] for i, o in enumerate(cells["orders"]))


def test_without_wikitext_train_names_what_to_run(tmp_path):
    """A fresh clone without WikiText-2 still builds; Train then says what to run instead of replaying."""
    notebooks = tmp_path / "nb"
    notebooks.mkdir()
    src = Path(__file__).resolve().parents[1] / "notebooks" / "03_fp8_logit_bounds.ipynb"
    (notebooks / src.name).write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    result = build_site(tmp_path / "site", notebooks=notebooks, data=None)
    pool, _ = page_json(tmp_path / "site" / "03_fp8_logit_bounds.html")
    text = " ".join(s for s in pool if isinstance(s, str))
    assert "03_fp8_logit_bounds-bounds" in result["explorables"]["03_fp8_logit_bounds.html"]
    assert "WikiText-2 was not at hand" in text and "open notebooks/03_fp8_logit_bounds.ipynb" in text
