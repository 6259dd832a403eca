"""What a device can run: the precision modes it supports natively.

NNx admits a precision mode only where it runs natively (REFERENCE §8.5):

* ``fp32`` — everywhere.
* ``bf16`` — on the CPU, and on a CUDA device of compute capability 8.0 or newer (Ampere on;
  older GPUs emulate bfloat16 slowly, so NNx refuses instead of pretending). Not on MPS.
* ``fp16`` — on CUDA only (it needs a ``GradScaler``).

``precision_problem`` says why a mode is refused on a device (None: admitted); the model turns
that into ``PrecisionUnsupportedError`` unless its policy falls back to fp32.
"""

from __future__ import annotations

import torch

BF16_MIN_CAPABILITY = (8, 0)  # Ampere: native bfloat16 tensor-core math


def cuda_capability(device: torch.device) -> tuple[int, int]:
    """``(major, minor)`` compute capability of a CUDA device (its index, else the current one)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    return int(major), int(minor)


def bf16_supported(device: torch.device) -> bool:
    """Whether bfloat16 autocast runs natively on ``device``: always on the CPU, on CUDA from
    compute capability 8.0, never elsewhere (MPS) or on a CUDA device this machine does not have."""
    if device.type == "cpu":
        return True
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    return cuda_capability(device) >= BF16_MIN_CAPABILITY


def precision_problem(mode: str, device: torch.device) -> str | None:
    """Why ``mode`` ("fp32", "bf16", "fp16") cannot run on ``device``; None when it can."""
    if mode == "fp16" and device.type != "cuda":
        return "fp16 needs CUDA (it uses a GradScaler); use PrecisionPolicy('bf16') on CPU or fallback='fp32'"
    if mode == "bf16" and not bf16_supported(device):
        if device.type == "cuda" and torch.cuda.is_available():
            major, minor = cuda_capability(device)
            return (
                f"bf16 needs a CUDA device of compute capability ≥ 8.0 (Ampere or newer); {device} has "
                f"{major}.{minor}; use PrecisionPolicy('fp16') on this GPU, or fallback='fp32'"
            )
        return f"bf16 runs on the CPU or on CUDA (compute capability ≥ 8.0), not on {device}; use fallback='fp32'"
    return None


__all__ = ["BF16_MIN_CAPABILITY", "bf16_supported", "cuda_capability", "precision_problem"]
