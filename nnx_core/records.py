"""Immutable records: what one evaluation and one training iteration produced.

``EvaluationDataPoint`` (EDP) is a scored pass over data: loss, error, the classification fields
and any named metrics. ``IterationDataPoint`` (IDP) is one training batch: its indices, learning
rate and training EDP; the epoch's last IDP also carries the validation EDP, the whole-epoch
training summary and the monitor's decision. ``state()`` omits fields that are unset, so rows and
ids stay stable as fields are added.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

CLASSIFICATION_FIELDS = ("accuracy", "f1", "precision", "recall")
EDP_FIELDS = ("loss", "error", *CLASSIFICATION_FIELDS)


def _frozen_mapping(value: Mapping[str, float] | None) -> Mapping[str, float]:
    return dict(sorted((value or {}).items()))


@attrs.frozen(kw_only=True)
class EvaluationDataPoint:
    """A scored pass over data. Every value is a plain float or None (not computed)."""

    loss: float | None = None
    error: float | None = None
    accuracy: float | None = None
    f1: float | None = None
    precision: float | None = None
    recall: float | None = None
    count: int | None = None
    metrics: Mapping[str, float] = attrs.field(factory=dict, converter=_frozen_mapping)
    extra: Mapping[str, float] = attrs.field(factory=dict, converter=_frozen_mapping)

    def get(self, name: str) -> float | None:
        """A field or a named metric by name (``"loss"``, ``"error"``, ``"accuracy"``, ``"f1"``, ...)."""
        if name in EDP_FIELDS:
            return getattr(self, name)
        if name in self.metrics:
            return self.metrics[name]
        return self.extra.get(name)

    def state(self) -> dict[str, Any]:
        """Plain mapping; unset (None/empty) fields are left out."""
        out: dict[str, Any] = {k: getattr(self, k) for k in (*EDP_FIELDS, "count") if getattr(self, k) is not None}
        if self.metrics:
            out["metrics"] = dict(self.metrics)
        if self.extra:
            out["extra"] = dict(self.extra)
        return out

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> EvaluationDataPoint:
        """Inverse of :meth:`state`."""
        return cls(**state)


@attrs.frozen(kw_only=True)
class MonitorRecord:
    """The epoch's monitor decision as stored with history and checkpoints."""

    metric: str
    split: str
    mode: str
    value: float | None
    status: str
    improved: bool
    best: float | None

    def state(self) -> dict[str, Any]:
        """Plain mapping of every field."""
        return attrs.asdict(self)

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> MonitorRecord:
        """Inverse of :meth:`state` (a missing value / no best yet may be left out, e.g. by CSV)."""
        return cls(**{"value": None, "best": None, **state})


@attrs.frozen(kw_only=True)
class IterationDataPoint:
    """One training iteration (batch). Validation and epoch summaries sit on the epoch's last one."""

    iter_idx: int
    epoch_idx: int
    batch_idx: int
    lr: float
    train_edp: EvaluationDataPoint
    val_edp: EvaluationDataPoint | None = None
    train_summary: EvaluationDataPoint | None = None
    selection: MonitorRecord | None = None
    update_count: int | None = None

    def state(self) -> dict[str, Any]:
        """Plain mapping; unset optional fields are left out."""
        out: dict[str, Any] = {
            "iter_idx": self.iter_idx,
            "epoch_idx": self.epoch_idx,
            "batch_idx": self.batch_idx,
            "lr": self.lr,
            "train_edp": self.train_edp.state(),
        }
        for name in ("val_edp", "train_summary", "selection"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value.state()
        if self.update_count is not None:
            out["update_count"] = self.update_count
        return out

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> IterationDataPoint:
        """Inverse of :meth:`state`."""
        kw = dict(state)
        for name in ("train_edp", "val_edp", "train_summary"):
            if kw.get(name) is not None:
                kw[name] = EvaluationDataPoint.from_state(kw[name])
        if kw.get("selection") is not None:
            kw["selection"] = MonitorRecord.from_state(kw["selection"])
        return cls(**kw)


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
