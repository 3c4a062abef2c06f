"""Benchmark: what span / violation gradient scaling costs per training step, and how costs grow with T.

One run, one model architecture, one random batch; four variants trained side by side with their steps
interleaved (:func:`spanviz.bench.core.measure`: one thread, thread CPU time on a CPU, order reversed every other
round); medians and minima compared:

* ``standard_fused`` — ``spans=None``: the fused SDPA attention path (what plain training uses);
* ``standard_explicit`` — ``attn_backend="explicit"``: the explicit T×T path without any transform;
* ``kv8_1000`` — kv8 [1000] (fused forward; the transform in the backward from recomputed rows,
  :mod:`spanviz.spans.fused`);
* ``qk4_1000`` — qk4 [1000] (closed form as q/k gradient hooks on the fused path).

Targets (notebook config on CPU): kv8 [1000] / standard ≤ 1.5, qk4 [1000] / standard ≤ 1.15; on CUDA at T 1024,
d_head 64: ≤ 1.3 and ≤ 1.05. :func:`bench_growth` repeats the four at T 128 → 1024 (d_model 128, 4 heads,
batch 16) with each variant's peak RSS from a fresh process: the cost-growth table of docs/spans.md, and P1
(kv8 / standard ≤ 1.3 at T 512, ≤ 1.5 at T 1024). Numbers on a shared machine are noisy.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from spanviz.bench.core import NOTEBOOK_BATCH, NOTEBOOK_CONFIG, make_train_step, measure
from spanviz.contexts import torch_threads
from spanviz.model import GPTConfig, TinyGPT
from spanviz.spans import SpanConfig
from spanviz.validators import check_choice, check_int

GPU_CONFIG = dict(vocab_size=8192, context_length=256, n_layer=4, n_head=4, d_model=256)
GPU_BATCH = 32
LONG_CONFIG = dict(vocab_size=8192, context_length=1024, n_layer=4, n_head=4, d_model=256)  # d_head 64
LONG_BATCH = 8
CONFIGS = {"notebook": (NOTEBOOK_CONFIG, NOTEBOOK_BATCH), "gpu": (GPU_CONFIG, GPU_BATCH),
           "long": (LONG_CONFIG, LONG_BATCH)}
TARGETS = {"kv8_over_fused": 1.5, "qk4_over_fused": 1.15}
"""Targets on the CPU notebook config."""
TARGETS_GPU = {"kv8_over_fused": 1.3, "qk4_over_fused": 1.05}
"""Targets on CUDA at T 1024, d_head 64 (the ``long`` config)."""


def _variants(base: dict[str, Any]) -> dict[str, GPTConfig]:
    return {
        "standard_fused": GPTConfig(**base),
        "standard_explicit": GPTConfig(**base, attn_backend="explicit"),
        "kv8_1000": GPTConfig(**base, spans=SpanConfig(alphas="1000", preset="kv8")),
        "qk4_1000": GPTConfig(**base, spans=SpanConfig(alphas="1000", preset="qk4")),
    }


def _compile_span_transforms(model: TinyGPT) -> TinyGPT:
    """Wrap every layer's score-gradient transform in ``torch.compile`` (fuses its elementwise work; the
    Cholesky and the fallback check stay eager). An experiment of this benchmark, not a library path: the
    compiled plain function has no fast path, so the layer runs the explicit path."""
    for block in model.blocks:
        if block.attn.score_grad_fn is not None:
            block.attn.score_grad_fn = torch.compile(block.attn.score_grad_fn, dynamic=False)
    return model


def bench_spans(
    device: str = "auto", repeats: int = 16, config: str = "auto", seed: int = 0, warmup: int = 2,
    quick: bool = False, threads: int | None = None,
) -> dict[str, Any]:
    """Train-step times (ms) of standard and span-scaled training, and their ratios.

    Args:
        device: "auto" (cuda if available, else cpu), "cpu", "cuda", ...
        repeats: timed steps per variant (>= 1), interleaved across variants.
        config: "notebook" (d_model 128, 2 layers, 4 heads, T 128, batch 16, vocab 8192), "gpu" (d_model 256,
            4 layers, 4 heads, T 256, batch 32), "long" (d_model 256, 4 layers, 4 heads of 64, T 1024, batch 8)
            or "auto" ("long" on CUDA, else "notebook"). On CUDA a fifth variant, ``kv8_1000_compiled``,
            runs the kv8 transform's definition (the explicit path) through ``torch.compile``.
        seed: weights and batch.
        warmup: untimed rounds first.
        quick: at most 4 repeats and 1 warm-up round (noisier; for ``spanviz bench --quick``).
        threads: ignored on a CPU (the bench times one thread there); on an accelerator, torch's CPU threads
            for the host side (restored afterwards); None = as set.
    Returns:
        dict with ``config``, ``device``, ``timing`` (clock and rounds), ``step_ms`` {variant: {median, min,
        wall_median, wall_min}}, ``ratios`` {kv8_over_fused, kv8_over_explicit, explicit_over_fused,
        qk4_over_fused: the ratio of medians on the primary clock}, ``ratio_detail`` (medians and minima on both
        clocks), ``targets`` and ``meets_targets`` {name: bool}. Full-precision (fp32) steps with AdamW.
    Raises:
        ValueError: bad repeats, warmup, threads or config.
    Source: spanviz.
    """
    check_int("repeats", repeats, 1)
    check_int("warmup", warmup, 0)
    check_choice("config", config, ("auto", *CONFIGS))
    if threads is not None:
        check_int("threads", threads, 1)
    if quick:
        repeats, warmup = min(repeats, 4), min(warmup, 1)
    with torch_threads(threads):
        return _bench(device, repeats, config, seed, warmup)


RATIOS = {"kv8_over_fused": ("kv8_1000", "standard_fused"), "kv8_over_explicit": ("kv8_1000", "standard_explicit"),
          "explicit_over_fused": ("standard_explicit", "standard_fused"), "qk4_over_fused": ("qk4_1000", "standard_fused")}


def _steps(base: dict[str, Any], batch_size: int, dev: torch.device, seed: int,
           compiled: bool = False) -> dict[str, Callable[[], None]]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, base["vocab_size"], (batch_size, base["context_length"]), generator=g).to(dev)
    y = torch.roll(x, -1, dims=1)
    variants = _variants(base)
    if compiled:
        variants["kv8_1000_compiled"] = variants["kv8_1000"]
    steps = {}
    for name, cfg in variants.items():
        torch.manual_seed(seed)  # same initial weights for every variant
        model = TinyGPT(cfg).to(dev)
        if name == "kv8_1000_compiled":
            model = _compile_span_transforms(model)
        steps[name] = make_train_step(model, x, y)
    return steps


def _bench(device: str, repeats: int, config: str, seed: int, warmup: int) -> dict[str, Any]:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if config == "auto":
        config = "long" if dev.type == "cuda" else "notebook"
    base, batch_size = CONFIGS[config]
    steps = _steps(base, batch_size, dev, seed, compiled=dev.type == "cuda")
    t = measure(steps, repeats, warmup=max(warmup, 2 if dev.type == "cuda" else 0), device=dev)
    pairs = dict(RATIOS)
    if "kv8_1000_compiled" in steps:
        pairs["kv8_compiled_over_fused"] = ("kv8_1000_compiled", "standard_fused")
    detail = {name: t.ratio(a, b) for name, (a, b) in pairs.items()}
    ratios = {name: r["median"] for name, r in detail.items()}
    targets = TARGETS_GPU if dev.type == "cuda" else TARGETS
    return {
        "config": {**base, "batch_size": batch_size, "name": config},
        "device": str(dev),
        "threads": 1 if dev.type == "cpu" else torch.get_num_threads(),
        "timing": t.describe(),
        "repeats": repeats,
        "step_ms": t.ms(),
        "ratios": ratios,
        "ratio_detail": detail,
        "targets": dict(targets),
        "meets_targets": {name: ratios[name] <= target for name, target in targets.items()},
    }


# ------------------------------------------------------------------------------------------ cost growth
GROWTH_BASE = dict(vocab_size=8192, n_layer=2, n_head=4, d_model=128)
GROWTH_BATCH = 16
GROWTH_T = (128, 256, 512, 1024)
GROWTH_T_QUICK = (512,)
"""``spanviz bench --quick``: P1 at T 512 (T 1024 costs 20 CPU-seconds a round)."""
GROWTH_QUICK_VARIANTS = ("standard_fused", "kv8_1000", "qk4_1000")
"""``spanviz bench --quick`` leaves the explicit path out of the growth section (its T 512 step is the dearest, 1.5×
the fused one; explicit / standard is in the ``spans`` section at T 128 and in the full growth table)."""
GROWTH_ROUNDS = {128: 16, 256: 8, 512: 4, 1024: 4}
"""Timed rounds per T (even, see :func:`spanviz.bench.core.measure`): about the same CPU time at every T. A T 128 step
is ~0.37 s and differs between the variants by a few percent, so 4 rounds there moved the ratios by ±15 % from one
run to the next on a shared 2-core machine (0.95 and 1.21 for kv8 / standard); 16 rounds cost what 4 cost at T 512."""
GROWTH_TARGETS = {512: 1.3, 1024: 1.5}
"""P1: kv8 [1000] train step / standard (fused) step at T 512 and 1024 (d_model 128, 4 heads, batch 16)."""

_RSS_SCRIPT = r"""
import json, sys
import torch
from spanviz.bench.spans import GROWTH_BASE, GROWTH_BATCH, _variants
from spanviz.bench.core import make_train_step, peak_rss_mb
from spanviz.model import TinyGPT
torch.set_num_threads(1)
variant, contexts = sys.argv[1], [int(t) for t in sys.argv[2].split(",")]
out = {}
for T in contexts:  # ascending: the peak after T is T's own (the smaller ones peaked lower)
    cfg = _variants({**GROWTH_BASE, "context_length": T})[variant]
    torch.manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (GROWTH_BATCH, T))
    step = make_train_step(TinyGPT(cfg), x, torch.roll(x, -1, 1))
    step(); step()
    out[T] = peak_rss_mb()
    del step
print(json.dumps(out))
"""


def bench_growth(quick: bool = False, contexts: Sequence[int] | None = None, repeats: int | None = None,
                 seed: int = 0, rss: bool | None = None) -> dict[str, Any]:
    """Step CPU time and peak RSS of standard (fused), standard (explicit), kv8 [1000] and qk4 [1000] as the
    context T grows (d_model 128, 2 layers, 4 heads, batch 16, vocab 8192; CPU, one thread).

    Per T the four variants' steps are timed interleaved (:func:`spanviz.bench.core.measure`); each variant's peak
    RSS comes from a fresh process that trains it two steps at each T in ascending order (its high-water mark
    after T, :func:`spanviz.bench.core.peak_rss_mb`).

    Args:
        quick: T 512 only (P1 there; T 128 is the ``spans`` section's notebook config), without the explicit
            path (:data:`GROWTH_QUICK_VARIANTS`), no peak RSS.
        contexts: the T to measure (default :data:`GROWTH_T`; quick :data:`GROWTH_T_QUICK`). repeats: timed rounds
            per T after 1 warm-up round (default :data:`GROWTH_ROUNDS`, 4 for another T; use an even number:
            :func:`spanviz.bench.core.measure`). seed: weights and batch. rss: measure peak RSS (default: unless
            quick).
    Returns:
        ``{"config", "timing" (clock, order), "T": {T: {"step_ms": {variant: {...}}, "ratios": {...},
        "ratio_detail": {...}, "rounds": timed rounds, "peak_rss_mb": {variant: MB}}}, "p1": {T: kv8 / standard},
        "targets", "meets_targets"}``.
    """
    contexts = list(contexts or (GROWTH_T_QUICK if quick else GROWTH_T))
    rss = not quick if rss is None else rss
    out: dict[str, Any] = {"config": {**GROWTH_BASE, "batch_size": GROWTH_BATCH}, "T": {}}
    for T in contexts:
        steps = _steps({**GROWTH_BASE, "context_length": T}, GROWTH_BATCH, torch.device("cpu"), seed)
        if quick:
            steps = {name: steps[name] for name in GROWTH_QUICK_VARIANTS}
        t = measure(steps, repeats or GROWTH_ROUNDS.get(T, 4), warmup=1)
        detail = {name: t.ratio(a, b) for name, (a, b) in RATIOS.items() if a in steps and b in steps}
        timing = t.describe()
        out["T"][T] = {"step_ms": t.ms(), "ratios": {n: r["median"] for n, r in detail.items()}, "ratio_detail": detail,
                       "rounds": timing.pop("rounds")}
        out["timing"] = timing
        del steps
    for variant in _variants({**GROWTH_BASE, "context_length": max(contexts)}) if rss else ():
        for T, mb in peak_rss(variant, contexts).items():
            out["T"][T].setdefault("peak_rss_mb", {})[variant] = mb
    if not rss:
        out["peak_rss_mb"] = {"skipped": "--quick (a fresh process per variant): run without --quick"}
    out["p1"] = {T: out["T"][T]["ratios"]["kv8_over_fused"] for T in contexts}
    out["targets"] = {f"kv8_over_fused_T{T}": f"<= {x:g}" for T, x in GROWTH_TARGETS.items()}
    out["meets_targets"] = {f"kv8_over_fused_T{T}": out["p1"][T] <= x for T, x in GROWTH_TARGETS.items()
                            if T in out["p1"]}
    return out


def peak_rss(variant: str, contexts: Sequence[int]) -> dict[int, float]:
    """Peak RSS [MB] of a fresh process training ``variant`` (a name of the growth table) two steps at each T,
    ascending: ``{T: MB}``."""
    arg = ",".join(str(T) for T in sorted(contexts))
    run = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, variant, arg], capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"peak-RSS run of {variant} failed:\n{run.stderr[-2000:]}")
    return {int(T): mb for T, mb in json.loads(run.stdout.strip().splitlines()[-1]).items()}


def growth_table(growth: dict[str, Any]) -> str:
    """The cost-growth table of :func:`bench_growth` as Markdown: per T, each variant's median step CPU time (ms)
    and peak RSS (MB), and the ratios over the fused standard step."""
    names = ("standard_fused", "standard_explicit", "kv8_1000", "qk4_1000")
    head = ("| T | " + " | ".join(f"{n} step ms" for n in names) + " | " + " | ".join(f"{n} RSS MB" for n in names)
            + " | kv8 / standard | explicit / standard | qk4 / standard |")
    lines = [head, "|" + "---|" * (2 * len(names) + 4)]
    for T, row in sorted(growth["T"].items(), key=lambda kv: int(kv[0])):
        ms = [f"{row['step_ms'][n]['median']:.0f}" for n in names]
        rss = [f"{row.get('peak_rss_mb', {}).get(n, float('nan')):.0f}" for n in names]
        r = row["ratios"]
        lines.append(f"| {T} | " + " | ".join(ms) + " | " + " | ".join(rss) + " | "
                     + " | ".join(f"{r[k]:.2f}" for k in ("kv8_over_fused", "explicit_over_fused", "qk4_over_fused"))
                     + " |")
    return "\n".join(lines)
