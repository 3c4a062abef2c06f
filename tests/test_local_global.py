"""LS-attention: mask predicates, backends that agree, the logit probe, the toy demos, input validation."""

from __future__ import annotations

import json
import math
import runpy
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from attention_backends import attention, explicit_attention, sdpa_attention
from hypothesis import given, settings
from hypothesis import strategies as st

from spanviz import local_global as lg
from spanviz.local_global import core as lg_core
from spanviz.local_global.demos import band_target
from spanviz.local_global.probe import attention_entropy
from spanviz.model import GPTConfig, TinyGPT

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention backward needs CUDA")


def _brute_allowed(h: int, i: int, j: int, n_local: int, p: int | None) -> bool:
    """The definition, written out: causal, and within the last p keys (incl. self) on local heads."""
    if j > i:
        return False
    return h >= n_local or i - j < p


def _qkv(B=2, H=4, T=37, d=8, seed=0, device="cpu", requires_grad=True):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, d, generator=g).to(device).requires_grad_(requires_grad) for _ in range(3)]


# ================================================================================================ masks
def test_small_example_one_local_head_window_2_and_one_global():
    m = lg.dense_mask(lg.head_mask_mod(n_local=1, window=2), n_head=2, T=4)
    local = [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    causal = [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    assert m.dtype == torch.bool and m.shape == (2, 4, 4)
    assert m[0].int().tolist() == local
    assert m[1].int().tolist() == causal


def test_window_1_sees_only_itself():
    m = lg.dense_mask(lg.head_mask_mod(n_local=3, window=1), n_head=3, T=9)
    assert torch.equal(m, torch.eye(9, dtype=torch.bool).expand(3, 9, 9))


@pytest.mark.parametrize("p", [10, 11, 50])
def test_window_at_least_T_equals_a_global_head(p):
    T = 10
    local = lg.dense_mask(lg.head_mask_mod(n_local=2, window=p), n_head=2, T=T)
    causal = lg.dense_mask(lg.head_mask_mod(n_local=0), n_head=2, T=T)
    assert torch.equal(local, causal)
    # one key short of T is not global any more: the last query loses key 0
    short = lg.dense_mask(lg.head_mask_mod(n_local=1, window=T - 1), n_head=1, T=T)
    assert not short[0, T - 1, 0] and short[0, T - 1, 1]


def test_first_n_local_heads_are_local_the_rest_global():
    T, p = 12, 3
    m = lg.dense_mask(lg.head_mask_mod(n_local=3, window=p), n_head=5, T=T)
    band = lg.dense_mask(lg.head_mask_mod(n_local=1, window=p), n_head=1, T=T)[0]
    tril = torch.ones(T, T, dtype=torch.bool).tril()
    for h in range(3):
        assert torch.equal(m[h], band)
    for h in (3, 4):
        assert torch.equal(m[h], tril)
    assert band.sum(-1).tolist() == [min(i + 1, p) for i in range(T)]  # p keys incl. self, fewer at the start


def test_n_local_zero_is_causal_for_every_head_and_ignores_window():
    assert lg.head_mask_mod(0, 7) is lg.head_mask_mod(0)
    m = lg.dense_mask(lg.head_mask_mod(0, 7), n_head=3, T=6)
    assert torch.equal(m, torch.ones(6, 6, dtype=torch.bool).tril().expand(3, 6, 6))


def test_equal_settings_share_one_predicate_object():
    a, b = lg.head_mask_mod(2, 5), lg.head_mask_mod(n_local=2, window=5)
    assert a is b and (a.n_local, a.window) == (2, 5)
    assert lg.head_mask_mod(2, 6) is not a


@settings(max_examples=40, deadline=None)
@given(
    n_head=st.integers(1, 5), n_local_frac=st.floats(0, 1), p=st.integers(1, 14), T=st.integers(1, 12)
)
def test_dense_mask_matches_the_definition_everywhere(n_head, n_local_frac, p, T):
    n_local = round(n_local_frac * n_head)
    m = lg.dense_mask(lg.head_mask_mod(n_local, p), n_head, T)
    assert m.shape == (n_head, T, T) and m.dtype == torch.bool
    for h in range(n_head):
        for i in range(T):
            for j in range(T):
                assert bool(m[h, i, j]) == _brute_allowed(h, i, j, n_local, p), (h, i, j)


@pytest.mark.parametrize("name", ["causal", "2local-p5", "all-local-p1", "3local-p40"])
def test_dense_mask_holds_create_masks_entries(name):
    """Broadcasting the predicate gives FlexAttention's own ``create_mask``, entry for entry (and its own memory)."""
    from torch.nn.attention.flex_attention import create_mask

    mask_mod = MASKS[name]  # the backends' masks (below)
    m = lg.dense_mask(mask_mod, 4, 33)
    assert torch.equal(m, create_mask(mask_mod, 1, 4, 33, 33)[0]) and m.is_contiguous()
    m[0, 0, 0] = not m[0, 0, 0]  # a fresh tensor: the next one is not changed
    assert torch.equal(lg.dense_mask(mask_mod, 4, 33), create_mask(mask_mod, 1, 4, 33, 33)[0])


def test_dense_mask_refuses_a_predicate_that_is_not_elementwise():
    with pytest.raises(ValueError, match="mask_mod='rows'.*broadcasts"):
        def rows(b, h, q_idx, kv_idx):
            return torch.ones(3, 5, 7, dtype=torch.bool)
        lg.dense_mask(rows, 2, 4)
    with pytest.raises(ValueError, match="mask_mod='count'.*bool tensor"):
        def count(b, h, q_idx, kv_idx):
            return kv_idx - q_idx
        lg.dense_mask(count, 2, 4)


def test_an_explicit_forward_imports_no_dynamo():
    """The explicit attention path's mask needs no torch._dynamo (its import is ~1 s before the tour's first look
    inside the model); the forward is the one of the dense mask."""
    import subprocess
    import sys

    code = ("import sys, torch\nfrom spanviz.model import GPTConfig, TinyGPT\n"
            "cfg = GPTConfig(vocab_size=32, context_length=8, n_layer=1, n_head=2, d_model=8, n_local=1, window=2, "
            "attn_backend='explicit')\n"
            "TinyGPT(cfg)(torch.zeros(1, 8, dtype=torch.long))\nprint('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stdout + out.stderr[-2000:]


# ============================================================================================== backends
MASKS = {
    "causal": lg.head_mask_mod(0),
    "2local-p5": lg.head_mask_mod(2, 5),
    "all-local-p1": lg.head_mask_mod(4, 1),
    "3local-p40": lg.head_mask_mod(3, 40),  # p > T: same as causal
}


@pytest.mark.parametrize("name", list(MASKS))
def test_explicit_and_sdpa_agree_forward_and_backward(name):
    mask_mod = MASKS[name]
    q1, k1, v1 = _qkv()
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q1, k1, v1))
    out_e = attention(q1, k1, v1, mask_mod, backend="explicit")
    out_s = attention(q2, k2, v2, mask_mod, backend="sdpa")
    torch.testing.assert_close(out_e, out_s, rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(out_e)
    out_e.backward(grad)
    out_s.backward(grad)
    for a, b in ((q1, q2), (k1, k2), (v1, v2)):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


def test_a_local_output_depends_exactly_on_the_keys_in_its_window():
    T, p = 20, 4
    q, k, v = _qkv(B=1, H=2, T=T, d=8)
    out = explicit_attention(q, k, v, lg.head_mask_mod(1, p))
    i = 13
    out[0, :, i].sum().backward()
    used_local = (v.grad[0, 0].abs().sum(-1) > 0).nonzero().flatten().tolist()
    used_global = (v.grad[0, 1].abs().sum(-1) > 0).nonzero().flatten().tolist()
    assert used_local == list(range(i - p + 1, i + 1))
    assert used_global == list(range(i + 1))


def test_explicit_attention_returns_pre_mask_scores():
    q, k, v = _qkv(requires_grad=False)
    _, scores = explicit_attention(q, k, v, lg.head_mask_mod(2, 5), return_scores=True)
    torch.testing.assert_close(scores, q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)))
    assert torch.isfinite(scores).all()


def test_flex_forward_on_cpu_matches_sdpa_and_uses_one_cached_block_mask():
    # CPU FlexAttention is the uncompiled reference (forward only), enough to check the block mask.
    mask_mod = lg.head_mask_mod(2, 5)
    q, k, v = _qkv(T=150, requires_grad=False)  # T not a multiple of the 128 block
    with torch.no_grad():
        torch.testing.assert_close(lg.flex_attention(q, k, v, mask_mod), sdpa_attention(q, k, v, mask_mod),
                                   rtol=1e-5, atol=1e-5)
    assert lg.block_mask(mask_mod, 4, 150, "cpu") is lg.block_mask(mask_mod, 4, 150, "cpu")
    assert lg.block_mask(mask_mod, 4, 151, "cpu") is not lg.block_mask(mask_mod, 4, 150, "cpu")


def test_mask_caches_stay_bounded_when_T_changes():
    mask_mod = lg.head_mask_mod(1, 3)
    for T in range(2, 14):
        q, k, v = _qkv(B=1, H=2, T=T, d=4, requires_grad=False)
        sdpa_attention(q, k, v, mask_mod)
    assert len(lg_core._DENSE_CACHE[mask_mod]) == lg_core._CACHE_PER_MOD
    assert (2, 13, "cpu") in lg_core._DENSE_CACHE[mask_mod] and (2, 2, "cpu") not in lg_core._DENSE_CACHE[mask_mod]


def test_flex_on_cpu_refuses_gradients_with_a_clear_error():
    q, k, v = _qkv(T=16)
    with pytest.raises(ValueError, match="forward only"):
        lg.flex_attention(q, k, v, lg.head_mask_mod(2, 5))
    # torch rejects CPU inputs with requires_grad=True even under no_grad: the advice is .detach()
    with torch.no_grad(), pytest.raises(ValueError, match=r"\.detach\(\)"):
        lg.flex_attention(q, k, v, lg.head_mask_mod(2, 5))
    with torch.no_grad():  # the advice works
        out = lg.flex_attention(q.detach(), k.detach(), v.detach(), lg.head_mask_mod(2, 5))
    torch.testing.assert_close(out, sdpa_attention(q, k, v, lg.head_mask_mod(2, 5)).detach(), rtol=1e-5, atol=1e-5)


SMALL_LS = dict(vocab_size=97, context_length=48, n_layer=2, n_head=4, d_model=64, n_local=3, window=4)


def _ls_model(backend: str, **overrides) -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(GPTConfig(**{**SMALL_LS, **overrides, "attn_backend": backend}))


def test_tinygpt_explicit_and_sdpa_backends_agree_with_local_heads():
    explicit, fused = _ls_model("explicit"), _ls_model("sdpa")
    fused.load_state_dict(explicit.state_dict())
    idx = torch.randint(0, 97, (3, 40), generator=torch.Generator().manual_seed(1))
    tgt = torch.roll(idx, -1, dims=1)
    le, loss_e = explicit(idx, tgt)
    lf, loss_f = fused(idx, tgt)
    torch.testing.assert_close(le, lf, rtol=1e-5, atol=1e-5)
    loss_e.backward()
    loss_f.backward()
    for (name, pe), pf in zip(explicit.named_parameters(), fused.parameters()):
        torch.testing.assert_close(pe.grad, pf.grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def test_tinygpt_flex_backend_forward_on_cpu_matches_explicit():
    explicit, flex = _ls_model("explicit"), _ls_model("flex")
    flex.load_state_dict(explicit.state_dict())
    idx = torch.randint(0, 97, (2, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(explicit(idx)[0], flex(idx)[0], rtol=1e-5, atol=1e-5)


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 5e-2)])
def test_flex_agrees_with_sdpa_and_explicit_on_cuda_forward_and_backward(dtype, tol):
    # Reference: the fp32 SDPA path. Each backend runs in `dtype`; bf16 is compared at bf16 accuracy.
    mask_mod = lg.head_mask_mod(5, 50)
    g = torch.Generator().manual_seed(0)
    base = [torch.randn(2, 6, 300, 32, generator=g) for _ in range(3)]  # T = 300: a partial last block

    def run(backend: str, run_dtype: torch.dtype) -> list[torch.Tensor]:
        q, k, v = (t.to("cuda", run_dtype).requires_grad_() for t in base)
        out = attention(q, k, v, mask_mod, backend=backend)
        out.float().square().sum().backward()
        return [out.float()] + [t.grad.float() for t in (q, k, v)]

    reference = run("sdpa", torch.float32)
    for backend in ("flex", "sdpa", "explicit"):
        for name, a, b in zip(("out", "dq", "dk", "dv"), run(backend, dtype), reference):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=lambda m, n=name, bk=backend: f"{bk} {n}: {m}")


@needs_cuda
@pytest.mark.gpu
def test_tinygpt_auto_backend_uses_flex_on_cuda_and_matches_explicit():
    explicit, auto = _ls_model("explicit", d_model=128).cuda(), _ls_model("auto", d_model=128).cuda()
    auto.load_state_dict(explicit.state_dict())
    idx = torch.randint(0, 97, (2, 40), device="cuda")
    le, loss_e = explicit(idx, idx)
    la, loss_a = auto(idx, idx)
    torch.testing.assert_close(le, la, rtol=1e-4, atol=1e-4)
    loss_e.backward()
    loss_a.backward()
    for pe, pa in zip(explicit.parameters(), auto.parameters()):
        torch.testing.assert_close(pe.grad, pa.grad, rtol=1e-3, atol=1e-4)
    cached = lg_core._BLOCK_CACHE.get(auto.blocks[0].attn.mask_mod, {})
    assert any(device.startswith("cuda") for _, _, device in cached), "auto did not use FlexAttention on CUDA"


# ======================================================================================= QK-norm bound
def test_qk_norm_bounds_logits_by_gains_times_sqrt_d_head():
    # RMSNorm gives |q̂| = |k̂| = √d_head, so |q·k|/√d_head <= max|g_q|·max|g_k|·√d_head (Cauchy-Schwarz).
    cfg = dict(vocab_size=97, context_length=32, n_layer=2, n_head=4, d_model=64)
    idx = torch.randint(0, 97, (2, 32), generator=torch.Generator().manual_seed(3))
    d_head = 16
    torch.manual_seed(0)
    plain, normed = TinyGPT(GPTConfig(**cfg)), TinyGPT(GPTConfig(**cfg, qk_norm=True))
    with torch.no_grad():
        for model in (plain, normed):  # a large W_Q, W_K (as after a logit explosion)
            for block in model.blocks:
                block.attn.W_Q.weight.mul_(300.0)
                block.attn.W_K.weight.mul_(300.0)
        for block in normed.blocks:
            block.attn.q_norm.weight.uniform_(0.5, 1.5)
            block.attn.k_norm.weight.uniform_(0.5, 1.5)
    gains = [(b.attn.q_norm.weight.detach(), b.attn.k_norm.weight.detach()) for b in normed.blocks]
    bound = torch.tensor([float(gq.abs().max() * gk.abs().max()) * math.sqrt(d_head) for gq, gk in gains])
    got = lg.max_logits(normed, idx)
    assert (got.amax(dim=1) <= bound + 1e-4).all(), (got, bound)
    assert (got.amax(dim=1) > 0.3 * bound).all()  # the bound is not vacuous here
    assert lg.max_logits(plain, idx).max() > 10 * bound.max()  # without QK-norm the same weights blow up


# ============================================================================================ the probe
def _brute_force_stats(model: TinyGPT, x: torch.Tensor, n_local: int, p: int):
    """Max |q·k|/√d over allowed pairs and mean row entropy, by loops over the definition."""
    model.eval()
    with torch.no_grad():
        _, cache = model.run_with_cache(x, names=lambda n: n.endswith(("hook_q", "hook_k", "hook_pattern")))
    B, T = x.shape
    L, H = len(model.blocks), model.cfg.n_head
    max_allowed, max_all, entropy = np.zeros((L, H)), np.zeros((L, H)), np.zeros((L, H))
    for layer in range(L):
        q, k = cache[f"blocks.{layer}.attn.hook_q"], cache[f"blocks.{layer}.attn.hook_k"]
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]
        s = (q @ k.transpose(-1, -2)).double() / math.sqrt(q.size(-1))
        for h in range(H):
            best = 0.0
            for i in range(T):
                for j in range(T):
                    if _brute_allowed(h, i, j, n_local, p):
                        best = max(best, float(s[:, h, i, j].abs().max()))
            max_allowed[layer, h] = best
            max_all[layer, h] = float(s[:, h].abs().max())
            rows = pattern[:, h].double()
            entropy[layer, h] = float(-(torch.where(rows > 0, rows * rows.log(), 0.0)).sum(-1).mean())
    return max_allowed, max_all, entropy


def test_logit_probe_matches_a_brute_force_max_over_allowed_pairs():
    model = _ls_model("auto", dropout=0.1)
    with torch.no_grad():  # larger logits so that masked-out pairs matter
        for block in model.blocks:
            block.attn.W_Q.weight.mul_(20.0)
    x = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(4))
    trainer = SimpleNamespace(model=model, probe_batch=(x, torch.roll(x, -1, 1)))
    model.train()
    probe = lg.LogitProbe(every=5)
    out = probe(trainer)
    assert model.training, "the probe must restore train mode"
    json.dumps(out)  # JSON-able
    assert (probe.name, probe.every) == ("logits", 5)

    want_max, want_all, want_entropy = _brute_force_stats(model, x, n_local=3, p=4)
    assert not np.allclose(want_max, want_all), "test setup: masked-out pairs should hold larger logits"
    np.testing.assert_allclose(out["logits/max_per_head"], want_max, rtol=1e-5)
    np.testing.assert_allclose(out["logits/max_per_layer"], want_max.max(axis=1), rtol=1e-5)
    assert out["logits/max"] == pytest.approx(want_max.max(), rel=1e-5)
    np.testing.assert_allclose(out["attn/entropy_per_head"], want_entropy, rtol=1e-5)
    # local heads cannot spread over more than p = 4 keys
    assert max(max(row[:3]) for row in out["attn/entropy_per_head"]) <= math.log(4) + 1e-6
    np.testing.assert_allclose(lg.max_logits(model, x).numpy(), want_max, rtol=1e-5)
    np.testing.assert_allclose(attention_entropy(model, x).numpy(), want_entropy, rtol=1e-5)


def test_logit_probe_without_entropy_and_on_a_real_trainer_shape():
    model = _ls_model("sdpa")
    x = torch.randint(0, 97, (1, 8))
    out = lg.LogitProbe(every=1, entropy=False, name="ls")(SimpleNamespace(model=model, probe_batch=(x, x)))
    assert set(out) == {"logits/max", "logits/max_per_layer", "logits/max_per_head"}
    assert len(out["logits/max_per_layer"]) == 2 and len(out["logits/max_per_head"][0]) == 4


# ======================================================================================== teaching demos
def test_required_logit_gap_puts_exactly_one_minus_eps_in_band():
    i, p, eps = 255, 32, 0.01
    gap = lg.required_logit_gap(i, p, eps)
    n_out = i + 1 - p
    in_band = p * math.exp(gap) / (p * math.exp(gap) + n_out)
    assert in_band == pytest.approx(1 - eps, rel=1e-12)
    assert gap == pytest.approx(math.log(n_out / p) + math.log((1 - eps) / eps))
    gaps = lg.required_logit_gap(np.arange(32, 2048), p, eps)
    assert np.all(np.diff(gaps) > 0)  # grows with the context
    assert lg.required_logit_gap(i, p, eps, head="local") == 0.0
    assert lg.required_logit_gap(np.array([0, 10, 31]), p, eps).tolist() == [0.0, 0.0, 0.0]  # no keys out of band


def test_band_target_rows_are_uniform_over_the_last_p_keys():
    t = band_target(6, 2)
    assert t.sum(-1).tolist() == [1.0] * 6
    assert t[0, 0] == 1 and t[4].tolist() == [0, 0, 0, 0.5, 0.5, 0]


def test_toy_fit_global_head_keeps_inflating_logits_local_head_fits_with_small_ones():
    kw = dict(n=96, r=8, p=12, steps=200, lr=0.02)
    glob, loc = lg.toy_band_fit(head="global", **kw), lg.toy_band_fit(head="local", **kw)
    assert glob["step"][0] == 0 and glob["step"][-1] == 200 and len(glob["kl"]) == 201
    ml = glob["max_logit"]
    assert ml[200] > ml[150] > ml[100] > 0  # still rising at the end
    assert ml[200] > 1.3 * ml[100]
    assert loc["final_kl"] < 1e-3  # a local head matches the band (exactly, in the limit)
    assert glob["final_kl"] > 30 * max(loc["final_kl"], 1e-7)  # a rank-8 global head cannot
    assert loc["final_max_logit"] < 0.2 * glob["final_max_logit"]
    assert loc["max_logit"][-1] < loc["max_logit"][0]  # its logits shrink instead of growing


def test_toy_fit_position_parameterisation_runs_and_logs_every_k_steps():
    out = lg.toy_band_fit(n=64, r=4, p=8, steps=20, param="position", log_every=7)
    assert out["step"] == [0, 7, 14, 20]
    assert out["config"]["param"] == "position"
    assert all(math.isfinite(v) for v in out["kl"] + out["max_logit"])
    assert out["seconds"] >= 0 and out["cpu_seconds"] >= 0


def test_toy_fit_is_seeded_restores_threads_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = lg.toy_band_fit(n=32, p=4, steps=5, seed=7, threads=1)
    assert torch.equal(torch.rand(1), expected_next)
    b = lg.toy_band_fit(n=32, p=4, steps=5, seed=7, threads=None)
    c = lg.toy_band_fit(n=32, p=4, steps=5, seed=8)
    assert a["kl"] == b["kl"] and a["kl"] != c["kl"]
    assert torch.get_num_threads() == 1  # the fixture's setting, restored by the fit


def test_python_m_spanviz_local_global_prints_the_masks_of_a_small_example(capsys):
    runpy.run_module("spanviz.local_global", run_name="__main__")  # what `python -m spanviz.local_global` runs
    out = capsys.readouterr().out
    assert "head 0 (local, p = 3): 27 allowed (query, key) pairs" in out  # 1 + 2 + 8·3 keys over T = 10 queries
    assert "head 3 (global): 55 allowed (query, key) pairs" in out  # 1 + 2 + … + 10
    assert "  · · · ■ ■ ■ · · · ·" in out  # query 5 of a local head: keys 3, 4, 5
    assert "local_global_3_3 at T = 1024" in out and "BlockMask" in out


# ============================================================================================ bad input
@pytest.mark.parametrize(
    "call,field",
    [
        (lambda: lg.head_mask_mod(n_local=-1, window=3), "n_local"),
        (lambda: lg.head_mask_mod(n_local=2, window=0), "window"),
        (lambda: lg.head_mask_mod(n_local=2), "window"),
        (lambda: lg.head_mask_mod(n_local=True, window=2), "n_local"),
        (lambda: lg.dense_mask(lg.head_mask_mod(0), 0, 4), "n_head"),
        (lambda: lg.dense_mask(lg.head_mask_mod(0), 2, 0), "T"),
        (lambda: attention(*_qkv(T=4), lg.head_mask_mod(0), backend="flash"), "backend"),
        (lambda: sdpa_attention(torch.zeros(2, 4, 8), torch.zeros(2, 4, 8), torch.zeros(2, 4, 8),
                                lg.head_mask_mod(0)), "q must be a 4-D"),  # fmt: skip
        (lambda: explicit_attention(torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 5, 8), torch.zeros(1, 2, 5, 8),
                                    lg.head_mask_mod(0)), "share"),  # fmt: skip
        (lambda: lg.LogitProbe(every=0), "every"),
        (lambda: lg.LogitProbe(every=1, name=""), "name"),
        (lambda: lg.max_logits(_ls_model("sdpa"), torch.zeros(2, 4)), "x must be"),
        (lambda: lg.required_logit_gap(10, 0, 0.1), "p must"),
        (lambda: lg.required_logit_gap(10, 4, 1.0), "eps"),
        (lambda: lg.required_logit_gap(-1, 4, 0.1), "i must"),
        (lambda: lg.required_logit_gap(10, 4, 0.1, head="mid"), "head"),
        (lambda: lg.toy_band_fit(head="mid", steps=1), "head"),
        (lambda: lg.toy_band_fit(param="mlp", steps=1), "param"),
        (lambda: lg.toy_band_fit(n=16, p=17, steps=1), "p must be <= n"),
        (lambda: lg.toy_band_fit(steps=0), "steps"),
        (lambda: lg.toy_band_fit(lr=0.0, steps=1), "lr"),
        (lambda: lg.toy_band_fit(threads=0, steps=1), "threads"),
        (lambda: GPTConfig(n_head=4, d_model=64, n_local=5, window=3), "n_local"),
        (lambda: GPTConfig(n_head=4, d_model=64, n_local=2), "window"),
    ],
)
def test_bad_input_raises_value_error_naming_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()
