"""A stranger's inputs to the public API (issue 39, finding 10 and the "done when"): one table of hostile inputs of
our own — NaN/inf tensors, wrong dtypes and devices, empty tensors, huge integers, strings and bools for numbers,
negative sizes — across spans, local_global, fp8, model, store, data and sampling.

Each case is ``(id, call, expected)``: ``"ok"`` (it must return), or a regular expression the ``ValueError`` must
match (a clean error names the argument). Anything else — another exception (a traceback), a return where an
error was expected (silent-wrong), or no answer within the timeout (a hang) — fails the case. The timeout marker
keeps a hang from hanging CI.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from spanviz.data.batches import eval_starts, get_batch
from spanviz.data.tokenizers import ByteTokenizer, WordTokenizer, make_tokenizer, translate_ids
from spanviz.fp8.casting import count_overflow, fake_quantize
from spanviz.fp8.core import alpha_agnostic, logit_bounds, scale_from_bound, spectral_norms_exact
from spanviz.local_global.core import causal_mask, dense_mask, head_mask_mod
from spanviz.local_global.probe import max_logits
from spanviz.model import GPTConfig, TinyGPT
from spanviz.sampling import generate
from spanviz.spans.config import SpanConfig
from spanviz.spans.core import decompose
from spanviz.spans.probe import principal_angle_cosines
from spanviz.store import ResultsStore
from spanviz.train.config import TrainConfig

NAN, INF = float("nan"), float("inf")
B, H, T, D = 1, 2, 5, 3  # decompose's small shapes: T > d, so the projectors are not the identity


def _qkv(**override: Any) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    t = {"dS": torch.randn(B, H, T, T, generator=g), "q": torch.randn(B, H, T, D, generator=g),
         "k": torch.randn(B, H, T, D, generator=g), "v": torch.randn(B, H, T, D, generator=g)}
    t.update(override)
    return t["dS"], t["q"], t["k"], t["v"]


def _poke(x: torch.Tensor, value: float) -> torch.Tensor:
    x = x.clone()
    x.view(-1)[3] = value
    return x


def _W(*shape: int, value: float | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    W = torch.randn(*shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    return W if value is None else _poke(W, value)


_MODEL: TinyGPT | None = None


def model() -> TinyGPT:
    global _MODEL
    if _MODEL is None:
        torch.manual_seed(0)
        _MODEL = TinyGPT(GPTConfig(vocab_size=11, context_length=8, n_layer=1, n_head=2, d_model=8))
    return _MODEL


def ids(*values: int) -> torch.Tensor:
    return torch.tensor([list(values)], dtype=torch.long)


def word_tok() -> WordTokenizer:
    return WordTokenizer().fit(["the cat sat", "the dog ran"])


def store_path(tmp: str = "/tmp") -> ResultsStore:
    return ResultsStore(tmp)


GOOD_KEY = "0" * 64
G = torch.Generator().manual_seed(0)
TOKENS = torch.arange(50)

CASES: list[tuple[str, Callable[[], Any], str]] = [
    # ---------------------------------------------------------------------------------------------- spans
    ("decompose float64", lambda: decompose(*[t.double() for t in _qkv()]), "ok"),
    ("decompose float16", lambda: decompose(*[t.half() for t in _qkv()]), "ok"),
    ("decompose NaN in dS", lambda: decompose(*_qkv(dS=_poke(_qkv()[0], NAN))), r"dS.*finite"),
    ("decompose NaN in q", lambda: decompose(*_qkv(q=_poke(_qkv()[1], NAN))), r"\bq\b.*finite"),
    ("decompose -inf in v", lambda: decompose(*_qkv(v=_poke(_qkv()[3], -INF))), r"\bv\b.*finite"),
    ("decompose int64 dS", lambda: decompose(*_qkv(dS=torch.ones(B, H, T, T, dtype=torch.long))), r"dS.*float"),
    ("decompose bool k", lambda: decompose(*_qkv(k=torch.ones(B, H, T, D, dtype=torch.bool))), r"\bk\b.*float"),
    ("decompose complex dS", lambda: decompose(*_qkv(dS=torch.ones(B, H, T, T, dtype=torch.complex64))),
     r"dS.*float"),
    ("decompose float8 q", lambda: decompose(*_qkv(q=_qkv()[1].to(torch.float8_e4m3fn))), r"\bq\b.*float"),
    ("decompose meta tensors", lambda: decompose(*[t.to("meta") for t in _qkv()]), r"dS.*device"),
    ("decompose q on meta, rest on cpu", lambda: decompose(*_qkv(q=_qkv()[1].to("meta"))), r"\bq\b.*device"),
    ("decompose T = 0", lambda: decompose(torch.ones(1, 0, 0), torch.ones(1, 0, 2), torch.ones(1, 0, 2),
                                          torch.ones(1, 0, 2)), r"dS.*(empty|at least)"),
    ("decompose a list for dS", lambda: decompose([[1.0]], *_qkv()[1:]), r"dS"),
    ("decompose ridge as a string", lambda: decompose(*_qkv(), ridge="0.1"), r"ridge"),
    ("decompose ridge 10**400", lambda: decompose(*_qkv(), ridge=10**400), r"ridge"),
    ("SpanConfig alphas 10**400", lambda: SpanConfig(alphas=(10**400, 0, 0, 0)), r"alphas"),
    ("SpanConfig alphas of bools", lambda: SpanConfig(alphas=(True, False, False, False)), r"alphas"),
    ("SpanConfig alphas 'abcd'", lambda: SpanConfig(alphas="abcd"), r"alphas"),
    ("SpanConfig alphas a dict", lambda: SpanConfig(alphas={"a0": 1}), r"alphas"),
    ("SpanConfig preset None", lambda: SpanConfig(preset=None), r"preset"),
    ("SpanConfig preset 'KV8'", lambda: SpanConfig(preset="KV8"), r"preset"),
    ("SpanConfig ridge -0.5", lambda: SpanConfig(ridge=-0.5), r"ridge"),
    ("SpanConfig layers [1.5]", lambda: SpanConfig(layers=[1.5]), r"layers"),
    ("principal angles with inf", lambda: principal_angle_cosines(_W(4, 2, value=INF), _W(4, 2)), r"\bX\b.*finite"),
    # ---------------------------------------------------------------------------------------------- local_global
    ("head_mask_mod window without n_local", lambda: head_mask_mod(window=3), r"n_local"),
    ("head_mask_mod n_local True", lambda: head_mask_mod(n_local=True, window=2), r"n_local"),
    ("head_mask_mod window 2.0", lambda: head_mask_mod(n_local=1, window=2.0), r"window"),
    ("head_mask_mod window '4'", lambda: head_mask_mod(n_local=1, window="4"), r"window"),
    ("head_mask_mod n_local -2", lambda: head_mask_mod(n_local=-2, window=2), r"n_local"),
    ("dense_mask T 0", lambda: dense_mask(causal_mask, 2, 0), r"\bT\b"),
    ("dense_mask H·T·T huge", lambda: dense_mask(causal_mask, 4, 10**6), r"\bT\b|n_head"),
    ("dense_mask on cuda without CUDA", lambda: dense_mask(causal_mask, 2, 4, device="cuda:0"), r"device"),
    ("dense_mask device 'gpu'", lambda: dense_mask(causal_mask, 2, 4, device="gpu"), r"device"),
    ("dense_mask a string as the mask", lambda: dense_mask("causal", 2, 4), r"mask_mod"),
    ("max_logits ids out of vocabulary", lambda: max_logits(model(), ids(0, 1, 11)), r"\bx\b.*\[0, 11\)"),
    ("max_logits ids ok", lambda: max_logits(model(), ids(0, 1, 10)), "ok"),
    # ---------------------------------------------------------------------------------------------- fp8
    ("spectral norms NaN in W_Q", lambda: spectral_norms_exact(_W(2, 8, 4, value=NAN), _W(2, 8, 4)), r"W_Q.*finite"),
    ("spectral norms inf in W_K", lambda: spectral_norms_exact(_W(2, 8, 4), _W(2, 8, 4, value=INF)), r"W_K.*finite"),
    ("spectral norms int64", lambda: spectral_norms_exact(torch.ones(2, 8, 4, dtype=torch.long), _W(2, 8, 4)),
     r"W_Q.*float"),
    ("spectral norms complex W_K", lambda: spectral_norms_exact(_W(2, 8, 4), _W(2, 8, 4).to(torch.complex64)),
     r"W_K.*float"),
    ("spectral norms meta", lambda: spectral_norms_exact(_W(2, 8, 4).to("meta"), _W(2, 8, 4).to("meta")),
     r"W_Q.*device"),
    ("spectral norms d_model 0", lambda: spectral_norms_exact(torch.ones(2, 0, 4), torch.ones(2, 0, 4)),
     r"W_Q.*(empty|at least)"),
    ("spectral norms float64", lambda: spectral_norms_exact(_W(2, 8, 4).double(), _W(2, 8, 4).double()), "ok"),
    ("spectral norms bfloat16", lambda: spectral_norms_exact(_W(2, 8, 4).bfloat16(), _W(2, 8, 4).bfloat16()), "ok"),
    ("scale underflows to 0", lambda: scale_from_bound(1e308, margin=100), r"scale"),
    ("scale overflows to inf", lambda: scale_from_bound(1e-320), r"scale"),
    ("scale margin 1e6", lambda: scale_from_bound(1.0, margin=1e6), r"scale|margin"),
    ("scale bound '5'", lambda: scale_from_bound("5"), r"bound"),
    ("scale bound True", lambda: scale_from_bound(True), r"bound"),
    ("scale bound a 2-vector", lambda: scale_from_bound(torch.tensor([1.0, 2.0])), r"bound"),
    ("scale bound a 0-d tensor", lambda: scale_from_bound(torch.tensor(3.0)), "ok"),
    ("scale power_of_two 'no'", lambda: scale_from_bound(3.0, power_of_two="no"), r"power_of_two"),
    ("logit bounds sigma '1'", lambda: logit_bounds("1", 16, 4, n_pairs=10, n_keys=10), r"sigma"),
    # huge counts are computed in the log domain (finding 8): a finite α, no overflow
    ("logit bounds n_keys 10**400", lambda: logit_bounds(1.0, 16, 4, n_pairs=10, n_keys=10**400), "ok"),
    ("alpha_agnostic n_pairs 10**400", lambda: alpha_agnostic(16, 10**400, 1e-3), "ok"),
    ("fake_quantize int tensor", lambda: fake_quantize(torch.ones(3, dtype=torch.long), 1.0), r"\bx\b.*float"),
    ("count_overflow a list", lambda: count_overflow([1.0, 2.0], 1.0), r"\bx\b|tensor"),
    # ---------------------------------------------------------------------------------------------- model
    ("GPTConfig d_model '64'", lambda: GPTConfig(d_model="64"), r"d_model"),
    ("GPTConfig vocab_size 0", lambda: GPTConfig(vocab_size=0), r"vocab_size"),
    ("GPTConfig n_head True", lambda: GPTConfig(n_head=True), r"n_head"),
    ("GPTConfig dropout NaN", lambda: GPTConfig(dropout=NAN), r"dropout"),
    ("GPTConfig context 10**400", lambda: GPTConfig(context_length=10**400), r"context_length"),
    ("forward id = vocab_size", lambda: model()(ids(1, 2, 11)), r"idx.*\[0, 11\)"),
    ("forward negative id", lambda: model()(ids(1, -1, 2)), r"idx.*\[0, 11\)"),
    ("forward float ids", lambda: model()(ids(1, 2).float()), r"idx.*integer"),
    ("forward bool ids", lambda: model()(ids(1, 0).bool()), r"idx.*integer"),
    ("forward empty sequence", lambda: model()(torch.zeros(1, 0, dtype=torch.long)), r"idx.*(empty|at least|T)"),
    ("forward ids on meta", lambda: model()(ids(1, 2).to("meta")), r"idx.*device"),
    ("forward targets out of vocabulary", lambda: model()(ids(1, 2), ids(3, 99)), r"targets.*\[0, 11\)"),
    ("forward targets of another shape", lambda: model()(ids(1, 2), ids(3)), r"targets.*shape"),
    ("forward a list", lambda: model()([[1, 2]]), r"idx"),
    ("forward ok", lambda: model()(ids(1, 2, 3), ids(2, 3, 4)), "ok"),
    # ---------------------------------------------------------------------------------------------- train config
    ("TrainConfig lr '1e-3'", lambda: TrainConfig(lr="1e-3"), r"\blr\b"),
    ("TrainConfig steps -1", lambda: TrainConfig(steps=-1), r"steps"),
    ("TrainConfig batch_size 1.0", lambda: TrainConfig(batch_size=1.0), r"batch_size"),
    # ---------------------------------------------------------------------------------------------- store
    ("weights_path key with a newline", lambda: store_path().weights_path(GOOD_KEY + "\n"), r"key"),
    ("weights_path key upper case", lambda: store_path().weights_path("A" * 64), r"key"),
    ("weights_path key 63 digits", lambda: store_path().weights_path("0" * 63), r"key"),
    ("weights_path key an int", lambda: store_path().weights_path(0), r"key"),
    ("weights_path key ok", lambda: store_path().weights_path(GOOD_KEY), "ok"),
    ("store key of a NaN config", lambda: ResultsStore.key({"lr": NAN}), r"NaN|finite|JSON|lr"),
    # ---------------------------------------------------------------------------------------------- data
    ("get_batch float ids", lambda: get_batch(TOKENS.float(), 2, 4, G), r"ids"),
    ("get_batch batch_size True", lambda: get_batch(TOKENS, True, 4, G), r"batch_size"),
    ("get_batch context 10**400", lambda: get_batch(TOKENS, 2, 10**400, G), r"context_length|ids"),
    ("get_batch batch -3", lambda: get_batch(TOKENS, -3, 4, G), r"batch_size"),
    ("get_batch generator None", lambda: get_batch(TOKENS, 2, 4, None), r"generator"),
    ("get_batch device 'cuda' without CUDA", lambda: get_batch(TOKENS, 2, 4, G, device="cuda"), r"device"),
    ("eval_starts n_windows 0", lambda: eval_starts(50, 4, n_windows=0), r"n_windows"),
    ("eval_starts n_tokens '50'", lambda: eval_starts("50", 4), r"n_tokens"),
    ("make_tokenizer 'bpe'", lambda: make_tokenizer("bpe"), r"kind|tokenizer"),
    ("make_tokenizer max_vocab -5", lambda: make_tokenizer("word", max_vocab=-5), r"max_vocab"),
    ("tokenizer encode a string", lambda: word_tok().encode("the cat"), r"lines"),
    ("tokenizer decode -1", lambda: word_tok().decode([-1]), r"ids"),
    ("tokenizer decode 1.0", lambda: word_tok().decode([1.0]), r"ids"),
    ("translate_ids word to byte", lambda: translate_ids([1], word_tok(), ByteTokenizer()), r"kind|source|target"),
    # ---------------------------------------------------------------------------------------------- sampling
    ("generate max_new_tokens 0", lambda: generate(model(), ids(1), 0), r"max_new_tokens"),
    ("generate max_new_tokens 10**12", lambda: generate(model(), ids(1), 10**12), r"max_new_tokens"),
    ("generate temperature NaN", lambda: generate(model(), ids(1), 2, temperature=NAN), r"temperature"),
    ("generate temperature '1'", lambda: generate(model(), ids(1), 2, temperature="1"), r"temperature"),
    ("generate top_k 12", lambda: generate(model(), ids(1), 2, top_k=12), r"top_k"),
    ("generate greedy 'yes'", lambda: generate(model(), ids(1), 2, greedy="yes"), r"greedy"),
    ("generate seed -1", lambda: generate(model(), ids(1), 2, seed=-1), r"seed"),
    ("generate prompt id 11", lambda: generate(model(), ids(11), 2), r"idx"),
    ("generate prompt on meta", lambda: generate(model(), ids(1).to("meta"), 2), r"idx.*device"),
    ("generate ok", lambda: generate(model(), ids(1, 2), 2, seed=3), "ok"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("call, expected", [pytest.param(c, e, id=i) for i, c, e in CASES])
def test_stranger_input(call: Callable[[], Any], expected: str) -> None:
    if expected == "ok":
        call()
    else:
        with pytest.raises(ValueError, match=expected):
            call()


def test_the_table_is_large_and_names_unique() -> None:
    names = [c[0] for c in CASES]
    assert len(names) == len(set(names)) and len(names) >= 60
