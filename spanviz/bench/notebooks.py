"""Benchmark: training throughput of each notebook's default comparison, on this machine's device.

The runs a student starts by pressing Train with a notebook's defaults (the ``parameters`` cells of
notebooks 00-03 and the defaults of their panels), each trained for a few updates through the real
:class:`spanviz.train.Trainer` — probes, evaluation and all — on random tokens of the notebooks' vocabulary
size (8192). Reported per run: ``tokens_per_cpu_s`` (B·T per update over the thread CPU time of the timed
updates, evaluation and probes included; on a CPU the bench runs one thread), ``tokens_per_s`` (the same over
wall time: what a student waits for, on a quiet machine) and ``train_tokens_per_s`` (the trainer's own
per-update figure: forward, backward and optimizer only, median, wall). Run it once on a CPU and once on a GPU
(``spanviz bench --only notebooks --device cuda``) to compare the two.

Nothing here asserts a time. Source: spanviz.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import torch

from spanviz import fp8, spans
from spanviz import local_global as lg
from spanviz.model import GPTConfig
from spanviz.train import TrainConfig, Trainer
from spanviz.train.callbacks import Probe
from spanviz.validators import check_int

NOTEBOOK_VOCAB = 8192
NOTEBOOK_BATCH, NOTEBOOK_LR = 16, 3e-3


def notebook_runs(vocab_size: int = NOTEBOOK_VOCAB) -> dict[str, tuple[GPTConfig, list[Probe]]]:
    """Each notebook's default comparison as ``{run label: (GPTConfig, probes)}``.

    Mirrors the ``parameters`` cells of notebooks 00-03 and their panels' default controls: 00 one tiny GPT
    (d_model 128, 4 heads, T 64); 01 standard (twice: the second, with the next seed and no probe, is the
    seed-noise band) vs kv8 [1000] (d_model 64, 2 heads of 32, T 64, SpanProbe every 10); 02 MHSA vs LS
    (d_model 64, 4 heads of 16, T 128, 3 local heads p = 16, LogitProbe every 10); 03 one run with the FP8
    probe every update (d_model 64, 4 heads, T 64). All 2 layers.

    Raises:
        ValueError: vocab_size not an integer >= 1 (from GPTConfig).
    """
    nb = dict(vocab_size=vocab_size, n_layer=2)
    spans_base = GPTConfig(**nb, n_head=2, d_model=64, context_length=64)
    ls_base = GPTConfig(**nb, n_head=4, d_model=64, context_length=128)
    span_probe = spans.SpanConfig(alphas="1000")  # the α setting of notebook 01 (its panel probes with it too)
    return {
        "00 tour": (GPTConfig(**nb, n_head=4, d_model=128, context_length=64), []),
        "01 standard": (spans_base, [spans.SpanProbe(every=10, cfg=span_probe)]),
        "01 standard, next seed": (spans_base, []),  # the seed-noise band of notebook 01's Δ view
        "01 [1000]": (replace(spans_base, spans=span_probe), [spans.SpanProbe(every=10, cfg=span_probe)]),
        "02 MHSA": (ls_base, [lg.LogitProbe(every=10, entropy=False)]),
        "02 LS": (replace(ls_base, n_local=3, window=16), [lg.LogitProbe(every=10, entropy=False)]),
        "03 FP8": (GPTConfig(**nb, n_head=4, d_model=64, context_length=64), [fp8.FP8Probe(every=1)]),
    }


def _random_tokens(vocab_size: int, seed: int) -> SimpleNamespace:
    g = torch.Generator().manual_seed(seed)
    return SimpleNamespace(
        train_ids=torch.randint(0, vocab_size, (200_000,), generator=g),
        eval_ids=torch.randint(0, vocab_size, (50_000,), generator=g),
        vocab_size=vocab_size,
        describe=lambda: {"source": "random tokens (benchmark)"},
    )


def bench_notebooks(
    device: str = "cpu", quick: bool = False, steps: int | None = None, warmup: int = 5, seed: int = 0
) -> dict:
    """Tokens/s of every notebook default run (see :func:`notebook_runs`) on ``device``.

    Args:
        device: "cpu", "cuda", ... (fp32, as the notebooks train). quick: 5 timed updates instead of 30, at most
            2 warm-up updates.
        steps: timed updates per run (overrides ``quick``), >= 1. warmup: untimed updates first, >= 0.
        seed: weights, batches and tokens.
    Returns:
        ``{"device", "device_name", "threads", "steps", "runs": {label: {"tokens_per_cpu_s", "tokens_per_s",
        "train_tokens_per_s", "updates_per_s", "tokens_per_update"}}}``.
    Raises:
        ValueError: steps not an integer >= 1, warmup not an integer >= 0, or a device the trainer rejects.
    """
    steps = (5 if quick else 30) if steps is None else steps
    warmup = min(warmup, 2) if quick else warmup
    check_int("steps", steps, 1)
    check_int("warmup", warmup, 0)
    data = _random_tokens(NOTEBOOK_VOCAB, seed)
    runs: dict[str, Any] = {}
    for label, (model_cfg, probes) in notebook_runs(NOTEBOOK_VOCAB).items():
        # The notebooks evaluate every STEPS // 10 = 30 updates on 10 batches: keep that rhythm here.
        train_cfg = TrainConfig(steps=warmup + steps, batch_size=NOTEBOOK_BATCH, lr=NOTEBOOK_LR, warmup_steps=0,
                                eval_interval=30, eval_iters=10, device=device, seed=seed)
        trainer = Trainer(model_cfg, train_cfg, data, probes=probes)
        if warmup:
            trainer.step(warmup)
        c0, t0 = time.thread_time(), time.perf_counter()
        rows = trainer.step(steps)
        cpu, wall = time.thread_time() - c0, time.perf_counter() - t0
        per_update = NOTEBOOK_BATCH * model_cfg.context_length
        runs[label] = {
            "tokens_per_cpu_s": per_update * len(rows) / cpu,
            "tokens_per_s": per_update * len(rows) / wall,
            "train_tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows),
            "updates_per_s": len(rows) / wall,
            "tokens_per_update": per_update,
        }
        dev = trainer.device
    return {
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "steps": steps,
        "batch_size": NOTEBOOK_BATCH,
        "runs": runs,
    }
