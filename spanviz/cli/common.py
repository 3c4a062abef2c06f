"""What the commands share: command-line errors in flag names (:class:`UsageError`, :func:`as_flags`),
``SPANVIZ_SMOKE``, the data flags (:class:`DataOptions`) and their settings (the split policy, with the command
line's default splits), data errors as flag messages, and the ``$SPANVIZ_HOME`` check."""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from spanviz.data.hub import HubUnavailableError
from spanviz.data.tokenizers import TOKENIZER_KINDS
from spanviz.data.tokens import prepare_tokens
from spanviz.data.wikitext import CONFIGS, MissingSplitError, split_files, splits_for_folder
from spanviz.files import check_writable_folder, expand_user
from spanviz.model import GPTConfig
from spanviz.settings import (
    DEFAULT_SPLITS,
    ENV_DATA_DIR,
    ENV_EVAL_SPLIT,
    ENV_HOME,
    ENV_SMOKE,
    ENV_TRAIN_SPLIT,
    SPLITS,
    command_name,
    env_flag,
    resolve_data_source,
    spanviz_home,
)
from spanviz.train import TrainConfig


class UsageError(ValueError):
    """A command-line mistake; its message already names the flags."""


def flag_name(option: str) -> str:
    """The flag of a dataclass field: ``n_layer`` → ``--n-layer`` (tyro's spelling)."""
    return "--" + option.replace("_", "-")


FLAG_NAMES: dict[str, str] = {
    **{f.name: flag_name(f.name) for cls in (GPTConfig, TrainConfig) for f in fields(cls) if f.name != "spans"},
    "vocab_size": "--max-vocab", "every": "--probe-every", "preset": "--spans-preset", "alphas": "--alphas",
    "layers": "--spans-layers", "spans.layers": "--spans-layers",
}
"""Config field (GPTConfig, TrainConfig, SpanConfig, a probe's) → the flag that sets it, for messages."""


def as_flags(message: str) -> str:
    """A config error rewritten for a command-line user: ``n_layer=4`` → ``--n-layer 4``, field names → flags.

    Identifiers with an underscore are rewritten wherever they stand; plain words (steps, lr, window, ...) only
    as ``name=value`` or at the start of the message, where they are the subject.
    """
    names = FLAG_NAMES

    def assignment(m: re.Match[str]) -> str:
        return f"{names[m.group(1)]} {m.group(3)}"

    keys = "|".join(sorted((re.escape(k) for k in names), key=len, reverse=True))
    message = re.sub(rf"(?<![\w.-])({keys})=(['\"]?)([^\s'\",;)]*)\2", assignment, message)
    message = re.sub(rf"^({keys})\b", lambda m: names[m.group(1)], message)
    underscored = "|".join(sorted((re.escape(k) for k in names if "_" in k or "." in k), key=len, reverse=True))
    return re.sub(rf"(?<![\w.-])({underscored})\b", lambda m: names[m.group(1)], message)


SMOKE_ENV = ENV_SMOKE
"""The variable that makes every command a seconds-long version of itself."""


def smoke() -> bool:
    """Whether ``SPANVIZ_SMOKE=1``: every command becomes a seconds-long version of itself (for CI).

    Raises: ValueError (naming the variable) for a value that is not true/false (:func:`spanviz.settings.env_flag`).
    """
    return bool(env_flag(ENV_SMOKE))


def shrink(n: int | None, low: int = 1) -> int | None:
    return None if n is None else max(low, math.ceil(n / 100))


def announce_smoke(what: str) -> None:
    print(f"{ENV_SMOKE}=1: {what}", file=sys.stderr)


# ======================================================================================= data flags
@dataclass(frozen=True)
class DataOptions:
    """Data: WikiText-2 from --data-dir, $SPANVIZ_WIKITEXT_DIR, the folder prepare-data remembered, or the hub."""

    data_dir: Path | None = None
    """WikiText-2 folder (train/valid/test .txt, wiki.*.tokens or parquet); default: see the group's line above."""
    train_split: Literal[SPLITS + ("valid",)] | None = None
    """split to train on; default: $SPANVIZ_TRAIN_SPLIT, else the remembered choice, else train."""
    eval_split: Literal[SPLITS + ("valid",)] | None = None
    """split to evaluate on; default: $SPANVIZ_EVAL_SPLIT, else the remembered choice, else validation."""
    wikitext_config: Literal[CONFIGS] = "wikitext-2-v1"
    """wikitext-2-v1 (tokenized, rare words as <unk>) or wikitext-2-raw-v1."""
    tokenizer: Literal[TOKENIZER_KINDS] | None = None
    """word or byte; default word (`sweep ls`: its size's choice, bytes on CPU)."""
    max_vocab: int = 8192
    """word-level vocabulary cap, including <unk> and <eos>; 0 = no cap."""
    offline: bool = False
    """never contact the Hugging Face hub (also: SPANVIZ_OFFLINE=1)."""


def data_settings(opts: DataOptions, *, tokenizer: str | None = None, max_vocab: int | None = None,
                  given: Collection[str] = ()) -> dict[str, Any]:
    """The keyword arguments of :func:`spanviz.data.prepare_tokens` for ``opts`` (nothing read yet).

    Args:
        given: the flags typed on the command line (a typed flag that has no effect is refused).
    Raises:
        UsageError: a bad --max-vocab or --data-dir, or --max-vocab typed with byte tokens.
    """
    named = opts.data_dir is not None or bool(os.environ.get(ENV_DATA_DIR))
    folder, _ = resolve_data_source(opts.data_dir)
    local = DEFAULT_SPLITS
    if named and folder is not None:  # a folder named now (flag or environment): the splits it has, said so
        local = splits_for_folder(folder, opts.wikitext_config)
    folder, splits = resolve_data_source(opts.data_dir, opts.train_split, opts.eval_split,
                                                  local_splits=local)
    chosen = (opts.train_split, opts.eval_split, os.environ.get(ENV_TRAIN_SPLIT),
              os.environ.get(ENV_EVAL_SPLIT))
    if named and local["train"] != "train" and not any(chosen):
        print(f"{folder} has no train split: training on {splits['train']!r}, evaluating on {splits['eval']!r} "
              "(--train-split / --eval-split choose others)", file=sys.stderr)
    kind = tokenizer or opts.tokenizer or "word"
    cap = opts.max_vocab if max_vocab is None else max_vocab
    if cap < 0 or (kind == "word" and 0 < cap < 3) or cap > MAX_VOCAB_CAP:
        raise UsageError(f"--max-vocab {cap}: must be 0 (no cap) or between 3 (<unk>, <eos> and one word) and "
                         f"{MAX_VOCAB_CAP}")
    if kind == "byte" and "--max-vocab" in given:
        raise UsageError(f"--max-vocab {cap}: has no effect with byte tokens (the vocabulary is the 256 byte values); "
                         "drop it, or use --tokenizer word")
    if folder is not None and not expand_user(folder, "--data-dir").is_dir():
        origin = "--data-dir" if opts.data_dir is not None else f"${ENV_DATA_DIR}"
        raise UsageError(f"{origin} {folder}: not a folder; it must hold the WikiText-2 splits "
                         "(e.g. valid.txt and test.txt)")
    if folder is not None:  # the split files must be there (found, not read yet)
        try:
            split_files(folder, splits, opts.wikitext_config)
        except ValueError as error:
            raise UsageError(data_message(error)) from None
    return dict(data_dir=folder, config=opts.wikitext_config, splits=splits, tokenizer=kind,
                max_vocab=(cap or None) if kind == "word" else None, offline=True if opts.offline else None)


def data_message(error: BaseException) -> str:
    """A command-line message (flags, no Python) for a data error of :mod:`spanviz.data`."""
    if isinstance(error, MissingSplitError):
        message = (f"the {error.role} split {error.split!r} is not in {error.folder} "
                   f"(splits there: {', '.join(error.available) or 'none'})")
        if "validation" in error.available:
            other = "test" if "test" in error.available else "validation"
            message += f"; train on another split: --train-split validation --eval-split {other}"
        return message
    if isinstance(error, HubUnavailableError):
        return (f"WikiText-2 is not available from the Hugging Face hub ({error.reason}). Use a local copy: "
                f"{command_name()} prepare-data --data-dir DIR — once; later commands and the notebooks "
                "remember DIR — where DIR is the folder that holds train.txt / valid.txt / test.txt, "
                "wiki.*.tokens or the hub's parquet files (a copy without the train split trains on validation "
                "and evaluates on test; --train-split / --eval-split choose others)")
    return as_flags(str(error))


def load_data(settings: Mapping[str, Any]) -> Any:
    """:func:`spanviz.data.prepare_tokens` with command-line messages (:class:`UsageError`)."""
    try:
        return prepare_tokens(**settings)
    except (HubUnavailableError, ValueError) as error:
        raise UsageError(data_message(error)) from None


def check_home() -> Path:
    """``$SPANVIZ_HOME`` must be a folder we can write (token cache, results store): a clear error otherwise."""
    home = spanviz_home()
    label = f"SPANVIZ_HOME={home}" if os.environ.get(ENV_HOME) else f"the spanviz cache folder {home}"
    return check_writable_folder(home, f"{label} (set SPANVIZ_HOME to a folder you can write)")


ESTIMATED_WORD_VOCAB = 8192
"""A word vocabulary WikiText-2 certainly reaches: every split of both configs holds more distinct words."""
MAX_VOCAB_CAP = 2**63 - 1
"""Largest --max-vocab (a 64-bit integer, as every number of a run record)."""


def estimated_vocab(settings: Mapping[str, Any]) -> int:
    """A vocabulary size for checks made before the data are read: at most the real one, so a run refused with it
    certainly does not fit (the data later give the real size, checked again).

    Byte tokens: 256. Words: the cap, but at most :data:`ESTIMATED_WORD_VOCAB` — a cap is a limit, not the
    vocabulary (``--max-vocab 2147483648`` trains WikiText-2's few tens of thousands of words).
    """
    if settings["tokenizer"] == "byte":
        return 256
    return min(settings["max_vocab"] or ESTIMATED_WORD_VOCAB, ESTIMATED_WORD_VOCAB)
