"""The torch side of a resolved precision (``nnx_core.precision.PrecisionRuntime``).

Registered on import: ``ResolvedPrecision.autocast_dtype`` / ``autocast()`` / ``build_scaler()`` /
``output()`` / ``tf32`` ask it. TF32 is read the way torch is set: torch 2.9's ``fp32_precision``
setting wins where it was made (its legacy ``allow_tf32`` read then raises), cuDNN's per-op
settings (``conv``, ``rnn``) over its top-level one; a setting that cannot be read is None.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from nnx_core.precision import register_precision_runtime

_UNSET = ("", "none")  # a torch 2.9 fp32_precision that says nothing: the legacy switch decides


def _setting(backends: tuple[Any, ...], legacy: Any) -> bool | None:
    for backend in backends:
        value = getattr(backend, "fp32_precision", None) if backend is not None else None
        if isinstance(value, str) and value not in _UNSET:
            return value == "tf32"
    try:
        return bool(legacy.allow_tf32)
    except (AttributeError, RuntimeError):  # the new API was used: the legacy read refuses
        return None


def tf32_settings() -> dict[str, bool | None]:
    """Whether TF32 is on for CUDA matmuls, cuDNN convolutions and cuDNN RNNs (None: unreadable)."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    return {
        "cuda_matmul": _setting((matmul,), matmul),
        "cudnn_conv": _setting((getattr(cudnn, "conv", None), cudnn), cudnn),
        "cudnn_rnn": _setting((getattr(cudnn, "rnn", None), cudnn), cudnn),
    }


class TorchPrecision:
    """Dtypes, autocast contexts, ``GradScaler`` s and TF32 reads for ``ResolvedPrecision``."""

    def dtype(self, name: str) -> torch.dtype:
        """``torch.<name>``."""
        return getattr(torch, name)

    def autocast(self, device_type: str, name: str) -> Any:
        """``torch.autocast`` on ``device_type`` to ``torch.<name>``."""
        return torch.autocast(device_type=device_type, dtype=self.dtype(name))

    def scaler(self, device_type: str) -> torch.amp.GradScaler:
        """A fresh ``torch.amp.GradScaler`` for ``device_type``."""
        return torch.amp.GradScaler(device_type)

    def output(self, tensor: Any) -> Any:
        """A float16 / bfloat16 tensor as float32; anything else as it is."""
        if isinstance(tensor, torch.Tensor) and tensor.dtype in (torch.float16, torch.bfloat16):
            return tensor.float()
        return tensor

    def tf32(self) -> Mapping[str, bool | None]:
        """:func:`tf32_settings`."""
        return tf32_settings()


register_precision_runtime(TorchPrecision())

__all__ = ["TorchPrecision", "tf32_settings"]
