"""FP8 strategies per row, power of two, MX blocks and 1×128 tiles (spanviz.fp8.strategies) against their sources."""

import math

import pytest
import torch

from spanviz.fp8 import FP8Probe
from spanviz.fp8.casting import count_overflow
from spanviz.fp8.strategies import (
    PRACTICAL,
    cast_stats,
    mx_scales,
    mx_shared_exponent,
    round_scale_down_to_power_of_2,
    rowwise_scales,
    scale_cost,
    tile_scales,
)
from spanviz.model import GPTConfig, TinyGPT


def test_e4m3_facts_from_torch():
    info = torch.finfo(torch.float8_e4m3fn)
    assert info.max == 448 and info.tiny == 2.0**-6 and info.smallest_normal == 2.0**-6
    # smallest subnormal 2^-9; half of it rounds to zero (ties to even), a bit more rounds up
    x = torch.tensor([2.0**-9, 2.0**-10, 2.0**-10 * 1.01, 2.0**-6 * 0.5]).to(torch.float8_e4m3fn).float()
    assert x.tolist() == [2.0**-9, 0.0, 2.0**-9, 2.0**-7]


def test_power_of_two_rounds_down_and_keeps_safety():
    s = torch.tensor([1.0, 3.0, 0.3, 448 / 5.0, 2.0**-20 * 1.5])
    p = round_scale_down_to_power_of_2(s)
    assert p.tolist() == [1.0, 2.0, 0.25, 64.0, 2.0**-20]
    assert torch.equal(torch.exp2(torch.log2(p).round()), p) and bool((p <= s).all()) and bool((p > s / 2).all())
    torch.manual_seed(0)
    x = torch.randn(8, 64) * 30
    rows = rowwise_scales(x)
    assert count_overflow(x, rows, count="range") == 0
    assert count_overflow(x, rowwise_scales(x, power_of_two=True), count="range") == 0
    with pytest.raises(ValueError, match="scale"):
        round_scale_down_to_power_of_2(0.0)


def test_rowwise_is_torchao_definition():
    x = torch.tensor([[1.0, -4.0, 2.0], [0.0, 0.0, 0.0]])
    s = rowwise_scales(x)
    assert s.shape == (2, 1) and s[0, 0] == 448 / 4.0 and s[1, 0] == 448 / 1e-12
    mask = torch.tensor([[True, False, True], [True, True, True]])
    assert rowwise_scales(x, mask)[0, 0] == 448 / 2.0  # amax over the allowed entries only


def test_mx_shared_exponent_rule():
    # X = floor(log2 amax) − 8 (E4M3's emax); zero block → FP32 min normal → clamped at −127; inf → NaN (0xFF)
    amax = torch.tensor([1.0, 1.5, 1.999, 2.0, 448.0, 0.0, 2.0**-140, 2.0**127, math.inf])
    got = mx_shared_exponent(amax)
    assert got[:8].tolist() == [-8, -8, -8, -7, 0, -127, -127, 119]
    assert math.isnan(got[8])
    # the stored scale goes through torch's E8M0: exact for every exponent in −127..127
    for e in (-127, -8, 0, 127):
        assert torch.tensor(2.0**e).to(torch.float8_e8m0fnu).float() == 2.0**e
    assert torch.isnan(torch.tensor(2.0**128).to(torch.float8_e8m0fnu).float())


def test_mx_top_of_block_is_clipped():
    # amax/2^X ∈ [256, 512), E4M3 holds ≤ 448 = 1.75·2^8: a block max with mantissa above 1.75 saturates
    block = torch.zeros(1, 64)
    block[0, 0], block[0, 1] = 1.9, 0.5  # block 0: X = −8, 1.9·256 = 486.4 > 464 → clipped to 448
    block[0, 32] = 1.8  # block 1: 1.8·256 = 460.8 → rounds to 448 (not an overflow, error 2.8 %)
    s = mx_scales(block)
    assert s.shape == (1, 64) and bool((s == 256).all())
    deq = (block * s).clamp(-448, 448).to(torch.float8_e4m3fn).float() / s
    assert deq[0, 0] == 1.75 and deq[0, 1] == 0.5 and deq[0, 32] == 1.75
    assert cast_stats(block, s)["overflow"] == 1
    # mantissa ≤ 1.75 fits exactly: 1.75·2^k is E4M3's max
    assert cast_stats(torch.tensor([[1.75, 0.1]]), mx_scales(torch.tensor([[1.75, 0.1]])))["overflow"] == 0


def test_tile_1x128_is_deepseek_act_quant():
    torch.manual_seed(1)
    x = torch.randn(2, 300)
    s = tile_scales(x)
    for t0 in (0, 128, 256):
        tile = x[:, t0:t0 + 128]
        ref = 448.0 / tile.abs().amax(dim=-1, keepdim=True)  # kernel.py: s = amax / 448, y = x / s
        assert torch.allclose(s[:, t0:t0 + tile.shape[1]], ref.expand_as(tile))
    assert torch.equal(tile_scales(x[:, :64]), rowwise_scales(x[:, :64]).expand(2, 64))  # T ≤ 128: = per row


def test_cast_stats_counts_and_errors():
    x = torch.tensor([[1e-4, 3e-3, 0.02, 1.0, 500.0, 0.0]])
    st = cast_stats(x, 1.0)
    # 1e-4 < 2^-10 → zero; 3e-3 ∈ [2^-9, 2^-6) → subnormal; 500 > 464 → overflow; 0 is not an underflow
    assert (st["overflow"], st["underflow_zero"], st["underflow_subnormal"]) == (1, 1, 1)
    assert st["error_scores"] > 0
    st = cast_stats(torch.tensor([[0.3, 1.0, 2.0]]), 1.0)  # 0.3 → 0.3125 (3 mantissa bits)
    p = torch.softmax(torch.tensor([0.3, 1.0, 2.0]), -1)
    p_hat = torch.softmax(torch.tensor([0.3125, 1.0, 2.0]), -1)
    assert st["error_softmax"] == pytest.approx(float((p_hat - p).norm() / p.norm()), rel=1e-5)
    assert st["error_scores"] == pytest.approx(0.0125 / math.sqrt(0.09 + 1 + 4), rel=1e-5)
    assert cast_stats(torch.tensor([[1.0, 2.0]]), 1.0) == {
        "overflow": 0, "underflow_zero": 0, "underflow_subnormal": 0, "error_scores": 0.0, "error_softmax": 0.0}


def test_scale_cost():
    shape = (8, 4, 64, 64)
    rows = 8 * 4 * 64
    assert scale_cost("dynamic", shape) == {"scales": 1, "reductions": 1}
    assert scale_cost("delayed", shape) == scale_cost("deterministic", shape) == {"scales": 1, "reductions": 0}
    assert scale_cost("rowwise", shape) == {"scales": rows, "reductions": rows}
    assert scale_cost("mx", shape) == {"scales": 2 * rows, "reductions": 2 * rows}
    assert scale_cost("tile_1x128", shape)["scales"] == rows
    with pytest.raises(ValueError, match="strategy"):
        scale_cost("nope", shape)


def _probe_out(**kw):
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(vocab_size=50, context_length=32, n_layer=2, n_head=2, d_model=32))

    class Trainer:
        pass

    t = Trainer()
    t.model, t.probe_batch = model, (torch.randint(0, 50, (3, 32)), None)
    return FP8Probe(**kw)(t)


def test_probe_records_practical_strategies_and_costs():
    out = _probe_out(strategies=("delayed", "dynamic", "deterministic"), practical=PRACTICAL)
    for s in ("delayed", "dynamic", "deterministic", *PRACTICAL):
        for stat in ("overflow", "underflow_zero", "underflow_subnormal", "error_scores", "error_softmax", "scales",
                     "reductions"):
            assert f"fp8/{stat}/{s}" in out
        # totals add up over layers
        assert out[f"fp8/underflow_zero/{s}"] == sum(out[f"fp8/L{i}/underflow_zero/{s}"] for i in range(2))
        assert out[f"fp8/error_softmax/{s}"] == max(out[f"fp8/L{i}/error_softmax/{s}"] for i in range(2))
    for s in ("rowwise", "rowwise_pow2", "tile_1x128", "dynamic", "deterministic"):  # never overflow here
        assert out[f"fp8/overflow/{s}"] == 0
    assert out["fp8/reductions/dynamic"] == 2 and out["fp8/reductions/deterministic"] == 0
    assert out["fp8/scales/rowwise"] == 2 * 3 * 2 * 32 and out["fp8/scales/mx"] == 2 * 3 * 2 * 32
    assert "fp8/L0/scale/mx" not in out
    # the store key of a probe without practical strategies is what it was
    assert "practical" not in FP8Probe().describe()
    assert FP8Probe(practical=["mx"]).describe()["practical"] == ["mx"]
    with pytest.raises(ValueError, match="practical"):
        FP8Probe(practical=("blocks",))
    with pytest.raises(ValueError, match="fmt"):
        FP8Probe(practical=("mx",), fmt="e5m2")
