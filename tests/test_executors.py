"""Sweeps on an executor: the local one (one run after another) or Ray (``pip install "spanviz[distributed]"``).

The Ray tests run tiny configurations (seconds per run) on a local cluster of 2 workers or on a cluster started
here with ``ray start --head`` on the loopback interface; without Ray they skip, saying how to install it (CI
installs it). What they check is what a user gets: the same per-seed table as the local executor, runs in the
store as they finish (written by the workers), a failing run reported with its configuration while the others
are kept, and an interrupted sweep (its process killed) finishing only the missing runs when run again.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from spanviz.cli import main
from spanviz.data import OFFLINE_SPLITS, prepare_tokens
from spanviz.experiments import save_sweep
from spanviz.experiments.core import RunsFailedError, run_grid
from spanviz.experiments.executors import LOCAL_CLUSTER_ENV, MissingExtraError, RayExecutor, make_executor
from spanviz.experiments.fp8 import WeightSwap
from spanviz.experiments.spans import spans_sweep
from spanviz.model import GPTConfig
from spanviz.store import ResultsStore
from spanviz.train import RunRecord, TrainConfig

HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason='Ray is not installed: pip install "spanviz[distributed]" '
                                                   "(CI installs it)")
SPLITS = ["--train-split", "validation", "--eval-split", "test"]
BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


@pytest.fixture
def no_data(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("data were loaded before the arguments were checked")

    monkeypatch.setattr("spanviz.cli.common.prepare_tokens", refuse)
    for experiment in ("spans", "ls", "fp8"):  # the experiments' loader (the split policy), where each calls it
        monkeypatch.setattr(f"spanviz.experiments.{experiment}.load_tokens", refuse)


@pytest.fixture
def data(wikitext_dir):
    return prepare_tokens(wikitext_dir, splits=OFFLINE_SPLITS, max_vocab=256, offline=True)


def tiny(data) -> tuple[GPTConfig, TrainConfig]:
    model = GPTConfig(vocab_size=data.vocab_size, context_length=32, n_layer=2, n_head=2, d_model=32)
    return model, TrainConfig(steps=3, batch_size=4, warmup_steps=1, eval_interval=3, eval_iters=1, device="cpu")


# ============================================================================ checked before anything runs
def test_without_ray_the_ray_executor_says_how_to_install_it_before_any_data(monkeypatch, capsys, no_data):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    rc = main(["sweep", "spans", "--executor", "ray", "--workers", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert '--executor ray needs Ray, an optional extra: pip install "spanviz[distributed]"' in err
    with pytest.raises(MissingExtraError, match=r'pip install "spanviz\[distributed\]"'):
        spans_sweep(executor="ray")  # the Python API too, before loading data


def test_executor_flags_are_checked_before_any_data(capsys, no_data):
    for argv, message in [
        (["--workers", "2"], "--workers applies to --executor ray"),
        (["--address", "10.0.0.5:6379"], "--address applies to --executor ray"),
        (["--executor", "ray", "--workers", "0"], "--workers 0: must be a number of workers >= 1"),
        (["--executor", "dask"], "--executor"),
    ]:
        rc = main(["sweep", "spans", *argv])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and message in err, (argv, err)
    with pytest.raises(ValueError, match="executor must be one of"):
        make_executor("threads")
    with pytest.raises(ValueError, match="workers and address apply to the ray executor"):
        make_executor("local", workers=2)
    for bad in (dict(workers=0), dict(workers=True), dict(threads_per_task=0), dict(address="")):
        with pytest.raises(ValueError, match=next(iter(bad))):
            RayExecutor(**bad)


def test_callbacks_that_observe_this_process_need_the_local_executor(data):
    elsewhere = SimpleNamespace(map=lambda *a, **k: iter(()))  # any executor that is not the local one
    with pytest.raises(ValueError, match="callbacks observe runs in this process"):
        run_grid({"a": tiny(data)}, [0], data, callbacks=[lambda trainer, row: None], executor=elsewhere)


def test_failed_runs_are_printed_with_their_configuration(monkeypatch, capsys):
    """The command's report of a RunsFailedError: one line per failed run and its configuration, exit 1."""
    kept = [RunRecord(config={"variant": "good", "seed": s}, environment={}, history={}, status="finished")
            for s in (0, 1, 2)]
    failure = {"variant": "bad", "seed": 1, "error": "ValueError: layer must be in [0, 2) for this model, got 5",
               "traceback": "Traceback ...", "config": {"model": {"n_layer": 2}, "train": {"seed": 1}}}

    def sweep(**kwargs):
        raise RunsFailedError([failure], kept, total=4)

    monkeypatch.setattr("spanviz.cli.sweep.sweep_function", lambda experiment: sweep)
    monkeypatch.setattr("spanviz.cli.sweep.load_data", lambda settings: object())
    rc = main(["sweep", "spans"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "run bad seed 1 failed: ValueError: layer must be in [0, 2) for this model, got 5" in err
    assert '  configuration: {"model":{"n_layer":2},"train":{"seed":1}}' in err
    assert ("1 of 4 runs failed; the other 3 finished (they are in the results store: run the same command again "
            "and only the failed runs train)") in err


# ================================================================================================= Ray
@needs_ray
def test_a_two_worker_ray_sweep_gives_the_local_per_seed_table(data, tmp_path, monkeypatch):
    """spans_sweep on a local Ray cluster of 2 workers = the same sweep run locally, number for number (2 cores
    split into 2 workers of 1 torch thread, as the local run has); one progress report per run; every run stored
    by the worker that trained it."""
    kwargs = dict(size="cpu", seeds=2, steps=2, data=data, groups=("alphas", "control"),
                  model=dict(context_length=32, d_model=32), train=dict(batch_size=4, eval_iters=1))
    local = spans_sweep(**kwargs, store=ResultsStore(tmp_path / "local"))  # 1 torch thread (conftest)

    put_here = []  # puts made by this process: none, the workers stored every run before returning it
    real_put = ResultsStore.put
    monkeypatch.setattr(ResultsStore, "put", lambda store, record: put_here.append(record) or real_put(store, record))
    calls = []
    store = ResultsStore(tmp_path / "ray")
    torch.set_num_threads(2)  # 2 cores here: 2 workers of 1 thread each
    distributed = spans_sweep(**kwargs, store=store, executor=RayExecutor(workers=2),
                              progress=lambda done, total, label: calls.append((done, total, label)))

    paths = {name: save_sweep(result, tmp_path / f"{name}.json")
             for name, result in (("local", local), ("ray", distributed))}  # fmt: skip
    assert paths["ray"][2].read_bytes() == paths["local"][2].read_bytes()  # the per-seed CSV, byte for byte
    assert distributed["per_seed"] == local["per_seed"] and distributed["rows"] == local["rows"]
    assert len(local["per_seed"]) == 14 and all(row["status"] == "finished" for row in local["per_seed"])

    assert [(done, total) for done, total, _ in calls] == [(i, 14) for i in range(1, 15)]
    expected = sorted(f"{row['variant']} seed {row['seed']}" for row in local["per_seed"])
    assert sorted(label for _, _, label in calls) == expected
    assert put_here == [] and len(store.list()) == 14
    assert {record.environment["num_threads"] for _, record in store.records()} == {1}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(condition, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


@needs_ray
def test_a_killed_sweep_on_an_existing_cluster_reruns_only_the_missing_runs(wikitext_dir, tmp_path, monkeypatch,
                                                                          capsys):
    """`ray start --head` (loopback), then `spanviz sweep fp8 --executor ray --address ...`: killed (SIGKILL)
    mid-way, run again, it trains only what the store misses, leaves the cluster running, and its per-seed table
    equals the local executor's."""
    home = tmp_path / "home"
    env = {**os.environ, **LOCAL_CLUSTER_ENV, "SPANVIZ_HOME": str(home), "SPANVIZ_SMOKE": "1",
           "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    prepare = subprocess.run([BIN / "spanviz", "prepare-data", "--data-dir", str(wikitext_dir), *SPLITS], env=env,
                             capture_output=True, text=True, timeout=600)
    assert prepare.returncode == 0, prepare.stderr
    port, log = _free_port(), tmp_path / "head.log"
    with open(log, "w") as out:
        head = subprocess.Popen([BIN / "ray", "start", "--head", "--port", str(port), "--num-cpus", "2",
                                 "--include-dashboard", "false", "--disable-usage-stats", "--block"],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    sweeps: list[subprocess.Popen] = []
    try:
        _wait_for(lambda: "Ray runtime started" in log.read_text() or head.poll() is not None, "ray start --head")
        assert head.poll() is None, log.read_text()[-2000:]
        command = [BIN / "spanviz", "sweep", "fp8", "--executor", "ray", "--workers", "2", "--address",
                   f"127.0.0.1:{port}", "--out", str(tmp_path / "ray.json")]
        runs = home / "runs"
        first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)
        sweeps.append(first)
        _wait_for(lambda: len(list(runs.glob("*.json"))) >= 2 or first.poll() is not None, "the first stored runs")
        first.send_signal(signal.SIGKILL)  # the sweep's process dies mid-way; the cluster stays
        first.communicate(timeout=60)
        before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in runs.glob("*.json")}
        assert 2 <= len(before) < 12, f"{len(before)} of 12 runs were stored before the kill"

        again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stderr[-3000:]
        counts = re.search(r"(\d+) runs: (\d+) replayed from the results store, (\d+) trained \(ray executor\)",
                           again.stdout)
        total, replayed, trained = map(int, counts.groups())
        assert total == 12 and replayed >= len(before) and trained == total - replayed > 0
        for name, identity in before.items():  # replayed, not trained and written again
            assert ((runs / name).stat().st_ino, (runs / name).stat().st_mtime_ns) == identity
        assert len(list(runs.glob("*.json"))) == 12
        assert head.poll() is None  # the sweep leaves a cluster it did not start running
    finally:
        for proc in (*sweeps, head):  # the process groups started here: the cluster and its workers
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)

    monkeypatch.setenv("SPANVIZ_SMOKE", "1")  # the same sweep on the local executor, in a fresh store
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path / "local-home"))
    torch.set_num_threads(1)  # as each task on the cluster (1 CPU per task)
    rc = main(["sweep", "fp8", "--data-dir", str(wikitext_dir), *SPLITS, "--out", str(tmp_path / "local.json")])
    assert rc == 0, capsys.readouterr().err
    assert (tmp_path / "local.per_seed.csv").read_bytes() == (tmp_path / "ray.per_seed.csv").read_bytes()


def test_bench_sweep_says_why_it_skips(monkeypatch):
    from spanviz.bench.sweep import bench_sweep

    assert "no data folder" in bench_sweep(None)["skipped"]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    assert 'pip install "spanviz[distributed]"' in bench_sweep("/any/folder")["skipped"]


# ============================== tests sharing one cluster, started last: the tests above start their own
@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of 2 CPUs and 2 *declared* GPUs (Ray schedules them; torch sees none here)."""
    if not HAS_RAY:
        pytest.skip('Ray is not installed: pip install "spanviz[distributed]" (CI installs it)')
    saved = {key: os.environ.get(key) for key in LOCAL_CLUSTER_ENV}
    os.environ.update(LOCAL_CLUSTER_ENV)  # loopback only, no usage statistics
    import ray

    ray.init(address="local", num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the probe below travels to the workers
    try:
        yield ray
    finally:
        ray.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class VisibleGPUs:
    """A probe: how many GPUs the task may see (``CUDA_VISIBLE_DEVICES``, which Ray sets per task)."""

    name, every = "visible", 100

    def __call__(self, trainer):
        return {"visible/gpus": len([g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g])}


@needs_ray
def test_each_run_holds_one_gpu_where_the_cluster_has_gpus(cluster, data):
    model, train = tiny(data)
    for device, expected in (("auto", 1), ("cpu", 0)):  # "auto" may use a GPU: it asks for one; "cpu" does not
        records = run_grid({"a": (model, replace(train, device=device))}, [0, 1], data, executor=RayExecutor(workers=2),
                           probes_factory=lambda name, cfg: [VisibleGPUs()])
        assert [r.history["visible/gpus"][-1] for r in records] == [expected, expected], device


@needs_ray
def test_a_failing_run_is_reported_with_its_configuration_and_the_others_are_kept(cluster, data, tmp_path):
    model, train = tiny(data)
    variants = {"good": (model, train), "bad": (model, replace(train, lr=2e-3))}

    def swaps(name):  # a weight swap of layer 5 in a 2-layer model: fails at run time, on the worker
        return [WeightSwap(at_step=0, scale_wq=2.0, layer=5)] if name == "bad" else []

    store, labels = ResultsStore(tmp_path), []
    # one cluster for both sweeps (the executor uses the cluster this process started)
    with pytest.raises(RunsFailedError) as caught:
        run_grid(variants, [0, 1], data, store=store, callbacks_factory=swaps, executor=RayExecutor(workers=2),
                 progress=lambda done, total, label: labels.append(label))
    error = caught.value
    assert sorted((f["variant"], f["seed"]) for f in error.failures) == [("bad", 0), ("bad", 1)]
    for failure in error.failures:
        assert failure["error"] == "ValueError: layer must be in [0, 2) for this model, got 5"
        assert failure["config"]["train"]["lr"] == 2e-3 and failure["config"]["model"]["n_layer"] == 2
        assert "spanviz/experiments/fp8.py" in failure["traceback"]  # the worker's frames, where it raised
    assert [(r.config["variant"], r.status) for r in error.records] == [("good", "finished")] * 2
    assert "2 of 4 runs failed" in str(error) and len(store.list()) == 2
    assert sorted(labels) == ["bad seed 0 (failed)", "bad seed 1 (failed)", "good seed 0", "good seed 1"]

    labels.clear()  # the cause fixed: only the failed runs train
    records = run_grid(variants, [0, 1], data, store=store, executor=RayExecutor(workers=2),
                       progress=lambda done, total, label: labels.append(label))
    assert sorted(labels) == ["bad seed 0", "bad seed 1", "good seed 0 (replayed)", "good seed 1 (replayed)"]
    assert [(r.config["variant"], r.config["seed"]) for r in records] == [
        ("good", 0), ("good", 1), ("bad", 0), ("bad", 1)]  # grid order, whatever order they finished in
    assert len(store.list()) == 4


@needs_ray
def test_bench_sweep_times_both_executors_on_the_same_runs(cluster, wikitext_dir):
    """Structure only (1 update per run, 1 pair, the shared cluster): nothing here judges a time."""
    from spanviz.bench.sweep import bench_sweep

    res = bench_sweep(str(wikitext_dir), repeats=1, steps=1, seeds=1)
    assert res["runs"] == 2 and res["workers"] == 2 and len(res["local_s"]) == len(res["ray_s"]) == 1
    assert res["speedup"] == pytest.approx(res["local_s"][0] / res["ray_s"][0])
    assert res["max_abs_diff_best_val_loss"] < 1e-3  # the same runs: only float summation order differs
    assert res["meets_target"] == (res["speedup"] >= 1.5)
    assert res["ceiling"] == pytest.approx(2 * res["one_run_s"]["threads_2"] / res["one_run_s"]["threads_1"])
