"""Smoke tests for the LS-attention experiment (tiny runs), its verdict rule, and the LS benchmark."""

from __future__ import annotations

import json

import pytest

from spanviz.bench.ls import bench_ls, mask_shares
from spanviz.experiments import ls as exp
from spanviz.experiments.results import summarize
from spanviz.train import RunRecord

TINY = dict(model=dict(context_length=32, n_layer=1, n_head=4, d_model=32), window=4, probe_every=2,
            train=dict(batch_size=2, eval_iters=1))  # fmt: skip




def test_sweep_structure_on_synthetic_data(synthetic):
    res = exp.ls_sweep(seeds=1, steps=5, data=synthetic, **TINY)
    json.dumps(res)
    assert res["seeds"] == [0] and set(res["variants"]) == {"mhsa", "ls", "qk_norm"}
    ls_model = res["variants"]["ls"]["model"]
    assert (ls_model["n_local"], ls_model["window"], ls_model["context_length"]) == (3, 4, 32)
    assert res["variants"]["mhsa"]["model"]["n_local"] == 0 and res["variants"]["qk_norm"]["model"]["qk_norm"]
    assert {m["model"]["attn_backend"] for m in res["variants"].values()} == {"sdpa"}  # one kernel for all
    metrics = {(r["variant"], r["metric"]) for r in res["rows"]}
    assert metrics == {(v, m) for v in exp.VARIANTS for m in ("best_val_loss", *exp.GROWTH_METRICS)}
    assert res["mhsa_grows_faster"] is None and "one seed" in res["verdict"]
    assert [(r["variant"], r["seed"]) for r in res["per_seed"]] == [("mhsa", 0), ("ls", 0), ("qk_norm", 0)]
    assert len(res["comparisons"]) == 5 and all(r["p"] is None for r in res["rows"])  # one seed: no test
    assert [(r["variant"], r["seed"]) for r in res["runs"]] == [("mhsa", 0), ("ls", 0), ("qk_norm", 0)]
    for run in res["runs"]:
        assert run["status"] == "finished"
        assert run["step"] == list(range(5)) and len(run["train_loss"]) == 5
        assert run["probe_step"] == [0, 2, 4]
        assert len(run["max_per_layer"]) == 3 and len(run["max_per_layer"][0]) == 1
        assert run["peak_max_logit"] == max(run["max_logit"]) > 0
        assert run["final_max_logit"] == run["max_logit"][-1]
    ls_run = res["runs"][1]
    assert max(ls_run["local_heads_peak"], ls_run["global_heads_peak"]) == pytest.approx(ls_run["peak_max_logit"])
    assert res["runs"][0]["local_heads_peak"] is None  # MHSA has no local heads


def test_sweep_replays_from_a_store(synthetic, tmp_path):
    from spanviz.store import ResultsStore

    store = ResultsStore(tmp_path / "runs")
    calls = []
    first = exp.ls_sweep(seeds=[3], steps=3, data=synthetic, store=store, **TINY)
    again = exp.ls_sweep(seeds=[3], steps=3, data=synthetic, store=store, progress=lambda *a: calls.append(a), **TINY)
    assert first["runs"] == again["runs"]
    assert len(calls) == 3 and all("replayed" in label for _, _, label in calls)


def test_sweep_on_wikitext_default_data_path(wikitext_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path))
    res = exp.ls_sweep(seeds=1, steps=2, data_dir=wikitext_dir, **TINY)
    assert res["data"]["splits"] == {"train": "validation", "eval": "test"}
    assert res["data"]["tokenizer"] == "byte" and res["variants"]["ls"]["model"]["vocab_size"] == 256


def _record(variant: str, seed: int, curve: list[float]) -> RunRecord:
    n = len(curve)
    history = {"step": list(range(n)), "train_loss": [1.0] * n, "val_loss": [None] * (n - 1) + [1.0],
               "logits/max": curve}  # fmt: skip
    return RunRecord(config={"variant": variant, "seed": seed}, history=history, status="finished")


def _rows(records):
    from spanviz.experiments.results import per_seed_table
    from spanviz.experiments.stats import compare_groups

    table = per_seed_table(records, {"best_val_loss": "best_val_loss",
                                     **{name: getattr(exp, name) for name in exp.GROWTH_METRICS}})  # fmt: skip
    return compare_groups(table, [{"baseline": "mhsa", "metric": m} for m in ("best_val_loss", *exp.GROWTH_METRICS)])


def test_growth_verdict_says_yes_no_or_unresolved_from_paired_tests():
    mhsa = [_record("mhsa", s, [1, 10 + 3 * s, 20 + 20 * s]) for s in range(5)]
    low_ls = [_record("ls", s, [1, 4 + 3 * s, 5 + 20 * s + 0.1 * (-1) ** s]) for s in range(5)]
    high_ls = [_record("ls", s, [1, 30 + 3 * s, 40 + 20 * s + 0.1 * (-1) ** s]) for s in range(5)]
    noisy_ls = [_record("ls", s, [1, 5, v]) for s, v in enumerate((5.0, 41.0, 17.0, 30.0, 22.0))]
    sentence, yes = exp.growth_verdict(_rows(mhsa + low_ls))
    assert yes is True and sentence.startswith("Does MHSA's max logit grow faster than LS's? yes")
    assert "paired t(4)" in sentence and "Holm p" in sentence
    assert exp.growth_verdict(_rows(mhsa + high_ls))[1] is False
    sentence, unresolved = exp.growth_verdict(_rows(mhsa + noisy_ls))
    assert unresolved is None and "not resolved (within noise)" in sentence
    # the seeds share a large offset: unpaired, these peaks would not separate; paired, they do
    peak = next(r for r in _rows(mhsa + low_ls) if r["variant"] == "ls" and r["metric"] == "peak_max_logit")
    assert peak["p_holm"] < 0.05 < peak["welch_p"]
    with pytest.raises(ValueError, match="peak_max_logit"):
        exp.growth_verdict(summarize(mhsa + low_ls, "best_val_loss", baseline="mhsa"))


def test_run_metrics_on_a_known_curve():
    rec = _record("mhsa", 0, [2.0, 6.0, 4.0, 8.0])
    assert exp.peak_max_logit(rec) == 8.0 and exp.final_max_logit(rec) == 8.0
    assert exp.mean_max_logit(rec) == 5.0
    assert exp.slope_per_100(rec) == pytest.approx(100 * 1.6)  # least squares: slope 1.6 per update


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(size="tpu"), "size"),
        (dict(seeds=0), "seeds"),
        (dict(seeds=[1, 1]), "seeds"),
        (dict(steps=0), "steps"),
        (dict(probe_every=0), "every"),
        (dict(window=0), "window"),
    ],
)
def test_bad_arguments_raise_value_error(synthetic, kwargs, field):
    with pytest.raises(ValueError, match=field):
        exp.ls_sweep(data=synthetic, **{**TINY, "steps": 2, **kwargs})


# ============================================================================================ benchmark
def test_mask_shares_are_exact_for_the_papers_shape():
    shares = mask_shares(T=2048, n_head=6, n_local=5, window=50)
    local_pairs = 50 * 51 // 2 + (2048 - 50) * 50  # sum over i of min(i + 1, p)
    causal_pairs = 2048 * 2049 // 2
    assert shares["pairs"] == pytest.approx((5 * local_pairs + causal_pairs) / (6 * causal_pairs))
    # 16 query blocks of 128: a local head touches the diagonal tile and the one before it (p = 50 < 128)
    assert shares["blocks"] == pytest.approx((5 * (16 + 15) + 136) / (6 * 136))


def test_bench_ls_structure_on_cpu():
    res = bench_ls("cpu", T=64, n_head=2, d_head=8, n_local=1, window=8, repeats=1, warmup=0)
    json.dumps(res)
    assert res["cases"] == ["dense_causal_sdpa", "ls_sdpa", "ls_explicit"]
    for case in res["cases"]:
        assert res["ms"][case]["forward"] > 0 and res["ms"][case]["forward_backward"] > 0
    assert res["ratio_vs_dense"]["dense_causal_sdpa"] == {"forward": 1.0, "forward_backward": 1.0}
    assert res["dtype"] == "float32" and "caveat" in res
    with pytest.raises(ValueError, match="n_local"):
        bench_ls("cpu", n_head=2, n_local=3)
    with pytest.raises(ValueError, match="dtype"):
        bench_ls("cpu", dtype="fp8")
