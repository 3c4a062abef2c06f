"""Shared test fixtures."""

from pathlib import Path

import pytest


@pytest.fixture
def wikitext_dir() -> Path:
    """The shared offline copy of WikiText-2 (validation and test splits), beside the repository."""
    path = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wikitext-2"
    if not path.is_dir():
        pytest.skip(f"WikiText-2 offline copy not found at {path}")
    return path
