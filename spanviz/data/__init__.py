"""WikiText-2 for spanviz: text → tokens → cached token ids → random batches.

Data flows one way through this package:

1. :mod:`~spanviz.data.wikitext` — :func:`load_wikitext2` returns the text lines of the requested *roles*
   (``train`` and ``eval``), each read from a WikiText-2 *split* (``train``, ``validation`` or ``test``), through
   Hugging Face ``datasets``: from the hub (``Salesforce/wikitext``) or from a local folder of text or parquet
   files (``data_dir``, ``$SPANVIZ_WIKITEXT_DIR``, or the folder ``spanviz prepare-data --data-dir`` remembered);
   the hub part, and offline use without waiting for an unreachable hub, in :mod:`~spanviz.data.hub`.
   Which folder and which splits: the one split policy of :mod:`spanviz.settings`.
2. :mod:`~spanviz.data.tokenizers` — :class:`WordTokenizer` (whitespace words plus ``<eos>`` per line, the
   classic WikiText-2 setup) or :class:`ByteTokenizer` (UTF-8 bytes, for the smallest demos).
3. :mod:`~spanviz.data.tokens` — :func:`prepare_tokens` does 1 and 2 and caches the ids on disk
   (``$SPANVIZ_HOME/tokens``), keyed by a sha256 of the text and the tokenizer settings (``spanviz prepare-data``
   calls it); :func:`load_tokens` is the same with the split policy's folder and splits.
4. :mod:`~spanviz.data.batches` — :func:`get_batch` draws random contiguous (x, y) windows for training;
   :func:`iter_eval_batches` gives fixed windows so that validation losses are comparable across runs.

Source: WikiText-2 is from Merity, Xiong, Bradbury, Socher, "Pointer Sentinel Mixture Models" (2016).
"""

from spanviz.data.batches import get_batch, iter_eval_batches
from spanviz.data.tokenizers import TOKENIZER_KINDS
from spanviz.data.tokens import LOCAL_SOURCE, TokenData, load_tokens, prepare_tokens
from spanviz.data.hub import HUB_ID, HubUnavailableError
from spanviz.data.wikitext import CONFIGS, MissingSplitError, split_files, splits_for_folder
from spanviz.settings import (
    DEFAULT_SPLITS, ENV_DATA_DIR, ENV_EVAL_SPLIT, ENV_HOME, ENV_TRAIN_SPLIT, OFFLINE_SPLITS, SPLITS, command_name,
    remember_data_source, resolve_data_source, spanviz_home,
)

# What the notebooks, README and scripts name: load_tokens, prepare_tokens, TokenData (what they return),
# LOCAL_SOURCE, OFFLINE_SPLITS. The other names stay here while spanviz.cli and spanviz.train.loop reach them as
# ``data_lib.X``; everything else is imported from its file (or from spanviz.settings).
__all__ = [
    "CONFIGS", "DEFAULT_SPLITS", "ENV_DATA_DIR", "ENV_EVAL_SPLIT", "ENV_HOME", "ENV_TRAIN_SPLIT", "HUB_ID",
    "LOCAL_SOURCE", "OFFLINE_SPLITS", "SPLITS", "TOKENIZER_KINDS", "HubUnavailableError", "MissingSplitError",
    "TokenData", "command_name", "get_batch", "iter_eval_batches", "load_tokens", "prepare_tokens",
    "remember_data_source", "resolve_data_source", "spanviz_home", "split_files", "splits_for_folder",
]
