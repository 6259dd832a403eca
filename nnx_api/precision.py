"""``nnx.precision``: the precision policy, and the precision matrix this host can run.

``precision_support()`` reports, per device type and mode, what this machine can claim::

    >>> import nnx_api as nnx
    >>> nnx.precision.precision_support("cpu")
    {'cpu': {'fp32': 'verified', 'fp16': 'unsupported', 'bf16': 'verified'}}

A run's ``NNRun.precision`` is its ``ResolvedPrecision``, narrowed to the surfaces it applied the
precision to (``TRAIN``, ``TRAINER_OBJECTIVE``, ``EVALUATE``, ``PREDICT``); ``record()`` is what
inspection shows, TF32 apart (read, never set)::

    >>> nnx.PrecisionPolicy("bf16").resolve("cpu").record()["autocast_dtype"]
    'bfloat16'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from nnx_core.errors import PrecisionUnsupportedError
from nnx_core.precision import EVALUATE, NOT_COVERED, PREDICT, SURFACES, TRAIN, TRAINER_OBJECTIVE, ResolvedPrecision
from nnx_adapters.pytorch.devices import precision_problem
from nnx_adapters.pytorch.devices import resolve_precision as resolve
from nnx_adapters.pytorch.precision import tf32_settings as _tf32  # noqa: F401 - NNx's private name of the TF32 read
from nnx_api.config.params import PrecisionPolicy

SUPPORT_MODES = ("fp32", "fp16", "bf16")
VERIFIED = frozenset({("cpu", "fp32"), ("cpu", "bf16")})  # held to the reference tolerances by the numerics tests


@dataclasses.dataclass(frozen=True, slots=True)
class ReferenceTolerance:
    """How far a reduced-precision run may drift from its fp32 reference: the largest absolute
    difference of an epoch's training ``loss`` and of any trained parameter (``weights``)."""

    loss: float
    weights: float


REFERENCE_TOLERANCES: Mapping[str, ReferenceTolerance] = {
    "fp16": ReferenceTolerance(loss=5e-3, weights=5e-4),
    "bf16": ReferenceTolerance(loss=5e-2, weights=5e-3),
}
"""The tolerances a reduced mode is held to against fp32 (NNx's published values); the
``"verified"`` cells of :func:`precision_support` are checked against them."""


def resolve_precision(params: Any, device: str | torch.device) -> ResolvedPrecision:
    """What ``params`` (an ``NNModelParams``) request becomes on ``device``, as ``NNModel`` resolves
    it: the ``precision`` policy; else NNx's ``mixed_precision`` flag (fp16 on CUDA, fp32 with the
    reason elsewhere); else fp32. An unsupported mode without ``fallback="fp32"`` raises
    ``PrecisionUnsupportedError``."""
    return resolve(getattr(params, "precision", None), bool(getattr(params, "mixed_precision", False)), device)


def _present() -> dict[str, bool]:
    mps = getattr(torch.backends, "mps", None)
    return {"cpu": True, "cuda": torch.cuda.is_available(), "mps": bool(mps is not None and mps.is_available())}


def precision_support(device: str | torch.device | None = None) -> dict[str, dict[str, str]]:
    """The precision matrix as this host sees it: ``{device_type: {mode: status}}`` for
    ``"cpu"``, ``"cuda"`` and ``"mps"`` (or only ``device``'s type; a CUDA index picks the GPU
    whose bf16 support is read). Each status is one of

    * ``"verified"`` — CPU fp32 and CPU bf16, the cells the reference-tolerance tests hold;
    * ``"supported"`` — the hardware is here and the mode resolves on it, nothing more claimed;
    * ``"unverified"`` — the hardware is not on this machine, so nothing is claimed;
    * ``"unsupported"`` — the device type cannot run the mode (fp16 off CUDA, bf16 on MPS or on
      a CUDA device below compute capability 8.0)."""
    present = _present()
    if device is None:
        targets = [torch.device(kind) for kind in present]
    else:
        targets = [device if isinstance(device, torch.device) else torch.device(str(device))]
    matrix: dict[str, dict[str, str]] = {}
    for target in targets:
        row = {}
        for mode in SUPPORT_MODES:
            if (target.type, mode) in VERIFIED:
                row[mode] = "verified"
            elif mode != "fp32" and target.type != "cuda":
                row[mode] = "unsupported"  # only the CPU (bf16, above) and CUDA run a reduced mode
            elif not present.get(target.type, False):
                row[mode] = "unverified"
            else:
                row[mode] = "supported" if precision_problem(mode, target) is None else "unsupported"
        matrix[target.type] = row
    return matrix


COVERS = SURFACES
"""NNx's name of every surface a precision applies to (``nnx_core.precision.SURFACES``)."""

__all__ = [
    "COVERS", "EVALUATE", "NOT_COVERED", "PREDICT", "TRAIN", "TRAINER_OBJECTIVE",
    "REFERENCE_TOLERANCES", "PrecisionPolicy", "PrecisionUnsupportedError", "ReferenceTolerance", "ResolvedPrecision",
    "precision_support", "resolve_precision",
]
