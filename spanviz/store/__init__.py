"""A results store: run records on disk, keyed by a hash of their full configuration.

A repeated request for a configuration that was trained before replays the stored record instantly (that is
how notebooks answer a slider in seconds). An instructor precomputes runs on a GPU, :meth:`ResultsStore.export`s
them into one ``.zip`` file, and students :meth:`ResultsStore.import_` it and replay offline.

Layout: ``<root>/<key>.json``, one :class:`~spanviz.train.RunRecord` per file, written atomically (temporary
file in the same folder, then ``os.replace``); ``<root>/weights/<key>.pt``, a run's final weights where a notebook
keeps them (:mod:`~spanviz.store.weights`); ``<root>/replay/<replay key>-<key>``, empty files indexing the runs by
:func:`replay_key` (rebuilt from the records when missing). Default root: ``$SPANVIZ_HOME/runs``, with
``SPANVIZ_HOME`` defaulting to ``~/.cache/spanviz``.

Concurrent writers are safe, across processes too (the workers of a distributed sweep, two sweeps at once):
each writer has its own temporary file and ``os.replace`` swaps whole files, so a reader sees no file or a
complete one, never a mix; when two processes store the same key, one complete record wins (both hold the same
configuration). A writer killed mid-write leaves only its hidden temporary file (``.<key>.json.*.tmp``), which
listings ignore. Nothing is locked, so nothing waits.

Key: sha256 of the canonical JSON (sorted keys, no spaces, ASCII) of the record's whole ``config`` — model,
train (seed included), data description, probes and any experiment entries (``variant``, ``seed``, ``tags``)
— with two exceptions: ``config["data"]["source"]`` (a machine-specific folder, or the hub id) is left out,
because the data are identified by their text sha256 and tokenizer settings, and an instructor's local folder
path must not change the key a student computes; and ``config["train"]["checkpoint_interval"]`` counts as 0,
because how often a run was checkpointed does not change its curve. :meth:`ResultsStore.get` answers this key
only (sweeps: a summary never mixes data variants). :meth:`ResultsStore.find` — what the notebooks' panels ask —
also answers a run of the same configuration trained on another variant of the data (:func:`replay_key`: the
data reduced to dataset, config, tokenizer and vocabulary), and says what differs (the splits, the text), so the
workshop bundle, trained on the offline copy's validation split, replays where the data has its train split.

What is stored: only complete results, status ``"finished"`` and ``"diverged"`` (a divergence is a real
outcome of that configuration). Stopped and interrupted runs are partial and would replay as if they were
the result of the configuration, so :meth:`ResultsStore.put` refuses them.

Bad data never takes the store down: a damaged entry (unreadable, not a run record, or a config that does not
hash to its file name) is skipped with a warning naming the file — by :meth:`ResultsStore.records`,
:meth:`~ResultsStore.get` (which then answers "not stored", so the run is trained again and the entry
replaced) and :meth:`~ResultsStore.export` (which never ships one). Archives come from other people, so
:meth:`ResultsStore.import_report` checks everything before it trusts it: the zip and its manifest, sizes
(:data:`MAX_RECORD_BYTES` per run, :data:`MAX_ARCHIVE_BYTES` in all), counts (:data:`MAX_RUNS`; per record
:data:`MAX_CONTAINERS` objects and arrays and :data:`MAX_VALUES` values, counted on the bytes as they are read),
JSON nesting depth (:data:`MAX_DEPTH`), integers (:data:`MAX_INT_DIGITS`), the record schema and the key of every
run, and a run's weights (:data:`MAX_WEIGHTS_BYTES`, format, key); each rejected run is reported, the others are
imported, one at a time with their weights (rejected weights are reported and their run imported without them).
Every file — records, weights, archives — is checked with ``stat`` before it is read (a device, a FIFO or an
oversized file is refused unread), and :meth:`ResultsStore.find` reads its candidates the same way. The same limits
hold for what the store writes (:meth:`ResultsStore.put`) and exports, so nothing it holds or ships is refused
elsewhere.

The package exports :class:`ResultsStore` and the shipped bundle (:data:`BUNDLE`, :func:`load_bundle`,
:func:`describe_runs`); the rest is imported from its module: :mod:`~spanviz.store.keys` (:func:`config_key
<spanviz.store.keys.config_key>`, :func:`~spanviz.store.keys.replay_key`, :func:`~spanviz.store.keys.default_root`,
the replay index), :mod:`~spanviz.store.results` (:class:`ResultsStore`, :class:`~spanviz.store.results.Found`),
:mod:`~spanviz.store.archive` (the checks of records and archives from elsewhere; reading and writing an archive),
:mod:`~spanviz.store.replay` (runs of other data, and the one decision of the vocabulary a replayed run's weights
are read with: :meth:`~spanviz.store.replay.ReplayLookup.run_vocabulary`), :mod:`~spanviz.store.bundle` (the shipped
workshop bundle), :mod:`~spanviz.store.weights` (a run's final weights, packed and checked),
:mod:`~spanviz.store.listing` (the rows of ``spanviz runs list``).
"""

from spanviz.store.bundle import BUNDLE, describe_runs, load_bundle
from spanviz.store.results import ResultsStore

__all__ = ["BUNDLE", "ResultsStore", "describe_runs", "load_bundle"]
