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

from spanviz.data.tokens import LOCAL_SOURCE, TokenData, load_tokens, prepare_tokens
from spanviz.settings import OFFLINE_SPLITS

# What the notebooks, README and scripts name; everything else is imported from its file (the split policy and the
# environment variables from spanviz.settings).
__all__ = ["LOCAL_SOURCE", "OFFLINE_SPLITS", "TokenData", "load_tokens", "prepare_tokens"]
