"""Bad input at the command line and in the files it reads: every input gets a clean error or correct behaviour, no run is lost.

Inputs: command lines (bad values for every flag, flags without effect, impossible sizes and devices, unwritable
and foreign paths, and valid ones), Python configurations (every field of GPTConfig, TrainConfig, SpanConfig and
the probes' settings with wrong types and values), corrupted files (checkpoints, run records, store entries, the
token cache, the remembered data source, config files) and malicious archives (wrong types, deep nesting,
repeated keys, a zip bomb, path traversal). A "clean error" is a non-zero exit whose error is one line starting
``spanviz <command>: error:`` (for Python configurations: a ``ValueError``); a traceback, an "internal error" or
any other exception fails. A precious finished run sits beside the attacks; it is checked after each one, and
the kill -9 / second-writer / full-disk scenarios check that no checkpointed work is lost.

``python tests/test_cli_bad_input.py`` prints the counts for the report: inputs tried, correct behaviour, clean
errors, tracebacks (goal 0), runs lost (goal 0). pytest runs the same inputs, one test each.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import time
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import pytest
import torch

from spanviz.contexts import torch_threads

REPO = Path(__file__).resolve().parents[1]
WIKITEXT = REPO.parent / "shared" / "data" / "wikitext-2"
BASE = ["--d-model", "16", "--n-head", "2", "--n-layer", "1", "--context-length", "16", "--batch-size", "2",
        "--steps", "2", "--eval-iters", "1", "--max-vocab", "512", "--device", "cpu", "--no-store"]
"""Tiny settings first on every train line; the attacking flags come after them (the last value wins)."""


# ============================================================================================ the stage
@dataclass
class Stage:
    """The attack's world: a scratch folder (cwd), SPANVIZ_HOME with the data remembered, a precious run."""

    root: Path
    home: Path
    precious: Path

    def fingerprint(self) -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(self.precious.iterdir())
                if p.is_file() and p.name != ".spanviz.lock"}


def cli(argv: list[str]) -> tuple[int, str, str, BaseException | None]:
    """``spanviz ARGV`` in this process: (exit status, stdout, stderr, an exception that escaped main)."""
    from spanviz.cli import main

    out, err = io.StringIO(), io.StringIO()
    escaped = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except BaseException as error:  # noqa: BLE001 - an escaped exception is what we count
            rc, escaped = -1, error
    return rc, out.getvalue(), err.getvalue(), escaped


def outcome_of_cli(argv: list[str]) -> tuple[str, str]:
    """("ok" | "clean" | "traceback", detail) of one command line."""
    rc, out, err, escaped = cli(argv)
    text = out + err
    if escaped is not None or "Traceback" in text or "internal error" in text:
        return "traceback", f"{type(escaped).__name__ if escaped else ''} {text[-800:]}"
    if rc == 0:
        return "ok", out[-300:]
    errors = [line for line in err.splitlines() if ": error: " in line]
    if len(errors) == 1 and errors[0].startswith("spanviz") and err.strip().endswith(errors[0].strip()):
        return "clean", errors[0]
    if rc == 1 and not errors:  # a run that diverged, a rejected import entry: reported, not an error
        return "clean", text[-300:]
    return "traceback", f"unclean output (exit {rc}): {text[-800:]}"


# ============================================================================================ command lines
def _flag_values() -> list[tuple[list[str], str]]:
    """(train flags, expectation) — "error" or "ok" — for every flag with wrong, extreme and good values."""
    bad = {
        "--steps": ["0", "-1", "x", "1.5", "", "1e3"], "--batch-size": ["0", "-5", "x", "1000000000000"],
        "--context-length": ["0", "-1", "x", "1000000000"], "--n-layer": ["0", "x", "1000000000"],
        "--n-head": ["0", "3", "x"], "--d-model": ["0", "15", "x", "1000000000"],
        "--n-local": ["-1", "3", "1"], "--window": ["0", "-1", "5"], "--qk-rank": ["0", "99", "x"],
        "--eval-interval": ["0", "-1"], "--eval-iters": ["0", "1000000000000"], "--warmup-steps": ["-1", "5"],
        "--seed": ["-1", str(2**64)], "--probe-every": ["0", "-3", "5"], "--checkpoint-interval": ["-1", "x"],
        "--lr-spike-steps": ["-1"], "--max-vocab": ["-1", "2", "x"], "--lr": ["0", "-1", "nan", "inf", "x"],
        "--dropout": ["-0.1", "1", "1.5", "nan"], "--min-lr-ratio": ["-1", "2", "nan"],
        "--weight-decay": ["-1", "inf"], "--grad-clip": ["-1", "nan"], "--beta1": ["1", "-0.1"], "--beta2": ["1.5"],
        "--lr-spike-factor": ["0.5", "nan"], "--dtype": ["float16", "bfloat16"],
        "--device": ["tpu", "cuda:7", "", "mps"] + ([] if torch.cuda.is_available() else ["cuda"]),
        "--attn-backend": ["bogus"] + ([] if torch.cuda.is_available() else ["flex"]),
        "--spans-preset": ["nope"], "--alphas": ["1x00", "10", "", "1,2"], "--spans-layers": ["a", "0", "-1"],
        "--tokenizer": ["bpe"], "--wikitext-config": ["x"], "--train-split": ["nope"], "--eval-split": ["train"],
        "--data-dir": ["/nonexistent/wikitext", "/dev/null"],
    }
    cases = [([flag, value], "error") for flag, values in bad.items() for value in values]
    cases += [
        (["--lr-spike-factor", "5", "--lr-spike-start", "9"], "error"), (["--steps"], "error"),
        (["--bogus-flag", "1"], "error"), (["positional-junk"], "error"), (["--resume"], "error"),
        (["--resume", "--out", "/nonexistent/run"], "error"), (["--config", "/nonexistent.json"], "error"),
        (["--config", "/"], "error"), (["--out", "/dev/null/run"], "error"), (["--out", "/dev/null"], "error"),
        (["--spans-preset", "kv8", "--spans-layers", "5"], "error"), (["--n-local", "1", "--window", "0"], "error"),
        (["--fp8-probe", "--qk-norm"], "error"),
    ]
    good = [[], ["--qk-norm"], ["--n-local", "1", "--window", "4"], ["--spans-preset", "qk4", "--alphas", "1100"],
            ["--alphas", "1,0.5,0,0"], ["--logit-probe", "--probe-every", "1"], ["--spans-probe"], ["--fp8-probe"],
            ["--qk-rank", "2"], ["--no-bias"], ["--grad-clip", "0"], ["--dropout", "0.5"],
            ["--lr-spike-factor", "5", "--lr-spike-start", "1", "--lr-spike-steps", "1"],
            ["--warmup-steps", "0"], ["--n_layer", "2"], ["--steps=3"]]
    # Issue 27: flags that would have no effect are refused (BASE types --max-vocab; there is no --out here).
    cases += [(["--tokenizer", "byte"], "error"), (["--checkpoint-interval", "0"], "error")]
    return cases + [(flags, "ok") for flags in good]


def command_lines(stage: Stage) -> list[tuple[list[str], str]]:
    """Every command line of the attack with its expectation ("error", "ok" or "either")."""
    blocker = stage.root / "a-file"
    precious = str(stage.precious)
    lines = [(["train", *BASE, *flags], expect) for flags, expect in _flag_values()]
    lines += [
        (["train", *BASE, "--out", precious], "error"),  # an existing run is never overwritten
        (["train", *BASE, "--out", precious, "--resume", "--d-model", "32"], "error"),
        (["train", *BASE, "--out", precious, "--resume", "--steps", "1"], "error"),
        (["train", *BASE, "--out", precious, "--resume", "--config", str(stage.precious / "run.json")], "error"),
        (["train", *BASE, "--out", str(blocker / "run")], "error"), (["train", *BASE, "--out", str(blocker)], "error"),
        (["train", *BASE, "--config", str(blocker)], "error"),
        (["train", *BASE, "--config", str(stage.precious / "run.json"), "--out", str(stage.root / "from-config")],
         "ok"),
        (["train", *BASE, "--out", str(stage.root / "fresh")], "ok"),
        (["sweep"], "error"), (["sweep", "nope"], "error"), (["sweep", "spans", "--size", "huge"], "error"),
        (["sweep", "ls", "--size", "paper"], "error"), (["sweep", "fp8", "--size", "gpu"], "error"),
        (["sweep", "spans", "--seeds", "0"], "error"), (["sweep", "spans", "--seeds", "-2"], "error"),
        (["sweep", "spans", "--seeds", "x"], "error"), (["sweep", "spans", "--steps", "0"], "error"),
        (["sweep", "fp8", "--steps", "1"], "error"), (["sweep", "ls", "--scenario", "none"], "error"),
        (["sweep", "fp8", "--scenario", "meteor"], "error"), (["sweep", "ls", "--model", "context=3"], "error"),
        (["sweep", "ls", "--model", "n_head=3"], "error"), (["sweep", "ls", "--model", "d_model"], "error"),
        (["sweep", "ls", "--train", "lr=abc"], "error"), (["sweep", "ls", "--train", "steps=0"], "error"),
        (["sweep", "ls", "--model", "spans=1"], "error"), (["sweep", "ls", "--model", "vocab_size=3"], "error"),
        (["sweep", "spans", "--tokenizer", "bpe"], "error"), (["sweep", "spans", "--max-vocab", "1"], "error"),
        (["sweep", "spans", "--data-dir", "/nonexistent"], "error"), (["sweep", "spans", "--out", "/"], "error"),
        (["sweep", "fp8", "--steps", "4"], "error"),  # its warm-up (10) does not fit in 4 updates: said so
        (["sweep", "fp8", "--steps", "3", "--seeds", "1", "--train", "warmup_steps=0", "--train", "batch_size=2",
          "--model", "context_length=16", "--model", "d_model=16", "--max-vocab", "512"], "ok"),
        (["sweep", "ls", "--steps", "2", "--seeds", "1", "--no-store", "--model", "context_length=16",
          "--model", "d_model=16", "--train", "batch_size=2", "--train", "eval_iters=1"], "ok"),
        (["runs"], "error"), (["runs", "bogus"], "error"), (["runs", "export"], "error"),
        (["runs", "import"], "error"), (["runs", "export", str(stage.root)], "error"),
        (["runs", "import", "/nonexistent.zip"], "error"), (["runs", "import", str(stage.root)], "error"),
        (["runs", "import", str(blocker)], "error"), (["runs", "list", "--store", str(blocker)], "error"),
        (["runs", "list", "extra"], "error"), (["runs", "list"], "ok"),
        (["runs", "export", str(stage.root / "all.zip")], "ok"),
        (["bench", "--device", "foo"], "error"), (["bench", "--only", "nope"], "error"),
        (["bench", "--only", ","], "error"), (["bench", "--quick", "--device", "cuda:9"], "error"),
        (["prepare-data", "--data-dir", "/nonexistent"], "error"), (["prepare-data", "--train-split", "nope"], "error"),
        (["prepare-data", "--max-vocab", "2"], "error"), (["prepare-data", "--eval-split", "train"], "error"),
        (["prepare-data", "--max-vocab", "512"], "ok"),
        ([], "error"), (["bogus"], "error"), (["--help"], "ok"), (["train", "--help"], "ok"),
    ]
    return lines


# ============================================================================================ Python configs
WRONG = [None, "x", -1, 0, 1.5, math.nan, math.inf, True, [], {}, 10**30, "", -(10**30), (1,), "1000"]


def python_configs() -> list[tuple[str, Callable[[], object]]]:
    """(id, constructor call) for every config field and probe setting with every value of :data:`WRONG`."""
    from spanviz.fp8 import FP8Probe
    from spanviz.local_global import LogitProbe
    from spanviz.model import GPTConfig
    from spanviz.spans import SpanConfig, SpanProbe
    from spanviz.train import TrainConfig

    cases = []
    for cls in (GPTConfig, TrainConfig, SpanConfig):
        for f in fields(cls):
            for value in WRONG:
                cases.append((f"{cls.__name__}({f.name}={value!r:.20})", lambda c=cls, n=f.name, v=value: c(**{n: v})))
    probes = {LogitProbe: ("every", "entropy", "name"), SpanProbe: ("every", "cfg", "per_head"),
              FP8Probe: ("every", "delta", "margin", "strategies", "fmt", "history_len", "algo", "kappa", "burn_in",
                         "decay")}
    for cls, names in probes.items():
        for name in names:
            for value in WRONG:
                cases.append((f"{cls.__name__}({name}={value!r:.20})", lambda c=cls, n=name, v=value: c(**{n: v})))
    return cases


def outcome_of_config(make: Callable[[], object]) -> tuple[str, str]:
    try:
        make()
    except ValueError as error:
        return "clean", str(error)[:200]
    except Exception as error:  # noqa: BLE001 - anything but ValueError is a traceback for the user
        return "traceback", f"{type(error).__name__}: {error}"
    return "ok", "accepted"


# ============================================================================================ corrupted files
def corrupted_files(stage: Stage) -> list[tuple[str, Callable[[Path], list[str]], str]]:
    """(id, damage(folder) -> command line, expectation) — each damages a copy of the precious run or a store."""

    def ckpt(change):
        def damage(folder: Path) -> list[str]:
            path = folder / "checkpoint.pt"
            change(path)
            return ["train", "--resume", "--out", str(folder), "--steps", "4"]
        return damage

    def torch_edit(edit):
        def change(path: Path) -> None:
            state = torch.load(path, weights_only=True)
            edit(state)
            torch.save(state, path)
        return change

    cases = [
        ("checkpoint truncated", ckpt(lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])), "error"),
        ("checkpoint random bytes", ckpt(lambda p: p.write_bytes(os.urandom(p.stat().st_size))), "error"),
        ("checkpoint empty", ckpt(lambda p: p.write_bytes(b"")), "error"),
        ("checkpoint a folder", ckpt(lambda p: (p.unlink(), p.mkdir())), "error"),
        ("checkpoint foreign pickle", ckpt(lambda p: p.write_bytes(pickle.dumps(subprocess.Popen))), "error"),
        ("checkpoint a list", ckpt(lambda p: torch.save([1, 2], p)), "error"),
        ("checkpoint step a string", ckpt(torch_edit(lambda s: s.update(step="four"))), "error"),
        ("checkpoint step negative", ckpt(torch_edit(lambda s: s.update(step=-3))), "error"),
        ("checkpoint step beyond", ckpt(torch_edit(lambda s: s.update(step=10**6))), "error"),
        ("checkpoint bad model_config", ckpt(torch_edit(lambda s: s.update(model_config="{nope"))), "error"),
        ("checkpoint unknown field", ckpt(torch_edit(lambda s: s.update(train_config='{"stepz": 3}'))), "error"),
        ("checkpoint bad record", ckpt(torch_edit(lambda s: s.update(record='{"config": [1]}'))), "error"),
        ("checkpoint wrong tensor", ckpt(torch_edit(lambda s: s["model"].update({"wte.weight": torch.ones(2)}))),
         "error"),
        ("checkpoint rng garbage", ckpt(torch_edit(lambda s: s["rng"].update(batch=torch.ones(3)))), "error"),
        ("checkpoint optimizer garbage", ckpt(torch_edit(lambda s: s.update(optimizer={"state": 5}))), "error"),
    ]
    cases += [(f"checkpoint without {key}", ckpt(torch_edit(lambda s, k=key: s.pop(k))), "error")
              for key in ("format", "model_config", "train_config", "record", "step", "model", "optimizer", "rng")]

    def run_json(text):
        def damage(folder: Path) -> list[str]:
            (folder / "run.json").write_text(text)
            return ["train", *BASE, "--out", str(folder)]
        return damage

    def run_json_resume(text):
        def damage(folder: Path) -> list[str]:
            (folder / "run.json").write_text(text)
            return ["train", "--resume", "--out", str(folder), "--steps", "4"]
        return damage

    cases += [("run.json garbage, new run into it", run_json("{garbage"), "error"),
              ("run.json a list, new run into it", run_json("[1]"), "error"),
              ("run.json garbage, resume", run_json_resume("{garbage"), "ok"),
              ("run.json deep nesting, resume", run_json_resume("[" * 100_000), "ok")]

    def store_entry(payload: bytes, command: str):
        def damage(folder: Path) -> list[str]:
            from spanviz.store import ResultsStore

            store = ResultsStore(folder / "store")
            from test_store import make_record

            store.put(make_record())
            bad = store.put(make_record(seed=1))
            store.path(bad).write_bytes(payload)
            tail = [str(folder / "x.zip")] if command == "export" else []
            return ["runs", command, *tail, "--store", str(store.root)]
        return damage

    for name, payload in (("garbage", b"\x00\xff"), ("wrong types", b'{"config": [1], "history": "abc", '
                          b'"status": "finished"}'), ("deep", b"[" * 100_000), ("empty", b"")):
        for command in ("list", "export"):
            cases.append((f"store entry {name}, runs {command}", store_entry(payload, command), "ok"))

    def token_cache(edit):
        def damage(folder: Path) -> list[str]:
            cache = stage.home / "tokens"
            for manifest in cache.glob("*.json"):
                edit(manifest, manifest.with_suffix(".pt"))
            return ["prepare-data", "--max-vocab", "512"]
        return damage

    def poison(manifest: Path, ids: Path) -> None:
        payload = pickle.dumps(subprocess.Popen)
        ids.write_bytes(payload)
        try:
            saved = json.loads(manifest.read_text())
        except ValueError:  # damaged by an earlier case
            return
        saved["payload_sha256"] = hashlib.sha256(payload).hexdigest()
        manifest.write_text(json.dumps(saved))

    def manifest_types(manifest: Path, ids: Path) -> None:
        manifest.write_text(json.dumps({"payload_sha256": hashlib.sha256(ids.read_bytes()).hexdigest(),
                                        "n_tokens": "many", "tokenizer_state": [1]}))

    cases += [("token cache poisoned", token_cache(poison), "ok"),
              ("token cache truncated", token_cache(lambda m, i: i.write_bytes(i.read_bytes()[:100])), "ok"),
              ("token cache manifest garbage", token_cache(lambda m, i: m.write_text("{")), "ok"),
              ("token cache manifest types", token_cache(manifest_types), "ok")]

    def data_source(text):
        def damage(folder: Path) -> list[str]:
            (stage.home / "data-source.json").write_text(text)
            return ["prepare-data", "--max-vocab", "512", "--data-dir", str(WIKITEXT), "--train-split",
                    "validation", "--eval-split", "test"]
        return damage

    cases += [("data-source.json garbage", data_source("{"), "ok"),
              ("data-source.json wrong types", data_source('{"data_dir": 5, "splits": []}'), "ok")]

    def config_file(text):
        def damage(folder: Path) -> list[str]:
            path = folder / "config.json"
            path.write_text(text)
            return ["train", *BASE, "--config", str(path)]
        return damage

    for name, text in (("not JSON", "{"), ("a list", "[1]"), ("unknown field", '{"model": {"d_modle": 3}}'),
                       ("wrong type", '{"train": {"steps": "many"}}'), ("bad value", '{"train": {"lr": -1}}'),
                       ("sections not objects", '{"model": 5}'), ("deep", "[" * 100_000), ("empty", "")):
        cases.append((f"config file {name}", config_file(text), "error"))
    return cases


# ============================================================================================ archives
def malicious_archives(stage: Stage) -> list[tuple[str, Callable[[Path], Path], str]]:
    """(id, build(folder) -> archive, expectation) for `spanviz runs import`."""
    from test_store import make_record

    from spanviz.store.keys import config_key

    good = make_record()
    key = config_key(good.config)

    def archive(manifest=None, runs=None, raw=None, name="a.zip"):
        def build(folder: Path) -> Path:
            path = folder / name
            with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
                if manifest is not None or raw is not None:
                    z.writestr("manifest.json", raw if raw is not None else json.dumps(manifest))
                for member, payload in (runs or {}).items():
                    z.writestr(member, payload() if callable(payload) else payload)
            return path
        return build

    def with_fields(**changes):
        d = json.loads(good.to_json())
        d.update(changes)
        return json.dumps(d)

    manifest = {"format": "spanviz-runs-1", "keys": [key]}
    cases = [
        ("keys a number", archive({"format": "spanviz-runs-1", "keys": 5}), "error"),
        ("keys numbers", archive({"format": "spanviz-runs-1", "keys": [5, 6]}), "error"),
        ("format wrong", archive({"format": "zip", "keys": []}), "error"),
        ("manifest a list", archive(raw="[1]"), "error"),
        ("manifest not JSON", archive(raw="{"), "error"),
        ("manifest deep", archive(raw="[" * 100_000), "error"),
        ("manifest missing", archive(runs={"x": "1"}), "error"),
        ("one key 200k times", archive({"format": "spanviz-runs-1", "keys": [key] * 200_000}), "error"),
        ("config a list", archive(manifest, {f"runs/{key}.json": with_fields(config=[1])}), "either"),
        ("history a string", archive(manifest, {f"runs/{key}.json": with_fields(history="abc")}), "either"),
        ("status unknown", archive(manifest, {f"runs/{key}.json": with_fields(status="won")}), "either"),
        ("record deep", archive(manifest, {f"runs/{key}.json": '{"config":' + "[" * 100_000}), "either"),
        ("45 MB message", archive(manifest, {f"runs/{key}.json": lambda: with_fields(message="x" * 45_000_000)}),
         "either"),
        ("key mismatch", archive(manifest, {f"runs/{key}.json": make_record(seed=7).to_json()}), "either"),
        ("member missing", archive(manifest), "either"),
        ("path traversal", archive({"format": "spanviz-runs-1", "keys": ["../../../tmp/x"]},
                                   {"runs/../../../tmp/x.json": "{}"}), "either"),
        ("good", archive(manifest, {f"runs/{key}.json": good.to_json()}), "ok"),
    ]

    def not_zip(folder: Path) -> Path:
        path = folder / "n.zip"
        path.write_bytes(os.urandom(1000))
        return path

    def empty(folder: Path) -> Path:
        path = folder / "e.zip"
        path.write_bytes(b"")
        return path

    return cases + [("not a zip", not_zip, "error"), ("empty file", empty, "error")]


# ============================================================================================ runs lost?
def _child(args: list[str], home: Path) -> subprocess.Popen:
    env = {**os.environ, "SPANVIZ_HOME": str(home), "OMP_NUM_THREADS": "1"}
    for name in ("SPANVIZ_WIKITEXT_DIR", "SPANVIZ_TRAIN_SPLIT", "SPANVIZ_EVAL_SPLIT", "SPANVIZ_SMOKE"):
        env.pop(name, None)
    return subprocess.Popen([sys.executable, "-m", "spanviz", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _rows(out: Path) -> int:
    try:
        return len(json.loads((out / "run.json").read_text())["history"]["step"])
    except (OSError, ValueError, KeyError):
        return -1


def _wait(condition, timeout=300.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def scenario_kill_9(stage: Stage, at_rows: int) -> str:
    """kill -9 once run.json shows ``at_rows`` rows (0: right at the start), then resume; compare to a clean run."""
    args = ["train", *BASE, "--steps", "40", "--eval-interval", "4", "--dropout", "0.1"]
    out = stage.root / f"killed-{at_rows}"
    child = _child([*args, "--out", str(out)], stage.home)
    try:
        reached = _wait(lambda: _rows(out) >= at_rows or child.poll() is not None)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
    if not reached:
        return "lost: the child never reached the kill point"
    resumed = (stage.root / f"killed-{at_rows}" / "checkpoint.pt").exists()
    rc, _, err, escaped = cli([*args, "--resume", "--out", str(out)] if resumed else [*args, "--out", str(out)])
    if rc != 0 or escaped is not None:
        return f"lost: continuing after kill -9 failed ({rc}): {err[-300:]}"
    straight = stage.root / f"straight-{at_rows}"
    cli([*args, "--out", str(straight)])
    a, b = (json.loads((d / "run.json").read_text())["history"] for d in (out, straight))
    same = all(a[k] == b[k] for k in ("step", "train_loss", "val_loss", "lr"))
    return "ok" if same else "lost: the resumed curve differs from the uninterrupted one"


def scenario_second_writer(stage: Stage) -> str:
    out = stage.root / "contested"
    args = ["train", *BASE, "--eval-interval", "5", "--warmup-steps", "0", "--out", str(out)]
    first = _child([*args, "--steps", "300"], stage.home)
    try:
        if not _wait(lambda: _rows(out) >= 1 or first.poll() is not None) or first.poll() is not None:
            return "lost: the first writer did not start"
        rc, _, err, _ = cli([*args, "--steps", "3", "--seed", "5"])
        first.send_signal(signal.SIGINT)
        first.wait(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    from spanviz.train.checkpoint import load_checkpoint

    record = json.loads((out / "run.json").read_text())
    ckpt = load_checkpoint(out / "checkpoint.pt")
    if rc != 2 or "in use" not in err:
        return f"lost: a second writer was not refused ({rc}): {err[-200:]}"
    same_run = record["config"]["train"]["seed"] == 0 == ckpt.train_cfg.seed
    if not same_run or ckpt.step != len(record["history"]["step"]):
        return "lost: run.json and checkpoint.pt do not belong to the same run"
    return "ok"


@contextlib.contextmanager
def disk_full_at_checkpoint(n: int):
    """Inside the block, the ``n``-th write of a checkpoint.pt fails with "No space left on device"."""
    import spanviz.train.checkpoint as train_module

    real, calls = train_module.atomic_write, []

    def failing(path, payload):
        if Path(path).name == "checkpoint.pt":
            calls.append(path)
            if len(calls) == n:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, payload)

    train_module.atomic_write = failing
    try:
        yield
    finally:
        train_module.atomic_write = real


def scenario_disk_full(stage: Stage) -> str:
    from spanviz.train.checkpoint import load_checkpoint

    out = stage.root / "full-disk"
    args = ["train", *BASE, "--steps", "12", "--eval-interval", "3", "--out", str(out)]
    with disk_full_at_checkpoint(2):
        rc, _, err, escaped = cli(args)
    if escaped is not None or rc != 2 or load_checkpoint(out / "checkpoint.pt").step != 1:
        return f"lost: a full disk cost the checkpoint or gave a traceback ({rc}): {err[-300:]}"
    rc, _, err, _ = cli([*args, "--resume"])
    return "ok" if rc == 0 and _rows(out) == 12 else f"lost: could not continue after the disk had room ({err})"


def scenario_divergence(stage: Stage) -> str:
    from spanviz.train.checkpoint import load_checkpoint

    out = stage.root / "diverged"
    rc, text, _, _ = cli(["train", *BASE, "--steps", "40", "--lr", "1e6", "--grad-clip", "0", "--warmup-steps", "0",
                          "--eval-interval", "2", "--out", str(out)])
    if rc != 1 or json.loads((out / "run.json").read_text())["status"] != "diverged":
        return f"lost: the divergence was not recorded ({rc})"
    if (out / "checkpoint.pt").exists():
        kept = load_checkpoint(out / "checkpoint.pt")
        if f"({kept.step} of 40 updates)" not in text:
            return "lost: the message does not say which checkpoint is on disk"
    elif "No checkpoint had been written yet" not in text:
        return "lost: the message claims a checkpoint that does not exist"
    return "ok"


def scenarios() -> list[tuple[str, Callable[[Stage], str]]]:
    return [("kill -9 before the first checkpoint", lambda s: scenario_kill_9(s, 0)),
            ("kill -9 mid-run", lambda s: scenario_kill_9(s, 9)),
            ("a second writer into the same --out", scenario_second_writer),
            ("the disk fills up mid-run", scenario_disk_full),
            ("the run diverges", scenario_divergence)]


# ============================================================================================ all inputs
Outcome = tuple[str, str]
"""("ok" | "clean" | "traceback" | "lost", detail)."""


def attack_inputs(stage: Stage) -> list[tuple[str, str, str, Callable[[], Outcome]]]:
    """Every input of the attack: (group, label, expectation, run) — run() gives its :data:`Outcome`."""

    def command(argv: list[str]) -> Outcome:
        before = stage.fingerprint()
        kind, detail = outcome_of_cli(argv)
        return ("lost", "the precious run changed") if stage.fingerprint() != before else (kind, detail)

    def damaged(name: str, damage: Callable[[Path], list[str]]) -> Outcome:
        return outcome_of_cli(damage(_copy_precious(stage, name)))

    def archive(name: str, build: Callable[[Path], Path]) -> Outcome:
        folder = stage.root / "archives" / name.replace(" ", "-")
        folder.mkdir(parents=True, exist_ok=True)
        return outcome_of_cli(["runs", "import", str(build(folder)), "--store", str(folder / "store")])

    def scenario(run: Callable[[Stage], str]) -> Outcome:
        result = run(stage)
        return ("ok", "") if result == "ok" else ("lost", result)

    items = [("command lines", " ".join(argv), expect, lambda a=argv: command(a))
             for argv, expect in command_lines(stage)]
    items += [("Python configs", label, "either", lambda m=make: outcome_of_config(m))
              for label, make in python_configs()]
    items += [("corrupted files", label, expect, lambda n=label, d=damage: damaged(n, d))
              for label, damage, expect in corrupted_files(stage)]
    items += [("malicious archives", label, expect, lambda n=label, b=build: archive(n, b))
              for label, build, expect in malicious_archives(stage)]
    items += [("run-loss scenarios", label, "ok", lambda r=run: scenario(r)) for label, run in scenarios()]
    return items


def failure(kind: str, expect: str) -> bool:
    """Whether an outcome breaks a promise: a traceback, a lost run, or the wrong kind for the expectation."""
    return kind in ("traceback", "lost") or (expect == "error" and kind != "clean") or (expect == "ok" and kind != "ok")


def _copy_precious(stage: Stage, name: str) -> Path:
    import shutil

    folder = stage.root / "damaged" / name.replace(" ", "-").replace("/", "-")
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(stage.precious, folder)
    return folder


def build_stage(root: Path) -> Stage:
    (root / "a-file").write_text("x")
    rc = cli(["prepare-data", "--data-dir", str(WIKITEXT), "--train-split", "validation", "--eval-split", "test",
              "--max-vocab", "512"])[0]
    assert rc == 0
    precious = root / "precious"
    assert cli(["train", *BASE, "--steps", "3", "--out", str(precious)])[0] == 0
    return Stage(root, root / "home", precious)


@contextlib.contextmanager
def staged(root: Path):
    """The attack's environment in ``root`` (cwd, SPANVIZ_HOME, offline, no data variables) and its :class:`Stage`."""
    with pytest.MonkeyPatch.context() as mp, torch_threads(1):
        mp.chdir(root)
        mp.setenv("SPANVIZ_HOME", str(root / "home"))
        mp.setenv("SPANVIZ_OFFLINE", "1")
        for name in ("SPANVIZ_WIKITEXT_DIR", "SPANVIZ_TRAIN_SPLIT", "SPANVIZ_EVAL_SPLIT", "SPANVIZ_SMOKE"):
            mp.delenv(name, raising=False)
        yield build_stage(root)


# ============================================================================================ pytest
@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    if not WIKITEXT.is_dir():
        pytest.skip(f"WikiText-2 offline copy not found at {WIKITEXT}")
    with staged(tmp_path_factory.mktemp("attack")) as st:
        yield st


_IDS = [f"{group}: {label}" for group, label, _, _ in attack_inputs(Stage(Path("/S"), Path("/S/h"), Path("/S/p")))]


_BUILT: dict[int, list] = {}


@pytest.mark.parametrize("index", range(len(_IDS)), ids=_IDS)
def test_attack_input(index, stage):
    if id(stage) not in _BUILT:
        _BUILT[id(stage)] = attack_inputs(stage)
    group, label, expect, run = _BUILT[id(stage)][index]
    kind, detail = run()
    assert not failure(kind, expect), f"{kind} (expected {expect}): {detail}"


# ============================================================================================ the counts
def main() -> int:
    """Run every input once and print the counts for the report."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).parent))
    counts: Counter[tuple[str, str]] = Counter()
    failures = []
    with tempfile.TemporaryDirectory() as tmp, staged(Path(tmp)) as st:
        for group, label, expect, run in attack_inputs(st):
            kind, detail = run()
            counts[(group, kind)] += 1
            if failure(kind, expect):
                failures.append(f"[{group}] {label}: {kind} (expected {expect}): {detail[:300]}")
    groups = dict.fromkeys(group for group, _ in counts)
    for group in groups:
        row = {kind: n for (g, kind), n in counts.items() if g == group}
        print(f"{group:20s} {sum(row.values()):4d} inputs: {row}")
    total = Counter()
    for (_, kind), n in counts.items():
        total[kind] += n
    print(f"inputs tried {sum(total.values())}; correct behaviour {total['ok']}; clean errors {total['clean']}; "
          f"tracebacks {total['traceback']}; runs lost {total['lost']}")
    for line in failures:
        print("FAIL", line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
