"""scikit-learn as the oracle of NNx's label scores (accuracy and precision / recall / F1 with
``zero_division=0``, the rule ``nnx_core.scores`` states)."""

from __future__ import annotations

from sklearn import metrics as skm


def sklearn_scores(y, y_hat, average: str) -> dict[str, float]:
    """scikit-learn's accuracy, precision, recall and F1 of ``y_hat`` against ``y``."""
    kw = {"average": average, "zero_division": 0}
    return {
        "accuracy": skm.accuracy_score(y, y_hat),
        "f1": skm.f1_score(y, y_hat, **kw),
        "precision": skm.precision_score(y, y_hat, **kw),
        "recall": skm.recall_score(y, y_hat, **kw),
    }
