"""Structure of the benchmark sections that have no test elsewhere (tiny CPU runs; nothing here times anything)."""

from __future__ import annotations

import json

import pytest

from spanviz.bench.notebooks import bench_notebooks, notebook_runs
from spanviz.bench.spans import bench_spans


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
    assert res["ratios"]["kv8_over_fused"] == pytest.approx(ms["kv8_1000"] / ms["standard_fused"])
    assert set(res["meets_targets"]) == {"kv8_over_fused", "qk4_over_fused"}
    with pytest.raises(ValueError, match="config"):
        bench_spans("cpu", config="huge")
