"""Sufficient statistics of the metric accumulators: what ranks add so records are global.

``SufficientStatistics`` flattens ``EpochAccumulator`` s (loss sums and counts, confusion
matrices, correct counts, the built-in metrics' sums) into one float list and writes a reduced
list back: records are global because the ranks' statistics are *added*, never gathered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from nnx_adapters.pytorch.metrics import (
    AccuracyMetric,
    BrierMetric,
    Confusion,
    EpochAccumulator,
    F1Metric,
    LabelCounts,
    MAEMetric,
    NLLMetric,
    _Sum,
)


class _Slot:
    """One mergeable number or tensor held by an accumulator attribute."""

    __slots__ = ("owner", "attr", "numel", "shape")

    def __init__(self, owner: Any, attr: str, numel: int, shape: tuple[int, ...]) -> None:
        self.owner, self.attr, self.numel, self.shape = owner, attr, numel, shape

    def read(self) -> list[float]:
        value = getattr(self.owner, self.attr)
        if value is None:
            return [0.0] * self.numel
        if isinstance(value, torch.Tensor):
            flat = value.detach().reshape(-1).to(torch.float64).cpu().tolist()
            if len(flat) == self.numel:
                return flat
            if len(flat) == 1:
                return flat * self.numel
            raise ValueError(f"{type(self.owner).__name__}.{self.attr} has {len(flat)} values, expected {self.numel}")
        return [float(value)] * self.numel  # a number not yet materialised (0 before the first batch)

    def write(self, values: Sequence[float], device: torch.device) -> None:
        tensor = torch.tensor(list(values), dtype=torch.float64, device=device)
        setattr(self.owner, self.attr, tensor.reshape(self.shape) if self.shape else tensor.reshape(()))


class UnmergeableMetricError(TypeError):
    """A registered metric accumulator whose state NNx cannot add across ranks."""


def _metric_slots(acc: Any, width: int) -> list[_Slot]:
    if isinstance(acc, (AccuracyMetric,)):
        return _sum_slots(acc.hits)
    if isinstance(acc, (NLLMetric, BrierMetric, MAEMetric)):  # MSEMetric is a MAEMetric
        return _sum_slots(acc.sum)
    if isinstance(acc, F1Metric):
        return [
            *_confusion_slots(acc.confusion, width),
            *_label_slots(acc.labels, width),
            _Slot(acc, "indicator", 1, ()),
        ]
    custom = getattr(acc, "sufficient_statistics", None)
    if callable(custom):
        return [_Slot(owner, attr, numel, tuple(shape)) for owner, attr, numel, shape in custom()]
    raise UnmergeableMetricError(
        f"metric accumulator {type(acc).__name__} cannot be added across ranks; give it a method "
        "sufficient_statistics() -> [(owner, attribute, numel, shape), ...] naming its sums"
    )


def _sum_slots(s: _Sum) -> list[_Slot]:
    return [_Slot(s, "total", 1, ()), _Slot(s, "count", 1, ())]


def _confusion_slots(c: Confusion, width: int) -> list[_Slot]:
    n = c.n or width
    c.n = n
    return [_Slot(c, "matrix", n * n, (n * n,))]


def _label_slots(labels: LabelCounts, width: int) -> list[_Slot]:
    return [_Slot(labels, name, width, (width,)) for name in ("tp", "fp", "fn")]


def statistic_slots(acc: EpochAccumulator, width: int) -> list[_Slot]:
    """Every mergeable number of an accumulator, in a fixed order (the same on every rank)."""
    slots = [*_sum_slots(acc.loss)]
    if acc.confusion is not None:
        slots += _confusion_slots(acc.confusion, width)
    slots += [_Slot(acc, "correct", 1, ()), _Slot(acc, "rows", 1, ())]
    if acc.regression is not None:  # a declared regression's mse / mae sums
        slots += [_Slot(acc.regression, name, 1, ()) for name in ("squared", "absolute", "elements")]
    for _, _, metric in acc.metrics:
        slots += _metric_slots(metric, width)
    return slots


class SufficientStatistics:
    """Read accumulators' sums as one float list; write the reduced list back into them."""

    def __init__(self, accumulators: Sequence[EpochAccumulator], width: int, device: torch.device) -> None:
        self.slots = [slot for acc in accumulators for slot in statistic_slots(acc, width)]
        self.device = device

    def values(self) -> list[float]:
        out: list[float] = []
        for slot in self.slots:
            out += slot.read()
        return out

    def load(self, values: Sequence[float]) -> None:
        i = 0
        for slot in self.slots:
            chunk = values[i : i + slot.numel]
            i += slot.numel
            if slot.attr == "indicator":
                slot.owner.indicator = bool(chunk[0])
            else:
                slot.write(chunk, self.device)
