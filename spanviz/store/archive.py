"""Run records that come from elsewhere (a store file, an archive someone sent), and the runs archive itself: JSON
size, depth and schema limits; the manifest and runs of a ``spanviz runs export`` zip file, read
(:func:`open_archive`, the one way the store opens an archive or the shipped bundle) and written
(:func:`write_archive`).

What an import checks (:meth:`~spanviz.store.results.ResultsStore.import_report`). The file: checked with ``stat``
before it is opened (a regular file of at most :data:`MAX_ARCHIVE_BYTES`: no device, FIFO or folder). The archive
as a whole: a zip with a ``manifest.json`` (at most :data:`MAX_MANIFEST_BYTES`) of format :data:`EXPORT_FORMAT`
listing at most :data:`MAX_RUNS` distinct keys, whose run files add up to at most :data:`MAX_ARCHIVE_BYTES`
uncompressed (:func:`open_archive`). Each run: a file ``runs/<key>.json`` of at most :data:`MAX_RECORD_BYTES` that
passes :func:`record_from_json`, with a storable status and a config that hashes to its key
(:func:`archived_record`). A run's ``weights/<key>.pt``: at most :data:`MAX_WEIGHTS_BYTES`, all of them together
at most :data:`MAX_ARCHIVE_BYTES` (:func:`weights_fit`), passing :func:`~spanviz.store.weights.unpack_weights`
(:func:`archived_weights`). Members are read a chunk at a time, so one that would expand past a limit is refused as
soon as it does. :meth:`~spanviz.store.results.ResultsStore.export` keeps the same limits (:func:`write_archive`)."""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanviz.files import atomic_open, expand_user, open_bounded
from spanviz.store.history import check_history
from spanviz.store.keys import KEY_RE, STORABLE, config_key
from spanviz.store.weights import MAX_WEIGHTS_BYTES, unpack_weights
from spanviz.train import RunRecord

EXPORT_FORMAT = "spanviz-runs-1"
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
MAX_CONTAINERS = 1_000_000
"""Most JSON objects and arrays in one run record (real records hold a few hundred; a paper-sized run with a
probe on every update some ten thousand). Counted on the bytes before parsing, so a small file that would
parse into millions of empty ``{}`` is refused in milliseconds and without the memory."""
MAX_VALUES = 8_000_000
"""Most JSON values (counted as the commas) in one run record (real records hold about 15,000)."""
MAX_INT_DIGITS = 19
"""Longest integer accepted in a run record [digits]: a 64-bit integer. A longer one fits no float (a loss of
400 digits would make every ``float()`` of it overflow) and no tensor."""
READ_CHUNK = 2**20
"""Bytes read (and counted) at a time from an archive member."""
ENVIRONMENT_TEXT = ("python", "platform", "torch", "spanviz", "git_commit", "source_sha256", "device", "device_name",
                    "started_utc", "imported_from", "imported_utc")
"""``environment`` entries that must be strings when present (the bundle's provenance reads them)."""


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits, more than {MAX_INT_DIGITS} (it fits no float "
                         "or 64-bit integer)")
    return int(text)


def count_structure(chunk: bytes) -> tuple[int, int]:
    """(JSON objects and arrays, values) that ``chunk`` of JSON text can hold at most: its ``{``/``[`` and
    ``,`` bytes (characters inside strings are counted too, so this errs on the safe side)."""
    return chunk.count(b"{") + chunk.count(b"["), chunk.count(b",")


def check_structure(payload: bytes, where: str) -> None:
    """ValueError unless ``payload`` holds at most :data:`MAX_CONTAINERS` containers and :data:`MAX_VALUES` values."""
    containers, values = count_structure(payload)
    _check_counts(containers, values, where)


def _check_counts(containers: int, values: int, where: str) -> None:
    if containers > MAX_CONTAINERS:
        raise ValueError(f"{where}: more than {MAX_CONTAINERS:,} JSON objects and arrays (a run record holds a few "
                         "hundred)")
    if values > MAX_VALUES:
        raise ValueError(f"{where}: more than {MAX_VALUES:,} JSON values")


_SCALARS = frozenset({int, float, str, bool, type(None)})
"""Exact types of JSON values that hold nothing nested."""


def check_json_limits(obj: Any, where: str, *, max_depth: int = MAX_DEPTH) -> None:
    """ValueError unless ``obj`` (parsed JSON) nests at most ``max_depth`` deep. Iterative: any depth is safe."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > max_depth:
                raise ValueError(f"{where}: JSON nested deeper than {max_depth} levels")
            if isinstance(value, list) and set(map(type, value)) <= _SCALARS:  # a history column: nothing nests
                continue
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def record_from_json(payload: bytes | str, where: str) -> RunRecord:
    """A :class:`RunRecord` from JSON that may come from anywhere (a store file, an archive).

    Checks, before building anything: at most :data:`MAX_RECORD_BYTES`, :data:`MAX_CONTAINERS` objects and
    arrays and :data:`MAX_VALUES` values (counted on the bytes, before parsing); the JSON parses (any nesting
    depth fails cleanly) with no integer longer than :data:`MAX_INT_DIGITS` digits, nests at most
    :data:`MAX_DEPTH` deep, and the record schema (see :meth:`RunRecord.from_dict`) with a ``message`` of at
    most :data:`MAX_MESSAGE_CHARS` characters, string provenance (:data:`ENVIRONMENT_TEXT`) and a history of
    curves (:func:`~spanviz.store.history.check_history`).
    :meth:`ResultsStore.put <spanviz.store.ResultsStore.put>` applies the same checks before it writes, so the
    store never holds what it would refuse to read, export or import.

    Raises:
        ValueError: naming ``where`` and what is wrong.
    """
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    if len(payload) > MAX_RECORD_BYTES:
        raise ValueError(f"{where}: {len(payload):,} bytes, more than {MAX_RECORD_BYTES:,}")
    check_structure(payload, where)
    try:
        obj = json.loads(payload, parse_int=_bounded_int)
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deeply") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{where}: not JSON ({error})") from None
    except ValueError as error:  # _bounded_int
        raise ValueError(f"{where}: {error}") from None
    check_json_limits(obj, where)
    if isinstance(obj, dict) and isinstance(obj.get("message"), str) and len(obj["message"]) > MAX_MESSAGE_CHARS:
        raise ValueError(f"{where}: message has {len(obj['message']):,} characters, more than {MAX_MESSAGE_CHARS:,}")
    environment = obj.get("environment") if isinstance(obj, dict) else None
    if isinstance(environment, dict):
        for name in ENVIRONMENT_TEXT:
            if environment.get(name) is not None and not isinstance(environment[name], str):
                raise ValueError(f"{where}: environment.{name} must be a string, got "
                                 f"{type(environment[name]).__name__}")
    try:
        record = RunRecord.from_dict(obj)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    check_history(record.history, record.status, where)
    return record


def record_payload(record: RunRecord, where: str) -> bytes:
    """The JSON bytes of ``record`` as the store writes them, after the checks :func:`record_from_json` makes on
    reading (so what is written can always be read, exported and imported).

    Raises:
        ValueError: naming ``where`` and the limit the record breaks (size, nesting, message, ...), or
            something that is not JSON-able.
    """
    payload = record.to_json().encode("utf-8")
    record_from_json(payload, where)
    return payload


@dataclass
class ImportReport:
    """What :meth:`ResultsStore.import_report` did with an archive.

    Attributes:
        written: keys written into the store. kept: keys already in the store and kept (no ``overwrite``).
        rejected: ``(entry, reason)`` for each run that failed a check (nothing of it was written), and each
            weights file that did (its run was imported without it). about: the manifest's ``"about"`` notes
            (how the archive was made), or {}. records: key → the record now in the store, for every written and
            kept key (read once, so a caller need not read the store again).
    """

    written: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    about: dict[str, Any] = field(default_factory=dict)
    records: dict[str, Any] = field(default_factory=dict)


@contextmanager
def open_archive(path: str | os.PathLike[str]) -> Iterator[tuple[zipfile.ZipFile, list[str], dict[str, Any]]]:
    """Open a runs archive (or the shipped bundle) for reading: ``(archive, keys, about)`` after the archive-wide
    checks (:func:`read_manifest`). The file is checked with ``stat`` before it is opened (a regular file of at most
    :data:`MAX_ARCHIVE_BYTES`: no device, FIFO or folder); zip errors inside the block become ``ValueError``.

    Raises:
        ValueError: the file is missing, a folder, a device or FIFO, too large, not a zip, or its manifest fails the
            checks.
    """
    path = expand_user(path, "the archive")
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not a runs archive (.zip)")
    with open_bounded(path, MAX_ARCHIVE_BYTES) as handle:
        try:
            with zipfile.ZipFile(handle) as archive:
                keys, about = read_manifest(archive, path)
                yield archive, keys, about
        except (zipfile.BadZipFile, EOFError, NotImplementedError, RuntimeError, zlib.error) as error:
            raise ValueError(f"{path} is not a spanviz runs archive ({error})") from None


def write_archive(path: Path, runs: Iterable[tuple[str, bytes, bytes | None]],
                  about: Mapping[str, Any] | None = None) -> Path:
    """Write ``runs`` — ``(key, checked record bytes, checked weights bytes or None)``, taken one at a time — into a
    zip file: ``manifest.json`` plus ``runs/<key>.json`` per run and ``weights/<key>.pt`` where there are weights.
    Atomic (a temporary file beside ``path``, then renamed), and within the limits an import checks.

    Raises:
        ValueError: ``about`` not JSON-able; more than :data:`MAX_RUNS` runs or :data:`MAX_ARCHIVE_BYTES` in all, or
            a manifest over :data:`MAX_MANIFEST_BYTES`; ``path`` cannot be written.
    """
    try:
        about = json.loads(json.dumps(dict(about), allow_nan=False)) if about else {}
    except (TypeError, ValueError) as error:
        raise ValueError(f"about must be JSON-able notes (a mapping of text, numbers, lists): {error}") from None
    try:
        with atomic_open(path) as temp, zipfile.ZipFile(temp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            written, with_weights, total = [], [], 0
            for key, payload, packed in runs:
                total += len(payload) + len(packed or b"")
                if len(written) + 1 > MAX_RUNS or total > MAX_ARCHIVE_BYTES:
                    raise ValueError(f"{path}: more than {MAX_RUNS:,} runs or {MAX_ARCHIVE_BYTES:,} bytes, "
                                     "more than an import accepts; export fewer runs (keys=)")
                archive.writestr(f"runs/{key}.json", payload)
                written.append(key)
                if packed is not None:
                    archive.writestr(f"weights/{key}.pt", packed)
                    with_weights.append(key)
            manifest = json.dumps({"format": EXPORT_FORMAT, "keys": written,
                                   **({"weights": with_weights} if with_weights else {}),
                                   **({"about": about} if about else {})}, indent=1).encode("utf-8")
            if len(manifest) > MAX_MANIFEST_BYTES:
                raise ValueError(f"{path}: its manifest would have {len(manifest):,} bytes, more than "
                                 f"{MAX_MANIFEST_BYTES:,} (an import refuses it); shorten about= or export fewer runs")
            archive.writestr("manifest.json", manifest)
    except OSError as error:
        raise ValueError(f"cannot write {path} ({error.strerror or error})") from None
    return path


def weights_fit(archive: zipfile.ZipFile, keys: Iterable[str], report: ImportReport) -> bool:
    """Whether the archive's ``weights/<key>.pt`` of the listed runs add up to at most :data:`MAX_ARCHIVE_BYTES`
    uncompressed, as the central directory declares them (a member never gives more than it declares, and each is
    also bounded as it is read, :func:`archived_weights`). When not, none is imported (rejected as ``weights/``) and
    the runs are imported without them."""
    sizes = {i.filename: i.file_size for i in archive.infolist()}
    total = sum(sizes.get(f"weights/{key}.pt", 0) for key in keys)
    if total > MAX_ARCHIVE_BYTES:
        report.rejected.append(("weights/", f"{total:,} bytes uncompressed, more than {MAX_ARCHIVE_BYTES:,}"))
        return False
    return True


def manifest_keys(archive: zipfile.ZipFile, path: Path) -> list[str]:
    """The distinct keys of the archive's manifest, after the archive-wide checks (:func:`read_manifest`)."""
    return read_manifest(archive, path)[0]


def read_manifest(archive: zipfile.ZipFile, path: Path) -> tuple[list[str], dict[str, Any]]:
    """The distinct keys of the archive's manifest, after the archive-wide checks, and its ``"about"`` notes ({}
    when there are none or they are not a JSON object)."""
    try:
        info = archive.getinfo("manifest.json")
    except KeyError:
        raise ValueError(f"{path} is not a spanviz runs archive (no manifest.json)") from None
    if info.file_size > MAX_MANIFEST_BYTES:
        raise ValueError(f"{path}: manifest.json has {info.file_size:,} bytes, more than {MAX_MANIFEST_BYTES:,}")
    if info.flag_bits & 0x1:
        raise ValueError(f"{path}: manifest.json is encrypted (spanviz archives are not)")
    try:
        manifest = json.loads(archive.read(info))
    except (RecursionError, json.JSONDecodeError, UnicodeDecodeError):
        raise ValueError(f"{path}: manifest.json is not valid JSON") from None
    except (zipfile.BadZipFile, zlib.error, RuntimeError, NotImplementedError, EOFError) as error:
        raise ValueError(f"{path}: manifest.json cannot be read ({error})") from None
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
    about = manifest.get("about")
    return keys, about if isinstance(about, dict) else {}

def archived_record(archive: zipfile.ZipFile, key: str) -> RunRecord:
    """One checked run of an archive (ValueError naming what is wrong)."""
    if not KEY_RE.fullmatch(key):
        raise ValueError(f"key {key[:80]!r} is not 64 lowercase hex digits")
    name = f"runs/{key}.json"
    try:
        info = archive.getinfo(name)
    except KeyError:
        raise ValueError("listed in the manifest but missing from the archive") from None
    if info.file_size > MAX_RECORD_BYTES:
        raise ValueError(f"{info.file_size:,} bytes, more than {MAX_RECORD_BYTES:,}")
    if info.flag_bits & 0x1:
        raise ValueError("encrypted (spanviz archives are not)")
    payload = _read_member(archive, info, MAX_RECORD_BYTES, json_counts=True)
    record = record_from_json(payload, "record")
    if config_key(record.config) != key:
        raise ValueError("its config does not hash to its key (tampered or damaged)")
    if record.status not in STORABLE:
        raise ValueError(f"status {record.status!r} is not one of {STORABLE} (a partial run)")
    return record


def archived_weights(archive: zipfile.ZipFile, key: str, model: Mapping[str, Any] | None = None) -> bytes | None:
    """The checked ``weights/<key>.pt`` of an archive's run (:func:`~spanviz.store.weights.unpack_weights`; given
    ``model``, the run's ``config["model"]``, they must be its model's, finite), or None when the archive has none
    for it. Read like a record: at most :data:`MAX_WEIGHTS_BYTES` (declared and as read, a chunk at a time), not
    encrypted.

    Raises:
        ValueError: naming what is wrong (too large, encrypted, unreadable, not this run's weights or model's).
    """
    try:
        info = archive.getinfo(f"weights/{key}.pt")
    except KeyError:
        return None
    if info.file_size > MAX_WEIGHTS_BYTES:
        raise ValueError(f"{info.file_size:,} bytes, more than {MAX_WEIGHTS_BYTES:,}")
    if info.flag_bits & 0x1:
        raise ValueError("encrypted (spanviz archives are not)")
    payload = _read_member(archive, info, MAX_WEIGHTS_BYTES)
    unpack_weights(payload, key, "weights", model)
    return payload


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, max_bytes: int, *,
                 json_counts: bool = False) -> bytes:
    """An archive member's bytes, read a chunk at a time and refused as soon as they break a limit (``max_bytes``;
    with ``json_counts``, :func:`count_structure` too): bounded in memory and time whatever the compression ratio."""
    chunks, size, containers, values = [], 0, 0, 0
    try:
        with archive.open(info) as handle:
            while chunk := handle.read(READ_CHUNK):
                size += len(chunk)
                if size > max_bytes:
                    raise ValueError(f"more than {max_bytes:,} bytes")
                if json_counts:
                    c, v = count_structure(chunk)
                    containers, values = containers + c, values + v
                    _check_counts(containers, values, "record")
                chunks.append(chunk)
    except (zipfile.BadZipFile, zlib.error, RuntimeError, NotImplementedError, EOFError, OSError) as error:
        raise ValueError(f"cannot be read from the archive ({error})") from None
    return b"".join(chunks)
