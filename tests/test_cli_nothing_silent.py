"""The command line under attack: nothing crashes, nothing hangs, nothing is silently wrong, no run lost.

Every item of the issue is one input here, with the check that tells right from wrong; each is a test (run by
pytest, one per input) and ``python tests/test_cli_nothing_silent.py`` prints the counts for the report:

* **traceback** — an "internal error", a Python traceback, or an exception escaping ``main`` / a library call;
* **unbounded** — a command run in a child process under a time limit (:data:`TIME_LIMIT_S`) and an address-space
  limit (:data:`MEMORY_LIMIT`) that hit one, or whose peak memory (RSS) passed :data:`RSS_LIMIT_MIB`;
* **silent** — a command that exits as if all were well but did something else than asked (an option dropped or
  ignored, a duplicate store entry, a damaged checkpoint resumed, a stale status, a record stored that cannot be
  read back, curves that differ bit for bit);
* **lost** — a run that is kept nowhere while the command says it succeeded;
* **late** — a clean error about an input that could be known before any data was read, given after reading.

A clean error is a non-zero exit with one line ``spanviz <command>: error: ...`` (for the library: a
``ValueError`` naming what is wrong). The stage (a scratch folder as cwd, ``SPANVIZ_HOME``, the offline data
remembered, a precious finished run) is the one of :mod:`test_cli_bad_input`; inputs that could hang or fill memory
run as child processes under ``timeout``-like and ``ulimit -v``-like limits, so the attack never starves the
machine.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from test_cli_bad_input import BASE, WIKITEXT, Stage, _copy_precious, cli, outcome_of_cli, staged  # noqa: E402

TIME_LIMIT_S = 90
"""A child command still running after this many seconds is "unbounded" (the issue saw 7 min and hangs)."""
MEMORY_LIMIT = 5 * 2**29
"""Address-space limit of a child command [bytes] (``ulimit -v``, 2.5 GiB): spanviz with torch maps about 0.85 GiB;
the machine is shared, so a runaway child must die long before it hurts anyone."""
RSS_LIMIT_MIB = 1200
"""A child command whose peak resident memory passes this [MiB] is "unbounded" (the issue saw 3.45 and 19.9 GB;
a spanviz command with torch loaded uses about 400 MiB)."""

Outcome = tuple[str, str]
"""(kind, detail): kind is "ok", "clean", "traceback", "unbounded", "silent", "lost" or "late"."""


# ============================================================================================ helpers
class DataReads:
    """Counts the data loads (``spanviz.data.prepare_tokens``) of an in-process command."""

    def __init__(self) -> None:
        self.n = 0

    @contextlib.contextmanager
    def counting(self):
        import spanviz.data

        real = spanviz.data.prepare_tokens

        def counted(*args, **kwargs):
            self.n += 1
            return real(*args, **kwargs)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(spanviz.data, "prepare_tokens", counted)
            yield self


def command(argv: list[str], *, early: bool = True, env: dict[str, str] | None = None) -> Outcome:
    """One in-process command line: "clean" / "ok" / "traceback", and "late" for a clean error given after a data
    load when ``early`` (the input could be judged before)."""
    reads = DataReads()
    with pytest.MonkeyPatch.context() as mp, reads.counting():
        for name, value in (env or {}).items():
            mp.setenv(name, value)
        kind, detail = outcome_of_cli(argv)
    if kind == "clean" and early and reads.n:
        return "late", f"the error came after {reads.n} data load(s): {detail}"
    return kind, detail


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    os.setsid()


def bounded(argv: list[str], stage: Stage, *, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = TIME_LIMIT_S) -> tuple[Outcome, float, float]:
    """``python -m spanviz ARGV`` in a child process under the time and memory limits.

    Returns ((kind, detail), seconds, peak RSS in MiB); kind "unbounded" when a limit was hit.
    """
    full_env = {**os.environ, "SPANVIZ_HOME": str(stage.home), "SPANVIZ_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                **(env or {})}
    for name in ("SPANVIZ_WIKITEXT_DIR", "SPANVIZ_TRAIN_SPLIT", "SPANVIZ_EVAL_SPLIT", "SPANVIZ_SMOKE"):
        full_env.pop(name, None)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        child = subprocess.Popen([sys.executable, "-m", "spanviz", *argv], env=full_env, cwd=cwd or stage.root,
                                 stdout=out, stderr=err, stdin=subprocess.DEVNULL, preexec_fn=_limits)
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > timeout:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(child.pid, 0)
                child.returncode = -9
                return ("unbounded", f"still running after {timeout:.0f} s"), time.monotonic() - start, \
                    usage.ru_maxrss / 1024
            time.sleep(0.05)
        child.returncode = os.waitstatus_to_exitcode(status)
        seconds, rss = time.monotonic() - start, usage.ru_maxrss / 1024
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    rc = child.returncode
    text = stdout + stderr
    if rc < 0 or "MemoryError" in text or rss > RSS_LIMIT_MIB:
        return ("unbounded", f"exit {rc}, {seconds:.1f} s, peak RSS {rss:.0f} MiB: {text[-300:]}"), seconds, rss
    if "Traceback" in text or "internal error" in text:
        return ("traceback", text[-600:]), seconds, rss
    if rc == 0:
        return ("ok", stdout[-300:]), seconds, rss
    errors = [line for line in stderr.splitlines() if ": error: " in line]
    if len(errors) == 1 and errors[0].startswith("spanviz") and stderr.strip().endswith(errors[0].strip()):
        return ("clean", errors[0]), seconds, rss
    if rc == 1 and not errors:
        return ("clean", text[-300:]), seconds, rss
    return ("traceback", f"unclean output (exit {rc}): {text[-600:]}"), seconds, rss


def bounded_kind(argv: list[str], stage: Stage, **kwargs) -> Outcome:
    (kind, detail), seconds, rss = bounded(argv, stage, **kwargs)
    return kind, f"[{seconds:.1f} s, {rss:.0f} MiB] {detail}"


def library(call: Callable[[], object]) -> Outcome:
    """A library call: "ok", "clean" (ValueError) or "traceback" (anything else)."""
    try:
        call()
    except ValueError as error:
        return "clean", str(error)[:300]
    except Exception as error:  # noqa: BLE001 - what we count
        return "traceback", f"{type(error).__name__}: {error}"
    return "ok", "accepted"


def folder(stage: Stage, name: str) -> Path:
    path = stage.root / "i27" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_json(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())


def stored(store_root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(store_root.glob("*.json"))]


def fill_store(root: Path, n: int = 2) -> list[str]:
    from test_store import make_record

    from spanviz.store import ResultsStore

    store = ResultsStore(root)
    return [store.put(make_record(seed=seed)) for seed in range(n)]


def archive_of(path: Path, members: dict[str, bytes], *, keys: list[str] | None = None,
               encrypted: tuple[str, ...] = ()) -> Path:
    """A zip with ``manifest.json`` (listing ``keys``, default the members' keys) and the members; the members
    named in ``encrypted`` get the "encrypted" flag bit set (as a zip tool would)."""
    keys = keys if keys is not None else [m[len("runs/"):-len(".json")] for m in members]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("manifest.json", json.dumps({"format": "spanviz-runs-1", "keys": keys}))
        for name, payload in members.items():
            z.writestr(name, payload)
    if encrypted:
        data = bytearray(path.read_bytes())
        for name in encrypted:
            encoded = name.encode()
            for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # local header, central directory
                at = 0
                while (at := data.find(signature, at)) >= 0:
                    name_at = at + (30 if signature == b"PK\x03\x04" else 46)
                    if data[name_at:name_at + len(encoded)] == encoded:
                        flags = struct.unpack_from("<H", data, at + offset)[0]
                        struct.pack_into("<H", data, at + offset, flags | 0x1)
                    at += 4
        path.write_bytes(bytes(data))
    return path


def record_json(**changes) -> tuple[str, bytes]:
    """(key, JSON) of a valid stored record with ``changes`` applied to its JSON object (keys kept honest)."""
    from test_store import make_record

    from spanviz.store.keys import config_key

    obj = json.loads(make_record().to_json())
    for path, value in changes.items():
        target = obj
        parts = path.split("__")
        for part in parts[:-1]:
            target = target[part]
        target[parts[-1]] = value
    return config_key(obj["config"]), json.dumps(obj).encode()


# ============================================================================================ tracebacks (14)
def t_lr_spike_overflow(stage: Stage) -> Outcome:
    return command(["train", *BASE, "--lr-spike-factor", "1e308", "--lr-spike-start", "1", "--lr-spike-steps", "1"])


def _split_dir(stage: Stage, name: str, payload: bytes) -> Path:
    path = folder(stage, f"data-{name}")
    for split in ("valid.txt", "test.txt"):
        (path / split).write_bytes(payload)
    return path


def t_data_dir(name: str, payload: bytes) -> Callable[[Stage], Outcome]:
    def run(stage: Stage) -> Outcome:
        path = _split_dir(stage, name, payload)
        return command(["train", *BASE, "--data-dir", str(path), "--train-split", "validation", "--eval-split",
                        "test"], early=False)
    return run


def t_home_unknown_user(stage: Stage) -> Outcome:
    return command(["train", *BASE], env={"SPANVIZ_HOME": "~nonexistentuser27/x"})


def t_sweep_seeds(stage: Stage) -> Outcome:
    return command(["sweep", "spans", "--seeds", "99999999999"])


def t_bench_data_dir(which: str) -> Callable[[Stage], Outcome]:
    def run(stage: Stage) -> Outcome:
        path = "/nonexistent/wikitext" if which == "missing" else str(stage.root / "a-file")
        (kind, detail), seconds, _ = bounded(["bench", "--quick", "--device", "cpu", "--data-dir", path], stage)
        if kind == "clean" and seconds > 30:
            return "late", f"refused only after {seconds:.0f} s of benchmarking: {detail}"
        return kind, detail
    return run


def _resume_damaged(stage: Stage, name: str, edit: Callable[[dict], None]) -> tuple[Outcome, Path]:
    run = _copy_precious(stage, name)
    path = run / "checkpoint.pt"
    state = torch.load(path, weights_only=True)
    edit(state)
    torch.save(state, path)
    return command(["train", "--resume", "--out", str(run), "--steps", "5"]), run


def t_rng_size(stage: Stage) -> Outcome:
    outcome, _ = _resume_damaged(stage, "rng-size", lambda s: s["rng"].update(torch=torch.zeros(7, dtype=torch.uint8)))
    return outcome


def _huge_int_store(stage: Stage, name: str) -> Path:
    root = folder(stage, name) / "store"
    keys = fill_store(root)
    path = root / f"{keys[1]}.json"
    path.write_text(path.read_text().replace('"val_loss": [6.1', '"val_loss": [' + "9" * 400, 1))
    return root


def t_huge_int(command_name: str) -> Callable[[Stage], Outcome]:
    def run(stage: Stage) -> Outcome:
        root = _huge_int_store(stage, f"huge-int-{command_name}")
        tail = [str(root.parent / "x.zip")] if command_name == "export" else []
        kind, detail = command(["runs", command_name, *tail, "--store", str(root)])
        if kind == "ok" and "1 runs" not in detail and "exported 1 runs" not in detail:
            return "silent", f"expected the good run listed/exported and the damaged one skipped: {detail}"
        return kind, detail
    return run


def t_huge_int_import(stage: Stage) -> Outcome:
    key, payload = record_json(history__val_loss=[10**400, None, 5.6])
    zip_path = archive_of(folder(stage, "huge-int-import") / "a.zip", {f"runs/{key}.json": payload})
    kind, detail = command(["runs", "import", str(zip_path), "--store", str(zip_path.parent / "store")])
    if kind == "ok":
        return "silent", f"a record no reader can use was imported: {detail}"
    return kind, detail


def t_encrypted(stage: Stage) -> Outcome:
    key, payload = record_json()
    path = archive_of(folder(stage, "encrypted") / "a.zip", {f"runs/{key}.json": payload},
                      encrypted=(f"runs/{key}.json",))
    return command(["runs", "import", str(path), "--store", str(path.parent / "store")])


def t_load_bundle_int_started(stage: Stage) -> Outcome:
    from test_store import make_record

    from spanviz.store import ResultsStore, load_bundle
    from spanviz.store.keys import config_key

    key, payload = record_json(environment__started_utc=20260101)
    good = make_record(seed=3)  # a second run with a string start time: the two are sorted together
    good.environment["started_utc"] = "2026-01-01T00:00:00+00:00"
    path = archive_of(folder(stage, "bundle-int") / "a.zip", {f"runs/{key}.json": payload,
                                                             f"runs/{config_key(good.config)}.json": good.to_json()})
    store = ResultsStore(path.parent / "store")
    return library(lambda: load_bundle(path, store))


# ============================================================================================ unbounded (10)
def u_import_dev_zero(stage: Stage) -> Outcome:
    return bounded_kind(["runs", "import", "/dev/zero", "--store", str(folder(stage, "zero") / "store")], stage)


def u_config_dev_zero(stage: Stage) -> Outcome:
    return bounded_kind(["train", *BASE, "--config", "/dev/zero"], stage)


def _fifo(stage: Stage, name: str) -> Path:
    path = folder(stage, "fifos") / name
    if not path.exists():
        os.mkfifo(path)
    return path


def u_config_fifo(stage: Stage) -> Outcome:
    return bounded_kind(["train", *BASE, "--config", str(_fifo(stage, "config.json"))], stage, timeout=30)


def u_import_fifo(stage: Stage) -> Outcome:
    return bounded_kind(["runs", "import", str(_fifo(stage, "runs.zip")), "--store",
                         str(folder(stage, "fifo-store"))], stage, timeout=30)


def _braces_zip(path: Path, n_runs: int, megabytes: int = 60) -> Path:
    """A small zip of ``n_runs`` valid-looking runs whose history is ``megabytes`` MB of ``{}`` (the issue's bomb)."""
    from test_store import make_record

    from spanviz.store.keys import config_key

    keys = []
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for seed in range(n_runs):
            record = make_record(seed=seed)
            key = config_key(record.config)
            keys.append(key)
            head = record.to_json()[:-1]  # without the closing brace
            count = megabytes * 10**6 // 3
            body = (head + ', "junk": [' + "{}," * count + "{}]}").encode()
            z.writestr(f"runs/{key}.json", body)
        z.writestr("manifest.json", json.dumps({"format": "spanviz-runs-1", "keys": keys}))
    return path


def u_braces_zip(n_runs: int) -> Callable[[Stage], Outcome]:
    def run(stage: Stage) -> Outcome:
        where = folder(stage, f"braces-{n_runs}")
        path = where / "bomb.zip"
        if not path.exists():
            _braces_zip(path, n_runs)
        kind, detail = bounded_kind(["runs", "import", str(path), "--store", str(where / "store")], stage)
        if kind == "ok":
            return "silent", f"a 60 MB history of {{}} was imported: {detail}"
        return kind, detail
    return run


def u_sparse_entry(stage: Stage) -> Outcome:
    root = folder(stage, "sparse") / "store"
    keys = fill_store(root)
    with open(root / f"{keys[1]}.json", "r+b") as handle:
        handle.truncate(2 * 2**30)  # 2 GiB, no blocks on disk
    kind, detail = bounded_kind(["runs", "list", "--store", str(root)], stage)
    if kind == "ok" and "1 runs" not in detail:
        return "silent", detail
    return kind, detail


TINY_FP8 = ["--steps", "3", "--seeds", "1", "--no-store", "--scenario", "none", "--train", "warmup_steps=0", "--train",
            "batch_size=2", "--train", "eval_iters=1", "--model", "context_length=16", "--model", "d_model=16",
            "--max-vocab", "512"]
"""A seconds-long fp8 sweep (one run)."""


def u_ray_address(via_env: bool) -> Callable[[Stage], Outcome]:
    def run(stage: Stage) -> Outcome:
        pytest.importorskip("ray")
        args = ["sweep", "fp8", *TINY_FP8, "--executor", "ray"]
        if via_env:
            return bounded_kind(args, stage, env={"RAY_ADDRESS": "127.0.0.1:1"}, timeout=60)
        return bounded_kind([*args, "--address", "127.0.0.1:1"], stage, timeout=60)
    return run


def u_ray_local_start_fails(stage: Stage) -> Outcome:
    """Ray's own local start failing (as under load: "node timed out during startup") or hanging: one clean line
    suggesting the local executor, within the bound."""
    pytest.importorskip("ray")
    import ray

    from spanviz.experiments import executors

    def fails(**kwargs):
        raise Exception("The current node timed out during startup. This could happen because ...")

    def hangs(**kwargs):
        time.sleep(3600)

    args = ["sweep", "fp8", *TINY_FP8, "--executor", "ray", "--workers", "1"]
    results = []
    for fake in (fails, hangs):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ray, "init", fake)
            mp.setattr(ray, "is_initialized", lambda: False)
            mp.setattr(executors, "RAY_START_TIMEOUT_S", 2.0, raising=False)
            start = time.monotonic()
            kind, detail = command(args, early=False)
            seconds = time.monotonic() - start
        if kind == "clean" and "--executor local" not in detail:
            return "silent", f"the error does not suggest the local executor: {detail}"
        if seconds > TIME_LIMIT_S:
            return "unbounded", f"{seconds:.0f} s"
        results.append((kind, detail))
    bad = [r for r in results if r[0] != "clean"]
    return bad[0] if bad else results[0]


# ============================================================================================ silent (27)
def _trained(stage: Stage, name: str, flags: list[str], *, store: bool = False) -> tuple[int, Path]:
    out = folder(stage, "runs") / name
    base = list(BASE)
    if "byte" in flags:  # --max-vocab has no effect with byte tokens (refused)
        at = base.index("--max-vocab")
        del base[at:at + 2]
    argv = ["train", *base, *flags, "--out", str(out)]
    if store:
        argv = [a for a in argv if a != "--no-store"]
    rc, _, err, escaped = cli(argv)
    assert escaped is None, err
    return rc, out


def s_config_keeps(what: str) -> Callable[[Stage], Outcome]:
    flags = {"tokenizer": ["--tokenizer", "byte"],
             "splits": ["--train-split", "test", "--eval-split", "validation"],
             "probes": ["--logit-probe", "--probe-every", "1"]}[what]

    def run(stage: Stage) -> Outcome:
        rc, source = _trained(stage, f"config-source-{what}", flags)
        if rc != 0:
            return "traceback", f"could not train the source run ({rc})"
        out = folder(stage, "runs") / f"config-copy-{what}"
        kind, detail = command(["train", "--config", str(source / "run.json"), "--lr", "1e-3", "--no-store", "--out",
                                str(out)], early=False)
        if kind != "ok":
            return kind, detail
        a, b = run_json(source)["config"], run_json(out)["config"]
        keep = {"tokenizer": lambda c: (c["data"]["tokenizer"], c["data"]["max_vocab"]),
                "splits": lambda c: c["data"]["splits"], "probes": lambda c: c["probes"]}[what]
        if keep(a) != keep(b):
            return "silent", f"--config run.json dropped the run's {what}: {keep(a)} became {keep(b)}"
        if b["train"]["lr"] != 1e-3:
            return "silent", "the flag --lr did not override the config"
        return "ok", f"{what} kept"
    return run


def s_config_spans_list(stage: Stage) -> Outcome:
    path = folder(stage, "configs") / "spans-list.json"
    path.write_text('{"model": {"spans": [1]}}')
    return command(["train", *BASE, "--config", str(path)])


def s_sweep_override(key: str, value: str) -> Callable[[Stage], Outcome]:
    def run(stage: Stage) -> Outcome:
        return command(["sweep", "spans", "--steps", "2", "--seeds", "1", "--train", f"{key}={value}"])
    return run


def s_sweep_device_applies(stage: Stage) -> Outcome:
    """``--train device=...`` must reach every run (fp8's default device is cpu; ask for auto)."""
    root = folder(stage, "sweep-device")
    args = ["sweep", "fp8", *[a for a in TINY_FP8 if a != "--no-store"], "--train", "device=auto"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPANVIZ_HOME", str(root))
        mp.setenv("SPANVIZ_WIKITEXT_DIR", str(WIKITEXT))
        mp.setenv("SPANVIZ_TRAIN_SPLIT", "validation")
        mp.setenv("SPANVIZ_EVAL_SPLIT", "test")
        kind, detail = command(args, early=False)
    if kind != "ok":
        return kind, detail
    devices = {r["config"]["train"]["device"] for r in stored(root / "runs")}
    return ("ok", "device applied") if devices == {"auto"} else ("silent", f"runs trained with device {devices}")


def s_ls_n_local_0(stage: Stage) -> Outcome:
    return command(["sweep", "ls", "--steps", "2", "--seeds", "1", "--model", "n_local=0"])


def s_no_effect(flags: list[str]) -> Callable[[Stage], Outcome]:
    def run(stage: Stage) -> Outcome:
        return command(["train", *BASE, *flags])
    return run


def s_same_key(a: list[str], b: list[str], name: str) -> Callable[[Stage], Outcome]:
    """Two spellings of one setting must give one store entry."""
    def run(stage: Stage) -> Outcome:
        home = folder(stage, f"dup-{name}")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("SPANVIZ_HOME", str(home))
            mp.setenv("SPANVIZ_WIKITEXT_DIR", str(WIKITEXT))
            mp.setenv("SPANVIZ_TRAIN_SPLIT", "validation")
            mp.setenv("SPANVIZ_EVAL_SPLIT", "test")
            tiny = [f for f in BASE if f != "--no-store"]
            outcomes = [command(["train", *tiny, *flags], early=False) for flags in (a, b)]
        bad = [o for o in outcomes if o[0] != "ok"]
        if bad:
            return bad[0]
        entries = list((home / "runs").glob("*.json"))
        if len(entries) != 1:
            return "silent", f"{' '.join(a)} and {' '.join(b)} made {len(entries)} store entries of one curve"
        return "ok", "one entry"
    return run


def s_lr_spike_key(stage: Stage) -> Outcome:
    from spanviz.train import TrainConfig

    same = TrainConfig(lr_spike_start=5, lr_spike_steps=3).to_dict() == TrainConfig().to_dict()
    return ("ok", "normalised") if same else ("silent", "a spike that is off still changes the config (and key)")


def s_out_empty(stage: Stage) -> Outcome:
    cwd = folder(stage, "empty-out-cwd")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        kind, detail = command(["train", *BASE, "--out", ""])
    if any(cwd.iterdir()):
        return "silent", f"--out '' wrote into the working directory: {sorted(p.name for p in cwd.iterdir())}"
    return kind, detail


KILL_AT_FINAL_WRITE = """
import os, signal, sys
import spanviz.files, spanviz.train.record as record
real = spanviz.files.atomic_write
def dying(path, payload):
    if str(path).endswith("run.json") and b'"status": "finished"' in payload:
        os.kill(os.getpid(), signal.SIGKILL)  # kill -9 during the final run.json write
    return real(path, payload)
record.atomic_write = dying
from spanviz.cli import main
sys.exit(main(sys.argv[1:]))
"""


def s_kill_final_write(stage: Stage) -> Outcome:
    out = folder(stage, "runs") / "killed-final"
    env = {**os.environ, "SPANVIZ_HOME": str(stage.home), "SPANVIZ_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    child = subprocess.run([sys.executable, "-c", KILL_AT_FINAL_WRITE, "train", *BASE, "--out", str(out)], env=env,
                           capture_output=True, text=True, timeout=600)
    if child.returncode != -signal.SIGKILL:
        return "traceback", f"the child was not killed at its final write ({child.returncode}): {child.stderr[-300:]}"
    if run_json(out)["status"] != "running":
        return "traceback", "the kill did not leave the stale run.json the scenario needs"
    kind, detail = command(["train", "--resume", "--out", str(out)], early=False)
    if kind != "ok":
        return kind, detail
    status = run_json(out)["status"]
    return ("ok", "finished") if status == "finished" else ("silent", f"run.json says {status!r} after the resume")


def s_nan_checkpoint(stage: Stage) -> Outcome:
    """A NaN-filled checkpoint: refused on --resume, never called "the last good checkpoint", never stored."""
    from spanviz.store import ResultsStore

    home = folder(stage, "nan-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPANVIZ_HOME", str(home))
        mp.setenv("SPANVIZ_WIKITEXT_DIR", str(WIKITEXT))
        mp.setenv("SPANVIZ_TRAIN_SPLIT", "validation")
        mp.setenv("SPANVIZ_EVAL_SPLIT", "test")
        out = folder(stage, "runs") / "nan"
        tiny = [f for f in BASE if f != "--no-store"]
        rc, _, err, _ = cli(["train", *tiny, "--steps", "4", "--out", str(out)])
        if rc != 0:
            return "traceback", err[-300:]
        before = stored(home / "runs")
        # The same run, stopped after 2 of its 4 updates, with a checkpoint whose weights are NaN: resumed, it would
        # finish the same configuration (the same store key) as the stored finished run.
        path = out / "checkpoint.pt"
        state = torch.load(path, weights_only=True)
        for value in state["model"].values():
            value.fill_(float("nan"))
        record = json.loads(state["record"])
        record["history"] = {k: v[:2] for k, v in record["history"].items()}
        record["status"], state["step"] = "running", 2
        state["record"] = json.dumps(record)
        torch.save(state, path)
        (out / "run.json").write_text(json.dumps(record))
        rc, text, err, escaped = cli(["train", "--resume", "--out", str(out)])
        after = stored(home / "runs")
    if escaped is not None or "Traceback" in err:
        return "traceback", err[-300:]
    if [r["status"] for r in after] != [r["status"] for r in before] or after != before:
        return "silent", f"the stored finished run was replaced by {[r['status'] for r in after]}"
    if rc == 0 or "last good checkpoint" in text + err:
        return "silent", f"the NaN checkpoint was resumed (exit {rc}): {(text + err)[-300:]}"
    assert ResultsStore(home / "runs")
    return "clean", err.strip().splitlines()[-1]


def s_diverged_replaces_finished(stage: Stage) -> Outcome:
    from test_store import make_record

    from spanviz.store import ResultsStore

    store = ResultsStore(folder(stage, "replace") / "store")
    key = store.put(make_record("finished"))
    diverged = make_record("diverged")
    diverged.config = make_record("finished").config
    store.put(diverged)
    status = store.load(key).status
    return ("ok", "kept") if status == "finished" else ("silent", "a diverged record replaced the finished one")


def s_empty_optimizer(stage: Stage) -> Outcome:
    (kind, detail), _ = _resume_damaged(stage, "empty-optimizer", lambda s: s["optimizer"].update(state={}))
    if kind == "ok":
        return "silent", "an emptied optimizer state resumed with reset moments"
    return kind, detail


def s_export_running(stage: Stage) -> Outcome:
    from test_store import make_record

    from spanviz.store import ResultsStore
    from spanviz.store.keys import config_key

    root = folder(stage, "export-running") / "store"
    store = ResultsStore(root)
    store.put(make_record(seed=0))
    partial = make_record("running", seed=1)
    (root / f"{config_key(partial.config)}.json").write_text(partial.to_json())
    target = root.parent / "x.zip"
    kind, detail = command(["runs", "export", str(target), "--store", str(root)])
    if kind != "ok":
        return kind, detail
    with zipfile.ZipFile(target) as z:
        statuses = [json.loads(z.read(n))["status"] for n in z.namelist() if n.startswith("runs/")]
    return ("ok", "not shipped") if "running" not in statuses else ("silent", "a running entry was exported")


def s_export_oversized(stage: Stage) -> Outcome:
    from test_store import make_record

    from spanviz.store import ResultsStore
    from spanviz.store.archive import MAX_RECORD_BYTES
    from spanviz.store.keys import config_key

    root = folder(stage, "export-big") / "store"
    ResultsStore(root).put(make_record(seed=0))
    big = make_record(seed=1)
    n = MAX_RECORD_BYTES // 15 + 10_000  # "0, 1.25, null, " per row: just over the limit
    big.history = {"step": [0] * n, "train_loss": [1.25] * n, "val_loss": [None] * n}
    (root / f"{config_key(big.config)}.json").write_text(big.to_json())
    target = root.parent / "x.zip"
    kind, detail = command(["runs", "export", str(target), "--store", str(root)])
    if kind != "ok":
        return kind, detail
    with zipfile.ZipFile(target) as z:
        sizes = [i.file_size for i in z.infolist() if i.filename.startswith("runs/")]
    return ("ok", "not shipped") if max(sizes) <= MAX_RECORD_BYTES else ("silent", f"exported {max(sizes):,} bytes")


def s_put_unloadable(what: str) -> Callable[[Stage], Outcome]:
    def run(stage: Stage) -> Outcome:
        from test_store import make_record

        from spanviz.store import ResultsStore

        store = ResultsStore(folder(stage, f"put-{what}") / "store")
        record = make_record()
        if what == "message":
            record.message = "x" * 10_001
        else:
            deep: object = 1
            for _ in range(20):
                deep = [deep]
            record.config["tags"] = {"deep": deep}
        try:
            key = store.put(record)
        except ValueError as error:
            return "clean", str(error)[:200]
        try:
            store.load(key)
        except ValueError as error:
            return "silent", f"put wrote a record load refuses: {error}"
        return "ok", "readable"
    return run


def s_max_vocab_huge(stage: Stage) -> Outcome:
    return command(["train", *BASE, "--max-vocab", "2147483648"])


_CURVES: dict[tuple, str] = {}


def _thread_curve(stage: Stage, threads: int, resume_at: int | None = None, repeat: int = 0,
                  resume_threads: int | None = None) -> str:
    """:func:`_curve` of the ``repeat``-th such run, computed once per stage."""
    key = (threads, resume_at, repeat, resume_threads)
    if key not in _CURVES:
        _CURVES[key] = _curve(stage, threads, resume_at, resume_threads)
    return _CURVES[key]


def _curve(stage: Stage, threads: int, resume_at: int | None = None, resume_threads: int | None = None) -> str:
    """A 20-update run in a fresh process with ``threads`` torch threads, optionally stopped after ``resume_at``
    updates and extended to 20 in another fresh process (constant learning rate after the warm-up, so the
    extension is the uninterrupted curve); the loss curve's hash."""
    import hashlib

    out = Path(tempfile.mkdtemp(dir=folder(stage, "det")))
    args = ["train", *BASE, "--steps", "20", "--eval-interval", "2", "--dropout", "0.1", "--d-model", "32",
            "--context-length", "32", "--batch-size", "4", "--min-lr-ratio", "1", "--warmup-steps", "0", "--out",
            str(out)]
    env = {**os.environ, "SPANVIZ_HOME": str(stage.home), "SPANVIZ_OFFLINE": "1"}
    env.pop("OMP_NUM_THREADS", None)
    env["SPANVIZ_TEST_THREADS"] = str(threads)
    script = ("import os, sys, torch; torch.set_num_threads(int(os.environ['SPANVIZ_TEST_THREADS'])); "
              "from spanviz.cli import main; sys.exit(main(sys.argv[1:]))")
    if resume_at is None:
        subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, timeout=600, check=True)
    else:
        first = subprocess.run([sys.executable, "-c", script, *args, "--steps", str(resume_at)], env=env,
                               capture_output=True, timeout=600, check=True)
        assert first.returncode == 0
        env["SPANVIZ_TEST_THREADS"] = str(resume_threads or threads)
        subprocess.run([sys.executable, "-c", script, "train", "--resume", "--out", str(out), "--steps", "20"],
                       env=env, capture_output=True, timeout=600, check=True)
    history = run_json(out)["history"]
    return hashlib.sha256(json.dumps([history["train_loss"], history["val_loss"]]).encode()).hexdigest()


@contextlib.contextmanager
def busy(n: int):
    """``n`` busy-loop processes (a loaded machine), stopped afterwards."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def s_determinism_fresh(stage: Stage) -> Outcome:
    """Fresh runs of one command, under load, with the thread count the README names: one curve, bit for bit."""
    with busy(2):
        curves = {_thread_curve(stage, 2, repeat=i) for i in range(3)}
    return ("ok", "one curve") if len(curves) == 1 else ("silent", f"{len(curves)} bit-level variants of one run")


def s_determinism_resumed(stage: Stage) -> Outcome:
    """A run stopped and resumed in another process gives the uninterrupted curve (min_lr_ratio 1: the schedule does
    not depend on the total)."""
    with busy(2):
        straight = _thread_curve(stage, 2)  # computed once for both checks
        resumed = _thread_curve(stage, 2, resume_at=9)
    return ("ok", "same curve") if straight == resumed else ("silent", "the resumed curve matches no fresh run")


def s_determinism_other_threads(stage: Stage) -> Outcome:
    """A 2-thread run resumed by a process with 1 thread continues with the run's 2 threads: the same curve."""
    straight = _thread_curve(stage, 2)
    resumed = _thread_curve(stage, 2, resume_at=9, resume_threads=1)
    return ("ok", "same curve") if straight == resumed else ("silent", "resumed with another thread count, the curve "
                                                                       "differs from the uninterrupted one")


def s_thread_count_recorded(stage: Stage) -> Outcome:
    """The record states the threads the run used (not a count read before they were set)."""
    from spanviz.contexts import torch_threads

    out = folder(stage, "runs") / "threads"
    with torch_threads(1):
        rc, _, err, _ = cli(["train", *BASE, "--out", str(out)])
    if rc != 0:
        return "traceback", err[-300:]
    recorded = run_json(out)["environment"].get("num_threads")
    return ("ok", str(recorded)) if recorded == 1 else ("silent", f"recorded {recorded} threads for a 1-thread run")


# ============================================================================================ the lost run
def l_store_full(stage: Stage) -> Outcome:
    import spanviz.store.results as results

    real = results.atomic_write

    def full(path, payload):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(results, "atomic_write", full)
        rc, out, err, escaped = cli(["train", *[f for f in BASE if f != "--no-store"]])
    assert results.atomic_write is real
    if escaped is not None:
        return "traceback", repr(escaped)
    if rc == 0:
        return "lost", f"exit 0 though the run is kept nowhere: {err[-200:]}"
    return "clean", err.strip().splitlines()[-1]


# ============================================================================================ all inputs
def attack_inputs() -> list[tuple[str, str, str, Callable[[Stage], Outcome]]]:
    """(group, label, expectation, run(stage)): expectation "error" (a clean error), "ok" or "either"."""
    latin1 = "Caf\u00e9 na\u00efve \u00fcber\n".encode("latin-1") * 200
    t = [
        ("--lr-spike-factor 1e308 overflows in the optimizer", "error", t_lr_spike_overflow),
        ("--data-dir with random-byte split files", "error", t_data_dir("random", os.urandom(4096))),
        ("--data-dir with empty split files", "error", t_data_dir("empty", b"")),
        ("--data-dir with Latin-1 split files", "error", t_data_dir("latin1", latin1)),
        ("SPANVIZ_HOME=~nonexistentuser/x", "error", t_home_unknown_user),
        ("sweep spans --seeds 99999999999", "error", t_sweep_seeds),
        ("bench --data-dir /nonexistent", "error", t_bench_data_dir("missing")),
        ("bench --data-dir a-file", "error", t_bench_data_dir("file")),
        ("checkpoint rng.torch of the wrong size, --resume", "error", t_rng_size),
        ("store entry val_loss a 400-digit integer, runs list", "ok", t_huge_int("list")),
        ("store entry val_loss a 400-digit integer, runs export", "ok", t_huge_int("export")),
        ("archive run val_loss a 400-digit integer, runs import", "error", t_huge_int_import),
        ("archive member with the encrypted flag, runs import", "error", t_encrypted),
        ("load_bundle of an archive with an integer started_utc", "either", t_load_bundle_int_started),
    ]
    u = [
        ("runs import /dev/zero", "error", u_import_dev_zero),
        ("train --config /dev/zero", "error", u_config_dev_zero),
        ("train --config FIFO", "error", u_config_fifo),
        ("runs import FIFO", "error", u_import_fifo),
        ("runs import: a small zip, one run with 60 MB of {}", "error", u_braces_zip(1)),
        ("runs import: a small zip, three runs with 60 MB of {}", "error", u_braces_zip(3)),
        ("runs list with a 2 GiB sparse store entry", "ok", u_sparse_entry),
        ("sweep --executor ray --address 127.0.0.1:1", "error", u_ray_address(False)),
        ("sweep --executor ray with RAY_ADDRESS=127.0.0.1:1", "error", u_ray_address(True)),
        ("sweep --executor ray: Ray's local start fails or hangs", "error", u_ray_local_start_fails),
    ]
    s = [
        ("--config run.json keeps the run's tokenizer", "ok", s_config_keeps("tokenizer")),
        ("--config run.json keeps the run's splits", "ok", s_config_keeps("splits")),
        ("--config run.json keeps the run's probes", "ok", s_config_keeps("probes")),
        ('--config {"model": {"spans": [1]}}', "error", s_config_spans_list),
        ("sweep --train seed=3", "error", s_sweep_override("seed", "3")),
        ("sweep --train steps=5", "error", s_sweep_override("steps", "5")),
        ("sweep --train device=... reaches the runs", "ok", s_sweep_device_applies),
        ("sweep --train checkpoint_interval=5", "error", s_sweep_override("checkpoint_interval", "5")),
        ("sweep ls --model n_local=0", "error", s_ls_n_local_0),
        ("--lr-spike-start without --lr-spike-factor", "error", s_no_effect(["--lr-spike-start", "1"])),
        ("--checkpoint-interval without --out", "error", s_no_effect(["--checkpoint-interval", "2"])),
        ("--max-vocab with --tokenizer byte", "error", s_no_effect(["--tokenizer", "byte", "--max-vocab", "100"])),
        ("a spike that is off does not change the store key", "ok", s_lr_spike_key),
        ("--weight-decay -0.0 and 0: one store entry", "ok",
         s_same_key(["--weight-decay", "-0.0"], ["--weight-decay", "0"], "zero")),
        ("--dropout -0.0 and 0: one store entry", "ok",
         s_same_key(["--dropout", "-0.0"], ["--dropout", "0"], "dropout")),
        ("--device cpu:0 and cpu: one store entry", "ok",
         s_same_key(["--device", "cpu:0"], ["--device", "cpu"], "cpu")),
        ("--out ''", "error", s_out_empty),
        ("kill -9 during the final run.json write, then --resume", "ok", s_kill_final_write),
        ("a NaN checkpoint: refused, not 'the last good checkpoint', the stored run kept", "error", s_nan_checkpoint),
        ("a diverged record never replaces a finished one in the store", "ok", s_diverged_replaces_finished),
        ("an emptied optimizer state, --resume", "error", s_empty_optimizer),
        ("a store entry with status running is not exported", "ok", s_export_running),
        ("a store entry over the import limit is not exported", "ok", s_export_oversized),
        ("put: a message over 10,000 characters", "either", s_put_unloadable("message")),
        ("put: nesting deeper than 16", "either", s_put_unloadable("nesting")),
        ("--max-vocab 2147483648", "ok", s_max_vocab_huge),
        ("the run record states the thread count used", "ok", s_thread_count_recorded),
        ("fresh runs of one command under load: one curve", "ok", s_determinism_fresh),
        ("a run resumed in another process under load: the same curve", "ok", s_determinism_resumed),
        ("a run resumed by a process with another thread count: the same curve", "ok", s_determinism_other_threads),
    ]
    lost = [("the results store fills up at the end, no --out", "error", l_store_full)]
    return ([("tracebacks", *item) for item in t] + [("unbounded", *item) for item in u]
            + [("silent", *item) for item in s] + [("lost", *item) for item in lost])


def failure(kind: str, expect: str) -> bool:
    """Whether an outcome breaks a promise (see the module docstring)."""
    if kind in ("traceback", "unbounded", "silent", "lost", "late"):
        return True
    return (expect == "error" and kind != "clean") or (expect == "ok" and kind != "ok")


SLOW = {"fresh runs of one command under load: one curve",
        "a run resumed in another process under load: the same curve"}


# ============================================================================================ pytest
@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    if not WIKITEXT.is_dir():
        pytest.skip(f"WikiText-2 offline copy not found at {WIKITEXT}")
    with staged(tmp_path_factory.mktemp("attack27")) as st:
        yield st


@pytest.mark.parametrize("group, label, expect, run", [
    pytest.param(*item, marks=[pytest.mark.slow] if item[1] in SLOW else [], id=f"{item[0]}: {item[1]}")
    for item in attack_inputs()])
def test_attack_input(group, label, expect, run, stage):
    before = stage.fingerprint()
    kind, detail = run(stage)
    assert stage.fingerprint() == before, "the precious run changed"
    assert not failure(kind, expect), f"{kind} (expected {expect}): {detail}"


# ============================================================================================ the counts
def main(only: list[str] | None = None) -> int:
    """Run every input once (or those whose label contains one of ``only``) and print the counts for the report."""
    counts: Counter[tuple[str, str]] = Counter()
    failures = []
    with tempfile.TemporaryDirectory() as tmp, staged(Path(tmp)) as st:
        for group, label, expect, run in attack_inputs():
            if only and not any(word in label for word in only):
                continue
            start = time.monotonic()
            try:
                kind, detail = run(st)
            except Exception as error:  # noqa: BLE001 - a broken check is a failure to report, not a crash
                kind, detail = "traceback", f"the check itself raised {type(error).__name__}: {error}"
            counts[(group, kind)] += 1
            bad = failure(kind, expect)
            print(f"{'FAIL' if bad else 'ok  '} [{group}] {label}: {kind} ({time.monotonic() - start:.1f} s) "
                  f"{detail[:160]!r}", flush=True)
            if bad:
                failures.append(f"[{group}] {label}: {kind} (expected {expect}): {detail[:300]}")
    for group in dict.fromkeys(g for g, _ in counts):
        row = {kind: n for (g, kind), n in counts.items() if g == group}
        print(f"{group:12s} {sum(row.values()):3d} inputs: {row}")
    total: Counter[str] = Counter()
    for (_, kind), n in counts.items():
        total[kind] += n
    print(f"inputs {sum(total.values())}; tracebacks {total['traceback']}; unbounded {total['unbounded']}; "
          f"silent {total['silent']}; lost {total['lost']}; late errors {total['late']}; correct behaviour "
          f"{total['ok']}; clean errors {total['clean']}")
    for line in failures:
        print("FAIL", line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
