"""What a person sees of sampling: SamplesView's texts follow its controls, several models side by side; and the
tokenizer a replayed run's token ids are read with (spanviz.data.tokens.run_tokenizer, TrainingPanel)."""

from __future__ import annotations

import html
from pathlib import Path

import pytest
import torch
from torch import nn

from spanviz.data.tokenizers import WordTokenizer
from spanviz.data.tokens import prepare_tokens, run_tokenizer
from spanviz.model import GPTConfig, TinyGPT
from spanviz.sampling import sample_text
from spanviz.widgets.sampling import SamplesView

LINES = ["the cat sat on the mat", "a dog sat on the log .", "the bird flew over the old house"]


def small_model(vocab_size: int, seed: int) -> TinyGPT:
    torch.manual_seed(seed)
    m = TinyGPT(GPTConfig(vocab_size=vocab_size, context_length=8, n_layer=1, n_head=2, d_model=16))
    m.lm_head.weight = nn.Parameter(torch.randn(vocab_size, 16) * 0.5)  # untied: context-dependent, not flat
    return m.eval()


@pytest.fixture(scope="module")
def tokenizer() -> WordTokenizer:
    return WordTokenizer().fit(LINES)


def shown(view: SamplesView, heading: str) -> str:
    """The text a person reads in a model's column (tags dropped, entities unescaped)."""
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", view.texts[heading].value))


def test_the_texts_follow_the_controls(tokenizer: WordTokenizer) -> None:
    model = small_model(tokenizer.vocab_size, 0)
    view = SamplesView(lambda: {"model A": (model, tokenizer)}, prompt="the cat", max_new_tokens=12,
                       temperature=1.0, top_k=None, seed=0)

    def expected(**changes: object) -> str:
        settings = {**view.settings(), **changes}
        return sample_text(model, tokenizer, view.controls["prompt"].value, **settings).text

    first = shown(view, "model A")
    assert first == "model A" + expected()
    view.controls["temperature"].value = 0.3
    assert shown(view, "model A") == "model A" + expected(temperature=0.3) != first
    view.controls["top_k"].value = 1  # the "1 (greedy)" stop
    greedy = sample_text(model, tokenizer, "the cat", 12, greedy=True).text
    assert shown(view, "model A") == "model A" + greedy
    view.controls["top_k"].value = 0  # "all"
    view.controls["seed"].value = 5
    assert view.settings() == {"max_new_tokens": 12, "temperature": 0.3, "top_k": None, "seed": 5}
    assert shown(view, "model A") == "model A" + expected()
    view.controls["prompt"].value = "the zebra"  # unknown word: shown as the model read it
    assert view.samples["model A"].prompt == "the <unk>"
    assert shown(view, "model A").startswith("model Athe <unk> ")


def test_models_side_by_side_share_prompt_and_seed(tokenizer: WordTokenizer) -> None:
    a, b = small_model(tokenizer.vocab_size, 0), small_model(tokenizer.vocab_size, 1)
    view = SamplesView(lambda: {"standard": (a, tokenizer), "variant": (b, tokenizer)}, prompt="a dog",
                       max_new_tokens=10, temperature=1.0, top_k=5, seed=3)
    assert [child for child in view.columns.children] == [view.texts["standard"], view.texts["variant"]]
    for heading, model in (("standard", a), ("variant", b)):
        alone = sample_text(model, tokenizer, "a dog", 10, temperature=1.0, top_k=5, seed=3)
        assert shown(view, heading) == heading + alone.text
    assert view.samples["standard"].continuation != view.samples["variant"].continuation


def test_refused_settings_and_models_are_said_in_place(tokenizer: WordTokenizer) -> None:
    model = small_model(tokenizer.vocab_size, 0)
    view = SamplesView(lambda: {"m": (model, tokenizer)}, prompt="the", top_k=None)
    view.controls["prompt"].value = "   "
    assert "prompt must hold at least one token" in shown(view, "m")
    view.controls["top_k"].value = 1000  # more than this vocabulary's size
    view.controls["prompt"].value = "the"
    assert shown(view, "m").startswith("mtop_k must be an integer in [1, ")

    def refuse() -> dict:
        raise ValueError("the run trained on other text")

    view.models_fn = refuse
    view.reload()
    assert "the run trained on other text" in view.error.value and view.columns.children == ()


@pytest.mark.parametrize(("kwargs", "field"), [({"temperature": 0.0}, "temperature"), ({"top_k": 0}, "top_k"),
                                               ({"max_new_tokens": 0}, "max_new_tokens"), ({"seed": -1}, "seed"),
                                               ({"prompt": None}, "prompt")])
def test_bad_first_values(tokenizer: WordTokenizer, kwargs: dict, field: str) -> None:
    calls = []
    with pytest.raises(ValueError, match=f"^{field} must"):
        SamplesView(lambda: calls.append(1) or {}, **kwargs)
    assert not calls


# ------------------------------------------------------------------------------------ the replayed run's tokenizer
OFFLINE = {"train": "validation", "eval": "test"}


def test_run_tokenizer_is_yours_for_the_same_text_and_rebuilt_for_another(
        wikitext_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPANVIZ_HOME", str(tmp_path / "home"))
    mine = prepare_tokens(wikitext_dir, splits=OFFLINE, max_vocab=500)
    assert run_tokenizer(mine.describe(), mine) is mine.tokenizer

    other = prepare_tokens(wikitext_dir, splits={"train": "test", "eval": "validation"}, max_vocab=500)
    rebuilt = run_tokenizer(other.describe(), mine, data_dir=wikitext_dir)  # e.g. a bundle run of another split
    assert rebuilt.itos == other.tokenizer.itos != mine.tokenizer.itos

    changed = {**other.describe(), "text_sha256": {"train": "0" * 64, "eval": "0" * 64}}
    with pytest.raises(ValueError, match="other text than the 'test' split"):
        run_tokenizer(changed, mine, data_dir=wikitext_dir)
    with pytest.raises(ValueError, match="^data_config must"):
        run_tokenizer({"splits": OFFLINE}, mine)
