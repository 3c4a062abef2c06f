"""What α does to training (notebook 01): the best validation loss against each α_o, the others at 1, over seeds.

Span / violation scaling (arXiv 2512.13033) splits the score gradient dS into blocks of orders 0..3 and scales order
o by α_o in the backward pass (``kv8``: spanviz's reconstruction). The paper reports one setting, [1000], against
standard. This sweep asks the larger question a student can see: how much does the model's final quality move when
one order's block is removed (α_o = 0) or doubled (α_o = 2) — the α *response curves* — and how much of
‖dS‖² does each order carry (the :class:`spanviz.spans.SpanProbe`'s energy shares, measured on the standard runs)?

Runs: the spans sweep's CPU size (d_model 64, 2 layers, 2 heads of d_head 32, T 128, batch 8, lr 2·10⁻³, 200
updates, word-level WikiText-2): "standard" (no hooks; α = 1 everywhere is the same gradient) and, for each order
o and each value v of :data:`VALUES`, α_o = v with the other orders at 1. Each is compared with standard, paired by
seed, Holm-corrected across the sweep (:func:`spanviz.experiments.stats.compare_groups`).

Source: spanviz's experiment around arXiv 2512.13033's α scaling. The paper's [1000] (α1 = α2 = α3 = 0: three
orders removed at once, so no point of the one-order curves) is trained beside them with the same seeds, and so is
[0000] (no score gradient at all): the largest effect α can have, the yardstick of the others.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from spanviz.data.tokens import load_tokens
from spanviz.experiments.core import check_train_overrides, run_grid, seed_list
from spanviz.experiments.executors import Executor, make_executor
from spanviz.experiments.results import per_seed_table
from spanviz.experiments.spans import SIZE_DEFAULTS
from spanviz.experiments.stats import compare_groups
from spanviz.model import GPTConfig
from spanviz.spans import SpanConfig, SpanProbe
from spanviz.train import RunRecord, TrainConfig
from spanviz.validators import check_choice, check_float, check_int

logger = logging.getLogger(__name__)

SIZES = ("cpu",)
VALUES = (0.0, 2.0)
"""The α_o tried for each order by default — the order's block removed, or doubled — (1 is the standard run, shared
by the four curves); ``values=(0, 0.5, 1.5, 2)`` draws finer curves at twice the cost."""
ORDERS = (0, 1, 2, 3)
BASELINE = "standard"
PAPER = "[1000]"
"""The paper's setting (α0 = 1, α1 = α2 = α3 = 0), trained beside the curves with the same seeds."""
NO_SCORE_GRAD = "[0000]"
"""Every order removed: no gradient reaches W^Q, W^K through the scores — the largest effect α can have, the scale
against which the one-order changes are read."""
REFERENCES = {PAPER: "1000", NO_SCORE_GRAD: "0000"}
SHARE_EVERY = 50
"""Updates between the energy-share measurements of the standard runs."""


def variant_name(order: int, value: float) -> str:
    """The grid's name of one point, e.g. ``"α0=0.5"`` (part of the store key)."""
    return f"α{order}={value:g}"


def point_of(record: RunRecord) -> dict[str, Any]:
    """``{"order": o or None, "alpha": α_o}`` of a run (standard: order None, α 1)."""
    return point_of_name(str(record.config.get("variant")))


def alphas_variants(size: str = "cpu", vocab_size: int = 8192, *, values: Sequence[float] = VALUES,
                    steps: int | None = None, model: Mapping[str, Any] | None = None,
                    train: Mapping[str, Any] | None = None) -> dict[str, tuple[GPTConfig, TrainConfig]]:
    """``{"standard": ..., "[1000]": ..., "[0000]": ..., "α0=0": ..., ...}``: the standard run, the paper's [1000], the
    score gradient switched off ([0000]) and one run per (order, value), kv8 preset.

    model, train: GPTConfig / TrainConfig overrides for every run (not ``spans``; not the grid's seed or steps).
    Raises: ValueError for an unknown size, values that are empty, repeat, include 1 or lie outside [0, 10],
    steps < 1, or an override that cannot apply.
    """
    check_choice("size", size, SIZES)
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise ValueError(f"values must be a non-empty list of α in [0, 10] other than 1, got {values!r}")
    values = [check_float(f"values[{i}]", v, 0.0, 10.0) for i, v in enumerate(values)]
    if 1.0 in values or len(set(values)) != len(values):
        raise ValueError(f"values must be distinct and leave out 1 (the standard run is α = 1), got {values}")
    spec = SIZE_DEFAULTS[size]
    if "spans" in (model or {}):
        raise ValueError("model override spans cannot apply: the sweep sets each run's α (give values=)")
    train_kw = dict(spec["train"], device="cpu", **check_train_overrides(train))
    if steps is not None:
        check_int("steps", steps, 1)
        train_kw.update(steps=steps, eval_interval=max(1, steps // 4), warmup_steps=min(train_kw["warmup_steps"],
                                                                                         steps // 10))
    train = TrainConfig(**train_kw)
    base = GPTConfig(**{**spec["model"], "vocab_size": vocab_size, **(model or {})})
    grid = {BASELINE: (base, train)}
    for name, digits in REFERENCES.items():
        grid[name] = (replace(base, spans=SpanConfig(alphas=digits, preset="kv8")), train)
    for order in ORDERS:
        for value in sorted(values):
            alphas = tuple(value if o == order else 1.0 for o in ORDERS)
            grid[variant_name(order, value)] = (replace(base, spans=SpanConfig(alphas=alphas, preset="kv8")), train)
    return grid


def alphas_sweep(
    size: str = "cpu",
    seeds: int | Sequence[int] = 3,
    steps: int | None = None,
    data: Any = None,
    store: Any = None,
    progress: Callable[[int, int, str], None] | None = None,
    *,
    values: Sequence[float] = VALUES,
    model: Mapping[str, Any] | None = None,
    train: Mapping[str, Any] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    executor: str | Executor = "local",
) -> dict[str, Any]:
    """Train the α response curves × seeds; the change of best validation loss against standard per (order, α).

    Args:
        size: "cpu". seeds: a count n (0 … n−1) or explicit seeds. steps: updates per run (default 200).
        data: a :class:`spanviz.data.TokenData` (None: WikiText-2, word-level vocabulary of 8192, through the split
            policy of :mod:`spanviz.settings`, or ``data_dir``). store: a results store or None. progress:
            ``fn(done, total, label)``. values: the α_o tried per order. model, train: overrides for every run
            (see :func:`alphas_variants`). executor: "local", "ray" or an executor.
    Returns:
        ``{"size", "seeds", "values", "data", "rows", "per_seed", "comparisons", "shares", "verdict"}``: ``rows``
        from :func:`compare_groups` (best validation loss per variant, paired change against standard with its CI,
        Holm across the sweep; each row with ``order`` and ``alpha``); ``per_seed`` one row per run; ``shares``
        {order: mean energy share of ‖dS‖² over layers, seeds and measurements of the standard runs}.
    Raises:
        ValueError: bad arguments, before any data are read.
    """
    seeds = seed_list(seeds)
    alphas_variants(size, values=values, steps=steps, model=model, train=train)
    executor = make_executor(executor)
    if data is None:
        data = load_tokens(data_dir, max_vocab=8192)
    grid = alphas_variants(size, data.vocab_size, values=values, steps=steps, model=model, train=train)
    every = min(SHARE_EVERY, grid[BASELINE][1].steps)

    def probes(name: str, cfg: GPTConfig) -> list[SpanProbe]:  # shares of ‖dS‖² per order, on the standard runs
        return [SpanProbe(every=every, cfg=SpanConfig(preset="kv8"))] if name == BASELINE else []

    records = run_grid(grid, seeds, data, store=store, probes_factory=probes, progress=progress,
                       tags={"experiment": "alphas", "size": size}, executor=executor)  # fmt: skip
    return {"size": size, "seeds": seeds, "values": sorted(values), "data": data.describe(),
            **summarize_alphas(records)}  # fmt: skip


def order_shares(records: Sequence[RunRecord]) -> dict[int, float]:
    """{order: mean over layers, seeds and measurements of the energy share ‖D_o‖²/‖dS‖²} of the standard runs."""
    sums: dict[int, list[float]] = {}
    for record in records:
        if record.config.get("variant") != BASELINE:
            continue
        for key, column in record.history.items():
            if key.startswith("spans/L") and "/share_order" in key and "/h" not in key:
                order = int(key.rsplit("share_order", 1)[1])
                sums.setdefault(order, []).extend(v for v in column if v is not None)
    return {o: sum(v) / len(v) for o, v in sorted(sums.items()) if v}


def summarize_alphas(records: Sequence[RunRecord]) -> dict[str, Any]:
    """The statistics of :func:`alphas_sweep` from its records (e.g. read back from a results store, in any order:
    they are put in grid order — standard, [1000], [0000], then by order and α — and by seed first)."""

    def place(record: RunRecord) -> tuple[Any, ...]:
        point = point_of(record)
        name = record.config.get("variant")
        return (name != BASELINE, name != PAPER, name != NO_SCORE_GRAD, point["order"] or 0,
                point["alpha"] or 0.0, record.config.get("seed", 0))

    table = per_seed_table(sorted(records, key=place), ("best_val_loss",), info=point_of)
    names = list(dict.fromkeys(row["variant"] for row in table))
    specs = [{"baseline": BASELINE if BASELINE in names else None, "variants": names, "metric": "best_val_loss"}]
    rows = compare_groups(table, specs) if table else []
    points = {row["variant"]: point_of_name(row["variant"]) for row in table}
    rows = [{**row, **points[row["variant"]]} for row in rows]
    shares = order_shares(records)
    return {"rows": rows, "per_seed": table, "comparisons": specs, "shares": shares,
            "verdict": alphas_verdict(rows, shares)}


def point_of_name(name: str) -> dict[str, Any]:
    """:func:`point_of` from a variant name alone."""
    if name == BASELINE:
        return {"order": None, "alpha": 1.0}
    if name in REFERENCES:
        return {"order": None, "alpha": None}
    order, _, value = name[1:].partition("=")
    return {"order": int(order), "alpha": float(value)}


def alphas_verdict(rows: Sequence[dict[str, Any]], shares: dict[int, float]) -> str:
    """Plain sentences: per order, the largest change of best validation loss against standard over the α tried
    (with its verdict), and the order's share of ‖dS‖²."""
    parts = []
    for order in ORDERS:
        mine = [r for r in rows if r.get("order") == order and r.get("rel_change_pct") is not None]
        if not mine:
            continue
        worst = max(mine, key=lambda r: abs(r["rel_change_pct"]))
        share = f" (it carries {100 * shares[order]:.3g} % of ‖dS‖²)" if order in shares else ""
        parts.append(f"Order {order}{share}: the largest change is {worst['rel_change_pct']:+.2f} % at α{order} = "
                     f"{worst['alpha']:g} ({worst['verdict']}).")
    return " ".join(parts)


__all__ = ["BASELINE", "NO_SCORE_GRAD", "ORDERS", "PAPER", "REFERENCES", "SIZES", "VALUES", "alphas_sweep",
           "alphas_variants", "alphas_verdict", "order_shares", "point_of", "summarize_alphas", "variant_name"]
