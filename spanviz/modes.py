"""Module modes, set for a block and put back afterwards (one place instead of a ``was_training`` dance per caller)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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
