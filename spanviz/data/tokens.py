"""Cached token ids: :func:`prepare_tokens` (text → ids, cached on disk) and :func:`load_tokens` (the same with the
split policy of :mod:`spanviz.settings`)."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from spanviz.data.hub import HUB_ID
from spanviz.data.tokenizers import Tokenizer, make_tokenizer, tokenizer_from_dict
from spanviz.data.wikitext import load_wikitext2, split_files
from spanviz.files import atomic_write, read_bounded
from spanviz.settings import OFFLINE_SPLITS, ROLES, check_splits, resolve_data_source, spanviz_home

logger = logging.getLogger(__name__)

LOCAL_SOURCE = "local folder"
"""``describe()["source"]`` of data read from a local folder (the folder itself is not recorded)."""
CACHE_FORMAT = 1
"""Bump when the cache layout or the tokenization changes, so old cache entries are not reused."""


@dataclass(frozen=True)
class TokenData:
    """Token ids of the train and eval roles, ready for :func:`get_batch`.

    Attributes:
        train_ids: ``(n_train,)`` ``torch.long``, the train role's lines encoded (one ``<eos>`` per line).
        eval_ids: ``(n_eval,)`` ``torch.long``, the eval role's lines, encoded with the train vocabulary.
        tokenizer: the fitted tokenizer.
        splits: role → split used, e.g. ``{"train": "validation", "eval": "test"}``; store it in run records.
        source: ``"Salesforce/wikitext"`` or the local folder (shown to the user; run records get
            :data:`LOCAL_SOURCE` instead, see :meth:`describe`).
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

    def summary(self) -> str:
        """One line for a notebook: where the text came from, the splits trained and evaluated on with their token
        counts, and the vocabulary size — ``"local folder: train on 'validation' (217,646 tokens), evaluate on
        'test' (245,569 tokens), vocab 8,192"``."""
        info = self.describe()
        return (f"{info['source']}: train on {info['splits']['train']!r} ({info['n_tokens']['train']:,} tokens), "
                f"evaluate on {info['splits']['eval']!r} ({info['n_tokens']['eval']:,} tokens), "
                f"vocab {self.vocab_size:,}")

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary for the run record (no token ids, no vocabulary): the dataset's identity — name,
        config, splits, tokenizer, counts and the sha256 of each role's text — and where it came from, as the hub
        id or :data:`LOCAL_SOURCE`, never a path of the machine (the text hashes say which text it was)."""
        return {
            "dataset": "wikitext-2",
            "source": self.source if self.source == HUB_ID else LOCAL_SOURCE,
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
    loads the text (``datasets`` keeps its own cache), hashes it and reads the ids back — except from a local
    folder whose split files are the very files read before (same path, device, inode, size, mtime and ctime):
    then the sha256 recorded at that read (``<cache_dir>/texts/<identity sha256>.json``) names the entry, and
    the text is not read at all (~2 s less on 2 cores: no ``datasets`` import).

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
    checked = check_splits(splits)
    if set(checked) != set(ROLES):
        raise ValueError(f"splits={dict(checked)!r} must map both roles 'train' and 'eval' to a split, "
                         f"e.g. {dict(OFFLINE_SPLITS)!r}")
    cache = Path(cache_dir).expanduser() if cache_dir is not None else spanviz_home() / "tokens"

    settings = {"kind": tokenizer, "max_vocab": max_vocab}

    def cache_key(text_sha256: Mapping[str, str]) -> str:
        key_fields = {"format": CACHE_FORMAT, "text_sha256": dict(text_sha256), "tokenizer": settings}
        return hashlib.sha256(json.dumps(key_fields, sort_keys=True).encode()).hexdigest()

    # A local folder whose split files are the very files read before (same path, inode, size, mtime and ctime):
    # the text's sha256 is known, the text is not read again (it costs datasets' import and a read: ~2.5 s of every
    # notebook's first cells on 2 cores).
    identity = _local_text_identity(data_dir, config, checked) if data_dir is not None else None
    known = _read_known_text(cache, identity) if identity is not None and not refresh else None
    if known is not None:
        key = cache_key(known["text_sha256"])
        cached = _read_cache(cache, key)
        if cached is not None:
            train_ids, eval_ids, fitted = cached
            logger.info("token cache hit (text unchanged since it was read): %s", cache / f"{key}.pt")
            return TokenData(train_ids, eval_ids, fitted, from_cache=True, **known, cache_key=key)

    corpus = load_wikitext2(data_dir, config, checked, offline=offline)
    text_sha256 = {role: _sha256_lines(corpus[role]) for role in ROLES}
    key = cache_key(text_sha256)
    common = dict(splits=dict(corpus.splits), source=corpus.source, config=config,
                  text_sha256=text_sha256, cache_key=key)
    if identity is not None:
        _write_known_text(cache, identity, {k: v for k, v in common.items() if k != "cache_key"})

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


KNOWN_TEXT_FIELDS = ("splits", "source", "config", "text_sha256")
"""What a known-text entry (``<cache>/texts/<identity sha256>.json``) records of the text it was read as."""


def _local_text_identity(data_dir: str | os.PathLike[str], config: str,
                         splits: Mapping[str, str]) -> dict[str, Any] | None:
    """The identity of a local folder's split files as read now: per role, each file's resolved path, device, inode,
    size, mtime and ctime (ns). Any change of a file's bytes changes its size, mtime or ctime (ctime cannot be set
    back). None when a file is not a regular file (a FIFO, a device: the full check of the loader judges it).

    Raises:
        ValueError: what :func:`spanviz.data.wikitext.split_files` raises (no folder, a missing split), the same
            error the loader gives.
    """
    files = split_files(data_dir, splits, config)
    roles: dict[str, list[list[Any]]] = {}
    for role, paths in sorted(files.items()):
        roles[role] = []
        for path in paths:
            try:
                st = os.stat(path)
            except OSError:
                return None
            if not stat.S_ISREG(st.st_mode):
                return None
            roles[role].append([str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns])
    return {"format": CACHE_FORMAT, "data_dir": str(data_dir), "config": config, "splits": dict(sorted(splits.items())),
            "files": roles}


def _known_text_path(cache: Path, identity: Mapping[str, Any]) -> Path:
    name = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return cache / "texts" / f"{name}.json"


def _read_known_text(cache: Path, identity: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the text of these very files was read as (:data:`KNOWN_TEXT_FIELDS`), or None (never read, unreadable)."""
    path = _known_text_path(cache, identity)
    if not path.exists():
        return None
    try:
        entry = json.loads(read_bounded(path, 2**20).decode("utf-8"))
        if entry["identity"] != json.loads(json.dumps(identity)):
            raise ValueError("another identity")
        known = {k: entry[k] for k in KNOWN_TEXT_FIELDS}
        if set(known["text_sha256"]) != set(ROLES) or not all(
                isinstance(v, str) and len(v) == 64 for v in known["text_sha256"].values()):
            raise ValueError("no sha256 per role")
    except Exception as error:  # noqa: BLE001 - an unreadable entry only means the text is read again
        logger.warning("known-text entry %s is unreadable (%s); the text is read again", path, error)
        return None
    return known


def _write_known_text(cache: Path, identity: Mapping[str, Any], known: Mapping[str, Any]) -> None:
    try:
        atomic_write(_known_text_path(cache, identity),
                     json.dumps({"identity": identity, **known}, sort_keys=True).encode("utf-8"))
    except (OSError, ValueError) as error:  # costs a read of the text next time, never the data now
        logger.warning("could not record the text's sha256 in %s (%s)", cache, error.strerror or error)


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


MAX_CACHE_MANIFEST_BYTES = 64 * 2**20
"""Largest token-cache manifest read [bytes] (it holds the fitted vocabulary: about 1 MB for WikiText-2's words)."""
MAX_CACHE_PAYLOAD_BYTES = 8 * 2**30
"""Largest token-cache payload read [bytes] (WikiText-2: about 20 MB of int64 ids; WikiText-103: about 1 GB)."""


def _read_cache(cache: Path, key: str) -> tuple[Tensor, Tensor, Tokenizer] | None:
    """The cached (train_ids, eval_ids, tokenizer) for ``key``, or None if absent or corrupt (logged)."""
    manifest_path, payload_path = cache / f"{key}.json", cache / f"{key}.pt"
    if not manifest_path.exists():
        return None
    try:
        manifest = json.loads(read_bounded(manifest_path, MAX_CACHE_MANIFEST_BYTES).decode("utf-8"))
        payload = read_bounded(payload_path, MAX_CACHE_PAYLOAD_BYTES)  # stat first: no FIFO, no runaway size
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


def load_tokens(data_dir: str | os.PathLike[str] | None = None, **settings: Any) -> TokenData:
    """:func:`prepare_tokens` from the folder and splits of the split policy
    (:func:`spanviz.settings.resolve_data_source` with a local folder's splits defaulting to
    :data:`~spanviz.settings.OFFLINE_SPLITS`): what the panels, the
    experiments and the notebooks read.

    Args:
        data_dir: a local folder; None = ``$SPANVIZ_WIKITEXT_DIR``, the remembered folder, or the hub.
        settings: further :func:`prepare_tokens` arguments (``max_vocab``, ``tokenizer``, ...).
    Raises:
        What :func:`prepare_tokens` raises.
    """
    folder, splits = resolve_data_source(data_dir, local_splits=OFFLINE_SPLITS)
    return prepare_tokens(folder, splits=splits, **settings)


def run_tokenizer(data_config: Mapping[str, Any], data: TokenData | None = None,
                  data_dir: str | os.PathLike[str] | None = None) -> Tokenizer:
    """The tokenizer a run was trained with, from its record's ``config["data"]`` (:meth:`TokenData.describe`).

    A model's token ids mean the words of the vocabulary fitted on *its* training text: a run replayed from the store
    may have trained on another split than yours (the workshop bundle: the offline copy's validation split), and its
    ids read with your tokenizer would be other words. So: ``data.tokenizer`` when ``data`` has the run's training
    text (same sha256) and tokenizer settings; else the tokenizer fitted again on the run's splits from the split
    policy's source (``data_dir``, ``$SPANVIZ_WIKITEXT_DIR``, the remembered folder, or the hub), cached like any
    token data, once its training text is checked to be the run's (sha256).

    Raises:
        ValueError: ``data_config`` lacks the splits, tokenizer or text sha256; the run's training text is not what
            this machine's source gives for its split (another sha256), so its vocabulary cannot be rebuilt here; or
            a split this source lacks (what :func:`prepare_tokens` raises).
    """
    try:
        splits, kind, config = dict(data_config["splits"]), str(data_config["tokenizer"]), data_config["config"]
        max_vocab, sha = data_config.get("max_vocab"), data_config["text_sha256"]["train"]
    except (KeyError, TypeError):
        raise ValueError("data_config must be a run record's config['data'] with 'splits', 'tokenizer', 'config' "
                         "and 'text_sha256' (TokenData.describe())") from None
    if data is not None and data.text_sha256.get("train") == sha and (data.tokenizer.kind, data.tokenizer.max_vocab) \
            == (kind, max_vocab):
        return data.tokenizer
    folder, _ = resolve_data_source(data_dir, local_splits=OFFLINE_SPLITS)
    rebuilt = prepare_tokens(folder, config, splits, tokenizer=kind, max_vocab=max_vocab)
    if rebuilt.text_sha256["train"] != sha:
        raise ValueError(f"the run trained on other text than the {splits.get('train')!r} split here (sha256 "
                         f"{sha[:12]}… there, {rebuilt.text_sha256['train'][:12]}… here): its vocabulary cannot be "
                         "rebuilt, so its token ids cannot be read as words")
    return rebuilt.tokenizer
