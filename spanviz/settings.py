"""Settings read from the environment, in one place: the names, ``SPANVIZ_HOME`` and the split policy.

Environment variables (all optional):

* ``SPANVIZ_HOME`` — the folder of spanviz's caches (token ids, the results store); default ``~/.cache/spanviz``;
* ``SPANVIZ_WIKITEXT_DIR`` — a local WikiText-2 folder (before the one ``spanviz prepare-data`` remembered, and
  before the Hugging Face hub); ``SPANVIZ_TRAIN_SPLIT`` / ``SPANVIZ_EVAL_SPLIT`` — which split trains and which
  evaluates; ``SPANVIZ_OFFLINE`` — never contact the hub;
* ``SPANVIZ_SMOKE`` (every command and notebook a seconds-long version of itself, for CI), ``SPANVIZ_BLOCKING``
  (panels train in the caller's thread), ``SPANVIZ_STATIC`` (panels draw static figures);
* ``SPANVIZ_COMMAND`` — how the person runs the command line, for messages that name a command to type (default
  ``spanviz``; ``scripts/lab.sh`` sets ``bash scripts/lab.sh``, which works without an active virtual environment).

True/false variables are read by :func:`env_flag` (1/0, true/false, yes/no, on/off; anything else is an error
naming the variable).

**The split policy** (:func:`resolve_data_source`), used by the command line, the experiments, the panels and
the notebooks. Folder: the argument, else ``$SPANVIZ_WIKITEXT_DIR``, else the folder ``spanviz prepare-data
--data-dir`` remembered, else None (the hub). Each split: the argument, else ``$SPANVIZ_TRAIN_SPLIT`` /
``$SPANVIZ_EVAL_SPLIT``, else the remembered splits when the remembered folder is the one used, else — for a
folder given by argument or environment — ``local_splits``, else :data:`DEFAULT_SPLITS` (the hub).
:func:`spanviz.data.load_tokens` (the panels, the experiments, the notebooks) passes :data:`OFFLINE_SPLITS`: the
offline copy has no train split, so a folder trains on validation and evaluates on test unless told otherwise. The
command line keeps the default, :data:`DEFAULT_SPLITS`: there a folder's splits are said with ``--train-split`` /
``--eval-split`` (a missing split is an error naming those flags).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spanviz.files import atomic_write, expand_user, read_bounded

logger = logging.getLogger(__name__)

ENV_HOME = "SPANVIZ_HOME"
ENV_DATA_DIR = "SPANVIZ_WIKITEXT_DIR"
ENV_OFFLINE = "SPANVIZ_OFFLINE"
ENV_TRAIN_SPLIT = "SPANVIZ_TRAIN_SPLIT"
ENV_EVAL_SPLIT = "SPANVIZ_EVAL_SPLIT"
ENV_SMOKE = "SPANVIZ_SMOKE"
ENV_BLOCKING = "SPANVIZ_BLOCKING"
ENV_STATIC = "SPANVIZ_STATIC"
ENV_COMMAND = "SPANVIZ_COMMAND"

SPLITS = ("train", "validation", "test")
"""WikiText-2 split names (``valid`` is accepted as an alias of ``validation``)."""
SPLIT_ALIASES = {"valid": "validation"}
ROLES = ("train", "eval")
"""What a split is used for: ``train`` (builds the vocabulary, gives training batches) and ``eval``."""
DEFAULT_SPLITS: Mapping[str, str] = {"train": "train", "eval": "validation"}
"""The usual choice when the full dataset is available (hub, or a complete local copy)."""
OFFLINE_SPLITS: Mapping[str, str] = {"train": "validation", "eval": "test"}
"""The choice for the shared offline copy, which has no train split: train on validation, evaluate on test (the
run record says so)."""
DATA_SOURCE_FILE = "data-source.json"
"""The file in ``$SPANVIZ_HOME`` where ``spanviz prepare-data`` remembers a local folder and its splits."""

MAX_DATA_SOURCE_BYTES = 2**20
"""Largest ``data-source.json`` read [bytes] (a real one has about 200)."""

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def env_flag(name: str) -> bool | None:
    """The true/false value of environment variable ``name``; None when it is unset.

    Raises:
        ValueError: naming the variable, for a value other than 1/0, true/false, yes/no, on/off (any case).
    """
    value = os.environ.get(name)
    if value is None:
        return None
    if value.strip().lower() in _TRUE:
        return True
    if value.strip().lower() in _FALSE:
        return False
    raise ValueError(f"environment variable {name}={value!r} must be one of 1/0, true/false, yes/no, on/off")


def command_name() -> str:
    """How the person runs the ``spanviz`` command, for messages that name a command to type: ``$SPANVIZ_COMMAND``
    (``scripts/lab.sh`` sets it to ``bash scripts/lab.sh``), default ``spanviz``."""
    return os.environ.get(ENV_COMMAND, "").strip() or "spanviz"


def spanviz_home() -> Path:
    """The folder for spanviz's caches: ``$SPANVIZ_HOME``, default ``~/.cache/spanviz`` (read on each call).

    Raises:
        ValueError: ``$SPANVIZ_HOME`` starts with ``~user`` for a user that does not exist (naming the variable).
    """
    value = os.environ.get(ENV_HOME)
    return expand_user(value or "~/.cache/spanviz", f"{ENV_HOME}={value}" if value else "the spanviz cache folder")


def check_splits(splits: Mapping[str, str] | None) -> dict[str, str]:
    """A role → split mapping checked, aliases normalised (``valid`` → ``validation``); None → :data:`DEFAULT_SPLITS`.

    Raises:
        ValueError: not a non-empty mapping, an unknown role or split.
    """
    if splits is None:
        return dict(DEFAULT_SPLITS)
    if not isinstance(splits, Mapping) or not splits:
        raise ValueError(f"splits={splits!r} must be a non-empty mapping from role to split, "
                         f"e.g. {dict(OFFLINE_SPLITS)!r}")
    checked = {}
    for role, split in splits.items():
        if role not in ROLES:
            raise ValueError(f"splits has role {role!r}; allowed roles: {', '.join(ROLES)}")
        split = SPLIT_ALIASES.get(split, split) if isinstance(split, str) else split
        if not isinstance(split, str) or split not in SPLITS:
            raise ValueError(f"splits[{role!r}]={splits[role]!r} is not a WikiText-2 split; "
                             f"allowed: {', '.join(SPLITS)} (or 'valid' for 'validation')")
        checked[role] = split
    return checked


def remember_data_source(data_dir: str | os.PathLike[str], splits: Mapping[str, str]) -> Path:
    """Remember a local WikiText-2 folder and its role → split mapping for later calls (and commands).

    Afterwards, without ``data_dir`` and without ``$SPANVIZ_WIKITEXT_DIR``, :func:`resolve_data_source` gives this
    folder with these splits. ``spanviz prepare-data --data-dir`` calls it. Stored in
    ``$SPANVIZ_HOME/data-source.json``.

    Returns:
        The file written.
    Raises:
        ValueError: ``data_dir`` is not a folder, or bad ``splits``. OSError: ``$SPANVIZ_HOME`` cannot be written.
    """
    folder = Path(data_dir).expanduser().resolve()
    if not folder.is_dir():
        raise ValueError(f"data_dir={str(data_dir)!r} is not a folder")
    payload = json.dumps({"data_dir": str(folder), "splits": check_splits(splits)}, indent=1).encode("utf-8")
    return atomic_write(spanviz_home() / DATA_SOURCE_FILE, payload)


def remembered_data_source() -> dict[str, Any] | None:
    """``{"data_dir": str, "splits": {role: split}}`` saved by :func:`remember_data_source`, or None.

    A file that is unreadable, malformed, or names a folder that no longer exists is ignored with a warning.
    """
    path = spanviz_home() / DATA_SOURCE_FILE
    if not path.is_file():
        return None
    try:
        saved = json.loads(read_bounded(path, MAX_DATA_SOURCE_BYTES).decode("utf-8"))
        folder = saved["data_dir"]
        splits = check_splits(saved["splits"])
        if not isinstance(folder, str) or not Path(folder).is_dir():
            raise ValueError(f"{folder!r} is not a folder any more")
    except Exception as error:  # noqa: BLE001 - any damage means "nothing remembered"
        logger.warning("ignoring %s (%s); run `%s prepare-data --data-dir DIR` to set it again", path, error,
                       command_name())
        return None
    return {"data_dir": folder, "splits": splits}


def resolve_data_source(
    data_dir: str | os.PathLike[str] | None = None, train_split: str | None = None, eval_split: str | None = None,
    *, local_splits: Mapping[str, str] = DEFAULT_SPLITS,
) -> tuple[str | None, dict[str, str]]:
    """Where WikiText-2 comes from and which split plays which role: the split policy (module docstring).

    Args:
        data_dir: a local folder, or None (environment, remembered folder, hub).
        train_split, eval_split: explicit splits, or None.
        local_splits: the splits of a folder given by ``data_dir`` or ``$SPANVIZ_WIKITEXT_DIR`` when neither the
            arguments nor the environment name them.
    Returns:
        ``(folder or None, {"train": split, "eval": split})`` — nothing is checked or read yet.
    """
    folder = str(data_dir) if data_dir is not None else (os.environ.get(ENV_DATA_DIR) or None)
    base = DEFAULT_SPLITS if folder is None else local_splits
    if folder is None:
        remembered = remembered_data_source()
        if remembered is not None:
            folder, base = remembered["data_dir"], remembered["splits"]
    return folder, _role_splits(base, train_split, eval_split)


def splits_from_env(local: bool) -> dict[str, str]:
    """The splits alone: for a local folder (``local=True``) the environment, else :data:`OFFLINE_SPLITS`; for no
    folder the environment, else the remembered splits, else :data:`DEFAULT_SPLITS`."""
    if local:
        return _role_splits(OFFLINE_SPLITS)
    remembered = remembered_data_source()
    return _role_splits(remembered["splits"] if remembered else DEFAULT_SPLITS)


def _role_splits(base: Mapping[str, str], train: str | None = None, eval_: str | None = None) -> dict[str, str]:
    return {"train": train or os.environ.get(ENV_TRAIN_SPLIT) or base["train"],
            "eval": eval_ or os.environ.get(ENV_EVAL_SPLIT) or base["eval"]}
