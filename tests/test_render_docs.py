"""Every number the docs and notebooks quote from a sweep or a benchmark is rendered from docs/results/.

`python scripts/render_docs.py --check` is the command docs/results/README.md gives; these tests run it as a
person would, on this checkout and on copies with a number typed by hand or a result changed.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "render_docs.py"
TEMPLATES = ROOT / "docs" / "templates"


def _script():
    spec = importlib.util.spec_from_file_location("render_docs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["render_docs"] = module
    spec.loader.exec_module(module)
    return module


render_docs = _script()


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str


def run(*args: str) -> Outcome:
    """``python scripts/render_docs.py ARGS``, in this process (the command itself: see the first test)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = render_docs.main(list(args))
    return Outcome(code, out.getvalue(), err.getvalue())


def copy_tree(tmp_path: Path) -> Path:
    """What the script reads and writes — docs/ (without screenshots) and notebooks/ — under tmp_path."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("screenshots"))
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    return tmp_path


def block_text(text: str, template: str) -> str:
    found = [m["body"] for m in render_docs.BLOCK.finditer(text) if m["template"] == template]
    assert len(found) == 1, f"{template}: {len(found)} blocks"
    return found[0]


def notebook_cell(path: Path, template: str) -> tuple[nbformat.NotebookNode, int]:
    notebook = nbformat.read(path, as_version=4)
    for i, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown" and f"<!-- BEGIN generated: {template} -->" in cell.source:
            return notebook, i
    raise AssertionError(f"no block {template} in {path}")


# ================================================================================ this checkout is rendered
def test_every_generated_block_matches_what_docs_results_gives():
    """The command docs/results/README.md gives, as a person runs it."""
    out = subprocess.run([sys.executable, "scripts/render_docs.py", "--check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout == "" and out.stderr == ""


def test_the_docs_and_notebooks_hold_generated_blocks_from_every_sweep():
    used = render_docs.used_templates(ROOT)
    # every "What spanviz measured" box of notebooks 01-03 and every sweep table of the docs is a block
    assert {"nb01_measured", "nb02_measured", "nb02_gpu", "nb03_measured", "spans_cpu_table", "ls_sweep_tables",
            "ls_gpu_table", "spans_gpu_heads_table", "fp8_cpu_table", "results_index"} <= used
    # ... and every sweep of docs/results/ is quoted by one: a block names it as its source or its template reads it
    blocks = [m for p in render_docs.documents(ROOT) for t in _texts(p) for m in render_docs.BLOCK.finditer(t)]
    quoted = {s for m in blocks for s in m["sources"].split()}
    quoted |= {w for m in blocks for w in re.findall(r"\w+", (TEMPLATES / f"{m['template']}.md").read_text())}
    sweeps = {p.name.removesuffix(".per_seed.json") for p in (ROOT / "docs" / "results").glob("*.per_seed.json")}
    assert sweeps and sweeps <= quoted, sweeps - quoted


def _texts(path: Path) -> list[str]:
    if path.suffix == ".md":
        return [path.read_text()]
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]


def test_every_template_is_used_by_a_block_or_is_a_bench_template():
    names = {p.stem for p in TEMPLATES.glob("*.md")}
    used = render_docs.used_templates(ROOT)
    assert used <= names, used - names
    orphans = {n for n in names - used if not n.startswith("bench_")}
    assert not orphans, f"templates no block uses: {orphans}"


# ========================================================== statistics blocks: a takeaway, the numbers collapsed
TAKEAWAYS = {"nb01_measured": "01_spans_and_violations", "nb02_measured": "02_local_global_heads",
             "nb02_gpu": "02_local_global_heads", "nb03_measured": "03_fp8_logit_bounds"}
DERIVED = {"nb02_measured": {"9", "10"}}  # "in 9 of 10 LS runs" (5 of 5 + 4 of 5), "about 9× smaller" (42.3 / 4.7)


def takeaway_and_details(root: Path, template: str) -> tuple[str, str]:
    notebook, i = notebook_cell(root / "notebooks" / f"{TAKEAWAYS[template]}.ipynb", template)
    lead, details = block_text(notebook.cells[i].source, template).strip("\n").split("\n\n", 1)
    return lead, details


@pytest.mark.parametrize("template", sorted(TAKEAWAYS))
def test_statistics_blocks_lead_with_a_one_line_takeaway_and_keep_the_numbers_in_a_collapsed_details(template):
    from markdown_it import MarkdownIt

    lead, details = takeaway_and_details(ROOT, template)
    assert lead.startswith("**In short:** ") and "\n" not in lead and lead.endswith(".")  # one line, plain words
    assert not re.search(r"\bp = |CI|t\(\d|Holm|±", lead), lead  # the statistics are below, not in the takeaway
    assert details.startswith("<details><summary>") and details.endswith("\n\n</details>")  # closed: no `open`
    assert re.search(r"p = |±", details) and details.count("<details>") == 1
    # CommonMark (GitHub, JupyterLab's marked): the blank lines make the inside Markdown, bold and code included
    html = MarkdownIt("commonmark").render(f"{lead}\n\n{details}\n")
    assert html.startswith("<p><strong>In short:</strong> ") and "<details><summary>" in html
    inside = html.split("</summary>", 1)[1]
    assert "<strong>" in inside and "**" not in inside and inside.rstrip().endswith("</details>")
    # every number the takeaway quotes is one the details print (as printed: signs and rounding)
    numbers = set(re.findall(r"\d+(?:\.\d+)?", lead)) - DERIVED.get(template, set())
    assert numbers and numbers <= set(re.findall(r"\d+(?:\.\d+)?", details)), numbers - set(
        re.findall(r"\d+(?:\.\d+)?", details))
    # ... and its words agree with the details' verdicts
    said = {"nb01_measured": ("did not change the validation loss by more than the seed noise",
                              "(significant at" not in details),
            "nb02_measured": ("did not keep the largest attention logit lower", len(re.findall(
                r"max logit is (?:again )?\*\*not shown to be lower \(within noise\)\*\*", details)) == 2),
            "nb02_gpu": ("was not told apart from plain attention's", "not shown to grow less" in details),
            "nb03_measured": ("(deterministic) never overflowed", "scale overflowed in 0 of" in details)}[template]
    assert (said[0] in lead) == said[1], (lead, said)


def test_a_changed_result_changes_the_takeaway_with_it(tmp_path):
    root = copy_tree(tmp_path)
    per_seed = root / "docs" / "results" / "spans_cpu.per_seed.json"
    table = json.loads(per_seed.read_text())
    for row in table:
        if row["variant"] == "[1000]":
            row["best_val_loss"] *= 0.97  # [1000] 3 % lower in every seed: past the seed noise
    per_seed.write_text(json.dumps(table))
    assert run("--root", str(root)).returncode == 0
    lead, details = takeaway_and_details(root, "nb01_measured")
    assert "**shown to be lower (significant at 5 % after Holm)**" in details
    assert "changed the validation loss beyond the seed noise in 1 of 4 comparisons (1 lower, 0 higher)" in lead
    cpu = re.search(r"\[1000\] ended (\d\.\d\d) % below standard", details).group(1)
    assert f"— −{cpu} % on a CPU" in lead and "the paper's −0.56 % showed in 1 of them" in lead


# ===================================================================== a hand edit or a changed result fails
def test_a_number_edited_by_hand_fails_the_check_and_rendering_restores_it(tmp_path):
    root = copy_tree(tmp_path)
    gpu = root / "docs" / "gpu.md"
    original = gpu.read_text()
    body = block_text(original, "ls_gpu_table")
    assert "| QK-norm | 10.1 ± 2.0 |" in body  # the drift issue 24 found: 10.1 in the results, 10.2 in the docs
    gpu.write_text(original.replace("| QK-norm | 10.1 ± 2.0 |", "| QK-norm | 10.2 ± 2.0 |"))
    nb_path = root / "notebooks" / "01_spans_and_violations.ipynb"
    notebook, i = notebook_cell(nb_path, "nb01_measured")
    nb_original = nb_path.read_text()
    assert "+1.39 %" in notebook.cells[i].source
    notebook.cells[i].source = notebook.cells[i].source.replace("+1.39 %", "+1.40 %")
    nb_path.write_text(nbformat.writes(notebook) + "\n")

    out = run("--check", "--root", str(root))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "docs/gpu.md: block 'ls_gpu_table' differs" in out.stdout
    assert "-| QK-norm | 10.2 ± 2.0 |" in out.stdout and "+| QK-norm | 10.1 ± 2.0 |" in out.stdout
    assert f"notebooks/01_spans_and_violations.ipynb, cell {i}: block 'nb01_measured' differs" in out.stdout
    assert out.stdout.count("differs from what docs/results/ gives") == 2  # nothing else is reported
    assert gpu.read_text() != original  # --check changes nothing

    assert run("--root", str(root)).returncode == 0
    assert gpu.read_text() == original and nb_path.read_text() == nb_original
    assert run("--check", "--root", str(root)).returncode == 0


def test_prose_outside_the_blocks_is_left_alone(tmp_path):
    root = copy_tree(tmp_path)
    spans = root / "docs" / "spans.md"
    text = spans.read_text().replace("## Cost", "## Cost (edited by hand)")
    spans.write_text(text)
    assert run("--check", "--root", str(root)).returncode == 0
    assert run("--root", str(root)).returncode == 0 and spans.read_text() == text


def test_the_blocks_are_computed_from_the_per_seed_files(tmp_path):
    root = copy_tree(tmp_path)
    per_seed = root / "docs" / "results" / "ls_gpu.per_seed.json"
    table = json.loads(per_seed.read_text())
    for row in table:
        if row["variant"] == "qk_norm":
            row["peak_max_logit"] *= 3  # QK-norm's peak triples: 10.1 → 30.4
    per_seed.write_text(json.dumps(table))
    out = run("--check", "--root", str(root))
    assert out.returncode == 1 and "docs/gpu.md: block 'ls_gpu_table' differs" in out.stdout
    assert run("--root", str(root)).returncode == 0
    body = block_text((root / "docs" / "gpu.md").read_text(), "ls_gpu_table")
    assert "| QK-norm | 30.4 ± 6.1 |" in body


def test_unbalanced_markers_and_unknown_templates_are_errors(tmp_path):
    root = copy_tree(tmp_path)
    doc = root / "docs" / "spans.md"
    original = doc.read_text()
    doc.write_text(original + "\n<!-- BEGIN generated: spans_cpu_table -->\n")
    out = run("--check", "--root", str(root))
    n = original.count("<!-- END generated -->")  # the page's well-formed blocks
    assert out.returncode == 2 and f"docs/spans.md: {n + 1} BEGIN and {n} END markers" in out.stderr
    doc.write_text(original + "\n<!-- BEGIN generated: no_such_template -->\n<!-- END generated -->\n")
    out = run("--root", str(root))
    assert out.returncode == 2 and "no template docs/templates/no_such_template.md" in out.stderr
    doc.write_text(original + "\n<!-- BEGIN generated: bench_ls bench_nowhere -->\n<!-- END generated -->\n")
    out = run("--root", str(root))
    assert out.returncode == 2 and "source 'bench_nowhere' is not a file of docs/results/" in out.stderr


# ======================================================= a summary edited by hand, a cited bench field changed
@pytest.mark.parametrize("field", ["rel_change_pct", "ci_low", "ci_high", "rel_ci_high_pct", "welch_t", "verdict"])
def test_a_summary_field_edited_by_hand_fails_the_check(tmp_path, field):
    """The blocks render rows recomputed from the per-seed table, so a summary row edited by hand changes no block:
    --check compares every field of every summary row with the recomputation."""
    root = copy_tree(tmp_path)
    summary = root / "docs" / "results" / "ls_cpu.json"
    data = json.loads(summary.read_text())
    i, row = next((i, r) for i, r in enumerate(data["rows"])
                  if r["variant"] == "ls" and r["metric"] == "peak_max_logit")
    row[field] = "shown to be lower" if field == "verdict" else row[field] + 0.5
    summary.write_text(json.dumps(data))
    out = run("--check", "--root", str(root))
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"ls_cpu.json: row {i} (ls, peak_max_logit): {field} is" in out.stdout
    assert "differs from what docs/results/ gives" not in out.stdout  # no block changed: only the new check sees it
    assert "1 summary field(s) differ" in out.stderr


def test_a_bench_field_that_prose_cites_but_no_block_renders_fails_the_check(tmp_path):
    """docs/ls_attention.md types "20.7 %" (the LS mask's share of causal pairs) from a field no template renders;
    docs/prose_numbers.txt names that field, and --check compares the two."""
    root = copy_tree(tmp_path)
    assert "docs/ls_attention.md | 20.7 % | backed by docs/results/gpu_run3_profile.json: " \
           "curve.points[0].mask_shares.pairs * 100" in (root / "docs" / "prose_numbers.txt").read_text()
    profile = root / "docs" / "results" / "gpu_run3_profile.json"
    data = json.loads(profile.read_text())
    data["curve"]["points"][0]["mask_shares"]["pairs"] = 0.25
    profile.write_text(json.dumps(data))
    out = run("--check", "--root", str(root))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "docs/ls_attention.md: prose says '20.7 %', docs/results/gpu_run3_profile.json " \
           "curve.points[0].mask_shares.pairs gives 25.0" in out.stdout
    assert "differs from what docs/results/ gives" not in out.stdout  # the field is in no block
    # ... and a log it cites: the run-4 test time
    profile.write_text(json.dumps(json.loads((ROOT / "docs/results/gpu_run3_profile.json").read_text())))
    log = root / "docs" / "results" / "gpu_run4_tests.log"
    log.write_text(log.read_text().replace("in 138.39s", "in 141.02s"))
    out = run("--check", "--root", str(root))
    assert out.returncode == 1 and "docs/gpu.md: prose says '138 s', docs/results/gpu_run4_tests.log holds no 138" \
        in out.stdout, out.stdout


def test_a_cited_field_that_no_longer_exists_is_named(tmp_path):
    root = copy_tree(tmp_path)
    allowed = root / "docs" / "prose_numbers.txt"
    allowed.write_text(allowed.read_text().replace("mask_shares.pairs * 100", "mask_shares.paris * 100"))
    out = run("--check", "--root", str(root))
    assert out.returncode == 1 and "KeyError: 'paris'" in out.stdout, out.stdout


def test_the_ls_latency_claim_is_judged_on_the_forward_profile():
    """The paper claims inference latency: the claims table's latency row quotes the forward profile of
    docs/results/gpu_run1_profile.json (one launch-bound run, said so), not the forward + backward curve."""
    cases = json.loads((ROOT / "docs" / "results" / "gpu_run1_profile.json").read_text())["wrapper"]["cases"]

    def kernel_us(case: str) -> float:
        return max(op["self_device_us_per_call"] for op in cases[case]["top_ops"])

    ls, fa, flex = kernel_us("ls_direct_all_heads"), kernel_us("dense_causal_sdpa"), kernel_us("direct")
    event = cases["ls_direct_all_heads"]["event_ms_per_call"] / cases["dense_causal_sdpa"]["event_ms_per_call"]
    claims = block_text((ROOT / "docs" / "ls_attention.md").read_text(), "ls_claims")
    row = next(line for line in claims.splitlines() if line.startswith("| inference latency"))
    assert f"took {render_docs.fixed(ls / fa, 2)}× FlashAttention's device time per call" in row
    assert f"({render_docs.fixed(ls, 0)} vs {render_docs.fixed(fa, 0)} µs; {render_docs.fixed(event, 2)}× in GPU " \
           "time per call)" in row
    assert "one run, launch-bound" in row and "forward + backward" not in row
    assert f"the dense causal FlexAttention kernel took {render_docs.fixed(flex, 0)} µs" in row
    text = (ROOT / "docs" / "ls_attention.md").read_text() + (ROOT / "docs" / "gpu.md").read_text()
    assert "FlexAttention's kernel is itself" not in text and "which eats the saving" not in text  # the false cause


def test_what_the_docs_say_of_the_bundle_is_what_the_bundle_holds():
    """README, docs/gpu.md and notebook 00 quote the shipped bundle through a block: the count of runs that record
    their provenance, and the device of the tour's run (the one whose trained weights ship with it)."""
    import zipfile

    with zipfile.ZipFile(render_docs.BUNDLE) as z:
        runs = {n[5:-5]: json.loads(z.read(n)) for n in z.namelist() if n.startswith("runs/")}
        weights = [n.split("/")[1].removesuffix(".pt") for n in z.namelist() if n.startswith("weights/")]
    recorded = sum(r["environment"].get("git_commit") not in (None, "not recorded") for r in runs.values())
    tour = runs[weights[0]]["environment"]
    block = block_text((ROOT / "README.md").read_text(), "bundle_provenance")
    assert f"**{recorded} of {len(runs)}** runs record a commit and a digest" in block
    assert f"{len(runs) - recorded} say \"not recorded\"" in block
    device = "a CPU" if tour["device"] == "cpu" else f"an {tour['device_name']}"
    assert f"1 on {device} ({tour['started_utc'][:10]}, with its trained weights: the tour's)" in block
    _, i = notebook_cell(ROOT / "notebooks" / "00_tour.ipynb", "nb00_bundle")
    cell = nbformat.read(ROOT / "notebooks" / "00_tour.ipynb", as_version=4).cells[i].source
    assert ("was made on a CPU, not a GPU" in cell) == (tour["device"] == "cpu")
    assert "The default comparison of this notebook was also run on a GPU" not in cell


# ============================================================================================ bench outputs
RECORDED = Path(__file__).parent / "data" / "bench_cpu_sections.json"


@pytest.fixture(scope="module")
def cpu_bench() -> dict:
    """A `spanviz bench --json` output on the CPU: the ``ls`` section measured now (tiny settings: seconds), the
    ``spans``, ``fp8`` and ``notebooks`` sections as recorded by the same function calls with tiny settings
    (tests/data/bench_cpu_sections.json: one repeat each, on a machine at load ~20 — its times show the format,
    they are no measurement; measuring them takes about a CPU-minute)."""
    from spanviz import bench
    from spanviz.bench import ls as bench_ls_module

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bench_ls_module, "bench_ls", functools.partial(bench_ls_module.bench_ls, T=64, batch=1, repeats=1,
                                                                  warmup=0, min_run_time=1e-3))  # fmt: skip
        out = bench.run_benchmarks(only="ls", device="cpu")
    assert "error" not in out["ls"], out["ls"]
    recorded = json.loads(RECORDED.read_text())
    out.update({name: recorded[name] for name in ("spans", "fp8", "notebooks")})
    return json.loads(json.dumps(out))  # what --json writes: plain JSON


def gpu_shaped(cpu: dict) -> dict:
    """The CPU output with the sections a CUDA run adds (FlexAttention cases, the whole-model timing): the shape
    of `spanviz bench --json --device cuda` (see spanviz.bench.ls.bench_ls)."""
    out = json.loads(json.dumps(cpu))
    ls = out["ls"]
    for i, case in enumerate(("ls_flex", "dense_causal_flex", "ls_flex_direct", "ls_flex_direct_tiles64")):
        ls["cases"].append(case)
        ls["ms"][case] = {p: (i + 2) * ms for p, ms in ls["ms"]["dense_causal_sdpa"].items()}
        ls["ratio_vs_dense"][case] = {p: float(i + 2) for p in ls["ms"][case]}
    ls["flex_ratio_same_kernel"] = {"forward": 2 / 3, "forward_backward": 2 / 3}
    ls["mask_shares_block64"] = ls["mask_shares"]
    ls["device_name"] = out["environment"]["cuda_device"] = "a test GPU"
    ls["model"] = {"config": {"n_layer": 6, "d_model": 192, "context_length": 2048, "batch": 8, "dtype": "bfloat16",
                              "repeats": 10},
                   "ms": {"mhsa": {"forward": 4.0, "train_step": 13.0}, "ls": {"forward": 5.0, "train_step": 16.0}},
                   "ratio_ls_over_mhsa": {"forward": 1.25, "train_step": 16 / 13}}
    return out


def render_with(tmp_path: Path, results: dict, blocks: list[str]) -> str:
    """Render a document holding ``blocks`` (marker lines' contents) against this checkout's docs plus ``results``."""
    root = copy_tree(tmp_path)
    for name, data in results.items():
        (root / "docs" / "results" / f"{name}.json").write_text(json.dumps(data))
    doc = root / "docs" / "bench_test.md"
    doc.write_text("\n\n".join(f"<!-- BEGIN generated: {b} -->\n<!-- END generated -->" for b in blocks) + "\n")
    out = run("--root", str(root))
    assert out.returncode == 0, out.stdout + out.stderr
    return doc.read_text()


def test_bench_templates_render_the_json_of_spanviz_bench(tmp_path, cpu_bench):
    text = render_with(tmp_path, {"bench_cpu": cpu_bench},
                       ["bench_ls bench_cpu", "bench_spans bench_cpu", "bench_fp8 bench_cpu", "bench_notebooks bench_cpu"])
    ls = cpu_bench["ls"]
    table = block_text(text, "bench_ls")
    for case, label in (("dense_causal_sdpa", "dense causal SDPA"), ("ls_sdpa", "LS, SDPA with a dense boolean mask"),
                        ("ls_explicit", "LS, explicit scores + mask + softmax")):
        ms, ratio = ls["ms"][case], ls["ratio_vs_dense"][case]
        row = (f"| {label} | {render_docs.sig(ms['forward'], 3)} | {render_docs.sig(ms['forward_backward'], 3)} | "
               f"{render_docs.fixed(ratio['forward'], 2)} | {render_docs.fixed(ratio['forward_backward'], 2)} |")
        assert row in table
    assert f"T {ls['config']['T']}, batch 1" in table and f"PyTorch {cpu_bench['environment']['torch']}" in table
    spans = block_text(text, "bench_spans")
    assert f"| kv8 [1000] | {render_docs.sig(cpu_bench['spans']['step_ms']['kv8_1000'], 3)} |" in spans
    assert render_docs.fixed(cpu_bench["spans"]["ratios"]["qk4_over_fused"], 2) in spans
    fp8 = block_text(text, "bench_fp8")
    assert f"{render_docs.sig(cpu_bench['fp8']['exact_ms'], 3)} ms | {render_docs.sig(cpu_bench['fp8']['exact_pct'], 2)} %" in fp8
    notebooks = block_text(text, "bench_notebooks")
    runs = cpu_bench["notebooks"]["runs"]
    assert len(runs) == 7 and all(f"| {label} | {render_docs.grouped(r['tokens_per_s'])} "
                                  f"({render_docs.grouped(r['train_tokens_per_s'])}) |" in notebooks
                                  for label, r in runs.items())


def test_bench_templates_render_a_cuda_shaped_output_and_two_machines_side_by_side(tmp_path, cpu_bench):
    gpu = gpu_shaped(cpu_bench)
    text = render_with(tmp_path, {"bench_cpu": cpu_bench, "bench_gpu": gpu},
                       ["bench_ls bench_gpu", "bench_ls_model bench_gpu", "bench_notebooks bench_cpu bench_gpu"])
    table = block_text(text, "bench_ls")
    assert "| LS, `local_global.flex_attention` (what the model calls) |" in table and "| 2.00 | 2.00 |" in table
    assert "On the same FlexAttention kernel, LS over dense causal: 0.67× forward" in table
    assert "a test GPU" in table
    model = block_text(text, "bench_ls_model")
    assert "| LS / MHSA | 1.25 | 1.23 |" in model
    side = block_text(text, "bench_notebooks")
    header = next(line for line in side.splitlines() if line.startswith("| run |"))
    assert header.count("|") == 5 and "a test GPU" in header and "second / first" in header
    first = next(iter(cpu_bench["notebooks"]["runs"]))
    assert f"| {first} | " in side and " 1.0× |" in side  # the same numbers on both sides: ratio 1


def test_the_claims_table_uses_a_shipped_gpu_bench_when_there_is_one(tmp_path, cpu_bench):
    root_text = block_text((ROOT / "docs" / "ls_attention.md").read_text(), "ls_claims")
    # without a shipped bench, the row is rendered from the shipped GPU profile (docs/results/gpu_run3_profile.json)
    curve = json.loads((ROOT / "docs" / "results" / "gpu_run3_profile.json").read_text())["curve"]["points"]
    paper = render_docs.fixed(curve[0]["ratio_vs_dense"]["ls_model_path"], 2)
    assert f"LS took {paper}× dense causal FlashAttention at T {curve[0]['T']}" in root_text
    assert "| training time (forward + backward): not a claim of the paper |" in root_text
    gpu = gpu_shaped(cpu_bench)
    text = render_with(tmp_path, {"bench_gpu": gpu}, ["ls_claims"])
    claims = block_text(text, "ls_claims")
    ratios = [r for case, r in gpu["ls"]["ratio_vs_dense"].items() if case.startswith("ls_")]
    best = [render_docs.fixed(min(r[p] for r in ratios), 2) for p in ("forward", "forward_backward")]
    assert f"forward (the inference pass): on an a test GPU LS is at best {best[0]}× dense causal SDPA" in claims
    assert f"| training time (forward + backward): not a claim of the paper | — | on an a test GPU LS is at best " \
           f"{best[1]}×" in claims  # a row of its own: the paper claims inference latency
    assert "1.25× for the whole 6-layer model (`docs/results/bench_gpu.json`" in claims


def test_a_missing_or_failed_bench_section_is_named(tmp_path, cpu_bench):
    broken = {k: v for k, v in cpu_bench.items() if k != "fp8"}
    broken["spans"] = {"error": "RuntimeError: out of memory"}
    root = copy_tree(tmp_path)
    (root / "docs" / "results" / "bench_x.json").write_text(json.dumps(broken))
    doc = root / "docs" / "bench_test.md"
    for template, message in (("bench_fp8", "has no 'fp8' section"), ("bench_spans", "'spans' section failed: Runtime")):
        doc.write_text(f"<!-- BEGIN generated: {template} bench_x -->\n<!-- END generated -->\n")
        out = run("--root", str(root))
        assert out.returncode == 2 and message in out.stderr, out.stderr


# ======================================================================================= number formatting
@pytest.mark.parametrize(("value", "expected"), [
    (0.3743, "0.37"), (0.899, "0.90"), (1.0, "1.0"), (0.0084, "0.0084"), (0.001, "0.0010"), (1.0277e-4, "1.0·10⁻⁴"),
    (4.1e-5, "4.1·10⁻⁵"), (-10.3485, "−10"), (0.0625, "0.062"), (15031.4, "15 031"),
    (99.6, "100"), (-99.96, "−100"), (99.4, "99"),
])
def test_significant_figures(value, expected):
    assert render_docs.sig(value) == expected


def test_p_values_print_a_capped_holm_p_as_1():
    assert render_docs.pvalue(1.0) == "1" and render_docs.pvalue(0.9997) == "1.0" and render_docs.pvalue(0.037) == "0.037"
    assert render_docs.pvalue(4.9e-4) == "4.9·10⁻⁴"


def test_fixed_signed_grouped_and_spans_use_true_minus_signs():
    assert render_docs.fixed(-0.0311, 3) == "−0.031" and render_docs.signed(2.02, 1) == "+2.0"
    assert render_docs.signed(-13.8077, 1) == "−13.8" and render_docs.grouped(61278.0) == "61 278"
    assert render_docs.grouped(-4348.2, True) == "−4 348" and render_docs.grouped(1994, True) == "+1 994"
    assert render_docs.span([0.608, 0.996, 0.68], "sig", 3) == "0.608–0.996"
    assert render_docs.span([0.0040, 0.079], "signed", 3) == "+0.004 to +0.079"
    assert render_docs.span([5.0, 5.0]) == "5.00"
    assert render_docs.seeds_text([0, 1, 2, 3, 4]) == "0–4" and render_docs.seeds_text([0, 2]) == "0, 2"
    with pytest.raises(render_docs.RenderError, match="expected a finite number"):
        render_docs.fixed(None)
