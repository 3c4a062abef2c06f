"""The ``spanviz`` command end to end on real WikiText-2 (train on validation, evaluate on test)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest

from spanviz.cli import main

DATA_FLAGS = ["--train-split", "validation", "--eval-split", "test", "--max-vocab", "2048"]
TINY_MODEL = ["--d-model", "32", "--n-head", "2", "--n-layer", "1", "--context-length", "32", "--batch-size", "8"]


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path / "home"))
    # scripts/setup.sh exports these for the main job; the CLI's defaults must be tested without them
    for name in ("SPANVIZ_WIKITEXT_DIR", "SPANVIZ_TRAIN_SPLIT", "SPANVIZ_EVAL_SPLIT", "SPANVIZ_OFFLINE"):
        monkeypatch.delenv(name, raising=False)


def test_train_writes_a_run_record_with_equal_length_history(wikitext_dir, tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train", "--data-dir", str(wikitext_dir), *DATA_FLAGS, *TINY_MODEL,
               "--steps", "30", "--eval-interval", "10", "--eval-iters", "2", "--out", str(out)])
    assert rc == 0
    record = json.loads((out / "run.json").read_text())
    assert {"config", "history"} <= set(record)
    history = record["history"]
    assert {"step", "train_loss", "val_loss"} <= set(history)
    lengths = {len(v) for v in history.values()}
    assert len(lengths) == 1, f"history lists differ in length: { {k: len(v) for k, v in history.items()} }"
    assert record["config"]["data"]["splits"] == {"train": "validation", "eval": "test"}
    assert record["config"]["model"]["d_model"] == 32
    assert any(v is not None for v in history["val_loss"])
    assert (out / "checkpoint.pt").exists()
    assert "best val loss" in capsys.readouterr().out


def test_train_with_technique_flags_records_them(wikitext_dir, tmp_path):
    out = tmp_path / "run"
    rc = main(["train", "--data-dir", str(wikitext_dir), *DATA_FLAGS, *TINY_MODEL, "--steps", "4",
               "--eval-interval", "2", "--eval-iters", "1", "--n-local", "1", "--window", "8",
               "--spans-preset", "kv8", "--alphas", "1000", "--logit-probe", "--probe-every", "2",
               "--out", str(out)])
    assert rc == 0
    record = json.loads((out / "run.json").read_text())
    model = record["config"]["model"]
    assert (model["n_local"], model["window"]) == (1, 8)
    assert model["spans"]["preset"] == "kv8" and model["spans"]["alphas"] == [1.0, 0.0, 0.0, 0.0]
    assert any(k.startswith("logits/") for k in record["history"])


def test_resume_continues_to_the_requested_steps(wikitext_dir, tmp_path):
    out = tmp_path / "run"
    base = ["train", "--data-dir", str(wikitext_dir), *DATA_FLAGS, *TINY_MODEL, "--eval-interval", "5",
            "--eval-iters", "1", "--out", str(out)]
    assert main([*base, "--steps", "10"]) == 0
    # the saved run had steps=10; --resume continues it from its checkpoint up to its configured total
    first = json.loads((out / "run.json").read_text())["history"]["step"]
    assert main([*base, "--steps", "10", "--resume"]) == 0
    again = json.loads((out / "run.json").read_text())["history"]["step"]
    assert again == first


@pytest.mark.parametrize(
    "flags, field",
    [(["--n-local", "5"], "n_local"), (["--window", "0", "--n-local", "1"], "window"),
     (["--spans-preset", "kv8", "--alphas", "10"], "alphas"), (["--alphas", "1x00"], "alphas"),
     (["--spans-preset", "nope"], "preset"), (["--steps", "-1"], "steps"),
     (["--qk-rank", "99"], "qk_rank"), (["--d-model", "30", "--n-head", "4"], "d_model")],
)
def test_bad_flags_fail_fast_with_the_field_named(wikitext_dir, flags, field, capsys):
    t0 = time.perf_counter()
    rc = main(["train", "--data-dir", str(wikitext_dir), *DATA_FLAGS, *flags])
    assert rc == 2
    assert field in capsys.readouterr().err
    assert time.perf_counter() - t0 < 5, "validation must happen before loading data"


def test_missing_train_split_tells_what_to_do(wikitext_dir, capsys):
    rc = main(["prepare-data", "--data-dir", str(wikitext_dir)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "train" in err and "validation" in err


def test_prepare_data_then_cache_hit(wikitext_dir, capsys):
    argv = ["prepare-data", "--data-dir", str(wikitext_dir), *DATA_FLAGS]
    assert main(argv) == 0
    assert "tokenized" in capsys.readouterr().out
    assert main(argv) == 0
    assert "cache hit" in capsys.readouterr().out


def test_console_script_is_installed():
    out = subprocess.run([sys.executable, "-m", "spanviz.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "train" in out.stdout and "sweep" in out.stdout


def test_demo_config_lowers_val_loss_by_two_nats(wikitext_dir, tmp_path):
    """The foundation issue's 'done when': the default CLI config, 300 steps on CPU, val loss −2 nats."""
    out = tmp_path / "demo"
    rc = main(["train", "--data-dir", str(wikitext_dir), "--train-split", "validation", "--eval-split", "test",
               "--steps", "300", "--out", str(out)])
    assert rc == 0
    history = json.loads((out / "run.json").read_text())["history"]
    vals = [v for v in history["val_loss"] if v is not None]
    assert vals[0] == pytest.approx(math.log(8192), abs=0.3), "first eval should be at init, near ln V"
    assert vals[0] - min(vals) >= 2.0, vals


def test_runs_export_then_import_into_a_fresh_store(wikitext_dir, tmp_path, capsys):
    """The workshop recipe: sweep on one machine, export, import elsewhere, replay without training."""
    from spanviz.experiments import run_grid
    from spanviz.data import prepare_tokens
    from spanviz.model import GPTConfig
    from spanviz.store import ResultsStore
    from spanviz.train import TrainConfig

    data = prepare_tokens(wikitext_dir, splits={"train": "validation", "eval": "test"}, max_vocab=512)
    variants = {"standard": (GPTConfig(vocab_size=data.vocab_size, context_length=16, n_layer=1, n_head=2,
                                       d_model=16),
                             TrainConfig(steps=3, batch_size=2, warmup_steps=0, eval_interval=3, eval_iters=1))}
    teacher = ResultsStore(tmp_path / "teacher")
    [record] = run_grid(variants, seeds=[0], data=data, store=teacher)
    archive = tmp_path / "workshop.zip"
    assert main(["runs", "export", str(archive), "--store", str(teacher.root)]) == 0
    assert main(["runs", "import", str(archive), "--store", str(tmp_path / "student")]) == 0
    assert "imported 1 runs" in capsys.readouterr().out
    replayed = ResultsStore(tmp_path / "student").get(record.config)
    assert replayed is not None and replayed.history == record.history
    assert main(["runs", "list", "--store", str(tmp_path / "student")]) == 0
    assert "1 runs in" in capsys.readouterr().out


def test_sweep_overrides_and_the_ls_tokenizer(wikitext_dir, tmp_path, capsys):
    """--model/--train reach every variant; `sweep ls` tokenizes bytes like its CPU size; bad overrides: exit 2."""
    out = tmp_path / "ls.json"
    rc = main(["sweep", "ls", "--seeds", "1", "--steps", "2", "--no-store", "--out", str(out),
               "--data-dir", str(wikitext_dir), *DATA_FLAGS[:4],
               "--model", "context_length=32", "--model", "d_model=16", "--train", "batch_size=2",
               "--train", "eval_interval=2", "--train", "eval_iters=1"])
    assert rc == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    assert res["data"]["tokenizer"] == "byte"
    for spec in res["variants"].values():
        assert spec["model"]["context_length"] == 32 and spec["model"]["d_model"] == 16
        assert spec["train"]["batch_size"] == 2 and spec["train"]["steps"] == 2
    assert len(res["runs"]) == 3 and all(r["status"] == "finished" for r in res["runs"])
    for flags, needle in ((["--model", "context=32"], "'context' is not a GPTConfig field"),
                          (["--train", "lr"], "--train takes KEY=VALUE"),
                          (["--model", "n_head=3"], "n_head")):
        assert main(["sweep", "ls", "--seeds", "1", "--steps", "2", "--no-store", "--data-dir", str(wikitext_dir),
                     *DATA_FLAGS[:4], "--model", "d_model=16", *flags]) == 2
        assert needle in capsys.readouterr().err
