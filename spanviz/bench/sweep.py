"""Sweep benchmark: wall time of one small CPU sweep on the local executor vs Ray with 2 workers.

The sweep: 8 runs — the notebook configuration (d_model 128, 2 layers, 4 heads, T 128, batch 16, word vocabulary
<= 8192, WikiText-2), "standard" and span-scaled kv8 [1000] × 4 seeds, 30 updates each with one evaluation at the
end — through :func:`spanviz.experiments.core.run_grid` without a results store, so every run trains:

* ``local``: one run after another in this process with 2 torch threads;
* ``ray``: ``RayExecutor(workers=2)``, a local Ray cluster of 2 workers with 1 torch thread each, timed from
  before ``import ray`` to after the cluster has shut down (start-up and the workers' imports included).

``speedup`` = local wall time / Ray wall time (target >= 1.5 on 2 cores); ``max_abs_diff_best_val_loss``
compares the two sweeps' results run by run (not bitwise equal here: 2 threads vs 1 thread per run sum in a
different order). With ``repeats`` > 1 the pairs alternate order (local, ray, ray, local, ...) and every
measurement is reported.

What bounds the speed-up: two workers of 1 thread beat one process of 2 threads by at most
2 × (one run at 2 threads) / (one run at 1 thread) — ``ceiling``, from ``one_run_s`` (one "standard" run timed
in this process at each thread count, the faster of two tries each) — before Ray's start-up is paid. On a
quiet machine torch already uses a second thread well for this configuration; on a busy (shared,
oversubscribed) machine 2-thread runs slow down far more than 1-thread runs, and the distributed sweep gains
more. Nothing here asserts a time.
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import time
from dataclasses import replace
from typing import Any

from spanviz.bench.core import NOTEBOOK_BATCH, NOTEBOOK_CONFIG
from spanviz.contexts import torch_threads
from spanviz.data import load_tokens
from spanviz.experiments.core import run_grid
from spanviz.experiments.executors import RayExecutor
from spanviz.model import GPTConfig
from spanviz.spans import SpanConfig
from spanviz.train import TrainConfig

TARGET_SPEEDUP = 1.5
"""Issue target: the 2-worker Ray sweep at least this much faster than the local one (2 cores)."""


def sweep_variants(vocab_size: int, steps: int = 30) -> dict[str, Any]:
    """The benchmark's variants: notebook-config "standard" and kv8 "[1000]", ``steps`` updates, CPU."""
    model = GPTConfig(**{**NOTEBOOK_CONFIG, "vocab_size": vocab_size})
    train = TrainConfig(steps=steps, batch_size=NOTEBOOK_BATCH, warmup_steps=steps // 10, eval_interval=steps,
                        eval_iters=4, device="cpu")
    scaled = replace(model, spans=SpanConfig(alphas="1000", preset="kv8"))
    return {"standard": (model, train), "[1000]": (scaled, train)}


def bench_sweep(data_dir: str | None = None, quick: bool = False, repeats: int | None = None, steps: int = 30,
                seeds: int = 4, workers: int = 2) -> dict:
    """Wall time of the sweep on the local executor (2 torch threads) and on Ray (``workers`` workers).

    Args:
        data_dir: the WikiText-2 folder (validation split to train, test split to evaluate); None: skipped.
        quick: one pair of measurements (default 2, in alternating order). repeats: pairs, overriding ``quick``.
        steps, seeds, workers: updates per run, seeds per variant (2 variants), Ray workers.
    Returns:
        ``{"runs", "steps", "config", "workers", "local_s": [...], "ray_s": [...], "speedups" (per pair),
        "speedup" (median local / median ray), "max_abs_diff_best_val_loss", "one_run_s", "ceiling", "target",
        "meets_target"}``, or ``{"skipped": why}``.
    """
    if data_dir is None:
        return {"skipped": "no data folder: pass --data-dir or set SPANVIZ_WIKITEXT_DIR"}
    if importlib.util.find_spec("ray") is None:
        return {"skipped": 'Ray is not installed: pip install "spanviz[distributed]"'}
    data = load_tokens(data_dir, max_vocab=NOTEBOOK_CONFIG["vocab_size"])  # the split policy: validation, test
    variants, seed_list = sweep_variants(data.vocab_size, steps), list(range(seeds))
    pairs = repeats if repeats is not None else (1 if quick else 2)
    times: dict[str, list[float]] = {"local": [], "ray": []}
    best: dict[str, list[float | None]] = {}

    def measure(kind: str) -> None:
        t0 = time.perf_counter()
        if kind == "local":
            with torch_threads(2):
                records = run_grid(variants, seed_list, data)
        else:
            records = run_grid(variants, seed_list, data, executor=RayExecutor(workers=workers))
        times[kind].append(time.perf_counter() - t0)
        best[kind] = [r.best_val_loss for r in records]

    for pair in range(pairs):
        for kind in (("local", "ray") if pair % 2 == 0 else ("ray", "local")):
            measure(kind)
    speedup = statistics.median(times["local"]) / statistics.median(times["ray"])
    one_run: dict[str, float] = {}
    for threads in (1, 2, 2, 1):  # interleaved; the faster of two (interference only ever adds time)
        t0 = time.perf_counter()
        with torch_threads(threads):
            run_grid({"standard": variants["standard"]}, [0], data)
        key = f"threads_{threads}"
        one_run[key] = min(one_run.get(key, math.inf), time.perf_counter() - t0)
    return {
        "runs": len(variants) * seeds,
        "steps": steps,
        "config": {**NOTEBOOK_CONFIG, "vocab_size": data.vocab_size, "batch_size": NOTEBOOK_BATCH},
        "workers": workers,
        "local_s": times["local"],
        "ray_s": times["ray"],
        "speedups": [a / b for a, b in zip(times["local"], times["ray"])],
        "speedup": speedup,
        "max_abs_diff_best_val_loss": max(abs(a - b) for a, b in zip(best["local"], best["ray"])),
        "one_run_s": one_run,
        "ceiling": 2 * one_run["threads_2"] / one_run["threads_1"],
        "target": f">= {TARGET_SPEEDUP:g}",
        "meets_target": speedup >= TARGET_SPEEDUP,
    }
