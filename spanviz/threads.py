"""Temporarily set torch's intra-op thread count (tiny tensors are often fastest on one thread)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Within the block, use ``threads`` intra-op threads (None: leave the setting); restore it afterwards."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
