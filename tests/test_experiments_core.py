"""run_grid (train once, replay from the store, seeds applied) and summarize / format_table (verdicts)."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest
import torch

import spanviz.experiments.core as core
from spanviz.data import OFFLINE_SPLITS, prepare_tokens
from spanviz.experiments import ResultsStore, format_table, metric_value, run_grid, summarize
from spanviz.model import GPTConfig
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


# =========================================================================================== summarize
def rec(variant: str, value: float, seed: int = 0, status: str = "finished") -> RunRecord:
    return RunRecord(config={"variant": variant, "seed": seed},
                     history={"step": [0, 1], "val_loss": [value + 1.0, value], "train_loss": [9.0, value + 0.5]},
                     status=status)


def grid(values: dict[str, list[float]]) -> list[RunRecord]:
    return [rec(name, v, seed) for name, vs in values.items() for seed, v in enumerate(vs)]


def test_summarize_statistics_and_verdicts_both_ways():
    records = grid({
        "standard": [1.0, 1.1, 0.9],
        "better": [0.5, 0.6, 0.4],
        "noise": [1.12, 1.02, 1.22],  # |Δ| = 0.12: above 1·SE, below 2·SE
        "worse": [1.5, 1.6, 1.4],
        "single": [0.2],
    })
    rows = {row["variant"]: row for row in summarize(records)}
    assert list(rows) == ["standard", "better", "noise", "worse", "single"]
    base = rows["standard"]
    assert base["n"] == 3 and base["mean"] == pytest.approx(1.0) and base["verdict"] == "baseline"
    assert base["std"] == pytest.approx(statistics.stdev([1.0, 1.1, 0.9])) == pytest.approx(0.1)
    assert (base["min"], base["max"]) == (0.9, 1.1) and base["rel_change_pct"] is None

    # SE of the difference = sqrt(0.1²/3 + 0.1²/3) = 0.0816, so 2·SE = 0.163
    assert rows["better"]["verdict"].startswith("better than standard")
    assert rows["better"]["rel_change_pct"] == pytest.approx(-50.0)
    assert rows["noise"]["verdict"].startswith("within seed noise")
    assert rows["noise"]["rel_change_pct"] == pytest.approx(12.0)
    assert rows["worse"]["verdict"].startswith("worse than standard")
    assert rows["single"]["verdict"] == "cannot tell: one seed" and rows["single"]["std"] is None
    assert "0.5 > 2·SE = 0.163" in rows["better"]["verdict"]

    flipped = {row["variant"]: row for row in summarize(records, lower_is_better=False)}
    assert flipped["better"]["verdict"].startswith("worse") and flipped["worse"]["verdict"].startswith("better")


def test_summarize_one_seed_baseline_diverged_runs_and_metrics():
    rows = {r["variant"]: r for r in summarize(grid({"standard": [1.0], "other": [0.1, 0.2, 0.3]}))}
    assert rows["other"]["verdict"] == "cannot tell: one seed"

    records = grid({"standard": [1.0, 1.1, 0.9], "fragile": [0.5, 0.6]}) + [rec("fragile", 0.0, 2, "diverged")]
    fragile = summarize(records)[1]
    assert fragile["n"] == 2 and fragile["n_diverged"] == 1  # the diverged run is counted, not averaged
    assert fragile["mean"] == pytest.approx(0.55)
    assert fragile["verdict"].endswith("; 1 of 3 runs diverged")

    final_train = summarize(grid({"standard": [1.0, 1.2]}), metric="final_train_loss")[0]
    assert final_train["mean"] == pytest.approx(1.6) and final_train["metric"] == "final_train_loss"
    assert metric_value(rec("a", 2.0), "val_loss") == 2.0
    assert metric_value(rec("a", 2.0), lambda r: 42.0) == 42.0
    none = summarize(grid({"a": [1.0, 2.0]}), baseline=None)[0]
    assert none["verdict"] == "" and none["rel_change_pct"] is None


def test_summarize_rejects_bad_input():
    with pytest.raises(ValueError, match="baseline"):
        summarize(grid({"a": [1.0]}))
    with pytest.raises(ValueError, match="metric"):
        summarize(grid({"standard": [1.0]}), metric="nope")
    with pytest.raises(ValueError, match="variant"):
        summarize([RunRecord(config={}, status="finished")])
    with pytest.raises(ValueError, match="at least one"):
        summarize([])


def test_format_table_lines_up_rows():
    rows = summarize(grid({"standard": [1.0, 1.1, 0.9], "better": [0.5, 0.6, 0.4]}))
    text = format_table(rows)
    lines = text.splitlines()
    assert len(lines) == 4 and lines[0].split()[:3] == ["variant", "metric", "n"]
    assert set(lines[1]) <= {"-", " "}
    assert lines[2].startswith("standard") and "baseline" in lines[2]
    assert lines[3].startswith("better") and "better than standard" in lines[3] and "-50" in lines[3]
    assert lines[0].index("mean") == lines[3].index("0.5")  # columns line up
    assert format_table([]) == ""
    assert format_table([{"a": 1, "b": None}], columns=["b", "a"]).splitlines()[2].split() == ["-", "1"]
