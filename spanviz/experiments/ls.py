"""LS-attention experiment (arXiv 2505.15548): does MHSA's max logit grow faster than LS-attention's?

Three variants of one tiny GPT, trained with a high learning rate at a long context, × seeds:

* ``mhsa`` — every head global (plain causal multi-head attention): the baseline;
* ``ls`` — the first ``n_local`` heads local (window p keys incl. self), the rest global;
* ``qk_norm`` — MHSA with QK-norm (RMSNorm of q and k per head), the stabiliser the paper compares with.

All variants use the same attention kernel (``attn_backend``: "sdpa" on CPU; "flex" for every variant on
CUDA when FlexAttention is available — the paper's baseline ran on another kernel than its method, a
confound avoided here). A :class:`spanviz.local_global.LogitProbe` measures max |q·k|/√d_head over allowed
pairs per layer and head on a fixed batch every ``probe_every`` updates.

Per run, from the probe's ``logits/max`` curve (max over layers and heads): ``peak_max_logit`` (its maximum
over the run), ``mean_max_logit`` (its mean over probed updates), ``final_max_logit``, and
``slope_per_100`` (least-squares slope, logit units per 100 updates). ``ls`` and ``qk_norm`` are compared with
``mhsa`` on the best validation loss and each of these metrics by a paired t-test over seeds (Welch beside it),
Holm-corrected across all ten comparisons of the sweep (:func:`spanviz.experiments.stats.compare_groups`); the
answer to "does MHSA's max logit grow faster?" comes from the peak (primary).

Offline, the data are WikiText-2's validation split for training and its test split for evaluation (the
run records say so). Source: spanviz's reconstruction of the paper's comparison (its tables are not
available; see ``docs/ls_attention.md``).
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
from spanviz.experiments.stats import compare_groups, describe_comparison
from spanviz.local_global.flex import FLEX_MIN_D_HEAD, flex_available
from spanviz.local_global.probe import LogitProbe
from spanviz.model import GPTConfig
from spanviz.train import RunRecord, TrainConfig
from spanviz.validators import check_choice, check_int

logger = logging.getLogger(__name__)

SIZES: dict[str, dict[str, Any]] = {
    "cpu": dict(
        model=dict(context_length=256, n_layer=2, n_head=4, d_model=64),
        ls=dict(n_local=3, window=32),
        train=dict(steps=150, batch_size=8, lr=1e-2, warmup_steps=10, eval_interval=50, eval_iters=4,
                   device="cpu", dtype="float32"),  # fmt: skip
        probe_every=10,
        tokenizer=dict(tokenizer="byte", max_vocab=None),
    ),
    "gpu": dict(  # the author's shape: 6 layers, d = 192, 6 heads × 32, 5 local + 1 global, p = 50, T = 2048
        model=dict(context_length=2048, n_layer=6, n_head=6, d_model=192),
        ls=dict(n_local=5, window=50),
        train=dict(steps=2000, batch_size=16, lr=6e-3, warmup_steps=100, eval_interval=200, eval_iters=10,
                   device="cuda", dtype="bfloat16"),  # fmt: skip
        probe_every=25,
        tokenizer=dict(tokenizer="word", max_vocab=8192),
    ),
}
"""Defaults per size. "cpu": a few minutes per seed on 2 cores (byte-level tokens). "gpu": the paper's shape."""

VARIANTS = ("mhsa", "ls", "qk_norm")
BASELINE = "mhsa"
GROWTH_METRICS = ("peak_max_logit", "mean_max_logit", "final_max_logit", "slope_per_100")


# ========================================================================================= run metrics
def _probe_curve(record: RunRecord, key: str = "logits/max") -> tuple[list[int], list[Any]]:
    steps, values = [], []
    for step, value in zip(record.history.get("step", []), record.history.get(key, [])):
        if value is not None:
            steps.append(step)
            values.append(value)
    return steps, values


def peak_max_logit(record: RunRecord) -> float | None:
    """Largest probed max logit of a run (max over layers, heads and probed updates); None if never probed."""
    _, values = _probe_curve(record)
    return max(values) if values else None


def mean_max_logit(record: RunRecord) -> float | None:
    """Mean over probed updates of the run's max logit (max over layers and heads)."""
    _, values = _probe_curve(record)
    return sum(values) / len(values) if values else None


def final_max_logit(record: RunRecord) -> float | None:
    """Max logit at the last probed update."""
    _, values = _probe_curve(record)
    return values[-1] if values else None


def slope_per_100(record: RunRecord) -> float | None:
    """Least-squares slope of the max-logit curve against the update index, per 100 updates (>= 2 probes)."""
    steps, values = _probe_curve(record)
    if len(values) < 2:
        return None
    ms, mv = sum(steps) / len(steps), sum(values) / len(values)
    var = sum((s - ms) ** 2 for s in steps)
    return 100.0 * sum((s - ms) * (v - mv) for s, v in zip(steps, values)) / var if var else None


_METRIC_FNS: dict[str, Callable[[RunRecord], float | None]] = {
    "peak_max_logit": peak_max_logit,
    "mean_max_logit": mean_max_logit,
    "final_max_logit": final_max_logit,
    "slope_per_100": slope_per_100,
}


def _head_group_peaks(record: RunRecord, n_local: int) -> dict[str, float | None]:
    """Peak max logit over local heads (h < n_local) and over global heads, across layers and updates."""
    _, per_head = _probe_curve(record, "logits/max_per_head")  # each: (n_layer) lists of (n_head)
    local = [v for layers in per_head for heads in layers for v in heads[:n_local]]
    glob = [v for layers in per_head for heads in layers for v in heads[n_local:]]
    return {"local_heads_peak": max(local) if local else None, "global_heads_peak": max(glob) if glob else None}


# ============================================================================================ the sweep
VARIANT_FIELDS = {
    "n_local": "the ls variant's local heads (give n_local=, >= 1; mhsa and qk_norm have none)",
    "window": "the ls variant's window p (give window=; mhsa and qk_norm have no local heads)",
    "qk_norm": "it is what the qk_norm variant changes (with it on everywhere, qk_norm would equal mhsa)",
}
"""GPTConfig fields that tell the variants apart: a model override may not set them for all three."""


def ls_variants(
    size: str = "cpu",
    vocab_size: int = 256,
    *,
    steps: int | None = None,
    model: Mapping[str, Any] | None = None,
    train: Mapping[str, Any] | None = None,
    n_local: int | None = None,
    window: int | None = None,
) -> dict[str, tuple[GPTConfig, TrainConfig]]:
    """The three variants ``mhsa``, ``ls``, ``qk_norm`` as (GPTConfig, TrainConfig) pairs for :func:`run_grid`.

    Args:
        size: "cpu" or "gpu" (see :data:`SIZES`). vocab_size: the data's vocabulary size.
        steps: updates per run (>= 1; default per size); warm-up is capped at steps // 10.
        model: GPTConfig overrides for every variant (e.g. ``{"context_length": 512}``).
        train: TrainConfig overrides for every variant (e.g. ``{"lr": 3e-2}``).
        n_local, window: the LS variant's split and window p (defaults per size).
    Returns:
        ``{"mhsa": ..., "ls": ..., "qk_norm": ...}``, all with one ``attn_backend``: "flex" when the device
        is not the CPU, FlexAttention is available and d_head >= 16, else "sdpa" (a ``model`` override of
        ``attn_backend`` wins).
    Raises:
        ValueError: unknown size, or as :class:`GPTConfig` / :class:`TrainConfig` raise.
    """
    check_choice("size", size, SIZES)
    spec = SIZES[size]
    train = check_train_overrides(train)
    defining = sorted(set(model or {}) & set(VARIANT_FIELDS))
    if defining:
        raise ValueError(f"model override {defining[0]}={(model or {})[defining[0]]!r} cannot apply to every variant: "
                         f"{VARIANT_FIELDS[defining[0]]}")
    if n_local is not None and (isinstance(n_local, bool) or not isinstance(n_local, int) or n_local < 1):
        raise ValueError(f"n_local must be an integer >= 1 (LS needs a local head; n_local=0 is the mhsa variant), "
                         f"got {n_local!r}")
    train_kw = dict(spec["train"])
    if steps is not None:
        check_int("steps", steps, 1)
        train_kw.update(steps=steps, warmup_steps=min(train_kw["warmup_steps"], steps // 10))
    train_kw.update(train)
    train_cfg = TrainConfig(**train_kw)
    base = GPTConfig(**{**spec["model"], "vocab_size": vocab_size, "attn_backend": "sdpa", **(model or {})})
    if (train_cfg.device != "cpu" and flex_available() and base.d_head >= FLEX_MIN_D_HEAD
            and "attn_backend" not in (model or {})):
        base = replace(base, attn_backend="flex")  # the same block-sparse kernel for every variant
    ls_kw = {**spec["ls"], **({} if n_local is None else {"n_local": n_local}),
             **({} if window is None else {"window": window})}  # fmt: skip
    return {
        "mhsa": (base, train_cfg),
        "ls": (replace(base, **ls_kw), train_cfg),
        "qk_norm": (replace(base, qk_norm=True), train_cfg),
    }


def ls_sweep(
    size: str = "cpu",
    seeds: int | Sequence[int] = 5,
    steps: int | None = None,
    data: Any = None,
    store: Any = None,
    progress: Callable[[int, int, str], None] | None = None,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    model: Mapping[str, Any] | None = None,
    train: Mapping[str, Any] | None = None,
    n_local: int | None = None,
    window: int | None = None,
    probe_every: int | None = None,
    executor: str | Executor = "local",
) -> dict[str, Any]:
    """Train MHSA vs LS-attention vs QK-norm × seeds; tabulate max-logit growth and loss; give a verdict.

    Args:
        size: "cpu" (T 256, 2 layers, d_model 64, 4 heads of 16 with 3 local p = 32, batch 8, 150 updates at
            lr 1e-2, byte tokens; minutes on 2 cores) or "gpu" (the author's shape: T 2048, 6 layers,
            d_model 192, 6 heads of 32, 5 local p = 50, batch 16, 2000 updates at lr 6e-3, bf16).
        seeds: a count n (seeds 0 … n−1) or explicit distinct seeds.
        steps: updates per run (default per size).
        data: a :class:`spanviz.data.TokenData`; None loads WikiText-2 with the size's tokenizer
            (:func:`spanviz.data.load_tokens`: the split policy of :mod:`spanviz.settings`; a folder, ``data_dir``
            or ``$SPANVIZ_WIKITEXT_DIR``, trains on validation and evaluates on test unless
            ``$SPANVIZ_TRAIN_SPLIT`` / ``$SPANVIZ_EVAL_SPLIT`` say otherwise).
        store: a :class:`spanviz.store.ResultsStore` (runs seen before replay instantly) or None.
        progress: ``fn(done, total, label)`` after each run.
        model, train, n_local, window: overrides (see :func:`ls_variants`).
        probe_every: LogitProbe period in updates (default per size).
        executor: where runs train: "local" (default), "ray", or an executor object (see
            :mod:`spanviz.experiments.executors`); checked before any data are loaded.
    Returns:
        dict with
        ``size``, ``seeds``, ``variants`` {name: {"model": dict, "train": dict}}, ``data`` (description);
        ``rows``: :func:`spanviz.experiments.stats.compare_groups` rows, one per (metric, variant) for
        ``best_val_loss`` and :data:`GROWTH_METRICS` (mean, std, min, max over seeds; paired difference vs
        MHSA with 95 % CI, t, df, p, Holm p across the sweep's 10 comparisons, Welch check, verdict);
        ``per_seed``: one row per run — variant, seed, status, best_val_loss, the run metrics,
        ``local_heads_peak`` / ``global_heads_peak`` — and ``comparisons`` (the specs that reproduce ``rows``
        from it); ``runs``: the same per run plus curves ``step``, ``train_loss``, ``val_loss`` (None where
        not evaluated), ``probe_step``, ``max_logit``, ``max_per_layer`` (per probe: list over layers);
        ``verdict``: plain sentences, and ``mhsa_grows_faster``: True / False / None (None = not resolved
        by these seeds at 5 % after Holm).
    Raises:
        ValueError: bad arguments (before any training), or as the trainer raises.
    Source: arXiv 2505.15548's comparison as reconstructed by spanviz.
    """
    seeds = seed_list(seeds)
    check_choice("size", size, SIZES)
    every = SIZES[size]["probe_every"] if probe_every is None else probe_every
    LogitProbe(every=every)  # validate before loading data or training
    executor = make_executor(executor)  # e.g. Ray missing: say so before loading data
    if data is None:
        data = load_tokens(data_dir, **SIZES[size]["tokenizer"])
    variants = ls_variants(size, data.vocab_size, steps=steps, model=model, train=train, n_local=n_local,
                           window=window)  # fmt: skip

    def probes_factory(name: str, cfg: GPTConfig) -> list[LogitProbe]:
        return [LogitProbe(every=every)]

    records = run_grid(variants, seeds, data, store=store, probes_factory=probes_factory, progress=progress,
                       tags={"experiment": "ls", "size": size}, executor=executor)  # fmt: skip
    summary = summarize_ls(records, variants["ls"][0].n_local)
    logger.info("ls_sweep: %s", summary["verdict"])
    return {
        "size": size,
        "seeds": seeds,
        "variants": {n: {"model": m.to_dict(), "train": t.to_dict()} for n, (m, t) in variants.items()},
        "data": data.describe(),
        **summary,
        "runs": [_run_summary(r, variants["ls"][0].n_local) for r in records],
    }


def summarize_ls(records: Sequence[RunRecord], n_local: int) -> dict[str, Any]:
    """The statistics of :func:`ls_sweep` from its run records (e.g. read back from a results store).

    Args:
        records: runs with ``config["variant"]`` in :data:`VARIANTS` and ``config["seed"]``.
        n_local: the LS variant's local heads (to split its peaks into local / global heads).
    Returns:
        ``{"rows", "per_seed", "comparisons", "verdict", "mhsa_grows_faster"}`` as in :func:`ls_sweep`; no
        rows (and an empty verdict) unless every variant is present.
    """
    table = per_seed_table(records, {"best_val_loss": "best_val_loss", **_METRIC_FNS},
                           info=lambda r: _head_group_peaks(r, n_local if r.config["variant"] == "ls" else 0))
    specs = [{"baseline": BASELINE, "variants": list(VARIANTS), "metric": m}
             for m in ("best_val_loss", *GROWTH_METRICS)]  # fmt: skip
    rows = compare_groups(table, specs) if {row["variant"] for row in table} == set(VARIANTS) else []
    verdict, grows_faster = growth_verdict(rows) if rows else ("", None)
    return {"rows": rows, "per_seed": table, "comparisons": specs, "verdict": verdict,
            "mhsa_grows_faster": grows_faster}


def _run_summary(record: RunRecord, ls_n_local: int) -> dict[str, Any]:
    h = record.history
    probe_step, max_logit = _probe_curve(record)
    _, per_layer = _probe_curve(record, "logits/max_per_layer")
    variant = record.config.get("variant")
    out: dict[str, Any] = {
        "variant": variant,
        "seed": record.config.get("seed"),
        "status": record.status,
        "best_val_loss": record.best_val_loss,
        **{name: fn(record) for name, fn in _METRIC_FNS.items()},
    }
    out.update(_head_group_peaks(record, ls_n_local if variant == "ls" else 0))
    out.update(step=list(h.get("step", [])), train_loss=list(h.get("train_loss", [])),
               val_loss=list(h.get("val_loss", [])), probe_step=probe_step, max_logit=max_logit,
               max_per_layer=per_layer)  # fmt: skip
    return out


def growth_verdict(rows: Sequence[Mapping[str, Any]]) -> tuple[str, bool | None]:
    """Plain-language verdict on "MHSA's max logit grows faster than LS's" from :func:`compare_groups` rows.

    Decision (on ``peak_max_logit``, the primary metric): the LS row's verdict "significant at 5 % after
    Holm: lower" (paired t-test over seeds, Holm-corrected across the sweep) → True; "... higher" → False;
    otherwise (within noise, or one seed) None. The sentence also reports ``mean_max_logit``, the best
    validation loss and the QK-norm variant, each with its test.

    Returns:
        (sentence, True / False / None).
    Raises:
        ValueError: rows lack the ``peak_max_logit`` rows of ``mhsa`` and ``ls``.
    """
    by = {(r["variant"], r["metric"]): r for r in rows}
    if ("mhsa", "peak_max_logit") not in by or ("ls", "peak_max_logit") not in by:
        raise ValueError("rows must hold peak_max_logit rows for variants 'mhsa' and 'ls' (from ls_sweep)")

    def stat(variant: str, metric: str) -> str:
        row = by.get((variant, metric))
        if row is None or row["mean"] is None:
            return f"{variant} n/a"
        spread = f" ± {row['std']:.3g}" if row["std"] is not None else ""
        return f"{variant} {row['mean']:.3g}{spread}"

    def test(variant: str, metric: str) -> str:
        row = by.get((variant, metric))
        return "n/a" if row is None else describe_comparison(row)

    ls_peak = by[("ls", "peak_max_logit")]["verdict"]
    if ls_peak.startswith("significant") and ": lower" in ls_peak:
        answer, decided = "yes: LS's peak max logit is lower than MHSA's (significant at 5 % after Holm)", True
    elif ls_peak.startswith("significant"):
        answer, decided = "no: LS's peak max logit is higher than MHSA's (significant at 5 % after Holm)", False
    else:
        answer, decided = f"not resolved ({ls_peak})", None
    n = by[("mhsa", "peak_max_logit")]["n_runs"]
    parts = [
        f"Does MHSA's max logit grow faster than LS's? {answer}.",
        f"Peak max logit (mean ± std over {n} seed(s)): {stat('mhsa', 'peak_max_logit')}, "
        f"{stat('ls', 'peak_max_logit')}, {stat('qk_norm', 'peak_max_logit')}; LS vs MHSA "
        f"{test('ls', 'peak_max_logit')}.",
        f"Mean max logit over training: {stat('mhsa', 'mean_max_logit')}, {stat('ls', 'mean_max_logit')}, "
        f"{stat('qk_norm', 'mean_max_logit')}; LS vs MHSA {test('ls', 'mean_max_logit')}.",
        f"Best val loss: {stat('mhsa', 'best_val_loss')}, {stat('ls', 'best_val_loss')}, "
        f"{stat('qk_norm', 'best_val_loss')} nats; LS vs MHSA {test('ls', 'best_val_loss')}; QK-norm vs MHSA "
        f"{test('qk_norm', 'best_val_loss')}.",
    ]
    return " ".join(parts), decided


__all__ = ["GROWTH_METRICS", "SIZES", "VARIANTS", "growth_verdict", "ls_sweep", "ls_variants", "summarize_ls",
           "final_max_logit", "mean_max_logit", "peak_max_logit", "slope_per_100"]  # fmt: skip
