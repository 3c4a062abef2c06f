"""An independent check of `spanviz bench`'s step ratios: the same train steps, timed by a plain loop.

It shares no timing code with spanviz.bench: it builds the same models (TinyGPT, AdamW lr 1e-4, one random
batch, the same seed for every variant), then runs the variants round-robin in one process, one torch thread,
the order reversed every other round, after warm-up rounds, and records each call's thread CPU time
(``time.thread_time``, the primary figure) and wall time (``time.perf_counter``, a check). It prints the
median and min per variant and the median-ratio and min-ratio of each variant over ``standard_fused``.

    python scripts/check_step_ratios.py --T 128 512 --rounds 7 --json out.json

Method: ../shared/DESIGN.md "Measuring speed on a shared machine". Source: spanviz.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from spanviz.model import GPTConfig, TinyGPT
from spanviz.spans import SpanConfig

BASE = dict(vocab_size=8192, n_layer=2, n_head=4, d_model=128)
BATCH = 16


def variants(T: int) -> dict[str, GPTConfig]:
    base = dict(BASE, context_length=T)
    return {
        "standard_fused": GPTConfig(**base),
        "standard_explicit": GPTConfig(**base, attn_backend="explicit"),
        "kv8_1000": GPTConfig(**base, spans=SpanConfig(alphas="1000", preset="kv8")),
        "qk4_1000": GPTConfig(**base, spans=SpanConfig(alphas="1000", preset="qk4")),
    }


def step_fn(cfg: GPTConfig, x: torch.Tensor, y: torch.Tensor):
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
    ref = "standard_fused"
    out = {"T": T, "rounds": rounds, "cpu_ms": {}, "wall_ms": {}, "ratio_cpu": {}, "ratio_wall": {}}
    for name in steps:
        out["cpu_ms"][name] = {"median": 1e3 * statistics.median(cpu[name]), "min": 1e3 * min(cpu[name])}
        out["wall_ms"][name] = {"median": 1e3 * statistics.median(wall[name]), "min": 1e3 * min(wall[name])}
    if ref in steps:
        for name in steps:
            out["ratio_cpu"][name] = {k: out["cpu_ms"][name][k] / out["cpu_ms"][ref][k] for k in ("median", "min")}
            out["ratio_wall"][name] = {k: out["wall_ms"][name][k] / out["wall_ms"][ref][k] for k in ("median", "min")}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--T", type=int, nargs="+", default=[128])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--variants", nargs="*", default=None)
    p.add_argument("--json", default=None)
    a = p.parse_args()
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
