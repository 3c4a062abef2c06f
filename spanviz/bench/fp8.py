"""FP8 benchmark: cost of recomputing the spectral norms σ^(ℓ) after every optimizer step.

The geometry-aware scale (arXiv 2602.18851) needs σ^(ℓ) = max_h ‖W̃^Q_h W̃^K_hᵀ‖₂ of every layer after each
update. Measured here, as a percentage of one training step (forward, backward, AdamW) of the notebook
config (d_model 128, 2 layers, 4 heads, T 128, batch 16, vocab 8192), in one run with interleaved calls
(:func:`spanviz.bench.core.measure`: thread CPU time of one thread on a CPU):

* ``exact``: fold LayerNorm gain/bias and q/k biases into the weights, then the thin-QR core method for
  all heads of all layers (target <= 2 %), with R from a Cholesky of the key Gram (the default);
  ``exact_householder``: the same with Householder QR (``method="householder"``), for comparison;
* ``power_step``: fold, then one warm-started implicit power iteration for all layers (target <= 0.5 %);
  ``power_step_prefolded``: the iteration alone, on weights folded beforehand.

Each timed call follows an untimed call of the same closure (``measure(..., warm_each=True)``, as
``torch.utils.benchmark``'s warm-up), so the extra cost of the first small op after a train step (cold caches,
about 0.5 ms for two layers on a 2-core CPU) is not in these numbers; with each call timed right after the train
step it was, and the exact σ measured about twice as much.

Benchmarks, not tests: numbers depend on the machine and its load (a shared machine is noisy; medians of
interleaved calls damp but do not remove that).
"""

from __future__ import annotations

import torch

from spanviz.bench.core import NOTEBOOK_BATCH, NOTEBOOK_CONFIG, make_train_step, measure
from spanviz.contexts import torch_threads
from spanviz.fp8.core import spectral_norms_exact
from spanviz.fp8.folding import fold_qk, layer_sigma
from spanviz.fp8.power import PowerIteration
from spanviz.model import GPTConfig, TinyGPT
from spanviz.validators import check_int

TARGETS_PCT = {"exact_pct": 2.0, "power_step_pct": 0.5}
"""Issue targets, in percent of one train step (notebook config, CPU)."""


def bench_fp8(device: str = "cpu", repeats: int = 30, seed: int = 0, threads: int | None = None,
              quick: bool = False) -> dict:
    """Spectral-norm cost as % of a train step on the notebook config.

    Args:
        device: torch device string ("cpu", "cuda", ...). repeats: interleaved measurements per closure, >= 1.
        seed: for weights and the random token batch.
        threads: ignored on a CPU (the bench times one thread there, :func:`spanviz.bench.core.measure`); on an
            accelerator, torch's CPU threads for the host side (restored afterwards); None = as set.
        quick: 5 timed rounds instead of ``repeats``.
    Returns:
        dict: ``config``, ``device``, ``torch_threads``, ``train_step_ms``, ``exact_ms``,
        ``exact_householder_ms``, ``power_step_ms``, ``power_step_prefolded_ms``, and each ``*_pct``
        (percent of ``train_step_ms``), ``targets``, ``meets_targets``, ``power_step_ratio`` (warm 1-step
        estimate over the exact σ, min over layers, after the timing loop — ≈ 1 once warm, always <= 1).
    Raises:
        ValueError: repeats < 1 or an unknown device.
    """
    check_int("repeats", repeats, 1)
    if threads is not None:
        check_int("threads", threads, 1)
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be a torch device string like 'cpu' or 'cuda', got {device!r}") from exc
    with torch_threads(threads):
        return _bench(dev, min(repeats, 5) if quick else repeats, seed)


def _bench(dev: torch.device, repeats: int, seed: int) -> dict:
    cfg = GPTConfig(**NOTEBOOK_CONFIG)
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, cfg.vocab_size, (NOTEBOOK_BATCH, cfg.context_length), generator=g).to(dev)
    y = torch.roll(x, -1, dims=1)
    torch.manual_seed(seed)
    model = TinyGPT(cfg).to(dev)
    blocks = list(model.blocks)
    iterations = [PowerIteration(n_iter=1, seed=i) for i in range(len(blocks))]
    prefolded = [fold_qk(b) for b in blocks]
    iterations_prefolded = [PowerIteration(n_iter=1, seed=i) for i in range(len(blocks))]

    def exact() -> None:
        for b in blocks:
            layer_sigma(b)

    def exact_householder() -> None:
        for b in blocks:
            f = fold_qk(b)
            spectral_norms_exact(f.W_Q, f.W_K, method="householder").max()

    def power_step() -> None:
        for b, pi in zip(blocks, iterations):
            f = fold_qk(b)
            pi(f.W_Q, f.W_K).max()

    def power_step_prefolded() -> None:
        for f, pi in zip(prefolded, iterations_prefolded):
            pi(f.W_Q, f.W_K).max()

    timings = measure(
        {"train_step": make_train_step(model, x, y), "exact": exact, "exact_householder": exact_householder,
         "power_step": power_step, "power_step_prefolded": power_step_prefolded},
        repeats, warmup=2, device=dev, warm_each=True,
    )  # fmt: skip
    med = {name: timings.median(name) for name in timings.wall}
    ratio = min(
        float((pi(f.W_Q, f.W_K) / spectral_norms_exact(f.W_Q, f.W_K)).min())
        for pi, f in zip(iterations, (fold_qk(b) for b in blocks))
    )
    step = med["train_step"]
    result = {
        "config": {**NOTEBOOK_CONFIG, "batch_size": NOTEBOOK_BATCH},
        "device": str(dev),
        "torch_threads": torch.get_num_threads(),
        "timing": timings.describe(),
        "ms": timings.ms(),
        "train_step_ms": 1e3 * step,
        "exact_ms": 1e3 * med["exact"],
        "exact_householder_ms": 1e3 * med["exact_householder"],
        "power_step_ms": 1e3 * med["power_step"],
        "power_step_prefolded_ms": 1e3 * med["power_step_prefolded"],
        "exact_pct": 100 * med["exact"] / step,
        "exact_householder_pct": 100 * med["exact_householder"] / step,
        "power_step_pct": 100 * med["power_step"] / step,
        "power_step_prefolded_pct": 100 * med["power_step_prefolded"] / step,
        "power_step_ratio": ratio,
        "targets": {name: f"<= {limit:g}" for name, limit in TARGETS_PCT.items()},
    }
    result["meets_targets"] = {name: result[name] <= limit for name, limit in TARGETS_PCT.items()}
    return result
