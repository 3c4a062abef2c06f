"""The α-response sweep (notebook 01): its grid, a tiny sweep, the statistics, the figure's drawn data and the view."""

from __future__ import annotations

import json

import numpy as np
import pytest

from spanviz.experiments import alphas
from spanviz.plots.alphas import alpha_response_figure
from spanviz.widgets import captions
from spanviz.widgets.alphas import AlphaResponse, response_records


def test_the_grid_moves_one_order_at_a_time_and_keeps_the_papers_point():
    grid = alphas.alphas_variants(vocab_size=100)
    assert list(grid)[:3] == ["standard", "[1000]", "[0000]"] and len(grid) == 3 + 4 * len(alphas.VALUES)
    assert grid["standard"][0].spans is None
    assert grid["[1000]"][0].spans.alphas == (1.0, 0.0, 0.0, 0.0)
    assert grid["[0000]"][0].spans.alphas == (0.0, 0.0, 0.0, 0.0)
    for order in alphas.ORDERS:
        for value in alphas.VALUES:
            cfg = grid[alphas.variant_name(order, value)][0].spans
            assert cfg.preset == "kv8" and cfg.alphas == tuple(value if o == order else 1.0 for o in alphas.ORDERS)
    trains = {t for _, t in grid.values()}
    assert len(trains) == 1 and next(iter(trains)).steps == 200  # one schedule: the curves differ only by α


@pytest.mark.parametrize("kwargs, field", [
    ({"values": []}, "values"), ({"values": [0.0, 1.0]}, "leave out 1"), ({"values": [0.0, 0.0]}, "distinct"),
    ({"values": [-1.0]}, r"values\[0\]"), ({"size": "paper"}, "size"), ({"steps": 0}, "steps"),
    ({"model": {"spans": None}}, "spans"), ({"train": {"seed": 3}}, "seed"),
])  # fmt: skip
def test_bad_grids_are_refused_before_anything_is_trained(kwargs, field, synthetic):
    with pytest.raises(ValueError, match=field):
        alphas.alphas_sweep(data=synthetic, seeds=1, **kwargs)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from types import SimpleNamespace

    import torch

    from spanviz.store import ResultsStore

    g = torch.Generator().manual_seed(0)
    data = SimpleNamespace(train_ids=torch.randint(0, 64, (4000,), generator=g), vocab_size=64,
                           eval_ids=torch.randint(0, 64, (1000,), generator=g),
                           describe=lambda: {"source": "synthetic"})
    store = ResultsStore(tmp_path_factory.mktemp("alphas") / "runs")
    result = alphas.alphas_sweep(seeds=2, steps=4, data=data, values=[0.0, 2.0], store=store,
                                 model={"context_length": 16, "d_model": 32}, train={"batch_size": 2, "eval_iters": 1})
    return result, store


def test_a_tiny_sweep_compares_every_point_with_standard_and_measures_the_shares(tiny):
    result, _ = tiny
    json.dumps(result)
    rows = {r["variant"]: r for r in result["rows"]}
    assert rows["standard"]["verdict"] == "baseline" and rows["standard"]["order"] is None
    assert rows["[1000]"]["alpha"] is None and rows["α2=0"]["order"] == 2 and rows["α2=0"]["alpha"] == 0.0
    per_seed = {(r["variant"], r["seed"]): r["best_val_loss"] for r in result["per_seed"]}
    diffs = [per_seed[("α0=2", s)] - per_seed[("standard", s)] for s in (0, 1)]
    assert rows["α0=2"]["diff"] == pytest.approx(np.mean(diffs))
    assert set(result["shares"]) == {0, 1, 2, 3} and sum(result["shares"].values()) == pytest.approx(1.0, abs=1e-5)
    assert "Order 0" in result["verdict"]


def test_the_figure_draws_each_orders_changes_through_the_standard_point(tiny):
    result, _ = tiny
    fig = alpha_response_figure(result["rows"], result["shares"])
    rows = {r["variant"]: r for r in result["rows"]}
    order1 = next(t for t in fig.data if t.name and t.name.startswith("order 1"))
    assert list(order1.x) == [0.0, 1.0, 2.0]
    assert np.allclose(order1.y, [rows["α1=0"]["rel_change_pct"], 0.0, rows["α1=2"]["rel_change_pct"]])
    assert np.allclose(order1.error_y.array[0], rows["α1=0"]["rel_ci_high_pct"] - rows["α1=0"]["rel_change_pct"])
    for name in ("[1000]", "[0000]"):
        point = next(t for t in fig.data if t.name and name in t.name)
        assert list(point.y) == [pytest.approx(rows[name]["rel_change_pct"])] and list(point.x) == [0.0]
    bars = next(t for t in fig.data if t.type == "bar")
    assert np.allclose(bars.y, [100 * result["shares"][o] for o in range(4)])
    styles = {(t.line.color, t.line.dash, t.marker.symbol) for t in fig.data if t.name and t.name.startswith("order")}
    assert len(styles) == 4


def test_the_caption_leads_with_what_the_curves_show_then_the_yardstick_and_hides_the_table(tiny):
    result, _ = tiny
    html = captions.alpha_response_caption(result["rows"], result["shares"])
    rows = {r["variant"]: r for r in result["rows"]}
    moved = [r for r in result["rows"] if r["order"] is not None]
    first = html.split("<br>")[0]
    if all(r["verdict"].startswith("within noise") for r in moved):
        low = min(r["rel_change_pct"] for r in moved)
        assert "flat" in first and f"{low:+.2f}".replace("-", "−") in first
    else:
        big = max(moved, key=lambda r: abs(r["rel_change_pct"]))
        assert f"α{big['order']} = {big['alpha']:g}" in first
    off = f"{rows['[0000]']['rel_change_pct']:+.2f}".replace("-", "−")
    assert off in html and html.index(off) < html.index("<details>")
    assert html.count("<tr>") == len(result["rows"]) + 1 and "[1000]" in html


def test_a_flat_sweep_is_said_to_be_flat():
    def row(variant, order, alpha, change, verdict):
        ci = (None, None) if change is None else (change - 1, change + 1)
        return {"variant": variant, "order": order, "alpha": alpha, "mean": 5.0, "rel_change_pct": change,
                "rel_ci_low_pct": ci[0], "rel_ci_high_pct": ci[1], "verdict": verdict, "n_runs": 3}

    rows = [row("standard", None, 1.0, None, "baseline"), row("[0000]", None, None, 12.0, "significant"),
            row("α0=0", 0, 0.0, 0.3, "within noise"), row("α1=2", 1, 2.0, -0.2, "within noise")]
    html = captions.alpha_response_caption(rows, {0: 0.1, 1: 0.9})
    assert "flat" in html.split("<br>")[0] and "+12.00 %" in html


def test_the_view_replays_the_sweep_from_a_store_or_says_how_to_make_it(tiny):
    result, store = tiny
    view = AlphaResponse(response_records(store), static=False)
    drawn = view.views["response"].data
    assert any(t.get("type") == "bar" for t in drawn) and view.summary["rows"] == result["rows"]
    empty = AlphaResponse([])
    assert "spanviz sweep alphas" in empty.widget.value and not empty.views
