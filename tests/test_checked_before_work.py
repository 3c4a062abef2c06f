"""Checked before any work: a full results store before training, the workshop bundle script's counts, the data
config against the text, a read-only home, bench's data folder, the panels' arguments, a forged start time
(the public API's tensor doors: ``test_stranger_inputs.py``; Voilà's token: ``test_lab_script.py``).

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
from test_cli_bad_input import cli  # noqa: E402

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


# ======================================================================================= 13. the smaller list
def _bundle_script():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / "make_workshop_bundle.py"
    spec = importlib.util.spec_from_file_location("make_workshop_bundle_attack4", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flags, named", [(["--jobs", "0"], "--jobs"), (["--jobs", "-2"], "--jobs"),
                                          (["--seeds", "-1"], "--seeds"), (["--ls-steps", "0"], "--ls-steps"),
                                          (["--spans-steps", "-5"], "--spans-steps"),
                                          (["--deadline", "0"], "--deadline"), (["--deadline", "nan"], "--deadline")])
def test_make_workshop_bundle_refuses_counts_that_cannot_run(tmp_path, wikitext_dir, capsys, flags, named):
    """``--jobs 0`` waited for a free slot forever; the other counts of our own failed later or trained nothing."""
    script = _bundle_script()
    with pytest.raises(SystemExit) as refused:
        script.main(["--data-dir", str(wikitext_dir), "--home", str(tmp_path / "home"), "--out",
                     str(tmp_path / "b.zip"), "--smoke", *flags])
    assert refused.value.code == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "home").exists()  # refused before anything was made


def test_a_raw_v1_config_is_refused_on_v1_text(wikitext_dir, home):
    """``--wikitext-config wikitext-2-raw-v1`` on the local v1 folder (valid.txt with <unk>) recorded raw-v1."""
    from spanviz.data.wikitext import load_wikitext2
    from spanviz.settings import OFFLINE_SPLITS

    with pytest.raises(ValueError, match=r"wikitext-2-raw-v1.*<unk>.*wikitext-2-v1"):
        load_wikitext2(wikitext_dir, config="wikitext-2-raw-v1", splits=OFFLINE_SPLITS)
    assert load_wikitext2(wikitext_dir, splits=OFFLINE_SPLITS).config == "wikitext-2-v1"
    rc, _, err, escaped = cli(["train", "--data-dir", str(wikitext_dir), *SPLITS, "--wikitext-config",
                               "wikitext-2-raw-v1", *TINY_MODEL, "--steps", "1", "--no-store"])
    assert escaped is None and rc == 2 and "<unk>" in _one_error_line(err, "train"), err


def test_raw_text_with_a_raw_config_still_loads(tmp_path, home):
    from spanviz.data.wikitext import load_wikitext2
    from spanviz.settings import OFFLINE_SPLITS

    for name in ("valid.txt", "test.txt"):
        (tmp_path / name).write_text(" = Raw = \n the cat sat on the mat \n")
    assert load_wikitext2(tmp_path, config="wikitext-2-raw-v1", splits=OFFLINE_SPLITS).config == "wikitext-2-raw-v1"


def test_a_read_only_home_with_cached_tokens_trains_with_no_store_and_out(home, tmp_path, wikitext_dir, monkeypatch):
    """The token cache is there; only ``datasets``' Arrow copy under SPANVIZ_HOME cannot be written (read-only). The
    run was refused, blaming the data file."""
    import errno

    import datasets

    from spanviz.data.tokens import prepare_tokens
    from spanviz.settings import OFFLINE_SPLITS

    prepare_tokens(wikitext_dir, splits=OFFLINE_SPLITS, max_vocab=512)  # cached while the home was writable
    real_load, real_mkstemp = datasets.load_dataset, __import__("tempfile").mkstemp

    def read_only(path) -> bool:
        return Path(path).resolve().is_relative_to(home.resolve())

    def load_dataset(*args, cache_dir=None, **kwargs):
        if cache_dir is not None and read_only(cache_dir):
            raise OSError(errno.EROFS, "Read-only file system", str(cache_dir))
        return real_load(*args, cache_dir=cache_dir, **kwargs)

    def mkstemp(*args, dir=None, **kwargs):  # noqa: A002 - tempfile's own name
        if dir is not None and read_only(dir):
            raise OSError(errno.EROFS, "Read-only file system")
        return real_mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr("tempfile.mkstemp", mkstemp)
    trained = []
    monkeypatch.setattr("spanviz.cli.train.train_and_report", lambda *a, **k: trained.append(a[2]) or 0)
    rc, _, err, escaped = cli(["train", "--data-dir", str(wikitext_dir), *SPLITS, "--max-vocab", "512", *TINY_MODEL,
                               "--steps", "1", "--no-store", "--out", str(tmp_path / "run")])
    assert escaped is None and rc == 0 and trained, err
    assert trained[0].vocab_size == 512


def test_bench_out_a_folder_is_refused_up_front(home, tmp_path, monkeypatch):
    monkeypatch.setattr("spanviz.cli.bench.run_benchmarks", lambda **k: pytest.fail("benchmarks ran"))
    folder = tmp_path / "results"
    folder.mkdir()
    rc, _, err, escaped = cli(["bench", "--only", "fp8", "--quick", "--out", str(folder)])
    assert escaped is None and rc == 2
    line = _one_error_line(err, "bench")
    assert "--out" in line and "folder" in line and ".tmp" not in line, line


def test_bench_data_dir_is_refused_when_no_chosen_section_reads_it(home, tmp_path, wikitext_dir, monkeypatch):
    """``bench --only notebooks --data-dir DIR`` checked the folder, then benchmarked random tokens."""
    given = []
    monkeypatch.setattr("spanviz.cli.bench.run_benchmarks", lambda **k: given.append(k) or {})
    rc, _, err, _ = cli(["bench", "--only", "notebooks", "--quick", "--data-dir", str(wikitext_dir)])
    assert rc == 2 and not given
    line = _one_error_line(err, "bench")
    assert "--data-dir" in line and "notebooks" in line and "core" in line, line
    rc, _, err, _ = cli(["bench", "--only", "notebooks,sweep", "--quick", "--data-dir", str(wikitext_dir)])
    assert rc == 0 and given[-1]["data_dir"] == str(wikitext_dir), err


@pytest.mark.parametrize("panel_name", ["SpansPanel", "LocalGlobalPanel", "FP8Panel"])
@pytest.mark.parametrize("kwargs, named", [({"probe_every": 0}, "probe_every"), ({"probe_every": 2.5}, "probe_every"),
                                           ({"store": "bogus"}, "store"), ({"store": 3}, "store"),
                                           ({"model_cfg": {}}, "model_cfg"), ({"model_cfg": "tiny"}, "model_cfg"),
                                           ({"train_cfg": {"steps": 3}}, "train_cfg")])
def test_panels_refuse_bad_arguments_when_made(home, monkeypatch, panel_name, kwargs, named):
    import spanviz.widgets as widgets

    if "probe_every" in kwargs and panel_name == "FP8Panel":
        pytest.skip("FP8Panel has no probe_every")
    def attach(*args, **kwargs):
        raise RuntimeError("the panel was built up to its training part before refusing")

    monkeypatch.setattr("spanviz.widgets.panel.Panel._attach_training", attach)
    with pytest.raises(ValueError, match=named):
        getattr(widgets, panel_name)(**kwargs, static=True)


def test_weights_path_refuses_a_key_with_a_trailing_newline(tmp_path):
    from spanviz.store import ResultsStore

    store = ResultsStore(tmp_path)
    for key in ("a" * 64 + "\n", "a" * 64 + "\r\n", "\n" + "a" * 64, "a" * 64 + " "):
        for door in (store.weights_path, store.path, store.has_weights):
            with pytest.raises(ValueError, match="key must be 64 lowercase hex digits"):
                door(key)
    assert store.weights_path("a" * 64).name == "a" * 64 + ".pt"


@pytest.mark.parametrize("forged", ["9999-12-31T23:59:59+00:00", "zzz", "9", "2026-13-45T00:00:00+00:00", ""])
def test_find_prefers_the_latest_real_start_over_a_forged_one(tmp_path, forged):
    """``started_utc`` is free text from a file: a forged "9999-…" won find()'s latest-start preference."""
    from test_replay import OFFLINE, ONLINE, make_config, make_record

    from spanviz.store import ResultsStore
    from spanviz.store.keys import config_key

    store = ResultsStore(tmp_path)
    real = make_record(make_config(OFFLINE, ("aa", "bb")), started="2026-11-20T00:00:00+00:00")
    fake = make_record(make_config(OFFLINE, ("xx", "yy")), started=forged)
    for record in (real, fake):
        store.put(record)
    found = store.find(make_config(ONLINE, ("cc", "dd")))
    assert found is not None and found.key == config_key(real.config), forged


def test_reads_data_names_the_sections_that_take_a_data_dir():
    import importlib
    import inspect

    from spanviz.bench import READS_DATA, SECTIONS

    takes = {name for name, (module, func) in SECTIONS.items()
             if "data_dir" in inspect.signature(getattr(importlib.import_module(module), func)).parameters}
    assert takes == set(READS_DATA)


def test_a_panels_train_checks_the_results_stores_space_before_training(tmp_path, monkeypatch):
    """Finding 12 in the panels' runner: a full store was found when the finished run was put there."""
    from test_panel_replay import SMALL, TINY_TRAIN, FakeData

    from spanviz.store import ResultsStore
    from spanviz.widgets.specs import RunSpec
    from spanviz.widgets.training import TrainingPanel

    store = ResultsStore(tmp_path / "store")
    real = __import__("shutil").disk_usage
    monkeypatch.setattr("spanviz.files.shutil.disk_usage",
                        lambda path: Usage(10**9, 10**9, 0) if Path(path) == store.root else real(path))
    built = []
    panel = TrainingPanel(lambda: [RunSpec("tiny GPT", SMALL, TINY_TRAIN)], data=FakeData(), store=store, static=True,
                          trainer_factory=lambda spec, data: built.append(spec) or pytest.fail("trained"))
    with pytest.raises(ValueError, match=r"results store.*MiB free"):
        panel.train(blocking=True)
    assert not built and "MiB free" in panel.error.value
