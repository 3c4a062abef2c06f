"""The ``spanviz`` command end to end on real WikiText-2 (train on validation, evaluate on test).

Issue 13's "What broke" list, one test (at least) per item, named after the promise kept:
sweep fp8 → ``test_sweep_fp8_runs_and_prints_its_table``; ``--resume --steps`` →
``test_resume_extends_a_finished_run_on_the_same_curve``; kill -9 / divergence →
``test_kill_9_mid_run_then_resume_continues_the_same_curve``, ``test_divergence_message_says_what_is_on_disk``;
two writers → ``test_a_second_writer_to_the_same_out_is_refused``; unwritable outputs →
``test_unwritable_outputs_are_refused_before_training``, ``test_a_full_disk_mid_run_keeps_the_last_checkpoint``;
late checks → ``test_every_argument_is_checked_before_data_is_loaded``; store → ``test_runs_commands_survive_bad_data``
(and tests/test_store.py); token cache → tests/test_data.py; damaged checkpoint →
``test_a_damaged_checkpoint_gives_one_line_naming_the_file``; README / python -m / store / help / messages →
tests/test_readme.py and ``test_help_*``, ``test_train_runs_enter_the_results_store``,
``test_messages_name_flags_not_python_or_team_folders``; drifted defaults →
``test_flags_are_generated_from_the_config_dataclasses``.
"""

from __future__ import annotations

import errno
import json
import math
import os
import signal
import subprocess
import sys
import time
import typing
from dataclasses import fields
from pathlib import Path

import docstring_parser
import pytest
import torch

from spanviz import files
from spanviz.cli import main
from spanviz.cli.app import COMMANDS
from spanviz.experiments import read_per_seed
from spanviz.model import GPTConfig
from spanviz.store import ResultsStore
from spanviz.train import TrainConfig
from spanviz.train.checkpoint import load_checkpoint

SPLITS = ["--train-split", "validation", "--eval-split", "test"]
TINY_MODEL = ["--d-model", "32", "--n-head", "2", "--n-layer", "1", "--context-length", "32", "--batch-size", "8"]
ENV_NAMES = ("SPANVIZ_WIKITEXT_DIR", "SPANVIZ_TRAIN_SPLIT", "SPANVIZ_EVAL_SPLIT", "SPANVIZ_OFFLINE", "SPANVIZ_SMOKE")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path / "home"))
    # scripts/setup.sh exports these for the main job; the CLI's defaults must be tested without them
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def data_flags(wikitext_dir):
    return ["--data-dir", str(wikitext_dir), *SPLITS, "--max-vocab", "2048"]


@pytest.fixture
def no_data(monkeypatch):
    """Make any data loading fail the test: the command must have refused its input before."""

    def refuse(*args, **kwargs):
        raise AssertionError("data were loaded before the arguments were checked")

    monkeypatch.setattr("spanviz.cli.common.prepare_tokens", refuse)  # where the command reads data


def history(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())["history"]


def spanviz_process(args: list[str], home: Path, **kwargs) -> subprocess.Popen:
    """``python -m spanviz ARGS`` in a child process (one torch thread: the machine is small and shared)."""
    env = {**os.environ, "SPANVIZ_HOME": str(home), "OMP_NUM_THREADS": "1"}
    for name in ENV_NAMES:
        env.pop(name, None)
    return subprocess.Popen([sys.executable, "-m", "spanviz", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def wait_for(condition, timeout: float = 300.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def run_json_steps(out: Path) -> int:
    try:
        return len(history(out)["step"])
    except (OSError, ValueError, KeyError):
        return 0


# ============================================================================================ training
def test_train_writes_a_run_record_with_equal_length_history(data_flags, tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train", *data_flags, *TINY_MODEL, "--steps", "30", "--eval-interval", "10", "--eval-iters", "2",
               "--out", str(out)])
    assert rc == 0
    record = json.loads((out / "run.json").read_text())
    assert record["status"] == "finished"
    h = record["history"]
    assert {"step", "train_loss", "val_loss"} <= set(h)
    assert len({len(v) for v in h.values()}) == 1, {k: len(v) for k, v in h.items()}
    assert record["config"]["data"]["splits"] == {"train": "validation", "eval": "test"}
    assert record["config"]["model"]["d_model"] == 32
    assert any(v is not None for v in h["val_loss"])
    assert load_checkpoint(out / "checkpoint.pt").step == 30
    assert "best val loss" in capsys.readouterr().out


def test_train_runs_enter_the_results_store(data_flags, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *data_flags, *TINY_MODEL, "--steps", "3", "--eval-iters", "1", "--out", str(out)]) == 0
    assert "results store:" in capsys.readouterr().out
    record = json.loads((out / "run.json").read_text())
    stored = ResultsStore().get(record["config"])
    assert stored is not None and stored.history["train_loss"] == record["history"]["train_loss"]
    archive = tmp_path / "runs.zip"
    assert main(["runs", "export", str(archive)]) == 0
    assert "exported 1 runs" in capsys.readouterr().out
    # --no-store keeps the store untouched
    assert main(["train", *data_flags, *TINY_MODEL, "--steps", "3", "--seed", "1", "--eval-iters", "1",
                 "--no-store"]) == 0
    assert len(ResultsStore().list()) == 1


def test_train_with_technique_flags_records_them(data_flags, tmp_path):
    out = tmp_path / "run"
    rc = main(["train", *data_flags, *TINY_MODEL, "--steps", "4", "--eval-interval", "2", "--eval-iters", "1",
               "--n-local", "1", "--window", "8", "--spans-preset", "kv8", "--alphas", "1000", "--logit-probe",
               "--probe-every", "2", "--out", str(out)])
    assert rc == 0
    record = json.loads((out / "run.json").read_text())
    model = record["config"]["model"]
    assert (model["n_local"], model["window"]) == (1, 8)
    assert model["spans"]["preset"] == "kv8" and model["spans"]["alphas"] == [1.0, 0.0, 0.0, 0.0]
    logits = record["history"]["logits/max"]  # --probe-every 2: after updates 0, 2 and the last (3)
    assert [v is not None for v in logits] == [True, False, True, True]


def test_config_file_sets_defaults_that_flags_override(data_flags, tmp_path):
    first = tmp_path / "first"
    assert main(["train", *data_flags, *TINY_MODEL, "--steps", "3", "--eval-iters", "1", "--lr", "0.01",
                 "--spans-preset", "qk4", "--alphas", "1100", "--no-store", "--out", str(first)]) == 0
    second = tmp_path / "second"  # the same model from the run.json, another learning rate from a flag
    assert main(["train", *data_flags, "--config", str(first / "run.json"), "--lr", "0.002", "--no-store",
                 "--out", str(second)]) == 0
    a, b = (json.loads((d / "run.json").read_text())["config"] for d in (first, second))
    assert b["model"] == a["model"] and b["model"]["spans"]["preset"] == "qk4"
    assert b["train"]["lr"] == 0.002 and b["train"]["steps"] == 3 and a["train"]["lr"] == 0.01
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": {"d_modle": 3}}))
    assert main(["train", *data_flags, "--config", str(bad)]) == 2


# ======================================================================== resume: extend, kill -9, lock
def test_resume_extends_a_finished_run_on_the_same_curve(data_flags, tmp_path, capsys):
    """`--resume --out D --steps N` extends a finished run; with a schedule that ignores the total it is
    bit-identical to an uninterrupted N-step run on CPU; with the cosine it follows the new total's schedule."""
    flat = [*data_flags, *TINY_MODEL, "--eval-interval", "4", "--eval-iters", "1", "--warmup-steps", "2",
            "--min-lr-ratio", "1", "--dropout", "0.1", "--device", "cpu", "--no-store"]
    extended, straight = tmp_path / "extended", tmp_path / "straight"
    assert main(["train", *flat, "--steps", "8", "--out", str(extended)]) == 0
    assert main(["train", *flat, "--steps", "16", "--resume", "--out", str(extended)]) == 0
    assert main(["train", *flat, "--steps", "16", "--out", str(straight)]) == 0
    a, b = history(extended), history(straight)
    assert a["step"] == list(range(16)) == b["step"]
    for key in ("train_loss", "lr", "grad_norm"):
        assert a[key] == b[key], key
    assert [v for i, v in enumerate(a["val_loss"]) if b["val_loss"][i] is not None] == \
        [v for v in b["val_loss"] if v is not None]
    ca, cb = load_checkpoint(extended / "checkpoint.pt"), load_checkpoint(straight / "checkpoint.pt")
    assert ca.step == cb.step == 16
    for name, tensor in ca.state["model"].items():
        assert torch.equal(tensor, cb.state["model"][name]), name
    config = json.loads((extended / "run.json").read_text())["config"]
    assert config["extended_from_steps"] == [8] and config["train"]["steps"] == 16

    cosine = tmp_path / "cosine"  # the default schedule: the extension follows the 16-update schedule
    base = [*data_flags, *TINY_MODEL, "--eval-iters", "1", "--warmup-steps", "2", "--device", "cpu", "--no-store"]
    assert main(["train", *base, "--steps", "8", "--out", str(cosine)]) == 0
    capsys.readouterr()
    assert main(["train", *base, "--steps", "16", "--resume", "--out", str(cosine)]) == 0
    assert "note: extending 8 to 16 updates" in capsys.readouterr().err
    from spanviz.train.config import lr_at

    lrs = history(cosine)["lr"]
    assert lrs[8:] == [lr_at(s, TrainConfig(steps=16, warmup_steps=2)) for s in range(8, 16)]
    assert main(["train", *base, "--steps", "4", "--resume", "--out", str(cosine)]) == 2  # cannot shrink


def test_kill_9_mid_run_then_resume_continues_the_same_curve(data_flags, tmp_path):
    """No run is lost: kill -9 after a checkpoint, then `--resume` gives the uninterrupted curve."""
    args = ["train", *data_flags, *TINY_MODEL, "--steps", "60", "--eval-interval", "5", "--eval-iters", "1",
            "--dropout", "0.1", "--device", "cpu", "--no-store"]
    killed = tmp_path / "killed"
    child = spanviz_process([*args, "--out", str(killed)], tmp_path / "home")
    try:
        wait_for(lambda: run_json_steps(killed) >= 11 or child.poll() is not None, what="two checkpoints")
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
    saved = json.loads((killed / "run.json").read_text())
    assert saved["status"] == "running", "the child finished before it was killed: nothing was tested"
    assert child.returncode == -signal.SIGKILL
    at_kill = load_checkpoint(killed / "checkpoint.pt").step
    assert 0 < at_kill < 60

    assert main([*args, "--resume", "--out", str(killed)]) == 0
    straight = tmp_path / "straight"
    assert main([*args, "--out", str(straight)]) == 0
    a, b = history(killed), history(straight)
    for key in ("step", "train_loss", "val_loss", "lr", "grad_norm"):
        assert a[key] == b[key], key
    assert json.loads((killed / "run.json").read_text())["status"] == "finished"


def test_a_second_writer_to_the_same_out_is_refused(data_flags, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", *data_flags, *TINY_MODEL, "--eval-interval", "5", "--eval-iters", "1", "--device", "cpu",
            "--warmup-steps", "2", "--no-store", "--out", str(out)]
    first = spanviz_process([*args, "--steps", "400"], tmp_path / "home")
    try:
        wait_for(lambda: run_json_steps(out) >= 1 or first.poll() is not None, what="the first run to start")
        assert first.poll() is None
        assert main([*args, "--steps", "5", "--seed", "1"]) == 2
        err = capsys.readouterr().err
        assert "in use by another spanviz process" in err and str(out) in err
        first.send_signal(signal.SIGINT)  # Ctrl-C: the first run saves a checkpoint and stops
        first.wait(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130, first.stderr.read()
    record = json.loads((out / "run.json").read_text())
    checkpoint = load_checkpoint(out / "checkpoint.pt")
    assert record["status"] == "interrupted" and record["config"]["train"]["seed"] == 0
    assert checkpoint.train_cfg.seed == 0 and checkpoint.step == len(record["history"]["step"])
    assert main([*args, "--resume", "--steps", str(checkpoint.step + 2)]) == 0  # and it continues


# ====================================================================================== divergence
def test_divergence_message_says_what_is_on_disk(data_flags, tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train", *data_flags, *TINY_MODEL, "--steps", "40", "--lr", "1e4", "--grad-clip", "0",
               "--warmup-steps", "0", "--eval-interval", "2", "--eval-iters", "1", "--device", "cpu",
               "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 1 and "diverged" in text
    record = json.loads((out / "run.json").read_text())
    assert record["status"] == "diverged" and "best val loss" not in text
    if (out / "checkpoint.pt").exists():
        kept = load_checkpoint(out / "checkpoint.pt").step
        assert f"The last good checkpoint ({kept} of 40 updates)" in text
        assert all(math.isfinite(v) for v in load_checkpoint(out / "checkpoint.pt").record.history["train_loss"])
    else:
        assert "No checkpoint had been written yet" in text
    assert "--lr" in text and "lr=" not in text  # flags, not Python
    assert main(["train", *data_flags, "--resume", "--out", str(out)]) == 2  # would diverge again


# ======================================================================== outputs checked before training
@pytest.mark.parametrize("case", ["out-under-a-file", "out-read-only", "out-disk-full", "home-is-a-file",
                                  "home-read-only"])
def test_unwritable_outputs_are_refused_before_training(case, data_flags, tmp_path, monkeypatch, capsys, no_data):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    out = tmp_path / "out"
    if case == "out-under-a-file":
        out = blocker / "run"
    elif case == "home-is-a-file":
        monkeypatch.setenv("SPANVIZ_HOME", str(blocker))
    elif case in ("out-read-only", "home-read-only"):  # tests may run as root, which ignores chmod
        refused = out if case == "out-read-only" else tmp_path / "home"
        real = files.check_writable_folder.__globals__["tempfile"].mkstemp

        def mkstemp(*args, dir=None, **kwargs):  # noqa: A002 - tempfile's own name
            if dir is not None and Path(dir) == refused:
                raise OSError(errno.EROFS, "Read-only file system")
            return real(*args, dir=dir, **kwargs)

        monkeypatch.setattr("spanviz.files.tempfile.mkstemp", mkstemp)
    elif case == "out-disk-full":
        from collections import namedtuple

        usage = namedtuple("usage", "total used free")
        monkeypatch.setattr("spanviz.files.shutil.disk_usage", lambda path: usage(10**9, 10**9 - 1000, 1000))
    rc = main(["train", *data_flags, *TINY_MODEL, "--steps", "3", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    named = "SPANVIZ_HOME" if case.startswith("home") else "--out"
    assert named in err, err
    reason = {"out-under-a-file": "a file", "out-read-only": "read-only", "out-disk-full": "MiB free",
              "home-is-a-file": "a file", "home-read-only": "read-only"}[case]
    assert reason in err, err


def test_a_full_disk_mid_run_keeps_the_last_checkpoint(data_flags, tmp_path, capsys):
    from test_cli_bad_input import disk_full_at_checkpoint

    out = tmp_path / "run"
    with disk_full_at_checkpoint(3):
        rc = main(["train", *data_flags, *TINY_MODEL, "--steps", "20", "--eval-interval", "3", "--eval-iters", "1",
                   "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "No space left on device" in err and "checkpoint.pt holds 4 updates" in err
    assert load_checkpoint(out / "checkpoint.pt").step == 4  # the last good one, intact
    assert main(["train", *data_flags, "--resume", "--out", str(out)]) == 0  # space again: it continues
    assert history(out)["step"] == list(range(20))


# ========================================================================== checks before data loading
BAD_COMMANDS = [
    (["train", "--device", "cuda"], "--device") if not torch.cuda.is_available() else None,
    (["train", "--device", "mps"], "--device") if not torch.backends.mps.is_available() else None,
    (["train", "--device", "tpu"], "--device"),
    (["train", "--dtype", "bfloat16", "--device", "cpu"], "--dtype"),
    (["train", "--dtype", "bfloat16"], "--dtype") if not torch.cuda.is_available() else None,
    (["train", "--probe-every", "0", "--logit-probe"], "--probe-every"),
    (["train", "--probe-every", "0"], "--probe-every"),
    (["train", "--probe-every", "5"], "--probe-every"),
    (["train", "--attn-backend", "flex"], "--attn-backend") if not torch.cuda.is_available() else None,
    (["train", "--resume"], "--resume needs --out"),
    (["train", "--n-layer", "1000000000"], "--n-layer"),
    (["train", "--d-model", "65536", "--n-head", "1", "--context-length", "65536"], "--d-model"),
    (["train", "--window", "5"], "--n-local"),
    (["train", "--spans-layers", "0"], "--spans-layers"),
    (["train", "--spans-preset", "kv8", "--spans-layers", "7"], "--spans-layers"),
    (["train", "--n-local", "5"], "--n-local"),
    (["train", "--window", "0", "--n-local", "1"], "--window"),
    (["train", "--spans-preset", "kv8", "--alphas", "10"], "--alphas"),
    (["train", "--alphas", "1x00"], "--alphas"),
    (["train", "--steps", "-1"], "--steps"),
    (["train", "--steps", "10", "--warmup-steps", "20"], "--warmup-steps"),
    (["train", "--lr", "0"], "--lr"),
    (["train", "--lr", "nan"], "--lr"),
    (["train", "--qk-rank", "99"], "--qk-rank"),
    (["train", "--d-model", "30", "--n-head", "4"], "--d-model"),
    (["train", "--lr-spike-factor", "10", "--lr-spike-start", "500"], "--lr-spike-start"),
    (["train", "--max-vocab", "2"], "--max-vocab"),
    (["train", "--data-dir", "/nonexistent/wikitext"], "--data-dir"),
    (["sweep", "spans", "--size", "huge"], "--size"),
    (["sweep", "fp8", "--size", "paper"], "--size"),
    (["sweep", "spans", "--seeds", "0"], "--seeds"),
    (["sweep", "spans", "--steps", "0"], "--steps"),
    (["sweep", "fp8", "--steps", "1"], "--steps"),
    (["sweep", "spans", "--scenario", "none"], "--scenario"),
    (["sweep", "spans", "--practical"], "--practical"),
    (["sweep", "ls", "--model", "context=32"], "--model"),
    (["sweep", "ls", "--model", "n_head=3"], "n_head"),
    (["sweep", "ls", "--train", "lr"], "--train takes KEY=VALUE"),
    (["sweep", "ls", "--train", "lr=abc"], "--train"),
    (["sweep", "spans", "--train", "steps=0"], "steps"),
    (["sweep", "ls", "--size", "gpu"], "--device") if not torch.cuda.is_available() else None,
    (["sweep", "spans", "--max-vocab", "1"], "--max-vocab"),
    (["bench", "--device", "foo"], "--device"),
    (["bench", "--only", "nope"], "--only"),
    (["runs", "import"], "FILE"),
    (["runs", "import", "/nonexistent.zip"], "/nonexistent.zip"),
]


@pytest.mark.parametrize("argv, needle", [c for c in BAD_COMMANDS if c is not None],
                         ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_every_argument_is_checked_before_data_is_loaded(argv, needle, data_flags, capsys, no_data):
    extra = []
    if argv[0] in ("train", "sweep"):  # data flags the command does not set itself
        for i in range(0, len(data_flags), 2):
            if data_flags[i] not in argv:
                extra += data_flags[i:i + 2]
    rc = main([*argv, *extra])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert needle in err, err
    assert "Traceback" not in err and "internal error" not in err
    assert err.startswith(f"spanviz {argv[0]}: error: ") and err.count("\n") == 1, err


def test_tyro_refuses_unknown_flags_and_bad_types_without_a_traceback(capsys):
    for argv in (["train", "--stepz", "3"], ["train", "--steps", "x"], ["trian"], ["train", "--dtype", "fp16"],
                 ["train", "--spans-layers", "a"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.strip()
    assert main(["train", "--spans-layers", "a"]) == 2
    assert "--spans-layers" in capsys.readouterr().err  # names the flag


# ================================================================================ damaged checkpoints
_FINISHED: dict[str, Path] = {}


@pytest.fixture
def finished_run(tmp_path_factory, wikitext_dir):
    """A finished 4-update run folder, trained once per session (copy it before changing it)."""
    if "run" not in _FINISHED:
        out = tmp_path_factory.mktemp("runs") / "done"
        assert main(["train", "--data-dir", str(wikitext_dir), *SPLITS, "--max-vocab", "2048", *TINY_MODEL,
                     "--steps", "4", "--eval-iters", "1", "--no-store", "--out", str(out)]) == 0
        _FINISHED["run"] = out
    return _FINISHED["run"]


@pytest.mark.parametrize("damage", ["truncated", "random-bytes", "empty", "missing-key", "foreign-pickle",
                                    "wrong-type", "folder"])
def test_a_damaged_checkpoint_gives_one_line_naming_the_file(damage, finished_run, tmp_path, capsys, monkeypatch):
    import shutil

    monkeypatch.setattr("spanviz.cli.common.prepare_tokens", lambda *a, **k: pytest.fail("data loaded"))
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    path = out / "checkpoint.pt"
    payload = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(payload[: len(payload) // 2])
    elif damage == "random-bytes":
        path.write_bytes(os.urandom(len(payload)))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage in ("missing-key", "wrong-type"):
        state = torch.load(path, weights_only=True)
        if damage == "missing-key":
            del state["optimizer"]
        else:
            state["step"] = "four"
        torch.save(state, path)
    elif damage == "foreign-pickle":  # a pickle that would run code: weights_only refuses it
        import pickle

        path.write_bytes(pickle.dumps(subprocess.Popen))
    else:
        path.unlink()
        path.mkdir()
    rc = main(["train", "--resume", "--out", str(out), "--steps", "8"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert str(path) in err


# =============================================================================================== sweeps
def test_sweep_fp8_runs_and_prints_its_table(data_flags, tmp_path, capsys):
    out = tmp_path / "fp8.json"
    rc = main(["sweep", "fp8", "--steps", "4", "--seeds", "2", "--scenario", "lr_spike", "--model",
               "context_length=16", "--model", "d_model=16", "--train", "batch_size=2", "--train", "warmup_steps=1",
               *data_flags, "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "overflow_during" in captured.out and "delayed" in captured.out
    result = json.loads(out.read_text())
    runs = result["runs"]  # --scenario lr_spike: margins 0 and 1 × seeds 0 and 1
    assert sorted((r["margin"], r["seed"]) for r in runs) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(r["status"] == "finished" and r["scenario"] == "lr_spike" for r in runs)
    assert len(runs[0]["history"]["step"]) == 4
    per_seed = read_per_seed(tmp_path / "fp8.per_seed.csv")  # beside the summary, for recomputing the verdicts
    assert {row["seed"] for row in per_seed} == {0, 1} and "overflow_during" in per_seed[0]


def test_sweep_fp8_practical_strategies_and_their_costs(data_flags, tmp_path, capsys):
    out = tmp_path / "fp8p.json"
    rc = main(["sweep", "fp8", "--steps", "3", "--seeds", "2", "--scenario", "none", "--practical", "--no-store",
               "--model", "context_length=16", "--model", "d_model=16", "--train", "batch_size=2",
               "--train", "warmup_steps=1", *data_flags, "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "underflow_zero" in captured.out and "mx" in captured.out
    per_seed = read_per_seed(tmp_path / "fp8p.per_seed.csv")
    rows = {(r["strategy"], r["seed"], r["margin"]): r for r in per_seed}
    assert {s for s, _, _ in rows} >= {"delayed", "rowwise", "rowwise_pow2", "mx", "tile_1x128"}
    mx, dyn, det = rows[("mx", 0, 0)], rows[("dynamic", 0, 0)], rows[("deterministic", 0, 0)]
    # per layer (2) and probe batch row (2 × 4 heads × 16 queries): one scale and one reduction per block of 32 keys
    assert mx["scales"] == mx["reductions"] == 2 * 2 * 4 * 16 and dyn["reductions"] == 2 and det["reductions"] == 0
    assert all(r["underflow_zero"] is not None and r["error_softmax"] is not None for r in per_seed)


def test_sweep_overrides_and_the_ls_tokenizer(data_flags, tmp_path, capsys):
    """--model/--train reach every variant; `sweep ls` tokenizes bytes like its CPU size; bad overrides: exit 2."""
    out = tmp_path / "ls.json"
    rc = main(["sweep", "ls", "--seeds", "1", "--steps", "2", "--no-store", "--out", str(out), *data_flags[:6],
               "--model", "context_length=32", "--model", "d-model=16", "--train", "batch_size=2",
               "--train", "eval_interval=2", "--train", "eval_iters=1"])
    assert rc == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    assert res["data"]["tokenizer"] == "byte"
    for spec in res["variants"].values():
        assert spec["model"]["context_length"] == 32 and spec["model"]["d_model"] == 16
        assert spec["train"]["batch_size"] == 2 and spec["train"]["steps"] == 2
    assert len(res["runs"]) == 3 and all(r["status"] == "finished" for r in res["runs"])


# ================================================================================================ data
def test_missing_train_split_tells_what_to_do(wikitext_dir, capsys):
    rc = main(["prepare-data", "--data-dir", str(wikitext_dir), "--train-split", "train"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--train-split validation --eval-split test" in err and err.count("\n") == 1


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_a_folder_without_a_train_split_trains_on_the_splits_it_has(how, wikitext_dir, capsys, monkeypatch):
    """`--data-dir DIR` or `SPANVIZ_WIKITEXT_DIR=DIR` with no splits named: the offline copy (validation and test
    only) trains on validation and evaluates on test, says so, and prepare-data remembers exactly that."""
    monkeypatch.delenv("SPANVIZ_TRAIN_SPLIT", raising=False)
    monkeypatch.delenv("SPANVIZ_EVAL_SPLIT", raising=False)
    if how == "flag":
        argv = ["prepare-data", "--data-dir", str(wikitext_dir), "--max-vocab", "2048"]
    else:
        monkeypatch.setenv("SPANVIZ_WIKITEXT_DIR", str(wikitext_dir))
        argv = ["prepare-data", "--max-vocab", "2048"]
    assert main(argv) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    assert "has no train split: training on 'validation', evaluating on 'test'" in err
    assert "splits {'train': 'validation', 'eval': 'test'}" in out
    if how == "flag":
        assert json.loads((Path(os.environ["SPANVIZ_HOME"]) / "data-source.json").read_text())["splits"] == {
            "train": "validation", "eval": "test"}


def test_prepare_data_remembers_the_folder_for_later_commands(wikitext_dir, tmp_path, capsys):
    from spanviz.data import prepare_tokens

    argv = ["prepare-data", "--data-dir", str(wikitext_dir), *SPLITS, "--max-vocab", "2048"]
    assert main(argv) == 0
    assert "tokenized" in capsys.readouterr().out
    assert main(["prepare-data", "--max-vocab", "2048"]) == 0  # no flags: the remembered folder and splits
    assert "cache hit" in capsys.readouterr().out
    out = tmp_path / "run"
    assert main(["train", *TINY_MODEL, "--max-vocab", "2048", "--steps", "2", "--eval-iters", "1",
                 "--out", str(out)]) == 0
    data = json.loads((out / "run.json").read_text())["config"]["data"]
    assert data["splits"] == {"train": "validation", "eval": "test"}
    assert data["source"] == "local folder"  # the record names the data by identity, not by a path of the machine
    expected = prepare_tokens(wikitext_dir, splits={"train": "validation", "eval": "test"}, max_vocab=2048)
    assert data["text_sha256"] == expected.text_sha256  # ... and it is the remembered folder's text


def test_messages_name_flags_not_python_or_team_folders(wikitext_dir, capsys, monkeypatch):
    import datasets  # noqa: F401  imported already, so the offline hub fails at once

    monkeypatch.setenv("SPANVIZ_OFFLINE", "1")  # no data folder anywhere: the hub, offline
    messages = []
    for argv in (["prepare-data"], ["train", "--dtype", "bfloat16", "--device", "cpu"],
                 ["train", "--window", "0", "--n-local", "2"], ["train", "--n-layer", "100000000"],
                 ["prepare-data", "--data-dir", str(wikitext_dir), "--train-split", "train"]):
        assert main(argv) == 2
        messages.append(capsys.readouterr().err)
    joined = "\n".join(messages)
    assert "--data-dir DIR" in messages[0] and "--dtype float32" in messages[1]
    assert "--n-layer" in messages[3] and "100000000" in messages[3] and "--train-split validation" in messages[4]
    for python_or_team in ("../shared", "splits={", "data_dir=", "dtype=", "n_local=", "Trainer.", "GPTConfig("):
        assert python_or_team not in joined, (python_or_team, joined)


# ========================================================================================= runs / store
def test_runs_export_then_import_into_a_fresh_store(wikitext_dir, tmp_path, capsys):
    """The workshop recipe: sweep on one machine, export, import elsewhere, replay without training."""
    from spanviz.data import prepare_tokens
    from spanviz.experiments.core import run_grid

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


def test_runs_commands_survive_bad_data(tmp_path, capsys):
    from test_store import make_record

    store = ResultsStore(tmp_path / "store")
    good = store.put(make_record())
    bad = store.put(make_record(seed=1))
    store.path(bad).write_text('{"config": [1], "history": "abc", "status": "finished"}')
    argv = ["--store", str(store.root)]
    assert main(["runs", "list", *argv]) == 0
    captured = capsys.readouterr()
    assert good[:12] in captured.out and "1 runs in" in captured.out and bad in captured.err
    archive = tmp_path / "out.zip"
    assert main(["runs", "export", str(archive), *argv]) == 0
    assert "exported 1 runs" in capsys.readouterr().out
    assert main(["runs", "import", str(archive), "--store", str(tmp_path / "fresh")]) == 0
    for args in (["runs", "export", str(tmp_path), *argv], ["runs", "import", str(tmp_path / "none.zip"), *argv],
                 ["runs", "import", str(tmp_path), *argv], ["runs", "list", "--store", str(archive)]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err


def test_runs_list_tells_shipped_runs_from_local_ones_and_filters(tmp_path, capsys):
    """An instructor's store: the shipped GPU bundle plus a run of their own. `runs list` names each run's origin,
    label, steps and device, and filters by origin, device and experiment; export takes the same filters."""
    from test_store import make_record

    from spanviz.store import BUNDLE, load_bundle

    store = ResultsStore(tmp_path / "store")
    shipped = load_bundle(store=store)["runs"]
    mine = store.put(make_record())
    argv = ["--store", str(store.root)]
    assert main(["runs", "list", *argv]) == 0
    out = capsys.readouterr().out
    header, *lines = out.splitlines()
    for column in ("origin", "experiment", "label", "seed", "steps", "device", "status"):
        assert column in header.split(), header
    rows = [line for line in lines[1:] if line[:12].strip() and not line.startswith(f"{shipped + 1} runs")]
    assert len(rows) == shipped + 1 and f"{shipped + 1} runs in" in out
    own = next(line for line in rows if line.startswith(mine[:12]))
    assert own.split()[1] == "local" and " cpu " in own and " standard " in own
    gpu = [line for line in rows if not line.startswith(mine[:12])]
    on_cuda = {k[:12] for k, r in store.records() if k != mine and r.environment["device"].startswith("cuda")}
    cpu_sweeps = {k for k, r in store.records() if (r.config.get("tags") or {}).get("size") == "cpu"}  # growth, alphas
    cpu_panels = {k for k, r in store.records() if k != mine and not r.config.get("tags")
                  and r.environment["device"].startswith("cpu")}  # the tour's run and 03's re-made default (CPU)
    assert len(cpu_panels) == 2 and len(on_cuda) == shipped - len(cpu_sweeps) - len(cpu_panels)
    assert all(line.split()[1] == "bundle" and ("NVIDIA H100" in line) == (line[:12] in on_cuda) for line in gpu)
    assert any(" mhsa " in line and " ls/gpu " in line and " 1000 " in line for line in gpu)  # sweep runs
    assert any(" spans kv8 [1000] (Span probe) " in line and " notebook " in line for line in gpu)  # a panel's

    def listed(*flags: str) -> list[str]:
        assert main(["runs", "list", *argv, *flags]) == 0
        text = capsys.readouterr().out
        return [line[:12] for line in text.splitlines()[2:] if " runs" not in line]

    assert listed("--origin", "local") == [mine[:12]]
    assert len(listed("--origin", "bundle")) == shipped
    on_cpu = sorted({line[:12] for line in gpu} - on_cuda)
    assert sorted(listed("--device", "CPU")) == sorted([mine[:12], *on_cpu])
    assert len(listed("--device", "h100")) == len(on_cuda)
    ls_runs = listed("--experiment", "ls")
    assert 0 < len(ls_runs) < shipped and set(ls_runs) == set(listed("--experiment", "ls/gpu"))
    assert listed("--experiment", "notebook", "--origin", "local") == [mine[:12]]
    assert main(["runs", "export", str(tmp_path / "mine.zip"), *argv, "--origin", "local"]) == 0
    assert "exported 1 runs matching --origin local" in capsys.readouterr().out
    assert main(["runs", "import", str(tmp_path / "mine.zip"), *argv, "--origin", "local"]) == 2  # no filter there
    assert BUNDLE.is_file()
    # A student's store after importing the instructor's file: that run is "imported", the bundle's "bundle".
    student = ["--store", str(tmp_path / "student")]
    assert main(["runs", "import", str(tmp_path / "mine.zip"), *student]) == 0
    capsys.readouterr()
    assert main(["runs", "list", *student]) == 0
    out = capsys.readouterr().out
    assert next(line for line in out.splitlines() if line.startswith(mine[:12])).split()[1] == "imported"
    assert "(0 trained here, 1 imported, 0 from the shipped workshop bundle)" in out


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_exported_files_and_run_records_get_the_mode_a_plain_file_write_gives(umask, tmp_path, capsys):
    """`runs export` (and every atomically written output) is readable as the umask allows — 0644 under the usual
    022, like any file a program writes — not the 0600 of a temporary file."""
    from test_store import make_record

    store = ResultsStore(tmp_path / "store")
    old = os.umask(umask)
    try:
        key = store.put(make_record())
        assert main(["runs", "export", str(tmp_path / "out.zip"), "--store", str(store.root)]) == 0
    finally:
        os.umask(old)
    expected = 0o666 & ~umask
    assert (tmp_path / "out.zip").stat().st_mode & 0o777 == expected
    assert store.path(key).stat().st_mode & 0o777 == expected
    (tmp_path / "out.zip").chmod(0o640)  # a file that exists keeps its mode when it is written again
    assert main(["runs", "export", str(tmp_path / "out.zip"), "--store", str(store.root)]) == 0
    assert (tmp_path / "out.zip").stat().st_mode & 0o777 == 0o640


# ================================================================================ help, python -m, flags
def test_help_lists_every_subcommand_with_a_line_and_python_m_works():
    for module in ("spanviz",):  # one entry: python -m spanviz (spanviz.cli has no second __main__)
        out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True,
                             env={**os.environ, "COLUMNS": "120"})
        assert out.returncode == 0, out.stderr
        for name, command in COMMANDS.items():
            first_words = " ".join(command.__doc__.split()[:3])
            assert name in out.stdout and first_words in out.stdout, (name, out.stdout)


def test_help_alone_is_the_full_parsers_help_without_importing_the_commands():
    import contextlib
    import io

    from spanviz.cli.app import parse
    from spanviz.cli.help import SUMMARIES, top_help

    assert list(SUMMARIES) == list(COMMANDS)
    assert all(SUMMARIES[name][0] == cls.__name__ for name, cls in COMMANDS.items())
    texts = []
    for show in (top_help, lambda: parse(["--help"])):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), contextlib.suppress(SystemExit):
            show()
        texts.append(buffer.getvalue())
    assert texts[0] == texts[1] and "• bench" in texts[0]  # a summary out of date differs here
    code = ("import sys; from spanviz.cli import main; main(['--help']); "
            "print(sorted(m for m in ('torch', 'scipy', 'spanviz.cli.app') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip().endswith("[]"), out.stdout[-300:] + out.stderr[-300:]


def test_flags_are_generated_from_the_config_dataclasses():
    """One source of truth: tyro parses the config dataclasses themselves (no generated copies), so every field is
    a flag whose default and help are the dataclass's."""
    from spanviz.cli.train import TrainCommand

    hints = typing.get_type_hints(TrainCommand, include_extras=True)
    assert typing.get_args(hints["model"])[0] is GPTConfig and typing.get_args(hints["train"])[0] is TrainConfig
    out = subprocess.run([sys.executable, "-m", "spanviz", "train", "--help"], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "200"})
    text = " ".join(out.stdout.replace("│", " ").split())
    for config_class, skip in ((TrainConfig, ()), (GPTConfig, ("vocab_size", "spans"))):
        helps = {p.arg_name: " ".join(p.description.split())
                 for p in docstring_parser.parse(config_class.__doc__ or "").params if p.description}
        for f in fields(config_class):
            if f.name in skip:
                continue
            flag = "--" + f.name.replace("_", "-")
            assert flag in text, flag
            assert f"{helps[f.name][:40]}" in text, (flag, helps[f.name][:40])
            assert f"(default: {f.default})" in text or f"(default: {f.default!s})" in text, flag
    assert "regardless of --probe-every" in text  # --fp8-probe's schedule is said



def test_config_file_values_are_defaults_that_typed_flags_override(tmp_path):
    """--config FILE's values come first and typed flags override them; a field the file leaves out keeps its own
    default rule (the warm-up is 10 % of the typed --steps, not of the file's)."""
    from spanviz.cli.app import parse
    from spanviz.cli.config_file import read_config_file

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model": {"n_layer": 3, "bias": False}, "train": {"steps": 300, "lr": 0.001}}))
    argv = ["train", "--config", str(path), "--steps", "1000", "--n-layer", "1"]
    config = read_config_file(argv)
    cmd = parse([argv[0], *config.flags, *argv[1:]])
    assert (cmd.train.steps, cmd.train.lr, cmd.train.warmup_steps) == (1000, 0.001, 100)
    assert (cmd.model.n_layer, cmd.model.bias) == (1, False)

@pytest.mark.slow
def test_demo_config_lowers_val_loss_by_two_nats(wikitext_dir, tmp_path):
    """The foundation issue's 'done when': the default CLI config, 300 steps on CPU, val loss −2 nats."""
    out = tmp_path / "demo"
    rc = main(["train", "--data-dir", str(wikitext_dir), *SPLITS, "--steps", "300", "--out", str(out)])
    assert rc == 0
    vals = [v for v in history(out)["val_loss"] if v is not None]
    assert vals[0] == pytest.approx(math.log(8192), abs=0.3), "first eval should be at init, near ln V"
    assert vals[0] - min(vals) >= 2.0, vals


def test_sweep_growth_and_alphas_run_and_write_their_tables(data_flags, tmp_path, capsys):
    """The two sweeps of the teaching figures from the command line (tiny sizes): summaries and per-seed tables."""
    tiny = ["--seeds", "1", "--steps", "2", "--model", "context_length=16", "--model", "d_model=16",
            "--train", "batch_size=2", "--train", "eval_iters=1", *data_flags]
    rc = main(["sweep", "growth", "--lrs", "0.01", "0.3", "--variants", "mhsa", "softcap", *tiny,
               "--out", str(tmp_path / "g.json")])
    assert rc == 0, capsys.readouterr().err
    growth = json.loads((tmp_path / "g.json").read_text())
    assert sorted((r["variant"], r["lr"]) for r in growth["runs"]) == [("mhsa", 0.01), ("mhsa", 0.3),
                                                                       ("softcap", 0.01), ("softcap", 0.3)]
    assert growth["variants"]["softcap"]["model"]["logit_softcap"] == 50.0
    rc = main(["sweep", "alphas", "--values", "0", *tiny, "--out", str(tmp_path / "a.json")])
    assert rc == 0, capsys.readouterr().err
    alphas = json.loads((tmp_path / "a.json").read_text())
    assert [r["variant"] for r in alphas["rows"]] == ["standard", "[1000]", "[0000]", "α0=0", "α1=0", "α2=0",
                                                      "α3=0"]
    assert {row["variant"] for row in read_per_seed(tmp_path / "a.per_seed.csv")} == {r["variant"] for r in
                                                                                      alphas["rows"]}


@pytest.mark.parametrize("argv, named", [
    (["sweep", "ls", "--lrs", "0.1"], "--lrs"), (["sweep", "growth", "--values", "0"], "--values"),
    (["sweep", "growth", "--train", "lr=0.1"], "lr"), (["sweep", "growth", "--lrs", "-0.1"], "lrs"),
    (["sweep", "growth", "--variants", "gqa"], "variants"), (["sweep", "growth", "--model", "qk_norm=true"], "qk_norm"),
    (["sweep", "alphas", "--values", "1"], "values"), (["sweep", "growth", "--size", "gpu"], "--size"),
])  # fmt: skip
def test_sweep_growth_and_alphas_refuse_what_cannot_apply_before_any_data(argv, named, no_data, capsys):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and named in err and "Traceback" not in err, err
