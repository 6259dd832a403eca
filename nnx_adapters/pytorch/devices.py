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

import contextlib
from typing import Any

import torch

from nnx_core.errors import PrecisionUnsupportedError
from nnx_core.precision import ResolvedPrecision
from nnx_adapters.pytorch import precision as _runtime  # noqa: F401 - registers the torch runtime

BF16_MIN_CAPABILITY = (8, 0)  # Ampere: native bfloat16 tensor-core math


def cuda_capability(device: torch.device) -> tuple[int, int]:
    """``(major, minor)`` compute capability of a CUDA device (its index, else the current one)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    return int(major), int(minor)


def missing_cuda(device: torch.device) -> str | None:
    """Why ``device`` (a CUDA device) is not on this machine — no CUDA at all, or an index past
    the devices there are; None when it is there (or ``device`` is not CUDA)."""
    if device.type != "cuda":
        return None
    if not torch.cuda.is_available():
        return "CUDA is not available on this host"
    count = torch.cuda.device_count()
    if device.index is not None and not 0 <= device.index < count:
        return f"{device} does not exist on this host ({count} CUDA device(s))"
    return None


def bf16_supported(device: torch.device) -> bool:
    """Whether bfloat16 autocast runs natively on ``device``: always on the CPU; on a CUDA device
    whose own bf16 support is native (compute capability 8.0 on, as torch's
    ``is_bf16_supported(including_emulation=False)`` reads it on that device), never where
    bf16 is only emulated, elsewhere (MPS), or on a CUDA device this machine does not have."""
    if device.type == "cpu":
        return True
    if device.type != "cuda" or missing_cuda(device) is not None:
        return False
    with torch.cuda.device(device.index) if device.index is not None else contextlib.nullcontext():
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))


def precision_problem(mode: str, device: torch.device) -> str | None:
    """Why ``mode`` ("fp32", "bf16", "fp16") cannot run on ``device``; None when it can."""
    missing = missing_cuda(device)
    if missing is not None and (mode != "fp32" or torch.cuda.is_available()):
        return f"{mode} was requested on {device}, but {missing}; use fallback='fp32' or another device"
    if mode == "fp16" and device.type != "cuda":
        return ("fp16 needs CUDA (fp16 runs with a GradScaler, on CUDA only); "
                "use PrecisionPolicy('bf16') on CPU or fallback='fp32'")
    if mode == "bf16" and not bf16_supported(device):
        if device.type == "cuda":
            return (
                f"bf16 needs native bf16 support, not emulation: a CUDA device of compute capability ≥ 8.0 "
                f"(Ampere or newer){_capability_note(device)}; use PrecisionPolicy('fp16') on this GPU, or "
                "fallback='fp32'"
            )
        return f"bf16 runs on the CPU or on CUDA (compute capability ≥ 8.0), not on {device}; use fallback='fp32'"
    return None


def _capability_note(device: torch.device) -> str:
    try:
        major, minor = cuda_capability(device)
    except (AssertionError, RuntimeError):  # a build or driver that cannot say
        return f", which {device} is not"
    return f"; {device} has {major}.{minor}"


def resolve_precision(policy: Any, mixed_precision: bool, device: str | torch.device) -> ResolvedPrecision:
    """What a precision request becomes on ``device`` (a name or ``torch.device``): the ``policy``
    (a ``PrecisionPolicy``: its ``mode`` and ``fallback``); else NNx's ``mixed_precision`` flag (fp16 on CUDA, silently fp32
    elsewhere, with the reason); else fp32. An unsupported mode whose fallback is not ``"fp32"``
    raises ``PrecisionUnsupportedError`` saying why."""
    device = device if isinstance(device, torch.device) else torch.device(str(device))
    if policy is None and mixed_precision:
        effective = "fp16" if device.type == "cuda" else "fp32"
        reason = None if effective == "fp16" else f"mixed_precision applies on CUDA only; {device.type} runs in fp32"
        return ResolvedPrecision("fp16", effective, device.type, "mixed_precision", reason)
    if policy is None:
        return ResolvedPrecision("fp32", "fp32", device.type)
    problem = precision_problem(policy.mode, device)
    if problem is not None and policy.fallback != "fp32":
        raise PrecisionUnsupportedError(problem)
    return ResolvedPrecision(policy.mode, "fp32" if problem else policy.mode, device.type, "policy", problem)


__all__ = [
    "BF16_MIN_CAPABILITY", "bf16_supported", "cuda_capability", "missing_cuda", "precision_problem", "resolve_precision",
]
