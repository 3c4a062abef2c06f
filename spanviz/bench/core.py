"""Foundation benchmarks, and the one timing function every section uses.

Benchmarks, not tests: every figure is a ratio or a rate measured within one run on this machine.

**How the bench times** (:func:`measure`; ../shared/DESIGN.md "Measuring speed on a shared machine"): on a CPU the
closures run round-robin in one process, the order reversed every other round, warm-up rounds first, with one
torch thread and one BLAS thread; each call's **thread CPU time** (``time.thread_time``) is the primary figure
and its wall time is recorded beside it as a check. A ratio is reported as the ratio of the medians (the
primary number) and of the minima, on both clocks. Wall time on a busy 2-core machine measures the queue; thread
CPU time of one thread does not. On an accelerator, CPU time means nothing: there each round is a
``torch.utils.benchmark`` block (the device synchronised around it), and wall time is the primary figure.

* ``step_ratio``: train-step time of :class:`spanviz.model.TinyGPT` (probes off, fused attention, its loss
  without logits as the trainer computes it) over a minimal plain-PyTorch GPT of the same architecture written
  below.
* ``notebook``: steps per CPU-second (target >= 2 on 2 CPU cores) and peak RSS (target <= 1.5 GB, Binder's
  budget) of the notebook default config (d_model 128, 2 layers, 4 heads, T 128, batch 16, vocab cap 8192)
  training on WikiText-2 in a *fresh* process, the way a notebook kernel runs a panel's training (a
  :class:`spanviz.runner.Runner` thread, one torch thread) and the way ``spanviz train`` does (the main thread,
  torch's default threads); with the system time and page faults per step (a fresh process used to spend a
  third of each step faulting in pages the allocator had handed back).
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from threadpoolctl import ThreadpoolController
from torch import nn

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]
from torch.utils import benchmark

from spanviz.contexts import torch_threads
from spanviz.memory import keep_freed_memory
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
        self.apply(TinyGPT.init_weights)
        for block in self.blocks:
            nn.init.normal_(block.o.weight, std=0.02 / math.sqrt(2 * cfg.n_layer))
            nn.init.normal_(block.proj.weight, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def make_train_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, logits: bool = False) -> Callable[[], None]:
    """One AdamW step (forward, backward, update) on a fixed batch, as a closure. A :class:`TinyGPT` computes its
    loss as the trainer does (no (B·T, V) logits), or with ``logits=True`` from its full logits.

    The process gets the trainer's malloc settings (:func:`spanviz.memory.keep_freed_memory`), as every spanviz
    training run has them: with glibc's adaptive defaults each step page-faulted (thousands of faults per step at
    T 128), by an amount that depended on what the step before it had freed — a cost training does not pay."""
    keep_freed_memory()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    kwargs = {"return_logits": logits} if isinstance(model, TinyGPT) else {}

    def step() -> None:
        _, loss = model(x, y, **kwargs)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def peak_rss_mb() -> float:
    """This process's peak resident memory [MB]. On Linux the high-water mark of its own image (``VmHWM``):
    ``getrusage``'s ``ru_maxrss`` there also counts the parent's memory at the fork that started a subprocess
    (a child of an 860 MB bench process reported 860 MB whatever it did). Elsewhere ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    if resource is None:  # Windows
        return float("nan")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, kB elsewhere


_POOLS: ThreadpoolController | None = None


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """One torch intra-op thread and one thread in every BLAS / OpenMP pool numpy or torch loaded (threadpoolctl)
    within the block; restored afterwards."""
    global _POOLS
    if _POOLS is None:
        _POOLS = ThreadpoolController()
    with torch_threads(1), _POOLS.limit(limits=1):
        yield


@dataclass
class Timings:
    """Seconds per call of each closure, one entry per timed round: ``cpu`` (thread CPU time; None on an
    accelerator) and ``wall``. ``clock`` names the primary one."""

    cpu: dict[str, list[float]] | None
    wall: dict[str, list[float]]
    clock: str

    def primary(self) -> dict[str, list[float]]:
        return self.cpu if self.cpu is not None else self.wall

    def median(self, name: str) -> float:
        """Median seconds per call of ``name`` on the primary clock."""
        return statistics.median(self.primary()[name])

    def ms(self) -> dict[str, dict[str, float]]:
        """``{name: {"median", "min"[, "wall_median", "wall_min"]}}`` in ms (primary clock first)."""
        out = {}
        for name, values in self.primary().items():
            row = {"median": 1e3 * statistics.median(values), "min": 1e3 * min(values)}
            if self.cpu is not None:
                row.update(wall_median=1e3 * statistics.median(self.wall[name]), wall_min=1e3 * min(self.wall[name]))
            out[name] = row
        return out

    def ratio(self, a: str, b: str) -> dict[str, float]:
        """a over b: ``median`` (ratio of the medians — the primary number), ``min`` (of the minima), and with CPU
        time the same two on the wall clock (a check; on a busy machine it measures the queue)."""
        p = self.primary()
        out = {"median": statistics.median(p[a]) / statistics.median(p[b]), "min": min(p[a]) / min(p[b])}
        if self.cpu is not None:
            out.update(wall_median=statistics.median(self.wall[a]) / statistics.median(self.wall[b]),
                       wall_min=min(self.wall[a]) / min(self.wall[b]))
        return out

    def describe(self) -> dict[str, Any]:
        return {"clock": self.clock, "rounds": len(next(iter(self.wall.values()))),
                "order": "round-robin, reversed every other round"}


def measure(
    steps: Mapping[str, Callable[[], None]], repeats: int, warmup: int = 1, device: torch.device | str = "cpu",
    min_run_time: float = 0.0, warm_each: bool = False,
) -> Timings:
    """Time closures the bench's way (module docstring): interleaved rounds, order reversed every other round.

    Args:
        steps: name → closure taking no arguments. repeats: timed rounds, >= 1; use an even number: with the
            order reversed every other round, the closure that ends a round starts the next one and runs right
            after itself, on warm caches (2–6 % less CPU time for a T 512 train step); an odd count gives the
            first or the last closure more of those warm calls, depending on ``warmup``'s parity (the bench and
            an independent loop disagreed by up to 12 % at 3 rounds, agreed within 2.3 % at 4:
            docs/results/bench_vs_independent_cpu*.json). warmup: untimed rounds first.
        device: where the closures compute; "cpu" → thread CPU time with one torch and one BLAS thread (wall
            beside it); an accelerator → ``torch.utils.benchmark`` blocks (device synchronised), wall only.
        min_run_time: seconds per timed block: a closure faster than this is called several times per block (the
            count fixed in the warm-up rounds, at least one of which then runs) and the block's time divided.
        warm_each: one untimed call right before each timed block on a CPU (as ``torch.utils.benchmark`` does):
            leaves out the cold-cache cost of the first call after another closure's work.
    Returns:
        :class:`Timings` with one value per timed round and closure.
    Source: ../shared/DESIGN.md's method; ``torch.utils.benchmark`` on accelerators.
    """
    names = list(steps)
    dev = torch.device(device)
    if dev.type != "cpu":
        timers = {n: benchmark.Timer(stmt="step()", globals={"step": steps[n]}, label=n,
                                     num_threads=torch.get_num_threads()) for n in names}
        wall: dict[str, list[float]] = {n: [] for n in names}
        for r in range(warmup + repeats):
            for n in (names if r % 2 == 0 else names[::-1]):
                m = timers[n].blocked_autorange(min_run_time=min_run_time)
                if r >= warmup:
                    wall[n].append(m.median)
        return Timings(None, wall, f"wall time, {dev.type} synchronised (torch.utils.benchmark blocks)")
    warmup = max(warmup, 1) if min_run_time > 0 else warmup
    number = dict.fromkeys(names, 1)
    cpu: dict[str, list[float]] = {n: [] for n in names}
    wall = {n: [] for n in names}
    with one_thread():
        for r in range(warmup + repeats):
            for n in (names if r % 2 == 0 else names[::-1]):
                if warm_each:
                    steps[n]()
                c0, w0 = time.thread_time(), time.perf_counter()
                for _ in range(number[n]):
                    steps[n]()
                c1, w1 = time.thread_time(), time.perf_counter()
                per_call = (c1 - c0) / number[n]
                if r < warmup:
                    if min_run_time > 0:
                        number[n] = max(1, math.ceil(min_run_time / max(per_call, 1e-6)))
                else:
                    cpu[n].append(per_call)
                    wall[n].append((w1 - w0) / number[n])
    return Timings(cpu, wall, "thread CPU time, 1 torch thread, 1 BLAS thread (wall beside it)")


def interleaved_medians(
    steps: dict[str, Callable[[], None]], repeats: int, warmup: int = 3, device: torch.device | str = "cpu",
    min_run_time: float = 0.0,
) -> dict[str, float]:
    """Median seconds per call of each closure on the primary clock of :func:`measure` (thread CPU time on a CPU,
    synchronised wall time on an accelerator).

    Args: as :func:`measure`. Returns: name → median seconds per call.
    """
    timings = measure(steps, repeats, warmup=warmup, device=device, min_run_time=min_run_time)
    return {name: timings.median(name) for name in steps}


def bench_step_ratio(device: str = "cpu", repeats: int = 30, seed: int = 0, warmup: int = 2) -> dict:
    """TinyGPT train-step time over the plain reference (notebook config shapes, random tokens)."""
    dev = torch.device(device)
    cfg = GPTConfig(**NOTEBOOK_CONFIG)
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, cfg.vocab_size, (NOTEBOOK_BATCH, cfg.context_length), generator=g).to(dev)
    y = torch.roll(x, -1, dims=1)
    torch.manual_seed(seed)
    tiny, plain = TinyGPT(cfg).to(dev), PlainGPT(cfg).to(dev)
    # the same loss on both sides (from the full logits): this ratio is the model's overhead; what the chunked loss
    # saves shows in ``tinygpt_chunked_loss``
    steps = {"tinygpt": make_train_step(tiny, x, y, logits=True), "plain": make_train_step(plain, x, y)}
    torch.manual_seed(seed)
    steps["tinygpt_chunked_loss"] = make_train_step(TinyGPT(cfg).to(dev), x, y)
    t = measure(steps, repeats, warmup=warmup, device=dev)
    return {
        "config": {**NOTEBOOK_CONFIG, "batch_size": NOTEBOOK_BATCH},
        "device": str(dev),
        "timing": t.describe(),
        "step_ms": t.ms(),
        "tinygpt_step_ms": 1e3 * t.median("tinygpt"),
        "plain_step_ms": 1e3 * t.median("plain"),
        "ratio": t.ratio("tinygpt", "plain")["median"],
        "ratios": {"tinygpt_over_plain": t.ratio("tinygpt", "plain"),
                   "chunked_loss_over_full_logits": t.ratio("tinygpt_chunked_loss", "tinygpt")},
        "target": "<= 1.05",
        "note": "tinygpt and plain both compute the loss from the full (B·T, V) logits; tinygpt_chunked_loss is "
                "TinyGPT as spanviz trains it (spanviz.lm_loss, no logits)",
    }


_NOTEBOOK_SCRIPT = r"""
import json, resource, sys, time, threading
import torch
from spanviz.bench.core import NOTEBOOK_CONFIG, NOTEBOOK_BATCH, peak_rss_mb
from spanviz.data import prepare_tokens
from spanviz.model import GPTConfig
from spanviz.train import TrainConfig, Trainer
data_dir, steps, device, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
data = prepare_tokens(data_dir=data_dir, splits={"train": "validation", "eval": "test"}, max_vocab=8192)
cfg = GPTConfig(**{**NOTEBOOK_CONFIG, "vocab_size": data.vocab_size})
train_cfg = TrainConfig(steps=steps + 5, batch_size=NOTEBOOK_BATCH, warmup_steps=0, eval_interval=10**9, device=device)
out = {}

def train(threads):
    if threads is not None:
        torch.set_num_threads(threads)
    trainer = Trainer(cfg, train_cfg, data)
    trainer.step(5)  # warm-up
    r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    trainer.step(steps)
    r1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    out.update(steps_per_cpu_s=steps / cpu, steps_per_s=steps / (w1 - w0),
               system_s_per_step=(r1.ru_stime - r0.ru_stime) / steps,
               page_faults_per_step=(r1.ru_minflt - r0.ru_minflt) / steps,
               torch_threads=torch.get_num_threads())

if path == "panel":  # as a notebook kernel trains a panel: a Runner thread with the panels' thread count
    from spanviz.runner import Job, Runner
    from spanviz.widgets.specs import TRAIN_THREADS
    holder = {}
    class Once:
        def step(self, n=1):
            if not holder:
                train(None)
                holder["done"] = True
            return []
    Runner(threads=TRAIN_THREADS).start([Job("run", steps=1, make_trainer=Once)], blocking=False)
    while not holder:
        time.sleep(0.05)
else:  # as `spanviz train` does: the main thread, torch's own thread count
    train(None)
out["peak_rss_mb"] = peak_rss_mb()
out["vocab_size"] = data.vocab_size
print(json.dumps(out))
"""


def bench_notebook(data_dir: str, steps: int = 40, device: str = "cpu", paths: Sequence[str] = ("panel", "cli")) -> dict:
    """Steps per CPU-second, steps/s, system time and page faults per step and peak RSS of the notebook default
    config training on WikiText-2, each path in a fresh process: ``panel`` (a Runner thread, the panels' torch
    threads — what a notebook kernel does) and ``cli`` (the main thread, torch's default threads — what
    ``spanviz train`` does). CPU seconds are the whole process's (user + system, every thread)."""
    out: dict[str, Any] = {}
    for path in paths:
        run = subprocess.run([sys.executable, "-c", _NOTEBOOK_SCRIPT, str(data_dir), str(steps), device, path],
                             capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise RuntimeError(f"notebook benchmark ({path}) failed:\n{run.stderr[-2000:]}")
        out[path] = json.loads(run.stdout.strip().splitlines()[-1])
    out.update(
        steps=steps,
        steps_per_cpu_s=out["panel"]["steps_per_cpu_s"],
        peak_rss_mb=out["panel"]["peak_rss_mb"],
        targets={"steps_per_cpu_s": ">= 2", "peak_rss_mb": "<= 1536"},
        meets_targets=out["panel"]["steps_per_cpu_s"] >= 2 and out["panel"]["peak_rss_mb"] <= 1536,
        config={**NOTEBOOK_CONFIG, "batch_size": NOTEBOOK_BATCH},
    )
    return out


def bench_core(device: str = "cpu", quick: bool = False, data_dir: str | None = None, focus: bool = False) -> dict:
    """The foundation section of ``spanviz bench``: step ratio, and the notebook config when data is at hand.

    Args:
        quick: 3 timed rounds of the step ratio after 1 warm-up, ``spanviz train``'s path left out; the notebook
            config's 30 steps as in the full run (fewer would measure a fresh process's first steps, which run slower:
            8 steps after the warm-up gave 1.6–2.0 steps per CPU-second in nine runs where 30 gave 2.2–2.4).
            focus: the notebook config only (``spanviz bench --quick``), no step ratio.
    """
    if focus:
        out: dict[str, Any] = {"step_ratio": {"skipped": "--quick: run `spanviz bench --only core` for TinyGPT over "
                                                         "a plain GPT"}}
    else:
        out = {"step_ratio": bench_step_ratio(device=device, repeats=4 if quick else 16, warmup=1 if quick else 2)}
    if data_dir is None:
        out["notebook"] = {"skipped": "no data folder: pass --data-dir or set SPANVIZ_WIKITEXT_DIR"}
    else:
        out["notebook"] = bench_notebook(data_dir, steps=30, device=device,
                                         paths=("panel",) if quick else ("panel", "cli"))
    return out
