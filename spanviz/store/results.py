"""The results store: :class:`ResultsStore` — run records on disk, one file per configuration key."""

from __future__ import annotations

import io
import json
import logging
import os
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from spanviz.files import atomic_write
from spanviz.store.archive import EXPORT_FORMAT, ImportReport, archived_record, manifest_keys, record_from_json
from spanviz.store.keys import KEY_RE, STORABLE, config_key, default_root
from spanviz.train import RunRecord

logger = logging.getLogger("spanviz.store")  # the name it had as one module: log filters keep working


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
        if not isinstance(key, str) or not KEY_RE.match(key):
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

        A stored file that is damaged or does not belong to its key is logged as a warning (naming the file)
        and answered with None, so the caller trains again and :meth:`put` replaces the file.

        Raises:
            ValueError: bad ``config`` (see :func:`config_key`).
        """
        key = config_key(config)
        if not self.path(key).is_file():
            return None
        try:
            return self.load(key)
        except ValueError as error:
            logger.warning("results store: skipping a damaged entry (%s); the run will be trained again", error)
            return None

    def load(self, key: str) -> RunRecord:
        """The record stored under ``key``.

        Raises:
            KeyError: nothing stored under ``key``.
            ValueError: malformed key, or a stored file that is unreadable, not a run record, or does not match
                its key (the message names the file).
        """
        path = self.path(key)
        if not path.is_file():
            raise KeyError(key)
        try:
            payload = path.read_bytes()
        except OSError as error:
            raise ValueError(f"{path} cannot be read ({error.strerror or error})") from None
        record = record_from_json(payload, str(path))
        if config_key(record.config) != key:
            raise ValueError(f"{path} holds a record whose config does not hash to its file name; remove the file")
        return record

    def put(self, record: RunRecord) -> str:
        """Store ``record`` (replacing an earlier record of the same config), atomically. Returns its key.

        Raises:
            ValueError: not a RunRecord, status not in :data:`STORABLE`, or not JSON-serialisable (then
                nothing is written and an older file of the same key is left as it was).
            OSError: the store folder cannot be written.
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
        """The keys of the files in the store, sorted (damaged entries included; see :meth:`scan`)."""
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*.json") if KEY_RE.match(p.stem))

    def scan(self) -> tuple[dict[str, RunRecord], list[tuple[Path, str]]]:
        """Read every stored run: ``(records by key, [(file, reason)] of the damaged entries)``, in key order."""
        good: dict[str, RunRecord] = {}
        bad: list[tuple[Path, str]] = []
        for key in self.list():
            try:
                good[key] = self.load(key)
            except (KeyError, ValueError) as error:  # KeyError: removed meanwhile
                bad.append((self.path(key), str(error)))
        return good, bad

    def records(self) -> Iterable[tuple[str, RunRecord]]:
        """``(key, record)`` for every readable stored run, in key order; damaged entries are skipped with a
        warning naming the file."""
        good, bad = self.scan()
        for _, why in bad:
            logger.warning("results store: skipping a damaged entry: %s", why)
        yield from good.items()

    # --------------------------------------------------------------------------------- export / import
    def export(self, path: str | os.PathLike[str], keys: Iterable[str] | None = None) -> Path:
        """Write runs into one zip file: ``manifest.json`` plus ``runs/<key>.json`` per run. Atomic.

        Every run is read and checked first, so the archive never ships a damaged entry.

        Args:
            path: the zip file to write (e.g. ``"workshop-runs.zip"``); its folder is created.
            keys: which runs; None = every readable run (damaged entries are skipped with a warning naming
                the file).
        Returns:
            The path written.
        Raises:
            ValueError: ``path`` is a folder or cannot be written; a requested key that is not in the store or
                whose entry is damaged.
        """
        path = Path(path)
        if path.is_dir():
            raise ValueError(f"{path} is a folder; give the file to write, e.g. {path / 'runs.zip'}")
        if keys is None:
            records = dict(self.records())
        else:
            keys = list(keys)
            missing = [k for k in keys if not self.path(k).is_file()]
            if missing:
                raise ValueError(f"keys not in the store {self.root}: {missing}")
            records = {k: self.load(k) for k in keys}
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("manifest.json", json.dumps({"format": EXPORT_FORMAT, "keys": list(records)}, indent=1))
            for key, record in records.items():
                archive.writestr(f"runs/{key}.json", record.to_json())
        try:
            return atomic_write(path, buffer.getvalue())
        except OSError as error:
            raise ValueError(f"cannot write {path} ({error.strerror or error})") from None

    def import_(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> list[str]:
        """Add the runs of a zip file written by :meth:`export` to this store; returns the keys written.

        Same checks as :meth:`import_report`; each rejected run is logged as a warning.

        Raises:
            ValueError: not a usable archive at all (see :meth:`import_report`).
        """
        report = self.import_report(path, overwrite=overwrite)
        for entry, why in report.rejected:
            logger.warning("import %s: rejected %s: %s", path, entry, why)
        return report.written

    def import_report(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> ImportReport:
        """Import the runs of an archive written by :meth:`export`, checking everything first.

        The archive as a whole must be a zip with a ``manifest.json`` (at most :data:`MAX_MANIFEST_BYTES`)
        of format :data:`EXPORT_FORMAT` listing at most :data:`MAX_RUNS` distinct keys, whose run files add up
        to at most :data:`MAX_ARCHIVE_BYTES` uncompressed. Each run must be a file ``runs/<key>.json`` of at most
        :data:`MAX_RECORD_BYTES`, pass :func:`record_from_json`, have a storable status and a config that
        hashes to its key; a run that fails is rejected (reported, not written) and the others are imported.

        Args:
            path: the zip file. overwrite: replace runs already in this store (default: keep them).
        Returns:
            An :class:`ImportReport`.
        Raises:
            ValueError: the file is missing, a folder, not a zip, or its manifest fails the checks above.
        """
        path = Path(path)
        if not path.exists():
            raise ValueError(f"{path}: no such file")
        if path.is_dir():
            raise ValueError(f"{path} is a folder, not a runs archive (.zip)")
        try:
            with zipfile.ZipFile(path) as archive:
                keys = manifest_keys(archive, path)
                report, records = ImportReport(), {}
                for key in keys:
                    try:
                        records[key] = archived_record(archive, key)
                    except ValueError as error:
                        report.rejected.append((f"runs/{key}.json", str(error)))
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as error:
            raise ValueError(f"{path} is not a spanviz runs archive ({error})") from None
        for key, record in records.items():
            if overwrite or not self.path(key).is_file():
                record.save(self.path(key))
                report.written.append(key)
            else:
                report.kept.append(key)
        return report
