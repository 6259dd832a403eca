"""Whole-epoch metric accumulators on the model's device.

Every accumulator keeps sums and counts on the device (F1 keeps confusion counts) and is read
once, at the end of the epoch: values are never a mean of batch means, and no batch forces a host
synchronisation. Ignored targets are not removed by boolean indexing (that would read the valid
count back to the host); the built-in accumulators take a 0/1 ``mask`` instead and weight every
sum by it. A registered accumulator that does not declare ``accepts_mask = True`` receives the
valid rows only (its inputs are filtered, which costs one sync per batch when targets are masked).

Inputs: ``labels`` (decoded predictions vs targets), ``probabilities`` (class probabilities vs
targets) and ``continuous`` (outputs vs targets). For a multilabel task ``labels`` are 0/1
indicator matrices ``(rows, labels)``: accuracy is subset accuracy and F1 is computed per label,
as scikit-learn does for indicator inputs; ``probabilities`` are one sigmoid probability per
label (nll and brier score each output as an independent Bernoulli).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch

from nnx_core.errors import ParamsError
from nnx_core.monitor_spec import register_direction_lookup
from nnx_core.scores import AVERAGES as F1_AVERAGES
from nnx_core.scores import label_scores
from nnx_adapters.pytorch.tasks import TaskAdapter

INPUTS = ("labels", "probabilities", "continuous")


def _ones(target: torch.Tensor) -> torch.Tensor:
    return torch.ones(target.shape[:1] if target.dim() else (1,), dtype=torch.float64, device=target.device)


def _weights(target: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Per-row float64 weights: the mask, or ones."""
    return _ones(target) if mask is None else mask.to(torch.float64)


class _Sum:
    """Σ weighted value / Σ weight, both kept on the device."""

    __slots__ = ("total", "count")

    def __init__(self) -> None:
        self.total: torch.Tensor | float = 0.0
        self.count: torch.Tensor | int = 0

    def add(self, values: torch.Tensor, weights: torch.Tensor | int) -> None:
        """Add per-row ``values`` (already weighted) and their total weight (a tensor or an int)."""
        self.total = self.total + values.sum()
        self.count = self.count + (weights.sum() if isinstance(weights, torch.Tensor) else weights)

    def result(self) -> float:
        count = float(self.count)
        return float(self.total) / count if count else float("nan")


class Confusion:
    """A C×C confusion matrix (rows: true class, columns: predicted) accumulated on the device
    with ``index_add_`` (no host sync, unlike ``bincount`` on CUDA). Outside a run, on labels
    alone with no class count (``grows``, see ``count_classes_as_seen``), it grows to the largest
    label seen, which costs one host read per batch."""

    def __init__(self, n_classes: int | None = None) -> None:
        self.n = n_classes or 0
        self.grows = False
        self.matrix: torch.Tensor | None = None

    def resize(self, n: int) -> None:
        """Grow to ``n`` classes (the counts kept in their cells)."""
        if n <= self.n:
            return
        if self.matrix is not None:
            grown = torch.zeros(n, n, dtype=self.matrix.dtype, device=self.matrix.device)
            grown[: self.n, : self.n] = self.matrix.reshape(self.n, self.n)
            self.matrix = grown.reshape(-1)
        self.n = n

    def update(self, target: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Add one batch of integer targets and predictions; rows with ``mask == 0`` add nothing."""
        target, pred = target.reshape(-1).long(), pred.reshape(-1).long()
        if self.grows and target.numel():
            keep = target if mask is None else target[mask.reshape(-1).bool()]
            labels = torch.cat([keep, pred])
            if labels.numel() and int(labels.min()) < 0:
                raise ValueError(f"class labels must be non-negative integers, got {int(labels.min())}")
            self.resize(int(labels.max()) + 1 if labels.numel() else 0)
        if self.n == 0:
            if not target.numel():
                return
            raise ValueError("Confusion needs the number of classes")
        weights = _weights(target, None if mask is None else mask.reshape(-1))
        if mask is not None:  # masked rows may hold ignore_index: point them at a valid cell
            target = torch.where(mask.reshape(-1).bool(), target, torch.zeros_like(target))
        if self.matrix is None:
            self.matrix = torch.zeros(self.n * self.n, dtype=torch.float64, device=target.device)
        self.matrix.index_add_(0, target * self.n + pred, weights)

    def scores(self, average: str = "macro") -> dict[str, float]:
        """accuracy, precision, recall and F1 averaged as ``average`` says (macro, micro,
        weighted, binary: ``nnx_core.scores.label_scores``); ``{}`` before any update."""
        if self.matrix is None:
            return {}
        return label_scores(self.matrix.reshape(self.n, self.n).tolist(), average)


def class_scores(tp: torch.Tensor, support: torch.Tensor, predicted: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-class precision, recall and F1 from true-positive, true and predicted counts (any
    leading batch shape, classes last); a class with a zero denominator scores 0 (zero_division 0)."""
    zero = torch.zeros_like(tp)
    denom = support + predicted
    return {
        "precision": torch.where(predicted > 0, tp / predicted.clamp(min=1), zero),
        "recall": torch.where(support > 0, tp / support.clamp(min=1), zero),
        "f1": torch.where(denom > 0, 2 * tp / denom.clamp(min=1e-300), zero),
    }


def macro_scores(per_class: Mapping[str, torch.Tensor], present: torch.Tensor) -> dict[str, torch.Tensor]:
    """The mean of each per-class score over the ``present`` classes (last dimension), as
    scikit-learn's ``average="macro"`` does over the labels found in targets or predictions."""
    weight = present.to(per_class["f1"].dtype)
    n_present = weight.sum(-1).clamp(min=1)
    return {name: (values * weight).sum(-1) / n_present for name, values in per_class.items()}


class BatchScores:
    """Accuracy and macro F1 / precision / recall of *each* training batch of a categorical task,
    computed for many batches at once on the device (no host synchronisation per batch).

    ``add`` keeps a batch's predicted and true classes; every ``FLUSH_ROWS`` rows (and at
    ``table``) the pending batches are reduced to per-batch per-class counts with three
    ``index_add_`` calls, so memory stays bounded by ``FLUSH_ROWS`` rows plus 3 × classes numbers
    per batch. ``table`` returns one ``(batches, 5)`` float64 tensor on the device: correct,
    valid rows, macro F1, macro precision, macro recall — read once, with the epoch's losses.
    Targets equal to ``ignore_index`` are left out of every count (as ``Confusion`` does).
    """

    FLUSH_ROWS = 1 << 20

    def __init__(self, n_classes: int, ignore_index: int | None) -> None:
        self.n = n_classes
        self.ignore_index = ignore_index
        self._preds: list[torch.Tensor] = []
        self._targets: list[torch.Tensor] = []
        self._sizes: list[int] = []
        self._pending = 0
        self._counts: list[torch.Tensor] = []  # (3, batches, classes): tp, support, predicted

    def add(self, pred: torch.Tensor, target: torch.Tensor) -> None:
        """One batch's predicted classes and targets (any shape, the same number of elements)."""
        size = pred.numel()
        self._preds.append(pred if pred.dim() == 1 else pred.reshape(-1))
        self._targets.append(target if target.dim() == 1 else target.reshape(-1))
        self._sizes.append(size)
        self._pending += size
        if self._pending >= self.FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self._sizes:
            return
        pred, target = torch.cat(self._preds), torch.cat(self._targets)
        device, k, n = pred.device, len(self._sizes), self.n
        sizes = torch.tensor(self._sizes, device=device)
        base = torch.repeat_interleave(torch.arange(k, device=device) * n, sizes, output_size=pred.numel())
        weights = torch.ones(pred.shape, dtype=torch.float64, device=device)
        if self.ignore_index is not None:
            valid = target != self.ignore_index
            weights = valid.to(torch.float64)
            target = torch.where(valid, target, torch.zeros_like(target))  # masked rows add 0 to class 0
        flat = torch.zeros(3, k * n, dtype=torch.float64, device=device)
        flat[0].index_add_(0, base + target, weights * (pred == target))
        flat[1].index_add_(0, base + target, weights)
        flat[2].index_add_(0, base + pred, weights)
        self._counts.append(flat.view(3, k, n))
        self._preds, self._targets, self._sizes, self._pending = [], [], [], 0

    def table(self, total: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """``(batches, 5)``: correct, valid rows, macro F1, precision, recall of every batch so far.
        ``total`` turns this process's per-batch class counts into the whole batch's (under data
        parallelism: the sum over ranks) before anything is scored."""
        self._flush()
        counts = torch.cat(self._counts, dim=1)
        tp, support, predicted = total(counts) if total is not None else counts
        macro = macro_scores(class_scores(tp, support, predicted), support + predicted > 0)
        return torch.stack([tp.sum(-1), support.sum(-1), macro["f1"], macro["precision"], macro["recall"]], dim=1)


class LabelCounts:
    """Per-label tp/fp/fn of 0/1 indicator matrices (multilabel F1)."""

    def __init__(self) -> None:
        self.tp: torch.Tensor | float = 0.0
        self.fp: torch.Tensor | float = 0.0
        self.fn: torch.Tensor | float = 0.0

    def update(self, target: torch.Tensor, pred: torch.Tensor, weights: torch.Tensor) -> None:
        t, p = target.to(torch.float64), pred.to(torch.float64)
        w = weights.reshape(-1, *([1] * (t.dim() - 1)))
        self.tp = self.tp + (t * p * w).sum(0)
        self.fp = self.fp + ((1 - t) * p * w).sum(0)
        self.fn = self.fn + (t * (1 - p) * w).sum(0)

    def f1(self, average: str) -> float:
        if not isinstance(self.tp, torch.Tensor):
            return float("nan")
        tp, fp, fn = (x.cpu() for x in (self.tp, self.fp, self.fn))  # type: ignore[union-attr]
        if average in ("micro", "binary"):  # binary: the positive decisions pooled over every label (NNx's rule)
            denom = float(2 * tp.sum() + fp.sum() + fn.sum())
            return 2 * float(tp.sum()) / denom if denom else 0.0
        denom = 2 * tp + fp + fn
        per_label = torch.where(denom > 0, 2 * tp / denom.clamp(min=1e-300), torch.zeros_like(tp))
        if average == "macro":
            return float(per_label.mean())
        if average == "weighted":
            support = tp + fn
            return float((per_label * support).sum() / support.sum()) if float(support.sum()) else 0.0
        return float("nan")


def _multilabel(target: torch.Tensor, prediction: torch.Tensor) -> bool:
    return target.dim() == 2 and prediction.shape == target.shape and not prediction.dtype.is_floating_point


class AccuracyMetric:
    """Share of valid targets predicted right (subset accuracy for indicator matrices)."""

    accepts_mask = True

    def __init__(self, config: Mapping[str, Any], n_classes: int | None) -> None:
        self.hits = _Sum()

    def update(self, target: torch.Tensor, prediction: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        hit = (target == prediction).all(-1) if _multilabel(target, prediction) else (target == prediction).reshape(-1)
        weights = _weights(hit, mask)
        self.hits.add(hit.to(torch.float64) * weights, weights if mask is not None else hit.numel())

    def result(self) -> float:
        return self.hits.result()


class F1Metric:
    """F1 from confusion counts; ``config["average"]`` ∈ macro, micro, weighted, binary."""

    accepts_mask = True

    def __init__(self, config: Mapping[str, Any], n_classes: int | None) -> None:
        self.average = config.get("average", "macro")
        self.confusion = Confusion(n_classes)
        self.labels = LabelCounts()
        self.indicator = False

    def update(self, target: torch.Tensor, prediction: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        if _multilabel(target, prediction):
            self.indicator = True
            self.labels.update(target, prediction, _weights(target, mask))
        else:
            self.confusion.update(target, prediction, mask)

    def result(self) -> float:
        if self.indicator:
            return self.labels.f1(self.average)
        if self.average == "binary" and self.confusion.n != 2:
            return float("nan")  # binary F1 needs exactly two classes
        return self.confusion.scores(self.average).get("f1", float("nan"))


def _check_f1(config: Mapping[str, Any]) -> list[str]:
    average = config.get("average", "macro")
    unknown = sorted(set(config) - {"average"})
    problems = [] if average in F1_AVERAGES else [f"f1 average {average!r} is unknown: average must be one of {F1_AVERAGES}"]
    return problems + [f"f1 has no config key {key!r} (only 'average')" for key in unknown]


def _no_config(name: str) -> Callable[[Mapping[str, Any]], list[str]]:
    def check(config: Mapping[str, Any]) -> list[str]:
        return [f"{name} takes no config, got keys {sorted(config)}"] if config else []

    return check


def _safe_target(target: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return target if mask is None else torch.where(mask.bool(), target, torch.zeros_like(target))


def _bernoulli(target: torch.Tensor, prediction: torch.Tensor) -> bool:
    """Per-output (Bernoulli) probabilities: one probability per target entry, not a class axis."""
    return prediction.is_floating_point() and prediction.shape == target.shape


def _add_entries(total: _Sum, values: torch.Tensor, mask: torch.Tensor | None) -> None:
    """Add per-entry ``values``; ``mask`` weighs the entries (shaped like them, or one per row)."""
    if mask is None:
        total.add(values, values.numel())
        return
    w = mask.to(torch.float64)
    w = w if w.shape == values.shape else w.reshape(-1, *([1] * (values.dim() - 1))).expand_as(values)
    total.add(torch.where(w > 0, values, torch.zeros_like(values)) * w, w)


class NLLMetric:
    """Mean negative log-likelihood of the true class (probabilities clipped at float64 eps,
    as scikit-learn's ``log_loss`` does); with one probability per target entry (multilabel), the
    mean binary log loss over entries."""

    accepts_mask = True

    def __init__(self, config: Mapping[str, Any], n_classes: int | None) -> None:
        self.sum = _Sum()

    def update(self, target: torch.Tensor, prediction: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        eps = torch.finfo(torch.float64).eps
        if _bernoulli(target, prediction):  # one probability per output: the binary log loss of each
            p, y = prediction.double().clamp(min=eps, max=1 - eps), target.double()
            _add_entries(self.sum, -(y * torch.log(p) + (1 - y) * torch.log1p(-p)), mask)
            return
        p = prediction.double().gather(-1, _safe_target(target, mask).unsqueeze(-1)).squeeze(-1)
        weights = _weights(target, mask)
        self.sum.add(-torch.log(p.clamp(min=eps, max=1 - eps)) * weights, weights if mask is not None else target.numel())

    def result(self) -> float:
        return self.sum.result()


class BrierMetric:
    """Mean over rows of Σ_classes (p − onehot)² (the class-summed multiclass Brier score); with
    one probability per target entry (multilabel, Bernoulli), the mean of (p − y)² over entries."""

    accepts_mask = True

    def __init__(self, config: Mapping[str, Any], n_classes: int | None) -> None:
        self.sum = _Sum()

    def update(self, target: torch.Tensor, prediction: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        if _bernoulli(target, prediction):  # one probability per output: (p − y)² of each
            _add_entries(self.sum, (prediction.double() - target.double()) ** 2, mask)
            return
        onehot = torch.nn.functional.one_hot(_safe_target(target, mask), prediction.shape[-1]).double()
        weights = _weights(target, mask)
        per_row = ((prediction.double() - onehot) ** 2).sum(-1)
        self.sum.add(per_row * weights, weights if mask is not None else target.numel())

    def result(self) -> float:
        return self.sum.result()


class MAEMetric:
    """Mean absolute error over elements."""

    accepts_mask = True

    def __init__(self, config: Mapping[str, Any], n_classes: int | None) -> None:
        self.sum = _Sum()

    def _errors(self, target: torch.Tensor, prediction: torch.Tensor) -> torch.Tensor:
        return (prediction.double() - target.double()).abs()

    def update(self, target: torch.Tensor, prediction: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        errors = self._errors(target, prediction)
        if mask is None:
            self.sum.add(errors, errors.numel())
        else:  # a mask of the rows, or of the elements (masked regression targets)
            w = mask.to(torch.float64)
            w = w if w.shape == errors.shape else w.reshape(-1, *([1] * (errors.dim() - 1))).expand_as(errors)
            self.sum.add(torch.where(w > 0, errors, torch.zeros_like(errors)) * w, w)

    def result(self) -> float:
        return self.sum.result()


class MSEMetric(MAEMetric):
    """Mean squared error over elements."""

    def _errors(self, target: torch.Tensor, prediction: torch.Tensor) -> torch.Tensor:
        return (prediction.double() - target.double()) ** 2


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
    """Register an accumulator factory ``factory(config, n_classes)``, or NNx's ``factory(config)``.

    The accumulator has ``update(target, prediction)`` (called once per batch with the valid
    rows) and ``result() -> float`` (called once per epoch). Setting ``accepts_mask = True`` on it
    asks for ``update(target, prediction, mask)`` with every row and a 0/1 mask instead.
    ``mode`` is the metric's direction ("min" or "max"), used by monitors naming it.
    """
    if input not in INPUTS:
        raise ParamsError("register_metric.input", f"must be one of {INPUTS}, got {input!r}")
    if mode not in ("min", "max"):
        raise ParamsError("register_metric.mode", f"must be 'min' or 'max', got {mode!r}")
    if (id, version) in REGISTRY and not replace:
        raise ParamsError("register_metric", f"metric {id!r} v{version} is already registered (pass replace=True)")
    if not _takes_two(factory):  # NNx's one-argument factory: the class count is not passed
        one = factory
        factory = lambda config, n_classes: one(config)  # noqa: E731
    REGISTRY[(id, version)] = MetricEntry(factory, input, mode, check_config)


def _takes_two(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` can be called with two positional arguments (True when it cannot be told)."""
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        return False
    except ValueError:  # a builtin without a signature
        return True
    return True


def registered_entry(id: str, version: int) -> MetricEntry:
    """The registration of ``(id, version)``; an unknown one is a ``ParamsError`` naming the known ones."""
    entry = REGISTRY.get((id, version))
    if entry is None:
        known = ", ".join(sorted(f"{i}@{v}" for i, v in REGISTRY))
        raise ParamsError("MetricSpec", f"unknown metric {id!r}@v{version}: not registered (known: {known})")
    return entry


def count_classes_as_seen(metric: Any) -> Any:
    """``metric`` with each of its confusion matrices that has no class count set to grow with
    the labels it sees (metrics used outside a run, where nothing declares the classes)."""
    for part in getattr(metric, "__dict__", {}).values():
        if isinstance(part, Confusion) and not part.n:
            part.grows = True
    return metric


def unregister_metric(id: str, version: int) -> bool:
    """Remove the metric registered as ``(id, version)``; True when there was one."""
    return REGISTRY.pop((id, version), None) is not None


def registered_metrics() -> tuple[tuple[str, int], ...]:
    """Every registered ``(id, version)``, sorted (the built-ins included)."""
    return tuple(sorted(REGISTRY))


register_metric("accuracy", 1, AccuracyMetric, input="labels", mode="max", check_config=_no_config("accuracy"))
register_metric("f1", 1, F1Metric, input="labels", mode="max", check_config=_check_f1)
register_metric("nll", 1, NLLMetric, input="probabilities", mode="min", check_config=_no_config("nll"))
register_metric("brier", 1, BrierMetric, input="probabilities", mode="min", check_config=_no_config("brier"))
register_metric("mae", 1, MAEMetric, input="continuous", mode="min", check_config=_no_config("mae"))
register_metric("mse", 1, MSEMetric, input="continuous", mode="min", check_config=_no_config("mse"))

_TASK_INPUTS = {"categorical": ("labels", "probabilities"), "multilabel": ("labels", "probabilities"),
                "regression": ("continuous",)}


def resolve(specs: Sequence[Any], task_kind: str, width: int | None = None) -> list[str]:
    """Problems with declared metric specs for a task of ``width`` outputs (empty when usable)."""
    problems = []
    labels = [spec.label for spec in specs]
    for label in sorted({lb for lb in labels if labels.count(lb) > 1}):
        problems.append(f"two metrics are labelled {label!r}; give one of them name=...")
    for spec in specs:
        entry = REGISTRY.get((spec.id, spec.version))
        if entry is None:
            known = ", ".join(sorted(f"{i}@{v}" for i, v in REGISTRY))
            problems.append(f"unknown metric {spec.id!r}@v{spec.version}: not registered (known: {known})")
            continue
        if entry.input not in _TASK_INPUTS[task_kind]:
            problems.append(f"metric {spec.label!r} needs {entry.input} inputs, which a {task_kind} task does not give")
        if entry.check_config:
            problems.extend(entry.check_config(spec.config))
        if spec.id == "f1" and spec.config.get("average") == "binary" and task_kind == "categorical" \
                and width not in (None, 2):  # multilabel: the decisions pooled over every label
            problems.append(f"metric {spec.label!r}: f1 average='binary' needs exactly 2 classes, this model has "
                            f"{width}; use 'macro', 'micro' or 'weighted'")
    return problems


def metric_mode(label: str, specs: Sequence[Any]) -> str:
    """Direction of a named value: built-in loss/error are min; declared metrics use the registry."""
    for spec in specs:
        if spec.label == label:
            return REGISTRY[(spec.id, spec.version)].mode
    return "max" if label in ("accuracy", "f1", "precision", "recall") else "min"


register_direction_lookup(metric_mode)  # MonitorSpec.resolve: a declared metric's direction, from this registry


class EpochAccumulator:
    """Loss, built-in scores and declared metrics over a whole pass (training epoch or validation).

    ``update`` adds one batch; targets equal to the task's ``ignore_index`` are masked out of
    every score. ``result`` reads everything once and returns EDP fields: loss, error, accuracy,
    f1, precision, recall, count and metrics (metrics are left out of an empty, all-masked pass).
    With a declared ``TaskSpec`` (``task.explicit``) it adds the task ``kind``, and a regression
    its ``metrics.mse`` / ``metrics.mae`` over every element (a declared metric of the same name
    wins).
    """

    def __init__(self, task: TaskAdapter, n_classes: int | None, specs: Sequence[Any], *, full_scores: bool) -> None:
        self.task = task
        self.n_classes = n_classes
        self.loss = _Sum()
        self.confusion = Confusion(n_classes) if task.categorical and full_scores else None
        self.correct: torch.Tensor | float = 0.0
        self.rows: torch.Tensor | int = 0
        self.metrics = [
            (s.label, REGISTRY[(s.id, s.version)], REGISTRY[(s.id, s.version)].factory(s.config, n_classes))
            for s in specs
        ]
        self._probabilities = any(e.input == "probabilities" for _, e, _ in self.metrics)
        self.regression = RegressionSums() if task.kind == "regression" and getattr(task, "explicit", False) else None

    def add_loss(self, loss_sum: torch.Tensor, count: int) -> None:
        """Add a batch's loss numerator and denominator."""
        self.loss.total = self.loss.total + loss_sum.detach()
        self.loss.count = self.loss.count + count

    @staticmethod
    def _feed(acc: Any, target: torch.Tensor, inputs: torch.Tensor, mask: torch.Tensor | None) -> None:
        if mask is None:
            acc.update(target, inputs)
        elif getattr(acc, "accepts_mask", False):
            acc.update(target, inputs, mask)
        else:
            keep = mask.bool()
            acc.update(target[keep], inputs[keep])

    def update(self, output: torch.Tensor, target: torch.Tensor) -> None:
        """Add a batch's outputs and targets to the scores and declared metrics (no host sync)."""
        output = output.detach()
        task = self.task
        if task.categorical:
            logits = output.reshape(-1, output.shape[-1])
            target = target.reshape(-1)
            mask = (target != task.ignore_index) if task.ignore_index is not None else None
            pred = logits.argmax(-1)
            if self.confusion is not None:
                self.confusion.n = self.confusion.n or logits.shape[-1]
                self.confusion.update(target, pred, mask)
            else:
                hit = pred == target
                if mask is not None:
                    hit = hit & mask
                self.correct = self.correct + hit.sum()
                self.rows = self.rows + (mask.sum() if mask is not None else target.numel())
            probs = torch.softmax(logits.float(), -1) if self._probabilities else None
            for _, entry, acc in self.metrics:
                self._feed(acc, target, pred if entry.input == "labels" else probs, mask)  # type: ignore[arg-type]
        elif task.kind == "multilabel":
            pred = task.decode(output)
            hit, rows = task.correct(output, target)
            self.correct = self.correct + hit
            self.rows = self.rows + rows
            labels = (target >= 0.5).long()
            probs = torch.sigmoid(output.float()) if self._probabilities else None  # one per output
            for _, entry, acc in self.metrics:
                acc.update(labels, probs if entry.input == "probabilities" else pred)
        else:
            # NaN (masked) targets weigh zero; a mask-aware metric gets the element mask (no host read),
            # any other metric the valid elements only
            valid = torch.isnan(target).logical_not_() if target.is_floating_point() else None
            if self.regression is not None:
                self.regression.add(output, target, valid)
            for _, _, acc in self.metrics:
                if valid is None:
                    acc.update(target, output)
                elif getattr(acc, "accepts_mask", False):
                    acc.update(target, output, valid)
                else:
                    acc.update(target[valid], output[valid])

    def result(self) -> dict[str, Any]:
        """Read everything (one sync per accumulator) into EDP fields."""
        count = int(self.loss.count)
        out: dict[str, Any] = {"count": count}
        kind = getattr(self.task, "record_kind", None)
        if kind is not None:
            out["kind"] = kind
        if count:
            out["loss"] = float(self.loss.total) if getattr(self.task, "additive", False) else self.loss.result()
        if self.confusion is not None:
            scores = self.confusion.scores()
            for key in ("accuracy", "f1", "precision", "recall"):
                if key in scores:
                    out[key] = scores[key]
        else:
            rows = float(self.rows)
            if rows:
                out["accuracy"] = float(self.correct) / rows
        if "accuracy" in out:
            out["error"] = 1.0 - out["accuracy"]
        builtin = self.regression.result() if self.regression is not None and count else {}
        if (self.metrics or builtin) and count:
            out["metrics"] = {**builtin, **{label: acc.result() for label, _, acc in self.metrics}}
        return out


class RegressionSums:
    """The squared and absolute errors of a regression pass, summed on the device (float64;
    float32 on MPS):
    ``result()`` gives ``{"mse": ..., "mae": ...}`` over every element (one host read), or ``{}``
    before any element."""

    __slots__ = ("squared", "absolute", "elements")

    def __init__(self) -> None:
        self.squared: torch.Tensor | float = 0.0
        self.absolute: torch.Tensor | float = 0.0
        self.elements: torch.Tensor | int = 0  # a tensor once added across ranks (``statistic_slots``)

    def add(self, output: torch.Tensor, target: torch.Tensor, valid: torch.Tensor | None = None) -> None:
        """Add one batch's outputs and targets (same shape); ``valid``: the elements that count
        (the non-NaN targets; None: all)."""
        wide = torch.float32 if output.device.type == "mps" else torch.float64  # MPS has no float64
        diff = output.detach().to(wide) - target.detach().to(output.device, wide)
        if valid is not None:
            diff = torch.where(valid.to(diff.device), diff, torch.zeros_like(diff))
        self.squared = self.squared + diff.square().sum()
        self.absolute = self.absolute + diff.abs().sum()
        self.elements += diff.numel() if valid is None else valid.sum()

    def result(self) -> dict[str, float]:
        """``{"mse", "mae"}`` means over every element added (empty before any)."""
        elements = float(self.elements)
        if not elements:
            return {}
        squared, absolute = torch.stack([torch.as_tensor(self.squared), torch.as_tensor(self.absolute)]).tolist()
        return {"mse": squared / elements, "mae": absolute / elements}
