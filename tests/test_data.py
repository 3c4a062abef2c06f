"""Tests for spanviz.data on the real offline WikiText-2 copy (validation + test splits) and small temp folders."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import datasets  # noqa: F401  imported first on purpose: the in-process hub test needs it already imported
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spanviz import settings as split_policy  # SPANVIZ_HOME and the split policy (hypothesis has `settings`)
from spanviz.data import prepare_tokens
from spanviz.data import tokens as tokens_module
from spanviz.data.batches import get_batch, iter_eval_batches
from spanviz.data.hub import HubUnavailableError
from spanviz.data.tokenizers import ByteTokenizer, WordTokenizer, make_tokenizer, tokenizer_from_dict
from spanviz.data.wikitext import load_wikitext2
from spanviz.settings import DATA_SOURCE_FILE, remembered_data_source, splits_from_env

REPO = Path(__file__).resolve().parents[1]
VALID_TOKENS, TEST_TOKENS = 217_646, 245_569  # word tokens, one <eos> per line (README of the shared copy)
VALID_LINES, TEST_LINES = 3_760, 4_358
OFFLINE = {"train": "validation", "eval": "test"}


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """Every test gets its own SPANVIZ_HOME and no data-dir / offline settings from the caller's shell."""
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path / "spanviz-home"))
    for name in ("SPANVIZ_WIKITEXT_DIR", "SPANVIZ_OFFLINE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def valid_lines(wikitext_dir) -> list[str]:
    return (wikitext_dir / "valid.txt").read_text(encoding="utf-8").split("\n")[:-1]


# ---- loading --------------------------------------------------------------------------------------


def test_local_folder_with_offline_splits_gives_documented_counts(wikitext_dir, tmp_path):
    corpus = load_wikitext2(wikitext_dir, splits={"train": "valid", "eval": "test"})
    assert corpus.splits == OFFLINE  # the alias is normalised and the splits are recorded
    assert corpus.source == str(wikitext_dir.resolve())
    assert corpus.files == {"train": ["valid.txt"], "eval": ["test.txt"]}
    assert (len(corpus["train"]), len(corpus["eval"])) == (VALID_LINES, TEST_LINES)
    assert corpus["train"][1] == " = Homarus gammarus = "  # lines kept as in the file, blank ones included
    assert corpus["train"][0].strip() == ""

    tokens = prepare_tokens(wikitext_dir, splits=OFFLINE, cache_dir=tmp_path / "tokens")
    assert tokens.train_ids.shape == (VALID_TOKENS,) and tokens.eval_ids.shape == (TEST_TOKENS,)
    assert tokens.train_ids.dtype == torch.long and tokens.eval_ids.dtype == torch.long
    assert int((tokens.train_ids == tokens.tokenizer.eos_id).sum()) == VALID_LINES
    record = json.loads(json.dumps(tokens.describe()))  # JSON-ready for the run record
    assert record["splits"] == OFFLINE
    assert record["n_tokens"] == {"train": VALID_TOKENS, "eval": TEST_TOKENS}
    assert record["vocab_size"] == tokens.vocab_size == len(set(" ".join(corpus["train"]).split()) | {"<eos>"})
    # The text hash of a local file is the file's own sha256 (published in the shared copy's README).
    assert record["text_sha256"]["train"] == "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8"


def test_data_dir_from_environment(wikitext_dir, monkeypatch):
    monkeypatch.setenv("SPANVIZ_WIKITEXT_DIR", str(wikitext_dir))
    corpus = load_wikitext2(splits={"eval": "test"})
    assert corpus.source == str(wikitext_dir.resolve())
    assert list(corpus) == ["eval"] and len(corpus["eval"]) == TEST_LINES


def test_missing_train_split_says_what_to_do(wikitext_dir):
    start = time.perf_counter()
    with pytest.raises(ValueError) as info:
        load_wikitext2(wikitext_dir)  # default splits want train, which the shared copy lacks
    assert time.perf_counter() - start < 5
    message = str(info.value)
    assert "'train'" in message and str(wikitext_dir.resolve()) in message
    assert "train.txt" in message and "wiki.train.tokens" in message  # which files were looked for
    assert "--train-split validation" in message
    assert "validation, test" in message  # which splits are there


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"config": "wikitext-103-v1"}, "config"),
        ({"splits": {"training": "train"}}, "role"),
        ({"splits": {"train": "dev"}}, "splits['train']"),
        ({"splits": {}}, "splits"),
        ({"data_dir": "/no/such/folder"}, "data_dir"),
    ],
)
def test_bad_load_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field.replace("[", r"\[")):
        load_wikitext2(**kwargs)


def _hanging_server() -> socket.socket:
    """A TCP socket that accepts connections into its backlog but never answers: a hub that hangs."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    return server


@pytest.mark.parametrize("scenario", ["offline-env", "hub-hangs"])
def test_unreachable_hub_fails_fast_in_fresh_process(scenario, tmp_path):
    """A fresh interpreter (HF reads its offline switch at import) must fail within seconds, not ~25 s."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"SPANVIZ_WIKITEXT_DIR", "SPANVIZ_OFFLINE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"}}
    env.update(HF_HOME=str(tmp_path / "hf"), SPANVIZ_HOME=str(tmp_path / "home"), PYTHONPATH=str(REPO))
    server = _hanging_server()
    env["HF_ENDPOINT"] = "http://127.0.0.1:%d" % server.getsockname()[1]  # never the real hub
    if scenario == "offline-env":
        env["SPANVIZ_OFFLINE"] = "1"
    script = textwrap.dedent("""
        import json, time
        from spanviz.data.wikitext import load_wikitext2
        start = time.perf_counter()
        try:
            load_wikitext2()
            result = {"error": None}
        except Exception as error:
            result = {"error": type(error).__name__, "message": str(error)}
        result["seconds"] = time.perf_counter() - start
        print(json.dumps(result))
    """)
    with server:
        done = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["error"] == "HubUnavailableError", result
    assert result["seconds"] < 10, result
    for hint in ("data_dir", "SPANVIZ_WIKITEXT_DIR", "spanviz prepare-data", "--train-split validation"):
        assert hint in result["message"]
    if scenario == "hub-hangs":  # detected by the probe, then the (empty) HF cache was tried offline
        assert "unreachable" in result["message"] and "timed out" in result["message"]
    else:  # offline requested: the hub is not contacted at all
        assert "offline mode is on" in result["message"] and "unreachable" not in result["message"]


def test_unreachable_hub_fails_fast_when_datasets_already_imported(monkeypatch):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    closed_port = probe.getsockname()[1]
    probe.close()  # nothing listens there: connection refused
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port}")
    for offline in (None, True):
        start = time.perf_counter()
        with pytest.raises(HubUnavailableError, match="SPANVIZ_OFFLINE=1"):
            load_wikitext2(splits=OFFLINE, offline=offline)
        assert time.perf_counter() - start < 5


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def test_wiki_tokens_layout_and_raw_config(tmp_path, valid_lines):
    folder = tmp_path / "wikitext-2"
    _write(folder / "wiki.train.tokens", valid_lines[:50])
    _write(folder / "wiki.valid.tokens", valid_lines[50:80])
    _write(folder / "wiki.valid.raw", ["Raw text , not tokenized"])
    corpus = load_wikitext2(folder)  # default splits: train -> train, eval -> validation
    assert corpus.splits == {"train": "train", "eval": "validation"}
    assert corpus["train"] == valid_lines[:50] and corpus["eval"] == valid_lines[50:80]
    assert corpus.files == {"train": ["wiki.train.tokens"], "eval": ["wiki.valid.tokens"]}

    raw = load_wikitext2(folder, config="wikitext-2-raw-v1", splits={"eval": "valid"})
    assert raw["eval"] == ["Raw text , not tokenized"]


def test_parquet_layout_like_the_hub(tmp_path, valid_lines):
    folder = tmp_path / "snapshot"
    for split, rows in {"validation": valid_lines[:40], "test": valid_lines[40:70]}.items():
        # Hub rows end in "\n" except blank ones, which are "".
        texts = [line + "\n" if line.strip() else "" for line in rows]
        path = folder / "wikitext-2-v1" / f"{split}-00000-of-00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"text": texts}), path)
    corpus = load_wikitext2(folder, splits=OFFLINE)
    assert corpus.files["train"] == ["wikitext-2-v1/validation-00000-of-00001.parquet"]
    assert [line.split() for line in corpus["train"]] == [line.split() for line in valid_lines[:40]]
    assert len(corpus["eval"]) == 30
    tokens = prepare_tokens(folder, splits=OFFLINE, cache_dir=tmp_path / "tokens")
    assert tokens.train_ids.numel() == sum(len(line.split()) + 1 for line in valid_lines[:40])


# ---- tokenizers -----------------------------------------------------------------------------------


def test_word_tokenizer_round_trip_and_vocabulary_order():
    lines = [" = Title = ", " ", " the cat sat on the mat . "]
    tokenizer = WordTokenizer().fit(lines)
    # <unk>, <eos>, then by count; "=" and "the" both occur twice and "=" appears first.
    assert tokenizer.itos[:4] == ["<unk>", "<eos>", "=", "the"]
    ids = tokenizer.encode(lines)
    assert ids.dtype == torch.long and ids.shape == (3 + 1 + 1 + 7 + 1,)
    assert tokenizer.decode(ids) == "= Title =\n\nthe cat sat on the mat .\n"
    assert tokenizer.token_strings(ids[:4]) == ["=", "Title", "=", "<eos>"]
    assert tokenizer.encode(["the zebra"], add_eos=False).tolist() == [tokenizer.stoi["the"], tokenizer.unk_id]


def test_word_tokenizer_cap_keeps_most_frequent_and_maps_the_rest_to_unk():
    tokenizer = WordTokenizer(max_vocab=4).fit(["a b b c c c", "d"])
    assert tokenizer.itos == ["<unk>", "<eos>", "c", "b"]
    unk, eos = tokenizer.unk_id, tokenizer.eos_id
    assert tokenizer.encode(["a d c", "b"]).tolist() == [unk, unk, 2, eos, 3, eos]
    assert WordTokenizer(max_vocab=3).fit(["x y", "y x"]).itos == ["<unk>", "<eos>", "x"]  # tie: first seen


def test_word_tokenizer_cap_on_real_text(valid_lines):
    tokenizer = WordTokenizer(max_vocab=1000).fit(valid_lines)
    assert tokenizer.vocab_size == 1000
    counts = Counter(word for line in valid_lines for word in line.split())
    counts.pop("<unk>")
    kept = set(tokenizer.itos[2:])
    assert min(counts[w] for w in kept) >= max(c for w, c in counts.items() if w not in kept)
    ids = tokenizer.encode(valid_lines)
    assert ids.numel() == VALID_TOKENS
    assert int((ids == tokenizer.unk_id).sum()) == sum(c for w, c in Counter(
        word for line in valid_lines for word in line.split()).items() if w not in kept)


def test_tokenizer_serialisation_round_trip(valid_lines):
    word = WordTokenizer(max_vocab=500).fit(valid_lines[:300])
    restored = tokenizer_from_dict(json.loads(json.dumps(word.to_dict())))
    assert isinstance(restored, WordTokenizer) and restored.itos == word.itos and restored.max_vocab == 500
    assert torch.equal(restored.encode(valid_lines[300:400]), word.encode(valid_lines[300:400]))
    assert isinstance(tokenizer_from_dict(ByteTokenizer().to_dict()), ByteTokenizer)
    with pytest.raises(ValueError, match="kind"):
        tokenizer_from_dict({"kind": "bpe"})


words = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc")),
                min_size=1, max_size=8).filter(lambda w: w.split() == [w] and w not in ("<eos>", "<unk>"))
word_lines = st.lists(st.lists(words, max_size=6).map(" ".join), max_size=8)


@settings(max_examples=60, deadline=None)
@given(lines=word_lines)
def test_word_tokenizer_round_trip_property(lines):
    tokenizer = WordTokenizer().fit(lines)
    ids = tokenizer.encode(lines)
    assert ids.numel() == sum(len(line.split()) + 1 for line in lines)
    assert tokenizer.decode(ids) == "".join(" ".join(line.split()) + "\n" for line in lines)


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.text(max_size=20), max_size=6))
def test_byte_tokenizer_round_trip_property(lines):
    tokenizer = ByteTokenizer()
    ids = tokenizer.encode(lines)
    assert ids.dtype == torch.long and bool(((ids >= 0) & (ids < 256)).all())
    assert tokenizer.decode(ids) == "".join(line + "\n" for line in lines)


def test_byte_tokenizer_non_ascii():
    tokenizer = make_tokenizer("byte")
    text = "naïve café, 日本語 🙂"
    ids = tokenizer.encode([text])
    assert ids.numel() == len(text.encode("utf-8")) + 1 and ids[-1].item() == ord("\n")
    assert tokenizer.decode(ids) == text + "\n"
    assert tokenizer.token_strings(ids[:3]) == ["n", "a", "<0xC3>"]
    assert tokenizer.decode(ids[:3]) == "na\ufffd"  # half a character decodes to the replacement char


def test_tokenizer_misuse_raises():
    with pytest.raises(ValueError, match="kind='bpe'"):
        make_tokenizer("bpe")
    for bad in (2, 0, True, 3.5):
        with pytest.raises(ValueError, match="max_vocab"):
            make_tokenizer("word", max_vocab=bad)
    with pytest.raises(ValueError, match="max_vocab"):
        make_tokenizer("byte", max_vocab=1000)
    with pytest.raises(RuntimeError, match="fit"):
        WordTokenizer().encode(["hello"])
    tokenizer = WordTokenizer().fit(["a b"])
    with pytest.raises(ValueError, match="lines"):
        tokenizer.encode("a b")  # a bare string would otherwise be read character by character
    with pytest.raises(ValueError, match="ids"):
        tokenizer.decode([0, 99])


# ---- the token cache ------------------------------------------------------------------------------


def test_second_call_is_a_cache_hit_without_tokenizing(wikitext_dir, tmp_path, monkeypatch, caplog):
    first = prepare_tokens(wikitext_dir, splits=OFFLINE, max_vocab=2000)
    assert not first.from_cache
    cache = tmp_path / "spanviz-home" / "tokens"  # the default: $SPANVIZ_HOME/tokens
    assert sorted(p.name for p in cache.iterdir()) == [f"{first.cache_key}.json", f"{first.cache_key}.pt", "texts"]

    def no_tokenizing(*args, **kwargs):
        raise AssertionError("a cache hit must not tokenize")

    monkeypatch.setattr(WordTokenizer, "encode", no_tokenizing)
    monkeypatch.setattr(WordTokenizer, "fit", no_tokenizing)
    with caplog.at_level(logging.INFO, logger="spanviz.data"):
        second = prepare_tokens(wikitext_dir, splits=OFFLINE, max_vocab=2000)
    assert second.from_cache and "token cache hit" in caplog.text
    assert torch.equal(second.train_ids, first.train_ids) and torch.equal(second.eval_ids, first.eval_ids)
    assert second.tokenizer.itos == first.tokenizer.itos
    assert second.describe() == first.describe()


def test_unchanged_split_files_are_not_read_again(wikitext_dir, tmp_path, monkeypatch, caplog):
    """A second call on the very same files (path, inode, size, mtime, ctime) takes the text's sha256 from the first
    read: no datasets, no text read; the same TokenData. A file changed in any way is read again."""
    folder = tmp_path / "copy"
    folder.mkdir()
    for name in ("valid.txt", "test.txt"):
        (folder / name).write_bytes((Path(wikitext_dir) / name).read_bytes())
    first = prepare_tokens(folder, splits=OFFLINE, max_vocab=2000)
    reads: list[str] = []
    real = tokens_module.load_wikitext2
    monkeypatch.setattr(tokens_module, "load_wikitext2", lambda *a, **k: (reads.append("read"), real(*a, **k))[1])
    with caplog.at_level(logging.INFO, logger="spanviz.data"):
        second = prepare_tokens(folder, splits=OFFLINE, max_vocab=2000)
    assert reads == [] and "text unchanged since it was read" in caplog.text
    assert second.from_cache and second.describe() == first.describe()
    assert torch.equal(second.train_ids, first.train_ids) and second.tokenizer.itos == first.tokenizer.itos
    # another tokenizer setting on the same files: the text's sha256 is still known
    assert prepare_tokens(folder, splits=OFFLINE, max_vocab=500).text_sha256 == first.text_sha256
    reads.clear()
    # the same size, another word: read again, another text, another key
    text = (folder / "valid.txt").read_text(encoding="utf-8")
    changed = text.replace(" the ", " thy ", 1)
    assert len(changed) == len(text) and changed != text
    (folder / "valid.txt").write_text(changed, encoding="utf-8")
    third = prepare_tokens(folder, splits=OFFLINE, max_vocab=2000)
    assert reads == ["read"] and not third.from_cache
    assert third.text_sha256["train"] != first.text_sha256["train"] and third.cache_key != first.cache_key
    assert third.text_sha256["eval"] == first.text_sha256["eval"]
    # refresh reads the text again, whatever is known
    reads.clear()
    prepare_tokens(folder, splits=OFFLINE, max_vocab=2000, refresh=True)
    assert reads == ["read"]


@pytest.mark.parametrize("damage", ["garbage", "other-sha", "empty"])
def test_a_damaged_known_text_entry_means_the_text_is_read_again(damage, wikitext_dir, tmp_path, caplog):
    cache = tmp_path / "tokens"
    first = prepare_tokens(wikitext_dir, splits=OFFLINE, cache_dir=cache)
    entry, = (cache / "texts").iterdir()
    if damage == "garbage":
        entry.write_bytes(b"\x00{not json")
    elif damage == "other-sha":
        record = json.loads(entry.read_text())
        record["text_sha256"]["train"] = "short"
        entry.write_text(json.dumps(record))
    else:
        entry.write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="spanviz.data"):
        again = prepare_tokens(wikitext_dir, splits=OFFLINE, cache_dir=cache)
    assert "the text is read again" in caplog.text
    assert again.describe() == first.describe()
    assert json.loads(entry.read_text())["text_sha256"] == first.text_sha256  # written again, right


def test_cache_key_depends_on_tokenizer_settings_and_text(wikitext_dir, tmp_path, valid_lines):
    cache = tmp_path / "tokens"
    keys = {
        prepare_tokens(wikitext_dir, splits=OFFLINE, cache_dir=cache, **settings).cache_key
        for settings in ({}, {"max_vocab": 5000}, {"tokenizer": "byte"})
    }
    other_text = tmp_path / "other"
    _write(other_text / "valid.txt", valid_lines[:100])
    _write(other_text / "test.txt", valid_lines[100:200])
    keys.add(prepare_tokens(other_text, splits=OFFLINE, cache_dir=cache).cache_key)
    assert len(keys) == 4
    assert len(list(cache.glob("*.pt"))) == 4 and not list(cache.glob("*.tmp"))  # no temp files left


@pytest.mark.parametrize("damage", ["truncate-ids", "garbage-ids", "garbage-manifest", "delete-ids"])
def test_corrupted_cache_is_detected_and_rebuilt(damage, wikitext_dir, tmp_path, caplog):
    cache = tmp_path / "tokens"
    original = prepare_tokens(wikitext_dir, splits=OFFLINE, cache_dir=cache, tokenizer="word")
    ids_file, manifest = cache / f"{original.cache_key}.pt", cache / f"{original.cache_key}.json"
    payload = ids_file.read_bytes()
    if damage == "truncate-ids":
        ids_file.write_bytes(payload[: len(payload) // 2])
    elif damage == "garbage-ids":
        ids_file.write_bytes(bytes(len(payload)))
    elif damage == "garbage-manifest":
        manifest.write_text('{"format": 1, "payload_sha')
    else:
        ids_file.unlink()

    with caplog.at_level(logging.WARNING, logger="spanviz.data"):
        rebuilt = prepare_tokens(wikitext_dir, splits=OFFLINE, cache_dir=cache, tokenizer="word")
    assert not rebuilt.from_cache
    assert any(r.levelno == logging.WARNING and "rebuilding" in r.getMessage() for r in caplog.records)
    assert torch.equal(rebuilt.train_ids, original.train_ids) and torch.equal(rebuilt.eval_ids, original.eval_ids)
    assert prepare_tokens(wikitext_dir, splits=OFFLINE, cache_dir=cache).from_cache  # repaired


def test_prepare_tokens_validates_before_loading(tmp_path):
    # data_dir does not exist, so each error below must come from argument checks made first.
    for kwargs, field in [({"tokenizer": "bpe"}, "kind"), ({"max_vocab": 1}, "max_vocab"),
                          ({"splits": {"train": "validation"}}, "splits")]:
        with pytest.raises(ValueError, match=field):
            prepare_tokens(tmp_path / "missing", **kwargs)


# ---- batches --------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 300), batch_size=st.integers(1, 8), context_length=st.integers(1, 32), seed=st.integers(0, 99))
def test_get_batch_windows_are_contiguous_and_shifted(n, batch_size, context_length, seed):
    context_length = min(context_length, n - 1)
    ids = torch.arange(n) * 7  # distinct values, so a window pins down its offset
    x, y = get_batch(ids, batch_size, context_length, torch.Generator().manual_seed(seed))
    assert x.shape == y.shape == (batch_size, context_length) and x.dtype == y.dtype == torch.long
    starts = x[:, 0] // 7
    assert bool(((starts >= 0) & (starts <= n - context_length - 1)).all())
    assert torch.equal(x, ids[starts[:, None] + torch.arange(context_length)])
    assert torch.equal(y, ids[starts[:, None] + torch.arange(1, context_length + 1)])


def test_get_batch_seeding_on_real_ids(wikitext_dir, tmp_path):
    ids = prepare_tokens(wikitext_dir, splits=OFFLINE, cache_dir=tmp_path / "tokens").train_ids
    a = get_batch(ids, 8, 64, torch.Generator().manual_seed(0))
    b = get_batch(ids, 8, 64, torch.Generator().manual_seed(0))
    c = get_batch(ids, 8, 64, torch.Generator().manual_seed(1))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])
    assert torch.equal(a[0][:, 1:], a[1][:, :-1])
    generator = torch.Generator().manual_seed(0)
    assert not torch.equal(get_batch(ids, 8, 64, generator)[0], get_batch(ids, 8, 64, generator)[0])


def test_eval_batches_are_fixed_and_cover_the_text():
    ids = torch.arange(1000)
    all_windows = list(iter_eval_batches(ids, batch_size=4, context_length=10))
    x = torch.cat([xb for xb, _ in all_windows])
    assert x.shape == (99, 10) and [xb.shape[0] for xb, _ in all_windows][-1] == 3  # 99 windows, last batch 3
    assert torch.equal(x.flatten(), torch.arange(990))  # consecutive, non-overlapping
    assert all(torch.equal(yb, xb + 1) for xb, yb in all_windows)

    sampled = list(iter_eval_batches(ids, batch_size=4, context_length=10, n_batches=3))
    assert [xb.shape for xb, _ in sampled] == [(4, 10)] * 3
    starts = torch.cat([xb[:, 0] for xb, _ in sampled])
    assert starts[0] == 0 and starts[-1] == 1000 - 10 - 1  # evenly spread over the whole text
    again = list(iter_eval_batches(ids, batch_size=4, context_length=10, n_batches=3))
    assert all(torch.equal(p[0], q[0]) for p, q in zip(sampled, again))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 2.5}, "batch_size"),
        ({"context_length": 0}, "context_length"),
        ({"context_length": 100}, "context_length=100"),  # ids too short for one window
        ({"ids": torch.zeros(4, 25, dtype=torch.long)}, "ids"),
        ({"ids": torch.rand(100)}, "ids"),
        ({"generator": 0}, "generator"),
    ],
)
def test_get_batch_rejects_bad_arguments(kwargs, field):
    args = {"ids": torch.arange(100), "batch_size": 2, "context_length": 8, "generator": torch.Generator()}
    args.update(kwargs)
    with pytest.raises(ValueError, match=field):
        get_batch(**args)
    if "generator" not in kwargs:
        args.pop("generator")
        with pytest.raises(ValueError, match=field):
            list(iter_eval_batches(**args))


def test_spanviz_home_default(monkeypatch):
    monkeypatch.delenv("SPANVIZ_HOME")
    assert split_policy.spanviz_home() == Path("~/.cache/spanviz").expanduser()


def test_a_poisoned_token_cache_is_rebuilt(wikitext_dir, tmp_path, caplog):
    """A payload ``weights_only`` refuses, with the manifest's hash updated to match, is rebuilt, not fatal."""
    import hashlib
    import pickle

    cache = tmp_path / "tokens"
    original = prepare_tokens(wikitext_dir, splits=OFFLINE, cache_dir=cache, max_vocab=500)
    ids_file, manifest_file = cache / f"{original.cache_key}.pt", cache / f"{original.cache_key}.json"
    poison = pickle.dumps(subprocess.Popen)  # unpickling would import and reference arbitrary code
    ids_file.write_bytes(poison)
    manifest = json.loads(manifest_file.read_text())
    manifest["payload_sha256"] = hashlib.sha256(poison).hexdigest()
    manifest_file.write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING, logger="spanviz.data"):
        rebuilt = prepare_tokens(wikitext_dir, splits=OFFLINE, cache_dir=cache, max_vocab=500)
    assert not rebuilt.from_cache and "rebuilding" in caplog.text
    assert torch.equal(rebuilt.train_ids, original.train_ids)
    assert prepare_tokens(wikitext_dir, splits=OFFLINE, cache_dir=cache, max_vocab=500).from_cache


def test_an_unwritable_token_cache_costs_time_not_the_data(wikitext_dir, tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")  # the cache folder cannot be created under a file
    with caplog.at_level(logging.WARNING, logger="spanviz.data"):
        got = prepare_tokens(wikitext_dir, splits=OFFLINE, cache_dir=blocker / "tokens", max_vocab=500)
    assert got.train_ids.numel() == VALID_TOKENS and "could not cache" in caplog.text


def test_prepare_data_remembers_a_folder_and_its_splits(wikitext_dir, tmp_path, monkeypatch, caplog):
    for name in ("SPANVIZ_TRAIN_SPLIT", "SPANVIZ_EVAL_SPLIT"):  # scripts/setup.sh exports them
        monkeypatch.delenv(name, raising=False)
    assert remembered_data_source() is None
    assert split_policy.resolve_data_source() == (None, dict(split_policy.DEFAULT_SPLITS))
    split_policy.remember_data_source(wikitext_dir, OFFLINE)
    folder, splits = split_policy.resolve_data_source()
    assert folder == str(wikitext_dir.resolve()) and splits == OFFLINE
    assert splits_from_env(local=False) == OFFLINE  # the notebooks' default follows it too
    assert load_wikitext2(splits={"eval": "test"}).source == str(wikitext_dir.resolve())
    # explicit arguments and the environment come first
    assert split_policy.resolve_data_source(tmp_path, "test", None) == (str(tmp_path), {"train": "test", "eval": "validation"})
    monkeypatch.setenv("SPANVIZ_WIKITEXT_DIR", str(tmp_path))
    assert split_policy.resolve_data_source() == (str(tmp_path), dict(split_policy.DEFAULT_SPLITS))
    monkeypatch.delenv("SPANVIZ_WIKITEXT_DIR")
    # a damaged or stale file is ignored with a warning
    (tmp_path / "spanviz-home" / DATA_SOURCE_FILE).write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="spanviz.data"):
        assert remembered_data_source() is None
    assert "ignoring" in caplog.text
    with pytest.raises(ValueError, match="not a folder"):
        split_policy.remember_data_source(tmp_path / "missing", OFFLINE)
