"""GPU test set-up: deterministic cuBLAS, exact float32 matmuls, and one line saying why they skipped.

``CUBLAS_WORKSPACE_CONFIG`` must be set before the first cuBLAS call of the process for
``torch.use_deterministic_algorithms`` to hold on CUDA; it is set here, at collection, before
any test runs (setdefault: a value from the environment wins).
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

from gpu_support import REASON  # noqa: E402


@pytest.fixture
def deterministic():
    """Deterministic kernels (warn where torch has none) and IEEE float32 matmuls (no TF32)."""
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before[2], before[3]


def pytest_terminal_summary(terminalreporter):
    """One visible line when the GPU tests were skipped for want of CUDA (shown even with -q)."""
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if REASON in str(r.longrepr)]
    if skipped:
        terminalreporter.write_line(f"tests/gpu: {len(skipped)} GPU tests skipped: {REASON} (run `make test-gpu` on a GPU)")
