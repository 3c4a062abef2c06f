"""Tokenizers: text lines → token ids and back.

:class:`WordTokenizer` (whitespace words plus ``<eos>`` per line, the classic WikiText-2 setup; the one-``<eos>``-
per-line tokenization follows the PyTorch ``examples/word_language_model`` data code) and :class:`ByteTokenizer`
(UTF-8 bytes, for the smallest demos).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral
from typing import Any

import numpy as np
import torch
from torch import Tensor

EOS = "<eos>"
UNK = "<unk>"

TOKENIZER_KINDS = ("word", "byte")


def _check_lines(lines: Iterable[str]) -> None:
    if isinstance(lines, (str, bytes)):
        raise ValueError("lines must be a list of strings, not a single string; wrap it: [text], "
                         "or split it: text.split('\\n')")


def _ids_to_list(ids: Tensor | Sequence[int], vocab_size: int) -> list[int]:
    values = ids.tolist() if isinstance(ids, Tensor) else [int(v) if isinstance(v, Integral) else v for v in ids]
    if not all(isinstance(v, int) and 0 <= v < vocab_size for v in values):
        raise ValueError(f"ids must be a flat sequence of integers in [0, {vocab_size}); got {ids!r:.80}")
    return values


class WordTokenizer:
    """Whitespace word tokenizer with one ``<eos>`` per line (the classic WikiText-2 setup).

    A line becomes ``line.split() + ["<eos>"]``; blank lines therefore give just ``<eos>``. On the
    ``wikitext-2-v1`` validation split this gives 217,646 tokens, on test 245,569 (source: PyTorch
    ``examples/word_language_model``, ``data.py``).

    Vocabulary (built by :meth:`fit` from the training lines): ids 0 and 1 are ``<unk>`` and ``<eos>``, then
    words by decreasing count, ties broken by first appearance in the text. With ``max_vocab`` only the
    ``max_vocab - 2`` most frequent words are kept, so ``vocab_size <= max_vocab``. Words outside the
    vocabulary encode to ``<unk>`` (v1 text already contains ``<unk>`` for rare words; it maps to the same id).

    Args:
        max_vocab: total vocabulary size cap including ``<unk>`` and ``<eos>``; ``None`` keeps every word.

    Raises:
        ValueError: ``max_vocab`` not None and not an int >= 3.
    """

    kind = "word"
    specials = (UNK, EOS)

    def __init__(self, max_vocab: int | None = None) -> None:
        if max_vocab is not None and (isinstance(max_vocab, bool) or not isinstance(max_vocab, int)
                                      or max_vocab < len(self.specials) + 1):
            raise ValueError(f"max_vocab={max_vocab!r} must be None (no cap) or an int >= 3 "
                             f"(<unk>, <eos> and at least one word)")
        self.max_vocab = max_vocab
        self.itos: list[str] = []  # id -> token
        self.stoi: dict[str, int] = {}  # token -> id

    def fit(self, lines: Iterable[str]) -> WordTokenizer:
        """Build the vocabulary from training ``lines`` (see the class docstring). Returns ``self``."""
        _check_lines(lines)
        counts = Counter(word for line in lines for word in line.split())
        # most_common sorts by count with a stable sort, so equal counts keep first-appearance order.
        words = [word for word, _ in counts.most_common() if word not in self.specials]
        if self.max_vocab is not None:
            words = words[: self.max_vocab - len(self.specials)]
        self._set_vocab([*self.specials, *words])
        return self

    def _set_vocab(self, itos: list[str]) -> None:
        self.itos = list(itos)
        self.stoi = {token: i for i, token in enumerate(self.itos)}

    @property
    def vocab_size(self) -> int:
        """Number of ids, including ``<unk>`` and ``<eos>``; 0 before :meth:`fit`."""
        return len(self.itos)

    @property
    def unk_id(self) -> int:
        return self.stoi[UNK]

    @property
    def eos_id(self) -> int:
        return self.stoi[EOS]

    def _require_vocab(self) -> None:
        if not self.itos:
            raise RuntimeError("WordTokenizer has no vocabulary yet: call fit(train_lines) first")

    def encode(self, lines: Iterable[str], add_eos: bool = True) -> Tensor:
        """Token ids of ``lines``: shape ``(n_tokens,)``, dtype ``torch.long``.

        Each line gives its words, plus ``<eos>`` if ``add_eos`` (use ``add_eos=False`` for a prompt).

        Raises:
            ValueError: ``lines`` is a single string. RuntimeError: called before :meth:`fit`.
        """
        _check_lines(lines)
        self._require_vocab()
        unk, eos, stoi = self.unk_id, self.eos_id, self.stoi
        ids: list[int] = []
        for line in lines:
            ids.extend(stoi.get(word, unk) for word in line.split())
            if add_eos:
                ids.append(eos)
        return torch.tensor(ids, dtype=torch.long)

    def token_strings(self, ids: Tensor | Sequence[int]) -> list[str]:
        """The token of each id, e.g. for axis labels: ``["The", "cat", "<eos>"]``."""
        self._require_vocab()
        return [self.itos[i] for i in _ids_to_list(ids, self.vocab_size)]

    def decode(self, ids: Tensor | Sequence[int]) -> str:
        """Text of 1-D ``ids``: words joined by single spaces, each ``<eos>`` ending a line with ``"\\n"``.

        So ``decode(encode(lines)) == "".join(" ".join(line.split()) + "\\n" for line in lines)`` when
        every word is in the vocabulary.

        Raises:
            ValueError: an id outside ``[0, vocab_size)``.
        """
        text, words = [], []
        for token in self.token_strings(ids):
            if token == EOS:
                text.append(" ".join(words) + "\n")
                words = []
            else:
                words.append(token)
        return "".join(text) + " ".join(words)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state; :func:`tokenizer_from_dict` restores it."""
        return {"kind": self.kind, "max_vocab": self.max_vocab, "itos": list(self.itos)}

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> WordTokenizer:
        tokenizer = cls(max_vocab=state.get("max_vocab"))
        itos = list(state["itos"])
        if itos[: len(cls.specials)] != list(cls.specials) or len(set(itos)) != len(itos):
            raise ValueError("state['itos'] must start with '<unk>', '<eos>' and hold no duplicates")
        tokenizer._set_vocab(itos)
        return tokenizer

    def __repr__(self) -> str:
        return f"WordTokenizer(max_vocab={self.max_vocab}, vocab_size={self.vocab_size})"


class ByteTokenizer:
    """UTF-8 byte tokenizer: 256 ids, one per byte value; the end of each line is the newline byte (id 10).

    For the smallest demos: no vocabulary to build, no unknown tokens, and any text round-trips:
    ``decode(encode(lines)) == "".join(line + "\\n" for line in lines)``.
    """

    kind = "byte"
    vocab_size = 256
    max_vocab = None
    eos_id = ord("\n")

    def fit(self, lines: Iterable[str]) -> ByteTokenizer:
        """Nothing to learn; returns ``self`` (so both tokenizers are used the same way)."""
        return self

    def encode(self, lines: Iterable[str], add_eos: bool = True) -> Tensor:
        """Byte ids of ``lines``, each followed by ``"\\n"`` if ``add_eos``: shape ``(n_bytes,)``, ``torch.long``.

        Raises:
            ValueError: ``lines`` is a single string.
        """
        _check_lines(lines)
        end = "\n" if add_eos else ""
        data = "".join(line + end for line in lines).encode("utf-8")
        return torch.from_numpy(np.frombuffer(data, dtype=np.uint8).astype(np.int64))

    def token_strings(self, ids: Tensor | Sequence[int]) -> list[str]:
        """Each byte as text: printable ASCII as itself, ``"\\n"`` as ``"\\\\n"``, other bytes as ``"<0xAB>"``."""
        return [chr(b) if 32 <= b < 127 else ("\\n" if b == 10 else f"<0x{b:02X}>")
                for b in _ids_to_list(ids, self.vocab_size)]

    def decode(self, ids: Tensor | Sequence[int]) -> str:
        """Text of byte ids; invalid UTF-8 (possible in model samples) becomes ``"\\ufffd"``.

        Raises:
            ValueError: an id outside ``[0, 256)``.
        """
        return bytes(_ids_to_list(ids, self.vocab_size)).decode("utf-8", errors="replace")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind}

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> ByteTokenizer:
        return cls()

    def __repr__(self) -> str:
        return "ByteTokenizer()"


Tokenizer = WordTokenizer | ByteTokenizer


def make_tokenizer(kind: str = "word", max_vocab: int | None = None) -> Tokenizer:
    """A new (not yet fitted) tokenizer: ``"word"`` → :class:`WordTokenizer`, ``"byte"`` → :class:`ByteTokenizer`.

    Raises:
        ValueError: unknown ``kind``; ``max_vocab`` invalid, or given for ``kind="byte"`` (always 256).
    """
    if kind == "word":
        return WordTokenizer(max_vocab=max_vocab)
    if kind == "byte":
        if max_vocab is not None:
            raise ValueError(f"max_vocab={max_vocab!r} only applies to kind='word'; "
                             "the byte tokenizer always has 256 ids (pass max_vocab=None)")
        return ByteTokenizer()
    raise ValueError(f"kind={kind!r} is not a tokenizer; allowed: {', '.join(TOKENIZER_KINDS)}")


def tokenizer_from_dict(state: Mapping[str, Any]) -> Tokenizer:
    """Restore a tokenizer saved with ``to_dict()`` (e.g. from a run record or the token cache).

    Raises:
        ValueError: ``state["kind"]`` is not ``"word"`` or ``"byte"``.
    """
    kind = state.get("kind")
    if kind == "word":
        return WordTokenizer.from_dict(state)
    if kind == "byte":
        return ByteTokenizer.from_dict(state)
    raise ValueError(f"state['kind']={kind!r} is not a tokenizer; allowed: {', '.join(TOKENIZER_KINDS)}")


def translate_ids(ids: Tensor | Sequence[int], source: Tokenizer, target: Tokenizer) -> Tensor:
    """The ids in ``target``'s vocabulary of the tokens that ``ids`` stand for in ``source``'s: the same text read
    by a model of another vocabulary (a replayed run's, :func:`spanviz.data.tokens.run_tokenizer`), token by token.

    Word tokenizers: each token looked up by its string (``<eos>`` stays ``<eos>``; a word outside ``target``'s
    vocabulary becomes ``<unk>``, as :meth:`WordTokenizer.encode` would make it). Byte tokenizers: the ids as they
    are (every byte tokenizer has the same 256 ids). So the length is kept: shape ``(n,)`` in, ``(n,)`` out,
    ``torch.long``.

    Raises:
        ValueError: ``source`` and ``target`` of different kinds (a word is not one byte), or an id outside
            ``source``'s vocabulary.

    Source: spanviz.
    """
    if source.kind != target.kind:
        raise ValueError(f"target.kind={target.kind!r} must be source's {source.kind!r}: only tokenizers of one kind "
                         "map token to token")
    if source is target or isinstance(source, ByteTokenizer):
        return torch.tensor(_ids_to_list(ids, source.vocab_size), dtype=torch.long)
    stoi, unk = target.stoi, target.unk_id  # a WordTokenizer, like source
    return torch.tensor([stoi.get(token, unk) for token in source.token_strings(ids)], dtype=torch.long)
