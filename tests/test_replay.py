"""Replays across data variants (the replay key) and a run's final weights in the store and in archives.

The workshop bundle is trained on the offline copy's validation split; Binder and online installs have the train
split. The notebooks' panels must replay it there and say so; sweeps must not mix the two. A replay in the tour
must bring the trained model, not only its curve.
"""

from __future__ import annotations

import copy
import io
import zipfile

import pytest
import torch

from spanviz.model import GPTConfig, TinyGPT
from spanviz.store import ResultsStore, config_key, data_differences, replay_key, replay_note
from spanviz.store.weights import MAX_WEIGHTS_BYTES, pack_weights, unpack_weights
from spanviz.train import RunRecord

OFFLINE = {"train": "validation", "eval": "test"}
ONLINE = {"train": "train", "eval": "validation"}


def make_config(splits=OFFLINE, text=("aa", "bb"), d_model=64, seed=0) -> dict:
    return {
        "model": {"vocab_size": 512, "d_model": d_model, "n_layer": 2, "spans": None},
        "train": {"steps": 3, "lr": 3e-3, "seed": seed, "device": "auto", "checkpoint_interval": None},
        "data": {"dataset": "wikitext-2", "source": "local folder", "config": "wikitext-2-v1", "splits": dict(splits),
                 "tokenizer": "word", "max_vocab": 512, "vocab_size": 512,
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
                    "validation split, evaluated on test — your data: train, validation)")

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
    (tmp_path / "replay" / f"{replay_key(make_config(d_model=16))}-{key}").touch()
    assert store.find(make_config(ONLINE, d_model=16)) is None


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
