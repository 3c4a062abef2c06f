"""The workshop bundle: runs precomputed on a GPU, shipped with spanviz, loaded into the results store in one call."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from spanviz.store.keys import KEY_RE
from spanviz.store.results import ResultsStore
from spanviz.train import RunRecord

BUNDLE = Path(__file__).resolve().parent.parent / "bundles" / "workshop-gpu.zip"
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
    records = [store.load(k) for k in keys if KEY_RE.match(k) and store.path(k).is_file()]
    return {"path": str(path), **describe_runs(records), "imported": len(report.written),
            "rejected": [f"{entry}: {why}" for entry, why in report.rejected]}
