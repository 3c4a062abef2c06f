"""How torch runs a block of code, set on entry and put back on exit: a module's train/eval mode and torch's
intra-op thread count (one place instead of a ``was_training`` or ``get_num_threads`` dance per caller); and,
once per process, MKL's vector math settled on one thread (:func:`settle_vector_math`)."""

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


_vector_math_settled = False


def settle_vector_math() -> None:
    """Run this process's first elementwise exp of torch on one thread, before any exp split over threads.

    On x86 the CPU build of torch computes exp, log, sqrt, tanh, ... of contiguous float32 tensors with MKL's vector
    math library (VML). Measured here (torch 2.13.0+cpu, MKL 2024.2, 2 threads, a loaded 2-core machine): when the
    process's first such call is split over two threads after MKL's first matrix product, in about 3 % of processes
    (up to 10 % under heavier load) one thread's half of the result comes out with a relative error of 1.5e-4
    (about 12 correct bits; normally 6e-8), and every later call is right again. A training run's first loss then
    differed in the fifth digit, and fresh runs of one command did not give one curve bit for bit. A first call
    on one thread (8 elements: below torch's grain size, so never split) settles MKL for the whole process, for
    every VML function. Cheap and idempotent; :class:`~spanviz.train.Trainer` calls it, so every run, panel and
    sweep does. Source: spanviz (measured; tests/test_train.py)."""
    global _vector_math_settled
    if not _vector_math_settled:
        torch.exp(torch.zeros(8))
        _vector_math_settled = True
