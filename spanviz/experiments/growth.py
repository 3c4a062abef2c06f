"""The logit-growth lab (notebook 02): raise the learning rate until attention logits grow, and compare what stops it.

Wortsman et al., "Small-scale proxies for large-scale Transformer training instabilities" (arXiv 2309.14322), make
attention-logit growth appear in small models by raising the learning rate, and show the final loss against the
learning rate ("LR sensitivity"), one curve per variant. spanviz does the same at CPU size — notebook 02's model
(2 layers, 4 heads, d_model 64, T 128, batch 16, word-level WikiText-2), 150 updates per run — for MHSA and the
fixes practitioners use, each with the setting of its source:

=============  =====================================================  =========================================
variant        what changes                                           source
=============  =====================================================  =========================================
``mhsa``       nothing: every head global (the baseline)              —
``ls``         3 of 4 heads local (window p 16), 1 global, per layer  LS-attention, arXiv 2505.15548
``layers``     layer 0 all local (p 16), layer 1 global               Gemma 3's 5:1 pattern, arXiv 2503.19786
``qk_norm``    RMSNorm of q and k per head                            OLMo 2; Wortsman et al. (QK-layernorm)
``softcap``    S ← 50·tanh(S/50) before the softmax                   Gemma 2, arXiv 2408.00118
``qk_clip``    W^Q_h, W^K_h scaled back when a logit passes τ = 100    Kimi K2's MuonClip, arXiv 2507.20534
=============  =====================================================  =========================================

Per run: ``final_val_loss`` (the last evaluation; None for a run that diverged) and ``peak_max_logit`` — the
largest max |q·k|/√d_head over layers, heads and probed updates (:class:`spanviz.local_global.LogitProbe`, on a
fixed batch every ``probe_every`` updates; for ``softcap`` the logits *before* the cap: what the softmax sees is
below 50). Each variant is compared with MHSA at each learning rate on the final loss and on log10 of the peak (a
multiplicative quantity), paired by seed, Holm-corrected across the whole sweep
(:func:`spanviz.experiments.stats.compare_groups`).

Source: the protocol of arXiv 2309.14322 (§3.1, LR sensitivity) at spanviz's CPU size; the settings of each
variant from its paper (the table above); the code is spanviz's.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from spanviz import local_global
from spanviz.data.tokens import load_tokens
from spanviz.experiments.core import check_train_overrides, run_grid, seed_list
from spanviz.experiments.executors import Executor, make_executor
from spanviz.experiments.ls import peak_max_logit
from spanviz.experiments.results import per_seed_table
from spanviz.experiments.stats import compare_groups
from spanviz.model import GPTConfig
from spanviz.train import RunRecord, TrainConfig
from spanviz.validators import check_choice, check_float

logger = logging.getLogger(__name__)

SIZES: dict[str, dict[str, Any]] = {
    "cpu": dict(
        model=dict(context_length=128, n_layer=2, n_head=4, d_model=64),
        train=dict(steps=150, batch_size=16, warmup_steps=15, eval_interval=50, eval_iters=4, device="cpu",
                   dtype="float32"),  # fmt: skip
        lrs=(3e-3, 1e-2, 3e-2, 1e-1, 3e-1),
        probe_every=10,
        tokenizer=dict(tokenizer="word", max_vocab=8192),
    ),
}
"""Defaults per size. "cpu": notebook 02's model; ~35 s per run on one core; 6 variants × 5 learning rates."""

VARIANTS: dict[str, dict[str, Any]] = {
    "mhsa": {},
    "ls": {"n_local": 3, "window": 16},
    "layers": {"global_every": 2, "window": 16},
    "qk_norm": {"qk_norm": True},
    "softcap": {"logit_softcap": 50.0},
    "qk_clip": {"qk_clip": 100.0},
}
"""Variant → the GPTConfig fields it sets on the base model (the table of the module docstring)."""
BASELINE = "mhsa"
LABELS = {
    "mhsa": "MHSA", "ls": "LS heads: 3 local (p 16) + 1 global", "layers": "local/global layers (Gemma 3)",
    "qk_norm": "QK-norm (OLMo 2)", "softcap": "soft-cap 50 (Gemma 2)", "qk_clip": "QK-Clip τ 100 (Kimi K2)",
}  # fmt: skip
"""The names the figure and the text use."""
SOURCES = {
    "ls": "arXiv 2505.15548", "layers": "Gemma 3, arXiv 2503.19786", "qk_norm": "OLMo 2, arXiv 2501.00656",
    "softcap": "Gemma 2, arXiv 2408.00118", "qk_clip": "Kimi K2, arXiv 2507.20534",
}  # fmt: skip
METRICS = ("final_val_loss", "peak_max_logit", "log10_peak_max_logit")
"""The per-run metrics. The peak grows multiplicatively (×10³ between learning rates), so its test is on log10 of it
— a paired difference of log10 peaks is a ratio; ``peak_max_logit`` itself is described (mean, std, min, max)."""
TESTED = ("final_val_loss", "log10_peak_max_logit")
"""The metrics compared with MHSA (one Holm family across every learning rate)."""


def final_val_loss(record: RunRecord) -> float | None:
    """The last validation loss of a run [nats] (None if never evaluated or not finite)."""
    values = [v for v in record.history.get("val_loss", []) if v is not None]
    return values[-1] if values and math.isfinite(values[-1]) else None


def log10_peak_max_logit(record: RunRecord) -> float | None:
    """log10 of :func:`spanviz.experiments.ls.peak_max_logit` (None when never probed or not positive)."""
    peak = peak_max_logit(record)
    return math.log10(peak) if peak is not None and peak > 0 else None


def run_name(variant: str, lr: float) -> str:
    """The grid's name of one (variant, learning rate) cell, e.g. ``"qk_norm lr=0.03"`` (part of the store key)."""
    return f"{variant} lr={lr:g}"


def check_lrs(lrs: Sequence[float]) -> list[float]:
    """Distinct learning rates > 0, sorted. Raises: ValueError naming ``lrs``, the value and what is allowed."""
    if isinstance(lrs, (str, bytes)) or not isinstance(lrs, Sequence) or not lrs:
        raise ValueError(f"lrs must be a non-empty list of learning rates > 0, got {lrs!r}")
    values = [check_float(f"lrs[{i}]", lr, 0.0, 10.0, low_open=True) for i, lr in enumerate(lrs)]
    if len({f"{v:g}" for v in values}) != len(values):
        raise ValueError(f"lrs must be distinct (as written with 6 significant digits), got {list(lrs)}")
    return sorted(values)


def growth_variants(
    size: str = "cpu",
    vocab_size: int = 8192,
    *,
    lrs: Sequence[float] | None = None,
    variants: Sequence[str] | None = None,
    steps: int | None = None,
    model: Mapping[str, Any] | None = None,
    train: Mapping[str, Any] | None = None,
) -> dict[str, tuple[GPTConfig, TrainConfig]]:
    """Every (variant, learning rate) of the lab as ``{run_name: (GPTConfig, TrainConfig)}`` for :func:`run_grid`.

    Args:
        size: "cpu" (:data:`SIZES`). vocab_size: the data's. lrs: peak learning rates (default per size).
        variants: names from :data:`VARIANTS` (default all, in that order; without ``mhsa`` no comparison is made,
            e.g. to train a part of the lab in another process: the whole lab then replays from the store).
        steps: updates per run (default per size; the warm-up stays 10 % of it). model, train: overrides for
            every run (GPTConfig / TrainConfig fields; not the fields the variants set, nor ``lr``).
    Raises:
        ValueError: unknown size or variant, bad lrs, an override a variant sets, or as the configs raise.
    """
    check_choice("size", size, SIZES)
    spec = SIZES[size]
    lrs = check_lrs(spec["lrs"] if lrs is None else lrs)
    names = list(VARIANTS) if variants is None else [check_choice("variants", v, VARIANTS) for v in variants]
    names = list(dict.fromkeys(names))
    if not names:
        raise ValueError(f"variants must name at least one of {tuple(VARIANTS)}, got {variants!r}")
    train = check_train_overrides(train)
    if "lr" in train:
        raise ValueError(f"train override lr={train['lr']!r} cannot apply: the lab sets each run's lr from lrs")
    fixed = sorted({k for v in VARIANTS.values() for k in v} & set(model or {}))
    if fixed:
        raise ValueError(f"model override {fixed[0]}={(model or {})[fixed[0]]!r} cannot apply to every variant: "
                         f"a variant of the lab sets it")
    train_kw = dict(spec["train"])
    if steps is not None:
        train_kw.update(steps=steps, warmup_steps=min(train_kw["warmup_steps"], steps // 10))
    base_train = TrainConfig(**{**train_kw, **train})
    base = GPTConfig(**{**spec["model"], "vocab_size": vocab_size, "attn_backend": "sdpa", **(model or {})})
    return {run_name(name, lr): (replace(base, **VARIANTS[name]), replace(base_train, lr=lr))
            for name in names for lr in lrs}  # fmt: skip


def growth_sweep(
    size: str = "cpu",
    seeds: int | Sequence[int] = 5,
    steps: int | None = None,
    data: Any = None,
    store: Any = None,
    progress: Callable[[int, int, str], None] | None = None,
    *,
    lrs: Sequence[float] | None = None,
    variants: Sequence[str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    model: Mapping[str, Any] | None = None,
    train: Mapping[str, Any] | None = None,
    probe_every: int | None = None,
    executor: str | Executor = "local",
) -> dict[str, Any]:
    """Train every variant at every learning rate × seeds; final loss and peak max logit against the learning rate.

    Args:
        size, lrs, variants, steps, model, train: see :func:`growth_variants`. seeds: a count n (0 … n−1) or
            explicit seeds. data: a :class:`spanviz.data.TokenData` (None loads WikiText-2 with the size's
            tokenizer, ``data_dir`` or the split policy of :mod:`spanviz.settings`). store: a results store (runs
            seen before replay at once) or None. progress: ``fn(done, total, label)`` after each run.
            probe_every: the LogitProbe period (default per size). executor: "local", "ray" or an executor.
    Returns:
        :func:`summarize_growth`'s dict plus ``size``, ``seeds``, ``lrs``, ``variants`` (name → model / train of its
        first learning rate), ``data`` (description) and ``runs`` (per run: variant, lr, seed, status, the metrics,
        and the curves ``step``, ``val_loss``, ``probe_step``, ``max_logit``).
    Raises:
        ValueError: bad arguments (before any data are read or anything is trained), or as the trainer raises.
    Source: arXiv 2309.14322's LR-sensitivity protocol at spanviz's CPU size (module docstring).
    """
    seeds = seed_list(seeds)
    check_choice("size", size, SIZES)
    every = SIZES[size]["probe_every"] if probe_every is None else probe_every
    local_global.LogitProbe(every=every)  # validate before loading data
    growth_variants(size, lrs=lrs, variants=variants, steps=steps, model=model, train=train)  # validate, likewise
    executor = make_executor(executor)
    if data is None:
        data = load_tokens(data_dir, **SIZES[size]["tokenizer"])
    grid = growth_variants(size, data.vocab_size, lrs=lrs, variants=variants, steps=steps, model=model, train=train)

    def probes_factory(name: str, cfg: GPTConfig) -> list[local_global.LogitProbe]:
        return [local_global.LogitProbe(every=every, entropy=False)]

    records = run_grid(grid, seeds, data, store=store, probes_factory=probes_factory, progress=progress,
                       tags={"experiment": "growth", "size": size}, executor=executor)  # fmt: skip
    summary = summarize_growth(records)
    logger.info("growth_sweep: %s", summary["verdict"])
    firsts = {name.split(" ")[0]: (m, t) for name, (m, t) in reversed(list(grid.items()))}
    return {
        "size": size, "seeds": seeds, "lrs": sorted({t.lr for _, t in grid.values()}),
        "variants": {n: {"model": m.to_dict(), "train": t.to_dict()} for n, (m, t) in reversed(list(firsts.items()))},
        "data": data.describe(), **summary, "runs": [run_summary(r) for r in records],
    }  # fmt: skip


def cell_of(record: RunRecord) -> dict[str, Any]:
    """``{"variant": name, "lr": lr}`` of a lab run (from its grid name and its train config)."""
    return {"variant": str(record.config["variant"]).split(" ")[0], "lr": float(record.config["train"]["lr"])}


def summarize_growth(records: Sequence[RunRecord]) -> dict[str, Any]:
    """The statistics of :func:`growth_sweep` from its run records (e.g. read back from a results store, in any
    order: they are put in grid order, variant as in :data:`VARIANTS`, then learning rate, then seed).

    Returns:
        ``rows`` (:func:`compare_groups` rows: per metric, learning rate and variant — mean, std, min, max over
        seeds; for the :data:`TESTED` metrics the paired comparison with MHSA at that learning rate, Holm p across
        the sweep, verdict; each row has ``lr``), ``per_seed`` (one row per run: variant, lr, seed, status, the
        :data:`METRICS`), ``comparisons`` (the specs that recompute ``rows`` from ``per_seed``) and ``verdict`` (plain sentences).
    """
    def place(record: RunRecord) -> tuple[Any, ...]:  # grid order: variant (as in VARIANTS), lr, seed
        cell = cell_of(record)
        rank = list(VARIANTS).index(cell["variant"]) if cell["variant"] in VARIANTS else len(VARIANTS)
        return rank, cell["variant"], cell["lr"], record.config.get("seed", 0)

    table = per_seed_table(sorted(records, key=place), {"final_val_loss": final_val_loss, "peak_max_logit":
                                                         peak_max_logit, "log10_peak_max_logit": log10_peak_max_logit},
                           info=cell_of)  # fmt: skip
    names = list(dict.fromkeys(row["variant"] for row in table))
    lrs = sorted({row["lr"] for row in table})
    baseline = BASELINE if BASELINE in names else None
    specs = [{"baseline": baseline if m in TESTED else None, "variants": names, "metric": m, "where": {"lr": lr},
              "lr": lr} for m in METRICS for lr in lrs]  # fmt: skip
    rows = compare_groups(table, specs) if table else []
    return {"rows": rows, "per_seed": table, "comparisons": specs, "verdict": growth_lab_verdict(rows)}


def growth_lab_verdict(rows: Sequence[Mapping[str, Any]]) -> str:
    """Plain sentences from :func:`summarize_growth`'s rows: how far MHSA's peak max logit and final loss moved from
    the lowest to the highest learning rate, and each variant's peak at the highest rate against MHSA's."""
    by = {(r["variant"], r["metric"], r["lr"]): r for r in rows}
    lrs = sorted({r["lr"] for r in rows})
    if not lrs or (BASELINE, "peak_max_logit", lrs[0]) not in by:
        return ""
    lo, hi = lrs[0], lrs[-1]

    def mean(variant: str, metric: str, lr: float) -> float | None:
        row = by.get((variant, metric, lr))
        return None if row is None else row["mean"]

    peak_lo, peak_hi = mean(BASELINE, "peak_max_logit", lo), mean(BASELINE, "peak_max_logit", hi)
    loss_lo, loss_hi = mean(BASELINE, "final_val_loss", lo), mean(BASELINE, "final_val_loss", hi)
    parts = []
    if peak_lo is not None and peak_hi is not None:
        parts.append(f"From lr {lo:g} to {hi:g} MHSA's peak max logit went from {peak_lo:.3g} to {peak_hi:.3g} "
                     f"({peak_hi / peak_lo:.3g}×).")
    if loss_lo is not None and loss_hi is not None:
        parts.append(f"Its final validation loss went from {loss_lo:.3f} to {loss_hi:.3f} nats.")
    for name in [v for v in dict.fromkeys(r["variant"] for r in rows) if v != BASELINE]:
        row, test = by.get((name, "peak_max_logit", hi)), by.get((name, "log10_peak_max_logit", hi))
        if row is not None and row["mean"] is not None and peak_hi:
            verdict = f"; log10 peak {test['verdict']}" if test is not None else ""
            parts.append(f"At lr {hi:g}, {LABELS.get(name, name)}: peak {row['mean']:.3g} "
                         f"({row['mean'] / peak_hi:.2g}× MHSA's{verdict}).")
    return " ".join(parts)


def run_summary(record: RunRecord) -> dict[str, Any]:
    """One run of the lab: its cell, seed, status, metrics and the curves a figure draws."""
    h = record.history
    probe = [(s, v) for s, v in zip(h.get("step", []), h.get("logits/max", [])) if v is not None]
    return {**cell_of(record), "seed": record.config.get("seed"), "status": record.status,
            "final_val_loss": final_val_loss(record), "peak_max_logit": peak_max_logit(record),
            "step": list(h.get("step", [])), "val_loss": list(h.get("val_loss", [])),
            "probe_step": [s for s, _ in probe], "max_logit": [v for _, v in probe]}  # fmt: skip


__all__ = ["BASELINE", "LABELS", "METRICS", "SIZES", "SOURCES", "TESTED", "VARIANTS", "check_lrs", "final_val_loss",
           "log10_peak_max_logit",
           "growth_lab_verdict", "growth_sweep", "growth_variants", "run_name", "run_summary", "summarize_growth"]
