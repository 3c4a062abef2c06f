"""Benchmark: what span / violation gradient scaling costs per training step.

One run, one model architecture, one random batch; four variants trained side by side with their steps
interleaved (ABCD ABCD ...) so drifts of a shared machine hit all alike; medians of the repeats compared:

* ``standard_fused`` — ``spans=None``: the fused SDPA attention path (what plain training uses);
* ``standard_explicit`` — ``attn_backend="explicit"``: the explicit T×T path without any transform;
* ``kv8_1000`` — kv8 [1000] (score-gradient transform; forces the explicit path);
* ``qk4_1000`` — qk4 [1000] (closed form as q/k gradient hooks; stays on the fused path).

Targets (notebook config on CPU): kv8 [1000] / standard ≤ 1.5, qk4 [1000] / standard ≤ 1.15. The kv8 ratio
is given over both standards: over the fused one (the honest cost of switching the technique on) and over
the explicit one (the cost of the projections alone). Numbers on a shared machine are noisy.
"""

from __future__ import annotations

from typing import Any

import torch

from spanviz.bench.core import NOTEBOOK_BATCH, NOTEBOOK_CONFIG, interleaved_medians, make_train_step
from spanviz.model import GPTConfig, TinyGPT
from spanviz.spans import SpanConfig
from spanviz.threads import torch_threads
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
    Cholesky and the fallback check stay eager). An experiment of this benchmark, not a library path."""
    for block in model.blocks:
        if block.attn.score_grad_fn is not None:
            block.attn.score_grad_fn = torch.compile(block.attn.score_grad_fn, dynamic=False)
    return model


def bench_spans(
    device: str = "auto", repeats: int = 15, config: str = "auto", seed: int = 0, warmup: int = 3,
    quick: bool = False, threads: int | None = None,
) -> dict[str, Any]:
    """Train-step times (median ms) of standard and span-scaled training, and their ratios.

    Args:
        device: "auto" (cuda if available, else cpu), "cpu", "cuda", ...
        repeats: timed steps per variant (>= 1), interleaved across variants.
        config: "notebook" (d_model 128, 2 layers, 4 heads, T 128, batch 16, vocab 8192), "gpu" (d_model 256,
            4 layers, 4 heads, T 256, batch 32), "long" (d_model 256, 4 layers, 4 heads of 64, T 1024, batch 8)
            or "auto" ("long" on CUDA, else "notebook"). On CUDA a fifth variant, ``kv8_1000_compiled``,
            runs the kv8 transform through ``torch.compile``.
        seed: weights and batch.
        warmup: untimed steps per variant first.
        quick: at most 5 repeats and 1 warm-up step (noisier; for ``spanviz bench --quick``).
        threads: CPU threads for the measurement (restored afterwards); None = torch's current setting.
            On an oversubscribed machine 1 thread gives steadier ratios: with 2 threads every small
            parallel operation may wait for a descheduled worker, which penalises the many small batched
            operations of the transforms far more than the few large ones of the standard step.
    Returns:
        dict with ``config``, ``device``, ``threads``, ``step_ms`` {variant: median ms}, ``ratios``
        {kv8_over_fused, kv8_over_explicit, explicit_over_fused, qk4_over_fused}, ``targets`` and
        ``meets_targets`` {name: bool}. Full-precision (fp32) steps with AdamW.
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
        repeats, warmup = min(repeats, 5), min(warmup, 1)
    with torch_threads(threads):
        return _bench(device, repeats, config, seed, warmup)


def _bench(device: str, repeats: int, config: str, seed: int, warmup: int) -> dict[str, Any]:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if config == "auto":
        config = "long" if dev.type == "cuda" else "notebook"
    base, batch_size = CONFIGS[config]

    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, base["vocab_size"], (batch_size, base["context_length"]), generator=g).to(dev)
    y = torch.roll(x, -1, dims=1)
    steps = {}
    variants = _variants(base)
    if dev.type == "cuda":
        variants["kv8_1000_compiled"] = variants["kv8_1000"]
    for name, cfg in variants.items():
        torch.manual_seed(seed)  # same initial weights for every variant
        model = TinyGPT(cfg).to(dev)
        if name == "kv8_1000_compiled":
            model = _compile_span_transforms(model)
        steps[name] = make_train_step(model, x, y)
    med = interleaved_medians(steps, repeats, warmup=max(warmup, 2 if dev.type == "cuda" else 0), device=dev)
    ratios = {
        "kv8_over_fused": med["kv8_1000"] / med["standard_fused"],
        "kv8_over_explicit": med["kv8_1000"] / med["standard_explicit"],
        "explicit_over_fused": med["standard_explicit"] / med["standard_fused"],
        "qk4_over_fused": med["qk4_1000"] / med["standard_fused"],
    }
    if "kv8_1000_compiled" in med:
        ratios["kv8_compiled_over_fused"] = med["kv8_1000_compiled"] / med["standard_fused"]
    targets = TARGETS_GPU if dev.type == "cuda" else TARGETS
    return {
        "config": {**base, "batch_size": batch_size, "name": config},
        "device": str(dev),
        "threads": torch.get_num_threads(),
        "repeats": repeats,
        "step_ms": {name: 1e3 * t for name, t in med.items()},
        "ratios": ratios,
        "targets": dict(targets),
        "meets_targets": {name: ratios[name] <= target for name, target in targets.items()},
    }
