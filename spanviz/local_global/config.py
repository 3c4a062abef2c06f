"""LS-attention settings: the head split (n_local local heads, n_global = n_head − n_local global), the window p,
their one validation, and the paper's shape.

The settings themselves are fields of :class:`spanviz.model.GPTConfig` (``n_local``, ``window``), so a run's
store key holds them; :func:`check_head_split` is the check that ``GPTConfig`` and the benchmarks share.
Source: arXiv 2505.15548 (author defaults, from its public nanoGPT fork); the checks are spanviz's.
"""

from __future__ import annotations

from typing import Any

from spanviz.validators import check_int

PAPER: dict[str, Any] = dict(n_layer=6, d_model=192, n_head=6, d_head=32, n_local=5, window=50, context_length=2048)
"""The author's defaults: 6 layers, d_model 192 = 6 heads × d_head 32, 5 local heads with p = 50 + 1 global, T 2048
(PG-19, 10k SentencePiece vocabulary). The revision used 11 local + 1 global heads with p = 100."""


def check_head_split(n_head: int, n_local: Any, window: Any) -> tuple[int, int | None]:
    """Check an LS head split: ``n_local`` in [0, n_head]; ``window`` None or an integer >= 1 (required if n_local > 0).

    Args:
        n_head: H, heads per layer (already checked by the caller). n_local: local heads. window: p, keys a local
            head sees including the token itself (may be set with n_local = 0: it then has no effect).
    Returns:
        (n_local, window) as ints (window None when it was None).
    Raises:
        ValueError: naming ``n_local`` or ``window``, the value and what is allowed.
    """
    n_local = check_int("n_local", n_local, 0, n_head)
    if window is None:
        if n_local > 0:
            raise ValueError(f"window must be set (>= 1) when n_local > 0, got window=None, n_local={n_local}")
        return n_local, None
    return n_local, check_int("window", window, 1)
