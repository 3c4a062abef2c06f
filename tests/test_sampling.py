"""spanviz.sampling: the definition of temperature / top-k / greedy sampling, its seeding, context cropping and
input checks, on a small TinyGPT and on stub models whose logits the test fixes."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from torch import nn

from spanviz.data.tokenizers import UNK, WordTokenizer
from spanviz.model import GPTConfig, TinyGPT
from spanviz.sampling import generate, sample_text

V = 40


class TableModel(nn.Module):
    """Next-token logits looked up from the last token: ``table[idx]`` (B, T, V); records every call."""

    def __init__(self, table: torch.Tensor, context_length: int = 16) -> None:
        super().__init__()
        self.table = table  # (V, V): row = the current token, columns = the next token's logits
        self.cfg = SimpleNamespace(vocab_size=table.shape[-1], context_length=context_length)
        self.calls: list[tuple[torch.Tensor, bool, bool]] = []

    def forward(self, idx: torch.Tensor) -> tuple[torch.Tensor, None]:
        self.calls.append((idx.clone(), self.training, torch.is_grad_enabled()))
        return self.table[idx], None


def fixed_logits(logits: list[float], context_length: int = 16) -> TableModel:
    """A model whose next-token logits are ``logits`` whatever the input."""
    row = torch.tensor(logits)
    return TableModel(row.expand(len(logits), -1).clone(), context_length)


@pytest.fixture(scope="module")
def model() -> TinyGPT:
    torch.manual_seed(0)
    m = TinyGPT(GPTConfig(vocab_size=V, context_length=8, n_layer=1, n_head=2, d_model=16))
    # an output layer of its own (untied) with logits of std ~2: the next token depends on the context and is
    # neither near-uniform (a fresh model's) nor near-certain
    m.lm_head.weight = nn.Parameter(torch.randn(V, 16) * 0.5)
    return m.eval()


PROMPT = torch.tensor([3, 1, 4, 1, 5])


def greedy_reference(m: nn.Module, idx: torch.Tensor, n: int) -> list[int]:
    """Argmax decoding written out: the last context_length tokens in, the argmax of the last position out."""
    ids = idx.tolist()
    for _ in range(n):
        with torch.no_grad():
            logits, _ = m(torch.tensor([ids[-m.cfg.context_length:]]))
        ids.append(int(logits[0, -1].argmax()))
    return ids


def test_same_seed_same_text_other_seed_other_text(model: TinyGPT) -> None:
    a = generate(model, PROMPT, 30, temperature=1.0, seed=7)
    b = generate(model, PROMPT, 30, temperature=1.0, seed=7)
    c = generate(model, PROMPT, 30, temperature=1.0, seed=8)
    assert a.shape == (len(PROMPT) + 30,) and a.dtype == torch.long
    assert a[: len(PROMPT)].tolist() == PROMPT.tolist()
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_global_random_state_is_neither_read_nor_changed(model: TinyGPT) -> None:
    torch.manual_seed(1)
    state = torch.get_rng_state()
    a = generate(model, PROMPT, 20, seed=3)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(2)
    assert torch.equal(generate(model, PROMPT, 20, seed=3), a)


def test_greedy_and_top_k_1_are_argmax_decoding(model: TinyGPT) -> None:
    expected = greedy_reference(model, PROMPT, 12)
    assert generate(model, PROMPT, 12, greedy=True).tolist() == expected
    for seed in range(3):
        assert generate(model, PROMPT, 12, top_k=1, temperature=1.5, seed=seed).tolist() == expected
    sampled = generate(model, PROMPT, 12, temperature=1.5, seed=0).tolist()
    assert sampled != expected  # the reference is not what sampling gives anyway


def test_top_k_only_emits_the_k_most_likely_tokens() -> None:
    g = torch.Generator().manual_seed(0)
    table = torch.randn(V, V, generator=g) * 3
    stub = TableModel(table)
    k = 5
    out = generate(stub, torch.randint(0, V, (64, 1), generator=g), 25, temperature=5.0, top_k=k, seed=0)
    allowed = torch.topk(table, k, dim=-1).indices  # (V, k): the k most likely next tokens after each token
    prev, nxt = out[:, :-1].flatten(), out[:, 1:].flatten()
    assert (allowed[prev] == nxt.unsqueeze(-1)).any(-1).all()
    # not greedy in disguise: after the same token, several of its k candidates were drawn
    assert max(len(set(nxt[prev == t].tolist())) for t in prev.unique().tolist()) > 1


def _counts(ids: torch.Tensor, n: int) -> np.ndarray:
    return np.bincount(ids.numpy(), minlength=n)


def softmax_counts(logits: torch.Tensor, temperature: float, draws: int) -> np.ndarray:
    """Expected counts of ``draws`` draws from softmax(logits / temperature), in float64 (numpy, not the code under
    test)."""
    z = logits.double().numpy() / temperature
    p = np.exp(z - z.max())
    return p / p.sum() * draws


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_temperature_draws_follow_softmax_of_logits_over_t(temperature: float) -> None:
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5])
    draws = 20_000
    out = generate(fixed_logits(logits.tolist()), torch.zeros(draws, 1, dtype=torch.long), 1,
                   temperature=temperature, seed=0)
    observed = _counts(out[:, 1], len(logits))
    assert chisquare(observed, softmax_counts(logits, temperature, draws)).pvalue > 1e-3
    # the same test rejects the untempered distribution (so it cannot pass by accident)
    assert chisquare(observed, softmax_counts(logits, 1.0, draws)).pvalue < 1e-9


def test_top_k_draws_follow_the_renormalised_top_k_softmax() -> None:
    logits = torch.tensor([0.3, 2.0, -0.5, 1.0, 1.5, 0.0])
    draws, k, temperature = 20_000, 3, 0.7
    out = generate(fixed_logits(logits.tolist()), torch.zeros(draws, 1, dtype=torch.long), 1,
                   temperature=temperature, top_k=k, seed=1)
    observed = _counts(out[:, 1], len(logits))
    top = torch.topk(logits, k).indices
    assert set(np.flatnonzero(observed).tolist()) == set(top.tolist())
    assert chisquare(observed[top.numpy()], softmax_counts(logits[top], temperature, draws)).pvalue > 1e-3
    assert chisquare(observed[top.numpy()], softmax_counts(logits[top], 1.0, draws)).pvalue < 1e-9


def test_the_model_sees_at_most_context_length_tokens_in_eval_mode_without_grad() -> None:
    stub = fixed_logits([0.0] * 10, context_length=4)
    stub.train()
    out = generate(stub, torch.tensor([1, 2, 3, 4, 5, 6]), 5, seed=0)
    assert [tuple(idx.shape) for idx, _, _ in stub.calls] == [(1, 4)] * 5
    for step, (idx, training, grad) in enumerate(stub.calls):
        assert idx[0].tolist() == out[2 + step: 6 + step].tolist()  # the last 4 tokens so far
        assert not training and not grad
    assert stub.training  # its mode is given back


def test_a_prompt_longer_than_the_context_is_cropped(model: TinyGPT) -> None:
    long = torch.arange(20) % V  # 20 > context_length 8: the model itself would refuse it
    with pytest.raises(ValueError, match="context_length"):
        model(long.unsqueeze(0))
    out = generate(model, long, 6, greedy=True)
    assert out[20:].tolist() == generate(model, long[-8:], 6, greedy=True)[8:].tolist()


def test_model_mode_is_restored_and_nothing_gets_a_gradient(model: TinyGPT) -> None:
    model.train()
    try:
        out = generate(model, PROMPT.unsqueeze(0).repeat(2, 1), 4, seed=0)
        assert model.training
    finally:
        model.eval()
    assert out.shape == (2, len(PROMPT) + 4) and not out.requires_grad
    assert all(p.grad is None for p in model.parameters())
    generate(model, PROMPT, 2, seed=0)
    assert not model.training


def test_non_finite_logits_are_named() -> None:
    with pytest.raises(ValueError, match="not finite"):
        generate(fixed_logits([0.0, float("nan"), 1.0]), torch.tensor([0]), 3, seed=0)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"temperature": 0.0}, "temperature"), ({"temperature": -1.0}, "temperature"),
    ({"temperature": float("nan")}, "temperature"), ({"temperature": float("inf")}, "temperature"),
    ({"top_k": 0}, "top_k"), ({"top_k": 11}, "top_k"), ({"top_k": 2.5}, "top_k"),
    ({"max_new_tokens": 0}, "max_new_tokens"), ({"max_new_tokens": 1.5}, "max_new_tokens"),
    ({"seed": -1}, "seed"), ({"seed": True}, "seed"), ({"greedy": "yes"}, "greedy"),
    ({"idx": torch.tensor([], dtype=torch.long)}, "idx"), ({"idx": torch.tensor([0.5])}, "idx"),
    ({"idx": torch.zeros(1, 1, 1, dtype=torch.long)}, "idx"), ({"idx": torch.tensor([10])}, "idx"),
    ({"idx": torch.tensor([-1])}, "idx"), ({"idx": [1, 2]}, "idx"),
])
def test_bad_settings_raise_before_any_compute(kwargs: dict, field: str) -> None:
    stub = fixed_logits([0.0] * 10)
    args = {"idx": torch.tensor([1]), "max_new_tokens": 3, **kwargs}
    with pytest.raises(ValueError) as info:
        generate(stub, args.pop("idx"), args.pop("max_new_tokens"), **args)
    message = str(info.value)
    assert message.startswith(field)
    assert " must " in message and ", got " in message and not stub.calls  # what is allowed, what came
    if field != "idx":  # the value is named ("must be ..., got <value>")
        assert repr(kwargs[field]) in message


@pytest.fixture(scope="module")
def words() -> tuple[WordTokenizer, TinyGPT]:
    tokenizer = WordTokenizer().fit(["the cat sat on the mat", "a dog sat on the log ."])
    torch.manual_seed(0)
    m = TinyGPT(GPTConfig(vocab_size=tokenizer.vocab_size, context_length=8, n_layer=1, n_head=2, d_model=16))
    return tokenizer, m.eval()


def test_sample_text_reads_and_writes_the_tokenizer_s_words(words: tuple[WordTokenizer, TinyGPT]) -> None:
    tokenizer, m = words
    s = sample_text(m, tokenizer, "the zebra sat", 10, temperature=0.8, top_k=5, seed=4)
    assert s.prompt == f"the {UNK} sat"  # an unknown word is <unk>, as in training
    assert s.n_prompt == 3 and s.ids.shape == (13,)
    assert s.ids[:3].tolist() == [tokenizer.stoi["the"], tokenizer.unk_id, tokenizer.stoi["sat"]]
    assert s.continuation == tokenizer.decode(s.ids[3:]) and s.text == tokenizer.decode(s.ids)
    assert s.ids.tolist() == generate(m, s.ids[:3], 10, temperature=0.8, top_k=5, seed=4).tolist()
    again = sample_text(m, tokenizer, "the zebra sat", 10, temperature=0.8, top_k=5, seed=4)
    assert torch.equal(again.ids, s.ids) and again.text == s.text


@pytest.mark.parametrize(("prompt", "kwargs", "field"), [
    ("", {}, "prompt"), ("   ", {}, "prompt"), (["the"], {}, "prompt"),
    ("the", {"temperature": 0}, "temperature"), ("the", {"top_k": 10_000}, "top_k"),
])
def test_sample_text_bad_input(words: tuple[WordTokenizer, TinyGPT], prompt: object, kwargs: dict,
                               field: str) -> None:
    tokenizer, m = words
    with pytest.raises(ValueError, match=f"^{field}"):
        sample_text(m, tokenizer, prompt, 5, **kwargs)


def test_sample_text_refuses_another_data_s_tokenizer(words: tuple[WordTokenizer, TinyGPT]) -> None:
    _, m = words
    other = WordTokenizer().fit(["an entirely different little vocabulary"])
    with pytest.raises(ValueError, match="^tokenizer.vocab_size"):
        sample_text(m, other, "an", 5)
