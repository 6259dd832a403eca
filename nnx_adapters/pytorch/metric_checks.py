"""Host checks of the batches of ``StreamingMetrics`` and ``MetricSpec.accumulator()``.

``StreamingMetrics`` and ``MetricSpec.accumulator()`` are user-facing: nothing in a training step
calls them, so reading a batch back to the host to check it costs no training time. Refusals are
``TrainingInputError`` (a ``ValueError``), raised before any accumulator sees the batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from nnx_core.errors import TrainingInputError

_INT64_MAX = np.iinfo(np.int64).max


def host(value: Any) -> np.ndarray:
    """``value`` (a tensor, an array or a sequence) as a NumPy array on the host."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def tensor_of(value: Any) -> torch.Tensor:
    """A tensor of ``value``; a read-only or negatively strided array is copied first (torch can
    view neither)."""
    if isinstance(value, np.ndarray) and (not value.flags.writeable or any(s < 0 for s in value.strides)):
        value = value.copy()
    return torch.as_tensor(value)


def integers(values: np.ndarray, what: str) -> np.ndarray:
    """``values`` as ``int64`` class labels; fractions, NaN, ±inf and unsigned labels above
    2**63 - 1 are refused (they would be rounded or wrapped)."""
    values = np.asarray(values)
    if values.dtype.kind == "u" and values.size and int(values.max()) > _INT64_MAX:
        raise TrainingInputError(f"{what} above 2**63 - 1 do not fit int64 class labels")
    if values.dtype.kind in "iub":
        return values.astype(np.int64, copy=False)
    if values.dtype.kind not in "f":
        raise TrainingInputError(f"{what} must be integer class labels, got {values.dtype} values")
    with np.errstate(invalid="ignore"):
        cast = values.astype(np.int64)
    if not np.array_equal(cast, values):
        raise TrainingInputError(f"{what} must be integer class labels, got non-integral values")
    return cast


def class_range(values: np.ndarray, n_classes: int | None, what: str = "categorical targets") -> None:
    """Class indices must address one of ``n_classes`` classes (unknown: be non-negative)."""
    if not values.size:
        return
    low, high = int(values.min()), int(values.max())
    if low < 0 or (n_classes is not None and high >= n_classes):
        bound = f"[0, {n_classes})" if n_classes is not None else "[0, C)"
        raise TrainingInputError(f"{what} must be class indices in {bound}, got values in [{low}, {high}]; "
                                 "mask the others with valid= or ignore_index")


def same_shape(array: np.ndarray, target: np.ndarray, name: str) -> np.ndarray:
    """``array``, which must be shaped like ``target`` (never broadcast)."""
    if array.shape != target.shape:
        raise TrainingInputError(f"{name} must be shaped like the targets {target.shape}, got {array.shape}")
    return array


def target_rule(target: np.ndarray, mask: np.ndarray, ignore_index: int | None) -> np.ndarray:
    """The one masking rule: a NaN target, or one equal to ``ignore_index``, is never scored."""
    if target.dtype.kind == "f":
        mask = mask & ~np.isnan(target)
    if ignore_index is not None and target.dtype.kind in "iufb":
        mask = mask & (target != ignore_index)
    return mask


def top_class_problem(top: int, width: int, where: str) -> str:
    """A class index scored before any width was known does not fit the width ``where`` fixes."""
    return f"class index {top} was scored before any width was known, but {where}: {width} classes"
