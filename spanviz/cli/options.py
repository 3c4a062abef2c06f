"""The command line's vocabulary: the options generated from the config dataclasses (tyro), the subcommands,
and error messages in flag names."""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, make_dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import docstring_parser
import tyro

from spanviz import data as data_lib
from spanviz.bench import SECTIONS as BENCH_SECTIONS
from spanviz.model import ATTN_BACKENDS, GPTConfig
from spanviz.spans import SpanConfig
from spanviz.spans.config import PRESETS
from spanviz.train import TrainConfig
from spanviz.train.config import DTYPES

SWEEP_MODULES = {"spans": "spanviz.experiments.spans", "ls": "spanviz.experiments.ls",
                 "fp8": "spanviz.experiments.fp8"}


class UsageError(ValueError):
    """A command-line mistake; its message already names the flags."""


# ================================================================ options generated from the config classes
OPTION_SOURCES: dict[type, tuple[type, dict[str, str]]] = {}
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
    OPTION_SOURCES[cls] = (config_class, mapping)
    return cls


def config_kwargs(options: Any) -> dict[str, Any]:
    """The config-class keyword arguments of a generated options instance (``None`` left out if optional)."""
    _, mapping = OPTION_SOURCES[type(options)]
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
    origin: Literal["bundle", "local"] | None = None
    """list/export only the runs of the workshop bundle shipped with spanviz (bundle), or only the others (local:
    trained here or imported)."""
    device: str | None = None
    """list/export only the runs whose device contains this text, any case (cpu, cuda, H100)."""
    experiment: str | None = None
    """list/export only the runs of this experiment: spans, ls, fp8 (sweeps; or e.g. ls/gpu) or notebook (panels)."""
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
    """fewer rounds, the growth table at T 128 and 256 only, no sweep: a few minutes on 2 cores (noisier)."""
    browser: bool = False
    """also time the sliders in JupyterLab in Chromium (the only part that starts a browser)."""
    out: Path | None = None
    """write the JSON to this file after every section (a long run leaves each finished section on disk)."""
    data_dir: Path | None = None
    """WikiText-2 folder for the notebook-config benchmark (default: as for train)."""
    verbose: bool = False
    """log at INFO level."""


COMMANDS: dict[str, type] = {"prepare-data": PrepareDataCommand, "train": TrainCommand, "sweep": SweepCommand,
                             "runs": RunsCommand, "bench": BenchCommand}


# ===================================================================================== error messages
def flag_name(option: str) -> str:
    return "--" + option.replace("_", "-")


def _flag_names() -> dict[str, str]:
    """Config field → the flag that sets it (for messages)."""
    names = {"vocab_size": "--max-vocab", "every": "--probe-every", "spans.layers": "--spans-layers"}
    for cls in (ModelOptions, SpanOptions, TrainOptions):
        for option, config_field in OPTION_SOURCES[cls][1].items():
            names[config_field] = flag_name(option)
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
