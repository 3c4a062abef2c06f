"""The logit-growth baselines of notebook 02 against their published definitions: Gemma 2's soft-capping, Kimi K2's
QK-Clip (MuonClip, arXiv 2507.20534 §2.1) and Gemma 3's per-layer local/global pattern."""

from __future__ import annotations

import math

import pytest
import torch

from spanviz.local_global.stabilisers import is_global_layer, local_layers, qk_clip_factors, soft_cap
from spanviz.model import GPTConfig, TinyGPT
from spanviz.store.keys import config_key
from spanviz.train.loop import update


def tiny(**kw) -> GPTConfig:
    return GPTConfig(**{"vocab_size": 50, "context_length": 16, "n_layer": 2, "n_head": 2, "d_model": 16, **kw})


def head_logits(model: TinyGPT, x: torch.Tensor, layer: int) -> torch.Tensor:
    """The pre-cap scores q·k/√d_head (B, H, T, T) of one layer, read at its hook point."""
    seen = {}
    with torch.no_grad(), model.hooks({f"blocks.{layer}.attn.hook_attn_scores": lambda s: seen.setdefault("s", s)}):
        model(x)
    return seen["s"]


def test_soft_cap_is_c_tanh_s_over_c_bounded_and_near_identity_for_small_logits() -> None:
    s = torch.linspace(-500, 500, 1001)
    out = soft_cap(s, 50.0)
    assert torch.allclose(out, 50.0 * torch.tanh(s / 50.0))
    assert out.abs().max() <= 50.0 and torch.all(out[1:] >= out[:-1])  # bounded (= c once fp32's tanh is 1)
    mid = soft_cap(torch.linspace(-100, 100, 201), 50.0)
    assert mid.abs().max() < 50.0 and torch.all(mid[1:] > mid[:-1])  # strictly inside, strictly monotone
    small = torch.linspace(-1, 1, 21)
    # tanh x = x − x³/3 + …: |c·tanh(s/c) − s| <= |s|³ / (3c²) near 0
    assert torch.all((soft_cap(small, 50.0) - small).abs() <= small.abs() ** 3 / (3 * 50.0**2) + 1e-7)


def test_softcapped_model_applies_the_cap_before_the_softmax_and_only_there() -> None:
    torch.manual_seed(0)
    capped = TinyGPT(tiny(logit_softcap=0.5))
    plain = TinyGPT(tiny())
    plain.load_state_dict(capped.state_dict())
    x = torch.randint(0, 50, (2, 16))
    with torch.no_grad():
        for block in capped.blocks:  # large logits, so a cap of 0.5 changes the pattern
            block.attn.W_Q.weight.mul_(20)
            block.attn.W_K.weight.mul_(20)
        plain.load_state_dict(capped.state_dict())
        patterns = {}
        for name, model in (("capped", capped), ("plain", plain)):
            hook = {"blocks.0.attn.hook_pattern": lambda p, n=name: patterns.setdefault(n, p)}
            with model.hooks(hook):
                model(x)
    s = head_logits(plain, x, 0)
    assert torch.equal(head_logits(capped, x, 0), s)  # the hook point sees the logits before the cap
    allowed = capped.blocks[0].attn.allowed(16)
    expected = torch.softmax((0.5 * torch.tanh(s / 0.5)).masked_fill(~allowed, -math.inf), dim=-1)
    assert torch.allclose(patterns["capped"], expected, atol=1e-6)
    assert not torch.allclose(patterns["plain"], expected, atol=1e-3)
    assert capped.blocks[0].attn.needs_explicit(True)  # SDPA has no cap: the explicit path computes it


def test_qk_clip_factor_is_min_one_tau_over_smax() -> None:
    gamma = qk_clip_factors(torch.tensor([200.0, 100.0, 50.0, -300.0]), tau=100.0)
    assert torch.allclose(gamma, torch.tensor([0.5, 1.0, 1.0, 1.0]))


@pytest.mark.parametrize("qk_rank", [None, 2])
def test_qk_clip_scales_each_clipped_heads_logits_by_gamma_and_leaves_the_others(qk_rank) -> None:
    torch.manual_seed(1)
    model = TinyGPT(tiny(qk_clip=5.0, qk_rank=qk_rank))
    with torch.no_grad():  # head 0 of layer 0 far above τ, head 1 left as initialised (far below)
        w = model.blocks[0].attn.W_K.weight.view(2, 8, 16)
        w[0].mul_(400)
        model.blocks[0].attn.W_K.bias.view(2, 8)[0].fill_(3.0)
    x = torch.randint(0, 50, (2, 16))
    before = head_logits(model, x, 0)
    model.train()
    model(x)  # a training forward pass records S_max per head
    s_max = model.blocks[0].attn.max_logit_seen
    allowed = model.blocks[0].attn.allowed(16)
    assert torch.allclose(s_max, before.masked_fill(~allowed, -math.inf).amax(dim=(0, 2, 3)))
    assert s_max[0] > 5.0 > s_max[1]
    model.apply_qk_clip()
    after = head_logits(model, x, 0)
    gamma = 5.0 / s_max[0]
    assert torch.allclose(after[:, 0], gamma * before[:, 0], rtol=1e-4, atol=1e-5)  # every pair scaled by γ
    assert torch.allclose(after[:, 0].masked_fill(~allowed[0], -math.inf).max(), torch.tensor(5.0), rtol=1e-4)
    assert torch.equal(after[:, 1], before[:, 1])
    assert model.blocks[0].attn.max_logit_seen is None  # applied once per forward pass


def test_the_update_applies_qk_clip_after_the_optimizer_step() -> None:
    torch.manual_seed(2)
    cfg = tiny(qk_clip=1e-3)  # every head above τ: each is clipped
    clipped, free = TinyGPT(cfg), TinyGPT(tiny())
    free.load_state_dict(clipped.state_dict())
    x, y = torch.randint(0, 50, (2, 16)), torch.randint(0, 50, (2, 16))
    with torch.no_grad():
        s_max = head_logits(clipped, x, 1).masked_fill(~clipped.blocks[1].attn.allowed(16), -math.inf)
        s_max = s_max.amax(dim=(0, 2, 3))
    for model in (clipped, free):
        update(model, torch.optim.SGD(model.parameters(), lr=0.1), x, y, lr=0.1, grad_clip=None)
    ratio = clipped.blocks[1].attn.W_Q.weight.view(2, 8, 16) / free.blocks[1].attn.W_Q.weight.view(2, 8, 16)
    expected = (1e-3 / s_max).sqrt()  # √γ_h, γ_h from the forward pass of this update
    assert torch.allclose(ratio, expected.view(2, 1, 1).expand_as(ratio), rtol=1e-4)


def test_gemma3_pattern_makes_all_heads_of_non_global_layers_local() -> None:
    assert local_layers(6, 6) == [0, 1, 2, 3, 4] and local_layers(12, 6) == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]
    assert local_layers(2, 2) == [0] and local_layers(3, None) == [] and is_global_layer(5, 6)
    model = TinyGPT(tiny(global_every=2, window=3))
    i, j = torch.meshgrid(torch.arange(16), torch.arange(16), indexing="ij")
    band, causal = (0 <= i - j) & (i - j < 3), j <= i
    assert torch.equal(model.blocks[0].attn.allowed(16), band.expand(2, 16, 16))
    assert torch.equal(model.blocks[1].attn.allowed(16), causal.expand(2, 16, 16))


@pytest.mark.parametrize("kw, field", [
    ({"logit_softcap": 0.0}, "logit_softcap"), ({"logit_softcap": -1.0}, "logit_softcap"),
    ({"logit_softcap": float("nan")}, "logit_softcap"), ({"logit_softcap": True}, "logit_softcap"),
    ({"qk_clip": 0}, "qk_clip"), ({"qk_clip": 10.0, "qk_norm": True}, "qk_clip"),
    ({"global_every": 0, "window": 4}, "global_every"), ({"global_every": 2}, "window"),
    ({"global_every": 1.5, "window": 4}, "global_every"),
])  # fmt: skip
def test_bad_settings_are_refused_naming_the_field(kw, field) -> None:
    with pytest.raises(ValueError, match=field):
        tiny(**kw)


def test_runs_stored_before_the_new_fields_keep_their_keys() -> None:
    config = {"model": tiny().to_dict(), "train": {"lr": 1e-3}}
    old = {"model": {k: v for k, v in config["model"].items()
                     if k not in ("logit_softcap", "qk_clip", "global_every")}, "train": {"lr": 1e-3}}
    assert config_key(config) == config_key(old)
    assert config_key({**config, "model": tiny(logit_softcap=50.0).to_dict()}) != config_key(old)
