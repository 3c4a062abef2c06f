"""What identifies a stored run: :func:`config_key`, the hash of its configuration; :func:`replay_key`, the same
without the data variant; and where runs are kept.

Two keys, two uses:

* :func:`config_key` — the run exactly: model, train, probes, extra entries *and the data* (splits, token counts,
  the sha256 of each role's text). Sweeps and their statistics replay only this, so a summary never mixes runs
  trained on different text.
* :func:`replay_key` — the same configuration with the data reduced to what the model sees of it
  (:data:`DATA_IDENTITY`: dataset, WikiText-2 config, tokenizer, vocabulary cap and size). The notebooks' panels
  replay a run of another data variant under it — the workshop bundle trained on the validation split, a student
  on Binder has the train split — and say what differs (:func:`data_differences`).

The replay key keeps the vocabulary's size, not its words: a word vocabulary is fitted on the train role's text, so
another variant maps most ids to other words. Curves replay across vocabularies (with a note); a model's weights
with your words only where :func:`same_vocabulary` holds (:attr:`~spanviz.store.results.Found.same_vocabulary`),
else with the run's own words where they can be rebuilt here, else not at all
(:meth:`~spanviz.store.replay.ReplayLookup.run_vocabulary`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spanviz.settings import spanviz_home

logger = logging.getLogger("spanviz.store")

STORABLE = ("finished", "diverged")
"""Statuses :meth:`ResultsStore.put` accepts."""
KEY_RE = re.compile(r"[0-9a-f]{64}")  # use with fullmatch: "$" also matches before a final newline
"""A store key: 64 lowercase hex digits."""


def default_root() -> Path:
    """``$SPANVIZ_HOME/runs`` (``SPANVIZ_HOME`` defaults to ``~/.cache/spanviz``), read at each call."""
    return spanviz_home() / "runs"


DATA_IDENTITY = ("dataset", "config", "tokenizer", "max_vocab", "vocab_size")
"""The entries of ``config["data"]`` that :func:`replay_key` keeps: what the model is built from. The others — the
splits, token counts, text hashes, cache key and source — name the data variant."""
DATA_VARIANT = ("splits", "n_tokens", "text_sha256")
LATER_MODEL_FIELDS = ("logit_softcap", "qk_clip", "global_every")
"""GPTConfig fields newer than stored runs, left out of a key while None (the logit-growth baselines)."""
"""The entries of ``config["data"]`` that :func:`data_differences` compares."""


def config_key(config: Mapping[str, Any]) -> str:
    """The store key of a run configuration: 64 hex digits (see the module docstring).

    Raises:
        ValueError: ``config`` is not a mapping or holds something JSON cannot represent.
    """
    return _hash(_identity(config, lambda data: {k: v for k, v in data.items() if k != "source"}))


def replay_key(config: Mapping[str, Any]) -> str:
    """The key under which a run replays for any variant of its data: :func:`config_key` with ``config["data"]``
    reduced to :data:`DATA_IDENTITY`. 64 hex digits.

    Raises:
        ValueError: as :func:`config_key`.
    """
    return _hash(_identity(config, lambda data: {k: v for k, v in data.items() if k in DATA_IDENTITY}))


def data_differences(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{entry: (stored, wanted)}`` for the :data:`DATA_VARIANT` entries of two configs' ``"data"`` that differ
    (empty when the same data trained both)."""
    a = stored.get("data") if isinstance(stored.get("data"), Mapping) else {}
    b = wanted.get("data") if isinstance(wanted.get("data"), Mapping) else {}
    return {k: (a.get(k), b.get(k)) for k in DATA_VARIANT if a.get(k) != b.get(k)}


def vocabulary_identity(config: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What fixes the words behind a run's token ids: the byte tokenizer's are fixed (``("byte",)``); a word
    vocabulary is a function of the tokenizer settings and the train role's text (``(tokenizer, max_vocab,
    vocab_size, sha256 of the train text)``). None when ``config["data"]`` does not say (no replay of weights)."""
    data = config.get("data") if isinstance(config, Mapping) else None
    if not isinstance(data, Mapping) or not isinstance(data.get("tokenizer"), str):
        return None
    if data["tokenizer"] == "byte":
        return ("byte",)
    text = data.get("text_sha256") if isinstance(data.get("text_sha256"), Mapping) else {}
    train = text.get("train")
    if not isinstance(train, str) or not train:
        return None
    return (data["tokenizer"], data.get("max_vocab"), data.get("vocab_size"), train)


def same_vocabulary(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the token ids of the run ``stored`` mean the same words as those of ``wanted`` (two configs): their
    :func:`vocabulary_identity` is known and equal. Weights replay only then; curves replay either way."""
    identity = vocabulary_identity(stored)
    return identity is not None and identity == vocabulary_identity(wanted)


def _identity(config: Mapping[str, Any], data: Any) -> dict[str, Any]:
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a mapping (a RunRecord.config), got {type(config).__name__}")
    identity = copy.deepcopy(dict(config))
    if isinstance(identity.get("data"), Mapping):
        identity["data"] = data(identity["data"])
    if isinstance(identity.get("model"), Mapping):
        # GPTConfig fields added after runs were stored (:data:`LATER_MODEL_FIELDS`) count only when set: a run
        # without them keeps the key it was stored under (the shipped bundle's runs too).
        identity["model"] = {k: v for k, v in identity["model"].items()
                             if not (k in LATER_MODEL_FIELDS and v is None)}
    if isinstance(identity.get("train"), Mapping) and "checkpoint_interval" in identity["train"]:
        # How often a run was checkpointed does not change its curve: every cadence gets the key it had
        # when checkpoints were only written at the end (0), so records stored before stay valid.
        identity["train"] = {**identity["train"], "checkpoint_interval": 0}
    return identity


def _hash(identity: dict[str, Any]) -> str:
    try:
        text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"config is not JSON-serialisable: {error}") from error
    return hashlib.sha256(text.encode("ascii")).hexdigest()


REPLAY_INDEX = "replay"
"""Sub-folder of the store: one empty file ``<replay key>-<key>`` per run, the index
:meth:`~spanviz.store.results.ResultsStore.find` looks runs of other data up in."""


def index_run(root: Path, key: str, config: Mapping[str, Any]) -> str:
    """Write the replay-index entry of the run ``key`` of ``config`` in the store ``root`` (best effort: a read-only
    store is still read); returns its :func:`replay_key`."""
    replay = replay_key(config)
    entry = root / REPLAY_INDEX / f"{replay}-{key}"
    if not entry.exists():
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            entry.touch()
        except OSError as error:
            logger.debug("results store: cannot index %s (%s)", key, error)
    return replay


def read_replay_index(root: Path) -> dict[str, list[str]]:
    """``{replay key: [keys]}`` of the replay-index entries of the store ``root`` (well-formed names only)."""
    index: dict[str, list[str]] = {}
    folder = root / REPLAY_INDEX
    for name in os.listdir(folder) if folder.is_dir() else []:
        replay, _, key = name.partition("-")
        if KEY_RE.fullmatch(replay) and KEY_RE.fullmatch(key):
            index.setdefault(replay, []).append(key)
    return index
