"""WikiText-2 for spanviz: text → tokens → cached token ids → random batches.

Data flows one way through this package:

1. :mod:`~spanviz.data.wikitext` — :func:`load_wikitext2` returns the text lines of the requested *roles*
   (``train`` and ``eval``), each read from a WikiText-2 *split* (``train``, ``validation`` or ``test``), through
   Hugging Face ``datasets``: from the hub (``Salesforce/wikitext``) or from a local folder of text or parquet
   files (``data_dir``, ``$SPANVIZ_WIKITEXT_DIR``, or the folder ``spanviz prepare-data --data-dir`` remembered).
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

from spanviz.data.batches import eval_starts, get_batch, iter_eval_batches
from spanviz.data.tokenizers import (
    EOS, TOKENIZER_KINDS, UNK, ByteTokenizer, Tokenizer, WordTokenizer, make_tokenizer, tokenizer_from_dict,
)
from spanviz.data.tokens import CACHE_FORMAT, LOCAL_SOURCE, TokenData, load_tokens, prepare_tokens
from spanviz.data.wikitext import (
    CONFIGS, HUB_ID, HUB_PROBE_TIMEOUT_S, MAX_SPLIT_BYTES, Corpus, HubUnavailableError, MissingSplitError,
    available_splits, check_text_file, load_wikitext2, split_files, splits_for_folder,
)
from spanviz.settings import (
    DATA_SOURCE_FILE, DEFAULT_SPLITS, ENV_DATA_DIR, ENV_EVAL_SPLIT, ENV_HOME, ENV_OFFLINE, ENV_TRAIN_SPLIT,
    OFFLINE_SPLITS, ROLES, SPLIT_ALIASES, SPLITS, command_name, remember_data_source, remembered_data_source, resolve_data_source,
    spanviz_home, splits_from_env,
)

__all__ = [
    "CACHE_FORMAT", "CONFIGS", "DATA_SOURCE_FILE", "DEFAULT_SPLITS", "ENV_DATA_DIR", "ENV_EVAL_SPLIT", "ENV_HOME",
    "ENV_OFFLINE", "ENV_TRAIN_SPLIT", "EOS", "HUB_ID", "HUB_PROBE_TIMEOUT_S", "LOCAL_SOURCE", "MAX_SPLIT_BYTES",
    "OFFLINE_SPLITS", "ROLES", "SPLIT_ALIASES", "SPLITS", "TOKENIZER_KINDS", "UNK", "ByteTokenizer", "Corpus",
    "HubUnavailableError", "MissingSplitError", "TokenData", "Tokenizer", "WordTokenizer", "available_splits",
    "check_text_file", "command_name", "eval_starts", "get_batch", "iter_eval_batches", "load_tokens",
    "load_wikitext2", "make_tokenizer", "prepare_tokens", "remember_data_source", "remembered_data_source",
    "resolve_data_source", "spanviz_home", "split_files", "splits_for_folder", "splits_from_env",
    "tokenizer_from_dict",
]
