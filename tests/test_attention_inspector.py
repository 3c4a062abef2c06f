"""Notebook 00's look inside a model (:class:`spanviz.widgets.attention.AttentionInspector`): what is drawn — the
tokens of the window on the axes, the window the slider picks, S with its masked triangle blank, P's rows summing to
one — and which model it is (replayed, training here, untrained)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from spanviz.data.tokenizers import ByteTokenizer
from spanviz.model import GPTConfig, TinyGPT
from spanviz.widgets.attention import SHOWN_POSITIONS, AttentionInspector

CFG = GPTConfig(vocab_size=256, context_length=40, n_layer=2, n_head=2, d_model=16)
TEXT = b"The game was released in Japan in 2011 , and in North America ."


class FakePanel:
    """What the inspector asks of a TrainingPanel: a replayed run's model and tokenizer (None: nothing replayed)."""

    def __init__(self, model=None):
        self.model, self.tokenizer = model, ByteTokenizer()

    def replayed_model(self, label):
        assert label == "tiny GPT"
        return self.model

    def replayed_tokenizer(self, label):
        return self.tokenizer


def data():
    return SimpleNamespace(eval_ids=torch.tensor(list(TEXT), dtype=torch.long), tokenizer=ByteTokenizer())


def test_the_window_is_drawn_with_its_tokens_and_the_slider_moves_it():
    inspector = AttentionInspector(FakePanel(), "tiny GPT", data(), CFG)
    assert inspector.shown == "an untrained model"
    fig = inspector.view.figure
    assert len(fig.data) == CFG.n_head
    labels = [f"{i}: {chr(b)}" for i, b in enumerate(TEXT[:SHOWN_POSITIONS])]
    assert list(fig.data[0].x) == labels and list(fig.data[1].y) == labels  # the tokens on both axes
    z = np.asarray(fig.data[0].z, dtype=float)
    assert z.shape == (SHOWN_POSITIONS, SHOWN_POSITIONS) and np.isnan(z[0, 1]) and not np.isnan(z[1, 0])
    assert "positions 0–23 of 40" in fig.layout.title.text and "untrained" in fig.layout.title.text

    inspector.controls["first"].value = 10
    fig = inspector.view.figure
    assert list(fig.data[0].x)[0] == f"10: {chr(TEXT[10])}" and len(fig.data[0].x) == SHOWN_POSITIONS
    np.testing.assert_array_equal(np.asarray(fig.data[1].z, dtype=float),
                                  inspector.views["logits S", 0][1, 10:34, 10:34])
    assert "positions 10–33 of 40" in fig.layout.title.text
    assert inspector.controls["first"].max == CFG.context_length - SHOWN_POSITIONS

    inspector.controls["first"].value = 0
    inspector.controls["what"].value = "pattern P"
    inspector.controls["layer"].value = 1
    p = np.asarray(inspector.view.figure.data[0].z, dtype=float)  # from position 0 every key of a row is shown
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(p, inspector.views["pattern P", 1][0, :24, :24])


def test_it_shows_the_replayed_model_else_the_one_training_here_and_says_which():
    torch.manual_seed(1)
    replayed = TinyGPT(CFG)
    with torch.no_grad():
        replayed.blocks[0].attn.W_Q.weight.mul_(30)  # a model whose logits are far from the untrained ones
    inspector = AttentionInspector(FakePanel(replayed), "tiny GPT", data(), CFG)
    assert "replayed from the store" in inspector.shown and "replayed" in inspector.view.figure.layout.title.text
    big = np.nanmax(np.abs(inspector.views["logits S", 0]))
    inspector.controls["untrained"].value = True
    assert inspector.shown == "an untrained model" and np.nanmax(np.abs(inspector.views["logits S", 0])) < big / 5

    trainer = SimpleNamespace(model=replayed, step_count=7)
    live = AttentionInspector(FakePanel(), "tiny GPT", data(), CFG, trainer=lambda: trainer)
    assert live.shown == "the model after 7 training steps"
    ((heading, (model, tokenizer)),) = live.models().items()
    assert model is not replayed and torch.equal(model.blocks[0].attn.W_Q.weight, replayed.blocks[0].attn.W_Q.weight)


def test_refuses_a_window_shorter_than_the_context():
    short = SimpleNamespace(eval_ids=torch.arange(10), tokenizer=ByteTokenizer())
    with pytest.raises(ValueError, match="context_length=40"):
        AttentionInspector(FakePanel(), "tiny GPT", short, CFG)
