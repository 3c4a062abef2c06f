"""Issue 39's attack, findings 12 and 13 (finding 10: ``test_stranger_inputs.py``; finding 11: ``test_lab_script.py``).

Each test names the finding; the issue's exact input first, then inputs of our own. A clean error is a
``ValueError`` naming the field, the value and what is allowed (for the command line: one line
``spanviz <command>: error: ...``, exit status 2, before any work).
"""

from __future__ import annotations

import sys
from collections import namedtuple
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import SPLITS, TINY_MODEL  # noqa: E402
from test_cli_attack import cli  # noqa: E402

Usage = namedtuple("Usage", "total used free")


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path / "home"))
    for name in ("SPANVIZ_TRAIN_SPLIT", "SPANVIZ_EVAL_SPLIT", "SPANVIZ_SMOKE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def _one_error_line(err: str, command: str) -> str:
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1 and lines[0].startswith(f"spanviz {command}: error: "), err
    return lines[0]


# ======================================================= 12. a full results store is found before training
@pytest.mark.parametrize("out", [False, True])
def test_train_checks_the_results_stores_space_before_training(home, tmp_path, wikitext_dir, monkeypatch, out):
    full = home / "runs"
    real = __import__("shutil").disk_usage

    def disk_usage(path):  # 0 bytes free where the store is; the rest of the disk as it is
        return Usage(10**9, 10**9, 0) if Path(path) == full else real(path)

    monkeypatch.setattr("spanviz.files.shutil.disk_usage", disk_usage)
    trained = []
    monkeypatch.setattr("spanviz.cli.train.train_and_report", lambda *a, **k: trained.append(1) or 0)
    argv = ["train", "--data-dir", str(wikitext_dir), *SPLITS, "--max-vocab", "512", *TINY_MODEL, "--steps", "3"]
    rc, _, err, escaped = cli(argv + (["--out", str(tmp_path / "run")] if out else []))
    assert escaped is None and rc == 2 and not trained, err
    line = _one_error_line(err, "train")
    assert "results store" in line and "MiB free" in line and "--no-store" in line, line
    # with --no-store and --out, the store is not needed
    if out:
        rc, _, err, _ = cli(argv + ["--out", str(tmp_path / "run2"), "--no-store"])
        assert rc == 0 and trained, err
