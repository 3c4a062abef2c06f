"""WikiText-2 text lines per role: from a local folder (text or parquet files) or the Hugging Face hub.

Lines: WikiText files hold one paragraph (or a `` = Title = `` heading, or a blank line) per line. We keep
every line, blank ones included, exactly as in the source with only the line break removed; hub rows
(which end in ``"\\n"``) and local text files therefore give the same words.

The hub, and offline use without waiting for a hub that does not answer: :mod:`spanviz.data.hub`.

Source: WikiText-2 is from Merity, Xiong, Bradbury, Socher, "Pointer Sentinel Mixture Models" (2016).
"""

from __future__ import annotations

import codecs
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanviz.data.hub import HUB_ID, hub_texts, import_datasets
from spanviz.files import check_writable_folder, open_bounded
from spanviz.settings import (
    DATA_SOURCE_FILE,
    DEFAULT_SPLITS,
    ENV_DATA_DIR,
    ENV_OFFLINE,
    SPLITS,
    check_splits,
    env_flag,
    resolve_data_source,
    spanviz_home,
)

logger = logging.getLogger(__name__)

CONFIGS = ("wikitext-2-v1", "wikitext-2-raw-v1")
"""Allowed ``config`` values: ``-v1`` is tokenized with rare words replaced by ``<unk>``; ``-raw-v1`` is
the original text."""

class MissingSplitError(ValueError):
    """A split is not in a local WikiText-2 folder; the message lists what was looked for and what to do.

    Attributes: ``folder``, ``split``, ``role``, ``available`` (the splits the folder does have).
    """

    def __init__(self, message: str, folder: Path, split: str, role: str, available: list[str]) -> None:
        super().__init__(message)
        self.folder, self.split, self.role, self.available = folder, split, role, available


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
       answer within :data:`~spanviz.data.hub.HUB_PROBE_TIMEOUT_S` seconds, or ``offline`` is true, only the
       local Hugging Face cache is used (offline mode).

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
        spanviz.data.hub.HubUnavailableError: the hub cannot be reached and the dataset is not in the Hugging
            Face cache.
    """
    config = _check_config(config)
    splits = check_splits(splits)
    offline = _resolve_offline(offline)
    folder = _resolve_data_dir(data_dir)
    if "train" in splits and splits["train"] == splits.get("eval"):
        logger.warning("train and eval both use the %r split: eval losses measure fit, not generalisation",
                       splits["train"])
    if folder is not None:
        return _load_from_folder(folder, config, splits)
    lines = {role: _strip_line_breaks(texts) for role, texts in hub_texts(config, splits, offline).items()}
    return Corpus(lines=lines, splits=dict(splits), source=HUB_ID, config=config)


def _check_config(config: str) -> str:
    if config not in CONFIGS:
        raise ValueError(f"config={config!r} is not a WikiText-2 config; allowed: {', '.join(CONFIGS)}")
    return config



def _resolve_offline(offline: bool | None) -> bool:
    if offline is not None:
        if not isinstance(offline, bool):
            raise ValueError(f"offline={offline!r} must be True, False or None (read ${ENV_OFFLINE})")
        return offline
    for name in (ENV_OFFLINE, "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if env_flag(name):
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


def available_splits(folder: str | os.PathLike[str], config: str = "wikitext-2-v1") -> list[str]:
    """The WikiText-2 splits a local folder holds (files as :func:`load_wikitext2` looks for them), in the order
    train, validation, test; empty for a folder with none (or no folder).

    Raises:
        ValueError: bad ``config``.
    """
    config = _check_config(config)
    path = Path(folder).expanduser()
    if not path.is_dir():
        return []
    return [s for s in SPLITS if _find_split_files(path, s, config)]


def splits_for_folder(folder: str | os.PathLike[str], config: str = "wikitext-2-v1") -> dict[str, str]:
    """The role → split mapping a folder supports when nobody named the splits: train on ``train`` and evaluate on
    ``validation`` when it has a train split (:data:`DEFAULT_SPLITS`); without one, train on ``validation`` and
    evaluate on ``test`` (:data:`OFFLINE_SPLITS`, the shape of the offline copy); a folder with neither gives
    :data:`DEFAULT_SPLITS` (loading it then says what is missing).

    Raises:
        ValueError: bad ``config``.
    """
    have = available_splits(folder, config)
    if "train" in have:
        return {"train": "train", "eval": "validation" if "validation" in have else have[-1]}
    if "validation" in have:
        return {"train": "validation", "eval": "test" if "test" in have else "validation"}
    return dict(DEFAULT_SPLITS)


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


def split_files(data_dir: str | os.PathLike[str], splits: Mapping[str, str] | None = None,
                config: str = "wikitext-2-v1") -> dict[str, list[Path]]:
    """The files of each role's split in a local WikiText-2 folder (see :func:`load_wikitext2`), found without
    reading them — the check a command makes before it loads anything.

    Returns:
        role → the split's files.
    Raises:
        ValueError: bad ``config`` or ``splits``, ``data_dir`` not a folder; :class:`MissingSplitError` (a
            ValueError) for a split that is not there.
    """
    config, splits = _check_config(config), check_splits(splits)
    folder = Path(data_dir).expanduser().resolve()
    if not folder.is_dir():
        raise ValueError(f"data_dir={str(data_dir)!r} is not a folder; it must hold WikiText-2 split files "
                         "(e.g. valid.txt, test.txt)")
    files = {}
    for role, split in splits.items():
        found = _find_split_files(folder, split, config)
        if not found:
            raise _missing_split_error(folder, split, role, config)
        files[role] = found
    return files


MAX_SPLIT_BYTES = 2**30
"""Largest local split file read [bytes] (WikiText-2's train split has 11 MB, WikiText-103's 540 MB)."""
_DECODE_CHUNK = 2**20


def check_text_file(path: Path) -> None:
    """A local split text file must be a non-empty regular file of UTF-8 text, at most :data:`MAX_SPLIT_BYTES`.

    Read a chunk at a time (bounded memory); a file of random bytes, an empty file or Latin-1 text is refused
    with its name and the first undecodable byte, instead of failing deep inside ``datasets``.

    Raises:
        ValueError: naming the file and what is wrong.
    """
    with open_bounded(path, MAX_SPLIT_BYTES) as handle:
        decoder, offset, text_seen = codecs.getincrementaldecoder("utf-8")("strict"), 0, False
        while True:
            chunk = handle.read(_DECODE_CHUNK)
            try:
                text = decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as error:
                at = offset + error.start
                raise ValueError(f"{path}: not UTF-8 text (byte 0x{chunk[error.start]:02x} at offset {at:,}); "
                                 "WikiText-2 split files are UTF-8") from None
            if "\x00" in text:
                raise ValueError(f"{path}: holds NUL bytes, so it is not a text file")
            text_seen = text_seen or bool(text.strip())
            if not chunk:
                break
            offset += len(chunk)
    if not text_seen:
        raise ValueError(f"{path}: is empty (no text); a WikiText-2 split file holds the split's lines")


def _load_from_folder(folder: Path, config: str, splits: dict[str, str]) -> Corpus:
    # Find every file before loading anything, so a missing split fails at once; text files must be UTF-8.
    files = split_files(folder, splits, config)
    for paths in files.values():
        for path in paths:
            if path.suffix != ".parquet":
                check_text_file(path)
            else:
                with open_bounded(path, MAX_SPLIT_BYTES):
                    pass

    datasets = import_datasets(offline=False)
    lines = {}
    with _arrow_cache() as cache_dir:
        for role, paths in files.items():
            lines[role] = _read_split(datasets, cache_dir, role, splits[role], paths, config)
    return Corpus(
        lines=lines,
        splits=dict(splits),
        source=str(folder),
        config=config,
        files={role: [str(p.relative_to(folder)) for p in paths] for role, paths in files.items()},
    )


@contextmanager
def _arrow_cache() -> Iterator[str]:
    """Where ``datasets`` keeps its Arrow copies of local files: ``$SPANVIZ_HOME/hf-datasets``, or, when that cannot
    be written (a read-only home whose token cache is all a run needs), a temporary folder removed afterwards —
    rather than an error that blamed the data file."""
    cache_dir = spanviz_home() / "hf-datasets"
    try:
        check_writable_folder(cache_dir, "the datasets cache")
    except ValueError:
        logger.info("%s cannot be written: datasets' copies of the text go to a temporary folder", cache_dir)
        with tempfile.TemporaryDirectory(prefix="spanviz-hf-datasets-") as temporary:
            yield temporary
        return
    yield str(cache_dir)


def _read_split(datasets: Any, cache_dir: str, role: str, split: str, paths: list[Path], config: str) -> list[str]:
    """The lines of one role's split files (text or parquet), read through ``datasets``; checked against config."""
    builder = "parquet" if paths[0].suffix == ".parquet" else "text"
    logger.info("reading %s split %r from %s", role, split, ", ".join(map(str, paths)))
    try:
        dataset = datasets.load_dataset(
            builder, data_files={split: [str(p) for p in paths]}, split=split, cache_dir=cache_dir
        )
    except Exception as error:  # noqa: BLE001 - datasets raises many types for a bad file; all mean "unreadable"
        cause = error.__cause__ or error
        first = (str(cause).strip().splitlines() or [""])[0][:200]
        raise ValueError(f"{', '.join(map(str, paths))}: cannot be read as a WikiText-2 {builder} file "
                         f"({type(cause).__name__}: {first})") from None
    if "text" not in dataset.column_names:
        raise ValueError(f"{paths[0]} has no 'text' column (columns: {dataset.column_names})")
    lines = _strip_line_breaks(dataset["text"])
    _check_config_of_text(lines, config, paths)
    return lines


def _check_config_of_text(lines: list[str], config: str, paths: list[Path]) -> None:
    """A file named ``<split>.txt`` or ``.parquet`` may hold either config's text: the tokenized ``-v1`` text has
    ``<unk>`` for its rare words, the raw text never does. Refuse raw-v1 for text holding ``<unk>`` (a run would
    record raw-v1 for v1 text). Raises: ValueError naming the file and both configs."""
    if config == "wikitext-2-raw-v1" and any("<unk>" in line for line in lines):
        raise ValueError(f"config='wikitext-2-raw-v1' (--wikitext-config) but {paths[0]} holds <unk> tokens: it is the "
                         "tokenized wikitext-2-v1 text; use config 'wikitext-2-v1' (the default), or a folder of raw "
                         "text (wiki.*.raw files)")


def _strip_line_breaks(texts: Iterable[str | None]) -> list[str]:
    """One line per row, without its trailing line break (hub rows end in ``"\\n"``)."""
    return [(text or "").removesuffix("\n").removesuffix("\r") for text in texts]
