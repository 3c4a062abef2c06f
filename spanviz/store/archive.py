"""Checks for run records that come from elsewhere (a store file, an archive someone sent): JSON size, depth and
schema limits, and the manifest and runs of a ``spanviz runs export`` zip file."""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanviz.store.keys import KEY_RE, STORABLE, config_key
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


def manifest_keys(archive: zipfile.ZipFile, path: Path) -> list[str]:
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

def archived_record(archive: zipfile.ZipFile, key: str) -> RunRecord:
    """One checked run of an archive (ValueError naming what is wrong)."""
    if not KEY_RE.match(key):
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
