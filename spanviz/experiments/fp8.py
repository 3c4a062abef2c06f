"""FP8 transients experiment (arXiv 2602.18851): delayed vs geometry-aware scaling of attention logits.

The paper reports (without numbers) transient scenarios — loading other weights mid-run, checkpoint
resumption, learning-rate spikes — in which Transformer Engine's delayed scaling overflows (its scale comes
from past amaxes) while a scale computed from the current weights does not. Here a tiny GPT trains on
WikiText-2 with an :class:`spanviz.fp8.FP8Probe` on every update, and a transient is injected:

* ``"lr_spike"``: the learning rate is multiplied by ``lr_spike_factor`` for ``lr_spike_steps`` updates
  (``TrainConfig.lr_spike_*``);
* ``"weight_swap"``: a :class:`WeightSwap` callback loads another checkpoint's weights, or multiplies the
  query projection of one layer (or all) by ``scale_wq`` — a controlled stand-in for "load weights whose
  logits are larger";
* ``"none"``: no transient (the baseline: what plain training does to delayed scaling).

Beside delayed scaling and the geometry-aware scales the sweep records dynamic (current-amax) scaling, the
default of today's FP8 training libraries (torchao removed delayed scaling): it never overflows, and what it costs
— a max-reduction over the logits before every cast — is not something an fp32 simulation counts.

Everything is simulated in fp32: overflows are counted on S·s before any cast, as the entries a
non-saturating E4M3 cast would turn into NaN (:func:`spanviz.fp8.count_overflow`, ``count="cast"``).
Offline (a local folder), train on the validation split and evaluate on the test split (the split policy of
:mod:`spanviz.settings`); the run config says so.

:func:`fp8_sweep` runs every scenario × margin × seed through :func:`spanviz.experiments.core.run_grid` (runs
kept in and replayed from a results store), tabulates the overflow counts per run and strategy (the per-seed
table), and compares each strategy with delayed scaling on the overflows during the transient window: paired
t-test over seeds (runs of one seed share everything but the strategy, which only observes), Welch beside it,
Holm-corrected across all comparisons of the sweep. :func:`fp8_transients` is one scenario of it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from spanviz import fp8
from spanviz.data.tokens import load_tokens
from spanviz.experiments.core import check_train_overrides, run_grid, seed_list
from spanviz.experiments.executors import Executor, make_executor
from spanviz.experiments.fp8_runs import CAST_METRICS, METRIC, alpha_obs, overflow_rows, sweep_verdict
from spanviz.experiments.results import format_table
from spanviz.experiments.stats import compare_groups
from spanviz.model import GPTConfig, LowRankQuery
from spanviz.train import TrainConfig
from spanviz.validators import check_choice, check_float, check_int

logger = logging.getLogger(__name__)

SCENARIOS = ("lr_spike", "weight_swap", "none")
SIZES = ("cpu",)
STRATEGIES = ("delayed", "dynamic", "theory", "deterministic", "calibrated")
"""The strategies the experiment compares; "delayed" is the baseline of every comparison. "dynamic" (current
amax, per tensor: what torchao and Transformer Engine's current scaling do) cannot overflow, and pays for it with
a reduction over all logits before each cast; the geometry-aware ones need only the weights."""

DEFAULT_MODEL = dict(context_length=64, n_layer=2, n_head=4, d_model=64)
"""A CPU-sized tiny GPT (``vocab_size`` comes from the data)."""

DEFAULT_TRAIN = dict(batch_size=8, lr=1e-3, warmup_steps=10, eval_iters=2, weight_decay=0.1, grad_clip=1.0)
"""Training defaults; ``steps``, ``seed``, ``device``, ``eval_interval`` and the spike are set per run."""


class WeightSwap:
    """Trainer callback ``cb(trainer, row)``: a sudden weight change after update ``at_step``.

    Exactly one of:
        checkpoint_path: load the model weights of that checkpoint (a spanviz checkpoint, whose ``"model"``
            entry is used, or a plain state dict) — "loading pretrained weights mid-run";
        scale_wq: multiply the query projection (weight and bias; for a low-rank query its up-projection
            and bias) of ``layer`` (None = every layer) by this factor, which multiplies that layer's
            attention logits by exactly ``scale_wq``.

    The change happens in the callback after the update whose row has ``step == at_step``; update
    ``at_step + 1`` is the first to run, and its probes the first to measure, on the new weights.
    The optimizer state is kept (as when weights are swapped under a running optimizer).

    Attributes: ``applied_at`` (the update after which it fired, or None).
    Raises: ValueError on bad arguments (both or neither of checkpoint_path / scale_wq, scale_wq <= 0,
        at_step < 0, negative layer) and, when firing, for a layer index out of range.
    Source: spanviz's rendering of the paper's "weight swap" transient.
    """

    def __init__(
        self,
        at_step: int,
        checkpoint_path: str | os.PathLike[str] | None = None,
        scale_wq: float | None = None,
        layer: int | None = None,
    ) -> None:
        check_int("at_step", at_step, 0)
        if (checkpoint_path is None) == (scale_wq is None):
            raise ValueError(
                f"give exactly one of checkpoint_path and scale_wq, got checkpoint_path={checkpoint_path!r}, "
                f"scale_wq={scale_wq!r}"
            )
        if scale_wq is not None:
            check_float("scale_wq", scale_wq, 0, low_open=True)
        if layer is not None:  # None: every layer
            check_int("layer", layer, 0)
        self.at_step = at_step
        self.checkpoint_path = None if checkpoint_path is None else str(checkpoint_path)
        self.scale_wq = None if scale_wq is None else float(scale_wq)
        self.layer = layer
        self.applied_at: int | None = None

    def __call__(self, trainer: Any, row: Mapping[str, Any]) -> None:
        if self.applied_at is not None or row.get("step") != self.at_step:
            return
        model = trainer.model
        if self.checkpoint_path is not None:
            state = torch.load(self.checkpoint_path, map_location="cpu", weights_only=True)
            model.load_state_dict(state["model"] if isinstance(state, dict) and "model" in state else state)
        else:
            n_layer = len(model.blocks)
            if self.layer is not None and self.layer >= n_layer:
                raise ValueError(f"layer must be in [0, {n_layer}) for this model, got {self.layer}")
            layers = range(n_layer) if self.layer is None else [self.layer]
            with torch.no_grad():
                for i in layers:
                    q = model.blocks[i].attn.W_Q
                    weight = q.up if isinstance(q, LowRankQuery) else q.weight
                    weight.mul_(self.scale_wq)
                    if q.bias is not None:
                        q.bias.mul_(self.scale_wq)
        self.applied_at = self.at_step
        logger.info("weight swap after update %d (%s)", self.at_step,
                    self.checkpoint_path or f"W_Q × {self.scale_wq:g}, layer {self.layer}")  # fmt: skip


@dataclass(frozen=True)
class Transient:
    """The sudden change injected into a run, for :func:`fp8_sweep` and :func:`fp8_transients`.

    Attributes:
        at_step: the update at which it starts (None: steps // 2): the LR spike's first update, or the update after
            which the weights are swapped (the first affected probe is at_step + 1).
        lr_spike_factor, lr_spike_steps: the spike (scenario "lr_spike": the LR × factor for that many updates).
        scale_wq, checkpoint_path, layer: the swap (scenario "weight_swap"; see :class:`WeightSwap`;
            ``checkpoint_path`` wins over ``scale_wq`` when given).
    Checked where used (:func:`fp8_sweep`, before any data are loaded).
    """

    at_step: int | None = None
    lr_spike_factor: float = 20.0
    lr_spike_steps: int = 5
    scale_wq: float | None = 4.0
    checkpoint_path: str | os.PathLike[str] | None = None
    layer: int | None = None


@dataclass(frozen=True)
class ProbeSettings:
    """What the runs' :class:`spanviz.fp8.FP8Probe` measures (its margin is the sweep's axis).

    Attributes:
        strategies: the scaling strategies compared (:data:`STRATEGIES`). practical: the fine-grained ones
            (:data:`spanviz.fp8.strategies.PRACTICAL`: per row, per row rounded to a power of two, MX blocks of 32,
            1×128 tiles), with their underflows, cast errors and costs. delta, fmt, history_len, burn_in: the probe's.
    """

    strategies: Sequence[str] = STRATEGIES
    practical: Sequence[str] = ()
    delta: float = 1e-3
    fmt: str = "e4m3"
    history_len: int = 1024
    burn_in: int = 20

    def probe(self, margin: float) -> fp8.FP8Probe:
        """The probe of one run: every update, at ``margin``. Raises ValueError on bad settings."""
        return fp8.FP8Probe(every=1, delta=self.delta, margin=margin, strategies=tuple(self.strategies),
                            fmt=self.fmt, history_len=self.history_len, burn_in=self.burn_in,
                            practical=tuple(self.practical))


def variant_name(scenario: str, margin: float) -> str:
    """The sweep's name of one scenario at one margin, e.g. "lr_spike/margin=0"."""
    return f"{scenario}/margin={margin:g}"


def fp8_sweep(
    size: str = "cpu",
    seeds: int | Sequence[int] = 5,
    steps: int | None = None,
    data: Any = None,
    store: Any = None,
    progress: Callable[[int, int, str], None] | None = None,
    *,
    scenarios: Sequence[str] = ("none", "lr_spike", "weight_swap"),
    margins: Sequence[float] = (0, 1),
    transient: Transient = Transient(),
    probe: ProbeSettings = ProbeSettings(),
    model: Mapping[str, Any] | None = None,
    train: Mapping[str, Any] | None = None,
    device: str = "cpu",
    window: int = 10,
    data_dir: str | os.PathLike[str] | None = None,
    max_vocab: int | None = 8192,
    callbacks: Sequence[Callable[[Any, dict[str, Any]], None]] = (),
    executor: str | Executor = "local",
) -> dict[str, Any]:
    """Scenarios × margins × seeds with an FP8 probe on every update; overflow counts per strategy, tested.

    Args:
        size: "cpu" (the only size: d_model 64, 2 layers, 4 heads, T 64, batch 8, word vocabulary <= 8192).
        seeds: a count n (seeds 0..n−1) or distinct seeds >= 0. steps: updates per run (default 100, >= 2).
        data: a :class:`spanviz.data.TokenData`; None loads WikiText-2 with ``max_vocab`` through
            :func:`spanviz.data.load_tokens` (the split policy of :mod:`spanviz.settings`: a folder, ``data_dir``
            or ``$SPANVIZ_WIKITEXT_DIR``, trains on validation and evaluates on test unless
            ``$SPANVIZ_TRAIN_SPLIT`` / ``$SPANVIZ_EVAL_SPLIT`` say otherwise; no folder: the hub).
        store: a :class:`spanviz.store.ResultsStore` to replay / keep runs; None trains everything.
        progress: ``fn(done, total, label)`` after each run.
        scenarios: any of "none", "lr_spike", "weight_swap". margins: delayed-scaling and geometry margins
            (the probe's ``margin``, applied to every strategy), each >= 0.
        transient: the change injected (:class:`Transient`: when, the spike, the swap).
        probe: what the probe measures (:class:`ProbeSettings`); with ``probe.practical``, the per-seed table gets
            a row for each fine-grained strategy, every strategy is also compared with delayed on
            :data:`~.fp8_runs.CAST_METRICS` (underflows and errors of the cast), and per-seed ``scales`` /
            ``reductions`` give each one's cost per update.
        model, train: :data:`DEFAULT_MODEL` / :data:`DEFAULT_TRAIN` overrides. device: TrainConfig device.
        window: updates counted as "during the transient" from the first affected update, >= 1.
        callbacks: extra trainer callbacks for every trained run (e.g. per-update progress).
        executor: where runs train: "local" (default), "ray", or an executor object (see
            :mod:`spanviz.experiments.executors`); checked before any data are loaded.
    Returns:
        dict with ``rows`` (:func:`~spanviz.experiments.stats.compare_groups` rows: per scenario and margin,
        each strategy vs "delayed" on :data:`METRIC` — paired difference with 95 % CI, t, df, p, Holm p
        across the sweep, Welch check, verdict), ``per_seed`` (one row per run and strategy: variant,
        scenario, margin, seed, status, strategy, overflow_before / overflow_during / overflow_after,
        steps_with_overflow, first_overflow_step, median_utilisation, alpha_obs_median, alpha_obs_max),
        ``comparisons`` (the specs that reproduce ``rows`` from ``per_seed``), ``runs`` (per run: variant,
        scenario, margin, seed, status, history of step, train_loss, lr and every ``fp8/`` column),
        ``verdict`` (one sentence per scenario and margin), ``event_step``, ``window``, ``strategies``,
        ``variants`` ({name: {"model", "train"}}), ``settings`` and ``data`` (its description).
        A diverged run keeps its counts up to the divergence; its status says so.
    Raises:
        ValueError: bad arguments (unknown size or scenario, steps < 2, at_step outside [0, steps − 2],
            bad seeds, margins or window, ...) before any data are loaded, or as the trainer / probe raise.
    Source: arXiv 2602.18851's transient scenarios, spanviz's setup and statistics.
    """
    check_choice("size", size, SIZES)
    seeds = seed_list(seeds)
    steps = 100 if steps is None else steps
    check_int("steps", steps, 2)
    scenarios = tuple(scenarios)
    if not scenarios or len(set(scenarios)) != len(scenarios):
        raise ValueError(f"scenarios must be a non-empty selection of distinct names from {SCENARIOS}, got {scenarios}")
    for scenario in scenarios:
        check_choice("scenarios", scenario, SCENARIOS)
    margins = tuple(margins)
    if not margins or len(set(margins)) != len(margins):
        raise ValueError(f"margins must be a non-empty sequence of distinct numbers >= 0, got {margins}")
    train = check_train_overrides(train)
    if train.get("device", device) != device and device != "cpu":
        raise ValueError(f"device={device!r} and the train override device={train['device']!r} disagree; give one")
    if not isinstance(transient, Transient) or not isinstance(probe, ProbeSettings):
        raise ValueError(f"transient must be a Transient and probe a ProbeSettings, got {type(transient).__name__} "
                         f"and {type(probe).__name__}")
    at_step = steps // 2 if transient.at_step is None else transient.at_step
    check_int("at_step", at_step, 0, steps - 2)
    check_int("window", window, 1)
    strategies, practical = tuple(probe.strategies), tuple(probe.practical)
    for margin in margins:
        probe.probe(margin)  # validates margin, delta, strategies, ... before loading data
    checkpoint_path, layer = transient.checkpoint_path, transient.layer
    swap_scale = None if checkpoint_path is not None else transient.scale_wq
    if "weight_swap" in scenarios:
        WeightSwap(at_step, checkpoint_path=checkpoint_path, scale_wq=swap_scale, layer=layer)  # validate early
    executor = make_executor(executor)  # e.g. Ray missing: say so before loading data
    if data is None:
        data = load_tokens(data_dir, max_vocab=max_vocab)

    model_cfg = GPTConfig(**{**DEFAULT_MODEL, "vocab_size": data.vocab_size, **(model or {})})
    train_kw: dict[str, Any] = {**DEFAULT_TRAIN, "eval_interval": steps, "device": device, **train}
    if "warmup_steps" not in train:  # short runs: warm-up capped at steps // 10, as the other sweeps do
        train_kw["warmup_steps"] = min(train_kw["warmup_steps"], steps // 10)
    base_train = TrainConfig(**{**train_kw, "steps": steps})
    spike = dict(lr_spike_factor=transient.lr_spike_factor, lr_spike_start=at_step,
                 lr_spike_steps=transient.lr_spike_steps)
    variants: dict[str, tuple[GPTConfig, TrainConfig]] = {}
    setting: dict[str, tuple[str, float]] = {}
    for scenario in scenarios:
        for margin in margins:
            name = variant_name(scenario, margin)
            variants[name] = (model_cfg, replace(base_train, **spike) if scenario == "lr_spike" else base_train)
            setting[name] = (scenario, margin)

    def swaps(name: str) -> list[WeightSwap]:
        if setting[name][0] != "weight_swap":
            return []
        return [WeightSwap(at_step, checkpoint_path=checkpoint_path, scale_wq=swap_scale, layer=layer)]

    injected = {"at_step": at_step, "scale_wq": swap_scale, "layer": layer,
                 "checkpoint_path": None if checkpoint_path is None else str(checkpoint_path)}  # fmt: skip
    records = run_grid(variants, seeds, data, store=store, progress=progress, callbacks=callbacks,
                       probes_factory=lambda name, cfg: [probe.probe(setting[name][1])], callbacks_factory=swaps,
                       tags={"experiment": "fp8", "size": size, "transient": injected}, executor=executor)  # fmt: skip
    event = {s: (at_step + 1 if s == "weight_swap" else at_step) for s in scenarios}
    table, runs = [], []
    for record in records:
        name = record.config["variant"]
        scenario, margin = setting[name]
        history = {k: list(v) for k, v in record.history.items()
                   if k in ("step", "train_loss", "lr") or k.startswith("fp8/")}  # fmt: skip
        head = {"variant": name, "scenario": scenario, "margin": margin, "seed": record.config["seed"],
                "status": record.status}  # fmt: skip
        runs.append({**head, "history": history})
        alpha = alpha_obs(record, model_cfg.n_layer)
        names = (*strategies, *practical)
        for row in overflow_rows(history, head["seed"], names, event[scenario], window, model_cfg.n_layer):
            table.append({**head, **row, **alpha})
    done = {row["variant"] for row in table}
    metrics = (METRIC, *CAST_METRICS) if practical else (METRIC,)
    specs = [
        {"scenario": setting[name][0], "margin": setting[name][1], "where": {"variant": name}, "by": "strategy",
         "baseline": "delayed" if "delayed" in strategies else None, "variants": [*strategies, *practical],
         "metric": metric}
        for metric in metrics
        for name in variants
        if name in done
    ]  # fmt: skip
    rows = compare_groups(table, specs) if specs else []
    return {
        "rows": rows,
        "per_seed": table,
        "comparisons": specs,
        "runs": runs,
        "verdict": sweep_verdict(table, rows, [*strategies, *practical]),
        "event_step": event,
        "window": window,
        "strategies": [*strategies, *practical],
        "variants": {n: {"model": m.to_dict(), "train": t.to_dict()} for n, (m, t) in variants.items()},
        "settings": {"size": size, "seeds": seeds, "steps": steps, "scenarios": list(scenarios),
                     "margins": list(margins), "fmt": probe.fmt, "delta": probe.delta,
                     "history_len": probe.history_len, "practical": list(practical), "burn_in": probe.burn_in,
                     "lr_spike_factor": transient.lr_spike_factor, "lr_spike_steps": transient.lr_spike_steps,
                     **injected},  # fmt: skip
        "data": data.describe(),
    }


def fp8_transients(
    scenario: str = "lr_spike",
    *,
    steps: int = 200,
    seeds: Sequence[int] = (0,),
    data: Any = None,
    data_dir: str | os.PathLike[str] | None = None,
    max_vocab: int | None = 8192,
    transient: Transient = Transient(),
    probe: ProbeSettings = ProbeSettings(),
    margin: float = 0,
    model: Mapping[str, Any] | None = None,
    train: Mapping[str, Any] | None = None,
    device: str = "cpu",
    window: int = 10,
    store: Any = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """One scenario at one margin of :func:`fp8_sweep`: train with an FP8 probe on every update, inject a
    transient, count overflows per strategy.

    Args:
        scenario: "lr_spike", "weight_swap" or "none".
        steps: updates per run, >= 2. seeds: one run per seed (non-empty, distinct).
        data: a :class:`spanviz.data.TokenData`; None loads WikiText-2 as :func:`fp8_sweep` does.
            max_vocab: word cap.
        transient: the change injected (:class:`Transient`). probe: what the probe measures
            (:class:`ProbeSettings`); margin: its margin.
        model: :class:`GPTConfig` overrides of :data:`DEFAULT_MODEL` (``vocab_size`` defaults to the data's).
        train: :class:`spanviz.train.TrainConfig` overrides of :data:`DEFAULT_TRAIN`.
        device: "cpu", "cuda", "auto", ... window: updates counted as "during the transient" from the
            first affected update, >= 1. store: a results store (replay / keep runs) or None.
        progress: optional ``fn(row)`` after every trained update (rows carry the run's seed under "seed").
    Returns:
        dict with ``scenario``, ``event_step`` (first affected update), ``window``, ``strategies``,
        ``model`` / ``train`` (configs as dicts, per the first seed), ``data`` (its description),
        ``runs`` (per seed: ``seed``, ``history`` with step, train_loss, lr and every ``fp8/`` column,
        ``status``), ``summary``: the per-seed rows of :func:`fp8_sweep` (one per seed and strategy:
        ``overflow_before`` (overflowing logits before the event), ``overflow_during`` (in the window),
        ``overflow_after``, ``steps_with_overflow`` (any layer), ``first_overflow_step`` (or None),
        ``median_utilisation`` (amax·s/fmax, max over layers, median over steps), α_obs), and ``rows`` /
        ``verdict`` (each strategy vs delayed; needs >= 2 seeds to test).
    Raises:
        ValueError: bad arguments (unknown scenario, steps < 2, at_step outside [0, steps − 2], empty
            seeds, ...), or as raised by the trainer / probe.
    Source: arXiv 2602.18851's transient scenarios, spanviz's setup.
    """
    check_choice("scenario", scenario, SCENARIOS)
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must be a non-empty sequence of integers")
    hooks = []
    if progress is not None:
        hooks.append(lambda trainer, row: progress({**row, "seed": trainer.train_cfg.seed}))
    result = fp8_sweep(
        "cpu", seeds=seeds, steps=steps, data=data, store=store, scenarios=(scenario,), margins=(margin,),
        transient=transient, probe=probe, model=model, train=train, device=device, window=window,
        data_dir=data_dir, max_vocab=max_vocab, callbacks=hooks,
    )
    [spec] = result["variants"].values()
    return {
        "scenario": scenario,
        "event_step": result["event_step"][scenario],
        "window": window,
        "strategies": result["strategies"],
        "model": spec["model"],
        "train": {**spec["train"], "seed": seeds[0]},
        "data": result["data"],
        "runs": [{"seed": r["seed"], "status": r["status"], "history": r["history"]} for r in result["runs"]],
        "summary": result["per_seed"],
        "rows": result["rows"],
        "verdict": result["verdict"],
    }


def format_summary(result: Mapping[str, Any]) -> str:
    """A plain-text table of ``result["summary"]`` (for logs, the CLI and docs), under one line of settings."""
    cols = ("seed", "strategy", "overflow_before", "overflow_during", "overflow_after", "steps_with_overflow",
            "first_overflow_step", "median_utilisation")  # fmt: skip
    head = f"scenario={result['scenario']} event_step={result['event_step']} window={result['window']}"
    return f"{head}\n{format_table(result['summary'], cols, float_format='.3g')}"
