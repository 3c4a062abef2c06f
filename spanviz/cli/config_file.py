"""``spanviz train --config FILE``: a config file's or a run.json's values as the flags that set them (typed flags
after them override them); every value is type-checked first, so none can be read as another flag."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from spanviz.cli.common import DataOptions, UsageError, flag_name
from spanviz.cli.train_plans import probe_options_of
from spanviz.data.hub import HUB_ID
from spanviz.data.tokenizers import TOKENIZER_KINDS
from spanviz.data.wikitext import CONFIGS
from spanviz.files import UnreadableFileError, expand_user, read_bounded
from spanviz.model import GPTConfig
from spanviz.settings import SPLITS, check_splits
from spanviz.spans import SpanConfig
from spanviz.train import TrainConfig
from spanviz.train.record import MAX_RECORD_FILE_BYTES

CONFIG_MAX_BYTES = MAX_RECORD_FILE_BYTES
"""Largest ``--config`` file read [bytes] (a run.json is at most a store record)."""


@dataclass(frozen=True)
class ConfigFile:
    """What ``--config FILE`` gave: flags that set its values (typed flags after them override them), and for a
    run.json the data it was trained on."""

    path: str
    flags: list[str]
    data: dict[str, Any] | None = None


def as_argv(values: Mapping[str, Any]) -> list[str]:
    """Field values as the flags that set them: ``{"n_layer": 4, "bias": False}`` → ``--n-layer 4 --no-bias``.

    Raises:
        ValueError: a value (or an item of a list) that is a text starting with ``--``: it would be read as a flag.
    """
    argv: list[str] = []
    for name, value in values.items():
        flag = flag_name(name)
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, str) and item.startswith("--"):
                raise ValueError(f"{name}={value!r:.80}: a value starting with '--' would be read as a flag")
        if isinstance(value, bool):
            argv.append(flag if value else f"--no-{flag[2:]}")
        elif isinstance(value, (list, tuple)):
            argv += [flag, *map(str, value)]
        else:  # repr: a float's shortest exact text
            argv += [flag, "None" if value is None else repr(value) if isinstance(value, float) else str(value)]
    return argv


def _span_flags(spans: Any, path: str) -> list[str]:
    """The span flags of a config file's ``model.spans`` (None, or a SpanConfig dict the flags can express)."""
    if spans is None:
        return []
    if not isinstance(spans, dict):
        raise UsageError(f"--config {path}: model.spans must be null (off) or an object with preset / alphas / "
                         f"layers (a SpanConfig), got {json.dumps(spans)[:80]}")
    try:
        cfg = SpanConfig(**spans)
    except (TypeError, ValueError) as error:
        raise UsageError(f"--config {path}: model.spans: {error}") from None
    if SpanConfig(preset=cfg.preset, alphas=cfg.alphas, layers=cfg.layers) != cfg:
        raise UsageError(f"--config {path}: model.spans sets more than --spans-preset / --alphas / --spans-layers can "
                         "(slots, block_alphas or ridge); train it from Python (spanviz.train.Trainer)")
    return as_argv({"spans_preset": cfg.preset, "alphas": ",".join(repr(a) for a in cfg.alphas),
                    **({"spans_layers": cfg.layers} if cfg.layers is not None else {})})


def _check_data(data: Mapping[str, Any], path: str) -> None:
    """Each entry of a run.json's data section that becomes a flag has its type and an allowed value (a list or a
    text like ``"--lr"`` would otherwise be read as flags the user never typed)."""
    def refuse(entry: str, value: Any, allowed: str) -> UsageError:
        return UsageError(f"--config {path}: data.{entry}={json.dumps(value)[:80]}: must be {allowed}")

    splits = data.get("splits")
    if splits is not None:
        if not isinstance(splits, dict):
            raise refuse("splits", splits, 'an object {"train": SPLIT, "eval": SPLIT}')
        for role, split in splits.items():
            try:
                check_splits({role: split})
            except ValueError as error:
                raise refuse(f"splits.{role}", split, f"one of {', '.join(SPLITS)} (roles train, eval): "
                                                      f"{error}") from None
    for entry, allowed in (("config", CONFIGS), ("tokenizer", TOKENIZER_KINDS)):
        if entry in data and data[entry] not in allowed:
            raise refuse(entry, data[entry], f"one of {', '.join(allowed)}")
    max_vocab = data.get("max_vocab")
    if max_vocab is not None and (isinstance(max_vocab, bool) or not isinstance(max_vocab, int) or max_vocab < 0):
        raise refuse("max_vocab", max_vocab, "null or an integer >= 0 (0 = no cap)")
    if data.get("source") is not None and not isinstance(data["source"], str):
        raise refuse("source", data["source"], "a text (the hub id or a folder) or null")


def _data_flags(data: dict[str, Any], path: str) -> list[str]:
    """The data flags that read the data a run.json was trained on (the folder only where it still exists)."""
    _check_data(data, path)
    opts = DataOptions()
    splits = data.get("splits") if isinstance(data.get("splits"), dict) else {}
    try:
        source = data.get("source")
        folder = Path(source) if isinstance(source, str) and source != HUB_ID else None
        opts = replace(
            opts,
            data_dir=folder if folder is not None and folder.is_dir() else None,
            train_split=splits.get("train", opts.train_split), eval_split=splits.get("eval", opts.eval_split),
            wikitext_config=data.get("config", opts.wikitext_config),
            tokenizer=data.get("tokenizer", opts.tokenizer),
            max_vocab=opts.max_vocab if data.get("tokenizer") == "byte" else (data.get("max_vocab") or 0))
    except TypeError as error:
        raise UsageError(f"--config {path}: its data section: {error}") from None
    return as_argv({f.name: getattr(opts, f.name) for f in fields(opts)
                    if getattr(opts, f.name) is not None and f.name != "offline"})


def read_config_file(argv: Sequence[str]) -> ConfigFile | None:
    """The values of ``spanviz train --config FILE`` as flags, or None without ``--config``.

    A JSON object with ``model`` and/or ``train`` sections (GPTConfig / TrainConfig fields), or a run.json,
    whose ``data`` (splits, tokenizer, vocabulary cap, folder) and ``probes`` become flags too. Each section must
    be valid on its own; what the flags cannot reproduce (probes or span settings set from Python) is refused.
    The file is checked with ``stat`` before it is read: a regular file of at most :data:`CONFIG_MAX_BYTES`.

    Raises:
        UsageError: naming ``--config FILE`` and what is wrong in it.
    """
    path = None
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            path = argv[i + 1]
        elif arg.startswith("--config="):
            path = arg.partition("=")[2]
    if path is None:
        return None
    try:
        obj = json.loads(read_bounded(expand_user(path, f"--config {path}"), CONFIG_MAX_BYTES, f"--config {path}"))
    except UnreadableFileError as error:
        raise UsageError(str(error)) from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise UsageError(f"--config {path}: not JSON ({error})") from None
    run_json = isinstance(obj, dict) and isinstance(obj.get("config"), dict)
    if run_json:
        obj = obj["config"]
    if not isinstance(obj, dict) or not ({"model", "train"} & set(obj)):
        raise UsageError(f"--config {path}: expected a JSON object with a 'model' and/or 'train' section "
                         "(GPTConfig / TrainConfig fields), or a run.json")
    model, train = obj.get("model") or {}, obj.get("train") or {}
    if not isinstance(model, dict) or not isinstance(train, dict):
        raise UsageError(f"--config {path}: 'model' and 'train' must be JSON objects")
    spans = model.get("spans")
    model = {k: v for k, v in model.items() if k not in ("vocab_size", "spans")}
    for config_class, section, values in ((GPTConfig, "model", model), (TrainConfig, "train", train)):
        try:  # each section must be valid on its own (with the other fields at their defaults)
            config_class(**values)
        except (TypeError, ValueError) as error:
            raise UsageError(f"--config {path}: its {section!r} section: {error}") from None
    data = obj.get("data")
    if data is not None and not isinstance(data, dict):
        raise UsageError(f"--config {path}: 'data' must be a JSON object (a run.json's data description)")
    try:
        flags = [*as_argv(model), *as_argv(train), *_span_flags(spans, path),
                 *(_data_flags(data, path) if data else [])]
    except ValueError as error:  # a text read as a flag (as_argv's backstop)
        raise UsageError(f"--config {path}: {error}") from None
    probes = obj.get("probes")
    if probes is not None:
        if not isinstance(probes, list):
            raise UsageError(f"--config {path}: 'probes' must be a list (a run.json's probe descriptions)")
        try:
            opts = probe_options_of(probes, Path(path), f"--config {path}")
        except UsageError:
            raise
        except (TypeError, ValueError, AttributeError) as error:
            raise UsageError(f"--config {path}: its probes: {error}") from None
        flags += as_argv({f.name: getattr(opts, f.name) for f in fields(opts)})
    return ConfigFile(path, flags, data if run_json and isinstance(data, dict) else None)
