"""``spanviz --help`` without importing the commands: their modules bring torch and scipy (5–6 s on a laptop, 11 s
on a busy 2-core machine) for a list of six lines. The list is rendered by tyro from stand-in classes that carry
each command's summary (the first paragraph of its class docstring); tests/test_cli.py checks that it is the same
text as the full ``--help``."""

from __future__ import annotations

from dataclasses import make_dataclass
from typing import Annotated, Union

import tyro

DESCRIPTION = ("The ``spanviz`` command: ``prepare-data``, ``train``, ``sweep``, ``runs``, ``bench``, ``site`` "
               "(also ``python -m spanviz``).")
"""The first line of ``spanviz --help``."""

SUMMARIES = {
    "prepare-data": ("PrepareDataCommand", "Read WikiText-2 (a local folder or the hub), tokenize it and cache the "
                     "token ids; remember a local folder."),
    "train": ("TrainCommand", "Train a TinyGPT: run.json + checkpoint.pt in --out (checkpointed at every evaluation), "
              "record in the store."),
    "sweep": ("SweepCommand", "Run a paper comparison (spans, ls, fp8) or a teaching sweep (growth, alphas) over "
              "seeds; print the seed noise."),
    "runs": ("RunsCommand", "List, export or import the results store: runs that replay instantly, e.g. for a "
             "workshop."),
    "bench": ("BenchCommand", "Benchmarks: ratios measured within one run (the test suite never times anything)."),
    "site": ("SiteCommand", "Build the notebooks as a folder of static pages (open OUT/index.html in a browser: no "
             "Python, no network)."),
}
"""Subcommand → (its class's name, the first paragraph of its docstring), in the order of ``spanviz.cli.app``'s."""


def top_help() -> int:
    """Print ``spanviz --help`` (tyro's rendering, as the full parser prints it); returns 0."""
    stubs = tuple(Annotated[make_dataclass(cls, [], namespace={"__doc__": doc}), tyro.conf.subcommand(name=name)]
                  for name, (cls, doc) in SUMMARIES.items())
    try:
        tyro.cli(Union[stubs], args=["--help"], prog="spanviz", description=DESCRIPTION)  # noqa: UP007
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0
