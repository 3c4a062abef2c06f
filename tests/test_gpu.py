"""CUDA-only checks: the GPU half of spanviz (FlexAttention, bf16 autocast, notebook defaults on a GPU).

Skipped cleanly without CUDA (CI has no GPU). Run on a GPU machine with ``python -m pytest -m gpu``.
The FlexAttention agreement test in ``test_local_global.py`` and the FP8 device test in ``test_fp8.py`` are
GPU tests too; this module adds what they do not cover:

* the block-mask cache across shapes (several T and H in one process, eviction included);
* every technique under bf16 autocast: the span transforms compute in fp32 from detached tensors, and the
  logit and FP8 probes measure in fp32 while training runs in bf16;
* each notebook's default configuration trains on CUDA: finite losses, validation loss going down.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from attention_backends import sdpa_attention

from spanviz import fp8, spans
from spanviz import local_global as lg
from spanviz.bench.notebooks import notebook_runs
from spanviz.local_global import core as lg_core
from spanviz.model import GPTConfig, TinyGPT
from spanviz.spans import SpanConfig
from spanviz.train import TrainConfig, Trainer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _qkv(B: int, H: int, T: int, d_head: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, d_head, generator=g).cuda() for _ in range(3)]


# ======================================================================================= FlexAttention
def test_block_mask_cache_serves_every_shape_and_evicts_the_oldest():
    mask_mod = lg.head_mask_mod(5, 50)
    shapes = [(6, 300), (6, 1024), (6, 300), (2, 300), (6, 2048)]  # (H, T): repeats, partial blocks, new H
    for H, T in shapes:
        q, k, v = _qkv(1, H, T, 32, seed=T + H)
        with torch.no_grad():
            torch.testing.assert_close(lg.flex_attention(q, k, v, mask_mod), sdpa_attention(q, k, v, mask_mod),
                                       rtol=1e-4, atol=1e-4, msg=lambda m, s=(H, T): f"(H, T)={s}: {m}")
    cached = lg_core._BLOCK_CACHE[mask_mod]
    assert {(h, t) for h, t, _ in cached} == {(6, 300), (6, 1024), (2, 300), (6, 2048)}
    assert lg.block_mask(mask_mod, 6, 300, "cuda:0") is lg.block_mask(mask_mod, 6, 300, "cuda:0")  # reused
    # More shapes than the cache holds: the oldest entries go, answers stay right.
    for T in range(129, 129 + lg_core._CACHE_PER_MOD + 2):
        q, k, v = _qkv(1, 6, T, 16, seed=T)
        with torch.no_grad():
            torch.testing.assert_close(lg.flex_attention(q, k, v, mask_mod), sdpa_attention(q, k, v, mask_mod),
                                       rtol=1e-4, atol=1e-4)
    assert len(lg_core._BLOCK_CACHE[mask_mod]) == lg_core._CACHE_PER_MOD
    assert (6, 300, "cuda:0") not in lg_core._BLOCK_CACHE[mask_mod]


def test_flex_stays_compiled_across_many_shapes_and_modes():
    # Past dynamo's recompile limit torch would quietly run the unfused reference path (6× slower steps).
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    loggers = [logging.getLogger(name) for name in ("torch._dynamo", "torch._dynamo.convert_frame")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        mask_mod = lg.head_mask_mod(3, 16)
        for T in range(64, 64 + 10 * 8, 8):  # 10 context lengths: one compile each, more than dynamo's default 8
            q, k, v = _qkv(1, 4, T, 16, seed=T)
            with torch.no_grad():
                lg.flex_attention(q, k, v, mask_mod)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    assert not [r for r in records if "recompile_limit" in r.getMessage() or "cache_size_limit" in r.getMessage()]


@pytest.mark.parametrize("qk_norm", [False, True])
def test_ls_model_flex_and_sdpa_agree_in_a_bf16_training_step(qk_norm):
    # QK-norm hands FlexAttention fp32 q, k beside a bf16 v under autocast: flex must still run, in bf16.
    cfg = GPTConfig(vocab_size=101, context_length=256, n_layer=2, n_head=6, d_model=192, n_local=5, window=50,
                    qk_norm=qk_norm)
    torch.manual_seed(0)
    flex = TinyGPT(replace(cfg, attn_backend="flex")).cuda()
    sdpa = TinyGPT(replace(cfg, attn_backend="sdpa")).cuda()
    sdpa.load_state_dict(flex.state_dict())
    idx = torch.randint(0, 101, (4, 256), device="cuda")
    losses = []
    for model in (flex, sdpa):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = model(idx, torch.roll(idx, -1, dims=1))
        loss.backward()
        losses.append(loss.item())
    assert math.isfinite(losses[0]) and abs(losses[0] - losses[1]) < 1e-2 * abs(losses[1])
    for (name, pf), ps in zip(flex.named_parameters(), sdpa.parameters()):
        torch.testing.assert_close(pf.grad, ps.grad, rtol=5e-2, atol=5e-3, msg=lambda m, n=name: f"{n}: {m}")


# ================================================================================ spans under autocast
def _spy_projector_dtypes(monkeypatch) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    original = spans.core.SpanProjector.__init__

    def init(self, X, *args, **kwargs):
        original(self, X, *args, **kwargs)
        seen.append(self.X.dtype)

    monkeypatch.setattr(spans.core.SpanProjector, "__init__", init)
    return seen


def _bf16_backward(model: TinyGPT, idx: torch.Tensor) -> None:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        _, loss = model(idx, torch.roll(idx, -1, dims=1))
    assert math.isfinite(loss.item())
    loss.backward()


def test_kv8_transform_under_bf16_autocast_computes_in_fp32_from_detached_inputs(monkeypatch):
    cfg = GPTConfig(vocab_size=97, context_length=128, n_layer=2, n_head=2, d_model=64,
                    spans=SpanConfig(alphas="1000", preset="kv8"))
    torch.manual_seed(0)
    model = TinyGPT(cfg).cuda()
    captured = []
    for block in model.blocks:
        fn = block.attn.score_grad_fn

        def spy(dS, q, k, v, fn=fn):
            out = fn(dS, q, k, v)
            captured.append((dS, q, k, v, out))
            return out

        block.attn.score_grad_fn = spy
    projector_dtypes = _spy_projector_dtypes(monkeypatch)
    _bf16_backward(model, torch.randint(0, 97, (4, 128), device="cuda"))

    assert len(captured) == cfg.n_layer
    assert projector_dtypes and set(projector_dtypes) == {torch.float32}
    for dS, q, k, v, out in captured:
        assert dS.dtype == torch.bfloat16 and out.dtype == torch.bfloat16  # bf16 in and out ...
        assert not (q.requires_grad or k.requires_grad or v.requires_grad)  # ... from detached q, k, v
        with torch.autocast("cuda", enabled=False):  # ... and in between exactly the fp32 transform
            reference = spans.scale_score_grad(dS.float(), q.float(), k.float(), v.float(), cfg.spans)
        torch.testing.assert_close(out, reference.to(torch.bfloat16), rtol=0, atol=0)
        assert reference.abs().max() > 0


@pytest.mark.parametrize("preset", ["kv8", "qkv8", "qk4"])
def test_fast_path_trains_under_bf16_without_host_syncs_and_matches_the_definition(preset):
    """The kv8/qkv8 fused backward (fused forward, transform in the backward) and the chunked loss: no host
    synchronisation in forward + backward (CUDA's sync debug mode raises on one), and gradients close to the
    definition (the explicit path) at bf16 tolerance."""
    base = GPTConfig(vocab_size=97, context_length=256, n_layer=2, n_head=2, d_model=128,
                     spans=SpanConfig(alphas="1000", preset=preset))
    torch.manual_seed(0)
    fast = TinyGPT(base).cuda()
    definition = TinyGPT(replace(base, attn_backend="explicit")).cuda()
    definition.load_state_dict(fast.state_dict())
    idx = torch.randint(0, 97, (4, 256), device="cuda")
    assert not fast.blocks[0].attn.needs_explicit(True)
    _bf16_backward(definition, idx)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        _, loss = fast(idx, torch.roll(idx, -1, dims=1), return_logits=False)  # warm-up: caches, lazy inits
    loss.backward()
    fast.zero_grad(set_to_none=True)
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = fast(idx, torch.roll(idx, -1, dims=1), return_logits=False)
        loss.backward()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    for (name, pf), pd in zip(fast.named_parameters(), definition.parameters()):
        rel = float((pf.grad - pd.grad).norm() / pd.grad.norm().clamp_min(1e-12))
        assert rel < 0.05, (name, rel)


def test_qk4_hooks_under_bf16_autocast_compute_in_fp32(monkeypatch):
    cfg = GPTConfig(vocab_size=97, context_length=128, n_layer=2, n_head=2, d_model=64,
                    spans=SpanConfig(alphas="1000", preset="qk4"))
    torch.manual_seed(0)
    model = TinyGPT(cfg).cuda()
    from spanviz.spans import fused

    projector_dtypes: list[torch.dtype] = []
    original = fused._projector

    def spy(X, ridge):
        projector_dtypes.append(X.dtype)
        return original(X, ridge)

    monkeypatch.setattr(fused, "_projector", spy)
    _bf16_backward(model, torch.randint(0, 97, (4, 128), device="cuda"))
    assert len(projector_dtypes) == 2 * cfg.n_layer and set(projector_dtypes) == {torch.float32}
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_kv8_1111_under_bf16_autocast_leaves_gradients_untouched():
    base = GPTConfig(vocab_size=97, context_length=128, n_layer=2, n_head=2, d_model=64, attn_backend="explicit")
    torch.manual_seed(0)
    plain = TinyGPT(base).cuda()
    hooked = TinyGPT(replace(base, spans=SpanConfig(alphas="1111", preset="kv8"))).cuda()
    hooked.load_state_dict(plain.state_dict())
    idx = torch.randint(0, 97, (4, 128), device="cuda")
    for model in (plain, hooked):
        _bf16_backward(model, idx)
    for pp, ph in zip(plain.parameters(), hooked.parameters()):
        torch.testing.assert_close(pp.grad, ph.grad, rtol=0, atol=0)


# ================================================================================ probes in bf16 runs
def test_logit_and_fp8_probes_measure_in_fp32_while_training_in_bf16(synthetic):
    model_cfg = GPTConfig(vocab_size=64, context_length=64, n_layer=2, n_head=4, d_model=64)
    train_cfg = TrainConfig(steps=6, batch_size=4, warmup_steps=1, eval_interval=3, eval_iters=1,
                            device="cuda", dtype="bfloat16")
    probes = [lg.LogitProbe(every=3), fp8.FP8Probe(every=3)]
    trainer = Trainer(model_cfg, train_cfg, synthetic, probes=probes)
    record = trainer.run()
    assert record.status == "finished"
    last = {key: values[-1] for key, values in record.history.items()}
    # The probes' last rows were measured on the final weights: redo them in fp32 on the CPU.
    cpu = SimpleNamespace(model=trainer.model.float().cpu().eval(),
                          probe_batch=tuple(t.cpu() if t is not None else None for t in trainer.probe_batch))
    expected = {**lg.LogitProbe(every=3)(cpu), **fp8.FP8Probe(every=3)(cpu)}
    torch.testing.assert_close(torch.tensor(last["logits/max_per_head"]),
                               torch.tensor(expected["logits/max_per_head"]), rtol=1e-4, atol=1e-5)
    for key in [k for k in expected if k.endswith(("max_abs_logit", "sigma"))]:
        assert last[key] == pytest.approx(expected[key], rel=1e-4), key


# ============================================================================ notebook defaults on CUDA
def _wikitext_dir() -> Path | None:
    env = os.environ.get("SPANVIZ_WIKITEXT_DIR")
    shared = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wikitext-2"
    for candidate in (env, shared):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


@pytest.fixture(scope="module")
def wikitext_tokens():
    from spanviz.data import OFFLINE_SPLITS, prepare_tokens

    folder = _wikitext_dir()
    if folder is None:
        pytest.skip("WikiText-2 not found: set SPANVIZ_WIKITEXT_DIR")
    return prepare_tokens(folder, splits=OFFLINE_SPLITS, max_vocab=8192)


@pytest.mark.parametrize("name", list(notebook_runs()))
def test_notebook_default_trains_on_cuda(name, wikitext_tokens):
    model_cfg, probes = notebook_runs(wikitext_tokens.vocab_size)[name]
    train_cfg = TrainConfig(steps=60, batch_size=16, lr=3e-3, warmup_steps=12, eval_interval=20, eval_iters=4,
                            device="cuda")
    record = Trainer(model_cfg, train_cfg, wikitext_tokens, probes=probes).run()
    assert record.status == "finished", record.message
    assert record.environment["device"].startswith("cuda")
    losses = record.history["train_loss"]
    assert all(math.isfinite(v) for v in losses)
    val = [v for v in record.history["val_loss"] if v is not None]
    assert len(val) >= 3 and val[-1] < val[0] - 1.0, f"val loss {val}"
