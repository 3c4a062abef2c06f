"""TinyGPT: explicit and fused attention agree, hook points expose the documented tensors, configs round-trip."""

from __future__ import annotations

import math

import pytest
import torch

from spanviz.model import GPTConfig, TinyGPT

SMALL = dict(vocab_size=97, context_length=48, n_layer=2, n_head=4, d_model=64)


def _pair(**overrides):
    """Two identical models, one forced through the explicit path, one through SDPA."""
    torch.manual_seed(0)
    explicit = TinyGPT(GPTConfig(**{**SMALL, **overrides, "attn_backend": "explicit"}))
    fused = TinyGPT(GPTConfig(**{**SMALL, **overrides, "attn_backend": "sdpa"}))
    fused.load_state_dict(explicit.state_dict())
    return explicit, fused


@pytest.mark.parametrize(
    "overrides",
    [{}, {"n_local": 2, "window": 5}, {"n_local": 4, "window": 1}, {"qk_norm": True}, {"qk_rank": 3}, {"bias": False}],
    ids=["causal", "local+global", "all-local-p1", "qk-norm", "rank-3", "no-bias"],
)
def test_explicit_and_fused_paths_agree_forward_and_backward(overrides):
    explicit, fused = _pair(**overrides)
    idx = torch.randint(0, SMALL["vocab_size"], (3, 40), generator=torch.Generator().manual_seed(1))
    tgt = torch.roll(idx, -1, dims=1)
    le, loss_e = explicit(idx, tgt)
    lf, loss_f = fused(idx, tgt)
    torch.testing.assert_close(le, lf, rtol=1e-5, atol=1e-5)
    loss_e.backward()
    loss_f.backward()
    for (name, pe), pf in zip(explicit.named_parameters(), fused.parameters()):
        torch.testing.assert_close(pe.grad, pf.grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def test_hook_points_have_documented_shapes_and_scores_are_pre_mask():
    model = TinyGPT(GPTConfig(**SMALL))
    idx = torch.randint(0, SMALL["vocab_size"], (2, 16))
    _, cache = model.run_with_cache(idx)
    B, H, T, dh = 2, 4, 16, 16
    for layer in range(2):
        for name in ("hook_q", "hook_k", "hook_v"):
            assert cache[f"blocks.{layer}.attn.{name}"].shape == (B, H, T, dh)
        scores = cache[f"blocks.{layer}.attn.hook_attn_scores"]
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]
        assert scores.shape == pattern.shape == (B, H, T, T)
        # pre-mask: the future (upper triangle) holds finite q·k/√d values, not -inf
        assert torch.isfinite(scores).all()
        q, k = cache[f"blocks.{layer}.attn.hook_q"], cache[f"blocks.{layer}.attn.hook_k"]
        torch.testing.assert_close(scores, q @ k.transpose(-1, -2) / math.sqrt(dh))
        torch.testing.assert_close(pattern.sum(-1), torch.ones(B, H, T))
        assert (pattern.triu(1) == 0).all()


def test_hook_can_replace_a_tensor_and_is_removed_afterwards():
    model = TinyGPT(GPTConfig(**SMALL)).eval()
    idx = torch.randint(0, SMALL["vocab_size"], (1, 12))
    base, _ = model(idx)
    with model.hooks({"blocks.1.attn.hook_v": lambda v: torch.zeros_like(v)}):
        ablated, _ = model(idx)
    after, _ = model(idx)
    assert not torch.allclose(base, ablated)
    torch.testing.assert_close(base, after)
    with pytest.raises(ValueError, match="unknown hook point"):
        with model.hooks({"blocks.9.attn.hook_q": lambda t: t}):
            pass


def test_fused_path_is_used_when_nothing_needs_explicit_tensors():
    model = TinyGPT(GPTConfig(**SMALL))
    attn = model.blocks[0].attn
    assert not attn.needs_explicit(grad_enabled=True)
    with model.hooks({"blocks.0.attn.hook_attn_scores": lambda s: None}):
        assert attn.needs_explicit(grad_enabled=True)
    assert not attn.needs_explicit(grad_enabled=True)


def test_local_heads_see_only_their_window():
    model = TinyGPT(GPTConfig(**{**SMALL, "n_local": 3, "window": 4}))
    idx = torch.randint(0, SMALL["vocab_size"], (1, 20))
    _, cache = model.run_with_cache(idx, names=["blocks.0.attn.hook_pattern"])
    pattern = cache["blocks.0.attn.hook_pattern"][0]  # (H, T, T)
    i, j = torch.meshgrid(torch.arange(20), torch.arange(20), indexing="ij")
    outside_window = (i - j >= 4) | (j > i)
    assert (pattern[:3][:, outside_window] == 0).all()
    assert (pattern[3][i - j >= 4] > 0).all()  # the global head still reaches far back


def test_rank_knob_limits_the_rank_of_each_heads_bilinear_form():
    cfg = GPTConfig(**{**SMALL, "qk_rank": 2})
    model = TinyGPT(cfg)
    wq, bq, wk, bk = model.blocks[0].attn.qk_weights()
    assert wq.shape == wk.shape == (4, 64, 16) and bq.shape == (4, 16)
    ranks = torch.linalg.matrix_rank(wq @ wk.transpose(1, 2))
    assert ranks.tolist() == [2, 2, 2, 2]
    full = TinyGPT(GPTConfig(**SMALL)).blocks[0].attn.qk_weights()
    assert torch.linalg.matrix_rank(full[0] @ full[2].transpose(1, 2)).tolist() == [16] * 4


def test_qk_weights_reproduce_the_models_queries():
    model = TinyGPT(GPTConfig(**{**SMALL, "qk_rank": 5}))
    idx = torch.randint(0, SMALL["vocab_size"], (2, 10))
    _, cache = model.run_with_cache(idx, names=["blocks.0.attn.hook_q", "blocks.0.attn.hook_k"])
    x = model.blocks[0].ln_1(model.wte(idx) + model.wpe(torch.arange(10)))
    wq, bq, wk, bk = model.blocks[0].attn.qk_weights()
    q = torch.einsum("btd,hde->bhte", x, wq) + bq[None, :, None]
    k = torch.einsum("btd,hde->bhte", x, wk) + bk[None, :, None]
    torch.testing.assert_close(q, cache["blocks.0.attn.hook_q"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(k, cache["blocks.0.attn.hook_k"], rtol=1e-5, atol=1e-6)


def test_config_round_trip_and_sequence_length_check():
    cfg = GPTConfig(**{**SMALL, "n_local": 1, "window": 3, "spans": {"alphas": (1, 0, 0, 0)}})
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown GPTConfig field"):
        GPTConfig.from_dict({**cfg.to_dict(), "n_heads": 4})
    with pytest.raises(ValueError, match="context_length"):
        TinyGPT(GPTConfig(**SMALL))(torch.zeros(1, 49, dtype=torch.long))


def test_residual_projections_use_scaled_init():
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(vocab_size=50, context_length=8, n_layer=8, n_head=4, d_model=256))
    std_o = model.blocks[0].attn.W_O.weight.std().item()
    std_q = model.blocks[0].attn.W_Q.weight.std().item()
    assert std_q == pytest.approx(0.02, rel=0.05)
    assert std_o == pytest.approx(0.02 / math.sqrt(16), rel=0.05)
