"""Immutable records: what one evaluation and one training iteration produced.

``EvaluationDataPoint`` (EDP) is a scored pass over data: loss, error, the classification fields
and any named metrics. ``IterationDataPoint`` (IDP) is one training batch: its indices, learning
rate and training EDP; the epoch's last IDP also carries the validation EDP, the whole-epoch
training summary and the monitor's decision. ``state()`` / ``from_state()`` go through the one
converter (``nnx_core.convert``); unset fields are left out, so rows and ids stay stable as fields
are added. The one exception is what ``EvaluationDataPoint.state()`` itself returns: there
``loss`` and ``error`` are always present (None while unset), as NNx writes them; a record nested
in an ``IterationDataPoint``'s state (``idps.csv``, the journal, checkpoints) still leaves them
out while unset, so saved runs keep their layout. ``MonitorRecord.monitor`` speaks the monitor's
vocabulary (``nnx_core.monitor_spec``); the monitor that reads these records, and its fallback
signal, live in ``nnx_core.monitor``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from nnx_core.convert import OMIT, Stateful
from nnx_core.dataclass_view import expose_dataclass_fields
from nnx_core.errors import ParamsError
from nnx_core.monitor_spec import FALLBACK, MonitorSpec
from nnx_core.scores import confusion_of, label_scores

CLASSIFICATION_FIELDS = ("accuracy", "f1", "precision", "recall")
EDP_FIELDS = ("loss", "error", *CLASSIFICATION_FIELDS)


class FrozenMapping(dict):  # type: ignore[type-arg]
    """A record's ``metrics`` / ``extra``: a dict (JSON, YAML and ``==`` see a plain one) that
    refuses changes (``TypeError``, the record is frozen) and hashes by its items, so the record
    stays hashable."""

    def _refuse(self, *_args: Any, **_kwargs: Any) -> None:
        raise TypeError("a record's metrics / extra cannot change; use with_extra(name, value) for a copy")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (dict(self),)


def _frozen_mapping(value: Mapping[str, float] | None) -> Mapping[str, float]:
    return FrozenMapping(sorted((value or {}).items()))


def _unset() -> Any:
    return attrs.field(default=None, metadata=OMIT)


@attrs.frozen(kw_only=True)
class EvaluationDataPoint(Stateful):
    """A scored pass over data. Every value is a plain float or None (not computed); ``kind`` is
    the declared ``TaskSpec``'s kind (``"categorical"``, ``"multilabel"``, ``"regression"``) or
    None without one, ``count`` the valid targets scored (None where NNx leaves it unset);
    ``status`` is NNx 0.4's field of that name, kept for code that reads or passes it: when given,
    the record is a task record, so it needs a ``kind``, and ``status`` says whether it scored
    anything (``"ok"`` with a positive ``count``, ``"empty"`` with none). ``count`` is never
    negative."""

    loss: float | None = _unset()
    error: float | None = _unset()
    accuracy: float | None = _unset()
    f1: float | None = _unset()
    precision: float | None = _unset()
    recall: float | None = _unset()
    count: int | None = _unset()
    kind: str | None = _unset()
    status: str | None = _unset()  # NNx 0.4's "ok" / "empty" (checked when given); never set by this implementation's records
    metrics: Mapping[str, float] = attrs.field(factory=dict, converter=_frozen_mapping, metadata=OMIT)
    extra: Mapping[str, float] = attrs.field(factory=dict, converter=_frozen_mapping, metadata=OMIT)

    def __attrs_post_init__(self) -> None:
        count = self.count
        if count is not None and (isinstance(count, bool) or not isinstance(count, (int, float)) or not count >= 0):
            raise ParamsError("EvaluationDataPoint.count", f"must be a non-negative integer (valid targets), got {count!r}")
        if self.status is None:
            return
        if self.kind is None:
            raise ParamsError("EvaluationDataPoint.status", "count / status describe a task record and need a kind "
                              "(categorical, multilabel or regression)")
        expected = "ok" if count else "empty"
        if self.status != expected:
            raise ParamsError("EvaluationDataPoint.status", f"status must be {expected!r} for count={count}, got {self.status!r}")

    def state(self) -> dict[str, Any]:
        """The plain mapping of this record: ``loss`` and ``error`` always (None while unset, as
        NNx writes them), every other field only when set (``extra`` / ``metrics`` when
        non-empty). ``from_state`` reads it back."""
        state = super().state()
        return {"loss": self.loss, "error": self.error, **state}

    def get(self, name: str) -> float | None:
        """A field or a named metric by name (``"loss"``, ``"error"``, ``"accuracy"``, ``"f1"``, ...)."""
        if name in EDP_FIELDS:
            value: float | None = getattr(self, name)
            return value
        if name in self.metrics:
            return self.metrics[name]
        return self.extra.get(name)

    def with_loss(self, value: float | None) -> EvaluationDataPoint:
        """A copy with ``loss`` set."""
        return attrs.evolve(self, loss=value)

    def with_error(self, value: float | None) -> EvaluationDataPoint:
        """A copy with ``error`` set."""
        return attrs.evolve(self, error=value)

    def with_extra(self, name: str, value: float) -> EvaluationDataPoint:
        """A copy with the custom metric ``extra[name] = value`` added (or replaced)."""
        return attrs.evolve(self, extra={**self.extra, name: float(value)})

    @classmethod
    def of(
        cls,
        Y: Any,
        Y_hat: Any,
        average: str = "macro",
        extra_metrics: Mapping[str, Callable[[Any, Any], float]] | None = None,
    ) -> EvaluationDataPoint:
        """Score class labels ``Y_hat`` against ``Y``: accuracy, and f1/precision/recall averaged
        as ``average`` says (``macro`` default, ``micro``, ``weighted``, ``binary``; zero
        division gives 0), as scikit-learn computes them (``nnx_core.scores``). ``Y`` and
        ``Y_hat`` are 1-d sequences of labels (lists, NumPy arrays, tensors). Each
        ``extra_metrics[name](Y, Y_hat)`` is called on the arguments as given and stored in
        ``extra``. ``loss`` and ``error`` are left unset (``with_loss`` / ``with_error``).

        >>> EvaluationDataPoint.of([0, 1, 1, 2], [0, 1, 2, 2]).accuracy
        0.75
        """
        targets, predictions = _labels(Y, "Y"), _labels(Y_hat, "Y_hat")
        labels = None
        if average == "binary":
            if not set(targets) | set(predictions) <= {0, 1}:
                raise ParamsError("average", "'binary' needs 0/1 labels; use 'macro', 'micro' or 'weighted'")
            labels = [0, 1]
        _, matrix = confusion_of(targets, predictions, labels)
        scores: dict[str, Any] = label_scores(matrix, average)
        if not scores:
            raise ParamsError("Y", "is empty: there is nothing to score")
        extra = {name: float(fn(Y, Y_hat)) for name, fn in (extra_metrics or {}).items()}
        return cls(**scores, extra=extra)

    @classmethod
    def mean_of(cls, edps: Sequence[EvaluationDataPoint]) -> EvaluationDataPoint:
        """The unweighted mean of each field over the records that carry it (``extra`` and
        ``metrics`` per key). Every record counts the same whatever its size, so over batches
        of unequal size this is not the whole-data value: ``NNModel.evaluate`` computes that."""
        if not edps:
            raise ParamsError("edps", "mean_of needs at least one record")

        def mean(values: Iterable[float | None]) -> float | None:
            present = [v for v in values if v is not None]
            return sum(present) / len(present) if present else None

        def per_key(maps: list[Mapping[str, float]]) -> dict[str, float]:
            keys = sorted({k for m in maps for k in m})
            return {k: mean(m.get(k) for m in maps) for k in keys}  # type: ignore[misc]

        fields: dict[str, Any] = {name: mean(getattr(e, name) for e in edps) for name in EDP_FIELDS}
        return cls(**fields, extra=per_key([e.extra for e in edps]), metrics=per_key([e.metrics for e in edps]))


def _labels(values: Any, what: str) -> list[Any]:
    """Plain labels of a 1-d sequence (NumPy arrays and tensors through ``tolist``)."""
    listed = values.tolist() if hasattr(values, "tolist") else list(values)
    if not isinstance(listed, list):
        raise ParamsError(what, "must be a 1-d sequence of labels, got a scalar")
    return listed


class _Absent:
    """The default of ``MonitorRecord``'s positional ``monitor``: none given (None is the fallback's)."""


_ABSENT = _Absent()


@attrs.frozen(kw_only=True, init=False)
class MonitorRecord(Stateful):
    """The epoch's monitor decision as stored with history and checkpoints. Every field is in
    ``state()``; a missing value / no best yet may be left out of a saved one (e.g. by CSV).

    Built by keyword from its fields (``metric=``, ``split=``, ``mode=``, ``value=``, ``status=``,
    ``improved=``, ``best=``), or as NNx code builds it: ``MonitorRecord(monitor, value, status,
    improved)``, where ``monitor`` is a ``MonitorSpec`` with a known ``mode`` (its metric, split
    and mode are kept; ``min_delta`` and the policies are the monitor's, not the record's) or None
    for the documented fallback signal. Either way the record, and its ``state()``, are the same."""

    metric: str
    split: str
    mode: str
    value: float | None = None
    status: str
    improved: bool
    best: float | None = None

    def __init__(
        self, monitor: MonitorSpec | None | _Absent = _ABSENT, value: float | None = None, status: str | None = None,
        improved: bool | None = None, *, metric: str | None = None, split: str | None = None, mode: str | None = None,
        best: float | None = None,
    ) -> None:
        if not isinstance(monitor, _Absent):
            if metric is not None or split is not None or mode is not None:
                raise ParamsError("MonitorRecord.monitor", "give the monitor or its metric / split / mode, not both")
            if monitor is not None and not isinstance(monitor, MonitorSpec):
                raise ParamsError("MonitorRecord.monitor", f"must be a MonitorSpec or None (the fallback signal), "
                                                           f"got {type(monitor).__name__}")
            if monitor is not None and monitor.mode is None:
                raise ParamsError("MonitorRecord.monitor", f"{monitor.key!r} has no mode; give mode='min' or 'max'")
            metric, split = (FALLBACK, FALLBACK) if monitor is None else (monitor.metric, monitor.split)
            mode = "min" if monitor is None else monitor.mode
        if metric is None or split is None or mode is None or status is None or improved is None:
            given = {"metric": metric, "split": split, "mode": mode, "status": status, "improved": improved}
            lacking = [name for name, held in given.items() if held is None]
            raise TypeError(f"MonitorRecord() needs {', '.join(lacking)} (or a monitor and its status and improved)")
        self.__attrs_init__(metric=metric, split=split, mode=mode, value=value, status=status, improved=improved,
                            best=best)

    @property
    def monitor(self) -> MonitorSpec | None:
        """The watched value as NNx's record names it: a ``MonitorSpec`` of this record's metric,
        split and mode (``.key`` is ``"val.loss"``); None for the documented fallback signal,
        which no single metric names."""
        if self.split == FALLBACK:
            return None
        return MonitorSpec(metric=self.metric, split=self.split, mode=self.mode)


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

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> IterationDataPoint:
        """Rebuild from :meth:`state`, or from one flat row of it as NNx's CSV history holds it
        (``"train_edp.loss"``, ``"val_edp.metrics.mae"``): dotted keys are nested again, empty
        cells (None / NaN) are left out, and a nested record none of whose cells is set is absent."""
        if isinstance(state, Mapping) and any(isinstance(key, str) and "." in key for key in state):
            state = _unflatten(state)
        return super().from_state(state)

    def with_val_edp(self, value: EvaluationDataPoint | None) -> IterationDataPoint:
        """A copy with the validation record set."""
        return attrs.evolve(self, val_edp=value)

    def monitored_train_edp(self) -> EvaluationDataPoint:
        """The training record a monitor reads: the whole-epoch summary when there is one, else
        the batch record."""
        return self.train_summary or self.train_edp


def _is_empty_cell(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _unflatten(row: Mapping[str, Any]) -> dict[str, Any]:
    """A flat row (``{"a.b.c": v}``) nested again (``{"a": {"b": {"c": v}}}``); empty cells and
    the groups they leave empty are dropped. A nested key already given as a mapping is merged."""
    nested: dict[str, Any] = {}
    for key, value in row.items():
        if _is_empty_cell(value):
            continue
        parts = str(key).split(".")
        node = nested
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ParamsError(str(key), f"conflicts with the value given for {part!r}")
            node = child
        if isinstance(value, Mapping) and isinstance(node.get(parts[-1]), dict):
            node[parts[-1]].update(value)
        else:
            node[parts[-1]] = value
    return _drop_empty(nested)


def _drop_empty(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            value = _drop_empty(value)
            if not value:
                continue
        out[key] = value
    return out


# dataclasses.fields() / asdict() / replace() work on the records as on NNx's, NNx's field order first
expose_dataclass_fields(
    EvaluationDataPoint,
    ("f1", "recall", "accuracy", "precision", "loss", "error", "extra", "kind", "count", "status", "metrics"),
)
expose_dataclass_fields(
    IterationDataPoint,
    ("lr", "iter_idx", "epoch_idx", "batch_idx", "train_edp", "val_edp", "train_summary", "selection", "update_count"),
)
