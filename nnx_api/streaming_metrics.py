"""Mergeable metric accumulation over batches (``nnx.StreamingMetrics``).

``StreamingMetrics.for_task(specs, task)`` builds one accumulator per declared ``MetricSpec`` (the
registry of ``nnx_adapters.pytorch.metrics``: the same accumulators training and evaluation use),
``update`` adds a batch, ``merge`` combines two accumulations over disjoint samples (a new object;
the result does not depend on the order) and ``finalize`` returns a read-only
:class:`MetricSnapshot`. The built-in accumulators keep sums and confusion counts, so memory does
not grow with the samples. A user-registered accumulator merges when its state is made of the
same parts (``_Sum``, ``Confusion``, ``LabelCounts``, tensors and numbers); otherwise ``merge``
raises ``TypeError`` naming the metric.

NaN regression targets and ``ignore_index`` class targets are masked: they are neither counted
nor scored. ``valid`` (a boolean mask of the rows, or of the elements for regression) masks more.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs
import torch

from nnx_core.errors import ParamsError
from nnx_adapters.pytorch.metrics import REGISTRY, Confusion, LabelCounts, _Sum, resolve

__all__ = ["MetricSnapshot", "StreamingMetrics"]


@attrs.frozen
class MetricSnapshot:
    """What ``StreamingMetrics.finalize`` read: ``count`` (the valid targets scored), ``values``
    (label → float, read-only) and ``unavailable`` (the labels with no value: nothing scored)."""

    count: int
    values: Mapping[str, float]
    unavailable: tuple[str, ...] = ()


def _as_tensor(value: Any, what: str) -> torch.Tensor:
    if value is None:
        raise ParamsError(f"StreamingMetrics.update.{what}", "is required for this task's metrics")
    return value.detach() if isinstance(value, torch.Tensor) else torch.as_tensor(value)


class StreamingMetrics:
    """Declared metrics accumulated batch by batch, mergeable across disjoint parts (module docstring)."""

    def __init__(self, metrics: Sequence[Any], task: Any) -> None:
        kind = task.kind
        problems = resolve(list(metrics), kind, task.n)
        if problems:
            raise ParamsError("StreamingMetrics.metrics", "; ".join(problems))
        self.metrics = tuple(metrics)
        self.semantics: str = kind
        self.num_outputs: int | None = task.n
        self.ignore_index: int | None = task.ignore_index
        self.threshold: float = task.threshold
        self.labels = task.labels
        self.bounded = True
        self.count = 0
        self._entries = [REGISTRY[(s.id, s.version)] for s in self.metrics]
        self._accumulators = [e.factory(s.config, task.n) for s, e in zip(self.metrics, self._entries, strict=True)]

    @classmethod
    def for_task(cls, metrics: Sequence[Any], task: Any, *, materialize: bool = False) -> StreamingMetrics:
        """The accumulators of ``metrics`` (``MetricSpec``s) for ``task`` (a ``TaskSpec``).
        ``materialize`` is accepted for NNx's signature; every registered metric here accumulates
        in bounded memory, so it changes nothing."""
        return cls(metrics, task)

    def update(
        self, target: Any, *, probabilities: Any = None, labels: Any = None, values: Any = None, valid: Any = None
    ) -> int:
        """Add one batch: class ``probabilities`` (or predicted ``labels``) for a categorical task,
        predicted 0/1 ``labels`` (or ``probabilities``, thresholded) for multilabel, predicted
        ``values`` for regression. Returns the valid targets this batch added."""
        target = _as_tensor(target, "target")
        mask = None if valid is None else _as_tensor(valid, "valid").bool()
        if self.semantics == "regression":
            predicted = _as_tensor(values, "values")
            keep = ~torch.isnan(target)
            if mask is not None:
                keep &= mask.reshape(mask.shape + (1,) * (keep.dim() - mask.dim()))
            target, predicted = target[keep], predicted[keep]
            for acc in self._accumulators:
                acc.update(target, predicted)
            self.count += int(target.numel())
            return int(target.numel())
        if self.semantics == "multilabel":
            if labels is None and probabilities is not None:
                labels = _as_tensor(probabilities, "probabilities") >= self.threshold
            predicted = _as_tensor(labels, "labels").long()
            rows = torch.ones(target.shape[0], dtype=torch.bool) if mask is None else mask
            truth = (target[rows] >= 0.5).long()
            for acc in self._accumulators:
                acc.update(truth, predicted[rows])
            self.count += int(rows.sum())
            return int(rows.sum())
        target = target.reshape(-1).long()
        keep = torch.ones_like(target, dtype=torch.bool) if mask is None else mask.reshape(-1)
        if self.ignore_index is not None:
            keep &= target != self.ignore_index
        probs = None if probabilities is None else _as_tensor(probabilities, "probabilities")
        if probs is not None:
            probs = probs.reshape(-1, probs.shape[-1])
        predicted = _as_tensor(labels, "labels").reshape(-1).long() if labels is not None else None
        if predicted is None and probs is not None:
            predicted = probs.argmax(-1)
        for entry, acc in zip(self._entries, self._accumulators, strict=True):
            given = probs if entry.input == "probabilities" else predicted
            if given is None:
                raise ParamsError("StreamingMetrics.update", f"a {entry.input} metric needs {entry.input}=...")
            acc.update(target[keep], given[keep])
        added = int(keep.sum())
        self.count += added
        return added

    def update_logits(self, target: Any, logits: Any, *, valid: Any = None) -> int:
        """``update`` from raw outputs: softmax probabilities (categorical), sigmoid probabilities
        (multilabel) or the values themselves (regression)."""
        raw = _as_tensor(logits, "logits").float()
        if self.semantics == "regression":
            return self.update(target, values=raw, valid=valid)
        if self.semantics == "multilabel":
            return self.update(target, probabilities=torch.sigmoid(raw), valid=valid)
        return self.update(target, probabilities=torch.softmax(raw, -1), valid=valid)

    def merge(self, other: StreamingMetrics) -> StreamingMetrics:
        """A new accumulation of both parts (disjoint samples); neither part changes."""
        if not isinstance(other, StreamingMetrics):
            raise TypeError(f"StreamingMetrics.merge needs a StreamingMetrics, got {type(other).__name__}")
        if (self.metrics, self.semantics, self.num_outputs, self.ignore_index, self.threshold) != (
            other.metrics, other.semantics, other.num_outputs, other.ignore_index, other.threshold
        ):
            raise ParamsError("StreamingMetrics.merge", "the two parts declare different metrics or tasks")
        merged = copy.deepcopy(self)
        merged.count = self.count + other.count
        merged._accumulators = [
            _merge(a, b, spec.label) for a, b, spec in zip(self._accumulators, other._accumulators, self.metrics, strict=True)
        ]
        return merged

    def finalize(self) -> MetricSnapshot:
        """The values so far (the accumulation can go on); none before any valid target."""
        if not self.count:
            return MetricSnapshot(0, MappingProxyType({}), tuple(s.label for s in self.metrics))
        values = {s.label: float(acc.result()) for s, acc in zip(self.metrics, self._accumulators, strict=True)}
        return MetricSnapshot(self.count, MappingProxyType(values), ())


def _merge(a: Any, b: Any, label: str) -> Any:
    """Two accumulator states added part by part (module docstring)."""
    if a is None or b is None:
        return copy.deepcopy(b if a is None else a)
    if isinstance(a, Confusion):
        out = Confusion(max(a.n, b.n))
        out.matrix = a.matrix if b.matrix is None else b.matrix if a.matrix is None else a.matrix + b.matrix
        return out
    if isinstance(a, bool):
        return a or b
    if isinstance(a, (int, float, torch.Tensor)) and isinstance(b, (int, float, torch.Tensor)):
        return a + b
    if isinstance(a, (str, bytes)) or a is b:
        return a
    if isinstance(a, (_Sum, LabelCounts)) or hasattr(a, "__dict__") or hasattr(type(a), "__slots__"):
        if type(a) is not type(b):
            raise TypeError(f"metric {label!r}: cannot merge a {type(a).__name__} with a {type(b).__name__}")
        out = copy.copy(a)
        names = list(getattr(a, "__dict__", {})) + [n for n in getattr(type(a), "__slots__", ()) if hasattr(a, n)]
        for name in names:
            setattr(out, name, _merge(getattr(a, name), getattr(b, name), label))
        return out
    if a == b:
        return a
    raise TypeError(f"metric {label!r}: its accumulator state ({type(a).__name__}) cannot be merged")
