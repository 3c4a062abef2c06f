"""``spanviz prepare-data``: read WikiText-2 once, cache its token ids, remember a local folder."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Annotated

import tyro

from spanviz.cli.common import DataOptions, check_home, data_settings, load_data
from spanviz.settings import remember_data_source


@dataclass(frozen=True)
class PrepareDataCommand:
    """Read WikiText-2 (a local folder or the hub), tokenize it and cache the token ids; remember a local folder."""

    data: Annotated[DataOptions, tyro.conf.OmitArgPrefixes] = DataOptions()
    verbose: bool = False
    """log at INFO level."""


def cmd_prepare_data(cmd: PrepareDataCommand, given: Collection[str] = ()) -> int:
    """Tokenize (or find in the cache) the data of the data flags and print what was read; returns 0.

    Raises:
        UsageError: a bad data flag, or data that cannot be read (one line naming the flag).
    """
    settings = data_settings(cmd.data, given=given)
    check_home()
    data = load_data(settings)
    info = data.describe()
    print(f"{'cache hit' if data.from_cache else 'tokenized'}: {info['n_tokens']['train']:,} train / "
          f"{info['n_tokens']['eval']:,} eval tokens, vocab {data.vocab_size:,}, splits {info['splits']}, "
          f"source {data.source}")
    if settings["data_dir"] is not None:
        remember_data_source(settings["data_dir"], data.splits)
        print(f"remembered: later commands read {data.source} (--train-split {data.splits['train']} "
              f"--eval-split {data.splits['eval']}) unless given --data-dir")
    return 0
