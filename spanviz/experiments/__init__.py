"""Experiments: the papers' comparisons, as grids of configurations × seeds with a results store.

:mod:`spanviz.experiments.core` holds the generic machinery re-exported here (:func:`run_grid`,
:func:`summarize`, :func:`format_table`, :func:`metric_value`); the technique experiments live in
:mod:`spanviz.experiments.spans`, :mod:`~spanviz.experiments.ls` and :mod:`~spanviz.experiments.fp8`
(import them directly: they are not imported here, so this package stays cheap to import).
"""

from spanviz.experiments.core import METRICS, format_table, metric_value, run_grid, summarize
from spanviz.store import ResultsStore

__all__ = ["METRICS", "ResultsStore", "format_table", "metric_value", "run_grid", "summarize"]
