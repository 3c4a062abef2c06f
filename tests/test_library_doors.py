"""Hostile input at the library's own doors, archives' weights, the replay key.

One test per finding (the issue's exact input first, then new inputs of our own); finding 1 (the vocabulary in the
replay of weights) is in ``test_replay.py`` and ``test_bundle.py``. A clean error is a ``ValueError`` naming the
field, the value and what is allowed (for the command line: one line ``spanviz <command>: error: ...``).
"""

from __future__ import annotations

import io
import json
import math
import os
import socket
import sys
import zipfile
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from test_cli_bad_input import cli  # noqa: E402

from spanviz.files import NotAFileError, atomic_open, atomic_write
from spanviz.store import ResultsStore


def _one_error_line(err: str, command: str) -> str:
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1 and lines[0].startswith(f"spanviz {command}: error: "), err
    return lines[0]


# ============================================================== 2. a device, FIFO or folder where a file is written
@pytest.fixture
def not_files(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    link = tmp_path / "link-to-fifo"
    link.symlink_to(fifo)
    yield {"a FIFO": fifo, "a folder": folder, "a socket": sock_path, "a link to a FIFO": link}
    sock.close()


def test_atomic_writes_refuse_a_path_that_is_not_a_regular_file(not_files, tmp_path):
    for name, path in not_files.items():
        kind = name.removeprefix("a link to ")
        for write in (lambda p: atomic_write(p, b"x"), lambda p: atomic_open(p).__enter__()):
            with pytest.raises(NotAFileError, match=f"is {kind}.*not a regular file"):
                write(path)
        assert not path.is_file(), name
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left behind
    assert issubclass(NotAFileError, ValueError)
    atomic_write(tmp_path / "plain", b"ok")  # files are written as before
    assert (tmp_path / "plain").read_bytes() == b"ok"


def test_store_export_and_the_cli_refuse_a_fifo_in_place_of_the_archive(not_files, tmp_path, monkeypatch):
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path / "home"))
    fifo = not_files["a FIFO"]
    with pytest.raises(ValueError, match="FIFO"):
        ResultsStore(tmp_path / "store").export(fifo)
    rc, _, err, escaped = cli(["runs", "export", str(fifo)])
    assert escaped is None and rc != 0 and "FIFO" in _one_error_line(err, "runs")
    assert fifo.is_fifo()
    rc, _, err, escaped = cli(["bench", "--out", str(not_files["a socket"]), "--only", "spans"])
    assert escaped is None and rc != 0 and "socket" in _one_error_line(err, "bench"), err


# ============================================================== 3. flags injected through a run.json's data section
def _run_json(tmp_path, **data) -> Path:
    import json

    path = tmp_path / "run.json"
    base = {"dataset": "wikitext-2", "config": "wikitext-2-v1", "splits": {"train": "validation", "eval": "test"},
            "tokenizer": "word", "max_vocab": 512}
    path.write_text(json.dumps({"config": {"model": {"d_model": 16, "n_head": 2, "n_layer": 1, "context_length": 16},
                                           "train": {"steps": 2, "batch_size": 2, "lr": 0.003},
                                           "data": {**base, **data}}}))
    return path


@pytest.mark.parametrize("data, entry", [
    ({"splits": {"train": ["validation", "--lr", "0.5"], "eval": "test"}}, "data.splits.train"),  # the issue's
    ({"max_vocab": [100, "--seed", "5"]}, "data.max_vocab"),  # the issue's
    ({"splits": {"train": "validation", "eval": "--steps"}}, "data.splits.eval"),
    ({"splits": ["validation", "test"]}, "data.splits"),
    ({"splits": {"train": {"x": 1}, "eval": "test"}}, "data.splits.train"),
    ({"splits": {"--lr": "validation"}}, "data.splits.--lr"),
    ({"tokenizer": "--lr"}, "data.tokenizer"),
    ({"tokenizer": ["word", "--seed", "3"]}, "data.tokenizer"),
    ({"config": "wikitext-2-v1 --lr 0.5"}, "data.config"),
    ({"max_vocab": "8192"}, "data.max_vocab"),
    ({"max_vocab": True}, "data.max_vocab"),
    ({"max_vocab": -5}, "data.max_vocab"),
    ({"source": ["--lr", "9"]}, "data.source"),
])
def test_a_run_jsons_data_entries_are_type_checked_never_read_as_flags(tmp_path, monkeypatch, data, entry):
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path / "home"))
    path = _run_json(tmp_path, **data)
    rc, _, err, escaped = cli(["train", "--config", str(path), "--data-dir", "/nonexistent", "--no-store",
                               "--device", "cpu"])
    line = _one_error_line(err, "train")
    assert escaped is None and rc == 2 and f"--config {path}: {entry}=" in line, line
    assert "must be" in line


def test_as_argv_refuses_a_text_that_would_be_read_as_a_flag():
    from spanviz.cli.config_file import as_argv

    assert as_argv({"device": "cpu", "alphas": "1,-0.5"}) == ["--device", "cpu", "--alphas", "1,-0.5"]
    for values in ({"device": "--lr"}, {"spans_layers": [0, "--seed"]}):
        with pytest.raises(ValueError, match="read as a flag"):
            as_argv(values)


def test_check_splits_names_a_split_that_is_not_text():
    from spanviz.settings import check_splits

    for split in (["validation", "--lr", "0.5"], {"a": 1}, 3, None):
        with pytest.raises(ValueError, match=r"splits\['train'\]=.*allowed: train, validation, test"):
            check_splits({"train": split})


# ============================================================== 4, 5. weights: bombs, and weights that fit no model
def _tiny_model_config() -> dict:
    from spanviz.model import GPTConfig

    return GPTConfig(vocab_size=64, context_length=8, n_layer=1, n_head=2, d_model=16).to_dict()


def _tiny_state(seed: int = 0) -> dict:
    from spanviz.model import GPTConfig, TinyGPT

    torch.manual_seed(seed)
    return TinyGPT(GPTConfig.from_dict(_tiny_model_config())).state_dict()


def _record(seed: int = 0, history: dict | None = None, status: str = "finished"):
    from spanviz.train import RunRecord

    return RunRecord(config={"model": _tiny_model_config(), "train": {"steps": 3, "seed": seed}, "probes": []},
                     status=status, environment={"device": "cpu", "device_name": "x86_64"},
                     history=history or {"step": [1, 2, 3], "train_loss": [4.0, 3.5, 3.0],
                                         "val_loss": [None, None, 3.1]})


def _weights_file(tensors: dict, key: str, tied: dict | None = None) -> bytes:
    buffer = io.BytesIO()
    torch.save({"format": "spanviz-weights-1", "key": key, "dtype": "float16", "tensors": tensors,
                "tied": tied or {}}, buffer)
    return buffer.getvalue()


def _archive_with_weights(tmp_path, name: str, payload_of) -> tuple[Path, str]:
    """An archive of one good run whose weights file is ``payload_of(key)``."""
    source = ResultsStore(tmp_path / f"src-{name}")
    key = source.put(_record(), weights=_tiny_state())
    archive = source.export(tmp_path / f"{name}.zip")
    forged = tmp_path / f"{name}-forged.zip"
    with zipfile.ZipFile(archive) as z, zipfile.ZipFile(forged, "w") as out:
        for member in z.namelist():
            out.writestr(member, payload_of(key) if member.startswith("weights/") else z.read(member))
    return forged, key


def _bombs(key: str) -> dict[str, bytes]:
    state = {k: v.half() for k, v in _tiny_state().items()}
    return {
        # the issue's: 40 zeros(1).expand(20000, 20000) float16 tensors (64 GB once converted), a few KB on disk
        "expanded": _weights_file({f"t{i}": torch.zeros(1, dtype=torch.float16).expand(20000, 20000)
                                   for i in range(40)}, key),
        "expanded one": _weights_file({**state, "wte.weight": torch.zeros(1, dtype=torch.float16).expand(64, 16)},
                                      key),
    }


def test_expanded_tensor_weight_bombs_are_refused_weights_only(tmp_path):
    from spanviz.store.weights import unpack_weights

    for name in ("expanded", "expanded one"):
        archive, key = _archive_with_weights(tmp_path, name.replace(" ", "-"), lambda k, name=name: _bombs(k)[name])
        with pytest.raises(ValueError, match="expanded view|more than"):
            unpack_weights(_bombs(key)[name], key, "here")
        student = ResultsStore(tmp_path / f"student-{name}")
        report = student.import_report(archive)  # the archive's good run is imported, its weights rejected
        assert report.written == [key] and [e for e, _ in report.rejected] == [f"weights/{key}.pt"], report
        assert not student.has_weights(key) and student.load(key).status == "finished"
    # Storing them is refused the same way, before anything is converted or written.
    store = ResultsStore(tmp_path / "put")
    with pytest.raises(ValueError, match="expanded view"):
        store.put(_record(), weights={**_tiny_state(), "wte.weight": torch.zeros(1).expand(64, 16)})
    assert store.list() == []


@pytest.mark.parametrize("bad", ["nan", "inf", "int64", "complex64", "shape", "missing", "extra", "other model",
                                 "many tiny", "bool"])
def test_weights_that_fit_no_model_are_refused_at_import_and_at_put(tmp_path, bad):
    from spanviz.store.weights import unpack_weights

    state = _tiny_state()
    if bad in ("nan", "inf"):
        state["blocks.0.attn.W_Q.weight"] = torch.full((16, 16), float(bad))
    elif bad in ("int64", "complex64", "bool"):
        state["ln_f.weight"] = state["ln_f.weight"].to(getattr(torch, bad))
    elif bad == "shape":
        state["wpe.weight"] = torch.zeros(9, 16)
    elif bad == "missing":
        del state["ln_f.bias"]
    elif bad == "extra":
        state["blocks.1.ln_1.weight"] = torch.zeros(16)
    elif bad == "other model":
        from spanviz.model import GPTConfig, TinyGPT

        state = TinyGPT(GPTConfig(vocab_size=64, context_length=8, n_layer=1, n_head=2, d_model=32)).state_dict()
    elif bad == "many tiny":
        state = {f"t{i}": torch.zeros(1) for i in range(5000)}
    packed = {k: (v.half() if v.is_floating_point() else v) for k, v in state.items()}
    archive, key = _archive_with_weights(tmp_path, bad.replace(" ", "-"), lambda k: _weights_file(packed, k))
    with pytest.raises(ValueError):
        unpack_weights(_weights_file(packed, key), key, "here", _tiny_model_config())
    student = ResultsStore(tmp_path / "student")
    report = student.import_report(archive)
    assert report.written == [key] and [e for e, _ in report.rejected] == [f"weights/{key}.pt"], report.rejected
    assert not student.has_weights(key)
    with pytest.raises(ValueError):
        ResultsStore(tmp_path / "put").put(_record(), weights=state)
    assert not ResultsStore(tmp_path / "put").list()


def test_a_diverged_runs_nan_weights_are_dropped_the_run_kept(tmp_path):
    state = _tiny_state()
    state["wte.weight"] = torch.full((64, 16), float("nan"))
    store = ResultsStore(tmp_path)
    key = store.put(_record(status="diverged"), weights=state)
    assert store.load(key).status == "diverged" and not store.has_weights(key)
    good = store.put(_record(seed=1), weights=_tiny_state())  # good weights round-trip, checked against the model
    assert torch.allclose(store.weights(good)["wte.weight"], _tiny_state()["wte.weight"], atol=1e-3)


# ============================================================== 6. histories the panels cannot replay
GOOD_HISTORY = {"step": [1, 2, 3], "train_loss": [4.0, 3.5, 3.0], "val_loss": [None, None, 3.1]}


@pytest.mark.parametrize("change, status", [
    ({"val_loss": ["a", "b", "c"]}, "finished"),  # the issue's: strings, dicts, nested lists, booleans
    ({"val_loss": [{"x": 1}, None, 3.1]}, "finished"),
    ({"val_loss": [[1.0], None, 3.1]}, "finished"),
    ({"val_loss": [True, None, 3.1]}, "finished"),
    ({"step": None}, "finished"),  # no step
    ({"step": [-1, 2, 3]}, "finished"),  # negative, fractional, 10**18 steps
    ({"step": [1, 2.5, 3]}, "finished"),
    ({"step": [1, 2, 10**18]}, "finished"),
    ({"step": [], "train_loss": [], "val_loss": []}, "finished"),  # a finished run with an empty history
    ({"step": [1, 3, 2]}, "finished"),  # ours: decreasing, repeated, short, a per-head value too deep, text in lr
    ({"step": [1, 1, 2]}, "finished"),
    ({"train_loss": [4.0, 3.5]}, "finished"),
    ({"logits/max_per_head": [[[[1.0]]], None, None]}, "finished"),
    ({"lr": ["1e-3", 0.001, 0.001]}, "diverged"),
    ({"step": [True, 2, 3]}, "diverged"),
])
def test_histories_the_panels_cannot_replay_are_refused_at_put_and_import(tmp_path, change, status):
    history = {**GOOD_HISTORY, **change}
    if history["step"] is None:
        del history["step"]
    store = ResultsStore(tmp_path / "store")
    with pytest.raises(ValueError, match="history"):
        store.put(_record(history=history, status=status))
    assert store.list() == []
    # The same record in an archive beside a good one: it is rejected by name, the good one imported.
    source = ResultsStore(tmp_path / "source")
    good = source.put(_record(seed=1))
    bad_record = _record(history=GOOD_HISTORY, status=status)
    bad = source.put(bad_record)
    archive = source.export(tmp_path / "a.zip")
    bad_record.history = history
    with zipfile.ZipFile(archive) as z, zipfile.ZipFile(tmp_path / "forged.zip", "w") as out:
        for member in z.namelist():
            out.writestr(member, bad_record.to_json() if member == f"runs/{bad}.json" else z.read(member))
    report = ResultsStore(tmp_path / "student").import_report(tmp_path / "forged.zip")
    assert report.written == [good] and [e for e, _ in report.rejected] == [f"runs/{bad}.json"], report.rejected
    assert "history" in report.rejected[0][1]


def test_histories_of_real_runs_pass():
    from spanviz.store.history import check_history

    check_history({"step": [0, 5], "train_loss": [float("nan"), float("inf")], "val_loss": [None, 1.0],
                   "logits/max_per_head": [[[1.0, 2.0]], None], "logits/max_per_layer": [[1.0], None]},
                  "diverged", "here")
    check_history({"step": []}, "diverged", "here")


def test_the_fast_paths_of_reading_a_record_decide_as_the_walks_do():
    """Plain columns (numbers and nulls only) are checked, decoded and encoded at C speed, the rest walked value by
    value: the same answers either way — a bool or a numpy float among numbers, NaN/inf written as strings, a column
    copied (not shared) by from_dict."""
    import numpy as np

    from spanviz.store.archive import check_json_limits
    from spanviz.store.history import check_history
    from spanviz.train import RunRecord
    from spanviz.train.record import _encode_nonfinite, to_json_text

    check_history({"step": [0, 1], "loss": [np.float64(1.5), 2]}, "finished", "here")  # a float subclass: walked
    with pytest.raises(ValueError, match=r"history\['loss'\]\[1\]=True: must be numbers or null"):
        check_history({"step": [0, 1], "loss": [1.0, True]}, "finished", "here")
    with pytest.raises(ValueError, match="nested deeper than 3"):
        check_json_limits({"h": [1.0, [2.0, [3.0]]]}, "here", max_depth=3)
    check_json_limits({"h": [1.0, "x", None, True]}, "here", max_depth=2)
    for obj in ({"a": [1.0, float("nan"), None], "b": (1, 2)}, {"a": [1.0, 2.0], "b": (1, 2), 3: "c"},
                {"h": [float("-inf"), [1.0, float("inf")]]}):
        assert to_json_text(obj) == json.dumps(_encode_nonfinite(obj), allow_nan=False)
    history = {"step": [0, 1], "train_loss": [1.0, 2.0], "val_loss": ["nan", None]}
    record = RunRecord.from_dict({"config": {}, "history": history, "status": "finished"})
    assert record.history["train_loss"] is not history["train_loss"] and math.isnan(record.history["val_loss"][0])


# ============================================================== 7. terminal escapes and huge strings from a file
def test_runs_list_prints_only_printable_capped_text_from_records(tmp_path, monkeypatch):
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path / "home"))
    store = ResultsStore(tmp_path / "home" / "runs")
    hostile = {"\x1b[2J cleared": "a label with ESC[2J", "H100\nforged  row  9.9": "a device with a newline",
               "x" * 500_000: "a 500,000-character label", "\u202eevil": "a right-to-left override"}
    for seed, text in enumerate(hostile):
        record = _record(seed=seed)
        record.config["tags"] = {"experiment": text, "size": "tiny"}
        record.environment.update(device="cuda:0", device_name=text)
        store.put(record)
    rc, out, err, escaped = cli(["runs", "list"])
    assert escaped is None and rc == 0, err
    assert "\x1b" not in out and "\u202e" not in out and len(out) < 20_000, len(out)
    assert "\\x1b[2J cleared" in out
    assert len(out.splitlines()) == 2 + len(hostile) + 1  # header, rule, one line per run, the count


def test_printable():
    from spanviz.validators import printable

    assert printable("plain text") == "plain text"
    assert printable("a\x1b[2Jb\nc\td") == "a\\x1b[2Jb\\nc\\td"
    assert printable("x" * 500, 10) == "x" * 9 + "…"
    assert printable("\x1b" * 50, 10) == "\\x1b\\x1b\\" + "…"
    with pytest.raises(ValueError, match="max_chars"):
        printable("a", 0)


# ============================================================== 8. unbounded solver and model size
def test_fp8_bounds_return_for_the_smallest_delta_and_huge_counts():
    import math

    from spanviz.fp8 import logit_bounds
    from spanviz.fp8.core import alpha_agnostic, solve_gamma

    for delta in (1e-308, 5e-324, 1e-3):  # the 1e-308: 2N/δ overflowed and the bisection looped on inf
        gamma = solve_gamma(4, 1024, delta)
        assert math.isfinite(gamma) and gamma > 1
    assert solve_gamma(4, 1024, 1e-308) > solve_gamma(4, 1024, 1e-3)
    assert math.isfinite(alpha_agnostic(64, 10**400, 1e-308))
    assert math.isfinite(solve_gamma(2, 10**6, 0.5, tol=1e-300))  # a tolerance below float spacing still ends
    bounds = logit_bounds(2.0, 64, 16, r=4, n_pairs=128 * 128, n_keys=128, delta=1e-308)  # the call
    assert all(math.isfinite(v) for v in bounds.values() if isinstance(v, float)), bounds


def test_a_model_config_too_large_to_build_is_refused_before_building():
    from spanviz.model import GPTConfig

    with pytest.raises(ValueError, match=r"n_layer.*1000000"):
        GPTConfig(n_layer=10**6)  # the issue's: built unbounded
    with pytest.raises(ValueError, match="parameters"):
        GPTConfig(d_model=2**16, n_head=1, n_layer=1024)
    GPTConfig(n_layer=2, d_model=128)  # the notebooks' sizes are untouched
    # The stabilisers' fields (logit soft-cap, QK-Clip, a per-layer local/global pattern) add no parameters: the same
    # limits hold with them set, checked before their own checks and before building.
    for later in ({"logit_softcap": 30.0, "qk_clip": 100.0}, {"global_every": 2, "window": 8}):
        with pytest.raises(ValueError, match=r"n_layer.*1000000"):
            GPTConfig(n_layer=10**6, **later)
        with pytest.raises(ValueError, match="parameters"):
            GPTConfig(d_model=2**16, n_head=1, n_layer=1024, **later)
        assert GPTConfig(n_layer=2, d_model=128, **later).to_dict()["n_layer"] == 2


# ============================================================== 9. Trainer.load_state_dict: one check for both doors
def test_trainer_load_state_dict_checks_what_load_checkpoint_checks_before_changing_anything(synthetic):
    import copy

    from spanviz.model import GPTConfig
    from spanviz.train import TrainConfig, Trainer

    def trainer(seed=0, lr=3e-3):
        cfg = TrainConfig(steps=4, batch_size=2, warmup_steps=0, eval_interval=2, eval_iters=1, seed=seed, lr=lr)
        return Trainer(GPTConfig(vocab_size=64, context_length=8, n_layer=1, n_head=1, d_model=8), cfg, synthetic)

    source = trainer()
    source.run()
    good = copy.deepcopy(source.state_dict())

    def changed(edit):
        state = copy.deepcopy(good)
        edit(state)
        return state

    bad = {
        "step -5": changed(lambda s: s.update(step=-5)), "step 1e9": changed(lambda s: s.update(step=10**9)),
        "step 2.5": changed(lambda s: s.update(step=2.5)), "empty": {},
        "NaN weights": changed(lambda s: s["model"]["wte.weight"].fill_(float("nan"))),
        "emptied optimizer": changed(lambda s: s["optimizer"].update(state={})),
        "3-byte RNG": changed(lambda s: s["rng"].update(torch=torch.zeros(3, dtype=torch.uint8))),
        "other shapes": changed(lambda s: s["model"].update({"wpe.weight": torch.zeros(9, 8)})),
        "optimizer groups": changed(lambda s: s["optimizer"]["param_groups"][0]["params"].pop()),
    }
    for name, state in bad.items():
        target = trainer(seed=1)
        before = {k: v.clone() for k, v in target.model.state_dict().items()}
        with pytest.raises(ValueError, match="the state"):
            target.load_state_dict(state)
        assert all(torch.equal(before[k], v) for k, v in target.model.state_dict().items()), name  # untouched
        assert target.step_count == 0, name
    target = trainer(seed=1)
    target.load_state_dict(good)
    assert target.step_count == 4 and torch.equal(target.model.state_dict()["wte.weight"], good["model"]["wte.weight"])
