"""Smoke tests for the FP8 transients experiment and the WeightSwap callback (tiny models, few steps)."""

from __future__ import annotations

import json

import pytest
import torch

from spanviz.experiments import fp8 as exp
from spanviz.model import GPTConfig
from spanviz.train import TrainConfig, Trainer
from spanviz.train.config import lr_at

TINY_MODEL = dict(context_length=16, n_layer=1, n_head=2, d_model=32)
TINY_TRAIN = dict(batch_size=2, warmup_steps=0, eval_iters=1)




def test_weight_swap_overflows_delayed_scaling_only(synthetic):
    res = exp.fp8_transients(
        "weight_swap", steps=8, transient=exp.Transient(at_step=3, scale_wq=8.0), seeds=(0,), data=synthetic,
        model=TINY_MODEL, train=TINY_TRAIN, window=2,
    )  # fmt: skip
    json.dumps(res)
    assert res["event_step"] == 4  # first update on the swapped weights
    summary = {row["strategy"]: row for row in res["summary"]}
    assert set(summary) == {"delayed", "dynamic", "theory", "deterministic", "calibrated"}
    assert summary["delayed"]["overflow_during"] > 0
    for safe in ("deterministic", "dynamic"):  # from the weights alone / from the current amax
        assert all(summary[safe][k] == 0 for k in ("overflow_before", "overflow_during", "overflow_after")), safe
    assert summary["dynamic"]["median_utilisation"] == pytest.approx(1.0)  # the whole E4M3 range, every step
    history = res["runs"][0]["history"]
    assert history["step"] == list(range(8))
    amax = history["fp8/L0/max_abs_logit"]
    assert amax[4] > 4 * amax[3]  # logits jumped by ≈ scale_wq
    assert history["fp8/L0/overflow/delayed"][4] > 0 and history["fp8/L0/overflow/deterministic"][4] == 0
    assert "overflow_before" in exp.format_summary(res)


def test_fp8_sweep_keeps_runs_swaps_every_seed_and_tests_strategies_against_delayed(synthetic, tmp_path):
    from spanviz.experiments.results import read_per_seed, save_sweep
    from spanviz.experiments.stats import compare_groups
    from spanviz.store import ResultsStore

    kwargs = dict(seeds=2, steps=8, transient=exp.Transient(at_step=3, scale_wq=8.0), window=2, data=synthetic,
                  model=TINY_MODEL,
                  train=TINY_TRAIN, scenarios=("none", "weight_swap"), margins=(0,))  # fmt: skip
    store = ResultsStore(tmp_path / "runs")
    res = exp.fp8_sweep(store=store, **kwargs)
    json.dumps(res)
    assert len(store.list()) == 4 and res["event_step"] == {"none": 3, "weight_swap": 4}
    table = res["per_seed"]
    assert len(table) == 2 * 2 * 5  # variants × seeds × strategies
    swap = [r for r in table if r["scenario"] == "weight_swap" and r["strategy"] == "delayed"]
    assert [r["seed"] for r in swap] == [0, 1] and all(r["overflow_during"] > 0 for r in swap)  # each seed swapped
    assert all(r["overflow_during"] == 0 for r in table if r["strategy"] in ("deterministic", "dynamic"))
    assert all(0 < r["alpha_obs_median"] <= r["alpha_obs_max"] <= 1 for r in table)
    rows = {(r["scenario"], r["strategy"]): r for r in res["rows"]}
    assert rows[("weight_swap", "delayed")]["verdict"] == "baseline"
    for name in ("deterministic", "dynamic"):
        row = rows[("weight_swap", name)]
        assert row["diff"] < 0 and row["n_pairs"] == 2 and row["p"] is not None, name
    assert rows[("none", "deterministic")]["verdict"] in (
        "no difference in any seed", "within noise", "significant at 5 % after Holm: lower (better) than delayed")
    assert "weight_swap/margin=0: logits overflowing in the transient window — delayed in 2 of 2" in res["verdict"]
    # replayed from the store: nothing trains, the same table; the files recompute the same rows
    again = exp.fp8_sweep(store=store, progress=lambda *a: None, **kwargs)
    assert again["per_seed"] == table and len(store.list()) == 4
    _, per_seed_json, _ = save_sweep(res, tmp_path / "fp8.json", runs=False)
    recomputed = compare_groups(read_per_seed(per_seed_json), res["comparisons"])
    assert [r["p_holm"] for r in recomputed] == [r["p_holm"] for r in res["rows"]]
    with pytest.raises(ValueError, match="margins"):
        exp.fp8_sweep(**{**kwargs, "margins": (0, 0)})
    with pytest.raises(ValueError, match="size"):
        exp.fp8_sweep("gpu", data=synthetic)


def test_weight_swap_loads_checkpoint_weights(synthetic, tmp_path):
    cfg = GPTConfig(vocab_size=64, **TINY_MODEL)
    donor = Trainer(cfg, TrainConfig(steps=2, seed=1, device="cpu", **TINY_TRAIN), synthetic)
    donor.step(2)
    path = donor.save_checkpoint(tmp_path / "donor.pt")
    swap = exp.WeightSwap(at_step=0, checkpoint_path=path)
    trainer = Trainer(cfg, TrainConfig(steps=3, seed=0, device="cpu", **TINY_TRAIN), synthetic, callbacks=[swap])
    trainer.step(1)
    assert swap.applied_at == 0
    for name, p in donor.model.state_dict().items():
        torch.testing.assert_close(trainer.model.state_dict()[name], p, rtol=0, atol=0)
    trainer.step(1)  # fires once only
    assert not torch.equal(trainer.model.blocks[0].attn.W_Q.weight, donor.model.blocks[0].attn.W_Q.weight)


def test_lr_spike_on_wikitext(wikitext_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path))
    res = exp.fp8_transients(
        "lr_spike", steps=6, transient=exp.Transient(at_step=2, lr_spike_factor=20.0, lr_spike_steps=2), seeds=(0,),
        data_dir=wikitext_dir, max_vocab=512, model=TINY_MODEL, train=TINY_TRAIN,
    )  # fmt: skip
    assert res["data"]["splits"] == {"train": "validation", "eval": "test"}
    assert res["train"]["lr_spike_factor"] == 20.0 and res["train"]["lr_spike_start"] == 2
    plain = TrainConfig(**{k: v for k, v in res["train"].items() if not k.startswith("lr_spike")})
    expected = [lr_at(s, plain) * (20.0 if s in (2, 3) else 1.0) for s in range(6)]
    assert res["runs"][0]["history"]["lr"] == pytest.approx(expected)
    summary = {row["strategy"]: row for row in res["summary"]}
    assert summary["deterministic"]["steps_with_overflow"] == 0


def test_argument_errors(synthetic):
    for kwargs, field in [
        (dict(scenario="bogus"), "scenario"), (dict(steps=1), "steps"),
        (dict(transient=exp.Transient(at_step=7)), "at_step"), (dict(seeds=()), "seeds"), (dict(window=0), "window"),
        (dict(probe=exp.ProbeSettings(delta=2.0)), "delta"), (dict(transient={"at_step": 2}), "Transient"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=field):
            exp.fp8_transients(**{"steps": 8, "data": synthetic, **kwargs})
    with pytest.raises(ValueError, match="exactly one"):
        exp.WeightSwap(at_step=1)
    with pytest.raises(ValueError, match="exactly one"):
        exp.WeightSwap(at_step=1, checkpoint_path="x.pt", scale_wq=2.0)
    with pytest.raises(ValueError, match="scale_wq"):
        exp.WeightSwap(at_step=1, scale_wq=0.0)
    with pytest.raises(ValueError, match="at_step"):
        exp.WeightSwap(at_step=-1, scale_wq=2.0)


# ============================================================================================ benchmark
def test_bench_fp8_structure_and_consistency():
    """One interleaved repeat: the report's keys, its percentages, and the power estimate never above σ."""
    from spanviz.bench.fp8 import bench_fp8

    res = bench_fp8("cpu", repeats=1, threads=1)
    json.dumps(res)
    assert res["torch_threads"] == 1 and res["config"]["d_model"] == 128
    for name in ("exact", "exact_householder", "power_step", "power_step_prefolded"):
        assert res[f"{name}_ms"] > 0
        assert res[f"{name}_pct"] == pytest.approx(100 * res[f"{name}_ms"] / res["train_step_ms"])
    assert 0.5 < res["power_step_ratio"] <= 1 + 1e-5  # 5 warm-started steps so far; never an over-estimate
    assert res["targets"] == {"exact_pct": "<= 2", "power_step_pct": "<= 0.5"}
    assert res["meets_targets"]["exact_pct"] == (res["exact_pct"] <= 2)
    for bad in ({"repeats": 0}, {"threads": 0}, {"device": "nonsense"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            bench_fp8(**bad)
