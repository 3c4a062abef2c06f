"""Experiments: the papers' comparisons, as grids of configurations × seeds with a results store.

* :mod:`~spanviz.experiments.core` — :func:`run_grid` trains every variant × seed (or replays it from the store)
  on an executor (:mod:`~spanviz.experiments.executors`: local, or Ray);
* :mod:`~spanviz.experiments.stats` — :func:`compare_groups`, :func:`~spanviz.experiments.stats.paired_comparison`,
  :func:`~spanviz.experiments.stats.holm`, :func:`~spanviz.experiments.stats.equivalence_test`: paired tests over
  seeds, Holm-corrected verdicts and their words;
* :mod:`~spanviz.experiments.results` — the per-seed table of a sweep's records and its summary
  (:func:`~spanviz.experiments.results.per_seed_table`, :func:`~spanviz.experiments.results.summarize`),
  :func:`save_sweep`, :func:`read_per_seed`, :func:`~spanviz.experiments.results.format_table`;
* the technique experiments: :mod:`spanviz.experiments.spans`, :mod:`~spanviz.experiments.ls` and
  :mod:`~spanviz.experiments.fp8` (with :mod:`~spanviz.experiments.fp8_runs`, its transient and per-run counts)
  — import them directly: they are not imported here, so this package stays cheap to import.

The package exports the three names the docs use (:func:`compare_groups`, :func:`read_per_seed`,
:func:`save_sweep`); everything else is imported from its module.

Data: the experiments read WikiText-2 through :func:`spanviz.data.load_tokens`, the split policy of
:mod:`spanviz.settings` (a local folder trains on validation and evaluates on test unless told otherwise).
"""

from spanviz.experiments.results import read_per_seed, save_sweep
from spanviz.experiments.stats import compare_groups

__all__ = ["compare_groups", "read_per_seed", "save_sweep"]
