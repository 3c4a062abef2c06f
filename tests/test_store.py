"""ResultsStore: stable and sensitive keys, atomic writes, replay, export / import between roots."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spanviz.store import ResultsStore
from spanviz.store.keys import config_key, default_root, replay_key
from spanviz.train import RunRecord


def make_config(**train) -> dict:
    return {
        "model": {"vocab_size": 512, "d_model": 64, "n_layer": 2, "spans": {"alphas": [1.0, 0.0, 0.0, 0.0]}},
        "train": {"steps": 10, "lr": 3e-3, "seed": 0, **train},
        "data": {"source": "/home/alice/wikitext-2", "splits": {"train": "validation", "eval": "test"},
                 "text_sha256": {"train": "aa", "eval": "bb"}, "vocab_size": 512},
        "probes": [],
        "variant": "standard",
        "seed": train.get("seed", 0),
        "tags": {},
    }


def make_record(status: str = "finished", **train) -> RunRecord:
    return RunRecord(
        config=make_config(**train),
        environment={"torch": "2.x", "device": "cpu"},
        history={"step": [0, 1, 2], "train_loss": [6.2, 5.9, float("nan") if status == "diverged" else 5.7],
                 "val_loss": [6.1, None, None if status == "diverged" else 5.6]},
        status=status,
        message="done",
    )


# ================================================================================================ keys
def test_key_is_sha256_of_canonical_json():
    config = {"b": (1, 2), "a": {"y": 0.5, "x": None}}
    expected = hashlib.sha256(b'{"a":{"x":null,"y":0.5},"b":[1,2]}').hexdigest()
    assert config_key(config) == expected  # pinned: a format change would orphan every stored run
    assert ResultsStore.key(config) == expected


def test_key_ignores_order_and_json_round_trips_but_not_values():
    config = make_config()
    reordered = json.loads(json.dumps(config, sort_keys=True))
    reordered = dict(reversed(list(reordered.items())))
    assert config_key(reordered) == config_key(config)

    key = config_key(config)
    changes = [
        ("train", "seed", 1), ("train", "lr", 3.0001e-3), ("train", "steps", 11), ("model", "d_model", 128),
        ("data", "splits", {"train": "train", "eval": "validation"}), ("data", "text_sha256", {"train": "ab"}),
    ]
    for part, field, value in changes:
        changed = copy.deepcopy(config)
        changed[part][field] = value
        assert config_key(changed) != key, (part, field)
    for field, value in (("variant", "qk4"), ("tags", {"experiment": "spans"}), ("probes", [{"name": "fp8"}])):
        assert config_key({**config, field: value}) != key, field
    nested = copy.deepcopy(config)
    nested["model"]["spans"]["alphas"][1] = 1.0
    assert config_key(nested) != key


def test_key_ignores_where_the_data_were_read_from():
    """An instructor's folder path must not change the key a student computes (the text hash identifies it)."""
    other_machine = copy.deepcopy(make_config())
    other_machine["data"]["source"] = "Salesforce/wikitext"
    assert config_key(other_machine) == config_key(make_config())


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=5), st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=10), max_size=4))
def test_key_is_stable_under_a_json_round_trip(config):
    assert config_key(json.loads(json.dumps(config))) == config_key(config)


def test_key_rejects_non_json_configs():
    with pytest.raises(ValueError, match="JSON"):
        config_key({"a": object()})
    with pytest.raises(ValueError, match="JSON"):
        config_key({"lr": float("nan")})
    with pytest.raises(ValueError, match="mapping"):
        config_key([1, 2])


# ======================================================================================= put / get
def test_replay_returns_the_same_record(tmp_path):
    record = make_record(status="diverged")
    store = ResultsStore(tmp_path / "runs")
    assert store.get(record.config) is None and record.config not in store and store.list() == []
    key = store.put(record)
    assert key == config_key(record.config) and (tmp_path / "runs" / f"{key}.json").is_file()

    fresh = ResultsStore(tmp_path / "runs")  # another process, same folder
    back = fresh.get(copy.deepcopy(record.config))
    assert back is not None and record.config in fresh and record in fresh
    assert back.status == "diverged" and back.config == record.config and back.message == record.message
    assert back.history["val_loss"] == record.history["val_loss"]
    assert back.history["train_loss"][:2] == record.history["train_loss"][:2]
    assert math.isnan(back.history["train_loss"][2])
    assert fresh.list() == [key] and len(fresh) == 1
    assert fresh.get(make_config(seed=7)) is None


def test_a_record_read_again_is_a_fresh_copy_and_a_changed_file_is_read_again(tmp_path):
    """load keeps what it read and checked (by the file's identity): a second read returns an equal record that
    the first reader's changes do not reach; a file damaged or rewritten after the first read is read again."""
    store = ResultsStore(tmp_path)
    key = store.put(make_record())
    first = store.load(key)
    first.history["step"].append(99)
    first.config["tags"]["mine"] = 1
    second = ResultsStore(tmp_path).load(key)
    assert second.history["step"] == [0, 1, 2] and second.config["tags"] == {}
    assert second == make_record()
    path = store.path(key)
    text = path.read_text()
    path.write_text(text.replace('"done"', '"edited"'))  # same size or not: written again, another identity
    assert store.load(key).message == "edited"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        store.load(key)
    path.unlink()
    with pytest.raises(KeyError):
        store.load(key)


def test_put_refuses_partial_runs(tmp_path):
    store = ResultsStore(tmp_path)
    for status in ("running", "stopped", "interrupted"):
        with pytest.raises(ValueError, match="status"):
            store.put(make_record(status=status))
    assert store.list() == []
    with pytest.raises(ValueError, match="RunRecord"):
        store.put(make_record().to_dict())


def test_failed_serialisation_leaves_no_partial_file_and_keeps_the_old_one(tmp_path):
    store = ResultsStore(tmp_path)
    good = make_record()
    key = store.put(good)
    before = (tmp_path / f"{key}.json").read_bytes()

    bad = make_record()
    bad.history["train_loss"][0] = object()  # not JSON-serialisable, same config → same key
    with pytest.raises(ValueError, match="JSON"):
        store.put(bad)
    assert (tmp_path / f"{key}.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [f"{key}.json"]  # no temporary leftovers
    assert [p.name for p in (tmp_path / "replay").iterdir()] == [f"{replay_key(good.config)}-{key}"]

    other = make_record(seed=3)
    other.history["step"][0] = {1, 2}  # a set: fails inside json.dumps
    with pytest.raises(ValueError):
        store.put(other)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [f"{key}.json"]


def test_a_file_that_does_not_match_its_key_is_reported(tmp_path, caplog):
    store = ResultsStore(tmp_path)
    key = store.put(make_record())
    other = make_record(seed=5)
    (tmp_path / f"{key}.json").write_text(other.to_json())  # hand-edited / renamed file
    with pytest.raises(ValueError, match="does not hash"):
        store.load(key)
    with caplog.at_level("WARNING", logger="spanviz.store"):
        assert store.get(make_record().config) is None  # replay goes on: the run is trained again
    assert key in caplog.text and "does not hash" in caplog.text
    store.put(make_record())  # ... and its result replaces the bad file
    assert store.get(make_record().config).config == make_record().config
    with pytest.raises(KeyError):
        store.load("0" * 64)
    with pytest.raises(ValueError, match="64"):
        store.load("../etc/passwd")


def test_default_root_follows_spanviz_home(monkeypatch, tmp_path):
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path / "home"))
    assert ResultsStore().root == tmp_path / "home" / "runs" == default_root()
    monkeypatch.delenv("SPANVIZ_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert ResultsStore().root == tmp_path / "user" / ".cache" / "spanviz" / "runs"


# ==================================================================================== export / import
def test_export_import_round_trip_into_a_fresh_root(tmp_path):
    instructor = ResultsStore(tmp_path / "gpu")
    keys = [instructor.put(make_record(seed=s)) for s in range(3)]
    archive = instructor.export(tmp_path / "share" / "runs.zip")
    assert zipfile.is_zipfile(archive)

    student = ResultsStore(tmp_path / "laptop")
    assert sorted(student.import_(archive)) == sorted(keys)
    assert student.list() == instructor.list()
    for key in keys:  # the same run, plus where it came from (the archive's name, when it was imported)
        theirs, mine = instructor.load(key).to_dict(), student.load(key).to_dict()
        marks = {k: mine["environment"].pop(k) for k in ("imported_from", "imported_utc")}
        assert mine == theirs and marks["imported_from"] == "runs.zip"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", marks["imported_utc"])
    assert student.get(make_record(seed=2).config).config["train"]["seed"] == 2
    assert student.import_(archive) == []  # already there: kept
    assert sorted(student.import_(archive, overwrite=True)) == sorted(keys)

    subset = instructor.export(tmp_path / "one.zip", keys=keys[:1])
    assert ResultsStore(tmp_path / "other").import_(subset) == keys[:1]
    with pytest.raises(ValueError, match="not in the store"):
        instructor.export(tmp_path / "x.zip", keys=["f" * 64])


def test_import_rejects_tampered_or_partial_runs_and_imports_the_rest(tmp_path):
    source = ResultsStore(tmp_path / "a")
    key = source.put(make_record())
    stopped = make_record(status="stopped", seed=4)
    k_stopped = config_key(stopped.config)
    tampered = make_record(seed=9)  # its config does not hash to the key it is filed under
    k_tampered = source.put(make_record(seed=8))
    archive = tmp_path / "mixed.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("manifest.json", json.dumps({"format": "spanviz-runs-1", "keys": [key, k_stopped, k_tampered]}))
        z.writestr(f"runs/{key}.json", source.load(key).to_json())
        z.writestr(f"runs/{k_stopped}.json", stopped.to_json())
        z.writestr(f"runs/{k_tampered}.json", tampered.to_json())
    target = ResultsStore(tmp_path / "b")
    report = target.import_report(archive)
    assert report.written == [key] and target.list() == [key]
    reasons = dict(report.rejected)
    assert "stopped" in reasons[f"runs/{k_stopped}.json"] and "does not hash" in reasons[f"runs/{k_tampered}.json"]

    not_zip = tmp_path / "runs.zip"
    Path(not_zip).write_text("hello")
    with pytest.raises(ValueError, match="not a spanviz runs archive"):
        target.import_(not_zip)


def _archive(path: Path, manifest, runs: dict[str, bytes | str] | None = None, raw_manifest: bytes | None = None):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("manifest.json", raw_manifest if raw_manifest is not None else json.dumps(manifest))
        for name, payload in (runs or {}).items():
            z.writestr(name, payload)
    return path


def _record_with(**changes) -> tuple[str, str]:
    """(key, JSON text) of a record whose dict has ``changes`` (the key is the original config's)."""
    record = make_record()
    d = json.loads(record.to_json())
    d.update(changes)
    return config_key(record.config), json.dumps(d)


MALICIOUS_RUNS = {
    "keys-not-a-list": None,  # manifest-level, below
    "config-a-list": {"config": [1]},
    "history-a-string": {"history": "abc"},
    "history-column-a-number": {"history": {"step": 5}},
    "status-unknown": {"status": "winning"},
    "status-a-number": {"status": 7},
    "message-a-dict": {"message": {"a": 1}},
    "environment-a-list": {"environment": [1, 2]},
    "unequal-history": {"history": {"step": [0, 1], "train_loss": [1.0]}},
    "huge-message": {"message": "x" * 45_000_000},
}


@pytest.mark.parametrize("case", [c for c in MALICIOUS_RUNS if MALICIOUS_RUNS[c] is not None])
def test_import_rejects_each_bad_run_without_a_traceback(case, tmp_path):
    good = make_record(seed=3)
    good_key = config_key(good.config)
    key, text = _record_with(**MALICIOUS_RUNS[case])
    archive = _archive(tmp_path / "a.zip", {"format": "spanviz-runs-1", "keys": [key, good_key]},
                       {f"runs/{key}.json": text, f"runs/{good_key}.json": good.to_json()})
    assert archive.stat().st_size < 1_000_000  # the 45 MB message compresses to a small file
    store = ResultsStore(tmp_path / "store")
    report = store.import_report(archive)
    assert report.written == [good_key]
    [(entry, why)] = report.rejected
    assert entry == f"runs/{key}.json" and why


def test_import_survives_deep_nesting_repeated_keys_and_bombs(tmp_path):
    store = ResultsStore(tmp_path / "store")
    key = config_key(make_record().config)
    deep = '{"config": ' + "[" * 100_000 + "]" * 100_000 + ', "history": {}, "status": "finished"}'
    value: object = 1
    for _ in range(20):  # 20 levels: parses, but deeper than any real record
        value = [value]
    nested = {"config": {"a": value}, "history": {}, "status": "finished"}
    for name, payload in (("deep", deep), ("nested", json.dumps(nested))):
        report = store.import_report(_archive(tmp_path / f"{name}.zip", {"format": "spanviz-runs-1", "keys": [key]},
                                              {f"runs/{key}.json": payload}))
        assert report.written == [] and "nested" in report.rejected[0][1], name
    started = __import__("time").perf_counter()
    many = _archive(tmp_path / "many.zip", {"format": "spanviz-runs-1", "keys": [key] * 200_000})
    with pytest.raises(ValueError, match="more than"):
        store.import_report(many)
    assert __import__("time").perf_counter() - started < 30  # was 210 s: refused by count, not by work
    for manifest, raw, match in (({"format": "spanviz-runs-1", "keys": 5}, None, "list of run keys"),
                                 ({"format": "spanviz-runs-1", "keys": [5]}, None, "list of run keys"),
                                 ({"format": "other", "keys": []}, None, "format"),
                                 (None, b"[" * 100_000, "not valid JSON"),
                                 (None, b"\xff\xfe", "not valid JSON")):
        with pytest.raises(ValueError, match=match):
            store.import_report(_archive(tmp_path / "m.zip", manifest, raw_manifest=raw))
    traversal = _archive(tmp_path / "t.zip", {"format": "spanviz-runs-1", "keys": ["../../etc/passwd"]},
                         {"runs/../../etc/passwd.json": "{}"})
    report = store.import_report(traversal)
    assert report.written == [] and "64 lowercase hex" in report.rejected[0][1]
    missing = _archive(tmp_path / "x.zip", {"format": "spanviz-runs-1", "keys": [key]})
    assert "missing" in store.import_report(missing).rejected[0][1]
    for bad in (tmp_path / "nope.zip", tmp_path):
        with pytest.raises(ValueError, match="no such file|is a folder"):
            store.import_report(bad)
    assert store.list() == []


def test_a_bad_entry_is_skipped_by_list_export_and_replay(tmp_path, caplog):
    store = ResultsStore(tmp_path / "store")
    good = store.put(make_record())
    bad = store.put(make_record(seed=1))
    broken = store.put(make_record(seed=2))
    store.path(bad).write_text('{"config": [1], "history": "abc", "status": "finished"}')
    store.path(broken).write_bytes(b"\x00garbage")
    records, damaged = store.scan()
    assert list(records) == [good] and sorted(p.stem for p, _ in damaged) == sorted([bad, broken])
    with caplog.at_level("WARNING", logger="spanviz.store"):
        assert [k for k, _ in store.records()] == [good]
        assert store.get(make_record(seed=1).config) is None  # replay goes on: retrain
    assert bad in caplog.text and broken in caplog.text
    archive = store.export(tmp_path / "out.zip")
    with zipfile.ZipFile(archive) as z:
        assert sorted(z.namelist()) == ["manifest.json", f"runs/{good}.json"]  # never a corrupt entry
    assert ResultsStore(tmp_path / "fresh").import_(archive) == [good]
    with pytest.raises(ValueError, match="is a folder"):
        store.export(tmp_path)


def test_checkpoint_cadence_does_not_change_the_key():
    base = make_config()
    assert config_key({**base, "train": {**base["train"], "checkpoint_interval": None}}) == \
        config_key({**base, "train": {**base["train"], "checkpoint_interval": 0}}) == \
        config_key({**base, "train": {**base["train"], "checkpoint_interval": 7}})


# ====================================================================================== concurrent writers
_WRITER = r"""
import sys
from spanviz.store import ResultsStore
from spanviz.train import RunRecord

root, writer, rounds, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
store = ResultsStore(root)
for r in range(rounds):
    for k in range(keys):
        n = 20_000  # ~0.4 MB per record: a write takes long enough for writers and readers to overlap
        config = {"model": {"d_model": 64}, "train": {"seed": k}, "data": {}, "probes": [], "variant": "v",
                  "seed": k, "tags": {}}
        store.put(RunRecord(config=config, environment={"writer": writer, "round": r},
                            history={"step": list(range(n)), "train_loss": [float(writer)] * n}, status="finished"))
print("done", flush=True)
"""


def test_concurrent_writers_in_several_processes_never_leave_a_partial_record(tmp_path):
    """Four processes store the same keys over and over while this one reads them: every read is a whole record
    (its config hashes to its key, its curves are complete, all from one writer), and a writer killed mid-write
    leaves only a hidden temporary file that listings ignore."""
    import os
    import signal
    import subprocess
    import sys

    root = tmp_path / "runs"
    keys, rounds = 3, 12
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(root), str(w), str(rounds), str(keys)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(4)]
    store, reads = ResultsStore(root), 0
    victim = writers[-1]
    while any(w.poll() is None for w in writers[:-1]):
        for key in store.list():
            record = store.load(key)  # ValueError on a partial or mixed file
            history = record.history
            assert len(history["step"]) == len(history["train_loss"]) == 20_000
            assert set(history["train_loss"]) == {float(record.environment["writer"])}
            reads += 1
        if reads > 20 and victim.poll() is None:
            os.kill(victim.pid, signal.SIGKILL)  # mid-way through its writes
    for w in writers[:-1]:
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0 and out.strip() == "done", err
    victim.wait(timeout=60)
    assert reads > 20, "the reader never overlapped the writers"
    good, bad = store.scan()
    assert len(good) == keys and bad == []
    assert all(len(r.history["step"]) == 20_000 for r in good.values())
    leftovers = [p.name for p in root.iterdir() if p.is_file() and not p.name.endswith(".json")]
    assert all(name.startswith(".") and name.endswith(".tmp") for name in leftovers), leftovers
