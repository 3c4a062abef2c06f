"""``spanviz``'s entry point: parse the command line (tyro), run the command, turn errors into one line and an
exit status (0 success; 1 a run diverged, a benchmark section or an import failed; 2 bad input; 130 Ctrl-C)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Union

import tyro

from spanviz import data as data_lib
from spanviz.cli.bench import cmd_bench
from spanviz.cli.common import cmd_prepare_data, data_message
from spanviz.cli.options import (
    COMMANDS, BenchCommand, DataOptions, PrepareDataCommand, RunsCommand, SweepCommand, TrainCommand, UsageError,
    as_flags, tyro_message,
)
from spanviz.cli.plans import probe_options_of
from spanviz.cli.runs import cmd_runs
from spanviz.cli.sweep import cmd_sweep
from spanviz.cli.train import cmd_train
from spanviz.files import UnreadableFileError, expand_user, read_bounded
from spanviz.model import GPTConfig
from spanviz.spans import SpanConfig
from spanviz.train import TrainConfig
from spanviz.train.record import MAX_RECORD_FILE_BYTES

DESCRIPTION = ("The ``spanviz`` command: ``prepare-data``, ``train``, ``sweep``, ``runs``, ``bench`` "
               "(also ``python -m spanviz``).")
"""The first line of ``spanviz --help`` (the package docstring's first paragraph)."""


CONFIG_MAX_BYTES = MAX_RECORD_FILE_BYTES
"""Largest ``--config`` file read [bytes] (a run.json is at most a store record)."""
PATH_FLAGS = ("--out", "--data-dir", "--config")
"""Flags that take a path (and ``runs --store``): an empty value would silently mean the working directory."""


@dataclass(frozen=True)
class ConfigFile:
    """What ``--config FILE`` gave: the train command's defaults, and for a run.json the data it was trained on."""

    path: str
    default: TrainCommand
    data: dict[str, Any] | None = None


def _refuse_empty_paths(argv: Sequence[str]) -> None:
    """``--out ''`` is ``Path('')``, the working directory: refuse an empty path rather than write there."""
    flags = (*PATH_FLAGS, "--store") if argv and argv[0] == "runs" else PATH_FLAGS
    for i, arg in enumerate(argv):
        flag, sep, value = arg.partition("=")
        if flag in flags and ((sep and not value.strip()) or (not sep and i + 1 < len(argv)
                                                                   and not argv[i + 1].strip())):
            raise UsageError(f"{flag} '': an empty path (it would mean the working directory); give a path")


def _span_options(spans: Any, path: str) -> Any:
    """The span flags of a config file's ``model.spans`` (None, or a SpanConfig dict the flags can express)."""
    base = TrainCommand().spans
    if spans is None:
        return base
    if not isinstance(spans, dict):
        raise UsageError(f"--config {path}: model.spans must be null (off) or an object with preset / alphas / "
                         f"layers (a SpanConfig), got {json.dumps(spans)[:80]}")
    try:
        cfg = SpanConfig(**spans)
    except (TypeError, ValueError) as error:
        raise UsageError(f"--config {path}: model.spans: {error}") from None
    flags = SpanConfig(preset=cfg.preset, alphas=cfg.alphas, layers=cfg.layers)
    if flags != cfg:
        raise UsageError(f"--config {path}: model.spans sets more than --spans-preset / --alphas / --spans-layers can "
                         "(slots, block_alphas or ridge); train it from Python (spanviz.train.Trainer)")
    return replace(base, spans_preset=cfg.preset, alphas=",".join(repr(a) for a in cfg.alphas),
                   spans_layers=cfg.layers)


def _data_options(data: dict[str, Any], path: str) -> DataOptions:
    """The data flags that read the data a run.json was trained on (the folder only where it still exists)."""
    opts = DataOptions()
    splits = data.get("splits") if isinstance(data.get("splits"), dict) else {}
    try:
        source = data.get("source")
        folder = Path(source) if isinstance(source, str) and source != data_lib.HUB_ID else None
        return replace(
            opts,
            data_dir=folder if folder is not None and folder.is_dir() else None,
            train_split=splits.get("train", opts.train_split), eval_split=splits.get("eval", opts.eval_split),
            wikitext_config=data.get("config", opts.wikitext_config),
            tokenizer=data.get("tokenizer", opts.tokenizer),
            max_vocab=opts.max_vocab if data.get("tokenizer") == "byte" else (data.get("max_vocab") or 0))
    except TypeError as error:
        raise UsageError(f"--config {path}: its data section: {error}") from None


def _config_file_defaults(argv: Sequence[str]) -> ConfigFile | None:
    """The train command's defaults from ``--config FILE`` (tyro's pattern for config files), or None.

    A JSON object with ``model`` and/or ``train`` sections (GPTConfig / TrainConfig fields), or a run.json,
    whose ``data`` (splits, tokenizer, vocabulary cap, folder) and ``probes`` become defaults too. What the
    flags cannot reproduce (probes or span settings set from Python) is refused. The file is checked with
    ``stat`` before it is read: a regular file of at most :data:`CONFIG_MAX_BYTES`.
    """
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
        obj = json.loads(read_bounded(expand_user(path, f"--config {path}"), CONFIG_MAX_BYTES, f"--config {path}"))
    except UnreadableFileError as error:
        raise UsageError(str(error)) from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise UsageError(f"--config {path}: not JSON ({error})") from None
    run_json = isinstance(obj, dict) and isinstance(obj.get("config"), dict)
    if run_json:
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
    default = replace(base, model=model_opts, train=train_opts, spans=_span_options(spans, path))
    data = obj.get("data")
    if isinstance(data, dict):
        default = replace(default, data=_data_options(data, path))
    elif data is not None:
        raise UsageError(f"--config {path}: 'data' must be a JSON object (a run.json's data description)")
    probes = obj.get("probes")
    if probes is not None:
        if not isinstance(probes, list):
            raise UsageError(f"--config {path}: 'probes' must be a list (a run.json's probe descriptions)")
        try:
            default = replace(default, probes=probe_options_of(probes, Path(path), f"--config {path}"))
        except UsageError:
            raise
        except (TypeError, ValueError, AttributeError) as error:
            raise UsageError(f"--config {path}: its probes: {error}") from None
    return ConfigFile(path, default, data if run_json and isinstance(data, dict) else None)


def _command_type(train_default: TrainCommand | None) -> Any:
    """The tyro type: a union of the subcommands (train with ``--config`` defaults when given)."""
    options = []
    for name, cls in COMMANDS.items():
        default = train_default if (cls is TrainCommand and train_default is not None) else None
        marker = tyro.conf.subcommand(name=name, default=default) if default is not None else \
            tyro.conf.subcommand(name=name)
        options.append(Annotated[cls, marker])
    return Union[tuple(options)]  # noqa: UP007 - built at run time


def parse(argv: Sequence[str], train_default: TrainCommand | None) -> Any:
    """The command object of ``argv`` (tyro). Help goes to stdout as tyro renders it; a parse error becomes a
    :class:`UsageError` with tyro's message on one line. Raises ``SystemExit(0)`` after printing help."""
    kind = _command_type(train_default)
    if "-h" in argv or "--help" in argv:
        return tyro.cli(kind, args=argv, prog="spanviz", description=DESCRIPTION)
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            return tyro.cli(kind, args=argv, prog="spanviz", description=DESCRIPTION)
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
        _refuse_empty_paths(argv)
        config_file = _config_file_defaults(argv)
        try:
            cmd = parse(argv, config_file.default if config_file is not None else None)
        except SystemExit as exit_:  # after --help
            return int(exit_.code or 0)
        logging.basicConfig(level=logging.INFO if cmd.verbose else logging.WARNING,
                            format="%(levelname)s %(name)s: %(message)s")
        if isinstance(cmd, TrainCommand):
            return cmd_train(cmd, given_flags(argv), config_data=config_file.data if config_file else None)
        if isinstance(cmd, SweepCommand):
            return cmd_sweep(cmd, given_flags(argv))
        if isinstance(cmd, PrepareDataCommand):
            return cmd_prepare_data(cmd, given_flags(argv))
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
