"""Where the GPU time goes: profiles behind the LS and span-scaling figures of ``docs/gpu.md`` (CUDA only).

Four parts, each printed as text and written to one JSON file (``--out``):

1. ``wrapper`` — the library's FlexAttention call against the same compiled kernel called directly (dense causal
   mask, the paper's shape, bf16): host microseconds per call (launch rate: calls issued back to back, no
   synchronisation), GPU milliseconds per call (CUDA events over the same calls), and ``torch.profiler``'s
   CPU-side operator table of each call. ``old_wrapper`` replays the library's call as it was at commit d68f751
   (an autocast context, three casts, the checked block-mask look-up around the same kernel), so the
   difference it made can be named.
2. ``model`` — one bf16 train step of the paper's LS model and of its MHSA twin (6 layers, d_model 192, T 2048,
   batch 8): device time per kernel family (attention kernels, matrix products, the rest) and the step's
   wall time, so the ceiling of the whole-model ratio can be read off: LS can save at most the attention share.
3. ``spans`` — one fp32 train step at T 1024, d_head 64 (the ``long`` config of ``spanviz bench``'s spans
   section) for standard (fused), kv8 [1000] and qk4 [1000]: the top operators by device time.

4. ``curve`` — P4 (LS / dense causal, forward+backward) over T 2048-8192 and d_head 32, 64, through the model's
   path and with every head on one FlexAttention call; written point by point.

Run on a GPU machine: ``python scripts/gpu_profile.py --out gpu_profile.json``. Source: spanviz.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from spanviz import local_global
from spanviz.bench.ls import MODEL_SHAPE, PAPER_SHAPE, mask_shares
from spanviz.bench.spans import LONG_BATCH, LONG_CONFIG
from spanviz.local_global.flex import check_qkv, compiled_flex
from spanviz.model import GPTConfig, TinyGPT
from spanviz.spans import SpanConfig


def _device_time_attr(event) -> float:
    for name in ("device_time_total", "cuda_time_total"):
        if hasattr(event, name):
            return float(getattr(event, name))
    return 0.0


def _self_device_time(event) -> float:
    for name in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(event, name):
            return float(getattr(event, name))
    return 0.0


def launch_and_gpu_time(fn: Callable[[], object], calls: int = 200) -> dict[str, float]:
    """Host µs per call (issued back to back) and GPU ms per call (CUDA events), after 20 warm-up calls."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(calls):
        fn()
    host = time.perf_counter() - t0
    end.record()
    torch.cuda.synchronize()
    return {"host_us_per_call": 1e6 * host / calls, "event_ms_per_call": start.elapsed_time(end) / calls}


def kernel_table(fn: Callable[[], object], calls: int = 20, rows: int = 25) -> tuple[list[dict], str]:
    """``torch.profiler`` over ``calls`` calls: per-operator CPU and device time per call, and the text table."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    averages = prof.key_averages()
    entries = sorted(
        ({"name": e.key, "count_per_call": e.count / calls, "cpu_us_per_call": e.cpu_time_total / calls,
          "self_cpu_us_per_call": e.self_cpu_time_total / calls,
          "device_us_per_call": _device_time_attr(e) / calls, "self_device_us_per_call": _self_device_time(e) / calls}
         for e in averages),
        key=lambda r: -r["self_device_us_per_call"])
    sort = "self_cuda_time_total"
    try:
        table = averages.table(sort_by=sort, row_limit=rows)
    except (AttributeError, KeyError, ValueError):
        table = averages.table(sort_by="self_device_time_total", row_limit=rows)
    return entries[:rows], table


def part_wrapper() -> dict:
    """Library call vs direct call of the same compiled FlexAttention kernel (dense causal), and the old wrapper."""
    shape = dict(PAPER_SHAPE)
    B, H, T, d = 16, shape["n_head"], shape["T"], shape["d_head"]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, T, d, generator=g).to("cuda", torch.bfloat16) for _ in range(3))
    causal = local_global.head_mask_mod(0)
    ls_mod = local_global.head_mask_mod(shape["n_local"], shape["window"])
    compiled = compiled_flex()
    mask = local_global.block_mask(causal, H, T, q.device)
    ls_mask = local_global.block_mask(ls_mod, H, T, q.device)

    def old_wrapper(mask_mod=causal) -> torch.Tensor:  # the library's call as it was (commit d68f751)
        check_qkv(q, k, v)
        dtype = (torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda")
                 else torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype))
        with torch.autocast("cuda", enabled=False):
            return compiled(q.to(dtype), k.to(dtype), v.to(dtype),
                            block_mask=local_global.block_mask(mask_mod, H, T, q.device))

    cases = {
        "direct": lambda: compiled(q, k, v, block_mask=mask),
        "library": lambda: local_global.flex_attention(q, k, v, causal),
        "old_wrapper": old_wrapper,
        "ls_direct_all_heads": lambda: compiled(q, k, v, block_mask=ls_mask),
        "ls_library": lambda: local_global.flex_attention(q, k, v, ls_mod),
        "dense_causal_sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }
    out: dict = {"shape": {"B": B, "H": H, "T": T, "d_head": d, "dtype": "bfloat16"}, "cases": {}}
    with torch.no_grad():
        for name, fn in cases.items():
            timing = launch_and_gpu_time(fn)
            entries, table = kernel_table(fn)
            out["cases"][name] = {**timing, "top_ops": entries}
            print(f"\n=== wrapper/{name}: host {timing['host_us_per_call']:.1f} us/call, "
                  f"GPU {timing['event_ms_per_call']:.3f} ms/call\n{table}", flush=True)
    return out


def _kernel_family(name: str) -> str:
    low = name.lower()
    if any(s in low for s in ("flash", "flex", "attention", "fmha", "sdpa")):
        return "attention"
    if any(s in low for s in ("gemm", "matmul", "cutlass", "sm90", "cublas", "mm_", "addmm")):
        return "matmul"
    return "other"


def part_model(batch: int = 8) -> dict:
    """Device time per kernel family of one bf16 train step, LS vs MHSA, the paper's model shape."""
    from dataclasses import replace

    shape = dict(PAPER_SHAPE)
    base = GPTConfig(**{**MODEL_SHAPE, "d_model": shape["n_head"] * shape["d_head"]}, n_head=shape["n_head"],
                     context_length=shape["T"])
    configs = {"mhsa": base, "ls": replace(base, n_local=shape["n_local"], window=shape["window"])}
    x = torch.randint(0, base.vocab_size, (batch, shape["T"]), device="cuda")
    y = torch.roll(x, -1, dims=1)
    out: dict = {"config": {**base.to_dict(), "batch": batch}, "models": {}}
    for name, cfg in configs.items():
        torch.manual_seed(0)
        model = TinyGPT(cfg).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step() -> None:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                _, loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        timing = launch_and_gpu_time(step, calls=20)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        families: dict[str, float] = {}
        kernels = []
        for e in prof.key_averages():
            t = _self_device_time(e) / 5
            if t <= 0:
                continue
            fam = _kernel_family(e.key)
            families[fam] = families.get(fam, 0.0) + t
            kernels.append({"name": e.key[:120], "family": fam, "us_per_step": t})
        kernels.sort(key=lambda r: -r["us_per_step"])
        total = sum(families.values())
        out["models"][name] = {**timing, "device_us_per_step": total, "families_us": families,
                               "attention_share": families.get("attention", 0.0) / total if total else None,
                               "top_kernels": kernels[:20]}
        print(f"\n=== model/{name}: step {timing['event_ms_per_call']:.2f} ms (host {timing['host_us_per_call']:.0f} "
              f"us issued), device {total / 1e3:.2f} ms: " + ", ".join(f"{k} {v / 1e3:.2f} ms" for k, v in
                                                                    sorted(families.items())), flush=True)
        for r in kernels[:12]:
            print(f"  {r['us_per_step']:9.1f} us  {r['family']:9s} {r['name']}")
    m, ls = out["models"]["mhsa"], out["models"]["ls"]
    share = m["attention_share"] or 0.0
    out["ratio_ls_over_mhsa"] = ls["event_ms_per_call"] / m["event_ms_per_call"]
    out["ratio_floor_if_ls_attention_were_free"] = 1.0 - share
    print(f"\nLS/MHSA step {out['ratio_ls_over_mhsa']:.3f}; MHSA's attention share {share:.3f}: even free LS attention "
          f"leaves a ratio of {1 - share:.3f}", flush=True)
    return out


def part_spans() -> dict:
    """Top operators by device time of one fp32 train step: standard (fused), kv8 [1000], qk4 [1000]."""
    base = dict(LONG_CONFIG)
    x = torch.randint(0, base["vocab_size"], (LONG_BATCH, base["context_length"]), device="cuda")
    y = torch.roll(x, -1, dims=1)
    variants = {"standard_fused": GPTConfig(**base),
                "kv8_1000": GPTConfig(**base, spans=SpanConfig(alphas="1000", preset="kv8")),
                "qk4_1000": GPTConfig(**base, spans=SpanConfig(alphas="1000", preset="qk4"))}
    out: dict = {"config": {**base, "batch": LONG_BATCH, "dtype": "float32"}, "variants": {}}
    for name, cfg in variants.items():
        torch.manual_seed(0)
        model = TinyGPT(cfg).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step() -> None:
            _, loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        timing = launch_and_gpu_time(step, calls=10)
        entries, table = kernel_table(step, calls=5, rows=20)
        out["variants"][name] = {**timing, "top_ops": entries}
        print(f"\n=== spans/{name}: step {timing['event_ms_per_call']:.2f} ms (host issue "
              f"{timing['host_us_per_call'] / 1e3:.2f} ms)\n{table}", flush=True)
    std = out["variants"]["standard_fused"]["event_ms_per_call"]
    out["ratios"] = {n: v["event_ms_per_call"] / std for n, v in out["variants"].items()}
    print("\nspans ratios over standard:", json.dumps(out["ratios"]), flush=True)
    return out


def events_ms(fns: dict[str, Callable[[], object]], calls: int = 20, rounds: int = 3) -> dict[str, float]:
    """Median GPU ms per call of each function: ``rounds`` interleaved rounds (order reversed every other round)
    of ``calls`` back-to-back calls timed by CUDA events, after 3 warm-up calls each (the first compiles)."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(rounds):
        for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fns[name]()
            end.record()
            torch.cuda.synchronize()
            times[name].append(start.elapsed_time(end) / calls)
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def part_curve(out_file: Path | None = None, result: dict | None = None) -> dict:
    """P4 over T (2048, 4096, 8192) and d_head (32, 64), forward+backward, bf16, batch × T = 32768 tokens:
    LS through the model's path (``local_global.flex_attention``) and LS with every head on one FlexAttention
    call over the whole LS mask (the compiled kernel called directly, no wrapper), over dense causal SDPA.
    The JSON is rewritten after each point, so a time limit keeps the points measured."""
    n_head, n_local, window = PAPER_SHAPE["n_head"], PAPER_SHAPE["n_local"], PAPER_SHAPE["window"]
    ls_mod = local_global.head_mask_mod(n_local, window)
    compiled = compiled_flex()
    out: dict = {"config": {"n_head": n_head, "n_local": n_local, "window": window, "tokens_per_batch": 32768,
                            "dtype": "bfloat16", "pass": "forward_backward", "timing": "CUDA events, median of 3 "
                            "interleaved rounds of 20 calls"}, "points": []}
    for d_head in (32, 64):
        for T in (2048, 4096, 8192):
            B = 32768 // T
            g = torch.Generator().manual_seed(0)
            q, k, v, grad = (torch.randn(B, n_head, T, d_head, generator=g).to("cuda", torch.bfloat16)
                             for _ in range(4))
            q, k, v = (t.requires_grad_() for t in (q, k, v))
            ls_mask = local_global.block_mask(ls_mod, n_head, T, q.device)
            attn = {"dense_causal_sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                    "ls_model_path": lambda: local_global.flex_attention(q, k, v, ls_mod),
                    "ls_all_heads_one_flex": lambda: compiled(q, k, v, block_mask=ls_mask)}

            def fwd_bwd(fn):
                def run() -> None:
                    for t in (q, k, v):
                        t.grad = None
                    fn().backward(grad)
                return run

            ms = events_ms({name: fwd_bwd(fn) for name, fn in attn.items()})
            point = {"T": T, "d_head": d_head, "batch": B, "ms": ms,
                     "ratio_vs_dense": {n: ms[n] / ms["dense_causal_sdpa"] for n in ms},
                     "mask_shares": mask_shares(T, n_head, n_local, window)}
            out["points"].append(point)
            print(f"curve T {T} d_head {d_head}: " + ", ".join(f"{n} {m:.3f} ms ({m / ms['dense_causal_sdpa']:.2f})"
                                                            for n, m in ms.items()), flush=True)
            if out_file is not None and result is not None:
                result["curve"] = out
                with contextlib.suppress(OSError):
                    out_file.write_text(json.dumps(result, indent=1, default=str))
            del q, k, v, grad
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file for the three parts")
    parser.add_argument("--parts", nargs="*", default=["wrapper", "model", "spans", "curve"],
                        choices=["wrapper", "model", "spans", "curve"])
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    result: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    parts = {"wrapper": part_wrapper, "model": part_model, "spans": part_spans,
             "curve": lambda: part_curve(args.out, result)}
    for name in args.parts:
        try:
            result[name] = parts[name]()
        except Exception as exc:  # keep the other parts' figures
            result[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"part {name} failed: {exc!r}", flush=True)
        with contextlib.suppress(OSError):
            args.out.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
