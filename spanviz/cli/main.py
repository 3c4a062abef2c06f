"""``spanviz``'s entry point: parse the command line (tyro), run the command, turn errors into one line and an
exit status (0 success; 1 a run diverged, a benchmark section or an import failed; 2 bad input; 130 Ctrl-C)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Union

import tyro

from spanviz import data as data_lib
from spanviz.cli.bench import cmd_bench
from spanviz.cli.common import cmd_prepare_data, data_message
from spanviz.cli.options import (
    COMMANDS, BenchCommand, PrepareDataCommand, RunsCommand, SweepCommand, TrainCommand, UsageError, as_flags,
    tyro_message,
)
from spanviz.cli.runs import cmd_runs
from spanviz.cli.sweep import cmd_sweep
from spanviz.cli.train import cmd_train
from spanviz.model import GPTConfig
from spanviz.train import TrainConfig

DESCRIPTION = ("The ``spanviz`` command: ``prepare-data``, ``train``, ``sweep``, ``runs``, ``bench`` "
               "(also ``python -m spanviz``).")
"""The first line of ``spanviz --help`` (the package docstring's first paragraph)."""


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
