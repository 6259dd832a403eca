"""Label scores from a confusion matrix: accuracy, precision, recall and F1 per average mode.

This is the one implementation of the classification scores. The device-side ``Confusion`` of
``nnx_adapters.pytorch.metrics`` accumulates a matrix over an epoch and reads it here;
``EvaluationDataPoint.of`` builds a matrix from plain labels (``confusion_of``) and reads it
here too. The rules follow scikit-learn's ``accuracy_score`` and ``precision_score`` /
``recall_score`` / ``f1_score`` with ``zero_division=0``:

* the labels averaged over are those present in the targets or in the predictions;
* ``macro``: the unweighted mean over those labels; ``weighted``: the mean weighted by each
  label's support (true count); ``micro``: global counts (for single-label data it equals the
  accuracy); ``binary``: the scores of the positive class (index 1) of a matrix of at most two
  classes;
* a ratio whose denominator is zero is 0.

>>> label_scores([[2, 1], [0, 1]], "macro")["recall"]
0.8333333333333333
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from nnx_core.errors import ParamsError

AVERAGES = ("macro", "micro", "weighted", "binary")


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


def label_scores(matrix: Sequence[Sequence[float]], average: str = "macro") -> dict[str, float]:
    """``accuracy``, ``precision``, ``recall`` and ``f1`` of a square confusion ``matrix``
    (rows: true class, columns: predicted class), averaged as ``average`` says; ``{}`` when the
    matrix counts nothing."""
    if average not in AVERAGES:
        raise ParamsError("average", f"must be one of {', '.join(map(repr, AVERAGES))}, got {average!r}")
    n = len(matrix)
    total = float(sum(sum(row) for row in matrix))
    if total == 0:
        return {}
    tp = [float(matrix[c][c]) for c in range(n)]
    support = [float(sum(matrix[c])) for c in range(n)]
    predicted = [float(sum(matrix[r][c] for r in range(n))) for c in range(n)]
    accuracy = sum(tp) / total
    if average == "micro":
        return {"accuracy": accuracy, "precision": accuracy, "recall": accuracy, "f1": accuracy}
    precision = [_ratio(tp[c], predicted[c]) for c in range(n)]
    recall = [_ratio(tp[c], support[c]) for c in range(n)]
    f1 = [_ratio(2 * tp[c], support[c] + predicted[c]) for c in range(n)]
    if average == "binary":
        if n > 2:
            raise ParamsError("average", f"'binary' scores one positive class of two, but there are {n} classes")
        positive = 1 if n == 2 else None
        pick = (lambda values: values[positive]) if positive is not None else (lambda values: 0.0)
        return {"accuracy": accuracy, "precision": pick(precision), "recall": pick(recall), "f1": pick(f1)}
    present = [c for c in range(n) if support[c] + predicted[c] > 0]
    if average == "macro":
        weights = {c: 1.0 for c in present}
    else:  # weighted
        weights = {c: support[c] for c in present}
    norm = sum(weights.values())

    def mean(values: list[float]) -> float:
        return _ratio(sum(values[c] * w for c, w in weights.items()), norm)

    return {"accuracy": accuracy, "precision": mean(precision), "recall": mean(recall), "f1": mean(f1)}


def _label(value: Any, what: str) -> Any:
    if isinstance(value, (list, tuple)):
        raise ParamsError(what, "must be one class label per sample (a 1-d sequence), got nested values")
    if isinstance(value, float):
        if not value.is_integer():
            raise ParamsError(what, f"must be class labels, got the non-integral value {value!r}")
        return int(value)
    return value


def confusion_of(
    targets: Iterable[Any], predictions: Iterable[Any], labels: Sequence[Any] | None = None
) -> tuple[list[Any], list[list[int]]]:
    """The labels (``labels``, else the sorted ones seen in ``targets`` or ``predictions``) and the
    confusion matrix over them.

    Labels are plain values (ints, strings, integral floats); the two sequences must be the same
    length and, when ``labels`` is given, hold only those labels."""
    t = [_label(v, "targets") for v in targets]
    p = [_label(v, "predictions") for v in predictions]
    if len(t) != len(p):
        raise ParamsError("predictions", f"has {len(p)} labels but targets have {len(t)}")
    seen = set(t) | set(p)
    if labels is None:
        labels = sorted(seen)
    elif not seen <= set(labels):
        raise ParamsError("targets", f"hold labels {sorted(seen - set(labels), key=str)} outside {list(labels)}")
    labels = list(labels)
    index = {label: i for i, label in enumerate(labels)}
    matrix = [[0] * len(labels) for _ in labels]
    for true, pred in zip(t, p, strict=True):
        matrix[index[true]][index[pred]] += 1
    return labels, matrix
