"""Replays across data variants (the replay key) and a run's final weights in the store and in archives.

The workshop bundle is trained on the offline copy's validation split; Binder and online installs have the train
split. The notebooks' panels must replay it there and say so; sweeps must not mix the two. A replay in the tour
must bring the trained model, not only its curve.
"""

from __future__ import annotations

import copy
import io
import zipfile
from types import SimpleNamespace

import pytest
import torch

from spanviz.data.tokenizers import ByteTokenizer, translate_ids
from spanviz.data.tokens import prepare_tokens
from spanviz.model import GPTConfig, TinyGPT
from spanviz.store import ResultsStore
from spanviz.store.bundle import replay_note
from spanviz.store.keys import config_key, data_differences, replay_key
from spanviz.store.weights import MAX_WEIGHTS_BYTES, pack_weights, unpack_weights
from spanviz.train import RunRecord

OFFLINE = {"train": "validation", "eval": "test"}
ONLINE = {"train": "train", "eval": "validation"}


def make_config(splits=OFFLINE, text=("aa", "bb"), d_model=16, seed=0) -> dict:
    return {  # the model of _tiny_model() at d_model 16 (stored weights must fit their run's model)
        "model": {"vocab_size": 64, "context_length": 8, "d_model": d_model, "n_layer": 1, "n_head": 2, "spans": None},
        "train": {"steps": 3, "lr": 3e-3, "seed": seed, "device": "auto", "checkpoint_interval": None},
        "data": {"dataset": "wikitext-2", "source": "local folder", "config": "wikitext-2-v1", "splits": dict(splits),
                 "tokenizer": "word", "max_vocab": 64, "vocab_size": 64,
                 "n_tokens": {"train": 100, "eval": 50}, "text_sha256": {"train": text[0], "eval": text[1]},
                 "cache_key": "k" + text[0]},
        "probes": [],
    }


def make_record(config: dict, device="cuda:0", name="NVIDIA H100 80GB HBM3", started="2026-11-23T06:14:35+00:00"):
    return RunRecord(config=copy.deepcopy(config), status="finished",
                     environment={"device": device, "device_name": name, "started_utc": started},
                     history={"step": [1, 2, 3], "train_loss": [6.0, 5.5, 5.0], "val_loss": [None, None, 5.1]})


# ================================================================================================ keys
def test_replay_key_leaves_out_the_data_variant_and_nothing_else():
    offline, online = make_config(OFFLINE, ("aa", "bb")), make_config(ONLINE, ("cc", "aa"))
    assert config_key(offline) != config_key(online)  # the exact run: the data belong to it
    assert replay_key(offline) == replay_key(online)
    assert data_differences(offline, online) == {
        "splits": (OFFLINE, ONLINE), "text_sha256": ({"train": "aa", "eval": "bb"}, {"train": "cc", "eval": "aa"})}
    assert data_differences(offline, copy.deepcopy(offline)) == {}
    for path, value in ((("model", "d_model"), 128), (("train", "seed"), 1), (("data", "vocab_size"), 511),
                        (("data", "tokenizer"), "byte"), (("data", "config"), "wikitext-2-raw-v1")):
        changed = copy.deepcopy(offline)
        changed[path[0]][path[1]] = value
        assert replay_key(changed) != replay_key(offline), path
    changed = copy.deepcopy(offline)
    changed["probes"] = [{"type": "LogitProbe", "name": "logits", "every": 10, "settings": {}}]
    assert replay_key(changed) != replay_key(offline)  # a probe's history is part of what replays


# ================================================================================================ find
def test_find_answers_the_exact_run_else_one_of_other_data_and_says_what_differs(tmp_path):
    store = ResultsStore(tmp_path)
    bundle_run = make_record(make_config(OFFLINE, ("aa", "bb")))
    store.put(bundle_run)
    student = make_config(ONLINE, ("cc", "aa"))
    assert store.get(student) is None  # sweeps (exact keys) never take another data variant
    found = store.find(student)
    assert found is not None and not found.exact and found.key == config_key(bundle_run.config)
    assert found.differences["splits"] == (OFFLINE, ONLINE)
    assert found.record.history == bundle_run.history
    note = replay_note({"tiny GPT": found})
    assert note == ("replayed from the store: tiny GPT (3 steps, on NVIDIA H100 80GB HBM3; trained on the "
                    "validation split, evaluated on test — your data: train, validation; with another vocabulary "
                    "than yours (its ids are other words))")  # no model asked for: its vocabulary is not decided

    exact = store.find(bundle_run.config)
    assert exact.exact and exact.differences == {}
    assert replay_note({"a": exact, "b": exact}) == ("replayed from the store: a, b (3 steps each, on NVIDIA H100 "
                                                      "80GB HBM3)")
    assert store.find(make_config(ONLINE, d_model=128)) is None  # another model: nothing to replay

    # The student's own run of the same configuration wins over the bundle's, and is exact.
    own = make_record(student, device="cpu", name="x86_64", started="2026-11-30T10:00:00+00:00")
    store.put(own)
    mine = store.find(student)
    assert mine.exact and mine.key == config_key(student)
    assert "on a CPU" in replay_note({"tiny GPT": mine}) and "your data" not in replay_note({"tiny GPT": mine})


def test_the_note_says_which_run_ran_where_and_which_archive_it_came_from(tmp_path):
    """A student's status line after `runs import class.zip`: each replayed run's device and the archive it came
    from, named run by run when they differ; the shipped bundle is named as such; a run trained here names only
    its device. The import leaves the run's key and its fingerprint (config, start time) as they were."""
    from spanviz.store import BUNDLE
    from spanviz.store.listing import run_origin, shipped_runs

    teacher = ResultsStore(tmp_path / "teacher")
    on_gpu = make_record(make_config(OFFLINE, ("aa", "bb")))
    on_cpu = make_record(make_config(OFFLINE, ("aa", "bb"), d_model=128), device="cpu", name="x86_64")
    keys = [teacher.put(on_gpu), teacher.put(on_cpu)]
    archive = teacher.export(tmp_path / "class.zip")
    student = ResultsStore(tmp_path / "student")
    assert sorted(student.import_(archive)) == sorted(keys)
    a, b = student.find(on_gpu.config), student.find(on_cpu.config)
    assert a.key == keys[0] and a.record.environment["started_utc"] == on_gpu.environment["started_utc"]
    assert a.record.environment["imported_from"] == "class.zip"
    assert replay_note({"a": a}) == ("replayed from the store: a (3 steps, on NVIDIA H100 80GB HBM3, imported from "
                                     "class.zip)")
    assert replay_note({"a": a, "b": b}) == (
        "replayed from the store: a, b (3 steps each; a on NVIDIA H100 80GB HBM3, imported from class.zip; "
        "b on a CPU, imported from class.zip)")
    assert [run_origin(f.record, shipped_runs()) for f in (a, b)] == ["imported", "imported"]
    assert run_origin(teacher.find(on_gpu.config).record, shipped_runs()) == "local"
    assert replay_note({"a": teacher.find(on_cpu.config)}) == "replayed from the store: a (3 steps, on a CPU)"

    shipped = ResultsStore(tmp_path / "shipped")
    key = shipped.import_(BUNDLE)[0]
    record = shipped.load(key)
    assert run_origin(record, shipped_runs()) == "bundle"
    assert "from the shipped workshop bundle)" in replay_note({"x": shipped.find(record.config)})


def test_find_prefers_the_same_splits_and_indexes_runs_stored_before_the_index(tmp_path):
    store = ResultsStore(tmp_path)
    same_splits = make_record(make_config(ONLINE, ("dd", "ee")), started="2026-01-01T00:00:00+00:00")
    newer_other = make_record(make_config(OFFLINE, ("aa", "bb")), started="2026-12-01T00:00:00+00:00")
    for record in (same_splits, newer_other):
        record.save(store.path(config_key(record.config)))  # as an older spanviz wrote them: no replay index
    assert not (tmp_path / "replay").exists()
    found = store.find(make_config(ONLINE, ("cc", "aa")))
    assert found.key == config_key(same_splits.config) and set(found.differences) == {"text_sha256"}
    assert "other text of the same splits" in replay_note({"x": found})
    assert len(list((tmp_path / "replay").iterdir())) == 2  # indexed once, on the first look-up

    # A stray index entry (naming a run of another configuration) is not believed.
    stray = make_record(make_config(OFFLINE, d_model=32))
    key = store.put(stray)
    (tmp_path / "replay" / f"{replay_key(make_config(d_model=24))}-{key}").touch()
    assert store.find(make_config(ONLINE, d_model=24)) is None


def test_weights_replay_only_with_the_same_vocabulary_curves_with_a_note(tmp_path, monkeypatch, wikitext_dir):
    """Issue 39, finding 1: the word vocabulary is fitted on the train role's text; the replay key keeps only its size.
    A run of other train text whose text cannot be had here replays its curve, says so, and never gives its weights;
    one of the same train text gives them with your vocabulary. (Rebuilt vocabularies: the next test.)"""
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path / "home"))  # the token cache of the split read to check
    store = ResultsStore(tmp_path)
    bundle_run = make_record(make_config(OFFLINE, ("aa", "bb")))
    key = store.put(bundle_run, weights=_tiny_model().state_dict())
    other_train = store.find(make_config(ONLINE, ("cc", "aa")))  # Binder: train on the train split
    assert other_train.key == key and not other_train.exact and not other_train.same_vocabulary
    assert other_train.record.history == bundle_run.history  # the curve replays
    assert other_train.vocabulary is None  # decided once, when a model is asked for
    # Its validation split here is other text than "aa" (sha256): its vocabulary cannot be rebuilt.
    assert store.weights(key) is not None and store.replay_weights(other_train, data_dir=wikitext_dir) is None
    assert other_train.vocabulary.state == "unavailable" and not other_train.vocabulary.shown
    assert "other text than the 'validation' split" in other_train.vocabulary.reason
    note = replay_note({"tiny GPT": other_train})
    assert "another vocabulary" in note and note.endswith("not to be had here: its model is not shown)")
    mine = object()  # stands for the student's tokenizer: handed back as it is
    same_train = store.find(make_config({"train": "validation", "eval": "train"}, ("aa", "zz")))  # other eval only
    assert same_train.key == key and same_train.same_vocabulary
    replayed = store.replay_weights(same_train, data=SimpleNamespace(tokenizer=mine))
    assert replayed.vocabulary.state == "yours" and replayed.vocabulary.tokenizer is mine
    assert set(replayed.state) == set(_tiny_model().state_dict())
    assert "another vocabulary" not in replay_note({"tiny GPT": same_train})
    exact = store.find(bundle_run.config)
    assert exact.exact and exact.same_vocabulary and store.replay_weights(exact).vocabulary.state == "yours"
    # The byte tokenizer's ids are the same bytes whatever the text.
    byte_cfg = make_config(OFFLINE, ("aa", "bb"), d_model=32)
    byte_cfg["data"]["tokenizer"] = "byte"
    store.put(make_record(byte_cfg))
    wanted = copy.deepcopy(byte_cfg)
    wanted["data"].update(splits=ONLINE, text_sha256={"train": "cc", "eval": "aa"})
    assert store.find(wanted).same_vocabulary
    # Among runs of other data, one with the student's vocabulary wins over a newer one without.
    newer = make_record(make_config(ONLINE, ("dd", "ee")), started="2027-01-01T00:00:00+00:00")
    store.put(newer)
    assert store.find(make_config({"train": "validation", "eval": "train"}, ("aa", "yy"))).key == key


def test_replayed_weights_come_with_the_vocabulary_they_need(tmp_path, monkeypatch, wikitext_dir):
    """The one decision (ResultsStore.run_vocabulary), on real text: a run trained on another split than yours gives
    its weights with its own vocabulary, fitted again here on its split and checked by its text's sha256, so the same
    words reach it as other ids than yours; the note says its model reads its own words."""
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path / "home"))
    bundle_data = prepare_tokens(wikitext_dir, splits=OFFLINE, max_vocab=64)  # the model of _tiny_model(): V = 64
    mine = prepare_tokens(wikitext_dir, splits={"train": "test", "eval": "validation"}, max_vocab=64)
    assert bundle_data.tokenizer.itos != mine.tokenizer.itos
    config = {**make_config(), "data": bundle_data.describe()}
    store = ResultsStore(tmp_path / "runs")
    key = store.put(make_record(config), weights=_tiny_model().state_dict())
    found = store.find({**config, "data": mine.describe()})
    assert found.key == key and not found.same_vocabulary
    replayed = store.replay_weights(found, mine, data_dir=wikitext_dir)
    assert replayed.vocabulary.state == "rebuilt" and replayed.vocabulary.shown
    theirs = replayed.vocabulary.tokenizer
    assert theirs.itos == bundle_data.tokenizer.itos and store.run_vocabulary(found, mine) is replayed.vocabulary
    assert replay_note({"tiny GPT": found}).endswith(
        "with another vocabulary than yours: its model reads its own, rebuilt here from the validation split)")
    # The tour's window, token by token in the run's vocabulary: the same words (<unk> where it lacks one).
    ids = mine.eval_ids[:60]
    read = translate_ids(ids, mine.tokenizer, theirs)
    assert theirs.token_strings(read) == [w if w in theirs.stoi else "<unk>" for w in mine.tokenizer.token_strings(ids)]
    assert read.tolist() != ids.tolist()  # your ids would have been other words to it
    assert translate_ids(ids, mine.tokenizer, mine.tokenizer).tolist() == ids.tolist()
    with pytest.raises(ValueError, match="^target.kind='byte' must be source's 'word'"):
        translate_ids(ids, mine.tokenizer, ByteTokenizer())


# ================================================================================================ weights
def _tiny_model(seed=0) -> TinyGPT:
    torch.manual_seed(seed)
    return TinyGPT(GPTConfig(vocab_size=64, context_length=8, n_layer=1, n_head=2, d_model=16))


def test_weights_round_trip_in_float16_with_tied_weights_stored_once(tmp_path):
    model = _tiny_model()
    state = model.state_dict()
    payload = pack_weights(state, "k" * 64)
    back = unpack_weights(payload, "k" * 64, "here")
    assert set(back) == set(state)
    for name, tensor in state.items():
        assert back[name].dtype == tensor.dtype and torch.allclose(back[name], tensor, rtol=1e-3, atol=1e-4), name
    assert back["lm_head.weight"].data_ptr() == back["wte.weight"].data_ptr()
    untied = pack_weights({k: v.clone() for k, v in state.items()}, "k" * 64)
    assert len(untied) - len(payload) >= state["wte.weight"].numel() * 2  # the tied embedding stored once (fp16)
    loaded = _tiny_model(seed=1)
    loaded.load_state_dict(back)
    x = torch.randint(0, 64, (1, 8))
    assert torch.allclose(loaded(x)[0], model(x)[0], atol=1e-2)

    for bad, why in ((b"garbage", "not a weights file"), (pack_weights(state, "j" * 64), "another run"),
                     (b"x" * (MAX_WEIGHTS_BYTES + 1), "more than")):
        with pytest.raises(ValueError, match=why):
            unpack_weights(bad, "k" * 64, "here")
    buffer = io.BytesIO()
    torch.save({"format": "spanviz-weights-1", "key": "k" * 64, "tensors": {"a": [1, 2]}, "tied": {}}, buffer)
    with pytest.raises(ValueError, match="malformed"):
        unpack_weights(buffer.getvalue(), "k" * 64, "here")


@pytest.mark.parametrize(("extra", "dynamo"), [({}, False), ({"n_local": 1, "window": 4, "bias": False}, False),
                                               ({"qk_rank": 2, "qk_norm": True}, True)])
def test_the_weights_check_builds_its_model_on_meta_without_importing_dynamo(extra, dynamo):
    """check_fits_model compares names and shapes with an uninitialised model on the meta device: the same names and
    shapes as a real one, a wrong shape still refused, and no ``torch._dynamo`` import for the architectures whose
    only arithmetic at construction is normal_ (the meta device's normal_ imports it: ~1.1 s of the first bundle
    import, before a notebook's first figure). A rank-limited query divides at construction: it still imports it."""
    import subprocess
    import sys

    code = f"""
import sys, torch
from spanviz.model import GPTConfig, TinyGPT
from spanviz.store.weights import check_fits_model
cfg = GPTConfig(vocab_size=64, context_length=16, n_layer=2, n_head=2, d_model=16, **{extra!r})
state = TinyGPT(cfg).state_dict()
check_fits_model(state, cfg.to_dict(), "here")
print('torch._dynamo' in sys.modules)
state["wte.weight"] = torch.zeros(63, 16)
try:
    check_fits_model(state, cfg.to_dict(), "here")
except ValueError as error:
    print("refused:", error)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0] == str(dynamo)
    assert lines[1].startswith("refused: here: 'wte.weight' has shape (63, 16), its run's model (64, 16)"), lines


def test_store_keeps_weights_exports_and_imports_them_and_rejects_bad_ones(tmp_path):
    source = ResultsStore(tmp_path / "gpu")
    model = _tiny_model()
    record = make_record(make_config())
    key = source.put(record, weights=model.state_dict())
    assert source.has_weights(key)
    assert torch.allclose(source.weights(key)["wte.weight"], model.state_dict()["wte.weight"], atol=1e-3)
    other = source.put(make_record(make_config(seed=1)))
    assert not source.has_weights(other) and source.weights(other) is None

    archive = source.export(tmp_path / "bundle.zip")
    with zipfile.ZipFile(archive) as z:
        assert f"weights/{key}.pt" in z.namelist() and f"weights/{other}.pt" not in z.namelist()
    student = ResultsStore(tmp_path / "student")
    report = student.import_report(archive)
    assert sorted(report.written) == sorted([key, other]) and report.rejected == []
    assert student.has_weights(key) and not student.has_weights(other)

    # Weights that are not the run's are rejected; the run itself is imported.
    forged = tmp_path / "forged.zip"
    with zipfile.ZipFile(archive) as z, zipfile.ZipFile(forged, "w") as out:
        for name in z.namelist():
            payload = z.read(name)
            if name.startswith("weights/"):
                payload = pack_weights(model.state_dict(), other)  # another run's key
            out.writestr(name, payload)
    third = ResultsStore(tmp_path / "third")
    report = third.import_report(forged)
    assert sorted(report.written) == sorted([key, other])
    assert [entry for entry, _ in report.rejected] == [f"weights/{key}.pt"] and not third.has_weights(key)

    # Storing the same configuration again without weights drops the old ones (they were another run's).
    source.put(record)
    assert not source.has_weights(key)
    (source.weights_path(other)).parent.mkdir(exist_ok=True)
    source.weights_path(other).write_bytes(b"damaged")
    assert source.weights(other) is None  # logged, not raised
    with pytest.raises(ValueError, match="state dict"):
        source.put(record, weights={"a": 1})


# ====================================================================== the store's limits on these paths (issue 27)
def _flag_encrypted(path, name: str) -> None:
    """Set the "encrypted" bit of member ``name`` in a zip's local header and central directory (as a zip tool)."""
    import struct

    data = bytearray(path.read_bytes())
    encoded = name.encode()
    for signature, offset, name_at in ((b"PK\x03\x04", 6, 30), (b"PK\x01\x02", 8, 46)):
        at = 0
        while (at := data.find(signature, at)) >= 0:
            if data[at + name_at:at + name_at + len(encoded)] == encoded:
                struct.pack_into("<H", data, at + offset, struct.unpack_from("<H", data, at + offset)[0] | 0x1)
            at += 4
    path.write_bytes(bytes(data))


def test_weights_in_an_archive_are_read_within_limits_one_run_at_a_time(tmp_path, monkeypatch):
    from spanviz.store import archive as archive_lib
    from spanviz.store import results as results_lib

    source = ResultsStore(tmp_path / "gpu")
    state = _tiny_model().state_dict()
    keys = sorted(source.put(make_record(make_config(seed=seed)), weights=state) for seed in range(3))
    bundle = source.export(tmp_path / "bundle.zip")

    # Each run is written (record and weights) before the next one is read: memory holds one run at a time.
    student = ResultsStore(tmp_path / "student")
    read = archive_lib.archived_record
    on_disk_when_read = []

    def watched(archive, key):
        on_disk_when_read.append(sorted(k for k in keys if student.has_weights(k) and student.path(k).is_file()))
        return read(archive, key)

    monkeypatch.setattr(results_lib, "archived_record", watched)
    report = student.import_report(bundle)
    assert report.written == keys and report.rejected == []
    assert on_disk_when_read == [keys[:0], keys[:1], keys[:2]]
    monkeypatch.undo()

    # An encrypted weights member is refused; its run is imported without weights.
    encrypted = tmp_path / "encrypted.zip"
    encrypted.write_bytes(bundle.read_bytes())
    _flag_encrypted(encrypted, f"weights/{keys[1]}.pt")
    third = ResultsStore(tmp_path / "third")
    report = third.import_report(encrypted)
    assert report.written == keys
    assert report.rejected == [(f"weights/{keys[1]}.pt", "encrypted (spanviz archives are not)")]
    assert [third.has_weights(k) for k in keys] == [True, False, True]

    # Weights over the limit are refused before a byte of them is read (and by the bytes read, whatever the
    # header says); their run is imported without them.
    size = len(source.weights_path(keys[0]).read_bytes())
    monkeypatch.setattr(archive_lib, "MAX_WEIGHTS_BYTES", size - 1)
    fourth = ResultsStore(tmp_path / "fourth")
    report = fourth.import_report(bundle)
    assert report.written == keys and [e for e, _ in report.rejected] == [f"weights/{k}.pt" for k in keys]
    assert all(f"more than {size - 1:,}" in why for _, why in report.rejected)
    assert not any(fourth.has_weights(k) for k in keys)
    with zipfile.ZipFile(bundle) as z, pytest.raises(ValueError, match="more than"):
        archive_lib._read_member(z, z.getinfo(f"weights/{keys[0]}.pt"), size - 1)


def test_find_and_the_replay_index_read_records_within_the_stores_limits(tmp_path):
    import os

    store = ResultsStore(tmp_path)
    older = store.put(make_record(make_config(OFFLINE, text=("aa", "bb")), started="2026-11-01T00:00:00+00:00"))
    newer = store.put(make_record(make_config(OFFLINE, text=("cc", "dd")), started="2026-11-02T00:00:00+00:00"))
    wanted = make_config(ONLINE, text=("ee", "ff"))
    assert store.find(wanted).key == newer

    # The newer run's file becomes a huge (sparse) file: refused by its size before it is read; the older answers.
    newer_bytes = store.path(newer).read_bytes()
    with open(store.path(newer), "r+b") as handle:
        handle.truncate(200 * 2**20)
    with pytest.raises(ValueError, match="more than"):
        store.load(newer)
    assert store.find(wanted).key == older
    # ... a record with a 400-digit integer (it fits no float) is passed over the same way,
    store.path(newer).write_bytes(newer_bytes.replace(b'"best_val_loss": 5.1', b'"best_val_loss": ' + b"9" * 400))
    with pytest.raises(ValueError, match="400 digits"):
        store.load(newer)
    assert store.find(wanted).key == older
    # ... and a FIFO in a record's place does not hang the look-up (nor the index's first read of the store).
    store.path(newer).unlink()
    os.mkfifo(store.path(newer))
    for entry in (tmp_path / "replay").iterdir():
        entry.unlink()
    assert store.find(wanted).key == older


def test_load_bundle_describes_readable_runs_with_their_weights_and_about(tmp_path):
    source = ResultsStore(tmp_path / "gpu")
    state = _tiny_model().state_dict()
    good = source.put(make_record(make_config(seed=0)), weights=state)
    bare = source.put(make_record(make_config(seed=1)))
    bundle = source.export(tmp_path / "bundle.zip", about={"made_by": "a test"})
    with zipfile.ZipFile(bundle) as z, zipfile.ZipFile(tmp_path / "mixed.zip", "w") as out:
        for name in z.namelist():
            payload = z.read(name)
            if name == f"runs/{bare}.json":
                payload = payload.replace(b'"finished"', b'"running"')  # a partial run: rejected
            out.writestr(name, payload)
    from spanviz.store import load_bundle

    info = load_bundle(tmp_path / "mixed.zip", ResultsStore(tmp_path / "student"))
    assert info["runs"] == 1 and info["imported"] == 1 and info["weights"] == 1
    assert info["about"] == {"made_by": "a test"}
    assert [entry.split(":")[0] for entry in info["rejected"]] == [f"runs/{bare}.json"]
    assert ResultsStore(tmp_path / "student").has_weights(good)


def test_export_counts_weights_in_the_archives_limits_and_a_diverged_run_keeps_the_finished_ones(tmp_path,
                                                                                                  monkeypatch):
    from spanviz.store import archive as archive_lib

    store = ResultsStore(tmp_path / "store")
    record = make_record(make_config())
    key = store.put(record, weights=_tiny_model().state_dict())
    record_bytes = len(store.path(key).read_bytes())
    monkeypatch.setattr(archive_lib, "MAX_ARCHIVE_BYTES", record_bytes + 100)  # the record fits, with weights not
    with pytest.raises(ValueError, match="more than an import accepts"):
        store.export(tmp_path / "out.zip")
    assert not (tmp_path / "out.zip").exists() and not list(tmp_path.glob(".out.zip.*"))
    monkeypatch.undo()
    with pytest.raises(ValueError, match="about must be JSON-able"):
        store.export(tmp_path / "out.zip", about={"made_by": object()})

    diverged = make_record(make_config())
    diverged.status = "diverged"
    assert store.put(diverged) == key  # not stored: the finished run and its weights stay
    assert store.load(key).status == "finished" and store.has_weights(key)
