"""Shared test fixtures: where the real corpus lives (read in place, never copied)."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"real corpus not found at {CORPUS} (CI lays ../shared beside the checkout)")
    return CORPUS
