"""Shared set-up of the tests that run training in this process and compare it bit for bit."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """One torch thread while the test runs (bit-identical comparisons need the same thread count)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
