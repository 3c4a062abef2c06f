"""Experiments: the papers' comparisons, as grids of configurations × seeds with a results store.

* :mod:`~spanviz.experiments.core` — :func:`run_grid` trains every variant × seed (or replays it from the store)
  on an executor (:mod:`~spanviz.experiments.executors`: local, or Ray);
* :mod:`~spanviz.experiments.stats` — :func:`per_seed_table`, :func:`compare_groups`, :func:`summarize`,
  :func:`paired_comparison`, :func:`holm`, :func:`metric_value`: paired tests over seeds, Holm-corrected verdicts;
* :mod:`~spanviz.experiments.results` — :func:`save_sweep`, :func:`read_per_seed`, :func:`format_table`;
* the technique experiments: :mod:`spanviz.experiments.spans`, :mod:`~spanviz.experiments.ls` and
  :mod:`~spanviz.experiments.fp8` (with :mod:`~spanviz.experiments.fp8_runs`, its transient and per-run counts)
  — import them directly: they are not imported here, so this package stays cheap to import.

Data: the experiments read WikiText-2 through :func:`spanviz.data.load_tokens`, the split policy of
:mod:`spanviz.settings` (a local folder trains on validation and evaluates on test unless told otherwise).
"""

from spanviz.experiments.core import (
    METRICS, compare_groups, format_table, holm, metric_value, paired_comparison, per_seed_table, read_per_seed,
    run_grid, save_sweep, summarize,
)
from spanviz.store import ResultsStore

__all__ = ["METRICS", "ResultsStore", "compare_groups", "format_table", "holm", "metric_value", "paired_comparison",
           "per_seed_table", "read_per_seed", "run_grid", "save_sweep", "summarize"]
