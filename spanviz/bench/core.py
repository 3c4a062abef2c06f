"""Foundation benchmarks: TinyGPT's overhead over a plain GPT, and the notebook config's speed and memory.

Benchmarks, not tests: every figure is a ratio or a rate measured within one run on this machine.

* ``step_ratio``: train-step time of :class:`spanviz.model.TinyGPT` (probes off, fused attention) over a
  minimal plain-PyTorch GPT of the same architecture written below (target <= 1.05). Steps of the two
  models are timed by ``torch.utils.benchmark`` in interleaved rounds (ABAB...) so drifts of a shared machine
  hit both alike; medians are compared (:func:`interleaved_medians`).
* ``notebook``: steps/s (target >= 2 on 2 CPU cores) and peak RSS (target <= 1.5 GB, Binder's budget) of
  the notebook default config (d_model 128, 2 layers, 4 heads, T 128, batch 16, vocab cap 8192) training
  on WikiText-2, measured in a fresh subprocess so the peak RSS is that of a notebook-sized process.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils import benchmark

from spanviz.model import GPTConfig, TinyGPT

NOTEBOOK_CONFIG = dict(vocab_size=8192, context_length=128, n_layer=2, n_head=4, d_model=128)
NOTEBOOK_BATCH = 16


class PlainBlock(nn.Module):
    """The reference block: pre-LN, fused causal SDPA, GELU MLP — no hooks, no plug-in slots."""

    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        a = self.ln_1(x)
        q, k, v = (lin(a).view(B, T, self.h, d // self.h).transpose(1, 2) for lin in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, d)
        x = x + self.o(y)
        return x + self.proj(F.gelu(self.fc(self.ln_2(x))))


class PlainGPT(nn.Module):
    """Minimal GPT of the same architecture as TinyGPT (learned positions, tied embeddings)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.context_length, cfg.d_model)
        self.blocks = nn.ModuleList(PlainBlock(cfg.d_model, cfg.n_head) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.head.weight = self.wte.weight
        # Same init as TinyGPT (PyTorch's default N(0, 1) embeddings would start at loss ~90 and crawl
        # through denormal gradients, an unfair reference).
        self.apply(TinyGPT._init_weights)
        for block in self.blocks:
            nn.init.normal_(block.o.weight, std=0.02 / math.sqrt(2 * cfg.n_layer))
            nn.init.normal_(block.proj.weight, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def make_train_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    """One AdamW step (forward, backward, update) on a fixed batch, as a closure."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def interleaved_medians(
    steps: dict[str, Callable[[], None]], repeats: int, warmup: int = 3, device: torch.device | str = "cpu",
    min_run_time: float = 0.0,
) -> dict[str, float]:
    """Median seconds per call of each closure, measured by ``torch.utils.benchmark`` in interleaved rounds.

    Each closure gets a :class:`torch.utils.benchmark.Timer` at the current torch thread count (the Timer pins it
    while measuring; its clock synchronizes CUDA and other accelerators). In each round every closure is measured
    once, round-robin (ABAB...), so drifts of a shared machine hit all alike: ``Timer.blocked_autorange`` of
    ``min_run_time`` seconds — with the default 0, one untimed call (its block-size estimate, a warm-up) then one
    timed call, twice the calls of timing alone; with more, a block of calls long enough that the timer's own
    overhead vanishes (sub-millisecond kernels). The first ``warmup`` rounds are discarded; the medians are over
    the blocks of the next ``repeats`` rounds, per call.

    Args:
        steps: name → closure taking no arguments. repeats: timed rounds, >= 1. warmup: discarded rounds, >= 0.
        device: kept for callers; the Timer synchronizes whatever accelerator is present.
        min_run_time: seconds of timed calls per closure and round, >= 0.
    Returns:
        name → median seconds per call.
    Source: ``torch.utils.benchmark`` (PyTorch's benchmark utilities).
    """
    threads = torch.get_num_threads()
    timers = {name: benchmark.Timer(stmt="step()", globals={"step": fn}, label=name, num_threads=threads)
              for name, fn in steps.items()}  # fmt: skip
    measured: dict[str, list[benchmark.Measurement]] = {name: [] for name in steps}
    for round_ in range(warmup + repeats):
        for name, timer in timers.items():
            measurement = timer.blocked_autorange(min_run_time=min_run_time)
            if round_ >= warmup:
                measured[name].append(measurement)
    return {name: benchmark.Measurement.merge(ms)[0].median for name, ms in measured.items()}


def bench_step_ratio(device: str = "cpu", repeats: int = 30, seed: int = 0) -> dict:
    """TinyGPT train-step time over the plain reference (notebook config shapes, random tokens)."""
    dev = torch.device(device)
    cfg = GPTConfig(**NOTEBOOK_CONFIG)
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, cfg.vocab_size, (NOTEBOOK_BATCH, cfg.context_length), generator=g).to(dev)
    y = torch.roll(x, -1, dims=1)
    torch.manual_seed(seed)
    tiny, plain = TinyGPT(cfg).to(dev), PlainGPT(cfg).to(dev)
    med = interleaved_medians(
        {"tinygpt": make_train_step(tiny, x, y), "plain": make_train_step(plain, x, y)}, repeats, device=dev
    )
    return {
        "config": {**NOTEBOOK_CONFIG, "batch_size": NOTEBOOK_BATCH},
        "device": str(dev),
        "tinygpt_step_ms": 1e3 * med["tinygpt"],
        "plain_step_ms": 1e3 * med["plain"],
        "ratio": med["tinygpt"] / med["plain"],
        "target": "<= 1.05",
    }


_NOTEBOOK_SCRIPT = r"""
import json, resource, sys, time
import torch
from spanviz.bench.core import NOTEBOOK_CONFIG, NOTEBOOK_BATCH
from spanviz.data import prepare_tokens
from spanviz.model import GPTConfig
from spanviz.train import TrainConfig, Trainer
data_dir, steps, device = sys.argv[1], int(sys.argv[2]), sys.argv[3]
data = prepare_tokens(data_dir=data_dir, splits={"train": "validation", "eval": "test"}, max_vocab=8192)
cfg = GPTConfig(**{**NOTEBOOK_CONFIG, "vocab_size": data.vocab_size})
train_cfg = TrainConfig(steps=steps + 5, batch_size=NOTEBOOK_BATCH, warmup_steps=0, eval_interval=10**9, device=device)
trainer = Trainer(cfg, train_cfg, data)
trainer.step(5)  # warm-up
t0 = time.perf_counter()
trainer.step(steps)
dt = time.perf_counter() - t0
print(json.dumps({"steps_per_s": steps / dt, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "vocab_size": data.vocab_size, "torch_threads": torch.get_num_threads()}))
"""


def bench_notebook(data_dir: str, steps: int = 40, device: str = "cpu") -> dict:
    """Steps/s and peak RSS of the notebook default config training on WikiText-2, in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _NOTEBOOK_SCRIPT, str(data_dir), str(steps), device],
        capture_output=True, text=True, check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"notebook benchmark failed:\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result.update(
        targets={"steps_per_s": ">= 2", "peak_rss_mb": "<= 1536"},
        config={**NOTEBOOK_CONFIG, "batch_size": NOTEBOOK_BATCH},
    )
    return result


def bench_core(device: str = "cpu", quick: bool = False, data_dir: str | None = None) -> dict:
    """The foundation section of ``spanviz bench``: step ratio, and the notebook config when data is at hand."""
    out = {"step_ratio": bench_step_ratio(device=device, repeats=10 if quick else 30)}
    if data_dir is None:
        out["notebook"] = {"skipped": "no data folder: pass --data-dir or set SPANVIZ_WIKITEXT_DIR"}
    else:
        out["notebook"] = bench_notebook(data_dir, steps=15 if quick else 40, device=device)
    return out
