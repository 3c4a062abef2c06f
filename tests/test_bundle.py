"""The workshop bundle: runs precomputed on a GPU replay in the notebooks on a CPU-only machine.

The shipped bundle (``spanviz/bundles/workshop-gpu.zip``) was made with ``scripts/make_workshop_bundle.py`` on a
GPU. If a change to the configurations (a new config field, other notebook defaults, other data) changes the
notebooks' store keys, the replay test below fails: remake the bundle with that script (on a GPU machine, or
on any machine — the bundle then says where its runs ran) and commit it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from spanviz import store as store_lib
from spanviz.store import ResultsStore, describe_runs, load_bundle
from spanviz.train import TrainConfig, Trainer

REPO = Path(__file__).resolve().parents[1]


def _bundle_script():
    spec = importlib.util.spec_from_file_location("make_workshop_bundle", REPO / "scripts" / "make_workshop_bundle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_load_bundle_imports_once_and_says_where_the_runs_came_from(tmp_path, synthetic):
    from spanviz.model import GPTConfig

    source = ResultsStore(tmp_path / "gpu")
    for seed in (0, 1):
        cfg = TrainConfig(steps=2, batch_size=2, warmup_steps=0, eval_interval=1, eval_iters=1, seed=seed)
        source.put(Trainer(GPTConfig(vocab_size=64, context_length=8, n_layer=1, n_head=1, d_model=8), cfg,
                           synthetic).run())
    archive = source.export(tmp_path / "bundle.zip")
    student = ResultsStore(tmp_path / "student")
    info = load_bundle(archive, student)
    assert info["imported"] == 2 and info["runs"] == 2 and info["rejected"] == []
    assert info["experiments"] == {"notebook defaults": 2} and info["first_utc"] <= info["last_utc"]
    assert info["devices"] == describe_runs(source.load(k) for k in source.list())["devices"]
    assert len(student.list()) == 2
    again = load_bundle(archive, student)  # runs already there are kept, not rewritten
    assert again["imported"] == 0 and again["runs"] == 2
    with pytest.raises(ValueError, match="no such file"):
        load_bundle(tmp_path / "missing.zip", student)


@pytest.mark.slow
def test_shipped_bundle_replays_every_notebook_default_without_training(tmp_path, monkeypatch, wikitext_dir):
    if not store_lib.BUNDLE.is_file():
        pytest.fail(f"the workshop bundle {store_lib.BUNDLE} is missing: make it with scripts/make_workshop_bundle.py")
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path))
    monkeypatch.setenv("SPANVIZ_WIKITEXT_DIR", str(wikitext_dir))
    monkeypatch.setenv("SPANVIZ_TRAIN_SPLIT", "validation")
    monkeypatch.setenv("SPANVIZ_EVAL_SPLIT", "test")
    monkeypatch.setenv("SPANVIZ_BLOCKING", "1")
    for name in ("SPANVIZ_STEPS", "SPANVIZ_SMOKE", "SPANVIZ_GPU_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    info = load_bundle()
    assert info["rejected"] == [] and info["imported"] == info["runs"]
    assert info["experiments"]["notebook defaults"] >= 7
    assert any("H100" in d or "H200" in d for d in info["devices"]), info["devices"]

    def refuse(self, n=1):
        raise AssertionError(f"{self.model_cfg} trained instead of replaying from the bundle")

    monkeypatch.setattr(Trainer, "step", refuse)
    monkeypatch.chdir(REPO / "notebooks")
    run_notebook = _bundle_script().run_notebook
    for path in sorted((REPO / "notebooks").glob("0*.ipynb")):
        namespace = {}
        run_notebook(path, namespace)
        panel = namespace["panel"]
        training = getattr(panel, "training", panel)
        assert training.replayed and sorted(training.replayed) == sorted(training.runner.histories), path.name
        for label, history in training.runner.histories.items():
            assert len(history["step"]) == namespace["STEPS"], (path.name, label)
