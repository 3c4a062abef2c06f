"""The local/global panel's analytic view: the attention mask of every head (no widgets).

The first ``n_local`` heads are local — query i attends key j ⇔ 0 ≤ i − j < p (a sliding window of p keys) —, the
rest global (causal: j ≤ i). The masks come from ``local_global.head_mask_mod`` (the mask the model trains with)
made dense by ``local_global.dense_mask``.

Source: arXiv 2505.15548 (LS-attention).
"""

from __future__ import annotations

import numpy as np

from spanviz import local_global
from spanviz.threads import torch_threads


def head_masks(n_head: int, n_local: int, window: int, T: int, threads: int | None = None) -> np.ndarray:
    """bool (H, T, T): True where query i (row) may attend key j (column), per head.

    Args:
        n_head: H. n_local: local heads (the first ones), 0..H. window: p >= 1. T: context length.
        threads: torch intra-op threads (None: leave torch's setting).
    Raises:
        What ``local_global.head_mask_mod`` / ``dense_mask`` raise (bad sizes).
    """
    mod = local_global.head_mask_mod(n_local=n_local, window=window)
    with torch_threads(threads):
        return local_global.dense_mask(mod, n_head, T).numpy()  # (H, T, T)


def head_labels(n_head: int, n_local: int, window: int) -> list[str]:
    """One title per head: ``"head h: local (p=…)"`` for the first ``n_local``, ``"head h: global"`` after."""
    return [f"head {h}: local (p={window})" if h < n_local else f"head {h}: global" for h in range(n_head)]
