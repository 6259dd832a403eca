"""Whole-epoch metric accumulators on the model's device.

Every accumulator keeps sums and counts (F1 keeps confusion counts) and is read once, at the end
of the epoch: values are never a mean of batch means and no batch forces a host sync.
Inputs: ``labels`` (decoded predictions vs targets), ``probabilities`` (class probabilities vs
targets) and ``continuous`` (outputs vs targets).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch

from nnx_core.errors import ParamsError
from nnx_adapters.torch_tasks import TaskAdapter

INPUTS = ("labels", "probabilities", "continuous")


class Confusion:
    """A C×C confusion matrix accumulated with ``bincount``; classes grow as they appear."""

    def __init__(self, n_classes: int | None = None) -> None:
        self.n = n_classes or 0
        self.matrix: torch.Tensor | None = None

    def update(self, target: torch.Tensor, pred: torch.Tensor) -> None:
        """Add one batch of (valid) integer targets and predictions."""
        if self.n == 0:
            raise ValueError("Confusion needs the number of classes")
        counts = torch.bincount(target.reshape(-1) * self.n + pred.reshape(-1), minlength=self.n * self.n)
        counts = counts[: self.n * self.n].reshape(self.n, self.n)
        self.matrix = counts if self.matrix is None else self.matrix + counts

    def scores(self) -> dict[str, float]:
        """accuracy and macro/micro/weighted F1, precision, recall (zero_division = 0)."""
        if self.matrix is None:
            return {}
        m = self.matrix.double().cpu()
        tp = m.diag()
        support = m.sum(1)  # true counts per class
        predicted = m.sum(0)
        total = float(m.sum())
        precision = torch.where(predicted > 0, tp / predicted.clamp(min=1), torch.zeros_like(tp))
        recall = torch.where(support > 0, tp / support.clamp(min=1), torch.zeros_like(tp))
        denom = precision + recall
        f1 = torch.where(denom > 0, 2 * precision * recall / denom.clamp(min=1e-300), torch.zeros_like(tp))
        present = (support + predicted) > 0  # sklearn averages over labels present in y_true ∪ y_pred
        weights = support / support.sum().clamp(min=1)
        micro = float(tp.sum()) / total if total else 0.0
        out = {
            "accuracy": micro,
            "precision": float(precision[present].mean()) if present.any() else 0.0,
            "recall": float(recall[present].mean()) if present.any() else 0.0,
            "f1": float(f1[present].mean()) if present.any() else 0.0,
            "f1_micro": micro,
            "f1_weighted": float((f1 * weights).sum()),
        }
        if self.n == 2:
            out["f1_binary"] = float(f1[1])
        return out


class _Sum:
    """Σvalue / Σcount on device."""

    def __init__(self) -> None:
        self.total: torch.Tensor | float = 0.0
        self.count = 0

    def add(self, values: torch.Tensor, count: int) -> None:
        self.total = self.total + values.sum()
        self.count += count

    def result(self) -> float:
        return float(self.total) / self.count if self.count else float("nan")


class AccuracyMetric:
    """Share of valid targets predicted right."""

    def __init__(self, config: Mapping[str, Any], n_classes: int | None) -> None:
        self.hits = _Sum()

    def update(self, target: torch.Tensor, prediction: torch.Tensor) -> None:
        self.hits.add((target == prediction).reshape(-1).double(), target.numel())

    def result(self) -> float:
        return self.hits.result()


class F1Metric:
    """F1 from confusion counts; ``config["average"]`` ∈ macro, micro, weighted, binary."""

    def __init__(self, config: Mapping[str, Any], n_classes: int | None) -> None:
        self.average = config.get("average", "macro")
        self.confusion = Confusion(n_classes)

    def update(self, target: torch.Tensor, prediction: torch.Tensor) -> None:
        self.confusion.update(target, prediction)

    def result(self) -> float:
        scores = self.confusion.scores()
        key = {"macro": "f1", "micro": "f1_micro", "weighted": "f1_weighted", "binary": "f1_binary"}[self.average]
        return scores.get(key, float("nan"))


def _check_f1(config: Mapping[str, Any]) -> list[str]:
    average = config.get("average", "macro")
    return [] if average in ("macro", "micro", "weighted", "binary") else [f"f1 average {average!r} is unknown"]


class NLLMetric:
    """Mean negative log-likelihood of the true class."""

    def __init__(self, config: Mapping[str, Any], n_classes: int | None) -> None:
        self.sum = _Sum()

    def update(self, target: torch.Tensor, prediction: torch.Tensor) -> None:
        p = prediction.double().gather(-1, target.unsqueeze(-1)).squeeze(-1)
        self.sum.add(-torch.log(p.clamp(min=1e-300)), target.numel())

    def result(self) -> float:
        return self.sum.result()


class BrierMetric:
    """Mean over rows of Σ_classes (p − onehot)²."""

    def __init__(self, config: Mapping[str, Any], n_classes: int | None) -> None:
        self.sum = _Sum()

    def update(self, target: torch.Tensor, prediction: torch.Tensor) -> None:
        onehot = torch.nn.functional.one_hot(target, prediction.shape[-1]).double()
        self.sum.add(((prediction.double() - onehot) ** 2).sum(-1), target.numel())

    def result(self) -> float:
        return self.sum.result()


class MAEMetric:
    """Mean absolute error over elements."""

    def __init__(self, config: Mapping[str, Any], n_classes: int | None) -> None:
        self.sum = _Sum()

    def update(self, target: torch.Tensor, prediction: torch.Tensor) -> None:
        self.sum.add((prediction.double() - target.double()).abs(), target.numel())

    def result(self) -> float:
        return self.sum.result()


class MSEMetric(MAEMetric):
    """Mean squared error over elements."""

    def update(self, target: torch.Tensor, prediction: torch.Tensor) -> None:
        self.sum.add((prediction.double() - target.double()) ** 2, target.numel())


@attrs.frozen
class MetricEntry:
    """A registered metric: its factory, input kind and direction."""

    factory: Callable[[Mapping[str, Any], int | None], Any]
    input: str
    mode: str
    check_config: Callable[[Mapping[str, Any]], list[str]] | None = None


REGISTRY: dict[tuple[str, int], MetricEntry] = {}


def register_metric(
    id: str,
    version: int,
    factory: Callable[[Mapping[str, Any], int | None], Any],
    *,
    input: str,
    mode: str,
    check_config: Callable[[Mapping[str, Any]], list[str]] | None = None,
    replace: bool = False,
) -> None:
    """Register an accumulator factory ``factory(config, n_classes)`` with ``update``/``result``."""
    if input not in INPUTS:
        raise ParamsError("register_metric.input", f"must be one of {INPUTS}, got {input!r}")
    if mode not in ("min", "max"):
        raise ParamsError("register_metric.mode", f"must be 'min' or 'max', got {mode!r}")
    if (id, version) in REGISTRY and not replace:
        raise ParamsError("register_metric", f"metric {id!r} v{version} is already registered (pass replace=True)")
    REGISTRY[(id, version)] = MetricEntry(factory, input, mode, check_config)


register_metric("accuracy", 1, AccuracyMetric, input="labels", mode="max")
register_metric("f1", 1, F1Metric, input="labels", mode="max", check_config=_check_f1)
register_metric("nll", 1, NLLMetric, input="probabilities", mode="min")
register_metric("brier", 1, BrierMetric, input="probabilities", mode="min")
register_metric("mae", 1, MAEMetric, input="continuous", mode="min")
register_metric("mse", 1, MSEMetric, input="continuous", mode="min")

_TASK_INPUTS = {"categorical": ("labels", "probabilities"), "multilabel": ("labels",), "regression": ("continuous",)}


def resolve(specs: Sequence[Any], task_kind: str) -> list[str]:
    """Problems with declared metric specs for a task (empty list when all are usable)."""
    problems = []
    for spec in specs:
        entry = REGISTRY.get((spec.id, spec.version))
        if entry is None:
            known = ", ".join(sorted(f"{i}@{v}" for i, v in REGISTRY))
            problems.append(f"metric {spec.id!r} v{spec.version} is not registered (known: {known})")
            continue
        if entry.input not in _TASK_INPUTS[task_kind]:
            problems.append(f"metric {spec.label!r} needs {entry.input} inputs, which a {task_kind} task does not give")
        if entry.check_config:
            problems.extend(entry.check_config(spec.config))
    return problems


def metric_mode(label: str, specs: Sequence[Any]) -> str:
    """Direction of a named value: built-in loss/error are min; declared metrics use the registry."""
    for spec in specs:
        if spec.label == label:
            return REGISTRY[(spec.id, spec.version)].mode
    return "max" if label in ("accuracy", "f1", "precision", "recall") else "min"


class EpochAccumulator:
    """Loss, built-in scores and declared metrics over a whole pass (training epoch or validation).

    ``update`` adds one batch (already masked per the task); ``result`` syncs once and returns
    an EDP-shaped dict: loss, error, accuracy, f1, precision, recall, count, metrics.
    """

    def __init__(self, task: TaskAdapter, n_classes: int | None, specs: Sequence[Any], *, full_scores: bool) -> None:
        self.task = task
        self.n_classes = n_classes
        self.loss = _Sum()
        self.confusion = Confusion(n_classes) if task.categorical and full_scores else None
        self.correct: torch.Tensor | float = 0.0
        self.rows = 0
        self.metrics = [(s.label, REGISTRY[(s.id, s.version)], REGISTRY[(s.id, s.version)].factory(s.config, n_classes)) for s in specs]

    def add_loss(self, loss_sum: torch.Tensor, count: int) -> None:
        """Add a batch's loss numerator and denominator."""
        self.loss.total = self.loss.total + loss_sum.detach()
        self.loss.count += count

    def update(self, output: torch.Tensor, target: torch.Tensor) -> None:
        """Add a batch's outputs and targets to the scores and declared metrics."""
        output = output.detach()
        task = self.task
        if task.categorical:
            logits = output.reshape(-1, output.shape[-1])
            target = target.reshape(-1)
            if task.ignore_index is not None:
                keep = target != task.ignore_index
                logits, target = logits[keep], target[keep]
            pred = logits.argmax(-1)
            if self.confusion is not None:
                self.confusion.n = self.confusion.n or logits.shape[-1]
                self.confusion.update(target, pred)
            else:
                self.correct = self.correct + (pred == target).sum()
                self.rows += target.numel()
            probs = torch.softmax(logits.float(), -1) if any(e.input == "probabilities" for _, e, _ in self.metrics) else None
            for _, entry, acc in self.metrics:
                acc.update(target, pred if entry.input == "labels" else probs)
        elif task.kind == "multilabel":
            pred = task.decode(output)
            hit, rows = task.correct(output, target)
            self.correct = self.correct + hit
            self.rows += rows
            for _, _, acc in self.metrics:
                acc.update((target >= 0.5).long(), pred)
        else:
            for _, _, acc in self.metrics:
                acc.update(target, output)

    def result(self) -> dict[str, Any]:
        """Read everything (one sync per accumulator) into EDP fields."""
        out: dict[str, Any] = {"count": self.loss.count}
        if self.loss.count:
            out["loss"] = self.loss.result()
        if self.confusion is not None:
            scores = self.confusion.scores()
            for key in ("accuracy", "f1", "precision", "recall"):
                if key in scores:
                    out[key] = scores[key]
        elif self.rows:
            out["accuracy"] = float(self.correct) / self.rows
        if "accuracy" in out:
            out["error"] = 1.0 - out["accuracy"]
        if self.metrics:
            out["metrics"] = {label: acc.result() for label, _, acc in self.metrics}
        return out
