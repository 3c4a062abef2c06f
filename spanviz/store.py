"""A results store: run records on disk, keyed by a hash of their full configuration.

A repeated request for a configuration that was trained before replays the stored record instantly (that is
how notebooks answer a slider in seconds). An instructor precomputes runs on a GPU, :meth:`ResultsStore.export`s
them into one ``.zip`` file, and students :meth:`ResultsStore.import_` it and replay offline.

Layout: ``<root>/<key>.json``, one :class:`~spanviz.train.RunRecord` per file, written atomically (temporary
file in the same folder, then ``os.replace``). Default root: ``$SPANVIZ_HOME/runs``, with ``SPANVIZ_HOME``
defaulting to ``~/.cache/spanviz``.

Key: sha256 of the canonical JSON (sorted keys, no spaces, ASCII) of the record's whole ``config`` — model,
train (seed included), data description, probes and any experiment entries (``variant``, ``seed``, ``tags``)
— with one exception: ``config["data"]["source"]`` (a machine-specific folder, or the hub id) is left out,
because the data are identified by their text sha256 and tokenizer settings, and an instructor's local folder
path must not change the key a student computes.

What is stored: only complete results, status ``"finished"`` and ``"diverged"`` (a divergence is a real
outcome of that configuration). Stopped and interrupted runs are partial and would replay as if they were
the result of the configuration, so :meth:`ResultsStore.put` refuses them.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import re
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from spanviz.data import spanviz_home
from spanviz.files import atomic_write
from spanviz.train import RunRecord

STORABLE = ("finished", "diverged")
"""Statuses :meth:`ResultsStore.put` accepts."""
EXPORT_FORMAT = "spanviz-runs-1"
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")


def default_root() -> Path:
    """``$SPANVIZ_HOME/runs`` (``SPANVIZ_HOME`` defaults to ``~/.cache/spanviz``), read at each call."""
    return spanviz_home() / "runs"


def config_key(config: Mapping[str, Any]) -> str:
    """The store key of a run configuration: 64 hex digits (see the module docstring).

    Raises:
        ValueError: ``config`` is not a mapping or holds something JSON cannot represent.
    """
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a mapping (a RunRecord.config), got {type(config).__name__}")
    identity = copy.deepcopy(dict(config))
    if isinstance(identity.get("data"), Mapping):
        identity["data"] = {k: v for k, v in identity["data"].items() if k != "source"}
    try:
        text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"config is not JSON-serialisable: {error}") from error
    return hashlib.sha256(text.encode("ascii")).hexdigest()


class ResultsStore:
    """Run records on disk, keyed by :func:`config_key` of their config.

    Args:
        root: the folder (created on the first write); None = :func:`default_root`.

    Example (``config`` is ``trainer.record.config``, or :func:`spanviz.train.run_config` of the same inputs)::

        store = ResultsStore()
        record = store.get(config)  # None the first time
        if record is None:
            record = trainer.run()
            store.put(record)
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_root()

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.root)!r})"

    @staticmethod
    def key(config: Mapping[str, Any]) -> str:
        """Same as :func:`config_key`."""
        return config_key(config)

    def path(self, key: str) -> Path:
        """The file of ``key`` (whether or not it exists). Raises ``ValueError`` for a malformed key."""
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise ValueError(f"key must be 64 lowercase hex digits (from ResultsStore.key), got {key!r}")
        return self.root / f"{key}.json"

    def _key_of(self, item: Mapping[str, Any] | RunRecord) -> str:
        return config_key(item.config if isinstance(item, RunRecord) else item)

    def __contains__(self, item: object) -> bool:
        """``config in store`` (a config mapping or a RunRecord)."""
        if not isinstance(item, (Mapping, RunRecord)):
            return False
        return self.path(self._key_of(item)).is_file()

    def __len__(self) -> int:
        return len(self.list())

    def get(self, config: Mapping[str, Any]) -> RunRecord | None:
        """The stored record of ``config``, or None when it was never stored.

        Raises:
            ValueError: bad ``config`` (see :func:`config_key`), or a stored file that is corrupt or does not
                belong to its key.
        """
        key = config_key(config)
        path = self.path(key)
        if not path.is_file():
            return None
        return self.load(key)

    def load(self, key: str) -> RunRecord:
        """The record stored under ``key``.

        Raises:
            KeyError: nothing stored under ``key``.
            ValueError: malformed key, or a stored file that is corrupt or does not match its key.
        """
        path = self.path(key)
        if not path.is_file():
            raise KeyError(key)
        record = RunRecord.load(path)
        if config_key(record.config) != key:
            raise ValueError(f"{path} holds a record whose config does not hash to its file name; remove the file")
        return record

    def put(self, record: RunRecord) -> str:
        """Store ``record`` (replacing an earlier record of the same config), atomically. Returns its key.

        Raises:
            ValueError: not a RunRecord, status not in :data:`STORABLE`, or not JSON-serialisable (then
                nothing is written and an older file of the same key is left as it was).
        """
        if not isinstance(record, RunRecord):
            raise ValueError(f"record must be a RunRecord, got {type(record).__name__}")
        if record.status not in STORABLE:
            raise ValueError(f"record.status must be one of {STORABLE} to be stored, got {record.status!r}: "
                             "a partial run would replay as if it were the result of its configuration")
        key = config_key(record.config)
        record.save(self.path(key))
        return key

    def list(self) -> list[str]:
        """The stored keys, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*.json") if _KEY_RE.match(p.stem))

    def records(self) -> Iterable[tuple[str, RunRecord]]:
        """``(key, record)`` for every stored run, in key order."""
        for key in self.list():
            yield key, self.load(key)

    # --------------------------------------------------------------------------------- export / import
    def export(self, path: str | os.PathLike[str], keys: Iterable[str] | None = None) -> Path:
        """Write runs into one zip file: ``manifest.json`` plus ``runs/<key>.json`` per run. Atomic.

        Args:
            path: the zip file to write (e.g. ``"workshop-runs.zip"``).
            keys: which runs; None = all.
        Returns:
            The path written.
        Raises:
            ValueError: a key that is not in the store.
        """
        keys = self.list() if keys is None else list(keys)
        missing = [k for k in keys if not self.path(k).is_file()]
        if missing:
            raise ValueError(f"keys not in the store {self.root}: {missing}")
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("manifest.json", json.dumps({"format": EXPORT_FORMAT, "keys": keys}, indent=1))
            for key in keys:
                archive.writestr(f"runs/{key}.json", self.path(key).read_bytes())
        return atomic_write(path, buffer.getvalue())

    def import_(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> list[str]:
        """Add the runs of a zip file written by :meth:`export` to this store.

        Every run is checked (valid record, storable status, config hashing to its key) before anything is
        written, so a bad archive imports nothing.

        Args:
            path: the zip file. overwrite: replace runs already in this store (default: keep them).
        Returns:
            The keys written.
        Raises:
            ValueError: not an export archive, or a run that fails the checks.
        """
        try:
            with zipfile.ZipFile(path) as archive:
                manifest = json.loads(archive.read("manifest.json"))
                if not isinstance(manifest, dict) or manifest.get("format") != EXPORT_FORMAT:
                    raise ValueError(f"{path}: manifest format is not {EXPORT_FORMAT!r}")
                records = {}
                for key in manifest["keys"]:
                    self.path(key)  # validates the key's form
                    record = RunRecord.from_json(archive.read(f"runs/{key}.json"))
                    if config_key(record.config) != key:
                        raise ValueError(f"{path}: run {key} has a config that does not hash to its key")
                    if record.status not in STORABLE:
                        raise ValueError(f"{path}: run {key} has status {record.status!r}, not one of {STORABLE}")
                    records[key] = record
        except (zipfile.BadZipFile, KeyError, json.JSONDecodeError) as error:
            raise ValueError(f"{path} is not a spanviz runs archive: {error}") from error
        written = []
        for key, record in records.items():
            if overwrite or not self.path(key).is_file():
                record.save(self.path(key))
                written.append(key)
        return written


__all__ = ["STORABLE", "ResultsStore", "config_key", "default_root"]
