"""WikiText-2 for spanviz: text → tokens → cached token ids → random batches.

Data flows one way through this module:

1. :func:`load_wikitext2` returns the text lines of the requested *roles* (``train`` and ``eval``), each
   read from a WikiText-2 *split* (``train``, ``validation`` or ``test``). The text comes through Hugging
   Face ``datasets``: from the hub (``Salesforce/wikitext``) or from a local folder of text or parquet
   files (``data_dir``, the ``SPANVIZ_WIKITEXT_DIR`` environment variable, or the folder that
   ``spanviz prepare-data --data-dir`` remembered: :func:`remember_data_source`).
2. A tokenizer turns lines into ids: :class:`WordTokenizer` (whitespace words plus ``<eos>`` per line,
   the classic WikiText-2 setup) or :class:`ByteTokenizer` (UTF-8 bytes, for the smallest demos).
3. :func:`prepare_tokens` does 1 and 2 and caches the ids on disk (``$SPANVIZ_HOME/tokens``), keyed by a
   sha256 of the text and the tokenizer settings. ``spanviz prepare-data`` calls it.
4. :func:`get_batch` draws random contiguous (x, y) windows for training; :func:`iter_eval_batches` gives
   fixed windows so that validation losses are comparable across runs.

Source: WikiText-2 is from Merity, Xiong, Bradbury, Socher, "Pointer Sentinel Mixture Models" (2016).
The one-``<eos>``-per-line tokenization follows the PyTorch ``examples/word_language_model`` data code.

Lines: WikiText files hold one paragraph (or a `` = Title = `` heading, or a blank line) per line. We keep
every line, blank ones included, exactly as in the source with only the line break removed; hub rows
(which end in ``"\\n"``) and local text files therefore give the same words.

Offline use: the Hugging Face libraries read ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` once, when they
are imported, and an unreachable hub otherwise costs ~25 s of retries. So ``datasets`` is imported lazily,
inside the functions, and before any hub download we probe the hub for at most
:data:`HUB_PROBE_TIMEOUT_S` seconds; when it cannot be reached (or ``SPANVIZ_OFFLINE=1``) we switch the
Hugging Face libraries to offline mode, which loads a previously downloaded copy from the Hugging Face
cache or fails at once with :class:`HubUnavailableError` explaining how to use a local folder.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import sys
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from spanviz.files import atomic_write

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------------------

HUB_ID = "Salesforce/wikitext"
"""The Hugging Face hub dataset that holds WikiText-2."""

CONFIGS = ("wikitext-2-v1", "wikitext-2-raw-v1")
"""Allowed ``config`` values: ``-v1`` is tokenized with rare words replaced by ``<unk>``; ``-raw-v1`` is
the original text."""

SPLITS = ("train", "validation", "test")
"""WikiText-2 split names (``valid`` is accepted as an alias of ``validation``)."""

SPLIT_ALIASES = {"valid": "validation"}

ROLES = ("train", "eval")
"""What a split is used for: ``train`` (builds the vocabulary, gives training batches) and ``eval``."""

DEFAULT_SPLITS: Mapping[str, str] = {"train": "train", "eval": "validation"}
"""The usual choice when the full dataset is available (hub, or a complete local copy)."""

OFFLINE_SPLITS: Mapping[str, str] = {"train": "validation", "eval": "test"}
"""The choice for the shared offline copy, which has no train split: train on validation, evaluate on
test (and say so in the run record: see :attr:`TokenData.splits`)."""

ENV_DATA_DIR = "SPANVIZ_WIKITEXT_DIR"
ENV_OFFLINE = "SPANVIZ_OFFLINE"
ENV_HOME = "SPANVIZ_HOME"
ENV_TRAIN_SPLIT = "SPANVIZ_TRAIN_SPLIT"
ENV_EVAL_SPLIT = "SPANVIZ_EVAL_SPLIT"


def splits_from_env(local: bool) -> dict[str, str]:
    """Role → split from ``SPANVIZ_TRAIN_SPLIT`` / ``SPANVIZ_EVAL_SPLIT``, each defaulting to
    :data:`OFFLINE_SPLITS` for a local folder (``local=True``) or, otherwise, to the splits remembered by
    ``spanviz prepare-data`` (:func:`remembered_data_source`, whose folder is then the one used) or
    :data:`DEFAULT_SPLITS` for the hub. (``scripts/setup.sh`` exports both variables when it finds the shared
    offline copy.)"""
    remembered = None if local else remembered_data_source()
    base = OFFLINE_SPLITS if local else (remembered["splits"] if remembered else DEFAULT_SPLITS)
    return {
        "train": os.environ.get(ENV_TRAIN_SPLIT) or base["train"],
        "eval": os.environ.get(ENV_EVAL_SPLIT) or base["eval"],
    }


HUB_PROBE_TIMEOUT_S = 3.0
"""Seconds we wait for the hub to answer before treating it as unreachable."""

EOS = "<eos>"
UNK = "<unk>"

TOKENIZER_KINDS = ("word", "byte")

CACHE_FORMAT = 1
"""Bump when the cache layout or the tokenization changes, so old cache entries are not reused."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


class HubUnavailableError(ConnectionError):
    """The Hugging Face hub could not be used and no cached copy was found; the message says what to do.

    Attributes: ``reason`` (why the hub could not be used, one clause).
    """

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class MissingSplitError(ValueError):
    """A split is not in a local WikiText-2 folder; the message lists what was looked for and what to do.

    Attributes: ``folder``, ``split``, ``role``, ``available`` (the splits the folder does have).
    """

    def __init__(self, message: str, folder: Path, split: str, role: str, available: list[str]) -> None:
        super().__init__(message)
        self.folder, self.split, self.role, self.available = folder, split, role, available


def spanviz_home() -> Path:
    """The folder for spanviz's caches: ``$SPANVIZ_HOME``, default ``~/.cache/spanviz`` (read on each call)."""
    return Path(os.environ.get(ENV_HOME) or "~/.cache/spanviz").expanduser()


DATA_SOURCE_FILE = "data-source.json"
"""The file in ``$SPANVIZ_HOME`` where ``spanviz prepare-data`` remembers a local folder and its splits."""


def remember_data_source(data_dir: str | os.PathLike[str], splits: Mapping[str, str]) -> Path:
    """Remember a local WikiText-2 folder and its role → split mapping for later calls (and commands).

    Afterwards, :func:`load_wikitext2` / :func:`prepare_tokens` without ``data_dir`` and without
    ``$SPANVIZ_WIKITEXT_DIR`` read this folder, with these splits (:func:`splits_from_env`). ``spanviz
    prepare-data --data-dir DIR`` calls it. Stored in ``$SPANVIZ_HOME/data-source.json``.

    Returns:
        The file written.
    Raises:
        ValueError: ``data_dir`` is not a folder, or bad ``splits``.
        OSError: ``$SPANVIZ_HOME`` cannot be written.
    """
    folder = Path(data_dir).expanduser().resolve()
    if not folder.is_dir():
        raise ValueError(f"data_dir={str(data_dir)!r} is not a folder")
    checked = _check_splits(splits)
    payload = json.dumps({"data_dir": str(folder), "splits": checked}, indent=1).encode("utf-8")
    return atomic_write(spanviz_home() / DATA_SOURCE_FILE, payload)


def resolve_data_source(
    data_dir: str | os.PathLike[str] | None = None, train_split: str | None = None, eval_split: str | None = None
) -> tuple[str | None, dict[str, str]]:
    """Where WikiText-2 comes from and which split plays which role — the one precedence rule of the command line.

    Folder: ``data_dir``, else ``$SPANVIZ_WIKITEXT_DIR``, else the folder remembered by
    :func:`remember_data_source`, else None (the hub). Each split: the argument, else ``$SPANVIZ_TRAIN_SPLIT`` /
    ``$SPANVIZ_EVAL_SPLIT``, else the remembered splits when the remembered folder is the one used, else
    :data:`DEFAULT_SPLITS`.

    Returns:
        ``(folder or None, {"train": split, "eval": split})`` — nothing is checked or read yet.
    """
    folder = str(data_dir) if data_dir is not None else (os.environ.get(ENV_DATA_DIR) or None)
    base = DEFAULT_SPLITS
    if folder is None:
        remembered = remembered_data_source()
        if remembered is not None:
            folder, base = remembered["data_dir"], remembered["splits"]
    splits = {
        "train": train_split or os.environ.get(ENV_TRAIN_SPLIT) or base["train"],
        "eval": eval_split or os.environ.get(ENV_EVAL_SPLIT) or base["eval"],
    }
    return folder, splits


def remembered_data_source() -> dict[str, Any] | None:
    """``{"data_dir": str, "splits": {role: split}}`` saved by :func:`remember_data_source`, or None.

    A file that is unreadable, malformed, or names a folder that no longer exists is ignored with a warning.
    """
    path = spanviz_home() / DATA_SOURCE_FILE
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        folder = saved["data_dir"]
        splits = _check_splits(saved["splits"])
        if not isinstance(folder, str) or not Path(folder).is_dir():
            raise ValueError(f"{folder!r} is not a folder any more")
    except Exception as error:  # noqa: BLE001 - any damage means "nothing remembered"
        logger.warning("ignoring %s (%s); run `spanviz prepare-data --data-dir DIR` to set it again", path, error)
        return None
    return {"data_dir": folder, "splits": splits}


# --------------------------------------------------------------------------------------------------
# 1. Text
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus(Mapping[str, list[str]]):
    """Text lines per role, plus where they came from. Behaves like ``dict[role, list[str]]``.

    Attributes:
        lines: role (``"train"`` / ``"eval"``) → the split's lines, blank lines included, line breaks removed.
        splits: role → the WikiText-2 split it was read from, e.g. ``{"train": "validation", "eval": "test"}``.
        source: ``"Salesforce/wikitext"`` for the hub, otherwise the absolute local folder.
        config: ``"wikitext-2-v1"`` or ``"wikitext-2-raw-v1"``.
        files: role → the local files read (empty for the hub).
    """

    lines: dict[str, list[str]]
    splits: dict[str, str]
    source: str
    config: str
    files: dict[str, list[str]] = field(default_factory=dict)

    def __getitem__(self, role: str) -> list[str]:
        return self.lines[role]

    def __iter__(self) -> Iterator[str]:
        return iter(self.lines)

    def __len__(self) -> int:
        return len(self.lines)

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary for a run record: source, config, splits, files and line counts."""
        return {
            "source": self.source,
            "config": self.config,
            "splits": dict(self.splits),
            "files": {role: list(names) for role, names in self.files.items()},
            "n_lines": {role: len(lines) for role, lines in self.lines.items()},
        }


def load_wikitext2(
    data_dir: str | os.PathLike[str] | None = None,
    config: str = "wikitext-2-v1",
    splits: Mapping[str, str] | None = None,
    *,
    offline: bool | None = None,
) -> Corpus:
    """Load the text lines of WikiText-2 for each role in ``splits``.

    Where the text comes from, first match wins:

    1. ``data_dir``, else the environment variable ``SPANVIZ_WIKITEXT_DIR``, else the folder remembered by
       ``spanviz prepare-data --data-dir`` (:func:`remember_data_source`): a local folder. For each
       split we look (in this order, in the folder and then in its ``<config>/`` subfolder) for
       ``<name>.txt``, ``wiki.<name>.tokens`` (config ``wikitext-2-v1``) or ``wiki.<name>.raw``
       (``wikitext-2-raw-v1``), ``<name>-*.parquet``, ``<name>.parquet``, where ``<name>`` is ``train``,
       ``valid`` or ``validation``, ``test``. Text files give one line per line (split at ``"\\n"`` only);
       parquet files give one line per row of their ``text`` column. ``datasets`` keeps an Arrow copy of
       local files in ``$SPANVIZ_HOME/hf-datasets``.
    2. Otherwise the hub: ``datasets.load_dataset("Salesforce/wikitext", config)``. If the hub does not
       answer within :data:`HUB_PROBE_TIMEOUT_S` seconds, or ``offline`` is true, only the local Hugging Face
       cache is used (offline mode).

    Args:
        data_dir: local folder, or ``None`` for ``$SPANVIZ_WIKITEXT_DIR`` and then the hub.
        config: ``"wikitext-2-v1"`` (tokenized, with ``<unk>``) or ``"wikitext-2-raw-v1"``.
        splits: role → split, roles ``"train"`` and/or ``"eval"``, splits ``"train"``, ``"validation"``
            (alias ``"valid"``), ``"test"``. Default :data:`DEFAULT_SPLITS`. The shared offline copy has no
            train split: use :data:`OFFLINE_SPLITS` (``{"train": "validation", "eval": "test"}``).
        offline: never contact the hub. ``None`` reads ``$SPANVIZ_OFFLINE`` (and ``HF_HUB_OFFLINE``).

    Returns:
        A :class:`Corpus`: ``corpus["train"]`` is a ``list[str]``; ``corpus.splits`` records the splits used.

    Raises:
        ValueError: bad ``config``, ``splits`` or ``data_dir``, or a split that is not in the local folder
            (the message lists the files looked for and what to do instead).
        HubUnavailableError: the hub cannot be reached and the dataset is not in the Hugging Face cache.
    """
    config = _check_config(config)
    splits = _check_splits(splits)
    offline = _resolve_offline(offline)
    folder = _resolve_data_dir(data_dir)
    if "train" in splits and splits["train"] == splits.get("eval"):
        logger.warning("train and eval both use the %r split: eval losses measure fit, not generalisation",
                       splits["train"])
    if folder is not None:
        return _load_from_folder(folder, config, splits)
    return _load_from_hub(config, splits, offline)


def _check_config(config: str) -> str:
    if config not in CONFIGS:
        raise ValueError(f"config={config!r} is not a WikiText-2 config; allowed: {', '.join(CONFIGS)}")
    return config


def _check_splits(splits: Mapping[str, str] | None) -> dict[str, str]:
    """Validate a role → split mapping and normalise aliases (``valid`` → ``validation``)."""
    if splits is None:
        return dict(DEFAULT_SPLITS)
    if not isinstance(splits, Mapping) or not splits:
        raise ValueError(
            f"splits={splits!r} must be a non-empty mapping from role to split, "
            f"e.g. {dict(OFFLINE_SPLITS)!r}"
        )
    checked = {}
    for role, split in splits.items():
        if role not in ROLES:
            raise ValueError(f"splits has role {role!r}; allowed roles: {', '.join(ROLES)}")
        split = SPLIT_ALIASES.get(split, split)
        if split not in SPLITS:
            raise ValueError(
                f"splits[{role!r}]={splits[role]!r} is not a WikiText-2 split; "
                f"allowed: {', '.join(SPLITS)} (or 'valid' for 'validation')"
            )
        checked[role] = split
    return checked


def _env_flag(name: str) -> bool | None:
    """The boolean value of environment variable ``name``, or None when unset."""
    value = os.environ.get(name)
    if value is None:
        return None
    if value.strip().lower() in _TRUE:
        return True
    if value.strip().lower() in _FALSE:
        return False
    raise ValueError(f"environment variable {name}={value!r} must be one of 1/0, true/false, yes/no, on/off")


def _resolve_offline(offline: bool | None) -> bool:
    if offline is not None:
        if not isinstance(offline, bool):
            raise ValueError(f"offline={offline!r} must be True, False or None (read ${ENV_OFFLINE})")
        return offline
    for name in (ENV_OFFLINE, "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if _env_flag(name):
            return True
    return False


def _resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path | None:
    """The local folder to read (see :func:`resolve_data_source`), checked to be a folder; None means the hub."""
    folder, _ = resolve_data_source(data_dir)
    if folder is None:
        return None
    origin = "data_dir" if data_dir is not None else (
        f"${ENV_DATA_DIR}" if os.environ.get(ENV_DATA_DIR) else f"the folder remembered in {DATA_SOURCE_FILE}")
    path = Path(folder).expanduser().resolve()
    if not path.is_dir():
        raise ValueError(f"{origin}={folder!r} is not a folder; it must hold WikiText-2 split files "
                         f"(e.g. valid.txt, test.txt)")
    return path


# ---- local folders --------------------------------------------------------------------------------


def _split_file_patterns(split: str, config: str) -> list[str]:
    """Glob patterns that may hold ``split``, in order of preference."""
    names = ["valid", "validation"] if split == "validation" else [split]
    suffix = "raw" if config == "wikitext-2-raw-v1" else "tokens"
    patterns = [f"{name}.txt" for name in names]
    patterns += [f"wiki.{name}.{suffix}" for name in names]
    patterns += [f"{name}-*.parquet" for name in names] + [f"{name}.parquet" for name in names]
    return patterns


def _find_split_files(folder: Path, split: str, config: str) -> list[Path]:
    """The files holding ``split`` in ``folder`` (or its ``config`` subfolder); empty if none."""
    for directory in (folder, folder / config):
        for pattern in _split_file_patterns(split, config):
            found = sorted(path for path in directory.glob(pattern) if path.is_file())
            if found:
                return found
    return []


def _missing_split_error(folder: Path, split: str, role: str, config: str) -> MissingSplitError:
    looked_for = ", ".join(_split_file_patterns(split, config))
    available = [s for s in SPLITS if _find_split_files(folder, s, config)]
    present = sorted(p.name for p in folder.iterdir())[:20]
    message = (
        f"split {split!r} (role {role!r}) was not found in {folder}: looked for {looked_for} "
        f"(also in its {config}/ subfolder). Splits found there: {', '.join(available) or 'none'}; "
        f"files there: {', '.join(present) or 'none'}."
    )
    if split == "train" and "validation" in available:
        other = "test" if "test" in available else "validation"
        message += (
            " This copy of WikiText-2 has no train split: train on the validation "
            f"split instead, splits={{'train': 'validation', 'eval': '{other}'}} "
            f"(command line: --train-split validation --eval-split {other}), or point data_dir / "
            f"${ENV_DATA_DIR} at a complete copy, or unset it to download from the hub ({HUB_ID})."
        )
    elif config == "wikitext-2-v1" and any(folder.glob("wiki.*.raw")):
        message += " The folder has wiki.*.raw files: did you mean config='wikitext-2-raw-v1'?"
    return MissingSplitError(message, folder, split, role, available)


def _load_from_folder(folder: Path, config: str, splits: dict[str, str]) -> Corpus:
    # Find every file before loading anything, so a missing split fails at once.
    files = {}
    for role, split in splits.items():
        found = _find_split_files(folder, split, config)
        if not found:
            raise _missing_split_error(folder, split, role, config)
        files[role] = found

    datasets = _import_datasets(offline=False)
    cache_dir = str(spanviz_home() / "hf-datasets")  # datasets' Arrow copies of local files live here
    lines = {}
    for role, paths in files.items():
        split = splits[role]
        builder = "parquet" if paths[0].suffix == ".parquet" else "text"
        logger.info("reading %s split %r from %s", role, split, ", ".join(map(str, paths)))
        dataset = datasets.load_dataset(
            builder, data_files={split: [str(p) for p in paths]}, split=split, cache_dir=cache_dir
        )
        if "text" not in dataset.column_names:
            raise ValueError(f"{paths[0]} has no 'text' column (columns: {dataset.column_names})")
        lines[role] = _strip_line_breaks(dataset["text"])
    return Corpus(
        lines=lines,
        splits=dict(splits),
        source=str(folder),
        config=config,
        files={role: [str(p.relative_to(folder)) for p in paths] for role, paths in files.items()},
    )


def _strip_line_breaks(texts: Iterable[str | None]) -> list[str]:
    """One line per row, without its trailing line break (hub rows end in ``"\\n"``)."""
    return [(text or "").removesuffix("\n").removesuffix("\r") for text in texts]


# ---- the hub --------------------------------------------------------------------------------------


def _hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


def _probe_hub(timeout: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """Ask the hub for any answer within ``timeout`` seconds. Returns None if it answered, else why not."""
    request = urllib.request.Request(_hub_endpoint(), method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None  # the server answered (with an error status): it is reachable
    except OSError as error:  # DNS failure, refused connection, timeout, TLS failure (URLError is an OSError)
        return f"{_hub_endpoint()}: {getattr(error, 'reason', error)}"


def _hub_help(reason: str) -> HubUnavailableError:
    return HubUnavailableError(
        f"Could not load WikiText-2 from the Hugging Face hub ({HUB_ID}): {reason}. "
        f"Use a local copy instead: pass data_dir=<folder> (command line: --data-dir <folder>) or set "
        f"{ENV_DATA_DIR}=<folder>, where the folder holds valid.txt/test.txt (and train.txt), "
        f"wiki.*.tokens, or the hub's *.parquet files; for a copy without the train split, train on "
        f"validation: splits={dict(OFFLINE_SPLITS)!r} (command line: --train-split validation --eval-split "
        f"test). Or, on a machine with internet, run `spanviz prepare-data` once; later runs with "
        f"{ENV_OFFLINE}=1 use the downloaded copy.",
        reason,
    )


def _import_datasets(offline: bool):
    """Import Hugging Face ``datasets``; with ``offline``, first switch the HF libraries to offline mode.

    The libraries read the offline switch once, on import; if they were imported already, check
    :func:`_datasets_is_offline` afterwards.
    """
    if offline and "datasets" not in sys.modules and "huggingface_hub" not in sys.modules:
        logger.info("switching the Hugging Face libraries to offline mode (HF_HUB_OFFLINE=1)")
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["HF_DATASETS_OFFLINE"] = "1"
    import datasets

    return datasets


def _datasets_is_offline(datasets) -> bool:
    """Whether ``datasets`` (and ``huggingface_hub``) run in offline mode, i.e. fail fast without network."""
    import huggingface_hub.constants

    datasets_offline = getattr(datasets.config, "HF_HUB_OFFLINE", None)
    if datasets_offline is None:  # datasets < 2.19 called it HF_DATASETS_OFFLINE
        datasets_offline = getattr(datasets.config, "HF_DATASETS_OFFLINE", False)
    return bool(datasets_offline) and bool(huggingface_hub.constants.HF_HUB_OFFLINE)


def _load_from_hub(config: str, splits: dict[str, str], offline: bool) -> Corpus:
    unreachable = None
    if not offline:
        unreachable = _probe_hub()
        if unreachable is not None:
            logger.warning("the Hugging Face hub is unreachable (%s); trying the Hugging Face cache offline",
                           unreachable)
            offline = True
    datasets = _import_datasets(offline)
    if offline and not _datasets_is_offline(datasets):
        # Calling load_dataset now would spend ~25 s retrying the network: fail at once instead.
        why = f"the hub is unreachable ({unreachable})" if unreachable else "offline mode was requested"
        raise _hub_help(
            f"{why}, and the Hugging Face cache cannot be tried because `datasets` was imported before "
            f"offline mode could be switched on (set {ENV_OFFLINE}=1 or HF_HUB_OFFLINE=1 before starting "
            "Python to use a copy downloaded earlier)"
        )
    try:
        dataset = datasets.load_dataset(HUB_ID, config)
    except OSError as error:  # ConnectionError (incl. offline mode), FileNotFoundError (not cached)
        if unreachable:
            why = f"the hub is unreachable ({unreachable}) and WikiText-2 is not in the Hugging Face cache"
        elif offline:
            why = "offline mode is on and WikiText-2 is not in the Hugging Face cache"
        else:
            why = "the download failed"
        raise _hub_help(f"{why} ({type(error).__name__}: {error})") from error
    lines = {role: _strip_line_breaks(dataset[split]["text"]) for role, split in splits.items()}
    return Corpus(lines=lines, splits=dict(splits), source=HUB_ID, config=config)


# --------------------------------------------------------------------------------------------------
# 2. Tokenizers
# --------------------------------------------------------------------------------------------------


def _check_lines(lines: Iterable[str]) -> None:
    if isinstance(lines, (str, bytes)):
        raise ValueError("lines must be a list of strings, not a single string; wrap it: [text], "
                         "or split it: text.split('\\n')")


def _ids_to_list(ids: Tensor | Sequence[int], vocab_size: int) -> list[int]:
    values = ids.tolist() if isinstance(ids, Tensor) else [int(v) if isinstance(v, Integral) else v for v in ids]
    if not all(isinstance(v, int) and 0 <= v < vocab_size for v in values):
        raise ValueError(f"ids must be a flat sequence of integers in [0, {vocab_size}); got {ids!r:.80}")
    return values


class WordTokenizer:
    """Whitespace word tokenizer with one ``<eos>`` per line (the classic WikiText-2 setup).

    A line becomes ``line.split() + ["<eos>"]``; blank lines therefore give just ``<eos>``. On the
    ``wikitext-2-v1`` validation split this gives 217,646 tokens, on test 245,569 (source: PyTorch
    ``examples/word_language_model``, ``data.py``).

    Vocabulary (built by :meth:`fit` from the training lines): ids 0 and 1 are ``<unk>`` and ``<eos>``, then
    words by decreasing count, ties broken by first appearance in the text. With ``max_vocab`` only the
    ``max_vocab - 2`` most frequent words are kept, so ``vocab_size <= max_vocab``. Words outside the
    vocabulary encode to ``<unk>`` (v1 text already contains ``<unk>`` for rare words; it maps to the same id).

    Args:
        max_vocab: total vocabulary size cap including ``<unk>`` and ``<eos>``; ``None`` keeps every word.

    Raises:
        ValueError: ``max_vocab`` not None and not an int >= 3.
    """

    kind = "word"
    specials = (UNK, EOS)

    def __init__(self, max_vocab: int | None = None) -> None:
        if max_vocab is not None and (isinstance(max_vocab, bool) or not isinstance(max_vocab, int)
                                      or max_vocab < len(self.specials) + 1):
            raise ValueError(f"max_vocab={max_vocab!r} must be None (no cap) or an int >= 3 "
                             f"(<unk>, <eos> and at least one word)")
        self.max_vocab = max_vocab
        self.itos: list[str] = []  # id -> token
        self.stoi: dict[str, int] = {}  # token -> id

    def fit(self, lines: Iterable[str]) -> WordTokenizer:
        """Build the vocabulary from training ``lines`` (see the class docstring). Returns ``self``."""
        _check_lines(lines)
        counts = Counter(word for line in lines for word in line.split())
        # most_common sorts by count with a stable sort, so equal counts keep first-appearance order.
        words = [word for word, _ in counts.most_common() if word not in self.specials]
        if self.max_vocab is not None:
            words = words[: self.max_vocab - len(self.specials)]
        self._set_vocab([*self.specials, *words])
        return self

    def _set_vocab(self, itos: list[str]) -> None:
        self.itos = list(itos)
        self.stoi = {token: i for i, token in enumerate(self.itos)}

    @property
    def vocab_size(self) -> int:
        """Number of ids, including ``<unk>`` and ``<eos>``; 0 before :meth:`fit`."""
        return len(self.itos)

    @property
    def unk_id(self) -> int:
        return self.stoi[UNK]

    @property
    def eos_id(self) -> int:
        return self.stoi[EOS]

    def _require_vocab(self) -> None:
        if not self.itos:
            raise RuntimeError("WordTokenizer has no vocabulary yet: call fit(train_lines) first")

    def encode(self, lines: Iterable[str], add_eos: bool = True) -> Tensor:
        """Token ids of ``lines``: shape ``(n_tokens,)``, dtype ``torch.long``.

        Each line gives its words, plus ``<eos>`` if ``add_eos`` (use ``add_eos=False`` for a prompt).

        Raises:
            ValueError: ``lines`` is a single string. RuntimeError: called before :meth:`fit`.
        """
        _check_lines(lines)
        self._require_vocab()
        unk, eos, stoi = self.unk_id, self.eos_id, self.stoi
        ids: list[int] = []
        for line in lines:
            ids.extend(stoi.get(word, unk) for word in line.split())
            if add_eos:
                ids.append(eos)
        return torch.tensor(ids, dtype=torch.long)

    def token_strings(self, ids: Tensor | Sequence[int]) -> list[str]:
        """The token of each id, e.g. for axis labels: ``["The", "cat", "<eos>"]``."""
        self._require_vocab()
        return [self.itos[i] for i in _ids_to_list(ids, self.vocab_size)]

    def decode(self, ids: Tensor | Sequence[int]) -> str:
        """Text of 1-D ``ids``: words joined by single spaces, each ``<eos>`` ending a line with ``"\\n"``.

        So ``decode(encode(lines)) == "".join(" ".join(line.split()) + "\\n" for line in lines)`` when
        every word is in the vocabulary.

        Raises:
            ValueError: an id outside ``[0, vocab_size)``.
        """
        text, words = [], []
        for token in self.token_strings(ids):
            if token == EOS:
                text.append(" ".join(words) + "\n")
                words = []
            else:
                words.append(token)
        return "".join(text) + " ".join(words)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state; :func:`tokenizer_from_dict` restores it."""
        return {"kind": self.kind, "max_vocab": self.max_vocab, "itos": list(self.itos)}

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> WordTokenizer:
        tokenizer = cls(max_vocab=state.get("max_vocab"))
        itos = list(state["itos"])
        if itos[: len(cls.specials)] != list(cls.specials) or len(set(itos)) != len(itos):
            raise ValueError("state['itos'] must start with '<unk>', '<eos>' and hold no duplicates")
        tokenizer._set_vocab(itos)
        return tokenizer

    def __repr__(self) -> str:
        return f"WordTokenizer(max_vocab={self.max_vocab}, vocab_size={self.vocab_size})"


class ByteTokenizer:
    """UTF-8 byte tokenizer: 256 ids, one per byte value; the end of each line is the newline byte (id 10).

    For the smallest demos: no vocabulary to build, no unknown tokens, and any text round-trips:
    ``decode(encode(lines)) == "".join(line + "\\n" for line in lines)``.
    """

    kind = "byte"
    vocab_size = 256
    max_vocab = None
    eos_id = ord("\n")

    def fit(self, lines: Iterable[str]) -> ByteTokenizer:
        """Nothing to learn; returns ``self`` (so both tokenizers are used the same way)."""
        return self

    def encode(self, lines: Iterable[str], add_eos: bool = True) -> Tensor:
        """Byte ids of ``lines``, each followed by ``"\\n"`` if ``add_eos``: shape ``(n_bytes,)``, ``torch.long``.

        Raises:
            ValueError: ``lines`` is a single string.
        """
        _check_lines(lines)
        end = "\n" if add_eos else ""
        data = "".join(line + end for line in lines).encode("utf-8")
        return torch.from_numpy(np.frombuffer(data, dtype=np.uint8).astype(np.int64))

    def token_strings(self, ids: Tensor | Sequence[int]) -> list[str]:
        """Each byte as text: printable ASCII as itself, ``"\\n"`` as ``"\\\\n"``, other bytes as ``"<0xAB>"``."""
        return [chr(b) if 32 <= b < 127 else ("\\n" if b == 10 else f"<0x{b:02X}>")
                for b in _ids_to_list(ids, self.vocab_size)]

    def decode(self, ids: Tensor | Sequence[int]) -> str:
        """Text of byte ids; invalid UTF-8 (possible in model samples) becomes ``"\\ufffd"``.

        Raises:
            ValueError: an id outside ``[0, 256)``.
        """
        return bytes(_ids_to_list(ids, self.vocab_size)).decode("utf-8", errors="replace")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind}

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> ByteTokenizer:
        return cls()

    def __repr__(self) -> str:
        return "ByteTokenizer()"


Tokenizer = WordTokenizer | ByteTokenizer


def make_tokenizer(kind: str = "word", max_vocab: int | None = None) -> Tokenizer:
    """A new (not yet fitted) tokenizer: ``"word"`` → :class:`WordTokenizer`, ``"byte"`` → :class:`ByteTokenizer`.

    Raises:
        ValueError: unknown ``kind``; ``max_vocab`` invalid, or given for ``kind="byte"`` (always 256).
    """
    if kind == "word":
        return WordTokenizer(max_vocab=max_vocab)
    if kind == "byte":
        if max_vocab is not None:
            raise ValueError(f"max_vocab={max_vocab!r} only applies to kind='word'; "
                             "the byte tokenizer always has 256 ids (pass max_vocab=None)")
        return ByteTokenizer()
    raise ValueError(f"kind={kind!r} is not a tokenizer; allowed: {', '.join(TOKENIZER_KINDS)}")


def tokenizer_from_dict(state: Mapping[str, Any]) -> Tokenizer:
    """Restore a tokenizer saved with ``to_dict()`` (e.g. from a run record or the token cache).

    Raises:
        ValueError: ``state["kind"]`` is not ``"word"`` or ``"byte"``.
    """
    kind = state.get("kind")
    if kind == "word":
        return WordTokenizer.from_dict(state)
    if kind == "byte":
        return ByteTokenizer.from_dict(state)
    raise ValueError(f"state['kind']={kind!r} is not a tokenizer; allowed: {', '.join(TOKENIZER_KINDS)}")


# --------------------------------------------------------------------------------------------------
# 3. Cached token ids
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenData:
    """Token ids of the train and eval roles, ready for :func:`get_batch`.

    Attributes:
        train_ids: ``(n_train,)`` ``torch.long``, the train role's lines encoded (one ``<eos>`` per line).
        eval_ids: ``(n_eval,)`` ``torch.long``, the eval role's lines, encoded with the train vocabulary.
        tokenizer: the fitted tokenizer.
        splits: role → split used, e.g. ``{"train": "validation", "eval": "test"}``; store it in run records.
        source: ``"Salesforce/wikitext"`` or the local folder.
        config: the WikiText-2 config.
        text_sha256: role → sha256 of the role's lines (each line plus ``"\\n"``, UTF-8).
        cache_key: the sha256 that names the cache entry.
        from_cache: True if the ids were read from the cache rather than tokenized now.
    """

    train_ids: Tensor
    eval_ids: Tensor
    tokenizer: Tokenizer
    splits: dict[str, str]
    source: str
    config: str
    text_sha256: dict[str, str]
    cache_key: str
    from_cache: bool = False

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary for the run record (no token ids, no vocabulary)."""
        return {
            "dataset": "wikitext-2",
            "source": self.source,
            "config": self.config,
            "splits": dict(self.splits),
            "tokenizer": self.tokenizer.kind,
            "max_vocab": self.tokenizer.max_vocab,
            "vocab_size": self.vocab_size,
            "n_tokens": {"train": int(self.train_ids.numel()), "eval": int(self.eval_ids.numel())},
            "text_sha256": dict(self.text_sha256),
            "cache_key": self.cache_key,
        }


def prepare_tokens(
    data_dir: str | os.PathLike[str] | None = None,
    config: str = "wikitext-2-v1",
    splits: Mapping[str, str] | None = None,
    *,
    tokenizer: str = "word",
    max_vocab: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    refresh: bool = False,
) -> TokenData:
    """Load WikiText-2, fit the tokenizer on the train role, encode both roles, and cache the ids.

    This is what ``spanviz prepare-data`` runs. The cache entry is named by a sha256 of the text of each
    role and the tokenizer settings, so changed text or settings never reuse stale ids; a repeat call
    loads the text (fast: ``datasets`` keeps its own cache), hashes it and reads the ids back.

    Cache layout, in ``cache_dir`` (default ``$SPANVIZ_HOME/tokens``): ``<key>.pt`` holds
    ``{"train": ids, "eval": ids}`` (``torch.save``), ``<key>.json`` holds the tokenizer, splits, counts and
    the sha256 of the ``.pt`` file. Both are written atomically (temporary file + ``os.replace``); an
    entry whose checksum or contents do not match is logged as a warning and rebuilt.

    Args:
        data_dir, config, splits, offline: as in :func:`load_wikitext2`; ``splits`` needs both roles.
        tokenizer: ``"word"`` or ``"byte"``. max_vocab: cap for the word tokenizer (see :class:`WordTokenizer`).
        cache_dir: where to keep the ids. refresh: tokenize again even on a cache hit.

    Returns:
        :class:`TokenData`.

    Raises:
        ValueError: bad arguments (before any loading), or a missing local split.
        HubUnavailableError: see :func:`load_wikitext2`.
    """
    make_tokenizer(tokenizer, max_vocab)  # validate the settings before loading anything
    checked = _check_splits(splits)
    if set(checked) != set(ROLES):
        raise ValueError(f"splits={dict(checked)!r} must map both roles 'train' and 'eval' to a split, "
                         f"e.g. {dict(OFFLINE_SPLITS)!r}")
    cache = Path(cache_dir).expanduser() if cache_dir is not None else spanviz_home() / "tokens"

    corpus = load_wikitext2(data_dir, config, checked, offline=offline)
    text_sha256 = {role: _sha256_lines(corpus[role]) for role in ROLES}
    settings = {"kind": tokenizer, "max_vocab": max_vocab}
    key_fields = {"format": CACHE_FORMAT, "text_sha256": text_sha256, "tokenizer": settings}
    key = hashlib.sha256(json.dumps(key_fields, sort_keys=True).encode()).hexdigest()
    common = dict(splits=dict(corpus.splits), source=corpus.source, config=config,
                  text_sha256=text_sha256, cache_key=key)

    if not refresh:
        cached = _read_cache(cache, key)
        if cached is not None:
            train_ids, eval_ids, fitted = cached
            logger.info("token cache hit: %s", cache / f"{key}.pt")
            return TokenData(train_ids, eval_ids, fitted, from_cache=True, **common)

    fitted = make_tokenizer(tokenizer, max_vocab).fit(corpus["train"])
    train_ids = fitted.encode(corpus["train"])
    eval_ids = fitted.encode(corpus["eval"])
    logger.info("tokenized %s: %d train and %d eval tokens, vocab %d",
                corpus.source, train_ids.numel(), eval_ids.numel(), fitted.vocab_size)
    data = TokenData(train_ids, eval_ids, fitted, **common)
    _write_cache(cache, key, data)
    return data


def _sha256_lines(lines: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def _write_cache(cache: Path, key: str, data: TokenData) -> None:
    buffer = io.BytesIO()
    torch.save({"train": data.train_ids, "eval": data.eval_ids}, buffer)
    payload = buffer.getvalue()
    manifest = {
        "format": CACHE_FORMAT,
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
        **data.describe(),  # includes n_tokens, checked on reading
        "tokenizer_state": data.tokenizer.to_dict(),
    }
    # The ids first, then the manifest: an entry only counts once its manifest exists.
    try:
        atomic_write(cache / f"{key}.pt", payload)
        atomic_write(cache / f"{key}.json", json.dumps(manifest).encode("utf-8"))
    except OSError as error:  # a cache that cannot be written costs time later, never the data now
        logger.warning("could not cache token ids in %s (%s); they will be tokenized again next time",
                       cache, error.strerror or error)
        return
    logger.info("cached token ids in %s", cache / f"{key}.pt")


def _read_cache(cache: Path, key: str) -> tuple[Tensor, Tensor, Tokenizer] | None:
    """The cached (train_ids, eval_ids, tokenizer) for ``key``, or None if absent or corrupt (logged)."""
    manifest_path, payload_path = cache / f"{key}.json", cache / f"{key}.pt"
    if not manifest_path.exists():
        return None
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        payload = payload_path.read_bytes()
        if hashlib.sha256(payload).hexdigest() != manifest["payload_sha256"]:
            raise ValueError(f"checksum mismatch in {payload_path.name}")
        ids = torch.load(io.BytesIO(payload), weights_only=True)
        train_ids, eval_ids = ids["train"], ids["eval"]
        for role, tensor in (("train", train_ids), ("eval", eval_ids)):
            if tensor.dtype != torch.long or tensor.ndim != 1 or tensor.numel() != manifest["n_tokens"][role]:
                raise ValueError(f"{role} ids do not match the manifest")
        fitted = tokenizer_from_dict(manifest["tokenizer_state"])
    except Exception as error:  # noqa: BLE001 - whatever makes an entry unreadable (a truncated file, a pickle
        # weights_only refuses, a wrong type in the manifest), the cure is the same: tokenize again.
        logger.warning("token cache entry %s is unreadable or corrupt (%s); rebuilding it", payload_path, error)
        return None
    return train_ids, eval_ids, fitted


# --------------------------------------------------------------------------------------------------
# 4. Batches
# --------------------------------------------------------------------------------------------------


def _check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be an integer >= 1")
    return value


def _check_ids(ids: Any, context_length: int) -> Tensor:
    if not isinstance(ids, Tensor) or ids.ndim != 1 or ids.is_floating_point() or ids.is_complex():
        shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(f"ids must be a 1-D integer tensor of token ids; got {shape}")
    if ids.numel() < context_length + 1:
        raise ValueError(f"ids has {ids.numel()} tokens; context_length={context_length} needs at least "
                         f"{context_length + 1} (one window of context_length + 1 tokens)")
    return ids


def get_batch(
    ids: Tensor,
    batch_size: int,
    context_length: int,
    generator: torch.Generator,
    device: str | torch.device = "cpu",
) -> tuple[Tensor, Tensor]:
    """Random contiguous training windows: inputs ``x`` and next-token targets ``y``.

    Draws ``batch_size`` start offsets uniformly from ``[0, len(ids) - context_length - 1]`` with
    ``generator``, takes windows of ``context_length + 1`` tokens, and returns ``x = window[:, :-1]``,
    ``y = window[:, 1:]``. The same generator state gives the same batch.

    Args:
        ids: ``(N,)`` integer token ids, N >= context_length + 1.
        batch_size: B >= 1. context_length: T >= 1.
        generator: a seeded CPU ``torch.Generator``.
        device: where to put ``x`` and ``y``.

    Returns:
        ``(x, y)``, each ``(B, T)`` ``torch.long``, with ``y[:, :-1] == x[:, 1:]``.

    Raises:
        ValueError: batch_size or context_length not an int >= 1, ids not 1-D integer or too short,
            generator not a ``torch.Generator``.
    """
    _check_positive_int("batch_size", batch_size)
    _check_positive_int("context_length", context_length)
    _check_ids(ids, context_length)
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator={generator!r} must be a torch.Generator (e.g. torch.Generator().manual_seed(0))")
    n_starts = ids.numel() - context_length  # valid starts: 0 .. N - T - 1
    starts = torch.randint(n_starts, (batch_size,), generator=generator, device=generator.device)
    return _windows(ids, starts, context_length, device)


def _windows(ids: Tensor, starts: Tensor, context_length: int, device: str | torch.device) -> tuple[Tensor, Tensor]:
    """x, y of shape (len(starts), T) from windows ids[s : s + T + 1]."""
    offsets = starts.to(ids.device)[:, None] + torch.arange(context_length + 1, device=ids.device)  # (B, T+1)
    window = ids[offsets].long()
    return window[:, :-1].to(device), window[:, 1:].to(device)


def eval_starts(n_tokens: int, context_length: int, n_windows: int | None = None) -> Tensor:
    """Fixed start offsets of evaluation windows, so eval losses are comparable across runs.

    ``n_windows=None``: consecutive non-overlapping windows ``0, T, 2T, ...`` covering the text (every token
    predicted once, except a tail shorter than a window). Otherwise ``n_windows`` starts evenly spaced from
    0 to the last valid start ``n_tokens - T - 1``, so a small budget still samples the whole text.

    Returns:
        ``(n_windows,)`` ``torch.long``.

    Raises:
        ValueError: n_tokens < T + 1, or context_length / n_windows not an int >= 1.
    """
    _check_positive_int("context_length", context_length)
    if n_tokens < context_length + 1:
        raise ValueError(f"n_tokens={n_tokens} is too short for context_length={context_length}; "
                         f"need at least {context_length + 1}")
    last = n_tokens - context_length - 1
    if n_windows is None:
        return torch.arange(0, last + 1, context_length, dtype=torch.long)
    _check_positive_int("n_windows", n_windows)
    return torch.linspace(0, last, n_windows, dtype=torch.float64).round().long()


def iter_eval_batches(
    ids: Tensor,
    batch_size: int,
    context_length: int,
    n_batches: int | None = None,
    device: str | torch.device = "cpu",
) -> Iterator[tuple[Tensor, Tensor]]:
    """Deterministic evaluation batches over :func:`eval_starts` windows (no randomness).

    With ``n_batches`` the windows are ``n_batches * batch_size`` evenly spaced ones; with ``None`` all
    non-overlapping windows (the last batch may be smaller than ``batch_size``).

    Yields:
        ``(x, y)``, each ``(b, T)`` ``torch.long`` with ``b <= batch_size``.

    Raises:
        ValueError: as :func:`get_batch`, and n_batches not None or an int >= 1.
    """
    _check_positive_int("batch_size", batch_size)
    _check_positive_int("context_length", context_length)
    _check_ids(ids, context_length)
    if n_batches is not None:
        _check_positive_int("n_batches", n_batches)
    n_windows = None if n_batches is None else n_batches * batch_size
    starts = eval_starts(ids.numel(), context_length, n_windows)
    for chunk in starts.split(batch_size):
        yield _windows(ids, chunk, context_length, device)


__all__ = [
    "CONFIGS", "DEFAULT_SPLITS", "HUB_ID", "OFFLINE_SPLITS", "ROLES", "SPLITS", "TOKENIZER_KINDS",
    "ByteTokenizer", "Corpus", "HubUnavailableError", "MissingSplitError", "TokenData", "Tokenizer",
    "WordTokenizer",
    "eval_starts", "get_batch", "iter_eval_batches", "load_wikitext2", "make_tokenizer",
    "prepare_tokens", "remember_data_source", "remembered_data_source", "resolve_data_source", "spanviz_home",
    "splits_from_env", "tokenizer_from_dict",
]
