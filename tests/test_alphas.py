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
    assert list(grid)[:2] == ["standard", "[1000]"] and len(grid) == 2 + 4 * len(alphas.VALUES)
    assert grid["standard"][0].spans is None
    assert grid["[1000]"][0].spans.alphas == (1.0, 0.0, 0.0, 0.0)
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
                           eval_ids=torch.randint(0, 64, (1000,), generator=g), describe=lambda: {"source": "synthetic"})
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
    paper = next(t for t in fig.data if t.name and "[1000]" in t.name)
    assert list(paper.y) == [pytest.approx(rows["[1000]"]["rel_change_pct"])]
    bars = next(t for t in fig.data if t.type == "bar")
    assert np.allclose(bars.y, [100 * result["shares"][o] for o in range(4)])
    styles = {(t.line.color, t.line.dash, t.marker.symbol) for t in fig.data if t.name and t.name.startswith("order")}
    assert len(styles) == 4


def test_the_caption_names_the_biggest_effect_first_and_hides_the_table(tiny):
    result, _ = tiny
    html = captions.alpha_response_caption(result["rows"], result["shares"])
    moved = [r for r in result["rows"] if r["order"] is not None]
    big = max(moved, key=lambda r: abs(r["rel_change_pct"]))
    assert html.index(f"α{big['order']} = {big['alpha']:g}") < html.index("<details>")
    assert html.count("<tr>") == len(result["rows"]) + 1 and "[1000]" in html


def test_the_view_replays_the_sweep_from_a_store_or_says_how_to_make_it(tiny):
    result, store = tiny
    view = AlphaResponse(response_records(store), static=False)
    drawn = view.views["response"].data
    assert any(t.get("type") == "bar" for t in drawn) and view.summary["rows"] == result["rows"]
    empty = AlphaResponse([])
    assert "spanviz sweep alphas" in empty.widget.value and not empty.views
