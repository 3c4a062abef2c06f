"""Experiments: the papers' comparisons, as grids of configurations × seeds with a results store.

:mod:`spanviz.experiments.core` holds the generic machinery re-exported here (:func:`run_grid`,
:func:`per_seed_table`, :func:`compare_groups`, :func:`summarize`, :func:`paired_comparison`, :func:`holm`,
:func:`save_sweep`, :func:`read_per_seed`, :func:`format_table`, :func:`metric_value`); the technique
experiments live in :mod:`spanviz.experiments.spans`, :mod:`~spanviz.experiments.ls` and :mod:`~spanviz.experiments.fp8`
(import them directly: they are not imported here, so this package stays cheap to import).
"""

from spanviz.experiments.core import (
    METRICS,
    compare_groups,
    format_table,
    holm,
    metric_value,
    paired_comparison,
    per_seed_table,
    read_per_seed,
    run_grid,
    save_sweep,
    summarize,
)
from spanviz.store import ResultsStore

__all__ = ["METRICS", "ResultsStore", "compare_groups", "format_table", "holm", "metric_value", "paired_comparison",
           "per_seed_table", "read_per_seed", "run_grid", "save_sweep", "summarize"]
