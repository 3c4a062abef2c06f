"""What ``spanviz runs list`` shows of each stored run, and its filters: one row per run — label, experiment, seed,
steps, device, origin (the shipped workshop bundle, imported from another archive, or trained here) — so an
instructor can tell their own runs from the shipped ones, and a student the instructor's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from spanviz.store.archive import archived_record, open_archive
from spanviz.store.bundle import BUNDLE
from spanviz.store.keys import config_key
from spanviz.train import RunRecord

ORIGINS = ("bundle", "imported", "local")
"""``bundle``: a run of the workshop bundle shipped with spanviz (:data:`~spanviz.store.BUNDLE`); ``imported``: a
run imported from another archive (``spanviz runs import FILE``: its record names the file); ``local``: a run
trained with this store."""


def _fingerprint(record: RunRecord) -> tuple[str, str]:
    """The same run, wherever it is stored: its configuration key and its start time."""
    return config_key(record.config), str(record.environment.get("started_utc"))


def run_origin(record: RunRecord, shipped: set[tuple[str, str]]) -> str:
    """One of :data:`ORIGINS` for a stored run; ``shipped``: :func:`shipped_runs`."""
    if _fingerprint(record) in shipped:
        return "bundle"
    return "imported" if record.environment.get("imported_from") else "local"


def shipped_runs(path: str | os.PathLike[str] | None = None) -> set[tuple[str, str]]:
    """The fingerprints (config key, start time) of the runs of a bundle; None = the shipped one. A missing or
    unusable bundle gives an empty set (then every run is ``local``)."""
    try:
        with open_archive(BUNDLE if path is None else path) as (archive, keys, _):
            found = set()
            for key in keys:
                try:
                    found.add(_fingerprint(archived_record(archive, key)))
                except ValueError:
                    continue
            return found
    except (OSError, ValueError):
        return set()


def _alphas(alphas: Iterable[Any]) -> str:
    text = [f"{a:g}" if isinstance(a, (int, float)) else str(a) for a in alphas]
    return "[" + ("".join(text) if all(len(t) == 1 for t in text) else ",".join(text)) + "]"


def run_label(config: Mapping[str, Any]) -> str:
    """A short name for a run: the sweep's variant when it has one, else what its settings change from a standard
    TinyGPT (span scaling ``spans kv8 [1000]``, ``LS 3/4 local p=16``, ``QK-norm``, ``LR spike ×30``, the probes),
    else ``standard``."""
    if config.get("variant"):
        return str(config["variant"])
    model = config.get("model") if isinstance(config.get("model"), Mapping) else {}
    train = config.get("train") if isinstance(config.get("train"), Mapping) else {}
    parts = []
    spans = model.get("spans")
    if isinstance(spans, Mapping):
        parts.append(f"spans {spans.get('preset', '?')} {_alphas(spans.get('alphas') or [])}")
    if model.get("n_local"):
        parts.append(f"LS {model['n_local']}/{model.get('n_head', '?')} local p={model.get('window')}")
    if model.get("qk_norm"):
        parts.append("QK-norm")
    factor = train.get("lr_spike_factor")
    if isinstance(factor, (int, float)) and factor != 1:
        parts.append(f"LR spike ×{factor:g}")
    label = " + ".join(parts) or "standard"
    probes = [p.get("type", "?").removesuffix("Probe") for p in config.get("probes") or [] if isinstance(p, Mapping)]
    return label + (f" ({', '.join(probes)} probe{'s' if len(probes) > 1 else ''})" if probes else "")


def run_row(key: str, record: RunRecord, shipped: set[tuple[str, str]]) -> dict[str, Any]:
    """The row of one run: key (12 hex digits), origin, experiment, label, seed, model, steps (updates done, and
    ``/planned`` when fewer), device, status, best val loss."""
    config, env = record.config, record.environment
    tags = config.get("tags") if isinstance(config.get("tags"), Mapping) else None
    experiment = "/".join(str(tags[k]) for k in ("experiment", "size") if tags.get(k)) if tags else "notebook"
    model = config.get("model") if isinstance(config.get("model"), Mapping) else {}
    train = config.get("train") if isinstance(config.get("train"), Mapping) else {}
    steps = record.history.get("step") or []  # the 0-based index of each update
    done = steps[-1] + 1 if steps and isinstance(steps[-1], int) else 0
    planned = train.get("steps")
    device = str(env.get("device", "?"))
    if not device.startswith("cpu") and env.get("device_name"):
        device = f"{device} {env['device_name']}"
    return {
        "key": key[:12],
        "origin": run_origin(record, shipped),
        "experiment": experiment,
        "label": run_label(config),
        "seed": config.get("seed", train.get("seed")),
        "model": (f"d{model.get('d_model')} L{model.get('n_layer')} H{model.get('n_head')} "
                  f"T{model.get('context_length')}") if model else None,
        "steps": str(done) if planned in (None, done) else f"{done}/{planned}",
        "device": device,
        "status": record.status,
        "best val loss": record.best_val_loss,
    }


def matches(row: Mapping[str, Any], *, origin: str | None = None, device: str | None = None,
            experiment: str | None = None) -> bool:
    """Whether a :func:`run_row` passes the filters (None: no filter): ``origin`` one of :data:`ORIGINS`;
    ``device`` a piece of the device column, any case (``cpu``, ``cuda``, ``H100``); ``experiment`` the
    experiment (``spans``, ``ls``, ``fp8``, ``notebook``) or experiment/size (``ls/gpu``), any case.

    Raises:
        ValueError: ``origin`` not in :data:`ORIGINS`.
    """
    if origin is not None and origin not in ORIGINS:
        raise ValueError(f"origin={origin!r}; allowed: {', '.join(ORIGINS)}")
    if origin is not None and row["origin"] != origin:
        return False
    if device is not None and device.lower() not in str(row["device"]).lower():
        return False
    if experiment is not None:
        name = str(row["experiment"]).lower()
        if experiment.lower() not in (name, name.split("/")[0]):
            return False
    return True


def sweep_records(store: Any, experiment: str, size: str) -> list[RunRecord]:
    """The runs of one sweep in a results store — ``config["tags"] == {"experiment": experiment, "size": size}`` — with
    one record per (variant, seed), the last the store lists (e.g. the runs of notebook 02's growth lab): the runs of
    :meth:`ResultsStore.sweep <spanviz.store.results.ResultsStore.sweep>`, variant by variant, in seed order."""
    return [record for runs in store.sweep(experiment, size).values() for record in runs]


__all__ = ["ORIGINS", "matches", "run_label", "run_row", "shipped_runs", "sweep_records"]
