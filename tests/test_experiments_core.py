"""run_grid (train once, replay from the store, seeds applied) and summarize / format_table (verdicts)."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from scipy import stats

import spanviz.experiments.core as core
from spanviz.data import OFFLINE_SPLITS, prepare_tokens
from spanviz.experiments.core import run_grid
from spanviz.experiments.results import format_table, metric_value, per_seed_table, read_per_seed, save_sweep, summarize
from spanviz.experiments.stats import (
    WITHIN_NOISE,
    claim_verdict,
    compare_groups,
    equivalence_test,
    holm,
    paired_comparison,
    significant_words,
)
from spanviz.model import GPTConfig
from spanviz.store import ResultsStore
from spanviz.train import RunRecord, TrainConfig

_DATA: dict[str, object] = {}



@pytest.fixture
def data(wikitext_dir, tmp_path_factory, monkeypatch):
    if "data" not in _DATA:
        monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path_factory.mktemp("spanviz_home")))
        _DATA["data"] = prepare_tokens(wikitext_dir, splits=OFFLINE_SPLITS, max_vocab=512, offline=True)
    return _DATA["data"]


@pytest.fixture
def trainers(monkeypatch):
    """Counts Trainer constructions inside run_grid."""
    built = []

    class CountingTrainer(core.Trainer):
        def __init__(self, *args, **kwargs):
            built.append(kwargs.get("extra_config"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(core, "Trainer", CountingTrainer)
    return built


def variants(data):
    model = GPTConfig(vocab_size=data.vocab_size, context_length=64, n_layer=2, n_head=4, d_model=64)
    train = TrainConfig(steps=3, batch_size=8, lr=3e-3, warmup_steps=1, eval_interval=2, eval_iters=1, seed=99,
                        device="cpu")
    return {"standard": (model, train), "high_lr": (model, replace(train, lr=1e-2))}


# ============================================================================================ run_grid
def test_run_grid_trains_once_then_replays_from_the_store(data, trainers, tmp_path):
    calls = []
    first = run_grid(variants(data), [0, 1], data, store=ResultsStore(tmp_path), tags={"experiment": "demo"},
                     progress=lambda done, total, label: calls.append((done, total, label)))
    assert len(trainers) == 4 and len(first) == 4
    expected = ["standard seed 0", "standard seed 1", "high_lr seed 0", "high_lr seed 1"]
    assert [label for _, _, label in calls] == expected
    assert [(d, t) for d, t, _ in calls] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert len(ResultsStore(tmp_path).list()) == 4

    calls.clear()
    again = run_grid(variants(data), [0, 1], data, store=ResultsStore(tmp_path), tags={"experiment": "demo"},
                     progress=lambda done, total, label: calls.append(label))
    assert len(trainers) == 4  # nothing trained the second time
    assert all(label.endswith("(replayed)") for label in calls)
    assert [r.to_dict() for r in again] == [r.to_dict() for r in first]

    run_grid(variants(data), [0, 1], data, store=ResultsStore(tmp_path), tags={"experiment": "other"})
    assert len(trainers) == 8  # tags are part of the key


def test_run_grid_applies_seeds_and_records_variant_seed_tags(data, trainers):
    records = run_grid(variants(data), [5, 6], data, tags={"experiment": "demo"})
    assert [(r.config["variant"], r.config["seed"], r.config["train"]["seed"]) for r in records] == [
        ("standard", 5, 5), ("standard", 6, 6), ("high_lr", 5, 5), ("high_lr", 6, 6)]
    assert all(r.config["tags"] == {"experiment": "demo"} and r.status == "finished" for r in records)
    assert records[0].history["train_loss"] != records[1].history["train_loss"]  # seeds really differ
    assert records[0].config["train"]["lr"] == 3e-3 and records[2].config["train"]["lr"] == 1e-2
    run_grid(variants(data), [5], data)
    assert len(trainers) == 6  # no store: always trains


def test_run_grid_probes_factory_gets_fresh_probes_per_run(data, trainers, tmp_path):
    made = []

    class Probe:
        every = 2

        def __init__(self, name, scale):
            self.name, self.scale = name, scale

        def __call__(self, trainer):
            return {f"{self.name}/x": self.scale}

    def factory(variant, model_cfg):
        made.append((variant, model_cfg.d_model))
        return [Probe("p", 1.0)]

    records = run_grid({"standard": variants(data)["standard"]}, [0, 1], data, probes_factory=factory,
                       store=ResultsStore(tmp_path))
    assert made == [("standard", 64), ("standard", 64)]
    assert records[0].history["p/x"] == [1.0, None, 1.0]
    assert records[0].config["probes"][0]["settings"] == {"scale": 1.0}
    run_grid({"standard": variants(data)["standard"]}, [0], data, store=ResultsStore(tmp_path),
             probes_factory=lambda v, m: [Probe("p", 2.0)])
    assert len(trainers) == 3  # other probe settings, other key: trained


def test_a_stopped_run_ends_the_grid_and_is_not_stored_but_diverged_runs_are(data, trainers, tmp_path):
    def stop(trainer, row):
        trainer.request_stop()

    store = ResultsStore(tmp_path)
    records = run_grid(variants(data), [0, 1], data, store=store, callbacks=[stop])
    assert [r.status for r in records] == ["stopped"] and store.list() == []

    def corrupt(trainer, row):
        with torch.no_grad():
            trainer.model.wte.weight.fill_(math.nan)

    records = run_grid(variants(data), [0], data, store=store, callbacks=[corrupt])
    assert [r.status for r in records] == ["diverged", "diverged"] and len(store.list()) == 2
    replayed = run_grid(variants(data), [0], data, store=store)
    assert [r.status for r in replayed] == ["diverged", "diverged"]
    assert len(trainers) == 3


def test_run_grid_rejects_bad_input_before_training(data, trainers):
    good = variants(data)
    model, train = good["standard"]
    bad_calls = [
        (({}, [0]), "variants"),
        (({"": (model, train)}, [0]), "variant names"),
        (({"x": (train, model)}, [0]), "variants\\['x'\\]"),
        (({"x": [model, train]}, [0]), "variants\\['x'\\]"),
        ((good, []), "seeds"),
        ((good, [0, 0]), "distinct"),
        ((good, [-1]), "seeds"),
        ((good, [True]), "seeds"),
        ((good, [1.5]), "seeds"),
    ]
    for (v, seeds), message in bad_calls:
        with pytest.raises(ValueError, match=message):
            run_grid(v, seeds, data)
    with pytest.raises(ValueError, match="tags"):
        run_grid(good, [0], data, tags=["a"])
    with pytest.raises(ValueError, match="JSON"):
        run_grid(good, [0], data, tags={"when": object()})
    assert trainers == []


# ========================================================================================== statistics
# Student's sleep data (Cushny & Peebles 1905): extra hours of sleep with two drugs, same 10 patients. R's
# documented results: t.test(extra ~ group, paired = TRUE) → t = −4.0621, df = 9, p = 0.002833, 95 % CI
# −2.4598858 … −0.7001142, mean difference −1.58; Welch: t = −1.8608, df = 17.776, p = 0.07939.
SLEEP_1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]


def test_paired_comparison_reproduces_a_known_paired_example():
    result = paired_comparison(dict(enumerate(SLEEP_2)), dict(enumerate(SLEEP_1)))
    assert result["n_pairs"] == 10 and result["df"] == 9 and result["seeds"] == list(range(10))
    assert result["diff"] == pytest.approx(-1.58)
    assert result["t"] == pytest.approx(-4.0621, abs=1e-4) and result["p"] == pytest.approx(0.002833, abs=1e-6)
    assert (result["ci_low"], result["ci_high"]) == (pytest.approx(-2.4598858), pytest.approx(-0.7001142))
    assert result["welch_t"] == pytest.approx(-1.8608, abs=1e-4)
    assert result["welch_df"] == pytest.approx(17.776, abs=1e-3)
    assert result["welch_p"] == pytest.approx(0.07939, abs=1e-5)
    # by hand: t = mean(d) / (sd(d)/√n); the interval uses t_{0.975, 9} = 2.262157 (tables)
    d = [a - b for a, b in zip(SLEEP_1, SLEEP_2)]
    se = statistics.stdev(d) / math.sqrt(10)
    assert result["t"] == pytest.approx(statistics.fmean(d) / se)
    assert result["ci_high"] - result["ci_low"] == pytest.approx(2 * 2.262157 * se, rel=1e-6)
    base = statistics.fmean(SLEEP_2)
    assert result["rel_change_pct"] == pytest.approx(-158 / base) and result["baseline_mean"] == pytest.approx(base)


def test_paired_comparison_pairs_by_seed_and_handles_degenerate_input():
    # only seeds present (and finite) in both arms pair; Welch uses every finite value of each arm
    partial = paired_comparison({0: 1.0, 1: 2.0, 2: 3.0, 3: None}, {1: 2.5, 2: 3.4, 3: 9.0, 4: float("nan")})
    assert partial["n_pairs"] == 2 and partial["seeds"] == [1, 2] and partial["diff"] == pytest.approx(0.45)
    one = paired_comparison({0: 1.0, 1: 2.0}, {0: 1.5})
    assert one["n_pairs"] == 1 and one["t"] is None and one["p"] is None and one["ci_low"] is None
    same = paired_comparison({0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.0})
    assert same["p"] is None and same["diff"] == 0 and same["ci_low"] == same["ci_high"] == 0
    shifted = paired_comparison({0: 1.0, 1: 2.0}, {0: 1.5, 1: 2.5})  # the same difference in every seed
    assert shifted["t"] is None and shifted["p"] == 0.0
    json.dumps([partial, one, same, shifted], allow_nan=False)
    for bad, field in (({"a": 1.0}, "seeds"), (None, "mapping")):
        with pytest.raises(ValueError, match=field):
            paired_comparison(bad, {0: 1.0})
    with pytest.raises(ValueError, match="confidence"):
        paired_comparison({0: 1.0}, {0: 1.0}, confidence=95)


def test_holm_matches_a_hand_computed_example():
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, max(0.04·1, 0.06) = 0.06; None is not counted
    assert holm([0.01, 0.04, 0.03, None, 0.005]) == pytest.approx([0.03, 0.06, 0.06, None, 0.02])
    assert holm([0.5, 0.9]) == [1.0, 1.0]  # capped at 1
    assert holm([]) == [] and holm([None]) == [None]
    with pytest.raises(ValueError, match="p-values"):
        holm([1.5])


def table(values: dict[str, list[float | None]], **extra) -> list[dict]:
    return [{"variant": name, "seed": seed, "status": "finished", "loss": v, **extra}
            for name, vs in values.items() for seed, v in enumerate(vs)]  # fmt: skip


def test_compare_groups_verdicts_come_out_both_ways_and_pairing_matters():
    seed_effect = [1.0, 2.0, 3.0, 4.0, 5.0]  # a large shared per-seed offset, as runs of one seed have
    rows = {r["variant"]: r for r in compare_groups(table({
        "standard": seed_effect,
        "lower": [v - 0.10 + e for v, e in zip(seed_effect, (0.01, -0.01, 0.02, 0.0, -0.02))],
        "higher": [v + 0.20 + e for v, e in zip(seed_effect, (0.01, -0.01, 0.02, 0.0, -0.02))],
        "noise": [v + e for v, e in zip(seed_effect, (0.3, -0.2, 0.1, -0.3, 0.15))],
    }), [{"baseline": "standard", "metric": "loss"}])}
    assert list(rows) == ["standard", "lower", "higher", "noise"] and rows["standard"]["verdict"] == "baseline"
    assert rows["lower"]["verdict"] == "significant at 5 % after Holm: lower (better) than standard"
    assert rows["higher"]["verdict"] == "significant at 5 % after Holm: higher (worse) than standard"
    assert rows["noise"]["verdict"] == "within noise"
    # Welch ignores the pairing and sees only the seed spread: far from significant
    assert rows["lower"]["p_holm"] < 0.05 < rows["lower"]["welch_p"]
    # the Holm family is these three comparisons
    ps = [rows[n]["p"] for n in ("lower", "higher", "noise")]
    assert [rows[n]["p_holm"] for n in ("lower", "higher", "noise")] == pytest.approx(holm(ps))
    flipped = {r["variant"]: r for r in compare_groups(table({"standard": seed_effect, "lower": [
        v - 0.1 + e for v, e in zip(seed_effect, (0.01, -0.01, 0.02, 0.0, -0.02))]}),
        [{"baseline": "standard", "metric": "loss", "lower_is_better": False}])}  # fmt: skip
    assert flipped["lower"]["verdict"].endswith("lower (worse) than standard")


def test_claim_verdict_words_a_claim_by_its_test():
    seed_effect = [1.0, 2.0, 3.0, 4.0, 5.0]
    jitter = (0.01, -0.01, 0.02, 0.0, -0.02)
    rows = {r["variant"]: r for r in compare_groups(table({
        "standard": seed_effect,
        "lower": [v - 0.10 + e for v, e in zip(seed_effect, jitter)],
        "noise": [v + e for v, e in zip(seed_effect, (0.3, -0.2, 0.1, -0.3, 0.15))],
    }), [{"baseline": "standard", "metric": "loss"}])}
    assert claim_verdict(rows["lower"], "lower") == "shown to be lower (significant at 5 % after Holm)"
    assert claim_verdict(rows["lower"], "higher", "be worse") == (
        "not shown to be worse (significant at 5 % after Holm the other way: lower)")
    assert claim_verdict(rows["noise"], "lower", "grow less than MHSA's") == (
        "not shown to grow less than MHSA's (within noise)")
    assert WITHIN_NOISE == "within noise" and rows["noise"]["verdict"] == WITHIN_NOISE
    assert rows["lower"]["verdict"].startswith(significant_words())
    one = compare_groups(table({"standard": [1.0], "x": [2.0]}), [{"baseline": "standard", "metric": "loss"}])[1]
    assert claim_verdict(one, "lower") == "cannot tell: one seed"
    with pytest.raises(ValueError, match="direction"):
        claim_verdict(rows["lower"], "smaller")
    with pytest.raises(ValueError, match="no paired test"):
        claim_verdict(rows["standard"], "lower")


def test_equivalence_test_is_the_paired_tost():
    base = {s: v for s, v in enumerate([5.0, 5.1, 4.9, 5.05, 4.95])}
    close = {s: v + e for s, v, e in zip(base, base.values(), (0.001, -0.002, 0.0015, 0.0, -0.001))}
    wide = {s: v + e for s, v, e in zip(base, base.values(), (0.05, -0.04, 0.03, -0.05, 0.02))}
    # by hand: TOST at level a is equivalent iff the (1 − 2a) interval of mean(d) lies inside ±margin
    for arm in (close, wide):
        d = [arm[s] - base[s] for s in base]
        mean, se = statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d))
        for margin in (0.005, 0.02, 0.08):
            result = equivalence_test(base, arm, margin)
            half = stats.t.ppf(0.95, len(d) - 1) * se
            assert result["equivalent"] == (-margin < mean - half and mean + half < margin)
            assert result["p"] == pytest.approx(max(stats.t.sf((mean + margin) / se, len(d) - 1),
                                                    stats.t.sf((margin - mean) / se, len(d) - 1)))
    assert equivalence_test(base, close, 0.005)["claim"] == "equivalent within ±0.005"
    assert equivalence_test(base, wide, 0.02)["verdict"].startswith("not shown to be equivalent within ±0.02 (paired TOST, p = ")
    relative = equivalence_test(base, close, 0.1, relative=True)  # 0.1 % of the baseline mean 5.0 = 0.005
    assert relative["margin"] == pytest.approx(0.005) and relative["claim"] == "equivalent within ±0.1 %"
    shifted = equivalence_test({0: 1.0, 1: 2.0}, {0: 1.5, 1: 2.5}, 1.0)  # no spread: no test
    assert shifted["p"] is None and not shifted["equivalent"] and "p undefined" in shifted["verdict"]
    for margin in (0, -1.0, float("nan"), True):
        with pytest.raises(ValueError, match="margin"):
            equivalence_test(base, close, margin)
    with pytest.raises(ValueError, match="alpha"):
        equivalence_test(base, close, 0.1, alpha=5)


def test_holm_across_a_sweep_can_turn_a_nominal_result_into_noise():
    """One comparison with p ≈ 0.02 alone is significant; among 7 comparisons of one sweep it is not."""
    base = [5.0, 5.1, 4.9, 5.05, 4.95]
    nominal = [b - 0.03 + e for b, e in zip(base, (0.01, -0.02, 0.03, -0.01, 0.0))]
    alone = compare_groups(table({"standard": base, "x": nominal}), [{"baseline": "standard", "metric": "loss"}])[1]
    assert alone["p"] < 0.05 and alone["p"] == alone["p_holm"] and alone["verdict"].startswith("significant")
    others = {f"null{i}": [b + e for b, e in zip(base, (0.1, -0.1, 0.05, -0.05, 0.01 * i))] for i in range(6)}
    family = compare_groups(table({"standard": base, "x": nominal, **others}),
                            [{"baseline": "standard", "metric": "loss"}])
    x = family[1]
    assert x["p"] == alone["p"] and x["p_holm"] > 0.05 and x["verdict"] == "within noise"


def test_compare_groups_families_filters_and_repeats():
    rows = table({"a": [1.0, 2.0, 3.0], "b": [1.5, 2.6, 3.4]}, group="g")
    rows += [{**r, "variant": "c"} for r in table({"x": [0.0, 0.0, 0.0]})]
    specs = [
        {"baseline": "a", "variants": ["a", "b"], "metric": "loss", "group": "first"},
        {"baseline": "a", "variants": ["b"], "metric": "loss", "group": "repeat"},  # the same test again
        {"by": "variant", "where": {"group": "g"}, "baseline": None, "metric": "loss"},
    ]
    out = compare_groups(rows, specs)
    assert [(r.get("group"), r["variant"]) for r in out] == [
        ("first", "a"), ("first", "b"), ("repeat", "a"), ("repeat", "b"), (None, "a"), (None, "b")]
    assert out[1]["p_holm"] == out[3]["p_holm"] == out[1]["p"]  # counted once: a family of one
    assert [r["variant"] for r in out[4:]] == ["a", "b"] and out[4]["verdict"] == "" and "p" not in out[4]
    for bad, needle in (([{"baseline": "a", "metric": "nope"}], "metric"), ([{"baseline": "z", "metric": "loss"}], "z"),
                        ([{"baseline": "a", "metric": "loss", "by": "colour"}], "colour")):  # fmt: skip
        with pytest.raises(ValueError, match=needle):
            compare_groups(rows, bad)
    with pytest.raises(ValueError, match="alpha"):
        compare_groups(rows, specs[:1], alpha=5)
    with pytest.raises(ValueError, match="at least one"):
        compare_groups([], specs)


# =========================================================================================== summarize
def rec(variant: str, value: float, seed: int = 0, status: str = "finished") -> RunRecord:
    return RunRecord(config={"variant": variant, "seed": seed},
                     history={"step": [0, 1], "val_loss": [value + 1.0, value], "train_loss": [9.0, value + 0.5]},
                     status=status)


def grid(values: dict[str, list[float]]) -> list[RunRecord]:
    return [rec(name, v, seed) for name, vs in values.items() for seed, v in enumerate(vs)]


def test_summarize_records_paired_by_seed():
    records = grid({
        "standard": [1.0, 1.1, 0.9],
        "better": [0.5, 0.62, 0.41],
        "noise": [1.12, 1.02, 1.22],
        "single": [0.2],
    })
    rows = {row["variant"]: row for row in summarize(records)}
    assert list(rows) == ["standard", "better", "noise", "single"]
    base = rows["standard"]
    assert base["n"] == 3 and base["mean"] == pytest.approx(1.0) and base["verdict"] == "baseline"
    assert base["std"] == pytest.approx(statistics.stdev([1.0, 1.1, 0.9])) == pytest.approx(0.1)
    assert (base["min"], base["max"]) == (0.9, 1.1) and base["rel_change_pct"] is None and base["p"] is None
    better = rows["better"]
    assert better["verdict"].startswith("significant at 5 % after Holm: lower (better)")
    assert better["rel_change_pct"] == pytest.approx(-49.0) and better["df"] == 2
    assert better["p"] == pytest.approx(paired_comparison({0: 1.0, 1: 1.1, 2: 0.9}, {0: 0.5, 1: 0.62, 2: 0.41})["p"])
    assert better["p_holm"] == pytest.approx(min(1.0, 2 * better["p"]))  # family: better, noise (single: 1 pair)
    assert rows["noise"]["verdict"] == "within noise" and rows["noise"]["rel_change_pct"] == pytest.approx(12.0)
    assert rows["single"]["verdict"] == "cannot tell: one seed" and rows["single"]["std"] is None


def test_summarize_one_seed_baseline_diverged_runs_and_metrics():
    rows = {r["variant"]: r for r in summarize(grid({"standard": [1.0], "other": [0.1, 0.2, 0.3]}))}
    assert rows["other"]["verdict"] == "cannot tell: one seed"

    records = grid({"standard": [1.0, 1.1, 0.9], "fragile": [0.5, 0.6]}) + [rec("fragile", 0.0, 2, "diverged")]
    fragile = summarize(records)[1]
    assert fragile["n"] == 2 and fragile["n_diverged"] == 1 and fragile["n_pairs"] == 2  # not averaged, not paired
    assert fragile["mean"] == pytest.approx(0.55)
    assert fragile["verdict"].endswith("; 1 of 3 runs diverged")

    final_train = summarize(grid({"standard": [1.0, 1.2]}), metric="final_train_loss")[0]
    assert final_train["mean"] == pytest.approx(1.6) and final_train["metric"] == "final_train_loss"
    assert metric_value(rec("a", 2.0), "val_loss") == 2.0
    assert metric_value(rec("a", 2.0), lambda r: 42.0) == 42.0
    none = summarize(grid({"a": [1.0, 2.0]}), baseline=None)[0]
    assert none["verdict"] == "" and "rel_change_pct" not in none
    per_seed = per_seed_table(records, ["best_val_loss"], info=lambda r: {"k": 1})
    assert per_seed[-1] == {"variant": "fragile", "seed": 2, "status": "diverged", "k": 1, "best_val_loss": None}
    assert summarize(per_seed, "best_val_loss") == summarize(records)  # per-seed rows give the same summary


def test_summarize_rejects_bad_input():
    with pytest.raises(ValueError, match="baseline"):
        summarize(grid({"a": [1.0]}))
    with pytest.raises(ValueError, match="metric"):
        summarize(grid({"standard": [1.0]}), metric="nope")
    with pytest.raises(ValueError, match="variant"):
        summarize([RunRecord(config={}, status="finished")])
    with pytest.raises(ValueError, match="at least one"):
        summarize([])


def test_save_sweep_writes_per_seed_files_that_recompute_the_verdicts(tmp_path):
    rows = table({"standard": [1.0, 1.1, 0.9, 1.05], "x": [0.8, 0.95, 0.7, 0.9]})
    rows[2]["note"] = "a, b"  # text with a comma survives the CSV
    specs = [{"baseline": "standard", "metric": "loss"}]
    result = {"rows": compare_groups(rows, specs), "per_seed": rows, "comparisons": specs, "runs": [{"curve": [1]}]}
    summary, as_json, as_csv = save_sweep(result, tmp_path / "out" / "sweep.json", runs=False)
    assert (as_json.name, as_csv.name) == ("sweep.per_seed.json", "sweep.per_seed.csv")
    saved = json.loads(summary.read_text())
    assert "runs" not in saved and "per_seed" not in saved and saved["rows"] == result["rows"]
    from_json, from_csv = read_per_seed(as_json), read_per_seed(as_csv)
    assert from_json == rows
    assert from_csv[2]["note"] == "a, b" and from_csv[0]["note"] is None and from_csv[3]["seed"] == 3
    assert as_csv.read_text().splitlines()[0] == "variant,seed,status,loss,note"
    for loaded in (from_json, from_csv):
        again = compare_groups(loaded, json.loads(summary.read_text())["comparisons"])
        assert [r["p_holm"] for r in again] == [r["p_holm"] for r in result["rows"]]
        assert [r["verdict"] for r in again] == [r["verdict"] for r in result["rows"]]
    with pytest.raises(ValueError, match="per_seed"):
        save_sweep({"rows": []}, tmp_path / "x.json")
    with pytest.raises(ValueError, match=".json"):
        save_sweep(result, tmp_path / "x.txt")


def test_format_table_lines_up_rows():
    rows = summarize(grid({"standard": [1.0, 1.1, 0.9], "better": [0.5, 0.62, 0.41]}))
    text = format_table(rows, ["variant", "mean", "rel_change_pct", "p", "verdict"])
    lines = text.splitlines()
    assert len(lines) == 4 and lines[0].split() == ["variant", "mean", "rel_change_pct", "p", "verdict"]
    assert set(lines[1]) <= {"-", " "}
    assert lines[2].startswith("standard") and "baseline" in lines[2]
    assert lines[3].startswith("better") and "significant at 5 % after Holm" in lines[3] and "-49" in lines[3]
    assert lines[0].index("mean") == lines[3].index("0.51")  # columns line up
    assert format_table(rows).splitlines()[0].split()[:3] == ["variant", "metric", "n"]  # every column by default
    assert format_table([]) == ""
    assert format_table([{"a": 1, "b": None}], columns=["b", "a"]).splitlines()[2].split() == ["-", "1"]


DOCS_RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


@pytest.mark.parametrize("summary", sorted(p.name.replace(".per_seed.json", ".json")
                                           for p in DOCS_RESULTS.glob("*.per_seed.json")))  # sweeps, not bench outputs
def test_the_numbers_in_docs_recompute_from_their_per_seed_files(summary):
    """docs/results holds the sweeps the docs quote: their per-seed CSV gives back every row and verdict."""
    saved = json.loads((DOCS_RESULTS / summary).read_text())
    stem = summary.removesuffix(".json")
    table = read_per_seed(DOCS_RESULTS / f"{stem}.per_seed.csv")
    assert table == read_per_seed(DOCS_RESULTS / f"{stem}.per_seed.json") and "per_seed" not in saved
    again = compare_groups(table, saved["comparisons"])
    assert len(again) == len(saved["rows"])
    for new, old in zip(again, saved["rows"]):
        assert new["verdict"] == old["verdict"]
        for key in ("mean", "std", "diff", "ci_low", "ci_high", "t", "p", "p_holm", "welch_p"):
            # rows described without a test (a comparison whose baseline is None) have no test columns at all
            assert (key in new) == (key in old), (summary, key)
            expected = None if old.get(key) is None else pytest.approx(old[key], rel=1e-9, abs=1e-12)
            assert new.get(key) == expected, (summary, key, new.get("variant"), new.get("strategy"))
