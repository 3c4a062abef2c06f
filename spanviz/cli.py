"""The ``spanviz`` command: ``prepare-data``, ``train``, ``sweep``, ``runs``, ``bench`` (also ``python -m spanviz``).

Examples::

    spanviz prepare-data --data-dir ~/data/wikitext-2 --train-split validation --eval-split test
    spanviz train --steps 300 --out runs/demo          # reads the folder prepare-data remembered
    spanviz train --resume --out runs/demo --steps 600 # after Ctrl-C, kill -9, or to extend a finished run
    spanviz train --spans-preset kv8 --alphas 1000 --out runs/kv8-1000
    spanviz train --config runs/demo/run.json --lr 1e-3 --out runs/lower-lr
    spanviz sweep ls --steps 300 --model context_length=1024 --train batch_size=4
    spanviz runs export workshop.zip      # then, on the students' machines: spanviz runs import workshop.zip

One source of truth: the model, span and training flags are generated (with ``tyro``) from the fields of
:class:`~spanviz.model.GPTConfig`, :class:`~spanviz.spans.SpanConfig` and :class:`~spanviz.train.TrainConfig`
— names, types, defaults and help (from the dataclasses' docstrings) — and validated by constructing those
classes. ``--config FILE`` (a JSON object with ``model`` / ``train`` sections, or a ``run.json``) sets the
defaults that flags then override; the sweep's ``--model KEY=VALUE`` / ``--train KEY=VALUE`` overrides are
parsed by the same generated classes.

Every argument is checked before any data is loaded or any model is built (:func:`fresh_plan`,
:func:`resume_plan`, :func:`cmd_sweep`); errors are one line naming the flag, the value and what is allowed.
``spanviz train`` never loses a run: it locks ``--out``, checks that ``--out`` and ``$SPANVIZ_HOME`` can be
written, checkpoints at every evaluation, and ``--resume`` continues the same curve after any interruption.

``SPANVIZ_SMOKE=1`` runs a seconds-long version of any command (for CI: steps ÷ 100, context ≤ 32, batch ≤ 4,
at most 2 evaluation batches and 2 seeds, the quick core step-ratio benchmark); the command says so on stderr.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import re
import sys
import typing
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, fields, make_dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import docstring_parser
import tyro

from spanviz import data as data_lib
from spanviz.bench import SECTIONS as BENCH_SECTIONS
from spanviz.files import check_writable_folder, folder_lock
from spanviz.model import ATTN_BACKENDS, GPTConfig
from spanviz.spans import PRESETS, SpanConfig
from spanviz.train import DTYPES, TrainConfig

logger = logging.getLogger("spanviz")

SMOKE_ENV = "SPANVIZ_SMOKE"
SWEEP_MODULES = {"spans": "spanviz.experiments.spans", "ls": "spanviz.experiments.ls",
                 "fp8": "spanviz.experiments.fp8"}


class UsageError(ValueError):
    """A command-line mistake; its message already names the flags."""


# ================================================================ options generated from the config classes
_SOURCES: dict[type, tuple[type, dict[str, str]]] = {}
"""Generated options class → (config class, {option field: config field})."""


def field_help(config_class: type) -> dict[str, str]:
    """Each field's description from the class docstring's ``Attributes:`` section, on one line."""
    doc = docstring_parser.parse(config_class.__doc__ or "")
    return {p.arg_name: " ".join(p.description.split()) for p in doc.params if p.description}


def options_from(
    config_class: type,
    name: str,
    doc: str,
    *,
    only: Sequence[str] | None = None,
    skip: Sequence[str] = (),
    rename: Mapping[str, str] | None = None,
    types: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
    helps: Mapping[str, str] | None = None,
    optional: bool = False,
) -> type:
    """A plain frozen dataclass with ``config_class``'s fields, for tyro to turn into flags.

    Each field keeps its name (or ``rename``), type (or ``types``), default (or ``defaults``) and the help of
    its docstring entry (or ``helps``). With ``optional``, every field becomes ``T | None = None`` (overrides:
    only what was given is set). Not validated itself: validation is constructing ``config_class``
    (:func:`config_from`), so the rules live in one place.
    """
    rename, types, defaults, helps = rename or {}, types or {}, defaults or {}, helps or {}
    hints = typing.get_type_hints(config_class)
    texts = field_help(config_class)
    specs, mapping = [], {}
    for f in fields(config_class):
        if (only is not None and f.name not in only) or f.name in skip:
            continue
        kind = types.get(f.name, hints[f.name])
        default = defaults.get(f.name, f.default)
        if optional:
            kind, default = kind | None, None
        text = helps.get(f.name, texts.get(f.name, ""))
        option = rename.get(f.name, f.name)
        specs.append((option, Annotated[kind, tyro.conf.arg(help=text)], field(default=default)))
        mapping[option] = f.name
    cls = make_dataclass(name, specs, frozen=True)
    cls.__module__, cls.__doc__ = __name__, doc
    _SOURCES[cls] = (config_class, mapping)
    return cls


def config_kwargs(options: Any) -> dict[str, Any]:
    """The config-class keyword arguments of a generated options instance (``None`` left out if optional)."""
    _, mapping = _SOURCES[type(options)]
    return {mapping[f.name]: getattr(options, f.name) for f in fields(options)}


ModelOptions = options_from(
    GPTConfig, "ModelOptions", "Model: a TinyGPT (pre-LN GPT); vocab_size comes from the data.",
    skip=("vocab_size", "spans"), types={"attn_backend": Literal[ATTN_BACKENDS]},
)
SpanOptions = options_from(
    SpanConfig, "SpanOptions",
    "Span / violation gradient scaling (arXiv 2512.13033): off unless --spans-preset or --alphas is given.",
    only=("preset", "alphas", "layers"), rename={"preset": "spans_preset", "layers": "spans_layers"},
    types={"preset": Literal[PRESETS] | None, "alphas": str | None, "layers": tuple[int, ...] | None},
    defaults={"alphas": None},
    helps={"preset": "the decomposition: kv8, qkv8 or qk4 (kv8 when only --alphas is given).",
           "alphas": "α per order, α0 first: digits as in the paper (1000, 1110) or numbers (1,0.5,0,0); "
                     "1111 when only --spans-preset is given."},
)
TrainOptions = options_from(TrainConfig, "TrainOptions", "Training: optimizer, schedule, evaluation, checkpoints.",
                            types={"dtype": Literal[DTYPES]})
ModelOverrides = options_from(GPTConfig, "ModelOverrides", "GPTConfig fields", skip=("vocab_size", "spans"),
                              types={"attn_backend": Literal[ATTN_BACKENDS]}, optional=True)
TrainOverrides = options_from(TrainConfig, "TrainOverrides", "TrainConfig fields", types={"dtype": Literal[DTYPES]},
                              optional=True)


@dataclass(frozen=True)
class DataOptions:
    """Data: WikiText-2 from --data-dir, $SPANVIZ_WIKITEXT_DIR, the folder prepare-data remembered, or the hub."""

    data_dir: Path | None = None
    """WikiText-2 folder (train/valid/test .txt, wiki.*.tokens or parquet); default: see the group's line above."""
    train_split: Literal[data_lib.SPLITS + ("valid",)] | None = None
    """split to train on; default: $SPANVIZ_TRAIN_SPLIT, else the remembered choice, else train."""
    eval_split: Literal[data_lib.SPLITS + ("valid",)] | None = None
    """split to evaluate on; default: $SPANVIZ_EVAL_SPLIT, else the remembered choice, else validation."""
    wikitext_config: Literal[data_lib.CONFIGS] = "wikitext-2-v1"
    """wikitext-2-v1 (tokenized, rare words as <unk>) or wikitext-2-raw-v1."""
    tokenizer: Literal[data_lib.TOKENIZER_KINDS] | None = None
    """word or byte; default word (`sweep ls`: its size's choice, bytes on CPU)."""
    max_vocab: int = 8192
    """word-level vocabulary cap, including <unk> and <eos>; 0 = no cap."""
    offline: bool = False
    """never contact the Hugging Face hub (also: SPANVIZ_OFFLINE=1)."""


@dataclass(frozen=True)
class ProbeOptions:
    """Probes: opt-in measurements written to the run record's history."""

    logit_probe: bool = False
    """max |q·k|/√d_head per layer and head, attention entropy (arXiv 2505.15548); every --probe-every updates."""
    spans_probe: bool = False
    """span geometry: energy share by order, cosines, principal angles (arXiv 2512.13033); every --probe-every."""
    fp8_probe: bool = False
    """max logits, bounds, scales, E4M3 overflows (arXiv 2602.18851): every step, regardless of --probe-every."""
    probe_every: int = 10
    """updates between --logit-probe / --spans-probe measurements (and after the last update), >= 1."""


# ======================================================================================= the commands
@dataclass(frozen=True)
class PrepareDataCommand:
    """Read WikiText-2 (a local folder or the hub), tokenize it and cache the token ids; remember a local folder."""

    data: Annotated[DataOptions, tyro.conf.OmitArgPrefixes] = DataOptions()
    verbose: bool = False
    """log at INFO level."""


@dataclass(frozen=True)
class TrainCommand:
    """Train a TinyGPT: run.json + checkpoint.pt in --out (checkpointed at every evaluation), record in the store."""

    data: Annotated[DataOptions, tyro.conf.OmitArgPrefixes] = DataOptions()
    model: Annotated[ModelOptions, tyro.conf.OmitArgPrefixes] = ModelOptions()
    spans: Annotated[SpanOptions, tyro.conf.OmitArgPrefixes] = SpanOptions()
    train: Annotated[TrainOptions, tyro.conf.OmitArgPrefixes] = TrainOptions()
    probes: Annotated[ProbeOptions, tyro.conf.OmitArgPrefixes] = ProbeOptions()
    out: Path | None = None
    """folder for run.json and checkpoint.pt, locked while training; without it only the results store keeps the run."""
    resume: bool = False
    """continue the run in --out from its last checkpoint; with --steps N extend it (a finished one too) to N."""
    store: bool = True
    """put the finished (or diverged) run into the results store ($SPANVIZ_HOME/runs): runs export ships it."""
    config: Path | None = None
    """JSON with `model` / `train` sections (GPTConfig / TrainConfig fields; a run.json works): flags override it."""
    verbose: bool = False
    """log at INFO level."""


@dataclass(frozen=True)
class SweepCommand:
    """Run a paper comparison (spans, ls or fp8) over seeds and print a table with the seed noise."""

    experiment: tyro.conf.Positional[Literal[tuple(SWEEP_MODULES)]]
    """spans (arXiv 2512.13033), ls (arXiv 2505.15548) or fp8 (arXiv 2602.18851)."""
    size: str = "cpu"
    """spans: cpu or paper; ls: cpu or gpu; fp8: cpu only."""
    seeds: int | None = None
    """number of seeds (0, 1, ... n-1); default: the experiment's."""
    steps: int | None = None
    """updates per run; default: the experiment's for its size."""
    scenario: Literal["lr_spike", "weight_swap", "none"] | None = None
    """fp8 only: run just this transient (default: none, lr_spike and weight_swap, each at margins 0 and 1)."""
    model: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = ()
    """KEY=VALUE, a GPTConfig field for every variant (repeatable), e.g. --model context_length=1024."""
    train: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = ()
    """KEY=VALUE, a TrainConfig field for every variant (repeatable), e.g. --train batch_size=4."""
    store: bool = True
    """replay runs the results store has, keep new ones (--no-store: train everything, keep nothing)."""
    out: Path | None = None
    """write the summary as JSON to this .json file, and the per-seed table beside it (.per_seed.json/.csv)."""
    executor: Literal["local", "ray"] = "local"
    """local: one run after another in this process; ray: each run a Ray task (pip install "spanviz[distributed]")."""
    workers: int | None = None
    """--executor ray: runs at a time (a local cluster of N workers; default one per GPU, else one per CPU core)."""
    address: str | None = None
    """--executor ray: an existing Ray cluster, HOST:PORT (default: $RAY_ADDRESS, else a local cluster)."""
    data: Annotated[DataOptions, tyro.conf.OmitArgPrefixes] = DataOptions()
    verbose: bool = False
    """log at INFO level."""


@dataclass(frozen=True)
class RunsCommand:
    """List, export or import the results store: runs that replay instantly, e.g. for a workshop."""

    action: tyro.conf.Positional[Literal["list", "export", "import"]]
    """list the stored runs, export them into FILE (.zip), or import FILE."""
    file: tyro.conf.Positional[Path | None] = None
    """the archive to write or read (.zip)."""
    store: Path | None = None
    """the store folder (default: $SPANVIZ_HOME/runs)."""
    overwrite: bool = False
    """import: replace runs already in the store."""
    verbose: bool = False
    """log at INFO level."""


@dataclass(frozen=True)
class BenchCommand:
    """Benchmarks: ratios measured within one run (the test suite never times anything)."""

    json: bool = False
    """print JSON."""
    only: Annotated[str | None, tyro.conf.arg(help=f"comma-separated sections: {', '.join(BENCH_SECTIONS)} "
                                                   "(default: all).")] = None
    device: str = "auto"
    """auto, cpu, cuda, cuda:<index> or mps."""
    quick: bool = False
    """fewer repeats (noisier)."""
    data_dir: Path | None = None
    """WikiText-2 folder for the notebook-config benchmark (default: as for train)."""
    verbose: bool = False
    """log at INFO level."""


COMMANDS: dict[str, type] = {"prepare-data": PrepareDataCommand, "train": TrainCommand, "sweep": SweepCommand,
                             "runs": RunsCommand, "bench": BenchCommand}


# ===================================================================================== error messages
def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def _flag_names() -> dict[str, str]:
    """Config field → the flag that sets it (for messages)."""
    names = {"vocab_size": "--max-vocab", "every": "--probe-every", "spans.layers": "--spans-layers"}
    for cls in (ModelOptions, SpanOptions, TrainOptions):
        for option, config_field in _SOURCES[cls][1].items():
            names[config_field] = _flag(option)
    return names


def as_flags(message: str) -> str:
    """A config error rewritten for a command-line user: ``n_layer=4`` → ``--n-layer 4``, field names → flags.

    Identifiers with an underscore are rewritten wherever they stand; plain words (steps, lr, window, ...) only
    as ``name=value`` or at the start of the message, where they are the subject.
    """
    names = _flag_names()

    def assignment(m: re.Match[str]) -> str:
        return f"{names[m.group(1)]} {m.group(3)}"

    keys = "|".join(sorted((re.escape(k) for k in names), key=len, reverse=True))
    message = re.sub(rf"(?<![\w.-])({keys})=(['\"]?)([^\s'\",;)]*)\2", assignment, message)
    message = re.sub(rf"^({keys})\b", lambda m: names[m.group(1)], message)
    underscored = "|".join(sorted((re.escape(k) for k in names if "_" in k or "." in k), key=len, reverse=True))
    return re.sub(rf"(?<![\w.-])({underscored})\b", lambda m: names[m.group(1)], message)


def config_from(config_class: type, kwargs: Mapping[str, Any]) -> Any:
    """``config_class(**kwargs)``, its ValueError rewritten with flag names (:func:`as_flags`)."""
    try:
        return config_class(**kwargs)
    except ValueError as error:
        raise UsageError(as_flags(str(error))) from None


# ============================================================================================= smoke
def smoke() -> bool:
    """Whether ``SPANVIZ_SMOKE=1``: every command becomes a seconds-long version of itself (for CI)."""
    return os.environ.get(SMOKE_ENV, "").strip() == "1"


def _shrink(n: int | None, low: int = 1) -> int | None:
    return None if n is None else max(low, math.ceil(n / 100))


def smoke_train(cmd: TrainCommand) -> TrainCommand:
    """The seconds-long version of a train command: step counts ÷ 100, context ≤ 32, batch ≤ 4, ≤ 2 eval batches.
    """
    t = cmd.train
    train = replace(t, steps=_shrink(t.steps, 2), eval_interval=_shrink(t.eval_interval),
                    eval_iters=min(t.eval_iters, 2), batch_size=min(t.batch_size, 4),
                    warmup_steps=_shrink(t.warmup_steps, 0) if t.warmup_steps else t.warmup_steps,
                    lr_spike_start=_shrink(t.lr_spike_start, 0) if t.lr_spike_start else 0,
                    lr_spike_steps=_shrink(t.lr_spike_steps, 0) if t.lr_spike_steps else 0,
                    checkpoint_interval=_shrink(t.checkpoint_interval) if t.checkpoint_interval else
                    t.checkpoint_interval)
    if train.lr_spike_factor != 1.0:
        train = replace(train, lr_spike_start=min(train.lr_spike_start, train.steps - 1))
    model = replace(cmd.model, context_length=min(cmd.model.context_length, 32))
    probes = cmd.probes
    if probes.logit_probe or probes.spans_probe:
        probes = replace(probes, probe_every=_shrink(probes.probe_every))
    return replace(cmd, train=train, model=model, probes=probes)


def _announce_smoke(what: str) -> None:
    print(f"{SMOKE_ENV}=1: {what}", file=sys.stderr)


# ======================================================================================= data helpers
def data_settings(opts: DataOptions, *, tokenizer: str | None = None, max_vocab: int | None = None
                  ) -> dict[str, Any]:
    """The keyword arguments of :func:`spanviz.data.prepare_tokens` for ``opts`` (nothing read yet).

    Raises:
        UsageError: a bad --max-vocab or --data-dir.
    """
    folder, splits = data_lib.resolve_data_source(opts.data_dir, opts.train_split, opts.eval_split)
    kind = tokenizer or opts.tokenizer or "word"
    cap = opts.max_vocab if max_vocab is None else max_vocab
    if cap < 0 or (kind == "word" and 0 < cap < 3):
        raise UsageError(f"--max-vocab {cap}: must be 0 (no cap) or at least 3 (<unk>, <eos> and one word)")
    if folder is not None and not Path(folder).expanduser().is_dir():
        origin = "--data-dir" if opts.data_dir is not None else f"${data_lib.ENV_DATA_DIR}"
        raise UsageError(f"{origin} {folder}: not a folder; it must hold the WikiText-2 splits "
                         "(e.g. valid.txt and test.txt)")
    return dict(data_dir=folder, config=opts.wikitext_config, splits=splits, tokenizer=kind,
                max_vocab=(cap or None) if kind == "word" else None, offline=True if opts.offline else None)


def data_message(error: BaseException) -> str:
    """A command-line message (flags, no Python) for a data error of :mod:`spanviz.data`."""
    if isinstance(error, data_lib.MissingSplitError):
        message = (f"the {error.role} split {error.split!r} is not in {error.folder} "
                   f"(splits there: {', '.join(error.available) or 'none'})")
        if "validation" in error.available:
            other = "test" if "test" in error.available else "validation"
            message += f"; train on another split: --train-split validation --eval-split {other}"
        return message
    if isinstance(error, data_lib.HubUnavailableError):
        return (f"WikiText-2 is not available from the Hugging Face hub ({error.reason}). Use a local copy: "
                "spanviz prepare-data --data-dir DIR (once; later commands remember DIR), where DIR holds "
                "train.txt / valid.txt / test.txt, wiki.*.tokens or the hub's parquet files; for a copy without "
                "the train split add --train-split validation --eval-split test")
    return as_flags(str(error))


def load_data(settings: Mapping[str, Any]) -> Any:
    """:func:`spanviz.data.prepare_tokens` with command-line messages (:class:`UsageError`)."""
    try:
        return data_lib.prepare_tokens(**settings)
    except (data_lib.HubUnavailableError, ValueError) as error:
        raise UsageError(data_message(error)) from None


def check_home() -> Path:
    """``$SPANVIZ_HOME`` must be a folder we can write (token cache, results store): a clear error otherwise."""
    home = data_lib.spanviz_home()
    label = f"SPANVIZ_HOME={home}" if os.environ.get(data_lib.ENV_HOME) else f"the spanviz cache folder {home}"
    return check_writable_folder(home, f"{label} (set SPANVIZ_HOME to a folder you can write)")


def estimated_vocab(settings: Mapping[str, Any]) -> int:
    """A vocabulary size for checks made before the data are read (the data later give the real one)."""
    return 256 if settings["tokenizer"] == "byte" else (settings["max_vocab"] or 256)


# ================================================================================ prepare-data
def cmd_prepare_data(cmd: PrepareDataCommand) -> int:
    settings = data_settings(cmd.data)
    check_home()
    data = load_data(settings)
    info = data.describe()
    print(f"{'cache hit' if data.from_cache else 'tokenized'}: {info['n_tokens']['train']:,} train / "
          f"{info['n_tokens']['eval']:,} eval tokens, vocab {data.vocab_size:,}, splits {info['splits']}, "
          f"source {info['source']}")
    if settings["data_dir"] is not None:
        data_lib.remember_data_source(settings["data_dir"], data.splits)
        print(f"remembered: later commands read {info['source']} (--train-split {data.splits['train']} "
              f"--eval-split {data.splits['eval']}) unless given --data-dir")
    return 0


# ============================================================================================ train
@dataclass
class TrainPlan:
    """Everything ``spanviz train`` checked before loading data: configs, probes, data settings, resume state."""

    model_cfg: GPTConfig
    train_cfg: TrainConfig
    probes: ProbeOptions
    data: dict[str, Any]
    checkpoint: Any = None  # spanviz.train.Checkpoint when resuming
    notes: list[str] = field(default_factory=list)


def span_config(opts: Any) -> SpanConfig | None:
    """The SpanConfig of the span flags, or None when span scaling is off."""
    if opts.spans_preset is None and opts.alphas is None:
        if opts.spans_layers is not None:
            raise UsageError(f"--spans-layers {' '.join(map(str, opts.spans_layers))}: has no effect without "
                             "--spans-preset or --alphas (span scaling is off)")
        return None
    return config_from(SpanConfig, {"preset": opts.spans_preset or "kv8",
                                    "alphas": "1111" if opts.alphas is None else opts.alphas,
                                    "layers": opts.spans_layers})


def build_probes(opts: ProbeOptions) -> list:
    """The probe objects of the probe flags (validated)."""
    if opts.probe_every < 1:
        raise UsageError(f"--probe-every {opts.probe_every}: must be an integer >= 1")
    if opts.probe_every != ProbeOptions.probe_every and not (opts.logit_probe or opts.spans_probe):
        raise UsageError(f"--probe-every {opts.probe_every}: applies to --logit-probe and --spans-probe, and neither "
                         "is on (--fp8-probe measures every update)")
    probes = []
    if opts.logit_probe:
        from spanviz.local_global import LogitProbe

        probes.append(LogitProbe(every=opts.probe_every))
    if opts.spans_probe:
        from spanviz.spans import SpanProbe

        probes.append(SpanProbe(every=opts.probe_every))
    if opts.fp8_probe:
        from spanviz.fp8 import FP8Probe

        probes.append(FP8Probe(every=1))
    return probes


def model_config(cmd: TrainCommand, vocab_size: int) -> GPTConfig:
    """The GPTConfig of the model and span flags (``ValueError`` as flags)."""
    opts = cmd.model
    if opts.window is not None and opts.n_local == 0:
        raise UsageError(f"--window {opts.window}: has no effect without --n-local (the number of local heads); "
                         "add --n-local N")
    if cmd.probes.fp8_probe and opts.qk_norm:
        raise UsageError("--fp8-probe with --qk-norm: the FP8 bounds are for plain q·k logits, which QK-norm replaces; "
                         "drop one of them")
    kwargs = {**config_kwargs(opts), "vocab_size": vocab_size, "spans": span_config(cmd.spans)}
    return config_from(GPTConfig, kwargs)


def _given(given: set[str], options: Any) -> dict[str, str]:
    """Option field → flag, for the fields of ``options`` whose flag was typed."""
    return {f.name: _flag(f.name) for f in fields(options) if _flag(f.name) in given}


def resume_plan(cmd: TrainCommand, given: set[str], out: Path) -> TrainPlan:
    """Checks for ``--resume``: the checkpoint in ``out``, and typed flags that would contradict it.

    The run continues with its saved configuration (model, training, probes, data); only ``--steps`` may
    change (to extend it). A typed flag with the saved value is fine; another value is an error.
    """
    from spanviz.train import load_checkpoint

    if cmd.config is not None:
        raise UsageError("--config with --resume: a resumed run keeps its saved configuration; drop --config")
    path = out / "checkpoint.pt"
    if not path.exists():
        hint = ""
        if (out / "run.json").is_file():
            hint = " (the run stopped before its first checkpoint: start it again, without --resume)"
        raise UsageError(f"--resume: {out} has no checkpoint.pt to continue{hint}")
    checkpoint = load_checkpoint(path)  # CheckpointError: one line naming the file
    saved_model, saved_train = checkpoint.model_cfg, checkpoint.train_cfg
    status = _saved_status(out)
    if status == "diverged":
        raise UsageError(f"--resume: the run in {out} diverged (see its run.json); continuing it from its last good "
                         "checkpoint would diverge again at the same update. Start a new run, e.g. with a lower --lr")
    conflicts = []
    for option, flag in _given(given, cmd.model).items():
        if getattr(cmd.model, option) != getattr(saved_model, option):
            conflicts.append(f"{flag} (the run has {option}={getattr(saved_model, option)})")
    if _given(given, cmd.spans) and span_config(cmd.spans) != saved_model.spans:
        conflicts.append(f"{'/'.join(_given(given, cmd.spans).values())} (the run has spans={saved_model.spans})")
    for option, flag in _given(given, cmd.train).items():
        if option != "steps" and getattr(cmd.train, option) != getattr(saved_train, option):
            conflicts.append(f"{flag} (the run has {option}={getattr(saved_train, option)})")
    saved_probes = probe_options_of(checkpoint.record.config.get("probes", []), path)
    for option, flag in _given(given, cmd.probes).items():
        if getattr(cmd.probes, option) != getattr(saved_probes, option):
            conflicts.append(f"{flag} (the run has {option}={getattr(saved_probes, option)})")
    if conflicts:
        raise UsageError(f"--resume continues the run saved in {out} with its own settings; only --steps may change. "
                         f"These flags differ from it: {'; '.join(conflicts)}")
    steps = saved_train.steps
    if "--steps" in given:
        steps = cmd.train.steps
        if steps < checkpoint.step:
            raise UsageError(f"--steps {steps}: the run in {out} has already done {checkpoint.step} updates; "
                             f"give --steps {checkpoint.step} or more")
    notes = []
    if steps > saved_train.steps and saved_train.min_lr_ratio != 1.0:
        notes.append(f"note: extending {saved_train.steps} to {steps} updates; the updates still to do follow the "
                     f"learning-rate schedule of a {steps}-update run (the cosine decays over the new total), so the "
                     "curve differs from a fresh run of that length unless the schedule ignores the total "
                     "(--min-lr-ratio 1)")
    data = resume_data_settings(cmd, given, checkpoint.record.config.get("data", {}))
    return TrainPlan(saved_model, replace(saved_train, steps=steps), saved_probes, data, checkpoint, notes)


def _saved_status(out: Path) -> str | None:
    """The status in ``out/run.json``, or None when it is missing or unreadable."""
    from spanviz.train import RunRecord

    try:
        return RunRecord.load(out / "run.json").status
    except ValueError:
        return None


def probe_options_of(saved: Sequence[Mapping[str, Any]], where: Path) -> ProbeOptions:
    """The probe flags that reproduce a run's saved probes (``config["probes"]``)."""
    kinds = {p.get("type"): p for p in saved if isinstance(p, Mapping)}
    every = {p.get("every") for t, p in kinds.items() if t in ("LogitProbe", "SpanProbe")}
    opts = ProbeOptions(logit_probe="LogitProbe" in kinds, spans_probe="SpanProbe" in kinds,
                        fp8_probe="FP8Probe" in kinds,
                        probe_every=every.pop() if len(every) == 1 else ProbeOptions.probe_every)
    from spanviz.train import describe_probe, to_json_text

    described = json.loads(to_json_text([describe_probe(p) for p in build_probes(opts)]))
    if described != list(saved):
        raise UsageError(f"--resume: the probes of the run in {where} were not set with spanviz train's probe flags; "
                         "continue it from Python (spanviz.train.Trainer.resume)")
    return opts


def resume_data_settings(cmd: TrainCommand, given: set[str], saved: Mapping[str, Any]) -> dict[str, Any]:
    """prepare_tokens arguments that read the same data as the saved run (typed data flags must agree)."""
    source = saved.get("source")
    folder = str(cmd.data.data_dir) if cmd.data.data_dir is not None else None
    if folder is None and source and source != data_lib.HUB_ID:
        if not Path(source).is_dir():
            raise UsageError(f"--resume: the run read WikiText-2 from {source}, which is not there any more; "
                             "give its new place with --data-dir")
        folder = source
    splits = saved.get("splits") or {}
    opts = replace(cmd.data, data_dir=folder and Path(folder),
                   train_split=cmd.data.train_split if "--train-split" in given else splits.get("train"),
                   eval_split=cmd.data.eval_split if "--eval-split" in given else splits.get("eval"),
                   wikitext_config=saved.get("config", cmd.data.wikitext_config) if "--wikitext-config" not in given
                   else cmd.data.wikitext_config)
    tokenizer = cmd.data.tokenizer if "--tokenizer" in given else saved.get("tokenizer")
    max_vocab = cmd.data.max_vocab if "--max-vocab" in given else (saved.get("max_vocab") or 0)
    return data_settings(opts, tokenizer=tokenizer, max_vocab=max_vocab)


def fresh_plan(cmd: TrainCommand) -> TrainPlan:
    """Checks for a new run: the data settings, the configs (with an estimated vocabulary), the probes."""
    settings = data_settings(cmd.data)
    model_cfg = model_config(cmd, estimated_vocab(settings))
    train_cfg = config_from(TrainConfig, config_kwargs(cmd.train))
    build_probes(cmd.probes)
    return TrainPlan(model_cfg, train_cfg, cmd.probes, settings)


def check_out_is_free(out: Path) -> None:
    """A new run must not overwrite one already in ``out`` (nothing the user produced is lost)."""
    from spanviz.train import RunRecord

    present = [name for name in ("run.json", "checkpoint.pt") if (out / name).exists()]
    if not present:
        return
    what = ""
    if (out / "run.json").is_file():
        try:
            saved = RunRecord.load(out / "run.json")
        except ValueError:
            what = " (its run.json is damaged)"
        else:
            done = len(saved.history.get("step", []))
            if done == 0 and present == ["run.json"]:
                return  # a run stopped before its first update: nothing to lose, start it afresh
            what = f" (status {saved.status}, {done} of {saved.config.get('train', {}).get('steps', '?')} updates)"
    raise UsageError(f"--out {out} already holds a run{what}: continue it with --resume (--resume --steps N "
                     "extends it), or choose another --out")


def checkpoint_bytes(model_cfg: GPTConfig) -> int:
    """About how large checkpoint.pt gets: weights and the two AdamW moments in fp32, plus slack."""
    from spanviz.train import count_parameters

    return 12 * count_parameters(model_cfg) + 2**20


def cmd_train(cmd: TrainCommand, given: set[str]) -> int:
    from spanviz.train import check_runnable

    if smoke():
        cmd = smoke_train(cmd)
        _announce_smoke(f"a seconds-long run ({cmd.train.steps} updates, context {cmd.model.context_length}, "
                        f"batch {cmd.train.batch_size})")
    if cmd.resume and cmd.out is None:
        raise UsageError("--resume needs --out, the folder of the run to continue")
    if cmd.resume and not cmd.out.is_dir():
        raise UsageError(f"--resume --out {cmd.out}: there is no such folder (nothing to continue)")
    plan = None if cmd.resume else fresh_plan(cmd)
    if plan is not None:
        check_runnable(plan.model_cfg, plan.train_cfg)  # device, bf16, FlexAttention, memory
    if cmd.store or cmd.out is None:
        check_home()
    with ExitStack() as stack:
        if cmd.out is not None:
            need = 3 * checkpoint_bytes(plan.model_cfg) if plan is not None else 0
            out = check_writable_folder(cmd.out, f"--out {cmd.out}", need_bytes=need)
            stack.enter_context(folder_lock(out, f"--out {cmd.out}"))
            if cmd.resume:
                plan = resume_plan(cmd, given, out)
                check_runnable(plan.model_cfg, plan.train_cfg)
                need = 3 * checkpoint_bytes(plan.model_cfg)
                check_writable_folder(out, f"--out {cmd.out}", need_bytes=need)
            else:
                check_out_is_free(out)
        if not cmd.store and cmd.out is None:
            print("note: with neither --out nor the results store, nothing of this run is kept", file=sys.stderr)
        for note in plan.notes:
            print(note, file=sys.stderr)
        data = load_data(plan.data)
        return train_and_report(cmd, plan, data)


def train_and_report(cmd: TrainCommand, plan: TrainPlan, data: Any) -> int:
    """Build the trainer (fresh or resumed), train with a progress bar, store the record, print where it is."""
    from tqdm.auto import tqdm

    from spanviz.train import Trainer

    probes = build_probes(plan.probes)
    if plan.checkpoint is not None:
        saved = {k: v for k, v in plan.checkpoint.record.config.get("data", {}).items() if k != "source"}
        now = {k: v for k, v in data.describe().items() if k != "source"}
        if saved != now:
            different = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
            raise UsageError(f"--resume: these data differ from the run's ({', '.join(different)}); give the "
                             "same --data-dir / split / tokenizer flags as the run")
        trainer = Trainer.resume(plan.checkpoint, data, probes=probes, out_dir=cmd.out, steps=plan.train_cfg.steps)
    else:
        model_cfg = replace(plan.model_cfg, vocab_size=data.vocab_size)
        trainer = Trainer(model_cfg, plan.train_cfg, data, probes=probes, out_dir=cmd.out)
    total, done = trainer.train_cfg.steps, trainer.step_count
    with tqdm(total=total, initial=done, desc="train", unit="step", dynamic_ncols=True) as bar:
        def progress(row: dict[str, Any]) -> None:
            bar.update(1)
            postfix = {"loss": f"{row['train_loss']:.3f}"}
            if row.get("val_loss") is not None:
                postfix["val"] = f"{row['val_loss']:.3f}"
            bar.set_postfix(postfix, refresh=False)

        try:
            record = trainer.run(progress=progress)
        except KeyboardInterrupt:
            where = (f"; continue with: spanviz train --resume --out {cmd.out}" if cmd.out is not None
                     and trainer.last_checkpoint is not None else "")
            print(f"interrupted after {trainer.step_count} of {total} updates{where}", file=sys.stderr)
            return 130
        except OSError as error:
            kept = (f"; checkpoint.pt holds {trainer.last_checkpoint} updates" if trainer.last_checkpoint is not None
                    else "")
            raise UsageError(f"could not write to --out {cmd.out}: {error.strerror or error}{kept}") from None
    return report(cmd, trainer, record)


def report(cmd: TrainCommand, trainer: Any, record: Any) -> int:
    """Print the outcome (one line), where it is on disk, and put it into the results store."""
    steps = trainer.train_cfg.steps
    if record.status == "finished":
        best = record.best_val_loss
        print(f"finished: {trainer.step_count} of {steps} updates, best val loss "
              f"{'n/a' if best is None else f'{best:.4f}'}")
    elif record.status == "diverged":
        print(f"diverged after {trainer.step_count} of {steps} updates: "
              f"{as_flags(record.message.removeprefix('diverged: '))}")
    else:
        print(f"{record.status}: {trainer.step_count} of {steps} updates. {record.message}")
    if cmd.out is not None:
        on_disk = f"run record: {cmd.out / 'run.json'}"
        if trainer.last_checkpoint is not None:
            on_disk += f"; checkpoint ({trainer.last_checkpoint} updates done): {cmd.out / 'checkpoint.pt'}"
        print(on_disk)
    if cmd.store and record.status in ("finished", "diverged"):
        from spanviz.store import ResultsStore

        store = ResultsStore()
        try:
            key = store.put(record)
        except OSError as error:
            print(f"warning: could not put the run into the results store {store.root}: {error.strerror or error}",
                  file=sys.stderr)
        else:
            print(f"results store: {key[:12]} in {store.root}")
    return 0 if record.status == "finished" else 1


# ============================================================================================ sweep
def parse_overrides(items: Sequence[str], flag: str, options_class: type) -> dict[str, Any]:
    """``("KEY=VALUE", ...)`` → ``{field: value}``, parsed by tyro from the generated ``options_class``.

    KEY is a field name (``context_length`` or ``context-length``); VALUE is converted to the field's type.
    Raises:
        UsageError: an item without "=", or a KEY / VALUE tyro refuses (tyro's message is kept).
    """
    args: list[str] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} takes KEY=VALUE, got {item!r}")
        args += [_flag(key.strip()), value]
    if not args:
        return {}
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            parsed = tyro.cli(options_class, args=args, prog=f"spanviz sweep {flag} KEY=VALUE")
    except SystemExit:
        names = ", ".join(sorted(_SOURCES[options_class][1]))
        raise UsageError(f"{flag} {' '.join(items)}: {tyro_message(captured.getvalue())} (KEY is one of {names})"
                         ) from None
    return {k: v for k, v in config_kwargs(parsed).items() if v is not None}


def sweep_function(experiment: str) -> Callable[..., dict[str, Any]]:
    import importlib

    module = importlib.import_module(SWEEP_MODULES[experiment])
    return getattr(module, {"spans": "spans_sweep", "ls": "ls_sweep", "fp8": "fp8_sweep"}[experiment])


def sweep_variants(experiment: str, size: str, steps: int | None, model: dict, train: dict
                   ) -> list[tuple[GPTConfig, TrainConfig]]:
    """The (model, train) configs a sweep will train, built with a placeholder vocabulary (nothing trained)."""
    import importlib

    module = importlib.import_module(SWEEP_MODULES[experiment])
    if experiment == "spans":
        variants, _ = module.build_variants(size, vocab_size=256, steps=steps, model=model, train=train)
        return list(variants.values())
    if experiment == "ls":
        return list(module.ls_variants(size, 256, steps=steps, model=model, train=train).values())
    steps = 200 if steps is None else steps
    model_cfg = GPTConfig(**{**module.DEFAULT_MODEL, "vocab_size": 256, **model})
    train_cfg = TrainConfig(**{**module.DEFAULT_TRAIN, "eval_interval": steps, **train, "steps": steps,
                               "device": "cpu"})
    return [(model_cfg, train_cfg)]


def sweep_sizes(experiment: str) -> tuple[str, ...]:
    import importlib

    sizes = getattr(importlib.import_module(SWEEP_MODULES[experiment]), "SIZES", ("cpu",))
    return tuple(sizes)


def cmd_sweep(cmd: SweepCommand) -> int:
    from spanviz.train import check_runnable

    experiment = cmd.experiment
    sizes = sweep_sizes(experiment)
    if cmd.size not in sizes:
        raise UsageError(f"--size {cmd.size}: sweep {experiment} has sizes {', '.join(sizes)}")
    if cmd.seeds is not None and cmd.seeds < 1:
        raise UsageError(f"--seeds {cmd.seeds}: must be a number of seeds >= 1")
    low = 2 if experiment == "fp8" else 1
    if cmd.steps is not None and cmd.steps < low:
        raise UsageError(f"--steps {cmd.steps}: must be an integer >= {low}")
    if cmd.scenario is not None and experiment != "fp8":
        raise UsageError(f"--scenario {cmd.scenario}: applies to sweep fp8 only")
    executor = sweep_executor(cmd)
    model = parse_overrides(cmd.model, "--model", ModelOverrides)
    train = parse_overrides(cmd.train, "--train", TrainOverrides)
    seeds, steps = cmd.seeds, cmd.steps
    if smoke():
        seeds = min(seeds or 2, 2)
        steps = _shrink(steps, low) if steps is not None else 3
        model["context_length"] = min(model.get("context_length", 32), 32)
        train["batch_size"] = min(train.get("batch_size", 4), 4)
        train["eval_iters"] = min(train.get("eval_iters", 2), 2)
        train["warmup_steps"] = min(train.get("warmup_steps", 0), steps)
        _announce_smoke(f"a seconds-long sweep ({seeds} seeds, {steps} updates per run, context ≤ 32, batch ≤ 4)")
    try:
        variants = sweep_variants(experiment, cmd.size, steps, model, train)
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
        import importlib

        choice = importlib.import_module(SWEEP_MODULES["ls"]).SIZES[cmd.size]["tokenizer"]
        tokenizer, max_vocab = choice["tokenizer"], choice["max_vocab"] or 0
    settings = data_settings(cmd.data, tokenizer=tokenizer, max_vocab=max_vocab)
    check_home()
    if cmd.out is not None:
        if cmd.out.is_dir():
            raise UsageError(f"--out {cmd.out}: is a folder; give a file name, e.g. {cmd.out / 'results.json'}")
        if cmd.out.suffix != ".json":
            raise UsageError(f"--out {cmd.out}: must end in .json (the per-seed table is written beside it)")
        check_writable_folder(cmd.out.parent, f"--out {cmd.out}")
    data = load_data(settings)
    result = run_sweep(cmd, executor, data, seeds, steps, model, train)
    if result is None:
        return 1
    print_sweep(result)
    if cmd.out is not None:  # the summary, and the per-seed table beside it (.per_seed.json / .per_seed.csv)
        from spanviz.experiments import save_sweep

        print("results: " + ", ".join(str(path) for path in save_sweep(result, cmd.out)))
    return 0


def sweep_executor(cmd: SweepCommand) -> Any:
    """The executor of ``--executor`` / ``--workers`` / ``--address``, checked before any data is read.

    Raises:
        UsageError: --workers < 1, --workers / --address without --executor ray, or Ray not installed (the
            message says how to install it).
    """
    from spanviz.experiments.executors import MissingExtraError, make_executor

    if cmd.workers is not None and cmd.workers < 1:
        raise UsageError(f"--workers {cmd.workers}: must be a number of workers >= 1")
    if cmd.executor == "local" and (cmd.workers is not None or cmd.address is not None):
        given = "--workers" if cmd.workers is not None else "--address"
        raise UsageError(f"{given} applies to --executor ray (the local executor trains one run after another)")
    try:
        return make_executor(cmd.executor, workers=cmd.workers, address=cmd.address)
    except MissingExtraError:
        raise UsageError(f'--executor {cmd.executor} needs Ray, an optional extra: pip install '
                         '"spanviz[distributed]"') from None
    except ValueError as error:
        raise UsageError(f"--address {cmd.address}: {error}") from None


def run_sweep(cmd: SweepCommand, executor: Any, data: Any, seeds: int | None, steps: int | None, model: dict,
              train: dict) -> dict[str, Any] | None:
    """Run the sweep with one progress bar over its runs; print how many were replayed and trained.

    Returns the sweep's result, or None after printing the runs that failed (each with its configuration).
    """
    from tqdm.auto import tqdm

    from spanviz.experiments.core import RunsFailedError
    from spanviz.store import ResultsStore

    sweep = sweep_function(cmd.experiment)
    kwargs: dict[str, Any] = dict(data=data, model=model or None, train=train or None, executor=executor)
    if steps is not None:
        kwargs["steps"] = steps
    if cmd.scenario is not None:
        kwargs["scenarios"] = (cmd.scenario,)
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
    from spanviz.experiments import format_table

    print(format_table(result["rows"]))
    if result.get("verdict"):
        print(result["verdict"])


# ============================================================================================= runs
def cmd_runs(cmd: RunsCommand) -> int:
    from spanviz.store import ResultsStore

    store = ResultsStore(cmd.store)
    if store.root.exists() and not store.root.is_dir():
        raise UsageError(f"--store {store.root}: is a file, not a folder")
    if cmd.action == "list":
        if cmd.file is not None:
            raise UsageError(f"runs list takes no FILE, got {cmd.file}")
        good, bad = store.scan()
        for key, record in good.items():
            cfg = record.config
            best = record.best_val_loss
            print(f"{key[:12]}  {record.status:9s}  {cfg.get('variant', '-')!s:24s}  seed {cfg.get('seed', '-')}  "
                  f"best val {'n/a' if best is None else f'{best:.4f}'}")
        for _, why in bad:
            print(f"warning: skipped a damaged entry: {why}", file=sys.stderr)
        print(f"{len(good)} runs in {store.root}" + (f" ({len(bad)} damaged, skipped)" if bad else ""))
        return 0
    if cmd.file is None:
        raise UsageError(f"runs {cmd.action} needs a FILE, e.g. spanviz runs {cmd.action} workshop.zip")
    if cmd.file.is_dir():
        raise UsageError(f"runs {cmd.action} {cmd.file}: is a folder; give a .zip file, e.g. {cmd.file / 'runs.zip'}")
    if cmd.action == "export":
        good, bad = store.scan()
        for _, why in bad:
            print(f"warning: not exported, damaged: {why}", file=sys.stderr)
        path = store.export(cmd.file, keys=list(good))
        print(f"exported {len(good)} runs to {path}" + (f" ({len(bad)} damaged entries left out)" if bad else ""))
        return 0
    check_writable_folder(store.root, f"the results store {store.root}")
    report = store.import_report(cmd.file, overwrite=cmd.overwrite)
    for entry, why in report.rejected:
        print(f"warning: rejected {entry}: {why}", file=sys.stderr)
    print(f"imported {len(report.written)} runs into {store.root}"
          + (f"; {len(report.kept)} already there, kept (--overwrite replaces them)" if report.kept else "")
          + (f"; {len(report.rejected)} rejected" if report.rejected else ""))
    return 0 if not report.rejected else 1


# ============================================================================================ bench
def cmd_bench(cmd: BenchCommand) -> int:
    from spanviz.bench import format_results, run_benchmarks
    from spanviz.train import resolve_device

    try:
        resolve_device(cmd.device)
    except ValueError as error:
        raise UsageError(as_flags(str(error))) from None
    only = cmd.only
    if only is not None:
        names = [s.strip() for s in only.split(",") if s.strip()]
        unknown = [n for n in names if n not in BENCH_SECTIONS]
        if unknown or not names:
            raise UsageError(f"--only {only}: sections are {', '.join(BENCH_SECTIONS)} (comma-separated)")
    quick, data_dir = cmd.quick, cmd.data_dir
    if data_dir is None:
        folder, _ = data_lib.resolve_data_source()
        data_dir = Path(folder) if folder is not None else None
    if smoke():
        only, quick, data_dir = "core", True, None
        _announce_smoke("the quick core step-ratio benchmark only (no notebook-config run)")
    results = run_benchmarks(only=only, device=cmd.device, data_dir=None if data_dir is None else str(data_dir),
                             quick=quick)
    print(json.dumps(results, indent=2) if cmd.json else format_results(results))
    failed = [name for name, section in results.items() if isinstance(section, dict) and "error" in section]
    for name in failed:
        print(f"warning: benchmark section {name} failed: {results[name]['error']}", file=sys.stderr)
    return 1 if failed else 0


# ============================================================================================= main
def _config_file_defaults(argv: Sequence[str]) -> TrainCommand | None:
    """The train command's defaults from ``--config FILE``, or None (tyro's pattern for config files)."""
    if not argv or argv[0] != "train":
        return None
    path = None
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            path = argv[i + 1]
        elif arg.startswith("--config="):
            path = arg.partition("=")[2]
    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
        obj = json.loads(text)
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"--config {path}: cannot be read ({getattr(error, 'strerror', None) or error})") from None
    except (json.JSONDecodeError, RecursionError) as error:
        raise UsageError(f"--config {path}: not JSON ({error})") from None
    if isinstance(obj, dict) and isinstance(obj.get("config"), dict):  # a run.json
        obj = obj["config"]
    if not isinstance(obj, dict) or not ({"model", "train"} & set(obj)):
        raise UsageError(f"--config {path}: expected a JSON object with a 'model' and/or 'train' section "
                         "(GPTConfig / TrainConfig fields), or a run.json")
    model, train = obj.get("model") or {}, obj.get("train") or {}
    if not isinstance(model, dict) or not isinstance(train, dict):
        raise UsageError(f"--config {path}: 'model' and 'train' must be JSON objects")
    spans = model.get("spans")
    model = {k: v for k, v in model.items() if k not in ("vocab_size", "spans")}
    for config_class, section, values in ((GPTConfig, "model", model), (TrainConfig, "train", train)):
        try:  # each section must be valid on its own (with the other fields at their defaults)
            config_class(**values)
        except (TypeError, ValueError) as error:
            raise UsageError(f"--config {path}: its {section!r} section: {error}") from None
    base = TrainCommand()
    try:
        model_opts = replace(base.model, **model)
        train_opts = replace(base.train, **train)
    except TypeError as error:
        raise UsageError(f"--config {path}: {error}; the allowed keys are GPTConfig / TrainConfig fields") from None
    span_opts = base.spans
    if isinstance(spans, dict):
        alphas = spans.get("alphas")
        span_opts = replace(span_opts, spans_preset=spans.get("preset"),
                            alphas=",".join(map(str, alphas)) if isinstance(alphas, list) else alphas,
                            spans_layers=tuple(spans["layers"]) if spans.get("layers") else None)
    return replace(base, model=model_opts, train=train_opts, spans=span_opts)


def _command_type(train_default: TrainCommand | None) -> Any:
    """The tyro type: a union of the subcommands (train with ``--config`` defaults when given)."""
    options = []
    for name, cls in COMMANDS.items():
        default = train_default if (cls is TrainCommand and train_default is not None) else None
        marker = tyro.conf.subcommand(name=name, default=default) if default is not None else \
            tyro.conf.subcommand(name=name)
        options.append(Annotated[cls, marker])
    return Union[tuple(options)]  # noqa: UP007 - built at run time


_SEPARATOR = re.compile(r"^[\s│╭╮╰╯─┬┴├┤-]*$")


def tyro_message(text: str) -> str:
    """tyro's error panel condensed to one line: the error, then tyro's first suggestion or the argument's help."""
    blocks: list[list[str]] = [[]]
    for line in text.splitlines():
        if _SEPARATOR.match(line):
            if blocks[-1]:
                blocks.append([])
        else:
            blocks[-1].append(line.strip(" │"))
    blocks = [b for b in blocks if b]
    parts = []
    for block in blocks[1:]:  # blocks[0] is the panel's title
        head, rest = block[0], block[1:]
        if head.startswith("For full helptext"):
            continue
        if head.rstrip(":") in ("Perhaps you meant", "Argument helptext") and rest:
            rest = rest[:2] if head.startswith("Argument") else rest[:1]
            parts.append(f"{head.rstrip(':').lower()}: {' '.join(rest)}")
        else:
            parts.append(" ".join([head, *rest]))
    return "; ".join(parts) if parts else " ".join(text.split())


def parse(argv: Sequence[str], train_default: TrainCommand | None) -> Any:
    """The command object of ``argv`` (tyro). Help goes to stdout as tyro renders it; a parse error becomes a
    :class:`UsageError` with tyro's message on one line. Raises ``SystemExit(0)`` after printing help."""
    kind = _command_type(train_default)
    if "-h" in argv or "--help" in argv:
        return tyro.cli(kind, args=argv, prog="spanviz", description=__doc__.split("\n\n")[0])
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            return tyro.cli(kind, args=argv, prog="spanviz", description=__doc__.split("\n\n")[0])
    except SystemExit as exit_:
        if not exit_.code:
            sys.stdout.write(captured.getvalue())
            raise
        raise UsageError(tyro_message(captured.getvalue())) from None


def given_flags(argv: Sequence[str]) -> set[str]:
    """The flags typed on the command line, dashed (``--n_layer=4`` → ``--n-layer``)."""
    return {"--" + a[2:].partition("=")[0].replace("_", "-") for a in argv if a.startswith("--") and len(a) > 2}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``spanviz`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    0 success; 1 the run diverged, a benchmark section failed, or an import rejected runs; 2 bad input (one
    line on stderr naming the flag); 130 Ctrl-C (the run is saved and can be resumed).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    name = argv[0] if argv and argv[0] in COMMANDS else None
    prefix = f"spanviz {name}" if name else "spanviz"
    verbose = "--verbose" in argv
    try:
        train_default = _config_file_defaults(argv)
        try:
            cmd = parse(argv, train_default)
        except SystemExit as exit_:  # after --help
            return int(exit_.code or 0)
        logging.basicConfig(level=logging.INFO if cmd.verbose else logging.WARNING,
                            format="%(levelname)s %(name)s: %(message)s")
        if isinstance(cmd, TrainCommand):
            return cmd_train(cmd, given_flags(argv))
        handler = {PrepareDataCommand: cmd_prepare_data, SweepCommand: cmd_sweep, RunsCommand: cmd_runs,
                   BenchCommand: cmd_bench}[type(cmd)]
        return handler(cmd)
    except KeyboardInterrupt:
        print(f"{prefix}: interrupted", file=sys.stderr)
        return 130
    except (UsageError, data_lib.HubUnavailableError) as error:
        print(f"{prefix}: error: {data_message(error) if not isinstance(error, UsageError) else error}",
              file=sys.stderr)
        return 2
    except ValueError as error:  # a library check (checkpoint, lock, folder, config): rewritten as flags
        print(f"{prefix}: error: {as_flags(str(error))}", file=sys.stderr)
        return 2
    except OSError as error:
        where = f"{error.filename}: " if getattr(error, "filename", None) else ""
        print(f"{prefix}: error: {where}{error.strerror or error}", file=sys.stderr)
        return 1
    except Exception as error:  # noqa: BLE001 - a bug: one line, the traceback with --verbose
        if verbose:
            raise
        print(f"{prefix}: internal error: {type(error).__name__}: {error} (run again with --verbose for the "
              "traceback, and please report it)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
