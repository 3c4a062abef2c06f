"""Render every number that docs/ and the notebooks quote from a sweep or a benchmark, from docs/results/.

A generated block is a marked region of a Markdown file (``docs/**/*.md``) or of a notebook's markdown cell
(``notebooks/*.ipynb``)::

    <!-- BEGIN generated: TEMPLATE [SOURCE ...] -->
    ... written by this script: do not edit by hand ...
    <!-- END generated -->

(each marker a whole line). ``TEMPLATE`` names a Jinja2 template ``docs/templates/TEMPLATE.md``; each
``SOURCE`` (optional) names a file of ``docs/results/`` by its stem (``bench_gpu`` for
``docs/results/bench_gpu.json``). The template gets them as ``sources`` (and the first as ``source``), so one
template (e.g. ``bench_ls``) renders the tables of any ``spanviz bench --json`` output, and
``bench_notebooks bench_cpu bench_gpu`` puts two machines side by side.
Every template also sees each results file by its stem: a sweep summary (``NAME.json`` with
``NAME.per_seed.json`` beside it) as a :class:`Sweep`, whose rows are recomputed from the per-seed table with
:func:`spanviz.experiments.stats.compare_groups`, and any other JSON file (a benchmark's output) as a plain dict.
The verdict words come from :mod:`spanviz.experiments.stats` (``claim_verdict``, ``equivalence_test``, ...).

Usage::

    python scripts/render_docs.py           # rewrite every block whose text differs from what the files give
    python scripts/render_docs.py --check   # change nothing; exit 1 and show each block that differs, each
                                            # summary row field that differs from its per-seed recomputation,
                                            # and each number docs/prose_numbers.txt cites that its file contradicts

``tests/test_render_docs.py`` runs ``--check``: a number typed into a block by hand fails the test suite.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import jinja2
import nbformat

from spanviz.experiments import stats
from spanviz.experiments.results import read_per_seed
from spanviz.provenance import source_digest_at

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(
    r"^(?P<begin><!-- BEGIN generated: (?P<template>[\w/.-]+)(?P<sources>(?: [\w.-]+)*) -->)$"
    r"(?P<body>.*?)"
    r"^(?P<end><!-- END generated -->)$",
    re.DOTALL | re.MULTILINE,
)
"""A generated block: its two marker lines (each a whole line) and the text between them."""
BEGIN_LINE = re.compile(r"^<!-- BEGIN generated:", re.MULTILINE)
END_LINE = re.compile(r"^<!-- END generated -->", re.MULTILINE)
BUNDLE = ROOT / "spanviz" / "bundles" / "workshop-gpu.zip"
MINUS = "\u2212"
SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


class RenderError(ValueError):
    """A block that cannot be rendered: unknown template or source, or a template error (with the block's place)."""


# ======================================================================================== number formatting
def _check_number(x: Any, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise RenderError(f"{what}: expected a finite number, got {x!r}")
    return float(x)


def fixed(x: Any, digits: int = 2) -> str:
    """``x`` with ``digits`` decimals and a true minus sign: fixed(-0.0311, 3) → "−0.031"."""
    return f"{_check_number(x, 'fixed'):.{digits}f}".replace("-", MINUS)


def signed(x: Any, digits: int = 2) -> str:
    """Like :func:`fixed` with the sign always written: signed(2.02, 1) → "+2.0"."""
    return f"{_check_number(x, 'signed'):+.{digits}f}".replace("-", MINUS)


def sig(x: Any, digits: int = 2) -> str:
    """``digits`` significant figures; below 10⁻³ as m·10⁻ⁿ, from 10^digits on as a grouped integer:
    sig(0.0084) → "0.0084", sig(1.03e-4) → "1.0·10⁻⁴", sig(0.9) → "0.90", sig(15031.4, 3) → "15 031",
    sig(99.6) → "100" (not "1.0e+02")."""
    x = _check_number(x, "sig")
    if x != 0 and abs(x) < 1e-3:
        mantissa, exponent = f"{x:.{digits - 1}e}".split("e")
        return f"{mantissa}·10{str(int(exponent)).translate(SUPERSCRIPT)}".replace("-", MINUS, 1)
    if abs(float(f"{x:.{digits}g}")) >= 10**digits:  # no exponent for large numbers: 15031 → "15 031", 99.6 → "100"
        return grouped(x)
    return f"{x:#.{digits}g}".rstrip(".").replace("-", MINUS)


def pvalue(p: Any) -> str:
    """A p-value: two significant figures (:func:`sig`), and "1" for a Holm-adjusted p capped at 1."""
    if _check_number(p, "pvalue") == 1:
        return "1"
    return sig(p, 2)


def grouped(x: Any, sign: bool = False) -> str:
    """An integer count with grouped thousands: grouped(61278.0) → "61 278"; with ``sign``, "+61 278"."""
    return f"{round(_check_number(x, 'grouped')):{'+' if sign else ''},}".replace(",", " ").replace("-", MINUS)


def span(values: Any, fmt: str = "fixed", digits: int = 2) -> str:
    """"low–high" of a list of numbers (one value: that value), each formatted by ``fmt`` (fixed, signed, sig,
    grouped); "+a to +b" for signed."""
    values = [v for v in values if v is not None]
    if not values:
        raise RenderError("span: no values")
    show = {"fixed": lambda v: fixed(v, digits), "signed": lambda v: signed(v, digits), "sig": lambda v: sig(v, digits),
            "grouped": grouped}[fmt]
    low, high = show(min(values)), show(max(values))
    return low if low == high else f"{low} to {high}" if fmt == "signed" else f"{low}–{high}"


def seeds_text(seeds: Any) -> str:
    """"0–4" for consecutive seeds, else "0, 2, 5"."""
    seeds = sorted(seeds)
    if seeds and seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(str(s) for s in seeds)


# ============================================================================================= the results
@dataclass
class Sweep:
    """One sweep of docs/results/: its summary (``NAME.json``) and per-seed table (``NAME.per_seed.json``).

    ``rows`` are recomputed from the per-seed table with the comparisons listed in the summary, so a block
    shows what the per-seed numbers give (``tests/test_experiments_core.py`` checks that the summary's own rows
    agree).
    """

    name: str
    summary: dict[str, Any]
    table: list[dict[str, Any]]

    @cached_property
    def rows(self) -> list[dict[str, Any]]:
        return stats.compare_groups(self.table, self.summary["comparisons"])

    def row(self, name: str, metric: str = "best_val_loss", **where: Any) -> dict[str, Any]:
        """The one compared row of variant (or strategy) ``name`` for ``metric`` matching ``where``.

        Raises: RenderError when none or several match.
        """
        found = [r for r in self.rows if name in (r.get("variant"), r.get("strategy")) and r.get("metric") == metric
                 and all(r.get(k) == v for k, v in where.items())]  # fmt: skip
        if len(found) != 1:
            raise RenderError(f"{self.name}: {len(found)} rows match {name!r}, metric {metric!r}, {where} "
                              f"(need exactly one; add group=..., margin=..., ...)")
        return found[0]

    def values(self, column: str, **where: Any) -> list[Any]:
        """The per-seed ``column`` of the runs matching ``where``, in seed order.

        Raises: RenderError when no run matches.
        """
        runs = sorted((r for r in self.table if all(r.get(k) == v for k, v in where.items())), key=lambda r: r["seed"])
        if not runs:
            raise RenderError(f"{self.name}: no per-seed row matches {where}")
        return [r.get(column) for r in runs]

    def diffs(self, baseline: str, variant: str, metric: str = "best_val_loss") -> list[float]:
        """Per-seed paired differences ``variant − baseline`` of ``metric``, in seed order (seeds both have)."""
        def arm(name: str) -> dict[int, Any]:
            return {r["seed"]: r.get(metric) for r in self.table if r["variant"] == name and r.get(metric) is not None}

        base, var = arm(baseline), arm(variant)
        return [var[s] - base[s] for s in sorted(set(base) & set(var))]

    @property
    def n_tests(self) -> int:
        """Size of the sweep's Holm family: the distinct comparisons that were tested (as compare_groups counts)."""
        keys, rows = set(), iter(self.rows)
        for spec in self.summary["comparisons"]:
            names = list(spec.get("variants") or [])
            if spec.get("baseline") is not None and spec["baseline"] not in names:
                names.insert(0, spec["baseline"])
            for name in names:
                row = next(rows)
                if name != spec.get("baseline") and row.get("p") is not None:
                    keys.add((repr(sorted((spec.get("where") or {}).items())), spec.get("by", "variant"),
                              spec.get("baseline"), name, spec.get("metric")))  # fmt: skip
        return len(keys)

    def drift(self) -> list[str]:
        """Where the summary's own rows (``NAME.json``) differ from the rows the per-seed table gives: every field
        both have (``rel_change_pct``, the CI bounds, ``welch_t``, the verdict, ...), numbers to 1e-9 relative.
        The blocks render the recomputed rows, so a summary edited by hand would otherwise pass unseen."""
        saved = self.summary.get("rows") or []
        if len(saved) != len(self.rows):
            return [f"{self.name}.json: {len(saved)} summary rows, the per-seed table gives {len(self.rows)}"]
        out = []
        for i, (new, old) in enumerate(zip(self.rows, saved)):
            for key in sorted(set(new) & set(old)):
                a, b = old[key], new[key]
                same = (math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
                        if _is_number(a) and _is_number(b) else a == b)
                if not same:
                    label = old.get("variant") or old.get("strategy")
                    out.append(f"{self.name}.json: row {i} ({label}, {old.get('metric')}): {key} is {a!r} in the "
                               f"summary, {b!r} from {self.name}.per_seed.json")
        return out

    @property
    def seeds(self) -> list[int]:
        return sorted({r["seed"] for r in self.table})

    @property
    def n_runs(self) -> int:
        """Distinct trained runs (an FP8 run has one per-seed row per strategy)."""
        return len({(r["variant"], r["seed"]) for r in self.table})

    @property
    def n_variants(self) -> int:
        return len({r["variant"] for r in self.table})

    def equivalence(self, baseline: str, variant: str, margin: float, metric: str = "best_val_loss",
                    relative: bool = True) -> dict[str, Any]:
        """:func:`spanviz.experiments.stats.equivalence_test` of two variants over the paired seeds."""
        def arm(name: str) -> dict[int, Any]:
            return {r["seed"]: r.get(metric) for r in self.table if r["variant"] == name}

        return stats.equivalence_test(arm(baseline), arm(variant), margin, relative=relative)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def seeds_for(row: Mapping[str, Any], half_width_pct: float, confidence: float = stats.CONFIDENCE) -> int:
    """Seeds a paired comparison would need for a ``confidence`` interval of ±``half_width_pct`` % of the baseline
    mean, if the paired differences kept the spread they had (``diff_std`` of a compared row): the smallest n with
    t_{(1+c)/2, n−1}·sd/√n ≤ half-width. A planning figure, not a result.

    Raises: RenderError for a row without a spread or a half-width ≤ 0.
    """
    from scipy.stats import t as student_t

    sd, ref = row.get("diff_std"), row.get("baseline_mean")
    if not sd or not ref or half_width_pct <= 0:
        raise RenderError(f"seeds_for: needs a compared row with diff_std > 0 and a half-width > 0, got {row!r:.200}")
    target = half_width_pct / 100.0 * abs(ref)
    n = 2
    while student_t.ppf((1 + confidence) / 2, n - 1) * sd / math.sqrt(n) > target:
        n += 1
    return n


def load_results(folder: Path) -> dict[str, Any]:
    """Every file of docs/results/ by stem: :class:`Sweep` for a summary with a per-seed table, else the JSON."""
    results: dict[str, Any] = {}
    for path in sorted(folder.glob("*.json")):
        if path.name.endswith(".per_seed.json"):
            continue
        stem = path.name.removesuffix(".json")
        data = json.loads(path.read_text())
        per_seed = folder / f"{stem}.per_seed.json"
        results[stem] = Sweep(stem, data, read_per_seed(per_seed)) if per_seed.exists() else data
    return results


def bundle_summary(path: Path, repo: Path = ROOT) -> dict[str, Any]:
    """What the shipped workshop bundle's runs record (read with zipfile + json, nothing imported into a store):
    ``runs``; ``recorded`` / ``not_recorded`` (runs whose environment names a git commit or says "not recorded");
    ``dirty`` (recorded runs made from a tree with uncommitted changes); ``commits`` (recorded commits, short) and
    ``unknown_commits`` (those this checkout's git does not know); ``digest_matches`` (recorded runs whose
    ``source_sha256`` equals :func:`spanviz.provenance.source_digest_at` of their commit); ``by_device``
    ({"NVIDIA H100 80GB HBM3": n, "CPU": m}); ``defaults`` (the notebooks' default runs — the runs without sweep
    tags — grouped, each group as {"device", "date", "recorded", "weights", "n"}); ``sweeps`` ({"alphas": n, ...}
    by the tag ``experiment``); ``weights_mb`` (the trained weights it carries, MB).

    Raises: RenderError when the bundle is missing.
    """
    import subprocess
    import zipfile
    from collections import Counter

    if not path.is_file():
        raise RenderError(f"no workshop bundle at {path}")
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        runs = {n[5:-5]: json.loads(z.read(n)) for n in names if n.startswith("runs/") and n.endswith(".json")}
        weights_bytes = sum(i.file_size for i in z.infolist() if i.filename.startswith("weights/"))
    weights = {n.split("/", 1)[1].rsplit(".", 1)[0] for n in names if n.startswith("weights/")}

    def device(env: Mapping[str, Any]) -> str:
        return env.get("device_name", "?") if str(env.get("device", "")).startswith("cuda") else "CPU"

    envs = {k: r.get("environment") or {} for k, r in runs.items()}
    recorded = {k: e for k, e in envs.items() if e.get("git_commit") not in (None, "not recorded")}
    commits = sorted({str(e["git_commit"])[:7] for e in recorded.values()})
    unknown = [c for c in commits if subprocess.run(["git", "cat-file", "-e", f"{c}^{{commit}}"], cwd=repo,
                                                    capture_output=True).returncode != 0]  # fmt: skip
    at = {c: source_digest_at(c, repo) for c in {str(e["git_commit"]) for e in recorded.values()}}
    matching = sum(1 for e in recorded.values() if at[str(e["git_commit"])] == e.get("source_sha256"))
    defaults = [{"device": device(envs[k]), "date": str(envs[k].get("started_utc", ""))[:10] or None,
                 "recorded": k in recorded, "weights": k in weights}
                for k, r in sorted(runs.items()) if not (r.get("config") or {}).get("tags")]  # fmt: skip
    defaults = [{**dict(key), "n": n} for key, n in Counter(tuple(d.items()) for d in defaults).items()]
    defaults.sort(key=lambda d: (d["device"] == "CPU", d["device"], d["date"] or ""))
    return {"runs": len(runs), "recorded": len(recorded), "not_recorded": len(runs) - len(recorded),
            "dirty": sum(1 for e in recorded.values() if e.get("git_dirty")), "commits": commits,
            "digest_matches": matching, "weights_mb": weights_bytes / 1e6,
            "unknown_commits": unknown, "by_device": dict(Counter(device(e) for e in envs.values())),
            "defaults": defaults,
            "sweeps": dict(Counter(((r.get("config") or {}).get("tags") or {}).get("experiment")
                                   for r in runs.values() if (r.get("config") or {}).get("tags")))}


# ============================================================================================== rendering
def environment(templates: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates),
        undefined=jinja2.StrictUndefined,  # a misspelt name is an error, never an empty string
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        autoescape=False,
        extensions=["jinja2.ext.do"],
    )
    env.filters.update(fixed=fixed, signed=signed, sig=sig, pvalue=pvalue, grouped=grouped, span=span, seeds=seeds_text,
                       claim=stats.claim_verdict)  # fmt: skip
    env.tests["sweep"] = lambda value: isinstance(value, Sweep)
    env.globals.update(
        fail=_fail,
        significant=stats.significant_words(), within_noise=stats.WITHIN_NOISE,
        no_equivalence_test=stats.NO_EQUIVALENCE_TEST, alpha=stats.ALPHA, seeds_for=seeds_for,
    )
    return env


def _fail(message: str) -> None:
    """``{{ fail("...") }}`` in a template: stop rendering with this message (e.g. a results file nobody describes)."""
    raise RenderError(message)


@dataclass
class Block:
    path: Path
    template: str
    sources: list[str]
    body: str
    where: str  # "docs/spans.md" or "notebooks/01_….ipynb, cell 14"


def render_block(env: jinja2.Environment, results: Mapping[str, Any], block: Block) -> str:
    """The text between a block's markers: a newline, the rendered template, a newline."""
    context = {**results, "results": results}
    for name in block.sources:
        if name not in results:
            raise RenderError(f"{block.where}: source {name!r} is not a file of docs/results/ "
                              f"(stems: {', '.join(sorted(results))})")
    context["sources"] = [results[name] for name in block.sources]
    context["source_names"] = list(block.sources)
    if block.sources:
        context["source"] = context["sources"][0]
    try:
        text = env.get_template(f"{block.template}.md").render(context)
    except jinja2.TemplateNotFound:
        raise RenderError(f"{block.where}: no template docs/templates/{block.template}.md") from None
    except (jinja2.TemplateError, RenderError, KeyError, TypeError, ValueError) as error:
        raise RenderError(f"{block.where}: template {block.template}: {type(error).__name__}: {error}") from error
    return "\n" + text.strip("\n") + "\n"


def _blocks_in(text: str, path: Path, where: str) -> Iterator[tuple[re.Match[str], Block]]:
    for match in BLOCK.finditer(text):
        yield match, Block(path, match["template"], match["sources"].split(), match["body"], where)


def _substitute(text: str, rendered: Mapping[int, str]) -> str:
    out, last = [], 0
    for match in BLOCK.finditer(text):
        out += [text[last:match.start("body")], rendered[match.start()]]
        last = match.end("body")
    return "".join(out) + text[last:]


def _stray_markers(text: str, where: str) -> None:
    begins, ends = len(BEGIN_LINE.findall(text)), len(END_LINE.findall(text))
    if begins != len(BLOCK.findall(text)) or ends != begins:
        raise RenderError(f"{where}: {begins} BEGIN and {ends} END markers, {len(BLOCK.findall(text))} well-formed "
                          f"blocks: every '<!-- BEGIN generated: TEMPLATE [SOURCE ...] -->' needs its own "
                          f"'<!-- END generated -->', each on a line of its own")


def documents(root: Path) -> list[Path]:
    """The files that may hold generated blocks: README.md, docs/**/*.md (templates excluded), notebooks/*.ipynb."""
    docs = [p for p in sorted((root / "docs").rglob("*.md")) if "templates" not in p.relative_to(root / "docs").parts]
    readme = [root / "README.md"] if (root / "README.md").is_file() else []
    return readme + docs + sorted((root / "notebooks").glob("*.ipynb"))


@dataclass
class Change:
    where: str
    template: str
    old: str
    new: str


def render(root: Path = ROOT, write: bool = True) -> list[Change]:
    """Render every block of :func:`documents`; with ``write``, save the files whose blocks changed.

    Returns: one :class:`Change` per block whose text differs from what the files give.
    Raises: RenderError for an unknown template or source, a template error, or unbalanced markers.
    """
    env = environment(root / "docs" / "templates")
    results = load_results(root / "docs" / "results")
    bundle = root / "spanviz" / "bundles" / "workshop-gpu.zip"
    results["bundle"] = bundle_summary(bundle if bundle.is_file() else BUNDLE)
    changes: list[Change] = []
    for path in documents(root):
        rel = path.relative_to(root).as_posix()
        if path.suffix == ".md":
            text = path.read_text()
            _stray_markers(text, rel)
            new_text = _render_text(env, results, text, path, rel, changes)
            if write and new_text != text:
                path.write_text(new_text)
        else:
            notebook = nbformat.read(path, as_version=4)
            dirty = False
            for i, cell in enumerate(notebook.cells):
                if cell.cell_type != "markdown":
                    continue
                where = f"{rel}, cell {i}"
                _stray_markers(cell.source, where)
                new_source = _render_text(env, results, cell.source, path, where, changes)
                if new_source != cell.source:
                    cell.source, dirty = new_source, True
            if write and dirty:
                path.write_text(nbformat.writes(notebook) + "\n")
    return changes


def _render_text(env: jinja2.Environment, results: Mapping[str, Any], text: str, path: Path, where: str,
                 changes: list[Change]) -> str:
    rendered = {}
    for match, block in _blocks_in(text, path, where):
        new = render_block(env, results, block)
        rendered[match.start()] = new
        if new != block.body:
            changes.append(Change(where, block.template, block.body, new))
    return _substitute(text, rendered) if rendered else text


def used_templates(root: Path = ROOT) -> set[str]:
    """Names of the templates some block uses (for finding orphans)."""
    names = set()
    for path in documents(root):
        if path.suffix == ".md":
            texts = [path.read_text()]
        else:
            texts = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]
        names.update(m["template"] for text in texts for m in BLOCK.finditer(text))
    return names


# ================================================================================= measured numbers in prose
PROSE_NUMBERS = Path("docs") / "prose_numbers.txt"
"""The typed numbers of README.md, docs/*.md and the notebooks' markdown that are not generated: one per line,
``FILE | LITERAL | REASON``. REASON starts with one of :data:`REASONS`; ``backed by docs/results/NAME.json: FIELD``
(FIELD a dotted path, ``[i]`` for a list item, optionally ``* FACTOR``) is checked by ``--check``: the literal's
number must be the field's value rounded as the literal is printed; ``backed by docs/results/NAME.log`` (no field):
the number must appear in that file."""
REASONS = ("not recomputable", "definition", "backed by", "checked by", "the paper", "a setting")
_NUMBER = r"(?<![\w.·⁻])[−-]?\d+(?:[  ]\d{3})*(?:\.\d+)?(?:\s?(?:[–-]|to)\s?\d+(?:\.\d+)?)?"
_UNIT = (r"\s?(?:%|×(?!\s?\d)|ms\b|µs\b|s\b|seconds?\b|minutes?\b|min\b|hours?\b|MB\b|GB\b|GiB\b|MiB\b"
         r"|(?:tokens|updates|steps)/s)")
MEASURED = re.compile(_NUMBER + _UNIT)
"""A number with a unit of time, size, share or ratio (``12–21 s``, ``1.6×``, ``0.3 ms``, ``36 %``); a product of
sizes (``128×128``, ``6 heads × 32``) is not one."""
LABELLED = re.compile(r"not\s+recomputable", re.IGNORECASE)


def _prose_texts(root: Path) -> Iterator[tuple[str, str]]:
    """(file, text) of README.md, docs/*.md and each notebook's markdown cells, generated blocks and code removed."""
    drop = re.compile(BLOCK.pattern + r"|^```.*?^```|`[^`\n]*`", re.DOTALL | re.MULTILINE)
    for path in documents(root):
        rel = path.relative_to(root).as_posix()
        if path.suffix == ".md" and re.fullmatch(r"README\.md|docs/[^/]+\.md", rel):
            yield rel, drop.sub("", path.read_text())
        elif path.suffix == ".ipynb":
            for cell in nbformat.read(path, as_version=4).cells:
                if cell.cell_type == "markdown":
                    yield rel, drop.sub("", cell.source)


def prose_numbers(root: Path) -> list[tuple[str, str, str]]:
    """Every measured-looking number typed in prose: (file, literal, its paragraph). A paragraph, table or list
    item under a heading that says "not recomputable", that says so itself, or a list or table right after a
    paragraph that says so and ends in ":", is labelled and left out."""
    found = []
    for rel, text in _prose_texts(root):
        heading, scope = "", False  # scope: a labelled paragraph ending in ":" labels the list or table after it
        for part in re.split(r"\n\s*\n", text):
            lines = [line for line in part.splitlines() if line.startswith("#")]
            heading = lines[-1] if lines else heading
            scope = scope and part.lstrip().startswith(("- ", "|", "* "))
            if LABELLED.search(part) and part.rstrip().endswith(":"):
                scope = True
            if LABELLED.search(heading) or LABELLED.search(part) or scope:
                continue
            found += [(rel, m.group(0).replace("\n", " "), part) for m in MEASURED.finditer(part)]
    return found


def allowed_numbers(root: Path) -> dict[tuple[str, str], str]:
    """:data:`PROSE_NUMBERS` as {(file, literal): reason}.

    Raises: RenderError for a line without three fields or with a reason that names none of :data:`REASONS`."""
    allowed = {}
    path = root / PROSE_NUMBERS
    for i, line in enumerate(path.read_text().splitlines() if path.is_file() else [], 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(" | ")]
        if len(parts) != 3 or not parts[2].startswith(REASONS):
            raise RenderError(f"{PROSE_NUMBERS}:{i}: expected 'FILE | LITERAL | REASON' with a reason starting "
                              f"with one of {REASONS}, got {line!r}")
        allowed[(parts[0], parts[1])] = parts[2]
    return allowed


def _field(data: Any, path: str) -> Any:
    for key in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        data = data[int(key[1:-1])] if key.startswith("[") else data[key]
    return data


def backed_number_errors(root: Path) -> list[str]:
    """The ``backed by`` entries of :data:`PROSE_NUMBERS` whose literal is not the named field's value (rounded as
    printed), or whose file or field does not exist: a changed bench field that prose quotes fails here."""
    errors = []
    for (rel, literal), reason in allowed_numbers(root).items():
        if not reason.startswith("backed by"):
            continue
        m = re.fullmatch(r"backed by (docs/results/[\w.-]+)(?:: ([^ ]+)(?: \* ([\d.e-]+))?)?(?: \(.*\))?", reason)
        number = re.search(r"\d+(?:[  ]\d{3})*(?:\.\d+)?", literal)[0].replace(" ", "").replace("\u202f", "")
        try:
            text = (root / m[1]).read_text()
            if m[2] is None:  # a log: the number must be in it
                if not re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", text):
                    errors.append(f"{rel}: prose says {literal!r}, {m[1]} holds no {number}")
                continue
            value = _field(json.loads(text), m[2]) * float(m[3] or 1)
        except (TypeError, KeyError, IndexError, OSError, ValueError) as error:
            errors.append(f"{rel}: {literal!r}: {reason!r}: {type(error).__name__}: {error}")
            continue
        digits = len(number.split(".")[1]) if "." in number else 0
        if round(abs(value), digits) != float(number):
            errors.append(f"{rel}: prose says {literal!r}, {m[1]} {m[2]} gives {value:.{digits}f}")
    return errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 and show every block that differs from what docs/results/ gives")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    try:
        changes = render(args.root, write=not args.check)
        results = load_results(args.root / "docs" / "results")
        drift = [m for r in results.values() if isinstance(r, Sweep) for m in r.drift()]
        backed = backed_number_errors(args.root)
    except RenderError as error:
        print(f"render_docs: {error}", file=sys.stderr)
        return 2
    for message in drift + backed:  # a guard of --check; rendering writes the blocks and only warns
        print(f"render_docs: {message}", file=sys.stdout if args.check else sys.stderr)
    if args.check and (drift or backed):
        print(f"{len(drift)} summary field(s) differ from what the per-seed tables give, {len(backed)} number(s) in "
              f"prose from what the file they cite gives ({PROSE_NUMBERS}): a results file was edited by hand, or "
              f"the prose was not updated with it", file=sys.stderr)
    for change in changes:
        if args.check:
            diff = difflib.unified_diff(change.old.splitlines(), change.new.splitlines(), "as written",
                                        "from docs/results", lineterm="", n=0)  # fmt: skip
            print(f"{change.where}: block {change.template!r} differs from what docs/results/ gives:")
            print("\n".join(diff))
        else:
            print(f"{change.where}: rewrote block {change.template!r}")
    if args.check and (drift or backed):
        return 1
    if args.check and changes:
        print(f"{len(changes)} generated block(s) differ: run `python scripts/render_docs.py` (and do not edit "
              f"generated blocks by hand: edit docs/templates/ or the results)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
