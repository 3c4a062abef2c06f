"""The paper-sized GPU run script, rehearsed on a CPU (``--smoke``: the same code paths, tiny models)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from spanviz.experiments import compare_groups, read_per_seed

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_paper_runs.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("gpu_paper_runs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_spans_variants_pair_1000_with_1111_per_head_count(script):
    variants = script.spans_variants(vocab_size=100)
    assert sorted(variants) == sorted(f"heads={h}/[{a}]" for h in (4, 8, 16) for a in ("1111", "1000"))
    for name, (model, train) in variants.items():
        alphas = "".join(str(int(a)) for a in model.spans.alphas)
        assert model.d_model == 256 and model.spans.preset == "kv8" and name == f"heads={model.n_head}/[{alphas}]"
        assert train.device == "cuda" and train.dtype == "bfloat16" and train.steps == script.SPANS_STEPS


@pytest.mark.slow
def test_smoke_runs_land_in_the_store_and_the_summary_recomputes(script, tmp_path, monkeypatch, wikitext_dir):
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path / "home"))
    for what in ("ls", "spans"):
        assert script.main([what, "--seeds", "0", "1", "--smoke", "--data-dir", str(wikitext_dir)]) == 0
    out = tmp_path / "results"
    assert script.main(["summary", "--out", str(out)]) == 0
    for name, runs in (("ls_gpu", 6), ("spans_gpu_heads", 12)):
        summary = __import__("json").loads((out / f"{name}.json").read_text())
        table = read_per_seed(out / f"{name}.per_seed.csv")
        assert len(table) == runs and {row["seed"] for row in table} == {0, 1}
        assert summary["rows"] and compare_groups(table, summary["comparisons"]) == summary["rows"]
        assert summary["data"]["splits"] == {"train": "validation", "eval": "test"}


@pytest.mark.slow
def test_one_variant_per_process_stores_what_the_whole_sweep_would(script, tmp_path, monkeypatch, wikitext_dir):
    """make_workshop_bundle.py trains each variant in its own process: its runs must replay in ls_sweep("gpu")."""
    from spanviz.data import OFFLINE_SPLITS, prepare_tokens
    from spanviz.experiments.ls import ls_sweep
    from spanviz.store import ResultsStore
    from spanviz.train import Trainer

    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path / "home"))
    assert script.main(["ls", "--seeds", "0", "--smoke", "--variants", "mhsa", "--data-dir", str(wikitext_dir)]) == 0
    with pytest.raises(ValueError, match="not in this sweep"):
        script.main(["ls", "--seeds", "0", "--smoke", "--variants", "nope", "--data-dir", str(wikitext_dir)])
    trained = []
    run = Trainer.run

    def counting(self, *args, **kwargs):
        trained.append(self.record.config["variant"])
        return run(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "run", counting)
    data = prepare_tokens(wikitext_dir, splits=OFFLINE_SPLITS, tokenizer="word", max_vocab=8192)
    ls_sweep("gpu", seeds=[0], data=data, store=ResultsStore(), model=script.SMOKE["model"],
             train=script.SMOKE["train"], steps=script.SMOKE["steps"], probe_every=2)
    assert sorted(trained) == ["ls", "qk_norm"]  # mhsa replayed: the same store key
