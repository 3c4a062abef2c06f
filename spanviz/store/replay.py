"""Replays of other data: :meth:`ResultsStore.find <ReplayLookup.find>` answers a configuration with the run itself or
one of the same configuration trained on another variant of the data (:func:`~spanviz.store.keys.replay_key`).

A model's token ids mean the words of the vocabulary fitted on *its* training text, and the replay key keeps only the
vocabulary's size. Whether a replayed run's model can be shown, and with which words, is decided in one place,
:meth:`ReplayLookup.run_vocabulary` (:class:`RunVocabulary`): your data's tokenizer when the run trained on your
text; else its own, fitted again here on its split and checked by the text's sha256
(:func:`~spanviz.data.tokens.run_tokenizer`); else none, and its model is not shown.
:meth:`ReplayLookup.replay_weights` gives the weights together with that vocabulary, and the replay note says which
(:func:`~spanviz.store.bundle.replay_note`)."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from spanviz.data.tokens import run_tokenizer
from spanviz.store.keys import config_key, data_differences, index_run, read_replay_index, replay_key, same_vocabulary
from spanviz.train import RunRecord

logger = logging.getLogger("spanviz.store")

VOCABULARY_STATES = ("yours", "rebuilt", "unavailable")
""":attr:`RunVocabulary.state`: your data's tokenizer; the run's own, fitted again here; none to be had here."""


@dataclass(frozen=True)
class RunVocabulary:
    """The words a replayed run's token ids mean, as this machine has them (:meth:`ReplayLookup.run_vocabulary`).

    Attributes:
        state: one of :data:`VOCABULARY_STATES` — "yours": the run trained on your training text with your tokenizer
            settings (:attr:`Found.same_vocabulary`); "rebuilt": it trained on other text (the workshop bundle: the
            offline copy's validation split, where yours is train) and its tokenizer was fitted again here on its
            split, the text checked by its sha256; "unavailable": its training text cannot be had here (other text
            under that split name, a split or hub this machine lacks) — its model is not shown.
        tokenizer: the tokenizer whose words its ids mean: your data's ("yours"; None for data without one), the
            rebuilt one ("rebuilt"), or None ("unavailable").
        splits: the run's ``{"train": split, "eval": split}`` (what "rebuilt" was fitted on).
        reason: why "unavailable" (the error, one line); "" otherwise.
    """

    state: str
    tokenizer: Any = None
    splits: dict[str, Any] = field(default_factory=dict)
    reason: str = ""

    @property
    def shown(self) -> bool:
        """Whether the run's model may be shown (with :attr:`tokenizer`'s words): state "yours" or "rebuilt"."""
        return self.state != "unavailable"


@dataclass(frozen=True)
class ReplayedWeights:
    """A replayed run's final weights with the vocabulary they need (:meth:`ReplayLookup.replay_weights`).

    Attributes:
        state: parameter name → float32 CPU tensor, the run's final weights (stored in float16).
        vocabulary: the :class:`RunVocabulary` (``shown``) whose tokenizer gives the ids these weights read and the
            words of the ids they write.
    """

    state: dict[str, Any]
    vocabulary: RunVocabulary


@dataclass
class Found:
    """A stored run that answers a configuration (:meth:`ResultsStore.find`).

    Attributes:
        key: its store key. record: the run record. exact: True when it is the configuration itself (same data).
        differences: ``{entry: (stored, wanted)}`` of the data entries that differ (splits, n_tokens, text_sha256;
            see :func:`~spanviz.store.keys.data_differences`); empty for an exact match.
        same_vocabulary: its token ids mean the same words as the wanted configuration's
            (:func:`~spanviz.store.keys.same_vocabulary`; True for an exact match). Only then may its weights be
            shown with the wanted data's words; else with its own, where :meth:`ResultsStore.run_vocabulary` can
            rebuild them.
        vocabulary: the :class:`RunVocabulary` :meth:`ResultsStore.run_vocabulary` decided for it; None until then.
    """

    key: str
    record: RunRecord
    exact: bool
    differences: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    same_vocabulary: bool = True
    vocabulary: RunVocabulary | None = None


FUTURE_SLACK_S = 86_400.0
"""How far after this machine's clock a run's start may lie (clocks of other machines differ) [s]."""


def start_time(record: RunRecord) -> float:
    """When the run started, as a POSIX time from its ``environment.started_utc`` (ISO 8601, as spanviz writes it);
    ``-inf`` when it is missing, not a timestamp, without a time zone, or later than now (+ a day): the text comes
    from a file, and a forged "9999-…" must not win the latest-start preference of :meth:`ReplayLookup.find`."""
    started = record.environment.get("started_utc") if isinstance(record.environment, Mapping) else None
    try:
        when = datetime.fromisoformat(started) if isinstance(started, str) and len(started) <= 64 else None
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        return -math.inf
    seconds = when.timestamp()
    return seconds if seconds <= time.time() + FUTURE_SLACK_S else -math.inf


class ReplayLookup:
    """The replay look-ups of :class:`~spanviz.store.results.ResultsStore` (which provides ``root``, ``get``,
    ``load``, ``list``, ``has_weights`` and ``weights``)."""

    root: Path

    def find(self, config: Mapping[str, Any]) -> Found | None:
        """The stored run that answers ``config``: the configuration itself (:meth:`get`), else a run of the same
        configuration trained on another variant of the data (same :func:`~spanviz.store.keys.replay_key`:
        another split, other text), with what differs; None when there is neither.

        Among several runs of other data, the one with the same vocabulary wins (its weights may be shown), then the
        same splits, then the latest start (:func:`start_time`: a start that is no timestamp or lies in the future
        counts as the earliest). The notebooks'
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

        def preference(item: tuple[str, RunRecord]) -> tuple[bool, bool, float, str]:
            stored = item[1]
            return (same_vocabulary(stored.config, config), _splits(stored.config) == splits,
                    start_time(stored), item[0])

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

    def run_vocabulary(self, found: Found, data: Any = None,
                       data_dir: str | os.PathLike[str] | None = None) -> RunVocabulary:
        """The one decision of which words a run :meth:`find` answered reads and writes here (kept in
        ``found.vocabulary``; asked again, the same answer): "yours" (``found.same_vocabulary``: ``data.tokenizer``),
        else "rebuilt" (:func:`~spanviz.data.tokens.run_tokenizer`: fitted again on the run's split from the split
        policy's source — ``data_dir``, ``$SPANVIZ_WIKITEXT_DIR``, the remembered folder or the hub — and checked by
        the sha256 of its training text and its vocabulary size), else "unavailable" with the reason (logged).

        Args:
            found: :meth:`find`'s answer. data: your ``TokenData`` (its tokenizer for "yours"), or None.
            data_dir: a local WikiText-2 folder to rebuild from; None = the split policy's.
        Raises:
            Nothing for a vocabulary that cannot be had: that is the "unavailable" answer.
        """
        if found.vocabulary is not None:
            return found.vocabulary
        config = found.record.config.get("data")
        splits = _splits(found.record.config)
        splits = dict(splits) if isinstance(splits, Mapping) else {}
        if found.same_vocabulary:
            found.vocabulary = RunVocabulary("yours", getattr(data, "tokenizer", None), splits)
            return found.vocabulary
        try:
            tokenizer = run_tokenizer(config if isinstance(config, Mapping) else {}, None, data_dir)
            if tokenizer.vocab_size != config.get("vocab_size"):
                raise ValueError(f"the vocabulary rebuilt here has {tokenizer.vocab_size} ids, the run's "
                                 f"vocab_size={config.get('vocab_size')!r}")
        except (ValueError, OSError, ImportError) as error:  # OSError: HubUnavailableError, an unreadable folder
            reason = " ".join(str(error).split())[:300]
            logger.info("results store: the vocabulary of %s cannot be rebuilt here, its model is not shown (%s)",
                        found.key, reason)
            found.vocabulary = RunVocabulary("unavailable", None, splits, reason)
            return found.vocabulary
        found.vocabulary = RunVocabulary("rebuilt", tokenizer, splits)
        return found.vocabulary

    def replay_weights(self, found: Found, data: Any = None,
                       data_dir: str | os.PathLike[str] | None = None) -> ReplayedWeights | None:
        """The final weights of a run :meth:`find` answered, with the vocabulary they need
        (:meth:`run_vocabulary`), to look inside it or sample from it; None when the store kept no weights for it
        or its vocabulary cannot be had here (its ids would be read as other words).

        Raises:
            ValueError: kept weights that are damaged or do not fit the run's model (as :meth:`weights`).
        """
        if not self.has_weights(found.key):
            return None
        vocabulary = self.run_vocabulary(found, data, data_dir)
        if not vocabulary.shown:
            logger.info("results store: not replaying the weights of %s (trained with a vocabulary not to be had "
                        "here)", found.key)
            return None
        state = self.weights(found.key)
        return None if state is None else ReplayedWeights(state, vocabulary)


def _splits(config: Mapping[str, Any]) -> Any:
    """``config["data"]["splits"]``, or None where a config (of a record from elsewhere) has no such entry."""
    data = config.get("data")
    return data.get("splits") if isinstance(data, Mapping) else None
