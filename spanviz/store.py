"""A results store: run records on disk, keyed by a hash of their full configuration.

A repeated request for a configuration that was trained before replays the stored record instantly (that is
how notebooks answer a slider in seconds). An instructor precomputes runs on a GPU, :meth:`ResultsStore.export`s
them into one ``.zip`` file, and students :meth:`ResultsStore.import_` it and replay offline.

Layout: ``<root>/<key>.json``, one :class:`~spanviz.train.RunRecord` per file, written atomically (temporary
file in the same folder, then ``os.replace``). Default root: ``$SPANVIZ_HOME/runs``, with ``SPANVIZ_HOME``
defaulting to ``~/.cache/spanviz``.

Concurrent writers are safe, across processes too (the workers of a distributed sweep, two sweeps at once):
each writer has its own temporary file and ``os.replace`` swaps whole files, so a reader sees no file or a
complete one, never a mix; when two processes store the same key, one complete record wins (both hold the same
configuration). A writer killed mid-write leaves only its hidden temporary file (``.<key>.json.*.tmp``), which
listings ignore. Nothing is locked, so nothing waits.

Key: sha256 of the canonical JSON (sorted keys, no spaces, ASCII) of the record's whole ``config`` — model,
train (seed included), data description, probes and any experiment entries (``variant``, ``seed``, ``tags``)
— with two exceptions: ``config["data"]["source"]`` (a machine-specific folder, or the hub id) is left out,
because the data are identified by their text sha256 and tokenizer settings, and an instructor's local folder
path must not change the key a student computes; and ``config["train"]["checkpoint_interval"]`` counts as 0,
because how often a run was checkpointed does not change its curve.

What is stored: only complete results, status ``"finished"`` and ``"diverged"`` (a divergence is a real
outcome of that configuration). Stopped and interrupted runs are partial and would replay as if they were
the result of the configuration, so :meth:`ResultsStore.put` refuses them.

Bad data never takes the store down: a damaged entry (unreadable, not a run record, or a config that does not
hash to its file name) is skipped with a warning naming the file — by :meth:`ResultsStore.records`,
:meth:`~ResultsStore.get` (which then answers "not stored", so the run is trained again and the entry
replaced) and :meth:`~ResultsStore.export` (which never ships one). Archives come from other people, so
:meth:`ResultsStore.import_report` checks everything before it trusts it: the zip and its manifest, sizes
(:data:`MAX_RECORD_BYTES` per run, :data:`MAX_ARCHIVE_BYTES` in all), counts (:data:`MAX_RUNS`), JSON nesting
depth (:data:`MAX_DEPTH`), the record schema and the key of every run; each rejected run is reported, the
others are imported.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import logging
import os
import re
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanviz.data import spanviz_home
from spanviz.files import atomic_write
from spanviz.train import RunRecord

logger = logging.getLogger(__name__)

STORABLE = ("finished", "diverged")
"""Statuses :meth:`ResultsStore.put` accepts."""
EXPORT_FORMAT = "spanviz-runs-1"
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")

MAX_RUNS = 10_000
"""Most runs one archive may hold."""
MAX_RECORD_BYTES = 64 * 2**20
"""Largest run record accepted from an archive (uncompressed JSON) [bytes]."""
MAX_ARCHIVE_BYTES = 2 * 2**30
"""Largest total of uncompressed run records accepted from one archive [bytes]."""
MAX_MANIFEST_BYTES = 4 * 2**20
"""Largest manifest accepted [bytes]."""
MAX_DEPTH = 16
"""Deepest JSON nesting accepted in a run record (real records nest about 6 deep)."""
MAX_MESSAGE_CHARS = 10_000
"""Longest ``message`` accepted in a run record [characters]."""


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
    if isinstance(identity.get("train"), Mapping) and "checkpoint_interval" in identity["train"]:
        # How often a run was checkpointed does not change its curve: every cadence gets the key it had
        # when checkpoints were only written at the end (0), so records stored before stay valid.
        identity["train"] = {**identity["train"], "checkpoint_interval": 0}
    try:
        text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"config is not JSON-serialisable: {error}") from error
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def check_json_limits(obj: Any, where: str, *, max_depth: int = MAX_DEPTH) -> None:
    """ValueError unless ``obj`` (parsed JSON) nests at most ``max_depth`` deep. Iterative: any depth is safe."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > max_depth:
                raise ValueError(f"{where}: JSON nested deeper than {max_depth} levels")
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def record_from_json(payload: bytes | str, where: str) -> RunRecord:
    """A :class:`RunRecord` from JSON that may come from anywhere (a store file, an archive).

    Checks, before building anything: the JSON parses (any nesting depth fails cleanly), nests at most
    :data:`MAX_DEPTH` deep, and the record schema (see :meth:`RunRecord.from_dict`) with a ``message`` of at
    most :data:`MAX_MESSAGE_CHARS` characters.

    Raises:
        ValueError: naming ``where`` and what is wrong.
    """
    try:
        obj = json.loads(payload)
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deeply") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{where}: not JSON ({error})") from None
    check_json_limits(obj, where)
    if isinstance(obj, dict) and isinstance(obj.get("message"), str) and len(obj["message"]) > MAX_MESSAGE_CHARS:
        raise ValueError(f"{where}: message has {len(obj['message']):,} characters, more than {MAX_MESSAGE_CHARS:,}")
    try:
        return RunRecord.from_dict(obj)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


@dataclass
class ImportReport:
    """What :meth:`ResultsStore.import_report` did with an archive.

    Attributes:
        written: keys written into the store. kept: keys already in the store and kept (no ``overwrite``).
        rejected: ``(entry, reason)`` for each run that failed a check (nothing of it was written).
    """

    written: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)


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
        return sorted(p.stem for p in self.root.glob("*.json") if _KEY_RE.match(p.stem))

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
                keys = self._manifest_keys(archive, path)
                report, records = ImportReport(), {}
                for key in keys:
                    try:
                        records[key] = self._archived_record(archive, key)
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

    @staticmethod
    def _manifest_keys(archive: zipfile.ZipFile, path: Path) -> list[str]:
        """The distinct keys of the archive's manifest, after the archive-wide checks."""
        try:
            info = archive.getinfo("manifest.json")
        except KeyError:
            raise ValueError(f"{path} is not a spanviz runs archive (no manifest.json)") from None
        if info.file_size > MAX_MANIFEST_BYTES:
            raise ValueError(f"{path}: manifest.json has {info.file_size:,} bytes, more than {MAX_MANIFEST_BYTES:,}")
        try:
            manifest = json.loads(archive.read(info))
        except (RecursionError, json.JSONDecodeError, UnicodeDecodeError):
            raise ValueError(f"{path}: manifest.json is not valid JSON") from None
        if not isinstance(manifest, dict) or manifest.get("format") != EXPORT_FORMAT:
            raise ValueError(f"{path}: manifest format is not {EXPORT_FORMAT!r}")
        keys = manifest.get("keys")
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise ValueError(f"{path}: manifest 'keys' must be a list of run keys (strings), "
                             f"got {type(keys).__name__}")
        if len(keys) > MAX_RUNS:
            raise ValueError(f"{path}: manifest lists {len(keys):,} runs, more than {MAX_RUNS:,}")
        keys = list(dict.fromkeys(keys))  # repeated keys count once
        sizes = {i.filename: i.file_size for i in archive.infolist()}
        total = sum(sizes.get(f"runs/{k}.json", 0) for k in keys)
        if total > MAX_ARCHIVE_BYTES:
            raise ValueError(f"{path}: its runs add up to {total:,} bytes uncompressed, more than "
                             f"{MAX_ARCHIVE_BYTES:,}")
        return keys

    @staticmethod
    def _archived_record(archive: zipfile.ZipFile, key: str) -> RunRecord:
        """One checked run of an archive (ValueError naming what is wrong)."""
        if not _KEY_RE.match(key):
            raise ValueError(f"key {key[:80]!r} is not 64 lowercase hex digits")
        name = f"runs/{key}.json"
        try:
            info = archive.getinfo(name)
        except KeyError:
            raise ValueError("listed in the manifest but missing from the archive") from None
        if info.file_size > MAX_RECORD_BYTES:
            raise ValueError(f"{info.file_size:,} bytes, more than {MAX_RECORD_BYTES:,}")
        with archive.open(info) as handle:
            payload = handle.read(MAX_RECORD_BYTES + 1)
        if len(payload) > MAX_RECORD_BYTES:
            raise ValueError(f"more than {MAX_RECORD_BYTES:,} bytes")
        record = record_from_json(payload, "record")
        if config_key(record.config) != key:
            raise ValueError("its config does not hash to its key (tampered or damaged)")
        if record.status not in STORABLE:
            raise ValueError(f"status {record.status!r} is not one of {STORABLE} (a partial run)")
        return record


__all__ = ["STORABLE", "ImportReport", "ResultsStore", "check_json_limits", "config_key", "default_root",
           "record_from_json"]


# ===================================================================================== workshop bundle
BUNDLE = Path(__file__).resolve().parent / "bundles" / "workshop-gpu.zip"
"""The workshop bundle shipped with spanviz: runs precomputed on a GPU (see ``docs/gpu.md``)."""


def describe_runs(records: Iterable[RunRecord]) -> dict[str, Any]:
    """Where a set of runs came from: ``{"runs", "devices", "torch", "first_utc", "last_utc", "experiments"}`` —
    device names and torch versions (sorted, distinct), the earliest and latest start time (UTC, ISO 8601),
    and the number of runs per experiment: ``"<experiment>/<size>"`` from a sweep's ``tags``, or "notebook
    defaults" for untagged runs (what the notebooks' panels store)."""
    records = list(records)
    started = sorted(r.environment.get("started_utc", "") for r in records if r.environment.get("started_utc"))
    experiments: dict[str, int] = {}
    for r in records:
        tags = r.config.get("tags") if isinstance(r.config.get("tags"), Mapping) else None
        name = f"{tags.get('experiment')}/{tags.get('size')}" if tags else "notebook defaults"
        experiments[name] = experiments.get(name, 0) + 1
    return {
        "runs": len(records),
        "devices": sorted({str(r.environment.get("device_name")) for r in records}),
        "torch": sorted({str(r.environment.get("torch")) for r in records}),
        "first_utc": started[0] if started else None,
        "last_utc": started[-1] if started else None,
        "experiments": experiments,
    }


def load_bundle(path: str | os.PathLike[str] | None = None, store: ResultsStore | None = None) -> dict[str, Any]:
    """Import a workshop bundle into the results store, so its configurations replay at once; say where it came from.

    One call for a notebook or a script (``spanviz runs import FILE`` does the same from a shell). Runs the store
    has already are kept.

    Args:
        path: a ``spanviz runs export`` archive; None = :data:`BUNDLE`, the one shipped with spanviz.
        store: the store to fill; None = ``ResultsStore()`` (the notebooks' and the command line's default).
    Returns:
        :func:`describe_runs` of the bundle's runs, plus ``"path"``, ``"imported"`` (runs newly written) and
        ``"rejected"`` (entries the import refused, with the reason).
    Raises:
        ValueError: the file is missing or not a usable archive (see :meth:`ResultsStore.import_report`).
    """
    path = Path(BUNDLE if path is None else path)
    store = ResultsStore() if store is None else store
    report = store.import_report(path)
    with zipfile.ZipFile(path) as archive:
        keys = [n[len("runs/"):-len(".json")] for n in archive.namelist() if n.startswith("runs/")]
    records = [store.load(k) for k in keys if _KEY_RE.match(k) and store.path(k).is_file()]
    return {"path": str(path), **describe_runs(records), "imported": len(report.written),
            "rejected": [f"{entry}: {why}" for entry, why in report.rejected]}
