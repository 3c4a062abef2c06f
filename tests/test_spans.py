"""Tests for spanviz.spans: the five invariants of the technique, a float64 reference, naming, diagnostics.

The reference below is deliberately naive: explicit T×T projectors Π = X X⁺ (the orthogonal projector onto
the column span of X) multiplied out block by block in float64. The library never forms T×T projectors.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spanviz import spans
from spanviz.model import GPTConfig, TinyGPT
from spanviz.spans import SpanConfig

TINY = dict(vocab_size=50, context_length=32, n_layer=2, n_head=2, d_model=16)  # d_head 8 < T 32
PAPER_BRACKETS = ("1111", "1110", "1100", "1000")


# ------------------------------------------------------------------------------------ reference

def ref_projector(X: torch.Tensor) -> torch.Tensor:
    """Explicit T×T orthogonal projector onto the column span of X (..., T, d), float64."""
    X = X.double()
    return X @ torch.linalg.pinv(X)


def ref_block(dS, q, k, v, slots, bits):
    """Π_1^{a1} Π_2^{a2} ... · dS · ... R_2 R_1 with explicit matrices (first slot on each side outermost)."""
    T = dS.shape[-1]
    eye = torch.eye(T, dtype=torch.float64)
    bases = {"Q": q, "K": k, "V": v}
    left, right = eye, eye
    for (side, basis), bit in zip(slots, bits):
        P = ref_projector(bases[basis])
        F = eye - P if bit else P
        if side == "left":
            left = left @ F  # later left slots sit further inside
        else:
            right = F @ right  # later right slots sit further inside
    return left @ dS.double() @ right


def ref_bits(n):
    """Block order written out independently: by order, then ⊥ on earlier slots first."""
    out = []
    for order in range(n + 1):
        combos = [c for c in _combinations(n, order)]
        for perp_slots in combos:
            out.append(tuple(1 if i in perp_slots else 0 for i in range(n)))
    return out


def _combinations(n, r):
    import itertools

    return list(itertools.combinations(range(n), r))  # lexicographic: (0, 1) < (0, 2) < (1, 2)


def random_qkv(B, H, T, d, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, d, generator=g, dtype=dtype) for _ in range(3))
    dS = torch.randn(B, H, T, T, generator=g, dtype=dtype)
    return dS, q, k, v


slot_strategy = st.tuples(st.sampled_from(spans.config.SIDES), st.sampled_from(spans.config.BASES))


# ------------------------------------------------------------------------------------ naming

def test_kv8_block_table_is_documented_naming():
    table = spans.block_table("kv8")
    assert [r["name"] for r in table] == [f"S{i}" for i in range(1, 9)]
    assert [r["order"] for r in table] == [0, 1, 1, 1, 2, 2, 2, 3]
    assert [r["formula"] for r in table] == [
        "Π_K Π_V dS Π_V",
        "Π_K^⊥ Π_V dS Π_V",
        "Π_K Π_V^⊥ dS Π_V",
        "Π_K Π_V dS Π_V^⊥",
        "Π_K^⊥ Π_V^⊥ dS Π_V",
        "Π_K^⊥ Π_V dS Π_V^⊥",
        "Π_K Π_V^⊥ dS Π_V^⊥",
        "Π_K^⊥ Π_V^⊥ dS Π_V^⊥",
    ]
    assert spans.config.block_orders("qk4") == [0, 1, 1, 2]
    assert spans.config.block_formulas("qkv8")[0] == "Π_Q dS Π_V Π_K"  # first right slot outermost
    for n in range(1, 5):
        slots = [("left", "K")] * n
        assert spans.config.block_bits(slots) == ref_bits(n)


# ------------------------------------------------------------------------- agreement with reference

@settings(max_examples=25, deadline=None)
@given(
    B=st.integers(1, 2), H=st.integers(1, 2), T=st.integers(1, 10), d=st.integers(1, 5),
    slots=st.lists(slot_strategy, min_size=1, max_size=3),
    alphas=st.lists(st.floats(-2, 2, allow_nan=False), min_size=4, max_size=4),
    seed=st.integers(0, 10_000),
)
def test_matches_float64_reference(B, H, T, d, slots, alphas, seed):
    dS, q, k, v = random_qkv(B, H, T, d, seed)
    cfg = SpanConfig(alphas=alphas, slots=slots, ridge=0.0)
    blocks = spans.decompose(dS, q, k, v, cfg)
    scale = dS.abs().max()
    expected_out = torch.zeros_like(dS)
    for i, bits in enumerate(ref_bits(len(slots))):
        ref = ref_block(dS, q, k, v, cfg.slots, bits)
        torch.testing.assert_close(blocks[i], ref, atol=1e-8 * scale, rtol=0)
        expected_out += alphas[sum(bits)] * ref
    for method in spans.core.METHODS:
        out = spans.scale_score_grad(dS, q, k, v, cfg, method=method)
        torch.testing.assert_close(out, expected_out, atol=1e-8 * scale, rtol=0)


@settings(max_examples=25, deadline=None)
@given(
    T=st.integers(1, 10), d=st.integers(1, 5), seed=st.integers(0, 10_000),
    weights=st.lists(st.floats(-2, 2, allow_nan=False), min_size=8, max_size=8),
)
def test_block_alphas_match_reference(T, d, seed, weights):
    dS, q, k, v = random_qkv(1, 2, T, d, seed)
    cfg = SpanConfig(block_alphas=weights, ridge=0.0)
    expected = sum(w * ref_block(dS, q, k, v, cfg.slots, b) for w, b in zip(weights, ref_bits(3)))
    out = spans.scale_score_grad(dS, q, k, v, cfg)
    torch.testing.assert_close(out, expected, atol=1e-8 * dS.abs().max(), rtol=0)


def test_projector_never_needs_full_rank():
    # X = 0 spans {0}: Π = 0. A zero column: Cholesky fails without a ridge, the pinv fallback is exact.
    g = torch.Generator().manual_seed(0)
    M = torch.randn(2, 12, 12, generator=g, dtype=torch.float64)
    X = torch.randn(2, 12, 4, generator=g, dtype=torch.float64)
    X[0] = 0.0
    X[1, :, 2] = 0.0
    P = spans.core.SpanProjector(X, ridge=0.0)
    torch.testing.assert_close(P.left(M), ref_projector(X) @ M)
    torch.testing.assert_close(P.right(M), M @ ref_projector(X))
    assert P.left(M)[0].abs().max() == 0


# ------------------------------------------------------------------------ invariant 2: blocks sum to dS

@settings(max_examples=25, deadline=None)
@given(
    preset=st.sampled_from(spans.config.PRESETS), ridge=st.sampled_from([0.0, 1e-6, 1e-2, 1.0, 100.0]),
    T=st.integers(2, 24), d=st.integers(1, 8), seed=st.integers(0, 10_000),
)
def test_blocks_sum_to_dS_any_preset_any_ridge(preset, ridge, T, d, seed):
    dS, q, k, v = random_qkv(2, 2, T, d, seed, dtype=torch.float32)
    blocks = spans.decompose(dS, q, k, v, preset, ridge=ridge)
    assert blocks.shape == (2 ** len(spans.config.PRESET_SLOTS[preset]),) + dS.shape
    torch.testing.assert_close(blocks.sum(0), dS, atol=1e-5 * dS.abs().max(), rtol=0)


@pytest.mark.parametrize("preset", spans.config.PRESETS)
def test_block_energies_add_up_to_dS(preset):
    """Each slot splits the matrix it acts on orthogonally, so Σ‖block‖² = ‖dS‖²: the shares sum to 1 —
    although blocks on different branches are not orthogonal to each other."""
    dS, q, k, v = random_qkv(2, 2, 24, 5, 7)
    blocks = spans.decompose(dS, q, k, v, preset, ridge=0.0)
    energy = blocks.pow(2).sum(dim=(1, 3, 4))  # (n_blocks, H)
    torch.testing.assert_close(energy.sum(0), dS.pow(2).sum(dim=(0, 2, 3)), rtol=1e-10, atol=0)
    if preset != "qk4":  # the claim is about sums, not pairs: some pairs of blocks do overlap
        flat = blocks.flatten(1)
        gram = flat @ flat.T
        assert (gram - torch.diag(gram.diag())).abs().max() > 1e-6 * gram.diag().max()
    # with the default ridge the sum is off by about ε·κ at most
    ridged = spans.decompose(dS, q, k, v, preset).pow(2).sum() / dS.pow(2).sum()
    assert abs(float(ridged) - 1) < 1e-6 * max(float(spans.gram_condition(x).max()) for x in (q, k, v)) * 4


def test_ridge_bias_is_the_under_projection_of_the_ridge():
    g = torch.Generator().manual_seed(0)
    basis, _ = torch.linalg.qr(torch.randn(64, 4, generator=g, dtype=torch.float64))
    for s in ([1.0, 1.0, 1.0, 1.0], [4.0, 3.0, 2.0, 1.0], [50.0, 10.0, 3.0, 0.05]):
        X = basis * torch.tensor(s, dtype=torch.float64)  # singular values s: κ(XᵀX) = (s_max/s_min)²
        kappa = float(spans.gram_condition(X))
        measured = torch.linalg.matrix_norm(
            ref_projector(X) - spans.core.SpanProjector(X).left(torch.eye(64).double()), 2)
        bias = float(spans.ridge_bias(X))
        lam = 1e-6 * sum(x * x for x in s) / 4
        assert bias == pytest.approx(lam / (s[-1] ** 2 + lam)) and float(measured) == pytest.approx(bias, rel=1e-6)
        assert bias <= 1e-6 * kappa * (1 + 1e-9)
    assert float(spans.ridge_bias(torch.zeros(8, 2))) == 0.0
    with pytest.raises(ValueError, match="T > d"):
        spans.ridge_bias(torch.randn(3, 4))


# ----------------------------------------------------------------------------- model helpers

def make_model(spans_cfg=None, seed=0, **overrides):
    torch.manual_seed(seed)
    return TinyGPT(GPTConfig(**{**TINY, **overrides}, spans=spans_cfg))


def tiny_batch(B=3, T=32, vocab=50, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (B, T), generator=g)
    return x, torch.roll(x, -1, dims=1)


def grads_of(model, batch):
    logits, loss = model(*batch)
    loss.backward()
    return logits.detach(), loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def rel_err(ga, gb):
    """‖ga − gb‖ / ‖gb‖ over all parameter gradients together."""
    a = torch.cat([ga[n].flatten() for n in gb])
    b = torch.cat([gb[n].flatten() for n in gb])
    return float((a - b).norm() / b.norm())


def rel_err_qk(ga, gb):
    """Largest per-tensor relative error among the query/key weights (the gradients the transform touches)."""
    names = [n for n in gb if ("W_Q" in n or "W_K" in n) and n.endswith("weight")]
    return max(float((ga[n] - gb[n]).norm() / gb[n].norm()) for n in names)


@pytest.fixture(scope="module")
def explicit_baseline():
    return grads_of(make_model(attn_backend="explicit"), tiny_batch())


@pytest.fixture(scope="module")
def fused_baseline():
    return grads_of(make_model(), tiny_batch())


# ------------------------------------------------------------- invariant 1: [1111] = un-hooked gradients

@pytest.mark.parametrize("preset", spans.config.PRESETS)
def test_1111_equals_unhooked_model(preset, explicit_baseline, fused_baseline):
    model = make_model(SpanConfig(alphas="1111", preset=preset))
    attn = model.blocks[0].attn
    assert (attn.score_grad_fn is not None) or (attn.qk_grad_fn is not None)  # the hook is installed
    _, _, g = grads_of(model, tiny_batch())
    # every preset trains on the fused path, and [1111] leaves its backward alone: exactly plain training
    # (a baseline computed here: the module's fixture may have run at another torch thread count)
    assert rel_err(g, grads_of(make_model(), tiny_batch())[2]) == 0.0
    assert rel_err(g, explicit_baseline[2]) <= 1e-6 and rel_err(g, fused_baseline[2]) <= 1e-6


@pytest.mark.parametrize("preset", ["kv8", "qkv8", "qk4"])
def test_1111_real_computation_equals_unhooked_model(preset, explicit_baseline):
    """The all-ones shortcut skipped: every block formed, then summed, inside the real backward hook."""
    cfg = SpanConfig(alphas="1111", preset=preset)
    model = make_model(attn_backend="explicit")
    calls = []

    def full(dS, q, k, v):
        calls.append(1)
        return spans.scale_score_grad(dS, q, k, v, cfg, method="blocks")

    for block in model.blocks:
        block.attn.score_grad_fn = full
    _, _, g = grads_of(model, tiny_batch())
    assert len(calls) == TINY["n_layer"]
    assert rel_err(g, explicit_baseline[2]) <= 1e-6
    assert rel_err_qk(g, explicit_baseline[2]) <= 1e-6


def test_qk4_closed_form_at_ones_is_exact():
    g = torch.Generator().manual_seed(3)
    grad, x = torch.randn(2, 2, 20, 4, generator=g), torch.randn(2, 2, 20, 4, generator=g)
    out = spans.core.scale_qk_grad(grad, x, SpanConfig(alphas="1111", preset="qk4"))  # shortcut: α0 == α1
    assert torch.equal(out, grad)
    near = spans.core.qk_transform(1.0, 1.0 - 1e-12, grad,  # forces the projector path
                                   lambda g: spans.core.SpanProjector(x, 1e-6, g.dtype).left(g))
    torch.testing.assert_close(near, grad, rtol=1e-6, atol=1e-7)


def test_alphas_change_gradients(explicit_baseline):
    _, _, g = grads_of(make_model(SpanConfig(alphas="1000")), tiny_batch())
    assert rel_err_qk(g, explicit_baseline[2]) > 0.1


# --------------------------------------------------------------------------- invariant 3: T <= d

def test_projector_is_identity_when_T_le_d():
    """Justifies the T <= d shortcut: the exact projector onto span(X) is I for generic X."""
    for T, d in [(4, 4), (3, 8), (1, 5)]:
        X = torch.randn(2, T, d, dtype=torch.float64)
        torch.testing.assert_close(ref_projector(X), torch.eye(T, dtype=torch.float64).expand(2, T, T))
        assert spans.core.SpanProjector(X).identity


def test_T_le_d_rank_deficient_X_is_projected_onto_its_span():
    """T <= d is Π = I only for full-rank X: K = 0 spans {0}, and a rank-r q (qk_rank) spans r dimensions."""
    g = torch.Generator().manual_seed(3)
    T, d = 6, 8
    M = torch.randn(3, T, T, generator=g, dtype=torch.float64)
    X = torch.randn(3, T, d, generator=g, dtype=torch.float64)
    X[0] = 0.0  # K = 0: before the rank check Π was I here (dS unchanged), but 0 for T > d
    X[1] = torch.randn(T, 2, generator=g, dtype=torch.float64) @ torch.randn(2, d, generator=g, dtype=torch.float64)
    P = spans.core.SpanProjector(X, ridge=0.0)
    assert not P.identity
    torch.testing.assert_close(P.left(M), ref_projector(X) @ M)
    torch.testing.assert_close(P.right(M), M @ ref_projector(X))
    assert P.left(M)[0].abs().max() == 0
    # the same rank-2 span in float32, as in training, with the default ridge: the span is found
    low = spans.core.SpanProjector(X[1:2].float())
    assert not low.identity
    torch.testing.assert_close(low.left(M[1:2].float()), (ref_projector(X[1:2]) @ M[1:2]).float(), atol=1e-4, rtol=0)
    # K = 0 at T <= d gives the same blocks as at T > d: every part of dS is a violation of the key span
    for T_, d_ in ((4, 8), (12, 3)):
        dS, q, _, v = random_qkv(1, 1, T_, d_, 1)
        out = spans.scale_score_grad(dS, q, torch.zeros_like(q), v, SpanConfig(alphas="1000"))
        assert out.abs().max() == 0


@pytest.mark.parametrize("preset", spans.config.PRESETS)
def test_T_le_dhead_every_alpha_is_baseline(preset):
    small = dict(context_length=8, d_model=32, n_head=2)  # d_head 16 >= T 8
    batch = tiny_batch(T=8)
    _, _, base = grads_of(make_model(attn_backend="explicit", **small), batch)
    _, _, fused = grads_of(make_model(**small), batch)
    g = torch.Generator().manual_seed(5)
    for _ in range(3):
        alphas = [1.0] + (torch.rand(3, generator=g) * 4 - 2).tolist()
        _, _, got = grads_of(make_model(SpanConfig(alphas=alphas, preset=preset), **small), batch)
        assert rel_err(got, fused if preset == "qk4" else base) <= 1e-6


def test_T_le_d_alpha0_scales_everything():
    dS, q, k, v = random_qkv(1, 1, 4, 8, 0)
    out = spans.scale_score_grad(dS, q, k, v, SpanConfig(alphas=[0.5, 3, -1, 2]))
    torch.testing.assert_close(out, 0.5 * dS)


# --------------------------------------------------------------------------- invariant 4: qk4

@settings(max_examples=25, deadline=None)
@given(
    T=st.integers(1, 12), d=st.integers(1, 5), seed=st.integers(0, 10_000),
    a=st.lists(st.floats(-2, 2, allow_nan=False), min_size=4, max_size=4),
    a2=st.floats(-5, 5, allow_nan=False),
)
def test_qk4_closed_form_equals_explicit_sum_and_ignores_alpha2(T, d, seed, a, a2):
    """Order α (α2 irrelevant) and per-block α with S2 ≠ S3 (dQ sees S1/S2, dK sees S1/S3)."""
    dS, q, k, v = random_qkv(2, 1, T, d, seed)
    s = 1 / math.sqrt(d)
    cfg = SpanConfig(alphas=a, preset="qk4", ridge=0.0)
    cfg2 = SpanConfig(alphas=[a[0], a[1], a2, a[3]], preset="qk4", ridge=0.0)
    per_block = SpanConfig(block_alphas=[a[0], a[1], a2, a[3]], preset="qk4", ridge=0.0)
    scale = (dS.abs().max() * q.abs().max() * T).item()
    for c in (cfg, cfg2, per_block):
        dS2 = spans.scale_score_grad(dS, q, k, v, c, method="blocks")  # explicit 4-block sum
        torch.testing.assert_close(spans.core.scale_qk_grad(dS @ k * s, q, c), dS2 @ k * s, atol=1e-9 * scale, rtol=0)
        torch.testing.assert_close(
            spans.core.scale_qk_grad(dS.mT @ q * s, k, c, side="k"), dS2.mT @ q * s, atol=1e-9 * scale, rtol=0
        )


def test_qk4_alpha2_changes_nothing_in_model():
    _, _, g0 = grads_of(make_model(SpanConfig(alphas=[1, 0, 0, 0], preset="qk4")), tiny_batch())
    _, _, g1 = grads_of(make_model(SpanConfig(alphas=[1, 0, 5, -3], preset="qk4")), tiny_batch())
    assert rel_err(g1, g0) == 0.0


# ------------------------------------------------------------------------ invariant 5: forward unchanged

@pytest.mark.parametrize("preset", spans.config.PRESETS)
@pytest.mark.parametrize("alphas", ["1111", "1000", "1100", [0.3, -1.0, 2.0, 0.0]])
def test_forward_identical_for_every_alpha(preset, alphas, explicit_baseline, fused_baseline):
    logits, loss, _ = grads_of(make_model(SpanConfig(alphas=alphas, preset=preset)), tiny_batch())
    # Every preset trains on the fused forward (kv8 and qkv8 through their fused backward): bit-identical to plain
    assert torch.equal(logits, fused_baseline[0]) and torch.equal(loss, fused_baseline[1])
    torch.testing.assert_close(logits, explicit_baseline[0])  # and the two paths agree to fp32 tolerance


def test_inference_uses_fused_path_and_matches():
    model = make_model(SpanConfig(alphas="1000"))
    base = make_model()
    x, _ = tiny_batch()
    with torch.no_grad():
        assert torch.equal(model(x)[0], base(x)[0])


# ---------------------------------------------------------------------------- masked-fill pitfall

def test_additive_mask_gives_zero_dS_where_masked():
    captures = spans.capture_score_grads(make_model(SpanConfig(alphas="1000")), tiny_batch())
    T = TINY["context_length"]
    upper = torch.ones(T, T, dtype=torch.bool).triu(1)
    for c in captures:
        assert c.dS[..., upper].abs().max() == 0.0
        assert c.dS[..., ~upper].abs().max() > 0.0


def test_masked_fill_placement_would_differ():
    """Hook on pre-mask scores (spanviz) reproduces dQ' = dS' K/√d; a hook after masked_fill does not,
    because the masked_fill backward re-zeroes dS' in the masked triangle."""
    T, d = 64, 8
    g = torch.Generator().manual_seed(0)
    q0, k0, v0, dO = (torch.randn(1, 1, T, d, generator=g) for _ in range(4))
    cfg = SpanConfig(alphas="1000")
    upper = torch.ones(T, T, dtype=torch.bool).triu(1)

    def run(where):
        q, k = q0.clone().requires_grad_(), k0.clone().requires_grad_()
        S = q @ k.mT / math.sqrt(d)
        if where == "pre-mask":
            S.register_hook(lambda gr: spans.scale_score_grad(gr, q0, k0, v0, cfg))
            P = torch.softmax(S + torch.zeros(T, T).masked_fill(upper, float("-inf")), -1)
        else:
            Sm = S.masked_fill(upper, float("-inf"))
            Sm.register_hook(lambda gr: spans.scale_score_grad(gr, q0, k0, v0, cfg))
            P = torch.softmax(Sm, -1)
        (P @ v0 * dO).sum().backward()
        return q.grad

    # the definition: dS' = scaled (masked) dS, then dQ' = dS' K/√d
    q, k = q0.clone().requires_grad_(), k0.clone().requires_grad_()
    S = q @ k.mT / math.sqrt(d)
    S.retain_grad()
    (torch.softmax(S.masked_fill(upper, float("-inf")), -1) @ v0 * dO).sum().backward()
    expected = spans.scale_score_grad(S.grad, q0, k0, v0, cfg) @ k0 / math.sqrt(d)
    torch.testing.assert_close(run("pre-mask"), expected)
    diff = (run("masked_fill") - expected).abs().max()
    assert diff > 0.1 * expected.abs().max()


# --------------------------------------------------- the fused backward: same gradients, no T×T tensor kept

def _definition_attention(q, k, v, cfg, mask):
    """The explicit path with the transform as a hook on ∂L/∂S — the definition the fused backward must equal."""
    S = q @ k.mT / math.sqrt(q.shape[-1])
    S.register_hook(lambda g: spans.scale_score_grad(g, q.detach(), k.detach(), v.detach(), cfg, method="blocks"))
    return torch.softmax(S + mask, -1) @ v


FAST_PATH_CONFIGS = (
    [SpanConfig(alphas=a, preset=p) for p in spans.config.PRESETS
     for a in (*PAPER_BRACKETS, [0.3, -1.0, 2.0, 0.5], [0, 0, 0, 0], [2, 2, 2, 2])]
    + [SpanConfig(block_alphas=[1, 0.5, 0, 2, 0.1, 0, 1, 3]), SpanConfig(preset="qk4", block_alphas=[1, 0, 0.5, 2])]
    + [SpanConfig(alphas=[0.5, 1, 0.2, 0, 0][: max(4, len(slots) + 1)], slots=slots) for slots in (
        (("right", "K"),), (("left", "V"), ("left", "Q")),
        (("right", "Q"), ("left", "K"), ("right", "V"), ("left", "V")))]
)


@pytest.mark.parametrize("cfg", FAST_PATH_CONFIGS, ids=lambda c: f"{c.label()} {c.slots}")
def test_fast_path_gradients_equal_the_definition(cfg, monkeypatch):
    """float64, 4 batch tiles × 3 row tiles: dQ, dK, dV of the fused backward equal the explicit hook's."""
    from spanviz.spans import fused

    monkeypatch.setattr(fused, "CHUNK_ELEMENTS", {"cpu": 3 * 16 * 40, "default": 3 * 16 * 40})
    assert fused._tiles(torch.Size((4, 3, 40, 8)), torch.device("cpu")) == (1, 16)  # 4 × 3 tiles
    g = torch.Generator().manual_seed(0)
    q, k, v, dO = (torch.randn(4, 3, 40, 8, generator=g, dtype=torch.float64) for _ in range(4))
    mask = torch.full((40, 40), float("-inf"), dtype=torch.float64).triu(1)
    ref_in = [t.clone().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(_definition_attention(*ref_in, cfg, mask), ref_in, dO)
    fast_in = [t.clone().requires_grad_() for t in (q, k, v)]
    attend = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    got = torch.autograd.grad(spans.fused.span_attention(*fast_in, cfg, attend, mask), fast_in, dO)
    for name, a, b in zip("QKV", got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=lambda m, n=name: f"d{n}: {m}")


@pytest.mark.parametrize("side", spans.core.QK_SIDES)
def test_qk4_training_hook_equals_the_closed_form_definition(side):
    """What the model installs for qk4 (the fused backward's sync-free projector) equals scale_qk_grad."""
    from spanviz.spans import fused

    cfg = SpanConfig(alphas=[1.0, 0.3, 0.0, 0.0], preset="qk4")
    g = torch.Generator().manual_seed(4)
    grad, x = (torch.randn(2, 3, 40, 8, generator=g, dtype=torch.float64) for _ in range(2))
    want = spans.core.scale_qk_grad(grad, x, cfg, side)
    _, qk_grad_fn = spans.fused.build_grad_fns(cfg)
    torch.testing.assert_close(qk_grad_fn(grad, x, side), want, rtol=1e-10, atol=1e-12)
    zero = fused._projector(torch.zeros_like(x), cfg.ridge)  # X = 0: Π = 0
    torch.testing.assert_close(spans.core.qk_transform(1.0, 0.3, grad, zero), 0.3 * grad)


@pytest.mark.parametrize("preset", ["kv8", "qkv8"])
@pytest.mark.parametrize("alphas", ["1000", "1100", "1110", [0.3, -1.0, 2.0, 0.5]])
def test_model_fast_path_equals_the_explicit_definition(preset, alphas):
    """In a model, fp32: the fused backward (what training runs) against the same setting on the explicit path."""
    cfg = SpanConfig(alphas=alphas, preset=preset)
    fast = make_model(cfg)
    assert not fast.blocks[0].attn.needs_explicit(True)  # the fused forward, the transform in backward
    _, _, got = grads_of(fast, tiny_batch())
    _, _, want = grads_of(make_model(cfg, attn_backend="explicit"), tiny_batch())
    assert rel_err(got, want) <= 2e-6 and rel_err_qk(got, want) <= 2e-6


def test_fast_path_keeps_no_score_sized_tensor():
    """Nothing of (B, H, T, T) size is saved for the backward of a kv8 training step (the explicit path saves
    several), and the loss keeps no (B·T, V) logits."""
    B, T = 3, 64
    cfg_kw = dict(context_length=T, d_model=16, n_head=2)
    x, y = tiny_batch(B=B, T=T)

    def largest_saved(model, **kw):
        sizes = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: (sizes.append(t.numel()), t)[1], lambda t: t):
            _, loss = model(x, y, **kw)
        loss.backward()
        return max(sizes)

    scores = B * 2 * T * T
    assert largest_saved(make_model(SpanConfig(alphas="1000"), **cfg_kw), return_logits=False) < scores
    assert largest_saved(make_model(SpanConfig(alphas="1000"), attn_backend="explicit", **cfg_kw)) >= scores


def test_fast_path_gives_way_to_hooks_and_dropout():
    """A hook on the scores, attention dropout while training, or a plain-function transform: explicit path."""
    model = make_model(SpanConfig(alphas="1000"), dropout=0.1)
    attn = model.blocks[0].attn
    assert attn.needs_explicit(True)  # dropout on P cannot be replayed by a recomputing backward
    model.eval()
    assert not attn.needs_explicit(True)
    model = make_model(SpanConfig(alphas="1000"))
    attn = model.blocks[0].attn
    with model.hooks({"blocks.0.attn.hook_pattern": lambda t: None}):
        assert attn.needs_explicit(True)
    assert not attn.needs_explicit(True)
    attn.score_grad_fn = lambda dS, q, k, v: dS  # a plain function has no fused backward
    assert attn.needs_explicit(True)


def test_fast_path_under_cpu_bf16_autocast_returns_input_dtypes():
    """bf16 autocast (as on CUDA): gradients in the inputs' dtypes, close to the fp32 ones."""
    cfg = SpanConfig(alphas="1000")
    x, y = tiny_batch()
    _, _, want = grads_of(make_model(cfg), (x, y))
    model = make_model(cfg)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss = model(x, y, return_logits=False)
    loss.backward()
    got = {n: p.grad for n, p in model.named_parameters()}
    assert all(g.dtype == torch.float32 for g in got.values())
    assert rel_err_qk(got, want) < 0.05


# ------------------------------------------------------------------------------ the numerical check

def test_kv8_keeps_76_38_12_percent_of_dQ():
    """Technique doc: on random T=64, d=16 data [1110]/[1100]/[1000] keep ≈ 76/38/12 % of ‖dQ‖."""
    ratios = {a: [] for a in ("1110", "1100", "1000")}
    for seed in range(20):
        dS, q, k, v = random_qkv(1, 1, 64, 16, seed, dtype=torch.float32)
        dq = dS @ k
        for a in ratios:
            out = spans.scale_score_grad(dS, q, k, v, SpanConfig(alphas=a))
            ratios[a].append(float((out @ k).norm() / dq.norm()))
    mean = {a: sum(r) / len(r) for a, r in ratios.items()}
    assert abs(mean["1110"] - 0.76) < 0.03
    assert abs(mean["1100"] - 0.38) < 0.03
    assert abs(mean["1000"] - 0.12) < 0.03


def test_grouped_needs_few_projections():
    dS, q, k, v = random_qkv(1, 1, 12, 3, 0)
    P = {b: spans.core.SpanProjector(t) for b, t in zip("QKV", (q, k, v))}
    cfg = SpanConfig(alphas="1000")
    for alphas, most in (("1000", 3), ("1100", 4), ("1110", 4), ([0.5, 2.0, -1.0, 3.0], 4)):
        count = []
        ops = [
            (lambda M, f=f, count=count: (count.append(1), f(M))[1])
            for f in spans.core._slot_ops(cfg.slots, P)
        ]
        spans.core._order_scaled(dS, ops, spans.config.parse_alphas(alphas))
        assert len(count) <= most, (alphas, len(count))


# ------------------------------------------------------------------------------------ precision

def test_low_precision_input_is_computed_in_float32():
    dS, q, k, v = random_qkv(2, 2, 32, 4, 0, dtype=torch.float32)
    cfg = SpanConfig(alphas="1100")
    ref = spans.scale_score_grad(dS, q, k, v, cfg)
    got = spans.scale_score_grad(*(t.bfloat16() for t in (dS, q, k, v)), cfg)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), ref, atol=0.05 * ref.abs().max(), rtol=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = spans.scale_score_grad(dS, q, k, v, cfg)
    assert inside.dtype == torch.float32
    torch.testing.assert_close(inside, ref)


# ------------------------------------------------------------------------------- config and input

def test_alpha_parsing_and_round_trip():
    assert SpanConfig(alphas="1000").alphas == (1.0, 0.0, 0.0, 0.0)
    assert SpanConfig(alphas="[1110]").alphas == (1.0, 1.0, 1.0, 0.0)
    assert SpanConfig(alphas="[1, 0.5, 0, 0]").alphas == (1.0, 0.5, 0.0, 0.0)
    assert SpanConfig(alphas=(1, -0.5, 0, 2)).alphas == (1.0, -0.5, 0.0, 2.0)
    assert SpanConfig(alphas="1,0.5,0,0".split(",")).alphas == (1.0, 0.5, 0.0, 0.0)  # as the CLI passes them
    cfg = SpanConfig(alphas="1100", preset="qkv8", layers=[1, 0], ridge=1e-5)
    assert cfg.layers == (0, 1) and cfg.slots == spans.config.PRESET_SLOTS["qkv8"]
    d = json.loads(json.dumps(cfg.to_dict()))
    assert SpanConfig(**d) == cfg
    custom = SpanConfig(alphas="1000", slots=[["left", "k"], ["right", "Q"]])
    assert custom.preset == "custom" and SpanConfig(**custom.to_dict()) == custom
    five = SpanConfig(alphas=[1, 0, 0, 0, 0, 0], slots=[("left", "K")] * 5)
    assert five.n_blocks == 32 and len(spans.config.block_names(five)) == 32
    gcfg = GPTConfig(**TINY, spans={"alphas": "1000", "preset": "kv8"})
    assert gcfg.spans == SpanConfig(alphas="1000")
    assert GPTConfig.from_dict(json.loads(json.dumps(gcfg.to_dict()))) == gcfg
    assert SpanConfig(slots=spans.config.PRESET_SLOTS["kv8"]) == SpanConfig()  # a preset's slots get its name
    forced = SpanConfig(preset="custom", slots=spans.config.PRESET_SLOTS["qk4"])
    assert forced.preset == "custom" and spans.fused.build_grad_fns(forced)[0] is not None  # explicit score path


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(alphas=(1, 0, 0)), "alphas"),
        (dict(alphas="10000"), "alphas"),
        (dict(alphas=(1, 0, float("nan"), 0)), "alphas"),
        (dict(alphas=(1, 0, float("inf"), 0)), "alphas"),
        (dict(alphas="1x00"), "alphas"),
        (dict(alphas=None), "alphas"),
        (dict(alphas=["1", "x", "0", "0"]), "alphas"),
        (dict(alphas=[1, True, 0, 0]), "alphas"),
        (dict(preset="kv9"), "preset"),
        (dict(slots=[("up", "K")]), "side"),
        (dict(slots=[("left", "W")]), "basis"),
        (dict(slots=[]), "slots"),
        (dict(slots="kv8"), "slots"),
        (dict(preset="qk4", slots=spans.config.PRESET_SLOTS["kv8"]), "preset"),
        (dict(preset="custom"), "slots"),
        (dict(layers=[-1]), "layers"),
        (dict(layers=[]), "layers"),
        (dict(block_alphas=[1, 1]), "block_alphas"),
        (dict(block_alphas=[1] * 7 + [float("nan")]), "block_alphas"),
        (dict(ridge=-1.0), "ridge"),
        (dict(ridge=float("nan")), "ridge"),
    ],
)
def test_bad_config_raises_naming_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SpanConfig(**kwargs)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="spans.layers"):
        GPTConfig(**TINY, spans=SpanConfig(layers=[0, 2]))
    with pytest.raises(ValueError, match="preset"):
        spans.config.block_names("kv9")
    dS, q, k, v = random_qkv(1, 1, 6, 2, 0)
    with pytest.raises(ValueError, match="method"):
        spans.scale_score_grad(dS, q, k, v, method="fast")
    with pytest.raises(ValueError, match="dS"):
        spans.scale_score_grad(dS[..., :5], q, k, v)
    with pytest.raises(ValueError, match="k must"):
        spans.scale_score_grad(dS, q, k[..., :5, :], v)
    with pytest.raises(ValueError, match="qk4"):
        spans.core.scale_qk_grad(q, q, SpanConfig())
    with pytest.raises(ValueError, match="every"):
        spans.SpanProbe(every=0)
    with pytest.raises(ValueError, match="batch"):
        spans.capture_score_grads(make_model(), tiny_batch()[0])


def test_negative_alphas_are_allowed():
    dS, q, k, v = random_qkv(1, 1, 12, 3, 0)
    out = spans.scale_score_grad(dS, q, k, v, SpanConfig(alphas=[1, -1, 0, 0]))
    assert torch.isfinite(out).all()


def test_layers_select_where_hooks_go():
    model = make_model(SpanConfig(alphas="1000", layers=[1]))
    assert model.blocks[0].attn.score_grad_fn is None and model.blocks[1].attn.score_grad_fn is not None


def test_qk4_block_alphas_stay_fused_and_match_the_explicit_path_in_a_model():
    """S2 ≠ S3: the q/k hooks (fused attention) give the same weight gradients as the explicit score path."""
    block_alphas = [1.0, 0.0, 0.5, 9.0]
    score_fn, qk_fn = spans.fused.build_grad_fns(SpanConfig(preset="qk4", block_alphas=block_alphas))
    assert score_fn is None and qk_fn is not None
    fused = make_model(SpanConfig(preset="qk4", block_alphas=block_alphas, ridge=0.0))
    explicit = make_model(SpanConfig(preset="custom", slots=spans.config.PRESET_SLOTS["qk4"], block_alphas=block_alphas,
                                     ridge=0.0))
    explicit.load_state_dict(fused.state_dict())
    batch = tiny_batch()
    g_fused, g_explicit = grads_of(fused, batch)[2], grads_of(explicit, batch)[2]
    assert g_fused.keys() == g_explicit.keys()
    for name in g_fused:
        torch.testing.assert_close(g_fused[name], g_explicit[name], rtol=1e-4, atol=1e-6)
    plain = make_model()
    plain.load_state_dict(fused.state_dict())
    g_plain = grads_of(plain, batch)[2]
    assert not torch.allclose(g_fused["blocks.0.attn.W_Q.weight"], g_plain["blocks.0.attn.W_Q.weight"])
    with pytest.raises(ValueError, match="side"):
        spans.core.scale_qk_grad(torch.zeros(3, 2), torch.ones(3, 2), SpanConfig(preset="qk4"), side="v")


# ---------------------------------------------------------------------------------- diagnostics

def test_score_grad_blocks_and_state_restored():
    model = make_model(SpanConfig(alphas="1100"))
    model.train()
    batch = tiny_batch()
    _, loss = model(*batch)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    captures = spans.capture_score_grads(model, batch)
    reports = spans.score_grad_blocks(model, batch, captures=captures, sample=1)
    assert model.training
    assert all(torch.equal(p.grad, grads[n]) and torch.equal(p, params[n]) for n, p in model.named_parameters())
    assert all(b.attn.score_grad_fn is not None for b in model.blocks)
    H, T = TINY["n_head"], TINY["context_length"]
    for c, rep in zip(captures, reports):
        assert rep.names == spans.config.block_names("kv8") and rep.orders == spans.config.block_orders("kv8")
        assert rep.blocks.shape == (8, H, T, T) and rep.norms.shape == (8, H)
        torch.testing.assert_close(rep.blocks.sum(0), c.dS[1], atol=1e-6 * c.dS.abs().max(), rtol=0)
        torch.testing.assert_close(rep.order_share.sum(0), torch.ones(H))
        rows = rep.rows()
        assert len(rows) == 8 * H and {"layer", "head", "block", "order", "norm", "rel_norm"} <= set(rows[0])
        for h in range(H):  # the documented identity: the shares ‖block‖²/‖dS‖² sum to 1 (ridge: ≈ ε·κ)
            assert sum(r["rel_norm"] ** 2 for r in rows if r["head"] == h) == pytest.approx(1.0, abs=1e-4)


def test_principal_angles_and_condition():
    e = torch.eye(3, dtype=torch.float64)
    theta = 0.3
    X = e[:, :1]
    Y = (math.cos(theta) * e[:, 0] + math.sin(theta) * e[:, 1])[:, None]
    expected = torch.tensor([math.cos(theta)], dtype=torch.float64)
    torch.testing.assert_close(spans.principal_angle_cosines(X, Y), expected)
    torch.testing.assert_close(spans.principal_angle_cosines(e[:, :2], e[:, 2:]), torch.zeros(1, dtype=torch.float64))
    same = spans.principal_angle_cosines(e[:, :2], e[:, :2] * 3)
    torch.testing.assert_close(same, torch.ones(2, dtype=torch.float64))
    Z = torch.zeros(5, 2, dtype=torch.float64)
    Z[0, 0], Z[1, 1] = 4.0, 0.5
    assert spans.gram_condition(Z).item() == pytest.approx(64.0)
    assert math.isinf(spans.gram_condition(torch.randn(2, 3)).item())


def test_grad_alignment():
    model = make_model(SpanConfig(alphas="1000"))
    c = spans.capture_score_grads(model, tiny_batch())[0]
    one = spans.grad_alignment(c, SpanConfig())
    torch.testing.assert_close(one["cos_dq"], torch.ones(2))
    torch.testing.assert_close(one["ratio_dk"], torch.ones(2))
    low = spans.grad_alignment(c, SpanConfig(alphas="1000"))
    assert (low["ratio_dq"] < 1).all() and (low["cos_dq"] < 1).all()
    qk4 = spans.grad_alignment(c, SpanConfig(alphas="1000", preset="qk4"))
    assert (qk4["ratio_dq"] < 1).all()


def test_span_probe_protocol():
    model = make_model()  # standard gradient: the probe reports what kv8 [1000] would do
    trainer = SimpleNamespace(model=model, probe_batch=tiny_batch(B=2))
    probe = spans.SpanProbe(every=10, per_head=True)
    assert probe.name == "spans" and probe.every == 10
    out = probe(trainer)
    json.dumps(out, allow_nan=False)
    assert all(key.startswith("spans/") for key in out)
    for layer in range(TINY["n_layer"]):
        shares = [out[f"spans/L{layer}/share_order{o}"] for o in range(4)]
        assert sum(shares) == pytest.approx(1.0, abs=1e-5)
        assert 0 < out[f"spans/L{layer}/ratio_dq"] < 1
        assert 0 <= out[f"spans/L{layer}/cos_QK_min"] <= out[f"spans/L{layer}/cos_QK_mean"] <= 1
        assert out[f"spans/L{layer}/log10_cond_K"] > 0
        assert 0 <= out[f"spans/L{layer}/ridge_bias_K"] <= 1e-6 * 10 ** out[f"spans/L{layer}/log10_cond_K"] * 10
        assert f"spans/L{layer}/h1/cos_dq" in out
