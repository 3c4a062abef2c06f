"""Structure of the benchmark sections that have no test elsewhere (tiny CPU runs; nothing here times anything)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from spanviz import bench, provenance
from spanviz.bench import core, widgets
from spanviz.bench.notebooks import bench_notebooks, notebook_runs
from spanviz.bench.spans import bench_growth, bench_spans, growth_table, peak_rss


def test_bench_notebooks_reports_every_notebook_run():
    res = bench_notebooks("cpu", steps=1, warmup=0)
    json.dumps(res)
    assert list(res["runs"]) == list(notebook_runs())
    for label, run in res["runs"].items():
        model_cfg, _ = notebook_runs()[label]
        assert run["tokens_per_update"] == 16 * model_cfg.context_length
        assert run["tokens_per_s"] > 0 and run["train_tokens_per_s"] > 0, label
    assert res["device"] == "cpu" and res["steps"] == 1
    for bad in (dict(steps=0), dict(warmup=-1), dict(steps=True)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            bench_notebooks("cpu", **bad)


def test_notebook_runs_mirror_the_notebook_comparisons():
    runs = notebook_runs(500)
    assert runs["01 [1000]"][0].spans.alphas == (1.0, 0.0, 0.0, 0.0) and runs["01 standard"][0].spans is None
    assert (runs["02 LS"][0].n_local, runs["02 LS"][0].window) == (3, 16) and runs["02 MHSA"][0].n_local == 0
    assert all(cfg.vocab_size == 500 for cfg, _ in runs.values())


def test_bench_spans_structure_on_cpu():
    res = bench_spans("cpu", repeats=1, warmup=0, config="notebook", threads=1)
    json.dumps(res)
    assert set(res["step_ms"]) == {"standard_fused", "standard_explicit", "kv8_1000", "qk4_1000"}  # no compile on CPU
    ms = res["step_ms"]
    assert res["ratios"]["kv8_over_fused"] == pytest.approx(ms["kv8_1000"]["median"] / ms["standard_fused"]["median"])
    detail = res["ratio_detail"]["kv8_over_fused"]
    assert detail["median"] == res["ratios"]["kv8_over_fused"]
    assert detail["wall_median"] == pytest.approx(ms["kv8_1000"]["wall_median"] / ms["standard_fused"]["wall_median"])
    assert res["timing"]["clock"].startswith("thread CPU time, 1 torch thread") and res["threads"] == 1
    assert set(res["meets_targets"]) == {"kv8_over_fused", "qk4_over_fused"}
    with pytest.raises(ValueError, match="config"):
        bench_spans("cpu", config="huge")


def test_measure_interleaves_reverses_and_times_one_thread():
    """The bench's one timing function: round-robin, order reversed every other round, warm-up rounds untimed,
    one torch thread while timing (restored after), a value per timed round on both clocks."""
    calls, threads = [], []

    def step(name):
        def run():
            calls.append(name)
            threads.append(torch.get_num_threads())
        return run

    before = torch.get_num_threads()
    t = core.measure({"a": step("a"), "b": step("b"), "c": step("c")}, repeats=3, warmup=1)
    assert calls == list("abc" "cba" "abc" "cba") and set(threads) == {1}
    assert torch.get_num_threads() == before
    assert all(len(v) == 3 for v in (*t.cpu.values(), *t.wall.values()))
    r = t.ratio("a", "b")
    assert r["median"] == pytest.approx(np.median(t.cpu["a"]) / np.median(t.cpu["b"]))
    assert r["min"] == pytest.approx(min(t.cpu["a"]) / min(t.cpu["b"])) and "wall_median" in r
    calls.clear()
    core.measure({"a": step("a"), "b": step("b")}, repeats=1, warmup=0, warm_each=True)
    assert calls == ["a", "a", "b", "b"]  # an untimed call right before each timed one


def test_bench_writes_each_section_as_it_finishes_and_starts_no_browser_unless_asked(monkeypatch, tmp_path):
    """`spanviz bench --out FILE`: the file holds every finished section while later ones run; the widget section
    starts JupyterLab and Chromium only with --browser."""
    seen = []

    def first(quick: bool = False) -> dict:
        return {"value": 1, "quick": quick}

    def second() -> dict:
        seen.append(json.loads((tmp_path / "bench.json").read_text()))  # the first section is on disk already
        return {"value": 2}

    monkeypatch.setitem(bench.SECTIONS, "first", ("test_bench", "first"))
    monkeypatch.setitem(bench.SECTIONS, "second", ("test_bench", "second"))
    monkeypatch.setitem(sys.modules, "test_bench", sys.modules[__name__])
    globals().update(first=first, second=second)

    def write(name, results):
        (tmp_path / "bench.json").write_text(json.dumps(results))

    results = bench.run_benchmarks(only="first,second", device="cpu", quick=True, on_section=write)
    assert seen and seen[0]["first"]["value"] == 1 and "second" not in seen[0]
    assert results["second"]["value"] == 2 and results["first"]["quick"] is True
    assert json.loads((tmp_path / "bench.json").read_text())["second"]["value"] == 2

    def no_browser(*args, **kwargs):
        raise AssertionError("a browser was started without --browser")

    monkeypatch.setattr(widgets, "bench_browser", no_browser)
    monkeypatch.setattr(widgets, "bench_sliders", lambda repeats: {})
    monkeypatch.setattr(widgets, "bench_dashboard", lambda **kw: {})
    assert "skipped" in widgets.bench_widgets(quick=True)["browser"]


def test_bench_growth_reports_time_and_p1_per_context_and_a_fresh_process_peak_rss():
    res = bench_growth(contexts=(16, 32), repeats=1, rss=False)
    json.dumps(res)
    assert set(res["T"]) == {16, 32} and set(res["p1"]) == {16, 32} and "skipped" in res["peak_rss_mb"]
    for T, row in res["T"].items():
        assert set(row["step_ms"]) == {"standard_fused", "standard_explicit", "kv8_1000", "qk4_1000"}
        assert row["ratios"]["kv8_over_fused"] == res["p1"][T]
    res["T"][16]["peak_rss_mb"] = {"standard_fused": 500.0}
    table = growth_table(res)
    assert table.count("\n") == 3 and table.splitlines()[2].startswith("| 16 |") and " 500 |" in table
    small, large = peak_rss("standard_explicit", (16, 256)).values()
    assert 50 < small < large  # a torch process; the explicit path's (B, H, T, T) tensors grow with T


def _record_sections(monkeypatch) -> dict[str, dict]:
    """Replace every bench section by a recorder of the keyword arguments it was called with."""
    calls: dict[str, dict] = {}

    def recorder(name):
        def section(device="cpu", quick=False, data_dir=None, browser=False, focus=False):
            calls[name] = dict(quick=quick, focus=focus, browser=browser)
            return {"ran": name}
        return section

    for name in list(bench.SECTIONS):
        monkeypatch.setitem(bench.SECTIONS, name, ("test_bench", f"fake_{name}"))
        globals()[f"fake_{name}"] = recorder(name)
    monkeypatch.setitem(sys.modules, "test_bench", sys.modules[__name__])
    return calls


def test_quick_measures_issue_23s_table_and_says_how_to_run_the_rest(monkeypatch):
    """`spanviz bench --quick`: core, spans, growth and widgets in their focused quick form; ls, fp8, notebooks and
    the sweep are not run and say which command runs them. With --only, a named section runs (quick, unfocused)."""
    calls = _record_sections(monkeypatch)
    res = bench.run_benchmarks(device="cpu", quick=True)
    assert set(calls) == set(bench.QUICK) == {"core", "spans", "growth", "widgets"}
    assert all(c["quick"] and c["focus"] and not c["browser"] for c in calls.values())
    for name in ("ls", "fp8", "notebooks", "sweep"):
        assert f"spanviz bench --only {name}" in res[name]["skipped"]
    assert res["environment"]["quick_measures"] == bench.QUICK
    assert res["environment"]["code"] == provenance.code_identity()  # the JSON says which code it measured
    calls.clear()
    res = bench.run_benchmarks(only="ls,core,sweep", device="cpu", quick=True)
    assert calls == {"ls": dict(quick=True, focus=False, browser=False), "core": dict(quick=True, focus=False,
                                                                                     browser=False)}
    assert "skipped" in res["sweep"]  # the sweep never runs quick
    calls.clear()
    bench.run_benchmarks(device="cpu")
    assert set(calls) == set(bench.SECTIONS) and not any(c["quick"] or c["focus"] for c in calls.values())


def test_each_section_records_its_cpu_time_children_included(monkeypatch):
    def busy():
        t0 = time.process_time()
        while time.process_time() - t0 < 0.3:
            pass
        subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\n"
                        "while time.process_time() - t < 0.3: pass"], check=True)
        return {}

    monkeypatch.setitem(bench.SECTIONS, "busy", ("test_bench", "busy"))
    monkeypatch.setitem(sys.modules, "test_bench", sys.modules[__name__])
    globals()["busy"] = busy
    res = bench.run_benchmarks(only="busy", device="cpu")["busy"]
    assert res["section_cpu_s"] >= 0.55 and res["section_wall_s"] >= 0.55
    assert res["section_end_load_average"] >= 0


def test_focused_sections_skip_what_issue_23s_table_does_not_name(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("measured although --quick leaves it out")

    monkeypatch.setattr(core, "bench_step_ratio", never)
    assert "skipped" in core.bench_core("cpu", quick=True, focus=True)["step_ratio"]
    monkeypatch.setattr(widgets, "bench_dashboard", never)
    monkeypatch.setattr(widgets, "bench_sliders", lambda repeats: {"repeats": repeats})
    res = widgets.bench_widgets(quick=True, focus=True)
    assert "skipped" in res["dashboard"] and res["sliders"] == {"repeats": 8} and "skipped" in res["browser"]


def test_quick_growth_times_standard_kv8_and_qk4_at_t512_four_rounds(monkeypatch):
    from spanviz.bench import spans as bench_spans_module

    seen = []

    def fake_steps(base, batch_size, dev, seed):
        seen.append(base["context_length"])
        return {n: (lambda: None) for n in ("standard_fused", "standard_explicit", "kv8_1000", "qk4_1000")}

    real_measure = bench_spans_module.measure
    rounds = []

    def counting_measure(steps, repeats, **kw):
        rounds.append((repeats, kw.get("warmup"), tuple(steps)))
        return real_measure(steps, repeats, **kw)

    monkeypatch.setattr(bench_spans_module, "_steps", fake_steps)
    monkeypatch.setattr(bench_spans_module, "measure", counting_measure)
    monkeypatch.setattr(bench_spans_module, "peak_rss", lambda *a: pytest.fail("no fresh processes in --quick"))
    res = bench_growth(quick=True)
    assert seen == [512] and rounds == [(4, 1, ("standard_fused", "kv8_1000", "qk4_1000"))]
    assert set(res["p1"]) == {512} and set(res["meets_targets"]) == {"kv8_over_fused_T512"}
    assert set(res["T"][512]["ratios"]) == {"kv8_over_fused", "qk4_over_fused"}
    assert res["T"][512]["rounds"] == 4


def test_full_growth_times_more_rounds_where_a_step_is_cheap(monkeypatch):
    """A T 128 step is a tenth of a T 1024 one: 16 rounds there cost what 4 cost at T 512 (even everywhere)."""
    from spanviz.bench import spans as bench_spans_module

    monkeypatch.setattr(bench_spans_module, "_steps", lambda base, *a: {
        n: (lambda: None) for n in ("standard_fused", "standard_explicit", "kv8_1000", "qk4_1000")})
    res = bench_growth(rss=False)
    assert {T: row["rounds"] for T, row in res["T"].items()} == {128: 16, 256: 8, 512: 4, 1024: 4}
    assert "rounds" not in res["timing"] and res["timing"]["clock"]


def test_first_picks_visit_every_spans_pick_once_one_dropdown_at_a_time():
    """The browser bench's first visits: from the spans panel's first pick, each step changes one dropdown to a
    value it offers and lands on a (preset, layer, head) not visited before, until all of them are — every measured
    pick a first visit — and the sequence is measured before the controls that revisit picks."""
    from spanviz.bench.browser import BROWSER_CONTROLS, FIRST_PICKS
    from spanviz.spans.config import PRESETS

    model = widgets.NOTEBOOK_MODELS["spans"]
    options = {"preset": list(PRESETS), "layer": [str(i) for i in range(model["n_layer"])],
               "head": [str(h) for h in range(model["n_head"])]}
    pick = {"preset": "kv8", "layer": "0", "head": "0"}  # SpansPanel's first pick
    seen = {tuple(pick.values())}
    for label, value in FIRST_PICKS:
        assert value in options[label] and value != pick[label], (label, value, pick)
        pick[label] = value
        key = tuple(pick.values())
        assert key not in seen, key
        seen.add(key)
    assert len(seen) == len(options["preset"]) * len(options["layer"]) * len(options["head"])
    spans_controls = [n for n in BROWSER_CONTROLS if n.startswith("spans_")]
    assert spans_controls[0] == "spans_first_pick" and BROWSER_CONTROLS["spans_first_pick"][3] == FIRST_PICKS
