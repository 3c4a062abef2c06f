"""Shared test fixtures."""

from pathlib import Path

import pytest

from spanviz.contexts import torch_threads


@pytest.fixture
def wikitext_dir() -> Path:
    """The shared offline copy of WikiText-2 (validation and test splits), beside the repository."""
    path = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wikitext-2"
    if not path.is_dir():
        pytest.skip(f"WikiText-2 offline copy not found at {path}")
    return path


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread per test: tiny models train fastest that way on a small, shared CPU.

    Results do not depend on the thread count; the previous setting is restored afterwards.
    """
    with torch_threads(1):
        yield


@pytest.fixture
def synthetic():
    """A tiny random-token stand-in for :class:`spanviz.data.TokenData` (vocab 64, 2000/500 tokens)."""
    from types import SimpleNamespace

    import torch

    g = torch.Generator().manual_seed(0)
    return SimpleNamespace(
        train_ids=torch.randint(0, 64, (2000,), generator=g),
        eval_ids=torch.randint(0, 64, (500,), generator=g),
        vocab_size=64,
        describe=lambda: {"source": "synthetic"},
    )
