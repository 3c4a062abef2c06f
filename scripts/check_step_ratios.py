"""An independent check of `spanviz bench`'s step ratios: the same train steps, timed by a plain loop.

It shares no timing code with spanviz.bench: it builds the same models (TinyGPT, AdamW lr 1e-4, one random
batch, the same seed for every variant, the malloc settings of spanviz's trainer), then runs the variants round-robin in one process, one torch thread,
the order reversed every other round, after warm-up rounds, and records each call's thread CPU time
(``time.thread_time``, the primary figure) and wall time (``time.perf_counter``, a check). It prints the
median and min per variant and the median-ratio and min-ratio of each variant over ``standard_fused``.

    python scripts/check_step_ratios.py --T 128 512 --rounds 7 --json out.json

``--against-bench N`` compares the two: N times in alternation (order reversed every other time), a fresh
process runs the bench's growth measurement (``spanviz.bench.spans.bench_growth`` at the same T, its own
timing) and another fresh process runs this script's loop; the JSON holds both methods' ratios per run, their
medians over the runs and the difference in per cent, with the machine's load before and after each run, the
torch version and the commit::

    python scripts/check_step_ratios.py --T 128 512 --rounds 3 --against-bench 3 \\
        --json docs/results/bench_vs_independent_cpu.json

Method: ../shared/DESIGN.md "Measuring speed on a shared machine". Source: spanviz.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from spanviz.memory import keep_freed_memory
from spanviz.model import GPTConfig, TinyGPT
from spanviz.spans import SpanConfig

BASE = dict(vocab_size=8192, n_layer=2, n_head=4, d_model=128)
BATCH = 16
REF = "standard_fused"
RATIOS = {"kv8_over_fused": "kv8_1000", "qk4_over_fused": "qk4_1000", "explicit_over_fused": "standard_explicit"}
"""The ratios compared with the bench: variant over ``standard_fused``."""
ROOT = Path(__file__).resolve().parents[1]


def variants(T: int) -> dict[str, GPTConfig]:
    base = dict(BASE, context_length=T)
    return {
        "standard_fused": GPTConfig(**base),
        "standard_explicit": GPTConfig(**base, attn_backend="explicit"),
        "kv8_1000": GPTConfig(**base, spans=SpanConfig(alphas="1000", preset="kv8")),
        "qk4_1000": GPTConfig(**base, spans=SpanConfig(alphas="1000", preset="qk4")),
    }


def step_fn(cfg: GPTConfig, x: torch.Tensor, y: torch.Tensor):
    keep_freed_memory()  # the malloc settings every spanviz training run has (set by its Trainer)
    torch.manual_seed(0)
    model = TinyGPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        _, loss = model(x, y, return_logits=False)  # as spanviz's trainer calls it
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def measure(T: int, rounds: int, warmup: int, names: list[str] | None) -> dict:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, BASE["vocab_size"], (BATCH, T), generator=g)
    y = torch.roll(x, -1, dims=1)
    cfgs = variants(T)
    steps = {name: step_fn(cfg, x, y) for name, cfg in cfgs.items() if names is None or name in names}
    cpu: dict[str, list[float]] = {n: [] for n in steps}
    wall: dict[str, list[float]] = {n: [] for n in steps}
    order = list(steps)
    for r in range(warmup + rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            c0, w0 = time.thread_time(), time.perf_counter()
            steps[name]()
            c1, w1 = time.thread_time(), time.perf_counter()
            if r >= warmup:
                cpu[name].append(c1 - c0)
                wall[name].append(w1 - w0)
    out = {"T": T, "rounds": rounds, "warmup": warmup, "cpu_ms": {}, "wall_ms": {}, "ratio_cpu": {},
           "ratio_wall": {}}
    for name in steps:
        out["cpu_ms"][name] = {"median": 1e3 * statistics.median(cpu[name]), "min": 1e3 * min(cpu[name])}
        out["wall_ms"][name] = {"median": 1e3 * statistics.median(wall[name]), "min": 1e3 * min(wall[name])}
    if REF in steps:
        for name in steps:
            out["ratio_cpu"][name] = {k: out["cpu_ms"][name][k] / out["cpu_ms"][REF][k] for k in ("median", "min")}
            out["ratio_wall"][name] = {k: out["wall_ms"][name][k] / out["wall_ms"][REF][k] for k in ("median", "min")}
    return out


# ------------------------------------------------------------------------------------ against the bench
_BENCH_SCRIPT = r"""
import json, sys
from spanviz.bench.spans import bench_growth
contexts, repeats = [int(t) for t in sys.argv[1].split(",")], int(sys.argv[2])
print(json.dumps(bench_growth(contexts=contexts, repeats=repeats, rss=False)))
"""


def _load() -> list[float]:
    return list(os.getloadavg())


def _run(cmd: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def bench_run(contexts: list[int], rounds: int) -> tuple[dict[int, dict], dict[int, dict]]:
    """The bench's growth measurement in a fresh process: ``{T: {ratio: {"median", "min"}}}`` and ``{T: {variant:
    {"median", "min"}}}`` step ms (thread CPU time)."""
    res = json.loads(_run([sys.executable, "-c", _BENCH_SCRIPT, ",".join(map(str, contexts)), str(rounds)])
                     .strip().splitlines()[-1])
    ratios = {int(T): {name: {k: row["ratio_detail"][name][k] for k in ("median", "min")} for name in RATIOS}
              for T, row in res["T"].items()}
    ms = {int(T): {v: {k: row["step_ms"][v][k] for k in ("median", "min")} for v in row["step_ms"]}
          for T, row in res["T"].items()}
    return ratios, ms


def own_run(contexts: list[int], rounds: int, warmup: int) -> tuple[dict[int, dict], dict[int, dict]]:
    """This script's loop in a fresh process: as :func:`bench_run`."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "own.json"
        _run([sys.executable, str(Path(__file__).resolve()), "--T", *map(str, contexts), "--rounds", str(rounds),
              "--warmup", str(warmup), "--json", str(path)])
        res = json.loads(path.read_text())
    return ({r["T"]: {name: r["ratio_cpu"][variant] for name, variant in RATIOS.items()} for r in res},
            {r["T"]: r["cpu_ms"] for r in res})


def against_bench(contexts: list[int], rounds: int, warmup: int, runs: int) -> dict:
    """``runs`` alternations of :func:`bench_run` and :func:`own_run` (order reversed every other time)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                           cwd=ROOT)
    measured = commit.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")  # the code as the runs start
    methods = {"bench": lambda: bench_run(contexts, rounds), "independent": lambda: own_run(contexts, rounds, warmup)}
    per_run: dict[str, list[dict]] = {m: [] for m in methods}
    for i in range(runs):
        for m in (("bench", "independent") if i % 2 == 0 else ("independent", "bench")):
            before, t0 = _load(), time.perf_counter()
            ratios, ms = methods[m]()
            per_run[m].append({"load_before": before, "load_after": _load(), "wall_s": time.perf_counter() - t0,
                               "ratios": {str(T): r for T, r in ratios.items()},
                               "step_ms": {str(T): r for T, r in ms.items()}})
            print(f"run {i + 1} {m}: " + "; ".join(
                f"T {T} " + ", ".join(f"{n} {v['median']:.3f}/{v['min']:.3f}" for n, v in r.items())
                for T, r in ratios.items()), flush=True)
    summary: dict[str, dict] = {}
    for T in map(str, contexts):
        summary[T] = {}
        for name in RATIOS:
            row: dict[str, dict] = {}
            for m in methods:
                vals = [run["ratios"][T][name] for run in per_run[m]]
                row[m] = {k: statistics.median(v[k] for v in vals) for k in ("median", "min")}
                row[m]["runs_median"] = [v["median"] for v in vals]
                row[m]["runs_min"] = [v["min"] for v in vals]
            row["difference_pct"] = {k: 100 * (row["bench"][k] / row["independent"][k] - 1) for k in ("median", "min")}
            summary[T][name] = row
    worst = max(abs(r["difference_pct"][k]) for t in summary.values() for r in t.values() for k in ("median", "min"))
    return {
        "environment": {
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "commit": measured,
            "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "load_min": min(min(r["load_before"][0], r["load_after"][0]) for rs in per_run.values() for r in rs),
            "load_max": max(max(r["load_before"][0], r["load_after"][0]) for rs in per_run.values() for r in rs),
        },
        "method": {
            "clock": "thread CPU time of one thread (time.thread_time), 1 torch thread",
            "config": {**BASE, "batch_size": BATCH, "optimizer": "AdamW lr 1e-4", "dtype": "float32"},
            "contexts": contexts, "rounds": rounds, "runs": runs,
            "independent_warmup_rounds": warmup, "bench_warmup_rounds": 1,
            "alternation": "bench and independent runs alternate, each in a fresh process, the order reversed "
                           "every other run",
            "aggregate": "per run: the ratio of the medians ('median') and of the minima ('min') over the timed "
                         "rounds; here: the median of those over the runs",
        },
        "runs": per_run,
        "summary": summary,
        "worst_difference_pct": worst,
        "tolerance_pct": 5.0,
        "agree": worst <= 5.0,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--T", type=int, nargs="+", default=[128])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--variants", nargs="*", default=None)
    p.add_argument("--against-bench", type=int, default=0, metavar="N",
                   help="compare with spanviz.bench's growth measurement: N runs of each, alternating")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    if a.against_bench:
        res = against_bench(a.T, a.rounds, a.warmup, a.against_bench)
        for T, rows in res["summary"].items():
            for name, row in rows.items():
                print(f"T {T} {name}: bench {row['bench']['median']:.3f}/{row['bench']['min']:.3f}, independent "
                      f"{row['independent']['median']:.3f}/{row['independent']['min']:.3f} (median/min); "
                      f"difference {row['difference_pct']['median']:+.1f} % / {row['difference_pct']['min']:+.1f} %")
        print(f"worst difference {res['worst_difference_pct']:.1f} % (tolerance 5 %)")
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
        return
    torch.set_num_threads(1)
    results = []
    for T in a.T:
        res = measure(T, a.rounds, a.warmup, a.variants)
        results.append(res)
        print(f"T {T}: " + ", ".join(f"{n} {v['median']:.1f} ms" for n, v in res["cpu_ms"].items()))
        print("   ratio cpu (median/min): " + ", ".join(
            f"{n} {v['median']:.3f}/{v['min']:.3f}" for n, v in res["ratio_cpu"].items()))
        print("   ratio wall (median/min): " + ", ".join(
            f"{n} {v['median']:.3f}/{v['min']:.3f}" for n, v in res["ratio_wall"].items()), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
