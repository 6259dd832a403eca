"""Immutable records: what one evaluation and one training iteration produced.

``EvaluationDataPoint`` (EDP) is a scored pass over data: loss, error, the classification fields
and any named metrics. ``IterationDataPoint`` (IDP) is one training batch: its indices, learning
rate and training EDP; the epoch's last IDP also carries the validation EDP, the whole-epoch
training summary and the monitor's decision. ``state()`` / ``from_state()`` go through the one
converter (``nnx_core.convert``); unset fields are left out, so rows and ids stay stable as fields
are added.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from nnx_core.convert import OMIT, Stateful

CLASSIFICATION_FIELDS = ("accuracy", "f1", "precision", "recall")
EDP_FIELDS = ("loss", "error", *CLASSIFICATION_FIELDS)


def _frozen_mapping(value: Mapping[str, float] | None) -> Mapping[str, float]:
    return dict(sorted((value or {}).items()))


def _unset() -> Any:
    return attrs.field(default=None, metadata=OMIT)


@attrs.frozen(kw_only=True)
class EvaluationDataPoint(Stateful):
    """A scored pass over data. Every value is a plain float or None (not computed)."""

    loss: float | None = _unset()
    error: float | None = _unset()
    accuracy: float | None = _unset()
    f1: float | None = _unset()
    precision: float | None = _unset()
    recall: float | None = _unset()
    count: int | None = _unset()
    metrics: Mapping[str, float] = attrs.field(factory=dict, converter=_frozen_mapping, metadata=OMIT)
    extra: Mapping[str, float] = attrs.field(factory=dict, converter=_frozen_mapping, metadata=OMIT)

    def get(self, name: str) -> float | None:
        """A field or a named metric by name (``"loss"``, ``"error"``, ``"accuracy"``, ``"f1"``, ...)."""
        if name in EDP_FIELDS:
            return getattr(self, name)
        if name in self.metrics:
            return self.metrics[name]
        return self.extra.get(name)


@attrs.frozen(kw_only=True)
class MonitorRecord(Stateful):
    """The epoch's monitor decision as stored with history and checkpoints. Every field is in
    ``state()``; a missing value / no best yet may be left out of a saved one (e.g. by CSV)."""

    metric: str
    split: str
    mode: str
    value: float | None = None
    status: str
    improved: bool
    best: float | None = None


@attrs.frozen(kw_only=True)
class IterationDataPoint(Stateful):
    """One training iteration (batch). Validation and epoch summaries sit on the epoch's last one."""

    iter_idx: int
    epoch_idx: int
    batch_idx: int
    lr: float
    train_edp: EvaluationDataPoint
    val_edp: EvaluationDataPoint | None = _unset()
    train_summary: EvaluationDataPoint | None = _unset()
    selection: MonitorRecord | None = _unset()
    update_count: int | None = _unset()


def first_finite(*values: float | None) -> float | None:
    """The first value that is a finite number, else None."""
    for value in values:
        if value is not None and math.isfinite(value):
            return value
    return None


def fallback_signal(idp: IterationDataPoint | None) -> float | None:
    """The documented default signal: first finite of val error, val loss, train error, train loss.

    The training side uses the whole-epoch summary when there is one, else the last batch.
    """
    if idp is None:
        return None
    val = idp.val_edp
    train = idp.train_summary or idp.train_edp
    return first_finite(
        val.error if val else None,
        val.loss if val else None,
        train.error,
        train.loss,
    )
