"""Shared test set-up: no progress bars, and a fresh runs root.

Torch-free on purpose: ``tests/core`` and the storage/property tests collect and pass without
torch (``make core-check``). Torch helpers live beside the tests that use them
(``tests/api/tiny.py``).
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("NNX_PROGRESS", "0")


@pytest.fixture
def runs(tmp_path):
    """A fresh runs root."""
    return tmp_path / "runs"
