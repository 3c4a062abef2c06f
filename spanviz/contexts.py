"""How torch runs a block of code, set on entry and put back on exit: a module's train/eval mode and torch's
intra-op thread count (one place instead of a ``was_training`` or ``get_num_threads`` dance per caller)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn


@contextlib.contextmanager
def eval_mode(module: nn.Module) -> Iterator[nn.Module]:
    """Within the block ``module`` is in eval mode (dropout off); its previous train/eval mode is restored after,
    also when the block raises. Gradients are not touched: combine with ``torch.no_grad()`` where wanted."""
    was_training = module.training
    module.eval()
    try:
        yield module
    finally:
        module.train(was_training)


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Within the block, use ``threads`` intra-op threads (None: leave the setting); restore it afterwards, also
    when the block raises. Tiny tensors are often fastest on one thread."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
