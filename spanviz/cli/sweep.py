"""``spanviz sweep``: a paper comparison over seeds (:mod:`spanviz.experiments`), checked before any data are read."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro
from tqdm.auto import tqdm

from spanviz.cli.common import (
    DataOptions,
    UsageError,
    announce_smoke,
    as_flags,
    check_home,
    data_settings,
    load_data,
    shrink,
    smoke,
)
from spanviz.experiments import alphas as alphas_experiment
from spanviz.experiments import fp8 as fp8_experiment
from spanviz.experiments import growth as growth_experiment
from spanviz.experiments import ls as ls_experiment
from spanviz.experiments import save_sweep
from spanviz.experiments import spans as spans_experiment
from spanviz.experiments.core import MAX_SEEDS, RunsFailedError
from spanviz.experiments.executors import (
    EXECUTORS,
    ExecutorStartError,
    MissingExtraError,
    check_address,
    make_executor,
)
from spanviz.experiments.results import format_table
from spanviz.files import check_writable_folder
from spanviz.fp8.strategies import PRACTICAL
from spanviz.model import GPTConfig
from spanviz.store import ResultsStore
from spanviz.train import TrainConfig
from spanviz.train.config import check_runnable

EXPERIMENTS = {"spans": spans_experiment, "ls": ls_experiment, "fp8": fp8_experiment, "growth": growth_experiment,
               "alphas": alphas_experiment}
"""``spanviz sweep``'s experiments: name → module (its ``{name}_sweep`` function runs the comparison)."""


@dataclass(frozen=True)
class SweepCommand:
    """Run a paper comparison (spans, ls, fp8) or a teaching sweep (growth, alphas) over seeds; print the seed noise."""

    experiment: tyro.conf.Positional[Literal[tuple(EXPERIMENTS)]]
    """spans (arXiv 2512.13033), ls (arXiv 2505.15548), fp8 (arXiv 2602.18851), growth (a learning-rate sweep of
    logit growth, arXiv 2309.14322) or alphas (best val loss against each α_o, arXiv 2512.13033)."""
    size: str = "cpu"
    """spans: cpu or paper; ls: cpu or gpu; fp8, growth, alphas: cpu only."""
    seeds: int | None = None
    """number of seeds (0, 1, ... n-1); default: the experiment's."""
    steps: int | None = None
    """updates per run; default: the experiment's for its size."""
    scenario: Literal["lr_spike", "weight_swap", "none"] | None = None
    """fp8 only: run just this transient (default: none, lr_spike and weight_swap, each at margins 0 and 1)."""
    practical: bool = False
    """fp8 only: add per-row, per-row power-of-two, MX (blocks of 32) and 1×128-tile scaling, with underflows, cast
    errors and each strategy's cost (scales stored, reductions before the cast) in the table."""
    lrs: tuple[float, ...] | None = None
    """growth only: the peak learning rates of the sweep (default 0.003 0.01 0.03 0.1 0.3)."""
    variants: tuple[str, ...] | None = None
    """growth only: which of mhsa ls layers qk_norm softcap qk_clip (default all; mhsa is the baseline)."""
    values: tuple[float, ...] | None = None
    """alphas only: the α tried for each order, the others at 1 (default 0 2; 1 is the standard run)."""
    model: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = ()
    """KEY=VALUE, a GPTConfig field for every variant (repeatable), e.g. --model context_length=1024."""
    train: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = ()
    """KEY=VALUE, a TrainConfig field for every variant (repeatable), e.g. --train batch_size=4."""
    store: bool = True
    """replay runs the results store has, keep new ones (--no-store: train everything, keep nothing)."""
    out: Path | None = None
    """write the summary as JSON to this .json file, and the per-seed table beside it (.per_seed.json/.csv)."""
    executor: Annotated[str, tyro.conf.arg(metavar="{" + ",".join(EXECUTORS) + "}")] = "local"
    """local: one run after another in this process; ray: each run a Ray task (pip install "spanviz[distributed]")."""
    workers: int | None = None
    """--executor ray: runs at a time (a local cluster of N workers; default one per GPU, else one per CPU core)."""
    address: str | None = None
    """--executor ray: an existing Ray cluster, HOST:PORT (default: $RAY_ADDRESS, else a local cluster)."""
    data: Annotated[DataOptions, tyro.conf.OmitArgPrefixes] = DataOptions()
    verbose: bool = False
    """log at INFO level."""


OVERRIDABLE: dict[type, tuple[str, ...]] = {
    GPTConfig: tuple(f.name for f in fields(GPTConfig) if f.name not in ("vocab_size", "spans")),
    TrainConfig: tuple(f.name for f in fields(TrainConfig)),
}
"""The fields ``--model`` (GPTConfig) and ``--train`` (TrainConfig) set: the flags of ``spanviz train``."""


def _type_text(kind: Any) -> str:
    """``int | None`` → "of type int or None"; ``Literal["a", "b"]`` → "one of a, b"."""
    if typing.get_origin(kind) is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(kind)))
    return "of type " + " or ".join("None" if k is type(None) else getattr(k, "__name__", str(k))
                       for k in (typing.get_args(kind) or (kind,)))


def parse_overrides(items: Sequence[str], flag: str, config_class: type) -> dict[str, Any]:
    """``("KEY=VALUE", ...)`` → ``{field: value}``: KEY a field of ``config_class`` (``context_length`` or
    ``context-length``), VALUE parsed by tyro as that field's type (as ``spanviz train`` parses its flag).

    Not validated here: the sweep's variants apply the overrides to their own configs, which check them.
    Raises:
        UsageError: an item without "=", a KEY that is not a field, or a VALUE that is not of the field's type.
    """
    hints = typing.get_type_hints(config_class)
    names = OVERRIDABLE[config_class]
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise UsageError(f"{flag} takes KEY=VALUE, got {item!r}")
        if key not in names:
            raise UsageError(f"{flag} {item}: {key} is not a {config_class.__name__} field (KEY is one of "
                             f"{', '.join(sorted(names))})")
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                out[key] = tyro.cli(hints[key], args=[value], prog=f"spanviz sweep {flag} {key}=VALUE")
        except SystemExit:
            raise UsageError(f"{flag} {item}: {value!r} is not {_type_text(hints[key])} (the type of "
                             f"{config_class.__name__}.{key})") from None
    return out


def sweep_function(experiment: str) -> Callable[..., dict[str, Any]]:
    """The sweep function of an experiment, e.g. :func:`spanviz.experiments.spans.spans_sweep`."""
    return getattr(EXPERIMENTS[experiment], f"{experiment}_sweep")


OVERRIDE_FLAGS = {"seed": "every run's seed comes from --seeds N (seeds 0..N-1); use that",
                  "steps": "the sweep's --steps N sets it (and the evaluation and warm-up that follow); use that",
                  "checkpoint_interval": "sweep runs write no checkpoints (they have no --out folder); drop it"}
"""--train KEYs a sweep cannot apply (the grid sets them, or they change nothing), and what to do instead."""


def split_overrides(experiment: str, model: dict, train: dict) -> tuple[dict, dict, dict[str, Any]]:
    """``(model, train, sweep arguments)``: the --model / --train overrides a sweep takes as arguments of its own
    (``device`` for spans and fp8; ``n_local`` / ``window`` for ls, the LS variant's), the rest as overrides.

    Raises:
        UsageError: an override the sweep cannot apply (seed, steps, checkpoint_interval; n_local=0 or qk_norm for
            ls), naming what to use instead.
    """
    for key, instead in OVERRIDE_FLAGS.items():
        if key in train:
            raise UsageError(f"--train {key}={train[key]}: cannot apply to a sweep's runs: {instead}")
    model, train, extra = dict(model), dict(train), {}
    if experiment in ("spans", "fp8") and "device" in train:
        extra["device"] = train.pop("device")
    if experiment == "ls":
        for key in ("n_local", "window"):
            if key in model:
                extra[key] = model.pop(key)
        if extra.get("n_local") == 0:
            raise UsageError("--model n_local=0: sweep ls compares LS (local heads) with MHSA; with no local head the "
                             "ls variant would be MHSA itself. Give n_local >= 1 (the ls variant's local heads)")
        if "qk_norm" in model:
            raise UsageError(f"--model qk_norm={model['qk_norm']}: sweep ls compares it (the qk_norm variant); set for "
                             "every variant, qk_norm would be mhsa itself")
    return model, train, extra


def sweep_variants(experiment: str, size: str, steps: int | None, model: dict, train: dict,
                   extra: dict[str, Any] | None = None) -> list[tuple[GPTConfig, TrainConfig]]:
    """The (model, train) configs a sweep will train, built with a placeholder vocabulary (nothing trained)."""
    module, extra = EXPERIMENTS[experiment], extra or {}
    if experiment == "spans":
        variants, _ = module.build_variants(size, vocab_size=256, steps=steps, model=model, train=train, **extra)
        return list(variants.values())
    if experiment == "ls":
        return list(module.ls_variants(size, 256, steps=steps, model=model, train=train, **extra).values())
    if experiment == "growth":
        return list(module.growth_variants(size, 256, steps=steps, model=model, train=train, **extra).values())
    if experiment == "alphas":
        return list(module.alphas_variants(size, 256, steps=steps, model=model, train=train, **extra).values())
    steps = 200 if steps is None else steps
    model_cfg = GPTConfig(**{**module.DEFAULT_MODEL, "vocab_size": 256, **model})
    train_cfg = TrainConfig(**{**module.DEFAULT_TRAIN, "eval_interval": steps, "device": "cpu", **extra, **train,
                               "steps": steps})
    return [(model_cfg, train_cfg)]


def sweep_sizes(experiment: str) -> tuple[str, ...]:
    """The sizes an experiment knows (e.g. cpu, paper)."""
    return tuple(EXPERIMENTS[experiment].SIZES)


def cmd_sweep(cmd: SweepCommand, given: Collection[str] = ()) -> int:
    """``spanviz sweep``; ``given``: the flags typed (a typed flag that has no effect is refused)."""
    experiment = cmd.experiment
    sizes = sweep_sizes(experiment)
    if cmd.size not in sizes:
        raise UsageError(f"--size {cmd.size}: sweep {experiment} has sizes {', '.join(sizes)}")
    if cmd.seeds is not None and not 1 <= cmd.seeds <= MAX_SEEDS:
        raise UsageError(f"--seeds {cmd.seeds}: must be a number of seeds in [1, {MAX_SEEDS}] (seeds 0..N-1)")
    low = 2 if experiment == "fp8" else 1
    if cmd.steps is not None and cmd.steps < low:
        raise UsageError(f"--steps {cmd.steps}: must be an integer >= {low}")
    if cmd.scenario is not None and experiment != "fp8":
        raise UsageError(f"--scenario {cmd.scenario}: applies to sweep fp8 only")
    if cmd.practical and experiment != "fp8":
        raise UsageError("--practical: applies to sweep fp8 only")
    for flag, value, owner in (("--lrs", cmd.lrs, "growth"), ("--variants", cmd.variants, "growth"),
                               ("--values", cmd.values, "alphas")):
        if value is not None and experiment != owner:
            raise UsageError(f"{flag} {' '.join(map(str, value))}: applies to sweep {owner} only")
    executor = sweep_executor(cmd)
    model, train, extra = split_overrides(experiment, parse_overrides(cmd.model, "--model", GPTConfig),
                                          parse_overrides(cmd.train, "--train", TrainConfig))
    if experiment in ("growth", "alphas"):
        extra.update({k: list(v) for k, v in (("lrs", cmd.lrs), ("variants", cmd.variants), ("values", cmd.values))
                      if v is not None})
    seeds, steps = cmd.seeds, cmd.steps
    if smoke():
        seeds = min(seeds or 2, 2)
        steps = shrink(steps, low) if steps is not None else 3
        model["context_length"] = min(model.get("context_length", 32), 32)
        train["batch_size"] = min(train.get("batch_size", 4), 4)
        train["eval_iters"] = min(train.get("eval_iters", 2), 2)
        train["warmup_steps"] = min(train.get("warmup_steps", 0), steps)
        announce_smoke(f"a seconds-long sweep ({seeds} seeds, {steps} updates per run, context ≤ 32, batch ≤ 4)")
    try:
        variants = sweep_variants(experiment, cmd.size, steps, model, train, extra)
    except ValueError as error:  # field names here are the KEYs of --model / --train
        given = " ".join([*([f"--steps {steps}"] if steps is not None else []),
                          *(f"--model {m}" for m in cmd.model), *(f"--train {t}" for t in cmd.train)])
        raise UsageError(f"sweep {experiment} --size {cmd.size}{' ' + given if given else ''}: {error} (set "
                         "fields with --model KEY=VALUE / --train KEY=VALUE)") from None
    for model_cfg, train_cfg in variants:
        try:
            check_runnable(model_cfg, train_cfg)
        except ValueError as error:
            raise UsageError(f"sweep {experiment} --size {cmd.size} cannot run here: {as_flags(str(error))}") from None
    tokenizer, max_vocab = None, None
    if cmd.data.tokenizer is None and experiment == "ls":  # LS sizes choose their tokenizer (bytes on CPU)
        choice = ls_experiment.SIZES[cmd.size]["tokenizer"]
        tokenizer, max_vocab = choice["tokenizer"], choice["max_vocab"] or 0
    settings = data_settings(cmd.data, tokenizer=tokenizer, max_vocab=max_vocab, given=given)
    check_home()
    if cmd.out is not None:
        if cmd.out.is_dir():
            raise UsageError(f"--out {cmd.out}: is a folder; give a file name, e.g. {cmd.out / 'results.json'}")
        if cmd.out.suffix != ".json":
            raise UsageError(f"--out {cmd.out}: must end in .json (the per-seed table is written beside it)")
        check_writable_folder(cmd.out.parent, f"--out {cmd.out}")
    data = load_data(settings)
    result = run_sweep(cmd, executor, data, seeds, steps, model, train, extra)
    if result is None:
        return 1
    print_sweep(result)
    if cmd.out is not None:  # the summary, and the per-seed table beside it (.per_seed.json / .per_seed.csv)
        print("results: " + ", ".join(str(path) for path in save_sweep(result, cmd.out)))
    return 0


def sweep_executor(cmd: SweepCommand) -> Any:
    """The executor of ``--executor`` / ``--workers`` / ``--address``, checked before any data is read.

    Raises:
        UsageError: an unknown --executor, --workers < 1, --workers / --address without --executor ray, or Ray not
            installed (the message says how to install it).
    """
    if cmd.executor not in EXECUTORS:  # checked here, not by tyro: one line naming the flag
        raise UsageError(f"--executor {cmd.executor}: must be one of {', '.join(EXECUTORS)}")
    if cmd.workers is not None and cmd.workers < 1:
        raise UsageError(f"--workers {cmd.workers}: must be a number of workers >= 1")
    if cmd.executor == "local" and (cmd.workers is not None or cmd.address is not None):
        given = "--workers" if cmd.workers is not None else "--address"
        raise UsageError(f"{given} applies to --executor ray (the local executor trains one run after another)")
    try:
        executor = make_executor(cmd.executor, workers=cmd.workers, address=cmd.address)
    except MissingExtraError:
        raise UsageError(f'--executor {cmd.executor} needs Ray, an optional extra: pip install '
                         '"spanviz[distributed]"') from None
    except ValueError as error:
        raise UsageError(f"--address {cmd.address}: {error}") from None
    address = cmd.address or (os.environ.get("RAY_ADDRESS") or None if cmd.executor == "ray" else None)
    if address is not None:  # an existing cluster: it must answer now, not after the data load (bounded)
        origin = "--address" if cmd.address else "$RAY_ADDRESS="
        try:
            check_address(address)
        except (ValueError, ExecutorStartError) as error:
            raise UsageError(f"{origin}{'' if origin.endswith('=') else ' '}{address}: {error}") from None
    return executor


def run_sweep(cmd: SweepCommand, executor: Any, data: Any, seeds: int | None, steps: int | None, model: dict,
              train: dict, extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Run the sweep with one progress bar over its runs; print how many were replayed and trained.

    Returns the sweep's result, or None after printing the runs that failed (each with its configuration).
    """
    sweep = sweep_function(cmd.experiment)
    kwargs: dict[str, Any] = dict(data=data, model=model or None, train=train or None, executor=executor,
                                  **(extra or {}))
    if steps is not None:
        kwargs["steps"] = steps
    if cmd.scenario is not None:
        kwargs["scenarios"] = (cmd.scenario,)
    if cmd.practical:
        kwargs["probe"] = fp8_experiment.ProbeSettings(practical=PRACTICAL)
    if seeds is not None:
        kwargs["seeds"] = seeds
    outcomes = {"replayed": 0, "trained": 0, "failed": 0}
    try:
        with tqdm(desc=f"sweep {cmd.experiment}", unit="run") as bar:
            def progress(done: int, total: int, label: str = "") -> None:
                outcomes[next((k for k in ("replayed", "failed") if label.endswith(f"({k})")), "trained")] += 1
                bar.total, bar.n = total, done
                bar.set_postfix_str(label)
                bar.refresh()

            result = sweep(size=cmd.size, store=ResultsStore() if cmd.store else None, progress=progress, **kwargs)
    except ExecutorStartError as error:  # bounded: Ray did not start or answer in time
        print(f"spanviz sweep: error: {error}", file=sys.stderr)
        return None
    except RunsFailedError as error:
        for failure in error.failures:
            print(f"spanviz sweep: run {failure['variant']} seed {failure['seed']} failed: {failure['error']}\n"
                  f"  configuration: {json.dumps(failure['config'], separators=(',', ':'))}", file=sys.stderr)
            if cmd.verbose and failure["traceback"]:
                print(failure["traceback"], file=sys.stderr)
        kept = ("they are in the results store: run the same command again and only the failed runs train"
                if cmd.store else "--no-store kept nothing")
        print(f"spanviz sweep: {len(error.failures)} of {error.total} runs failed; "
              f"the other {len(error.records)} finished ({kept})", file=sys.stderr)
        return None
    print(f"{sum(outcomes.values())} runs: {outcomes['replayed']} replayed from the results store, "
          f"{outcomes['trained']} trained ({cmd.executor} executor)")
    return result


def print_sweep(result: Mapping[str, Any]) -> None:
    """Print a sweep's table (mean ± seed noise per variant) and its verdict."""
    print(format_table(result["rows"]))
    if result.get("verdict"):
        print(result["verdict"])
