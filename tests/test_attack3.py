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
