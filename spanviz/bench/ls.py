"""Benchmark: LS-attention (local + global heads) over dense causal attention, at the attention-op level.

One run, one random (q, k, v) of the paper's shape — 6 heads × d_head 32, 5 local (window p = 50) + 1
global, T = 2048 — timed through every backend with ``torch.utils.benchmark``
(:func:`spanviz.bench.core.interleaved_medians`: torch's thread count held, warm-up rounds, CUDA synchronised
around each timed block), the cases interleaved round by round (ABC ABC ...) so drifts of a shared machine hit
all alike; medians compared. Cases:

* ``dense_causal_sdpa`` — the baseline: ``scaled_dot_product_attention(..., is_causal=True)``;
* ``ls_sdpa`` — SDPA with the LS boolean mask (dense mask: no work is skipped), :func:`spanviz.model.fused_attention`;
* ``ls_explicit`` — explicit scores + mask + softmax (what the probes use), :func:`spanviz.model.explicit_attention`;
* CUDA only (d_head >= 16): ``ls_flex`` — :func:`spanviz.local_global.flex_attention`, what the model calls
  (every head on compiled FlexAttention with the cached LS block mask, skipping empty 128×128 tiles),
  ``dense_causal_flex`` — the library call with a causal mask (every
  head on FlexAttention), ``dense_causal_flex_direct`` — the same compiled kernel called directly (the
  library's wrapper cost is the difference), ``ls_flex_direct`` — every head on the compiled kernel with the
  whole LS block mask (the library's path without its wrapper), and ``ls_flex_direct_tiles64`` — the same
  with 64×64 tiles.
  Also on CUDA, ``model``: the whole TinyGPT of the paper's shape (:func:`bench_ls_model`), LS on FlexAttention
  over MHSA on causal SDPA (FlashAttention), forward and train step.

Each case is timed forward only (``torch.no_grad``) and forward + backward (gradients w.r.t. q, k, v).
Also reported, exact and machine-independent: the share of allowed (query, key) pairs and of non-empty
128×128 blocks of the LS mask relative to the causal mask — the work a block-sparse kernel can skip.
Nothing here asserts a time. Source: the latency claim of arXiv 2505.15548; spanviz's measurement.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask

from spanviz.bench.core import interleaved_medians
from spanviz.local_global.core import PAPER, MaskMod, check_head_split, dense_mask, head_mask_mod
from spanviz.local_global.flex import FLEX_MIN_D_HEAD, compiled_flex, flex_attention, flex_available
from spanviz.model import GPTConfig, TinyGPT, explicit_attention, fused_attention
from spanviz.validators import check_choice, check_float, check_int

PAPER_SHAPE = dict(T=PAPER["context_length"], n_head=PAPER["n_head"], d_head=PAPER["d_head"],
                   n_local=PAPER["n_local"], window=PAPER["window"])  # fmt: skip
BLOCK = 128  # FlexAttention's default tile edge
MIN_RUN_TIME = 0.05
"""Seconds of timed calls per case and round (``Timer.blocked_autorange``'s ``min_run_time``)."""
CAVEAT = (
    "Timings are medians of torch.utils.benchmark blocks, the cases interleaved round by round, on a possibly "
    "shared machine; compare ratios within this run only. Dense-mask backends (sdpa, explicit) skip no work, so "
    "they cannot be faster than dense causal attention; only the block-sparse FlexAttention path (CUDA) can."
)


def _milliseconds(seconds: dict[str, float]) -> dict[str, float]:
    return {name: 1e3 * s for name, s in seconds.items()}


def mask_shares(T: int, n_head: int, n_local: int, window: int, block: int = BLOCK) -> dict[str, float]:
    """Work of the LS mask relative to the causal mask: allowed pairs and non-empty block×block tiles.

    Returns:
        ``{"pairs": allowed LS pairs / causal pairs, "blocks": non-empty LS tiles / non-empty causal tiles}``,
        both in (0, 1]; 1 / ``blocks`` bounds the speed-up of a block-sparse kernel.
    Raises:
        ValueError: as :func:`spanviz.local_global.head_mask_mod` / :func:`~spanviz.local_global.dense_mask`.
    """
    ls = dense_mask(head_mask_mod(n_local, window), n_head, T)
    causal = dense_mask(head_mask_mod(0), n_head, T)
    nb = math.ceil(T / block)
    pad = nb * block - T

    def tiles(mask: torch.Tensor) -> int:
        padded = F.pad(mask, (0, pad, 0, pad))  # (H, nb·block, nb·block), False in the padding
        return int(padded.view(n_head, nb, block, nb, block).any(dim=(2, 4)).sum())

    return {"pairs": float(ls.sum() / causal.sum()), "blocks": tiles(ls) / tiles(causal)}


def bench_ls(
    device: str = "auto",
    quick: bool = False,
    *,
    T: int = PAPER_SHAPE["T"],
    n_head: int = PAPER_SHAPE["n_head"],
    d_head: int = PAPER_SHAPE["d_head"],
    n_local: int = PAPER_SHAPE["n_local"],
    window: int = PAPER_SHAPE["window"],
    batch: int | None = None,
    repeats: int | None = None,
    warmup: int = 2,
    dtype: str = "auto",
    seed: int = 0,
    min_run_time: float = MIN_RUN_TIME,
    curve: bool | None = None,
) -> dict[str, Any]:
    """Forward and forward+backward time of LS-attention backends over dense causal SDPA, in one run.

    Args:
        device: "auto" (cuda if available, else cpu), "cpu", "cuda", "cuda:<i>".
        quick: fewer repeats (3 instead of 10) — for smoke runs.
        T: context length; n_head, d_head: heads and head width; n_local, window: LS split and window p
            (defaults: the paper's 6 × 32, 5 local + 1 global, p = 50, T = 2048). batch: B (default: 16 on
            CUDA — at batch 1 a GPU times kernel launches, not attention — and 1 on the CPU, so a run takes
            seconds).
        repeats: interleaved timing rounds per case and pass (>= 1; default 10, or 3 with ``quick``), each one
            ``Timer.blocked_autorange`` of ``min_run_time`` seconds (> 0)
            (:func:`spanviz.bench.core.interleaved_medians`). warmup: discarded rounds first (>= 1 on CUDA: the
            first flex call compiles).
        dtype: "auto" (bfloat16 on CUDA, float32 on CPU), "float32" or "bfloat16".
        seed: for q, k, v.
        curve: also measure :func:`bench_ls_curve` (CUDA; T 2048-8192 × d_head 32, 64); None = unless ``quick``.
    Returns:
        dict with ``config``, ``device``, ``dtype``, ``threads``, ``cases`` (names), ``ms``
        {case: {"forward": median ms per call, "forward_backward": median ms per call}}, ``ratio_vs_dense``
        {case: {"forward": t_case / t_dense_causal_sdpa, "forward_backward": ...}} (< 1 = faster),
        on CUDA ``flex_ratio_same_kernel`` (ls_flex over dense_causal_flex), ``wrapper_ms`` (the library call's
        cost over the same compiled kernel called directly, dense causal), ``model`` (:func:`bench_ls_model`) and
        ``curve``; ``mask_shares`` (see :func:`mask_shares`) and ``caveat``.
    Raises:
        ValueError: bad sizes, an unknown dtype, or device "cuda" without CUDA.
    Source: arXiv 2505.15548's latency comparison, measured at the attention-op level by spanviz.
    """
    for name, value, low in (("T", T, 1), ("n_head", n_head, 1), ("d_head", d_head, 1), ("window", window, 1),
                             ("warmup", warmup, 0), ("seed", seed, 0)):  # fmt: skip
        check_int(name, value, low)
    if batch is not None:
        check_int("batch", batch, 1)
    check_head_split(n_head, n_local, window)
    repeats = (3 if quick else 10) if repeats is None else check_int("repeats", repeats, 1)
    curve = not quick if curve is None else curve
    check_float("min_run_time", min_run_time, 0.0, low_open=True)
    check_choice("dtype", dtype, ("auto", "float32", "bfloat16"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available here; use device='cpu' or 'auto'")
    on_cuda = dev.type == "cuda"
    batch = (16 if on_cuda else 1) if batch is None else batch
    if dtype == "auto":
        dtype = "bfloat16" if on_cuda else "float32"
    torch_dtype = getattr(torch, dtype)

    ls_mod = head_mask_mod(n_local, window)
    causal_mod = head_mask_mod(0)
    cases: dict[str, Callable[..., torch.Tensor]] = {
        "dense_causal_sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "ls_sdpa": lambda q, k, v: fused_attention(q, k, v, ls_mod, backend="sdpa"),
        "ls_explicit": lambda q, k, v: explicit_attention(q, k, v, ls_mod),
    }
    if on_cuda and flex_available() and d_head >= FLEX_MIN_D_HEAD:
        cases["ls_flex"] = lambda q, k, v: flex_attention(q, k, v, ls_mod)
        cases["dense_causal_flex"] = lambda q, k, v: flex_attention(q, k, v, causal_mod)
        # The compiled kernel called directly (no wrapper): dense causal (the wrapper's cost is the difference to
        # dense_causal_flex, the same kernel), and the whole LS mask (the wrapper's cost over ls_flex), with
        # 128×128 and with 64×64 tiles.
        direct_causal = _flex_with_tiles(causal_mod, n_head, T, dev, 128)
        cases["dense_causal_flex_direct"] = lambda q, k, v: direct_causal(q, k, v)
        direct128 = _flex_with_tiles(ls_mod, n_head, T, dev, 128)
        cases["ls_flex_direct"] = lambda q, k, v: direct128(q, k, v)
        if T >= 128:  # FlexAttention (torch 2.11) fails to compile 64×64 tiles for 64 < T < 128
            direct64 = _flex_with_tiles(ls_mod, n_head, T, dev, 64)
            cases["ls_flex_direct_tiles64"] = lambda q, k, v: direct64(q, k, v)

    g = torch.Generator().manual_seed(seed)
    shape = (batch, n_head, T, d_head)
    q, k, v, grad_out = (torch.randn(shape, generator=g).to(dev, torch_dtype) for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))

    def forward(fn: Callable[..., torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad():
                fn(q, k, v)

        return run

    def forward_backward(fn: Callable[..., torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            for t in (q, k, v):
                t.grad = None
            fn(q, k, v).backward(grad_out)

        return run

    passes = ("forward", "forward_backward")
    closures = {}
    for name, fn in cases.items():
        closures[f"{name}/forward"], closures[f"{name}/forward_backward"] = forward(fn), forward_backward(fn)
    med = _milliseconds(interleaved_medians(closures, repeats, warmup=max(warmup, 1 if on_cuda else 0),
                                           min_run_time=min_run_time))
    ms = {name: {p: med[f"{name}/{p}"] for p in passes} for name in cases}
    ratio = {name: {p: ms[name][p] / ms["dense_causal_sdpa"][p] for p in passes} for name in cases}
    out: dict[str, Any] = {
        "config": dict(T=T, n_head=n_head, d_head=d_head, n_local=n_local, window=window, batch=batch,
                       repeats=repeats, warmup=warmup, min_run_time=min_run_time),  # fmt: skip
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if on_cuda else "cpu",
        "dtype": dtype,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cases": list(cases),
        "ms": ms,
        "ratio_vs_dense": ratio,
        "mask_shares": mask_shares(T, n_head, n_local, window),
        "caveat": CAVEAT,
    }
    if "ls_flex" in cases:
        out["flex_ratio_same_kernel"] = {p: ms["ls_flex"][p] / ms["dense_causal_flex"][p] for p in passes}
        out["mask_shares_block64"] = mask_shares(T, n_head, n_local, window, block=64)
        out["wrapper_ms"] = {p: ms["dense_causal_flex"][p] - ms["dense_causal_flex_direct"][p] for p in passes}
        out["model"] = bench_ls_model(dev, repeats=repeats, n_head=n_head, d_head=d_head, n_local=n_local,
                                      window=window, T=T, seed=seed, min_run_time=min_run_time)
        if curve:
            out["curve"] = bench_ls_curve(dev, n_head=n_head, n_local=n_local, window=window, seed=seed,
                                          repeats=max(3, repeats // 2), min_run_time=min_run_time)
    return out


CURVE_T = (2048, 4096, 8192)
CURVE_D_HEAD = (32, 64)
CURVE_TOKENS = 16 * 2048
"""Batch × T of every point of :func:`bench_ls_curve` (the paper shape's batch 16 at T 2048)."""


def bench_ls_curve(
    device: torch.device | str = "cuda", *, Ts: tuple[int, ...] = CURVE_T, d_heads: tuple[int, ...] = CURVE_D_HEAD,
    n_head: int = PAPER_SHAPE["n_head"], n_local: int = PAPER_SHAPE["n_local"], window: int = PAPER_SHAPE["window"],
    repeats: int = 5, seed: int = 0, min_run_time: float = MIN_RUN_TIME,
) -> dict[str, Any]:
    """LS (``local_global.flex_attention``, the model's path) over dense causal SDPA, bf16, over T and d_head.

    Each point keeps batch × T = :data:`CURVE_TOKENS`, so the dense cost grows like T and the band's like p.

    Returns:
        ``{"config", "points": [{"T", "d_head", "batch", "ms": {case: {pass: ms}}, "ratio": {pass: ls/dense},
        "mask_shares"}]}``.
    Raises:
        ValueError: device is not a CUDA device.
    Source: spanviz's measurement of arXiv 2505.15548's latency claim.
    """
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        raise ValueError(f"device must be a CUDA device for the LS curve, got {str(device)!r}")
    ls_mod = head_mask_mod(n_local, window)
    points = []
    for d_head in d_heads:
        for T in Ts:
            batch = max(1, CURVE_TOKENS // T)
            g = torch.Generator().manual_seed(seed)
            shape = (batch, n_head, T, d_head)
            q, k, v, grad_out = (torch.randn(shape, generator=g).to(dev, torch.bfloat16) for _ in range(4))
            q, k, v = (t.requires_grad_() for t in (q, k, v))
            cases = {"dense_causal_sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                     "ls_flex": lambda q, k, v: flex_attention(q, k, v, ls_mod)}
            closures = {}
            for name, fn in cases.items():
                def fwd(fn=fn) -> None:
                    with torch.no_grad():
                        fn(q, k, v)

                def fwd_bwd(fn=fn) -> None:
                    for t in (q, k, v):
                        t.grad = None
                    fn(q, k, v).backward(grad_out)

                closures[f"{name}/forward"], closures[f"{name}/forward_backward"] = fwd, fwd_bwd
            med = _milliseconds(interleaved_medians(closures, repeats, warmup=2, min_run_time=min_run_time))
            ms = {name: {p: med[f"{name}/{p}"] for p in ("forward", "forward_backward")} for name in cases}
            points.append({"T": T, "d_head": d_head, "batch": batch, "ms": ms,
                           "ratio": {p: ms["ls_flex"][p] / ms["dense_causal_sdpa"][p] for p in ms["ls_flex"]},
                           "mask_shares": mask_shares(T, n_head, n_local, window)})
    return {"config": {"n_head": n_head, "n_local": n_local, "window": window, "tokens_per_batch": CURVE_TOKENS,
                       "dtype": "bfloat16", "repeats": repeats}, "points": points}


def _flex_with_tiles(mask_mod: MaskMod, n_head: int, T: int, device: torch.device,
                     block: int) -> Callable[..., torch.Tensor]:
    """Compiled FlexAttention over a ``block``×``block`` block mask of ``mask_mod`` (CUDA; benchmark only)."""
    mask = create_block_mask(mask_mod, None, n_head, T, T, device=device, BLOCK_SIZE=block)
    flex = compiled_flex()
    return lambda q, k, v: flex(q, k, v, block_mask=mask)


MODEL_SHAPE = dict(n_layer=PAPER["n_layer"], d_model=PAPER["d_model"], vocab_size=8192)
"""The paper's model around the attention shape (6 layers, d_model 192 = 6 heads × 32); vocabulary spanviz's."""


def bench_ls_model(
    device: torch.device | str = "cuda", *, repeats: int = 10, batch: int = 8, T: int = PAPER_SHAPE["T"],
    n_head: int = PAPER_SHAPE["n_head"], d_head: int = PAPER_SHAPE["d_head"], n_local: int = PAPER_SHAPE["n_local"],
    window: int = PAPER_SHAPE["window"], seed: int = 0, min_run_time: float = MIN_RUN_TIME,
) -> dict[str, Any]:
    """Whole-model latency: TinyGPT with LS heads on FlexAttention over MHSA on causal SDPA (flash), CUDA, bf16.

    Two models of the paper's shape (6 layers, d_model = n_head·d_head, T 2048; batch ``batch``), identical
    but for the masks: ``mhsa`` (every head global; fused causal SDPA, FlashAttention on CUDA) and ``ls``
    (``n_local`` local heads with window p, the rest global; FlexAttention with the cached block mask, the
    ``"auto"`` backend). Timed under bf16 autocast with :func:`spanviz.bench.core.interleaved_medians`
    (``repeats`` rounds, 2 warm-up rounds): ``forward`` (no grad — the paper's inference latency) and
    ``train_step`` (forward, backward, AdamW).

    Returns:
        ``{"config", "ms": {model: {"forward", "train_step"}}, "ratio_ls_over_mhsa": {"forward", "train_step"}}``.
    Raises:
        ValueError: device is not a CUDA device (FlexAttention has no CPU backward).
    Source: arXiv 2505.15548's latency claim (-36 % inference per its abstract; -44 % per the revised abstract as
    quoted in public reviews), measured by spanviz.
    """
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        raise ValueError(f"device must be a CUDA device for the model-level LS benchmark, got {str(device)!r}")
    base = GPTConfig(**{**MODEL_SHAPE, "d_model": n_head * d_head}, n_head=n_head, context_length=T)
    configs = {"mhsa": base, "ls": replace(base, n_local=n_local, window=window)}
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, base.vocab_size, (batch, T), generator=g).to(dev)
    y = torch.roll(x, -1, dims=1)
    closures: dict[str, Callable[[], None]] = {}
    for name, cfg in configs.items():
        torch.manual_seed(seed)
        model = TinyGPT(cfg).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def forward(model: TinyGPT = model) -> None:
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                model(x)

        def train_step(model: TinyGPT = model, opt: torch.optim.Optimizer = opt) -> None:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                _, loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        closures[f"{name}/forward"], closures[f"{name}/train_step"] = forward, train_step
    med = _milliseconds(interleaved_medians(closures, repeats, warmup=2, min_run_time=min_run_time))
    passes = ("forward", "train_step")
    ms = {name: {p: med[f"{name}/{p}"] for p in passes} for name in configs}
    return {
        "config": {**base.to_dict(), "n_local": n_local, "window": window, "batch": batch, "dtype": "bfloat16",
                   "repeats": repeats},
        "ms": ms,
        "ratio_ls_over_mhsa": {p: ms["ls"][p] / ms["mhsa"][p] for p in passes},
    }
