"""Smoke test of the span-scaling sweep: structure of the table, [1111] ≈ standard, early input checks."""

from __future__ import annotations

import json

import pytest

from spanviz.experiments import spans as exp


@pytest.fixture(scope="module")
def tiny_data(wikitext_dir_module, tmp_path_factory):
    from spanviz.data import OFFLINE_SPLITS, prepare_tokens

    return prepare_tokens(wikitext_dir_module, splits=OFFLINE_SPLITS, max_vocab=1024,
                          cache_dir=tmp_path_factory.mktemp("tokens"))  # fmt: skip


@pytest.fixture(scope="module")
def wikitext_dir_module():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wikitext-2"
    if not path.is_dir():
        pytest.skip(f"WikiText-2 offline copy not found at {path}")
    return path


@pytest.mark.timeout(180)
def test_sweep_smoke(tiny_data, tmp_path):
    from spanviz.experiments.results import read_per_seed, save_sweep
    from spanviz.experiments.stats import compare_groups

    calls = []
    result = exp.spans_sweep(
        "cpu", seeds=2, steps=3, data=tiny_data, device="cpu",
        model=dict(d_model=32, context_length=64), train=dict(batch_size=4, eval_iters=2),
        progress=lambda done, total, label: calls.append((done, total, label)),
    )
    json.dumps(result)
    # 5 alphas variants + head sweep (1 and 4 heads; 2 heads reuses the alphas runs) + control, × 2 seeds
    assert len(result["per_seed"]) == 2 * (5 + 4 + 2) == calls[-1][0] == calls[-1][1]
    rows = result["rows"]
    assert [r["group"] for r in rows] == ["alphas"] * 5 + ["heads"] * 6 + ["control"] * 2
    assert [r["variant"] for r in rows[:5]] == ["standard", "[1111]", "[1110]", "[1100]", "[1000]"]
    assert [r["d_head"] for r in rows if r["group"] == "heads"] == [32, 32, 16, 16, 8, 8]
    for r in rows:
        assert {"variant", "mean", "std", "rel_change_pct", "t", "df", "p", "p_holm", "welch_p", "verdict",
                "n_head", "d_head"} <= set(r)  # fmt: skip
        assert r["n"] == 2 and r["mean"] is not None
    tested = [r for r in rows if r["verdict"] != "baseline"]
    assert all(r["n_pairs"] == 2 and r["df"] == 1 for r in tested)
    # Holm over the 7 distinct comparisons: the head sweep's 2-head pair is the alphas [1000] pair again
    distinct = {(r["variant"], r["p"]) for r in tested}
    assert len(distinct) == 7
    two_heads = next(r for r in rows if r["group"] == "heads" and r["n_head"] == 2 and r["variant"] == "[1000]")
    assert two_heads["p_holm"] == rows[4]["p_holm"]
    assert rows[0]["verdict"] == "baseline"
    # [1111] changes nothing but the attention path (explicit instead of fused): ~fp32 rounding
    assert abs(rows[1]["rel_change_pct"]) < 0.01
    assert result["data"]["splits"] == {"train": "validation", "eval": "test"}
    assert result["verdict"].startswith("[1000] vs standard") and "Holm" in result["verdict"]
    assert {"variant", "seed", "status", "best_val_loss", "d_head"} <= set(result["per_seed"][0])
    # the per-seed file written beside the summary reproduces every row
    _, per_seed_json, per_seed_csv = save_sweep(result, tmp_path / "spans.json")
    for path in (per_seed_json, per_seed_csv):
        again = compare_groups(read_per_seed(path), result["comparisons"])
        assert [(r["variant"], r["p_holm"], r["verdict"]) for r in again] == [
            (r["variant"], r["p_holm"], r["verdict"]) for r in rows]


def test_variants_are_what_the_doc_says():
    variants, comparisons = exp.build_variants("paper", vocab_size=100)
    assert variants["standard"][0].spans is None
    assert variants["[1000]"][0].spans.alphas == (1.0, 0.0, 0.0, 0.0)
    assert variants["[1000]"][0].spans.preset == "kv8"
    heads = [c["info"]["d_head"] for c in comparisons if c["group"] == "heads"]
    assert heads == [64, 32, 16]
    control = variants["control/[1000]"][0]
    assert (control.n_head, control.n_layer, control.d_model) == (1, 1, 256)
    cpu, _ = exp.build_variants("cpu", vocab_size=100)
    assert cpu["standard"][0].context_length > cpu["standard"][0].d_head  # projectors are not the identity


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(size="huge"), "size"),
        (dict(groups=("alphas", "nope")), "groups"),
        (dict(head_counts=(3,)), "head_counts"),
        (dict(steps=0), "steps"),
        (dict(seeds=0), "seeds"),
        (dict(seeds=[1, 1]), "seeds"),
    ],
)
def test_bad_arguments_fail_before_loading_data(kwargs, field):
    with pytest.raises(ValueError, match=field):
        exp.spans_sweep(**{"data_dir": "/nonexistent", **kwargs})
