"""Batches: random contiguous (x, y) windows for training, fixed windows for evaluation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from spanviz.validators import check_device, check_int


def _check_ids(ids: Any, context_length: int) -> Tensor:
    if not isinstance(ids, Tensor) or ids.ndim != 1 or ids.is_floating_point() or ids.is_complex():
        shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(f"ids must be a 1-D integer tensor of token ids; got {shape}")
    if ids.numel() < context_length + 1:
        raise ValueError(f"ids has {ids.numel()} tokens; context_length={context_length} needs at least "
                         f"{context_length + 1} (one window of context_length + 1 tokens)")
    return ids


def get_batch(
    ids: Tensor,
    batch_size: int,
    context_length: int,
    generator: torch.Generator,
    device: str | torch.device = "cpu",
) -> tuple[Tensor, Tensor]:
    """Random contiguous training windows: inputs ``x`` and next-token targets ``y``.

    Draws ``batch_size`` start offsets uniformly from ``[0, len(ids) - context_length - 1]`` with
    ``generator``, takes windows of ``context_length + 1`` tokens, and returns ``x = window[:, :-1]``,
    ``y = window[:, 1:]``. The same generator state gives the same batch.

    Args:
        ids: ``(N,)`` integer token ids, N >= context_length + 1.
        batch_size: B >= 1. context_length: T >= 1.
        generator: a seeded CPU ``torch.Generator``.
        device: where to put ``x`` and ``y``.

    Returns:
        ``(x, y)``, each ``(B, T)`` ``torch.long``, with ``y[:, :-1] == x[:, 1:]``.

    Raises:
        ValueError: batch_size or context_length not an int >= 1, ids not 1-D integer or too short,
            generator not a ``torch.Generator``, device not available here.
    """
    check_int("batch_size", batch_size, 1)
    check_int("context_length", context_length, 1)
    _check_ids(ids, context_length)
    device = check_device("device", device)
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator={generator!r} must be a torch.Generator (e.g. torch.Generator().manual_seed(0))")
    n_starts = ids.numel() - context_length  # valid starts: 0 .. N - T - 1
    starts = torch.randint(n_starts, (batch_size,), generator=generator, device=generator.device)
    return _windows(ids, starts, context_length, device)


def _windows(ids: Tensor, starts: Tensor, context_length: int, device: str | torch.device) -> tuple[Tensor, Tensor]:
    """x, y of shape (len(starts), T) from windows ids[s : s + T + 1]."""
    offsets = starts.to(ids.device)[:, None] + torch.arange(context_length + 1, device=ids.device)  # (B, T+1)
    window = ids[offsets].long()
    return window[:, :-1].to(device), window[:, 1:].to(device)


def eval_starts(n_tokens: int, context_length: int, n_windows: int | None = None) -> Tensor:
    """Fixed start offsets of evaluation windows, so eval losses are comparable across runs.

    ``n_windows=None``: consecutive non-overlapping windows ``0, T, 2T, ...`` covering the text (every token
    predicted once, except a tail shorter than a window). Otherwise ``n_windows`` starts evenly spaced from
    0 to the last valid start ``n_tokens - T - 1``, so a small budget still samples the whole text.

    Returns:
        ``(n_windows,)`` ``torch.long``.

    Raises:
        ValueError: n_tokens not an int or < T + 1, or context_length / n_windows not an int >= 1.
    """
    check_int("context_length", context_length, 1)
    check_int("n_tokens", n_tokens, 0)
    if n_tokens < context_length + 1:
        raise ValueError(f"n_tokens={n_tokens} is too short for context_length={context_length}; "
                         f"need at least {context_length + 1}")
    last = n_tokens - context_length - 1
    if n_windows is None:
        return torch.arange(0, last + 1, context_length, dtype=torch.long)
    check_int("n_windows", n_windows, 1)
    return torch.linspace(0, last, n_windows, dtype=torch.float64).round().long()


def iter_eval_batches(
    ids: Tensor,
    batch_size: int,
    context_length: int,
    n_batches: int | None = None,
    device: str | torch.device = "cpu",
) -> Iterator[tuple[Tensor, Tensor]]:
    """Deterministic evaluation batches over :func:`eval_starts` windows (no randomness).

    With ``n_batches`` the windows are ``n_batches * batch_size`` evenly spaced ones; with ``None`` all
    non-overlapping windows (the last batch may be smaller than ``batch_size``).

    Yields:
        ``(x, y)``, each ``(b, T)`` ``torch.long`` with ``b <= batch_size``.

    Raises:
        ValueError: as :func:`get_batch`, and n_batches not None or an int >= 1.
    """
    check_int("batch_size", batch_size, 1)
    check_int("context_length", context_length, 1)
    _check_ids(ids, context_length)
    if n_batches is not None:
        check_int("n_batches", n_batches, 1)
    n_windows = None if n_batches is None else n_batches * batch_size
    starts = eval_starts(ids.numel(), context_length, n_windows)
    for chunk in starts.split(batch_size):
        yield _windows(ids, chunk, context_length, device)
