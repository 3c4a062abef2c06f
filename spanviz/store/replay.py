"""Replays of other data: :meth:`ResultsStore.find <ReplayLookup.find>` answers a configuration with the run itself or
one of the same configuration trained on another variant of the data (:func:`~spanviz.store.keys.replay_key`),
and :meth:`ReplayLookup.replay_weights` gives that run's weights only where its vocabulary is the wanted one."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanviz.store.keys import (config_key, data_differences, index_run, read_replay_index, replay_key,
                                same_vocabulary)
from spanviz.train import RunRecord

logger = logging.getLogger("spanviz.store")


@dataclass
class Found:
    """A stored run that answers a configuration (:meth:`ResultsStore.find`).

    Attributes:
        key: its store key. record: the run record. exact: True when it is the configuration itself (same data).
        differences: ``{entry: (stored, wanted)}`` of the data entries that differ (splits, n_tokens, text_sha256;
            see :func:`~spanviz.store.keys.data_differences`); empty for an exact match.
        same_vocabulary: its token ids mean the same words as the wanted configuration's
            (:func:`~spanviz.store.keys.same_vocabulary`; True for an exact match). Only then may its weights be
            shown with the wanted data (:meth:`ResultsStore.replay_weights`).
    """

    key: str
    record: RunRecord
    exact: bool
    differences: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    same_vocabulary: bool = True


class ReplayLookup:
    """The replay look-ups of :class:`~spanviz.store.results.ResultsStore` (which provides ``root``, ``get``,
    ``load``, ``list`` and ``weights``)."""

    root: Path

    def find(self, config: Mapping[str, Any]) -> Found | None:
        """The stored run that answers ``config``: the configuration itself (:meth:`get`), else a run of the same
        configuration trained on another variant of the data (same :func:`~spanviz.store.keys.replay_key`:
        another split, other text), with what differs; None when there is neither.

        Among several runs of other data, the one with the same vocabulary wins (its weights may be shown), then the
        same splits, then the latest start. The notebooks'
        panels use this, so the workshop bundle (trained on the offline copy's validation split) replays where
        the data has its train split; sweeps use :meth:`get`, the exact configuration only. Every candidate is
        read with :meth:`load` (within its limits; a damaged one is passed over).

        Raises:
            ValueError: bad ``config`` (see :func:`config_key`).
        """
        key = config_key(config)
        record = self.get(config)
        if record is not None:
            return Found(key, record, exact=True)
        wanted = replay_key(config)
        candidates = []
        for other in self._replay_index().get(wanted, []):
            try:
                stored = self.load(other)
            except (KeyError, ValueError):  # removed meanwhile, or damaged (get() logs those when asked)
                continue
            if replay_key(stored.config) == wanted:  # a stale or stray index entry names another run
                candidates.append((other, stored))
        if not candidates:
            return None
        splits = _splits(config)

        def preference(item: tuple[str, RunRecord]) -> tuple[bool, bool, str, str]:
            stored = item[1]
            started = stored.environment.get("started_utc")
            return (same_vocabulary(stored.config, config), _splits(stored.config) == splits,
                    started if isinstance(started, str) else "", item[0])

        other, stored = max(candidates, key=preference)
        return Found(other, stored, exact=False, differences=data_differences(stored.config, config),
                     same_vocabulary=same_vocabulary(stored.config, config))

    def _replay_index(self) -> dict[str, list[str]]:
        """``{replay key: [keys]}`` of the stored runs; runs not indexed yet (stored by an older spanviz, or copied
        in) are read once (with :meth:`load`, within its limits) and indexed."""
        index = read_replay_index(self.root)
        indexed = {key for keys in index.values() for key in keys}
        for key in self.list():
            if key in indexed:
                continue
            try:
                record = self.load(key)
            except (KeyError, ValueError):
                continue
            index.setdefault(index_run(self.root, key, record.config), []).append(key)
        return index

    def replay_weights(self, found: Found) -> dict[str, Any] | None:
        """The final weights of a run :meth:`find` answered, to look inside it with the wanted data: as
        :meth:`weights`, but None when its vocabulary is not the wanted one (``found.same_vocabulary`` false: its
        ids would be read as other words)."""
        if not found.same_vocabulary:
            logger.info("results store: not replaying the weights of %s (trained with another vocabulary)", found.key)
            return None
        return self.weights(found.key)


def _splits(config: Mapping[str, Any]) -> Any:
    """``config["data"]["splits"]``, or None where a config (of a record from elsewhere) has no such entry."""
    data = config.get("data")
    return data.get("splits") if isinstance(data, Mapping) else None
