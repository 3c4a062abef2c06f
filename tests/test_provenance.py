"""Every run record says which code made it (version, commit or "not a git checkout", source digest) and holds no
path of the machine: the data are named by their identity (name, config, splits, text hashes)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from spanviz import __version__, provenance
from spanviz.cli import main
from spanviz.data import LOCAL_SOURCE, prepare_tokens
from spanviz.model import GPTConfig
from spanviz.train import TrainConfig, Trainer

SPLITS = {"train": "validation", "eval": "test"}
ABSOLUTE = re.compile(r"^(/|~|[A-Za-z]:[\\/])")


def absolute_paths(obj) -> list[str]:
    """Every string in a JSON value that looks like an absolute path (POSIX, home-relative or Windows)."""
    if isinstance(obj, str):
        return [obj] if ABSOLUTE.match(obj) else []
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in absolute_paths(k) + absolute_paths(v)]
    if isinstance(obj, list):
        return [p for v in obj for p in absolute_paths(v)]
    return []


def test_code_identity_names_version_commit_and_source():
    identity = provenance.code_identity()
    assert identity["spanviz"] == provenance.spanviz_version() and identity["spanviz"] != "unknown"
    assert identity["spanviz"] == __version__ or re.match(r"^\d+\.\d+", identity["spanviz"])
    assert re.fullmatch(r"[0-9a-f]{40}", identity["git_commit"]) or identity["git_commit"] == provenance.NOT_A_CHECKOUT
    assert re.fullmatch(r"[0-9a-f]{64}", identity["source_sha256"])
    assert identity["source_sha256"] == provenance.source_digest()


def test_a_copied_tree_is_no_checkout_and_its_digest_matches_the_commit(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    package = tmp_path / "repo" / "spanviz"
    shutil.copytree(provenance.PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    assert provenance.git_commit(package) == (provenance.NOT_A_CHECKOUT, None)  # a copy: no history travelled
    assert provenance.source_digest(package) == provenance.source_digest()  # ... but the code is named

    repo = package.parent
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "snapshot"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    commit, dirty = provenance.git_commit(package)
    assert re.fullmatch(r"[0-9a-f]{40}", commit) and dirty is False
    assert provenance.source_digest_at(commit, repo) == provenance.source_digest(package)
    (package / "model.py").write_text((package / "model.py").read_text() + "\n# changed\n")
    assert provenance.git_commit(package) == (commit, True)
    assert provenance.source_digest_at(commit, repo) != provenance.source_digest(package)


def test_a_run_on_a_local_folder_records_the_data_identity_and_no_path(wikitext_dir):
    data = prepare_tokens(wikitext_dir, splits=SPLITS, max_vocab=512)
    trainer = Trainer(GPTConfig(vocab_size=data.vocab_size, context_length=16, n_layer=1, n_head=2, d_model=16),
                      TrainConfig(steps=2, batch_size=2, warmup_steps=0, eval_interval=1, eval_iters=1), data)
    record = json.loads(trainer.run().to_json())
    assert absolute_paths(record) == [], absolute_paths(record)
    assert str(wikitext_dir.resolve()) not in json.dumps(record)
    described = record["config"]["data"]
    assert described["source"] == LOCAL_SOURCE and described["splits"] == SPLITS
    assert described["text_sha256"] == data.text_sha256 and described["config"] == "wikitext-2-v1"
    env = record["environment"]
    assert env["spanviz"] == provenance.spanviz_version() and env["source_sha256"] == provenance.source_digest()
    assert env["git_commit"] == provenance.code_identity()["git_commit"]


def test_command_line_records_hold_no_path_resumed_or_diverged(wikitext_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path / "home"))
    flags = ["--data-dir", str(wikitext_dir), "--train-split", "validation", "--eval-split", "test",
             "--max-vocab", "512", "--d-model", "16", "--n-head", "2", "--n-layer", "1", "--context-length", "16",
             "--batch-size", "2", "--eval-iters", "1", "--device", "cpu", "--no-store"]
    out = tmp_path / "run"
    assert main(["train", *flags, "--steps", "2", "--eval-interval", "1", "--out", str(out)]) == 0
    # --resume without --data-dir: the record names no folder; the environment's is used, its text checked
    monkeypatch.setenv("SPANVIZ_WIKITEXT_DIR", str(wikitext_dir))
    assert main(["train", "--resume", "--out", str(out), "--steps", "4", "--no-store"]) == 0
    record = json.loads((out / "run.json").read_text())
    assert len(record["history"]["step"]) == 4 and record["environment"]["resumed_from"]["step"] == 2
    assert absolute_paths(record) == [], absolute_paths(record)

    diverged = tmp_path / "diverged"
    main(["train", *flags, "--steps", "20", "--lr", "1e4", "--grad-clip", "0", "--warmup-steps", "0",
          "--eval-interval", "2", "--out", str(diverged)])
    record = json.loads((diverged / "run.json").read_text())
    assert record["status"] == "diverged" and "run.json" in record["message"]
    assert str(diverged) not in json.dumps(record) and absolute_paths(record) == []
    capsys.readouterr()


def test_shipped_bundle_holds_no_path_and_says_which_code_made_each_run():
    import zipfile

    from spanviz.store import BUNDLE

    with zipfile.ZipFile(BUNDLE) as archive:
        records = [json.loads(archive.read(n)) for n in archive.namelist() if n.startswith("runs/")]
        about = json.loads(archive.read("manifest.json")).get("about", {})
    assert records and absolute_paths(about) == []
    for record in records:
        assert absolute_paths(record) == [], absolute_paths(record)
        env = record["environment"]
        assert env["spanviz"] != "unknown"
        if env["spanviz"] == "not recorded":  # made before spanviz recorded it: the record says so and why
            assert env["git_commit"] == "not recorded" and "before spanviz recorded its version" in env["provenance"]
        else:
            assert re.fullmatch(r"[0-9a-f]{64}", env["source_sha256"])
            assert re.fullmatch(r"[0-9a-f]{40}", env["git_commit"]) or env["git_commit"] == provenance.NOT_A_CHECKOUT
    recorded = {r["environment"]["source_sha256"] for r in records if r["environment"]["spanviz"] != "not recorded"}
    if "source_sha256" in about:  # made by make_workshop_bundle.py: one code for every run, and it is the commit's
        assert recorded == {about["source_sha256"]}
        commit = about.get("stated_commit") or about.get("git_commit")
        repo = Path(__file__).resolve().parents[1]
        at_commit = provenance.source_digest_at(commit, repo) if commit != provenance.NOT_A_CHECKOUT else None
        if at_commit is None:
            pytest.skip(f"the bundle's commit {commit} is not in this clone's history (or git is missing)")
        assert at_commit == about["source_sha256"], f"the bundle's runs are not the code of commit {commit}"


def test_committed_results_hold_no_path_of_a_machine():
    results = Path(__file__).resolve().parents[1] / "docs" / "results"
    for path in sorted(results.glob("*.json")):
        found = absolute_paths(json.loads(path.read_text(encoding="utf-8")))
        assert found == [], (path.name, found)
