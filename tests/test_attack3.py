"""Issue 39's attack (the third one): the library's own doors, archives' weights, the replay key.

One test per finding (the issue's exact input first, then new inputs of our own); finding 1 (the vocabulary in the
replay of weights) is in ``test_replay.py`` and ``test_bundle.py``. A clean error is a ``ValueError`` naming the
field, the value and what is allowed (for the command line: one line ``spanviz <command>: error: ...``).
"""

from __future__ import annotations

import io
import os
import socket
import sys
import zipfile
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from test_cli_attack import cli  # noqa: E402

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
