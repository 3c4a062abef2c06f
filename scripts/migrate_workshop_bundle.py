"""One-off: rewrite the workshop bundle made on 2026-11-23 for today's records and keys, changing no result.

The bundle's runs were made before spanviz recorded its version and commit, and they carry the absolute data
folder of the GPU machine. Until ``scripts/make_workshop_bundle.py`` remakes the bundle on a GPU, this script
rewrites the archive in place:

* ``config["data"]["source"]``: the folder becomes ``"local folder"`` (the text hashes beside it say which text);
  the store key never included it, so no key changes;
* notebook 01's standard run: its SpanProbe setting ``cfg`` = kv8 [1000] is written as ``cfg=None`` — what the
  panel now asks for, so that changing α does not retrain the standard run; on a standard-gradient model the
  probe's default *is* kv8 [1000], so this names the same computation (checked below) and its key is recomputed;
* ``environment``: ``spanviz``, ``git_commit`` and ``source_sha256`` say "not recorded" and ``provenance`` says
  why and what this script changed;
* with ``--replace-from ARCHIVE``: runs of that archive (e.g. the tour's default trained here with
  ``make_workshop_bundle.py --notebooks 00``, with its final weights) replace the runs of the same key;
* with ``--add-from ARCHIVE``: runs of that archive whose key the bundle lacks are added (e.g. notebook 03's default
  after its probe gained the per-row, MX and 1×128 strategies, which changed its key: ``make_workshop_bundle.py
  --notebooks 03 --out ARCHIVE``); each run's own environment says where and with which code it ran.

Histories are copied as they are. Source: spanviz.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import zipfile
from datetime import date
from pathlib import Path

from spanviz.data import LOCAL_SOURCE
from spanviz.spans import SpanConfig
from spanviz.store import BUNDLE, ResultsStore
from spanviz.store.archive import archived_record, archived_weights, manifest_keys
from spanviz.store.weights import unpack_weights
from spanviz.train import RunRecord

NOT_RECORDED = "not recorded"


def migrate(record: RunRecord) -> tuple[RunRecord, list[str]]:
    """The record rewritten (see the module docstring) and what changed, in words."""
    changes = []
    data = record.config.get("data", {})
    if data.get("source") not in (None, LOCAL_SOURCE, "Salesforce/wikitext"):
        data["source"] = LOCAL_SOURCE
        changes.append("removed the data folder's path (data.source is now 'local folder')")
    default_probe = SpanConfig(alphas="1000").to_dict()  # SpanProbe's cfg on a standard-gradient model
    if record.config.get("model", {}).get("spans") is None:
        for probe in record.config.get("probes", []):
            if probe.get("type") == "SpanProbe" and probe["settings"].get("cfg") == default_probe:
                probe["settings"]["cfg"] = None
                changes.append("wrote the SpanProbe setting cfg=kv8 [1000] as cfg=None (on a standard-gradient "
                               "model the same computation)")
    env = record.environment
    if env.get("spanviz") in (None, "unknown"):
        env.update(spanviz=NOT_RECORDED, git_commit=NOT_RECORDED, git_dirty=None, source_sha256=NOT_RECORDED)
        env["provenance"] = (f"run on {str(env.get('started_utc', '?'))[:10]}, before spanviz recorded its version "
                             f"and commit; on {date.today().isoformat()} scripts/migrate_workshop_bundle.py "
                             f"{'; '.join(changes) or 'changed nothing'}; the history is as trained")
    return record, changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=BUNDLE)
    parser.add_argument("--replace-from", type=Path, default=None, help="an archive whose runs replace same-key runs")
    parser.add_argument("--add-from", type=Path, default=None, help="an archive whose runs of new keys are added")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        store = ResultsStore(tmp)
        with zipfile.ZipFile(args.bundle) as archive:
            keys = manifest_keys(archive, args.bundle)
            old_about = json.loads(archive.read("manifest.json")).get("about") or {}
            for old_key in keys:
                record, changes = migrate(archived_record(archive, old_key))
                weights = None  # a run's final weights (the tour's) stay with it
                if f"weights/{old_key}.pt" in archive.namelist():
                    packed = archived_weights(archive, old_key, record.config.get("model"))
                    weights = unpack_weights(packed, old_key, "weights", record.config.get("model"))
                key = store.put(record, weights=weights)
                print(f"{old_key[:12]} → {key[:12]}: {'; '.join(changes) or 'unchanged'}")
        replaced_keys = []
        if args.replace_from is not None:
            replaced = ResultsStore(Path(tmp) / "new")
            report = replaced.import_report(args.replace_from)
            for key in report.written:
                if not store.path(key).is_file():
                    print(f"{key[:12]} of {args.replace_from} replaces nothing: not added")
                    continue
                store.put(replaced.load(key), weights=replaced.weights(key))
                replaced_keys.append(key)
                print(f"{key[:12]}: replaced by the run of {args.replace_from}"
                      f"{' with its weights' if replaced.has_weights(key) else ''}")
        added_keys = []
        if args.add_from is not None:
            added = ResultsStore(Path(tmp) / "added")
            for key in added.import_report(args.add_from).written:
                if store.path(key).is_file():
                    print(f"{key[:12]} of {args.add_from} is in the bundle already: not added")
                    continue
                store.put(added.load(key), weights=added.weights(key))
                added_keys.append(key)
                print(f"{key[:12]}: added from {args.add_from}")
        about = {**old_about}  # what earlier migrations said stays
        about.setdefault("migrated", f"{date.today().isoformat()} by scripts/migrate_workshop_bundle.py (see each "
                                     "run's environment.provenance)")
        if replaced_keys:
            about["replaced"] = {**about.get("replaced", {}), **{
                key: "by a newer run of the same configuration (its own environment says where and with which code "
                     "it ran)" for key in replaced_keys}}
        if added_keys:
            about[f"added {date.today().isoformat()}"] = {
                "what": f"runs of configurations the bundle did not have, from {args.add_from.name} (each run's "
                        "environment says where and with which code it ran)", "keys": added_keys}
        out = store.export(args.bundle, about=about)
        print(f"{out}: {len(store.list())} runs, {out.stat().st_size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
