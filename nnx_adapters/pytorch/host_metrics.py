"""One registered metric outside a run: ``MetricSpec.accumulator()`` (``HostAccumulator``).

It is user-facing and never called inside a training step, so every batch is read on the host and
checked. A ``labels`` metric scores labels of one kind, numbers or strings (empty batches decide
nothing): each distinct label gets a compact class index in a table that grows with the labels
(never with the samples), so negative, very large and string labels are counted like class
indices, and the scores are read in sorted label order (``average="binary"``: the larger of two
labels, 1 of {0, 1} or {-1, 1}, is the positive one, as in scikit-learn). Two accumulators of the
same metric ``merge``: the other's counts are added in place, its labels mapped into this table.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from nnx_core.errors import TrainingInputError
from nnx_adapters.pytorch.metric_checks import host, integers
from nnx_adapters.pytorch.metrics import Confusion, LabelCounts, MetricEntry, _Sum, count_classes_as_seen


def _kind(values: np.ndarray) -> str:
    return "string" if values.dtype.kind in "USO" else "number"


class HostAccumulator:
    """One registered metric outside a run (module docstring): ``update(target, prediction)``
    takes arrays or tensors (sample axis first: labels, probabilities or values, as the metric's
    input says), ``result()`` is the value over every sample so far, None before any."""

    def __init__(self, entry: MetricEntry, config: Mapping[str, Any]) -> None:
        self._metric = count_classes_as_seen(entry.factory(config, None))
        self._labels = entry.input == "labels"
        self._index: dict[Any, int] = {}  # label → class index (1-D labels of a labels metric)
        self._kind: str | None = None
        self._seen = False

    def update(self, target: Any, prediction: Any) -> None:
        """Add one batch."""
        t, p = host(target), host(prediction)
        if len(t) != len(p):
            raise TrainingInputError(f"target and prediction differ in size: {len(t)} vs {len(p)} samples")
        if self._labels and t.ndim == 1 and p.ndim == 1:
            if not t.size:
                return  # decides nothing, not even the label kind
            kind = _kind(t)
            if _kind(p) != kind or self._kind not in (None, kind):
                raise TrainingInputError("labels must be of one kind, numbers or strings, in every batch "
                                         f"(got {self._kind or _kind(p)} and {kind} labels)")
            self._kind = kind
            if kind == "number":
                t, p = integers(t, "target labels"), integers(p, "predicted labels")
            t, p = self._codes(t), self._codes(p)
        tt, pp = torch.as_tensor(np.array(t)), torch.as_tensor(np.array(p))
        if not tt.is_floating_point():
            tt = tt.long()
        self._metric.update(tt, pp)
        self._seen = self._seen or t.size > 0

    def _codes(self, values: np.ndarray) -> np.ndarray:
        unique, inverse = np.unique(values, return_inverse=True)
        for label in unique.tolist():
            self._index.setdefault(label, len(self._index))
        return np.array([self._index[label] for label in unique.tolist()], dtype=np.int64)[inverse.reshape(-1)]

    def merge(self, other: HostAccumulator) -> None:
        """Add ``other``'s counts (the same metric, disjoint samples) to this accumulator, in place."""
        if not isinstance(other, HostAccumulator) or type(other._metric) is not type(self._metric):
            raise TrainingInputError(f"cannot merge a {type(other).__name__} of another metric into this accumulator")
        if None not in (self._kind, other._kind) and self._kind != other._kind:
            raise TrainingInputError(f"cannot merge {self._kind} labels with {other._kind} labels")
        mapping = [0] * len(other._index)
        for label, code in other._index.items():
            mapping[code] = self._index.setdefault(label, len(self._index))
        self._metric = _add_state(self._metric, other._metric, mapping if other._index else None)
        self._kind = self._kind or other._kind
        self._seen = self._seen or other._seen

    def result(self) -> float | None:
        """The metric over everything added (None before any sample)."""
        if not self._seen:
            return None
        metric = self._metric
        order = [self._index[label] for label in sorted(self._index)]
        if order != sorted(order):  # read the counts in sorted label order
            metric = copy.deepcopy(metric)
            for part in vars(metric).values():
                if isinstance(part, Confusion) and part.matrix is not None:
                    part.resize(len(order))
                    keep = torch.tensor(order, device=part.matrix.device)
                    part.matrix = part.matrix.reshape(part.n, part.n)[keep][:, keep].reshape(-1)
        return float(metric.result())


def _add_state(a: Any, b: Any, mapping: list[int] | None) -> Any:
    """``b``'s state added to ``a``'s (a copy), part by part; ``b``'s class ``i`` is ``a``'s ``mapping[i]``."""
    if isinstance(a, Confusion):
        out = copy.deepcopy(a)
        if b.matrix is None:
            return out
        codes = torch.tensor(mapping if mapping is not None else list(range(b.n)), dtype=torch.long)
        out.resize(max(out.n, int(codes.max()) + 1 if codes.numel() else 0))
        if out.matrix is None:
            out.matrix = torch.zeros(out.n * out.n, dtype=b.matrix.dtype, device=b.matrix.device)
        rows = codes[: b.n].reshape(-1, 1) * out.n + codes[: b.n].reshape(1, -1)
        out.matrix = out.matrix.index_add(0, rows.reshape(-1).to(out.matrix.device), b.matrix)
        return out
    if isinstance(a, bool):
        return a or b
    if isinstance(a, (int, float, torch.Tensor)):
        return a + b
    if isinstance(a, (_Sum, LabelCounts)) or hasattr(a, "__dict__") or hasattr(type(a), "__slots__"):
        out = copy.copy(a)
        names = list(getattr(a, "__dict__", {})) + [n for n in getattr(type(a), "__slots__", ()) if hasattr(a, n)]
        for name in names:
            setattr(out, name, _add_state(getattr(a, name), getattr(b, name), mapping))
        return out
    if a == b:
        return a
    raise TrainingInputError(f"cannot merge accumulator state of type {type(a).__name__}")
