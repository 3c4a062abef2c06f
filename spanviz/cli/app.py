"""``spanviz``'s entry point: parse the command line (tyro), run the command, turn errors into one line and an
exit status (0 success; 1 a run diverged, a benchmark section or an import failed; 2 bad input; 130 Ctrl-C)."""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Union

import tyro

import spanviz
from spanviz.cli.bench import BenchCommand, cmd_bench
from spanviz.cli.common import UsageError, as_flags, data_message
from spanviz.cli.config_file import read_config_file
from spanviz.cli.help import DESCRIPTION
from spanviz.cli.prepare_data import PrepareDataCommand, cmd_prepare_data
from spanviz.cli.runs import RunsCommand, cmd_runs
from spanviz.cli.site import SiteCommand, cmd_site
from spanviz.cli.sweep import SweepCommand, cmd_sweep
from spanviz.cli.train import TrainCommand, cmd_train
from spanviz.data.hub import HubUnavailableError

COMMANDS: dict[str, type] = {"prepare-data": PrepareDataCommand, "train": TrainCommand, "sweep": SweepCommand,
                             "runs": RunsCommand, "bench": BenchCommand, "site": SiteCommand}
"""Subcommand → its flags (a dataclass tyro reads: fields, types, defaults, docstrings)."""
PATH_FLAGS = ("--out", "--data-dir", "--config")
"""Flags that take a path (and ``runs --store``): an empty value would silently mean the working directory."""
PACKAGE_DIR = Path(spanviz.__file__).parent


def refuse_empty_paths(argv: Sequence[str]) -> None:
    """``--out ''`` is ``Path('')``, the working directory: refuse an empty path rather than write there."""
    flags = (*PATH_FLAGS, "--store") if argv and argv[0] == "runs" else PATH_FLAGS
    for i, arg in enumerate(argv):
        flag, sep, value = arg.partition("=")
        if flag in flags and ((sep and not value.strip()) or (not sep and i + 1 < len(argv)
                                                                   and not argv[i + 1].strip())):
            raise UsageError(f"{flag} '': an empty path (it would mean the working directory); give a path")


def _config_error(exit_: SystemExit) -> ValueError | None:
    """The ValueError a config class raised while tyro built it (tyro reports it and exits), else None.

    Told apart from tyro's own parse errors by where it was raised: in spanviz's code (a ``__post_init__``).
    """
    error = exit_.__context__
    while error is not None:
        if isinstance(error, ValueError) and any(
                Path(frame.f_code.co_filename).is_relative_to(PACKAGE_DIR)
                for frame, _ in traceback.walk_tb(error.__traceback__)):
            return error
        error = error.__context__
    return None


def parse(argv: Sequence[str]) -> Any:
    """The command object of ``argv`` (tyro). Help goes to stdout as tyro renders it (``SystemExit(0)``).

    Raises:
        UsageError: a value a config class refuses (its message in flag names, one line).
        SystemExit(2): any other parse error, after tyro printed its own message to stderr (tyro runs silently
            first, so that a config class's refusal is said once, in flag names).
    """
    kind = Union[tuple(Annotated[cls, tyro.conf.subcommand(name=name)]  # noqa: UP007 - built at run time
                       for name, cls in COMMANDS.items())]
    if "-h" in argv or "--help" in argv:
        return tyro.cli(kind, args=argv, prog="spanviz", description=DESCRIPTION)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return tyro.cli(kind, args=argv, prog="spanviz", description=DESCRIPTION)
    except SystemExit as exit_:
        error = _config_error(exit_)
        if error is not None:
            raise UsageError(as_flags(str(error))) from None
    return tyro.cli(kind, args=argv, prog="spanviz", description=DESCRIPTION)  # fails again, saying why


def given_flags(argv: Sequence[str]) -> dict[str, str]:
    """The flags typed on the command line, dashed (``--n_layer=4`` → ``--n-layer``), each with the text that
    follows it (its value, or the next argument)."""
    given = {}
    for i, arg in enumerate(argv):
        if arg.startswith("--") and len(arg) > 2:
            flag, sep, value = arg[2:].partition("=")
            given["--" + flag.replace("_", "-")] = value if sep else (argv[i + 1] if i + 1 < len(argv) else "")
    return given


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``spanviz`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    0 success; 1 the run diverged, a benchmark section failed, or an import rejected runs; 2 bad input (one
    line on stderr naming the flag; after tyro's own message for a flag it cannot parse); 130 Ctrl-C (the run
    is saved and can be resumed).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    name = argv[0] if argv and argv[0] in COMMANDS else None
    prefix = f"spanviz {name}" if name else "spanviz"
    verbose = "--verbose" in argv
    try:
        refuse_empty_paths(argv)
        config = read_config_file(argv) if name == "train" else None
        try:  # a --config file's values go first, as flags: typed flags override them
            cmd = parse([argv[0], *config.flags, *argv[1:]] if config is not None else argv)
        except SystemExit as exit_:
            if exit_.code:
                print(f"{prefix}: error: the command line was refused (above); `{prefix} --help` lists the "
                      "flags", file=sys.stderr)
                return 2
            return 0  # after --help
        logging.basicConfig(level=logging.INFO if cmd.verbose else logging.WARNING,
                            format="%(levelname)s %(name)s: %(message)s")
        given = given_flags(argv)
        if isinstance(cmd, TrainCommand):
            return cmd_train(cmd, given, config)
        if isinstance(cmd, SweepCommand):
            return cmd_sweep(cmd, given)
        if isinstance(cmd, PrepareDataCommand):
            return cmd_prepare_data(cmd, given)
        if isinstance(cmd, SiteCommand):
            return cmd_site(cmd)
        return cmd_runs(cmd) if isinstance(cmd, RunsCommand) else cmd_bench(cmd)
    except KeyboardInterrupt:
        print(f"{prefix}: interrupted", file=sys.stderr)
        return 130
    except (UsageError, HubUnavailableError) as error:
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
