"""ResultsStore: stable and sensitive keys, atomic writes, replay, export / import between roots."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spanviz.store import ResultsStore, config_key, default_root
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
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{key}.json"]  # no temporary leftovers

    other = make_record(seed=3)
    other.history["step"][0] = {1, 2}  # a set: fails inside json.dumps
    with pytest.raises(ValueError):
        store.put(other)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{key}.json"]


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
    for key in keys:
        assert student.load(key).to_dict() == instructor.load(key).to_dict()
    assert student.get(make_record(seed=2).config).config["train"]["seed"] == 2
    assert student.import_(archive) == []  # already there: kept
    assert sorted(student.import_(archive, overwrite=True)) == sorted(keys)

    subset = instructor.export(tmp_path / "one.zip", keys=keys[:1])
    assert ResultsStore(tmp_path / "other").import_(subset) == keys[:1]
    with pytest.raises(ValueError, match="not in the store"):
        instructor.export(tmp_path / "x.zip", keys=["f" * 64])


def test_import_rejects_tampered_or_foreign_archives(tmp_path):
    source = ResultsStore(tmp_path / "a")
    key = source.put(make_record())
    tampered = tmp_path / "tampered.zip"
    with zipfile.ZipFile(tampered, "w") as z:
        z.writestr("manifest.json", json.dumps({"format": "spanviz-runs-1", "keys": [key]}))
        z.writestr(f"runs/{key}.json", make_record(seed=9).to_json())  # config does not hash to key
    target = ResultsStore(tmp_path / "b")
    with pytest.raises(ValueError, match="does not hash"):
        target.import_(tampered)
    assert target.list() == []

    partial = tmp_path / "partial.zip"
    stopped = make_record(status="stopped", seed=4)
    with zipfile.ZipFile(partial, "w") as z:
        k = config_key(stopped.config)
        z.writestr("manifest.json", json.dumps({"format": "spanviz-runs-1", "keys": [key, k]}))
        z.writestr(f"runs/{key}.json", source.load(key).to_json())
        z.writestr(f"runs/{k}.json", stopped.to_json())
    with pytest.raises(ValueError, match="stopped"):
        target.import_(partial)
    assert target.list() == []  # all checked before anything is written

    not_zip = tmp_path / "runs.zip"
    Path(not_zip).write_text("hello")
    with pytest.raises(ValueError, match="not a spanviz runs archive"):
        target.import_(not_zip)
