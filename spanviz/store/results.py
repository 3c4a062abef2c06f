"""The results store: :class:`ResultsStore` — run records on disk, one file per configuration key."""

from __future__ import annotations

import logging
import os
import pickle
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from spanviz.files import atomic_write, check_writable_folder, expand_user, read_bounded
from spanviz.store.archive import (
    MAX_RECORD_BYTES,
    ImportReport,
    archived_record,
    archived_weights,
    open_archive,
    record_from_json,
    record_payload,
    weights_fit,
    write_archive,
)
from spanviz.store.keys import KEY_RE, STORABLE, config_key, default_root, index_run
from spanviz.store.replay import Found, ReplayLookup
from spanviz.store.weights import MAX_WEIGHTS_BYTES, NonFiniteWeightsError, pack_weights, unpack_weights
from spanviz.train import RunRecord

logger = logging.getLogger("spanviz.store")  # the name it had as one module: log filters keep working

WEIGHTS = "weights"
"""Sub-folder of the store (and of an archive): ``<key>.pt``, a run's final weights (:mod:`spanviz.store.weights`)."""


def record_bytes(steps: int) -> int:
    """About how large a run's record gets in the store, an upper estimate: 1 KiB per update plus 1 MiB (a 300-update
    run with the FP8 probe on 2 layers, 50 history columns, wrote 207 KB: about 700 B per update)."""
    return 1024 * steps + 2**20


_CHECKED: OrderedDict[tuple, bytes] = OrderedDict()
"""Records this process has read from a store and checked, pickled, by the identity of their file
(:func:`_identity`), least recently used first: a notebook reads the same runs again and again (the bundle's import,
each panel's sweep and replay lookup), and every check of :meth:`ResultsStore.load` costs about 5 ms a run. A
file written again (atomic writes replace it) has another identity, so it is read again."""
CHECKED_BYTES = 256 * 2**20
"""Most bytes :data:`_CHECKED` keeps."""


def _identity(path: Path) -> tuple:
    """What tells a file's content changed: its path, device, inode, size and modification and change times [ns]."""
    st = path.stat()
    return str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _remember(identity: tuple, pickled: bytes) -> None:
    global _checked_bytes
    _checked_bytes += len(pickled) - len(_CHECKED.pop(identity, b""))
    _CHECKED[identity] = pickled
    while _checked_bytes > CHECKED_BYTES:
        _checked_bytes -= len(_CHECKED.popitem(last=False)[1])


_checked_bytes = 0


class ResultsStore(ReplayLookup):
    """Run records on disk, keyed by :func:`config_key` of their config.

    Args:
        root: the folder (created on the first write); None = :func:`default_root`.

    Example (``config`` is ``trainer.record.config``, or :func:`spanviz.train.record.run_config` of the same inputs)::

        store = ResultsStore()
        record = store.get(config)  # None the first time
        if record is None:
            record = trainer.run()
            store.put(record)
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = expand_user(root, "the results store") if root is not None else default_root()

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.root)!r})"

    @staticmethod
    def key(config: Mapping[str, Any]) -> str:
        """Same as :func:`config_key`."""
        return config_key(config)

    def path(self, key: str) -> Path:
        """The file of ``key`` (whether or not it exists). Raises ``ValueError`` for a malformed key."""
        if not isinstance(key, str) or not KEY_RE.fullmatch(key):
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

        The file is checked with ``stat`` before it is read: a regular file of at most :data:`MAX_RECORD_BYTES`
        (a huge or sparse file is refused without reading it), then every check of an imported run
        (:func:`record_from_json`, a storable status, the key). A file this process has read and checked before,
        unchanged since (same inode, size and times), is not read again (:data:`_CHECKED`).

        Raises:
            KeyError: nothing stored under ``key``.
            ValueError: malformed key, or a stored file that is not a regular file, too large, unreadable, not a
                run record, a partial run, or does not match its key (the message names the file).
        """
        path = self.path(key)
        try:
            before = _identity(path) if path.is_file() else None
        except FileNotFoundError:  # removed meanwhile
            before = None
        if before is None:
            raise KeyError(key)
        if before in _CHECKED:  # read and checked before, and the file has not changed since
            _CHECKED.move_to_end(before)
            return pickle.loads(_CHECKED[before])  # a fresh copy: the caller may change it
        payload = read_bounded(path, MAX_RECORD_BYTES)
        record = record_from_json(payload, str(path))
        if config_key(record.config) != key:
            raise ValueError(f"{path} holds a record whose config does not hash to its file name; remove the file")
        if record.status not in STORABLE:
            raise ValueError(f"{path} holds a partial run (status {record.status!r}, not one of {STORABLE}); remove "
                             "the file")
        if _identity(path) == before:  # not replaced while it was read
            _remember(before, pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))
        return record

    def put(self, record: RunRecord, weights: Mapping[str, Any] | None = None) -> str:
        """Store ``record`` (replacing an earlier record of the same config), atomically. Returns its key.

        The record must pass the checks every reader makes (:func:`record_payload`: size, nesting, message
        length, ...), so nothing is written that :meth:`load`, :meth:`export` or an import would refuse. A
        diverged record never replaces a finished one of the same configuration (the finished one and its weights
        are kept and a warning logged): a divergence after a finished run of the same configuration comes from a
        damaged start (e.g. a checkpoint), not from the configuration.

        Args:
            record: a finished or diverged run.
            weights: the run's final ``model.state_dict()`` to keep beside it (see :mod:`spanviz.store.weights`;
                for small models a notebook looks inside after a replay), or None: then weights kept for an
                earlier record of the same key are removed (they belonged to another run).
        Raises:
            ValueError: not a RunRecord, status not in :data:`STORABLE`, not JSON-serialisable, over a limit, or
                ``weights`` not a state dict, too large, or not the weights of ``record.config["model"]`` (names,
                shapes, finite: :func:`~spanviz.store.weights.check_fits_model`; a diverged run's non-finite
                weights are dropped, logged) — then nothing is written and an older file of the same key is left
                as it was.
            OSError: the store folder cannot be written.
        """
        if not isinstance(record, RunRecord):
            raise ValueError(f"record must be a RunRecord, got {type(record).__name__}")
        if record.status not in STORABLE:
            raise ValueError(f"record.status must be one of {STORABLE} to be stored, got {record.status!r}: "
                             "a partial run would replay as if it were the result of its configuration")
        key = config_key(record.config)
        payload = record_payload(record, f"the run record of {key[:12]}")
        packed = None
        if weights is not None:
            try:
                packed = pack_weights(weights, key, record.config.get("model"))
            except NonFiniteWeightsError as error:
                if record.status != "diverged":
                    raise
                logger.warning("results store: %s; the diverged run is stored without them", error)
        if record.status == "diverged" and self._stored_status(key) == "finished":
            logger.warning("results store: kept the finished run %s; a diverged run of the same configuration does "
                           "not replace it", key[:12])
            return key
        self._write(key, record, payload, packed)
        return key

    def _write(self, key: str, record: RunRecord, payload: bytes, weights: bytes | None) -> None:
        """The record's checked bytes (:func:`record_payload`), its replay-index entry and its weights file (or
        none: an older one is removed)."""
        atomic_write(self.path(key), payload)
        index_run(self.root, key, record.config)
        if weights is not None:
            atomic_write(self.weights_path(key), weights)
        else:
            self.weights_path(key).unlink(missing_ok=True)

    def _stored_record(self, key: str) -> RunRecord | None:
        """The readable entry of ``key``, or None (none, or damaged)."""
        try:
            return self.load(key)
        except (KeyError, ValueError):
            return None

    def _stored_status(self, key: str) -> str | None:
        """The status of the readable entry of ``key``, or None (none, or damaged)."""
        record = self._stored_record(key)
        return None if record is None else record.status

    def check_room(self, steps: Iterable[int], weight_bytes: int = 0, what: str | None = None) -> None:
        """Make sure the store can take the records of runs of these step counts (and ``weight_bytes`` of weights):
        checked before training, so a full disk is found before the work rather than after it.

        Raises:
            ValueError: naming the store (or ``what``), its free space and the space needed (:func:`record_bytes`).
        """
        need = sum(record_bytes(s) for s in steps) + weight_bytes
        check_writable_folder(self.root, what or f"the results store {self.root}", need_bytes=need)

    # ------------------------------------------------------------------------------------------ weights
    def weights_path(self, key: str) -> Path:
        """The weights file of ``key`` (whether or not it exists). Raises ``ValueError`` for a malformed key."""
        self.path(key)  # checks the key
        return self.root / WEIGHTS / f"{key}.pt"

    def has_weights(self, key: str) -> bool:
        """Whether final weights are kept for the run stored under ``key``."""
        return self.weights_path(key).is_file()

    def weights(self, key: str) -> dict[str, Any] | None:
        """The final weights kept for the run stored under ``key`` (a state dict, float32), or None when there are
        none, its record is gone, or the file is damaged or does not fit the record's model (logged as a warning
        naming the file). The file is checked with ``stat`` before
        it is read (a regular file of at most :data:`MAX_WEIGHTS_BYTES`), like a record."""
        path = self.weights_path(key)
        if not path.is_file():
            return None
        try:
            model = self.load(key).config.get("model")
            return unpack_weights(read_bounded(path, MAX_WEIGHTS_BYTES), key, str(path), model)
        except KeyError:  # its record was removed
            return None
        except ValueError as error:  # UnreadableFileError included
            logger.warning("results store: skipping damaged weights (%s)", error)
            return None

    def list(self) -> list[str]:
        """The keys of the files in the store, sorted (damaged entries included; see :meth:`scan`)."""
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*.json") if KEY_RE.fullmatch(p.stem))

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

    def sweep(self, experiment: str, size: str) -> dict[str, list[RunRecord]]:
        """The runs of one sweep (``config["tags"] == {"experiment": experiment, "size": size}``, e.g. ``"ls"``,
        ``"gpu"``) by variant (``config["variant"]``, in the order first seen), each variant's runs in seed order,
        one per seed (the last the store lists). {} when the store has none."""
        tags = {"experiment": experiment, "size": size}
        by_variant: dict[str, dict[Any, RunRecord]] = {}
        for _, record in self.records():
            if record.config.get("tags") == tags:
                by_variant.setdefault(str(record.config.get("variant")), {})[record.config.get("seed")] = record
        order = lambda s: (0, s, "") if isinstance(s, int) else (1, 0, str(s))  # noqa: E731 - seeds as numbers
        return {variant: [seeds[s] for s in sorted(seeds, key=order)] for variant, seeds in by_variant.items()}

    # --------------------------------------------------------------------------------- export / import
    def export(self, path: str | os.PathLike[str], keys: Iterable[str] | None = None,
               about: Mapping[str, Any] | None = None) -> Path:
        """Write runs into one zip file: ``manifest.json`` plus ``runs/<key>.json`` per run, and
        ``weights/<key>.pt`` for the runs whose final weights are kept. Atomic.

        Every run is read and checked first, so the archive never ships a damaged entry (damaged weights are
        left out with a warning), and it keeps the limits an import checks, so it imports on any machine. Written
        one run (and its weights) at a time (:func:`~spanviz.store.archive.write_archive`).

        Args:
            path: the zip file to write (e.g. ``"workshop-runs.zip"``); its folder is created.
            keys: which runs; None = every readable run (damaged entries are skipped with a warning naming
                the file).
            about: JSON-able notes for the manifest's ``"about"`` (e.g. how the archive was made).
        Returns:
            The path written.
        Raises:
            ValueError: ``path`` is a folder or cannot be written; a requested key that is not in the store or
                whose entry is damaged; more runs or bytes than an import accepts.
        """
        path = expand_user(path, "the archive")
        if path.is_dir():
            raise ValueError(f"{path} is a folder; give the file to write, e.g. {path / 'runs.zip'}")
        if keys is not None:
            keys = list(dict.fromkeys(keys))
            missing = [k for k in keys if not self.path(k).is_file()]
            if missing:
                raise ValueError(f"keys not in the store {self.root}: {missing}")
        return write_archive(path, self._exported(keys), about)

    def _exported(self, keys: list[str] | None) -> Iterator[tuple[str, bytes, bytes | None]]:
        """``(key, record bytes, weights bytes or None)`` of each run to export, read and checked one at a time;
        damaged entries are skipped with a warning (``keys`` None) or raise (``keys`` given)."""
        for key in self.list() if keys is None else keys:
            try:
                record = self.load(key)
            except (KeyError, ValueError) as error:
                if keys is not None:
                    raise
                logger.warning("results store: not exported, a damaged entry: %s", error)
                continue
            yield (key, record_payload(record, str(self.path(key))),  # what an import accepts
                   self._weights_bytes(key, record.config.get("model")))

    def _weights_bytes(self, key: str, model: Mapping[str, Any] | None) -> bytes | None:
        """The checked bytes of a kept weights file (they fit ``model``), or None (none kept, or damaged: logged)."""
        path = self.weights_path(key)
        if not path.is_file():
            return None
        try:
            payload = read_bounded(path, MAX_WEIGHTS_BYTES)
            unpack_weights(payload, key, str(path), model)
        except ValueError as error:  # UnreadableFileError included
            logger.warning("results store: not exporting damaged weights (%s)", error)
            return None
        return payload

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
        """Import the runs of an archive written by :meth:`export`, checking everything first (what is checked:
        :mod:`spanviz.store.archive`): a run that fails is rejected (reported, not written) and the others are
        imported; weights that fail are rejected and their run is imported without them. Each run is read,
        checked and written before the next one is read, so memory holds one run at a time. A run already in the
        store is kept (unless ``overwrite``) when its entry is readable; a damaged entry is replaced.
        Each run written records where it came from: ``environment.imported_from`` (the archive's file name) and
        ``environment.imported_utc``.

        Args:
            path: the zip file. overwrite: replace runs already in this store (default: keep them).
        Returns:
            An :class:`ImportReport`.
        Raises:
            ValueError: the file is missing, a folder, a device or FIFO, too large, not a zip, or its manifest
                fails the checks above.
        """
        report = ImportReport()
        with open_archive(path) as (archive, keys, report.about):
            weights_ok = weights_fit(archive, keys, report)
            for key in keys:
                # a run the store holds, readable, is kept without reading the archive's copy (which it would not
                # replace): opening a notebook a second time imports the shipped bundle in half the time
                stored = None if overwrite else self._stored_record(key)  # None: a malformed key, too
                if stored is not None:
                    report.kept.append(key)
                    report.records[key] = stored
                    continue
                try:
                    record = archived_record(archive, key)
                except ValueError as error:
                    report.rejected.append((f"runs/{key}.json", str(error)))
                    continue
                packed = None
                if weights_ok:
                    try:
                        packed = archived_weights(archive, key, record.config.get("model"))
                    except ValueError as error:  # its run is imported without them
                        report.rejected.append((f"{WEIGHTS}/{key}.pt", str(error)))
                # Where the run came from, for `runs list` and the panels' status line (the key and the
                # fingerprint of a shipped run — config and start time — do not change).
                record.environment = {**record.environment, "imported_from": Path(path).name[:200],
                                      "imported_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
                # the record passed record_from_json's checks as read; only two short strings were added, so it is
                # written without checking it a second time (record_payload would), the size limit apart
                payload = record.to_json().encode("utf-8")
                if len(payload) > MAX_RECORD_BYTES:
                    report.rejected.append((f"runs/{key}.json", f"{len(payload):,} bytes with its provenance, "
                                                                f"more than {MAX_RECORD_BYTES:,}"))
                    continue
                self._write(key, record, payload, packed)
                report.written.append(key)
                report.records[key] = record
        return report


__all__ = ["WEIGHTS", "Found", "ResultsStore"]
