"""Shared test set-up: no progress bars, and small helpers for tiny training jobs."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("NNX_PROGRESS", "0")


@pytest.fixture
def runs(tmp_path):
    """A fresh runs root."""
    return tmp_path / "runs"


def tiny_data(n: int = 48, d: int = 4, classes: int = 3, seed: int = 0):
    """A small deterministic classification set."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return x, y


def batches(x, y, size):
    """A list of (x, y) batches (a re-iterable loader)."""
    return [(x[i : i + size], y[i : i + size]) for i in range(0, len(x), size)]
