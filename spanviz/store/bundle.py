"""The workshop bundle: runs precomputed on a GPU, shipped with spanviz, loaded into the results store in one call."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from spanviz.store.results import Found, ResultsStore
from spanviz.train import RunRecord
from spanviz.validators import printable

BUNDLE = Path(__file__).resolve().parent.parent / "bundles" / "workshop-gpu.zip"
"""The workshop bundle shipped with spanviz: runs precomputed on a GPU (see ``docs/gpu.md``)."""


def describe_runs(records: Iterable[RunRecord]) -> dict[str, Any]:
    """Where a set of runs came from: ``{"runs", "devices", "torch", "spanviz", "commits", "data", "first_utc",
    "last_utc", "experiments"}`` — device names (a GPU's name, "CPU (x86_64)" for a CPU run), torch and spanviz
    versions, git commits and the data they trained on (``"<train split>/<eval split>"``), each sorted and distinct; the earliest and latest start time (UTC,
    ISO 8601); and the number of runs per experiment: ``"<experiment>/<size>"`` from a sweep's ``tags``, or
    "notebook defaults" for untagged runs (what the notebooks' panels store)."""
    records = list(records)
    started = sorted(r.environment["started_utc"] for r in records
                     if isinstance(r.environment.get("started_utc"), str) and r.environment["started_utc"])
    experiments: dict[str, int] = {}
    for r in records:
        tags = r.config.get("tags") if isinstance(r.config.get("tags"), Mapping) else None
        name = f"{tags.get('experiment')}/{tags.get('size')}" if tags else "notebook defaults"
        experiments[name] = experiments.get(name, 0) + 1
    return {
        "runs": len(records),
        "devices": sorted({_device_name(r.environment) for r in records}),
        "torch": sorted({str(r.environment.get("torch")) for r in records}),
        "spanviz": sorted({str(r.environment.get("spanviz")) for r in records}),
        "commits": sorted({str(r.environment.get("git_commit")) for r in records}),
        "data": sorted({_splits(r.config) for r in records}),
        "first_utc": started[0] if started else None,
        "last_utc": started[-1] if started else None,
        "experiments": experiments,
    }


def _splits(config: Mapping[str, Any]) -> str:
    data = config.get("data") if isinstance(config.get("data"), Mapping) else {}
    splits = data.get("splits") if isinstance(data.get("splits"), Mapping) else {}
    return f"{splits.get('train')}/{splits.get('eval')}"


def _device_name(environment: Mapping[str, Any]) -> str:
    """A GPU's name, or "CPU (<architecture>)" for a run on the CPU (whose ``device_name`` is the machine's)."""
    name = str(environment.get("device_name"))
    return f"CPU ({name})" if str(environment.get("device", "")).startswith("cpu") else name


def _device(environment: Mapping[str, Any]) -> str:
    kind = str(environment.get("device", "?")).split(":")[0]
    return str(environment.get("device_name")) if kind == "cuda" else {"cpu": "a CPU", "mps": "an Apple GPU"}.get(
        kind, kind)


def _where(environment: Mapping[str, Any]) -> str:
    """Where a stored run was trained and how it reached this store: ``"on a CPU, from the shipped workshop
    bundle"``, ``"on NVIDIA H100 80GB HBM3, imported from class.zip"``, or ``"on a CPU"`` (trained here)."""
    where = f"on {printable(_device(environment), 80)}"
    source = environment.get("imported_from")
    if isinstance(source, str) and source:
        where += (", from the shipped workshop bundle" if source == BUNDLE.name
                  else f", imported from {printable(source, 80)}")
    return where


def replay_note(found: Mapping[str, Found]) -> str:
    """What a panel replayed, in one line: the runs, their steps, where each was trained and how it came into the
    store (the shipped bundle, an imported archive by name), and — when it differs from the data the student has —
    which data they were trained on. ``found``: label → :meth:`ResultsStore.find`'s answer.

    Where the run's vocabulary is not yours (:attr:`Found.same_vocabulary` false) the note says so, and — once
    :meth:`ResultsStore.run_vocabulary` has decided (``found.vocabulary``) — whether its model is shown with its own
    words, rebuilt here, or not shown.

    Example: ``"replayed from the store: tiny GPT (300 steps, on NVIDIA H100 80GB HBM3, imported from class.zip;
    trained on the validation split, evaluated on test — your data: train, validation; with another vocabulary than
    yours: its model reads its own, rebuilt here from the validation split)"``; runs made in different places are
    named one by one: ``"a, b (3 steps each; a on a CPU; b on NVIDIA H100 80GB HBM3, imported from class.zip)"``.
    """
    if not found:
        return ""
    rows = {label: len(f.record.history.get("step", [])) for label, f in found.items()}
    if len(set(rows.values())) == 1:
        steps = f"{next(iter(rows.values()))} steps{' each' * (len(rows) > 1)}"
    else:
        steps = ", ".join(f"{label} {n} steps" for label, n in rows.items())
    wheres = {label: _where(f.record.environment) for label, f in found.items()}
    if len(set(wheres.values())) == 1:
        parts = [f"{steps}, {next(iter(wheres.values()))}"]
    else:  # which run ran where
        parts = [steps, *(f"{label} {where}" for label, where in wheres.items())]
    for f in found.values():
        if f.exact or not f.differences:
            continue
        if "splits" in f.differences:
            stored, wanted = (splits if isinstance(splits, Mapping) else {} for splits in f.differences["splits"])
            phrase = (f"trained on the {stored.get('train')} split, evaluated on {stored.get('eval')} — your data: "
                      f"{wanted.get('train')}, {wanted.get('eval')}")
        else:
            phrase = "trained on other text of the same splits (its text hashes differ from your data's)"
        if phrase not in parts:
            parts.append(phrase)
        vocabulary = _vocabulary_phrase(f)
        if vocabulary and vocabulary not in parts:
            parts.append(vocabulary)
    return f"replayed from the store: {', '.join(found)} ({'; '.join(parts)})"


def _vocabulary_phrase(found: Found) -> str:
    """The note's words on a replayed run's vocabulary ("" when it is yours)."""
    if found.same_vocabulary:
        return ""
    vocabulary = found.vocabulary
    if vocabulary is None:  # not decided: no model was asked for (none kept)
        return "with another vocabulary than yours (its ids are other words)"
    if vocabulary.state == "rebuilt":
        return (f"with another vocabulary than yours: its model reads its own, rebuilt here from the "
                f"{vocabulary.splits.get('train')} split")
    return "with another vocabulary than yours (its ids are other words), not to be had here: its model is not shown"


def load_bundle(path: str | os.PathLike[str] | None = None, store: ResultsStore | None = None) -> dict[str, Any]:
    """Import a workshop bundle into the results store, so its configurations replay at once; say where it came from.

    One call for a notebook or a script (``spanviz runs import FILE`` does the same from a shell). Runs the store
    has already are kept.

    Args:
        path: a ``spanviz runs export`` archive; None = :data:`BUNDLE`, the one shipped with spanviz.
        store: the store to fill; None = ``ResultsStore()`` (the notebooks' and the command line's default).
    Returns:
        :func:`describe_runs` of the bundle's runs, plus ``"path"``, ``"imported"`` (runs newly written),
        ``"rejected"`` (entries the import refused, with the reason), ``"weights"`` (how many runs carry their final
        weights), ``"about"`` (the archive's notes on how it was made, or {}) and ``"summary"`` (one line for a
        notebook: runs, devices, torch, first date, data, runs per experiment).
    Raises:
        ValueError: the file is missing or not a usable archive (see :meth:`ResultsStore.import_report`).
    """
    path = Path(BUNDLE if path is None else path)
    store = ResultsStore() if store is None else store
    report = store.import_report(path)
    keys = [*report.written, *report.kept]  # the bundle's runs the store now holds, as the import read them
    records = [report.records[key] for key in keys]
    info = describe_runs(records)
    summary = (f"{info['runs']} runs made on {', '.join(info['devices'])} with torch {', '.join(info['torch'])}, "
               f"{(info['first_utc'] or '?')[:10]}, trained/evaluated on {', '.join(info['data'])}: "
               + ", ".join(f"{name} {n}" for name, n in info["experiments"].items()))
    return {"path": str(path), **info, "imported": len(report.written),
            "rejected": [f"{entry}: {why}" for entry, why in report.rejected],
            "weights": sum(store.has_weights(k) for k in keys), "about": report.about, "summary": summary}
