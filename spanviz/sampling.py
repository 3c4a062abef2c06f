"""Text from a trained TinyGPT: autoregressive sampling with temperature and top-k, seeded.

:func:`generate` works on token ids, :func:`sample_text` on text (through the data's tokenizer, see
:mod:`spanviz.data.tokenizers`). Each step feeds the last ``context_length`` tokens to the model, takes the logits
of the last position, and picks the next token:

* greedy: the most likely token (``argmax``);
* otherwise: keep the ``top_k`` largest logits (all V when ``top_k`` is None), divide them by the temperature and
  draw one token from ``softmax(logits / temperature)`` over them. A temperature below 1 sharpens the distribution,
  above 1 flattens it; towards 0 it approaches greedy; ``top_k=1`` is greedy. (Not written T: T is the context
  length here.)

Draws come from a ``torch.Generator`` of their own, seeded with ``seed``: the same model, prompt and settings give
the same text, and the global random state (``torch.manual_seed``, the training's batches) is neither read nor
changed.

Source: the standard decoding loop of nanoGPT's ``GPT.generate`` (Karpathy, ``model.py``: crop to the block size,
logits of the last position / temperature, optional top-k, ``torch.multinomial``) and the top-k sampling of Fan,
Lewis, Dauphin, "Hierarchical Neural Story Generation" (ACL 2018, §5.1: sample from the k most likely tokens,
renormalised). One difference from nanoGPT: the draw is over exactly the k indices ``torch.topk`` returns, so ties
at the k-th logit never let more than k tokens through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from spanviz.validators import check_bool, check_float, check_int, check_tensor

__all__ = ["TextSample", "generate", "sample_text"]

MAX_NEW_TOKENS = 100_000
"""Most tokens one call adds (one forward pass each: a hundred thousand is hours of a CPU; 10**12 never ended)."""
MAX_SEED = 2**63 - 1
"""Largest seed accepted (``torch.Generator.manual_seed`` takes a 64-bit integer)."""


def _check_settings(vocab_size: int, max_new_tokens: Any, temperature: Any, top_k: Any, greedy: Any,
                    seed: Any) -> tuple[int, float, int | None, bool, int]:
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, low=1, high=MAX_NEW_TOKENS)
    temperature = check_float("temperature", temperature, low=0.0, low_open=True)
    top_k = None if top_k is None else check_int("top_k", top_k, low=1, high=vocab_size)
    return max_new_tokens, temperature, top_k, check_bool("greedy", greedy), check_int("seed", seed, 0, MAX_SEED)


def _check_ids(idx: Any, vocab_size: int) -> Tensor:
    if isinstance(idx, Tensor):  # the meta device (no data) and its like, before reading the ids
        check_tensor("idx", idx, kind="any", nonempty=False)
    if not isinstance(idx, Tensor) or idx.dim() not in (1, 2) or idx.dtype.is_floating_point or idx.is_complex() \
            or idx.dtype == torch.bool:
        shape = tuple(idx.shape) if isinstance(idx, Tensor) else type(idx).__name__
        raise ValueError(f"idx must be an integer tensor of shape (T0,) or (B, T0), got {shape}")
    if idx.numel() == 0:
        raise ValueError(f"idx must hold at least one token per row (a prompt), got shape {tuple(idx.shape)}")
    low, high = int(idx.min()), int(idx.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"idx must hold token ids in [0, {vocab_size}) (the model's vocab_size), got {bad}")
    return idx


def generate(model: nn.Module, idx: Tensor, max_new_tokens: int, *, temperature: float = 1.0,
             top_k: int | None = None, greedy: bool = False, seed: int = 0) -> Tensor:
    """Continue the prompt ``idx`` by ``max_new_tokens`` tokens, one at a time (see the module docstring).

    Args:
        model: a :class:`spanviz.model.TinyGPT` (anything with ``cfg.vocab_size``, ``cfg.context_length`` and
            ``model(idx) -> (logits (B, T, V), loss)``). It runs in eval mode under ``torch.no_grad()``; its mode
            (train or eval) is restored afterwards. Do not pass a model another thread is training: copy it.
        idx: prompt token ids, shape (T0,) or (B, T0), an integer dtype, values in [0, V), T0 >= 1. Only the last
            ``cfg.context_length`` tokens are fed to the model at each step (the prompt may be longer).
        max_new_tokens: tokens to add, in [1, :data:`MAX_NEW_TOKENS`].
        temperature: > 0 [dimensionless]; the logits are divided by it before the softmax. Ignored when ``greedy``.
        top_k: sample from the k most likely tokens only, 1 <= k <= V; None = from all V. Ignored when ``greedy``.
        greedy: take the most likely token at every step (deterministic; same as ``top_k=1``).
        seed: seeds this call's own ``torch.Generator`` (on the model's device), 0 <= seed < 2**63.
    Returns:
        the prompt followed by the new tokens: shape (T0 + max_new_tokens,) or (B, T0 + max_new_tokens), dtype
        ``torch.long``, on the model's device.
    Raises:
        ValueError: before any compute, naming the field, the value and what is allowed: ``max_new_tokens``,
            ``temperature``, ``top_k``, ``greedy`` or ``seed`` out of range; ``idx`` not an integer tensor of 1 or 2
            dimensions, empty, on the meta device, or holding an id outside [0, V). During sampling: the model's
            logits are not finite (a diverged model).
    """
    vocab_size, context_length = int(model.cfg.vocab_size), int(model.cfg.context_length)
    max_new_tokens, temperature, top_k, greedy, seed = _check_settings(vocab_size, max_new_tokens, temperature,
                                                                       top_k, greedy, seed)
    idx = _check_ids(idx, vocab_size)
    flat = idx.dim() == 1
    device = next(model.parameters(), torch.empty(0)).device
    idx = (idx.unsqueeze(0) if flat else idx).to(device=device, dtype=torch.long)  # (B, T0)
    generator = torch.Generator(device=device).manual_seed(seed)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for step in range(max_new_tokens):
                logits, _ = model(idx[:, -context_length:])  # crop to the context length: (B, T', V)
                logits = logits[:, -1, :].float()  # the last position's logits: (B, V)
                if not torch.isfinite(logits).all():
                    raise ValueError(f"the model's logits are not finite at new token {step}: was its training "
                                     "diverging? Sample from an earlier checkpoint")
                if greedy:
                    next_id = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
                else:
                    if top_k is not None:  # the k largest logits and their token ids: (B, k) each
                        logits, candidates = torch.topk(logits, top_k, dim=-1)
                    probs = torch.softmax(logits / temperature, dim=-1)  # softmax(logits / temperature): (B, k or V)
                    choice = torch.multinomial(probs, num_samples=1, generator=generator)  # (B, 1)
                    next_id = choice if top_k is None else candidates.gather(-1, choice)
                idx = torch.cat([idx, next_id], dim=1)  # (B, T + 1)
    finally:
        model.train(was_training)
    return idx[0] if flat else idx


@dataclass(frozen=True)
class TextSample:
    """What :func:`sample_text` gives: ``prompt`` (the prompt as the model read it: decoded prompt ids, so a word
    outside the vocabulary shows as ``<unk>``), ``continuation`` (the decoded new tokens; with the word tokenizer
    each ``<eos>`` ends a line), ``text`` (prompt and continuation decoded together) and ``ids`` (all token ids,
    shape (T0 + max_new_tokens,), on the CPU; the first ``n_prompt`` are the prompt's)."""

    prompt: str
    continuation: str
    text: str
    ids: Tensor
    n_prompt: int


def sample_text(model: nn.Module, tokenizer: Any, prompt: str, max_new_tokens: int = 40, *,
                temperature: float = 1.0, top_k: int | None = None, greedy: bool = False,
                seed: int = 0) -> TextSample:
    """Sample a continuation of ``prompt``: text → ids with ``tokenizer`` (a word outside its vocabulary becomes
    ``<unk>``, as in training), :func:`generate`, ids → text.

    Args:
        model: see :func:`generate`.
        tokenizer: the tokenizer of the data the model was trained on (``TokenData.tokenizer``), with
            ``vocab_size``, ``encode(lines, add_eos=False)`` and ``decode(ids)``.
        prompt: one line of text; its tokens are the prompt (longer than the context length: its end is used).
        max_new_tokens, temperature, top_k, greedy, seed: see :func:`generate`.
    Returns:
        a :class:`TextSample`.
    Raises:
        ValueError: before any compute: ``prompt`` not a string or without tokens; the tokenizer's vocabulary size
            differs from the model's; a setting out of range (see :func:`generate`).
    """
    if not isinstance(prompt, str):
        raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
    vocab_size = int(model.cfg.vocab_size)
    if getattr(tokenizer, "vocab_size", None) != vocab_size:
        raise ValueError(f"tokenizer.vocab_size must equal the model's vocab_size {vocab_size}, got "
                         f"{getattr(tokenizer, 'vocab_size', None)!r}: use the tokenizer of the model's training data")
    _check_settings(vocab_size, max_new_tokens, temperature, top_k, greedy, seed)
    prompt_ids = tokenizer.encode([prompt], add_eos=False)  # (T0,)
    if prompt_ids.numel() == 0:
        raise ValueError(f"prompt must hold at least one token, got {prompt!r}")
    ids = generate(model, prompt_ids, max_new_tokens, temperature=temperature, top_k=top_k, greedy=greedy,
                   seed=seed).cpu()
    n = prompt_ids.numel()
    return TextSample(prompt=tokenizer.decode(ids[:n]), continuation=tokenizer.decode(ids[n:]),
                      text=tokenizer.decode(ids), ids=ids, n_prompt=n)
