"""Mergeable metric accumulation over batches (``nnx.StreamingMetrics``).

``StreamingMetrics(specs, semantics)`` (or ``for_task(specs, task)``) builds one accumulator per
declared ``MetricSpec`` (the registry of ``nnx_adapters.pytorch.metrics``: the same accumulators
training and evaluation use), ``update`` adds a batch, ``merge`` combines two accumulations over
disjoint samples (a new object; the result does not depend on the order) and ``finalize`` returns
a read-only :class:`MetricSnapshot`. The built-in accumulators keep sums and confusion counts, so
memory does not grow with the samples.

Semantics: ``"categorical"`` (class indices against ``(N, C)`` class probabilities or decoded
labels), ``"bernoulli"`` (one independent probability per output: every entry is scored, labels
decided at ``threshold``) and ``"continuous"`` (values). A user-registered accumulator merges
with its own ``merge(other)`` (in place, returning None), or part by part when its state is made
of sums, counts and tensors; one that keeps every score (``stores_scores = True``, or lists of
batches) is refused unless ``materialize=True`` stores the batches (O(N) memory).

Every batch is checked on the host before any accumulator sees it (shapes, widths, class ranges,
integral class indices, 0/1 decisions): ``StreamingMetrics`` is a user-facing tool, never called
inside a training step, so these reads cost no training time. NaN targets and ``ignore_index``
class targets are masked; ``valid`` (shaped like the targets) masks more. A metric failing
part-way through a batch leaves the accumulation inconsistent, and it refuses further use.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs
import numpy as np
import torch

from nnx_core.errors import NNxError, ParamsError, TrainingInputError
from nnx_adapters.pytorch.metric_checks import class_range, host, integers, same_shape, target_rule, tensor_of, top_class_problem
from nnx_adapters.pytorch.metrics import REGISTRY, Confusion, LabelCounts, _Sum, count_classes_as_seen, resolve
from nnx_api.config.params import TaskSpec

__all__ = ["SEMANTICS", "MetricMergeError", "MetricSnapshot", "StreamingMetrics"]

SEMANTICS = ("categorical", "bernoulli", "continuous")
"""How predictions are read (NNx's probability semantics)."""

_KINDS = {"categorical": "categorical", "bernoulli": "multilabel", "continuous": "regression"}
_SEMANTICS_OF = {kind: semantics for semantics, kind in _KINDS.items()}
_INPUTS = {"categorical": ("labels", "probabilities"), "bernoulli": ("labels", "probabilities"),
           "continuous": ("continuous",)}


class MetricMergeError(NNxError, ValueError):
    """``StreamingMetrics.merge`` was given a part declaring other metrics or another task (its
    semantics, labels, width, threshold or ignore index), or whose batches fixed another width:
    the two cannot be one accumulation."""


class _Inconsistent(NNxError, RuntimeError):
    """A metric failed part-way through a batch: the accumulation no longer describes one set of samples."""


@attrs.frozen
class MetricSnapshot:
    """What ``StreamingMetrics.finalize`` read: ``count`` (the valid targets scored), ``values``
    (label → float, read-only) and ``unavailable`` (the labels with no value: nothing scored)."""

    count: int
    values: Mapping[str, float] = attrs.field(factory=dict)
    unavailable: tuple[str, ...] = ()

    @property
    def available(self) -> bool:
        """Whether anything was scored (``count > 0``)."""
        return self.count > 0


def _task_of(task: Any, **given: Any) -> TaskSpec:
    """``task`` itself (a ``TaskSpec``), or the task NNx's ``semantics`` string and keywords describe."""
    if not isinstance(task, str):
        if any(value is not None for value in given.values()):
            raise ParamsError("StreamingMetrics", "labels/threshold/ignore_index/num_outputs go with a semantics "
                                                  "string; a TaskSpec already holds them")
        return task
    if task not in _KINDS:
        raise ParamsError("StreamingMetrics.semantics", f"semantics must be one of {SEMANTICS}, got {task!r}")
    labels, width = given["labels"], given["num_outputs"]
    if labels is not None and width is not None and len(tuple(labels)) != width:
        raise ParamsError("StreamingMetrics.num_outputs", f"num_outputs={width} does not match the "
                                                          f"{len(tuple(labels))} labels")
    fields = {"kind": _KINDS[task], "n": width if width is not None else None if labels is None else len(labels),
              "labels": labels}
    if given["threshold"] is not None:
        fields["threshold"] = given["threshold"]
    if given["ignore_index"] is not None:
        if task != "categorical":
            raise ParamsError("StreamingMetrics.ignore_index", "ignore_index must be an integer for categorical "
                                                               f"semantics only, got it for {task!r}")
        fields["ignore_index"] = given["ignore_index"]
    return TaskSpec(**fields)


_MERGEABLE_STATE = (_Sum, Confusion, LabelCounts, torch.Tensor, int, float, bool, str, type(None))


def _bounded_problem(acc: Any) -> str | None:
    """Why ``acc`` has no bounded, mergeable form (None: it has one)."""
    if getattr(acc, "stores_scores", False):
        return ("its accumulator declares stores_scores=True: it keeps every score (a rank metric such as AUROC "
                "is never additive)")
    if callable(getattr(acc, "merge", None)):
        return None
    state = list(getattr(acc, "__dict__", {}).values())
    state += [getattr(acc, n) for n in getattr(type(acc), "__slots__", ()) if hasattr(acc, n)]
    if all(isinstance(part, _MERGEABLE_STATE) for part in state):
        return None
    return "its accumulator has no merge(), and its state is not made of sums and counts"


class _Stored:
    """A metric that needs every score (``materialize=True``, O(N)): the batches are kept and
    replayed into a fresh accumulator at ``result``."""

    stores_scores = True

    def __init__(self, make: Any) -> None:
        self._make = make
        self._batches: list[tuple[np.ndarray, np.ndarray]] = []

    def update(self, target: np.ndarray, prediction: np.ndarray) -> None:
        self._make().update(target, prediction)  # malformed inputs fail on their own batch
        self._batches.append((np.array(target, copy=True), np.array(prediction, copy=True)))

    def merge(self, other: _Stored) -> None:
        self._batches.extend(other._batches)  # private copies, never written again

    def __deepcopy__(self, memo: dict) -> _Stored:
        clone = _Stored(self._make)
        clone._batches = list(self._batches)
        return clone

    def result(self) -> Any:
        if not self._batches:
            return None
        acc = self._make()
        acc.update(np.concatenate([t for t, _ in self._batches]), np.concatenate([p for _, p in self._batches]))
        return acc.result()


class StreamingMetrics:
    """Declared metrics accumulated batch by batch, mergeable across disjoint parts (module docstring).

    ``task`` is NNx's ``semantics`` string (``SEMANTICS``) with the keywords ``labels``,
    ``threshold``, ``ignore_index`` and ``num_outputs`` describing the task, or a ``TaskSpec``;
    ``materialize=True`` stores the batches of a metric with no bounded form."""

    def __init__(self, metrics: Sequence[Any], task: Any, *, labels: Any = None, threshold: float | None = None,
                 materialize: bool = False, ignore_index: int | None = None, num_outputs: int | None = None) -> None:
        task = _task_of(task, labels=labels, threshold=threshold, ignore_index=ignore_index, num_outputs=num_outputs)
        semantics = _SEMANTICS_OF[task.kind]
        for spec in metrics:
            entry = REGISTRY.get((spec.id, spec.version))
            if entry is not None and entry.input not in _INPUTS[semantics]:
                raise ParamsError("StreamingMetrics.metrics", f"metric {spec.label!r} needs {entry.input} inputs, "
                                                              f"which {semantics} semantics cannot derive")
        problems = resolve(list(metrics), task.kind, task.n)
        if problems:
            raise ParamsError("StreamingMetrics.metrics", "; ".join(problems))
        self.metrics = tuple(metrics)
        self.semantics: str = semantics
        self.num_outputs: int | None = task.n
        self.ignore_index: int | None = task.ignore_index
        self.threshold: float = task.threshold
        self.labels = task.labels
        self.count = 0
        self._entries = [REGISTRY[(s.id, s.version)] for s in self.metrics]
        n_classes = task.n if semantics == "categorical" else None
        self._accumulators: list[Any] = []
        for spec, entry in zip(self.metrics, self._entries, strict=True):
            acc = count_classes_as_seen(entry.factory(spec.config, n_classes))
            why = _bounded_problem(acc)
            if why is not None and not materialize:
                raise ParamsError("StreamingMetrics.metrics", f"metric {spec.label!r} ({spec.id}@v{spec.version}) "
                                  f"has no bounded, mergeable form: {why}. Bounded streaming rejects it; implement "
                                  "merge() for a metric that keeps only sums or counts, or pass "
                                  "StreamingMetrics(..., materialize=True) to store every score (O(N) memory)")
            if why is not None:
                acc = _Stored(lambda entry=entry, spec=spec: count_classes_as_seen(entry.factory(spec.config, n_classes)))
            self._accumulators.append(acc)
        self._broken = False
        self._seen_width: int | None = None
        self._top_class = -1  # the largest categorical class index scored before any width was known

    @classmethod
    def for_task(cls, metrics: Sequence[Any], task: Any, *, materialize: bool = False) -> StreamingMetrics:
        """The accumulators of ``metrics`` (``MetricSpec``s) for ``task`` (a ``TaskSpec``)."""
        return cls(metrics, task, materialize=materialize)

    @property
    def bounded(self) -> bool:
        """Whether no metric stores its batches (memory independent of the samples)."""
        return not any(isinstance(acc, _Stored) for acc in self._accumulators)

    # --- updates ---------------------------------------------------------------------------------

    def update(
        self, target: Any, *, probabilities: Any = None, labels: Any = None, values: Any = None, valid: Any = None
    ) -> int:
        """Add one batch: class indices ``(N,)`` with ``(N, C)`` ``probabilities`` and/or decoded
        ``labels`` (categorical); 0/1 outcomes with per-output ``probabilities`` and/or 0/1
        ``labels`` shaped like them (bernoulli); ``values`` shaped like the targets (continuous).
        Returns the valid targets this batch added."""
        self._require_intact()
        t = host(target)
        mask = np.ones(t.shape, dtype=bool) if valid is None else same_shape(host(valid), t, "valid").astype(bool)
        mask = target_rule(t, mask, self.ignore_index)
        given = {"probabilities": probabilities, "labels": labels, "continuous": values}
        given = {name: None if value is None else host(value) for name, value in given.items()}
        needed = {entry.input for entry in self._entries}
        inputs: dict[str, np.ndarray] = {}
        width = None
        if self.semantics == "categorical":
            if t.ndim != 1:
                raise TrainingInputError(f"categorical targets must be class indices shaped (N,), got {t.shape}")
            truth = integers(t[mask], "categorical targets")
            probs = given["probabilities"]
            if probs is not None:
                if probs.ndim != 2 or probs.shape[0] != t.shape[0]:
                    raise TrainingInputError(f"categorical probabilities must be (N, C) with N={t.shape[0]}, "
                                             f"got {probs.shape}")
                width = self._check_width(probs.shape[1], "probabilities")
                inputs["probabilities"] = probs[mask].astype(np.float64)
            if given["labels"] is not None:
                inputs["labels"] = integers(same_shape(given["labels"], t, "labels")[mask], "labels")
            elif probs is not None and "labels" in needed:
                inputs["labels"] = inputs["probabilities"].argmax(axis=1)
            n_classes = self.num_outputs
            if n_classes is None:
                n_classes = probs.shape[1] if probs is not None else self._seen_width
            class_range(truth, n_classes)
            if "labels" in inputs:
                class_range(inputs["labels"], n_classes, "decoded labels")
        else:
            width = self._check_width(t.shape[1] if t.ndim >= 2 else 1, "targets")
            for name, array in given.items():
                if array is not None:
                    inputs[name] = same_shape(array, t, name)[mask].reshape(-1)
            if self.semantics == "bernoulli" and "labels" in inputs and not np.isin(inputs["labels"], (0, 1)).all():
                raise TrainingInputError("bernoulli labels must be 0/1 decisions (pass probabilities= for "
                                         "probabilities)")
            if "labels" in needed and "labels" not in inputs and "probabilities" in inputs:
                inputs["labels"] = (inputs["probabilities"] >= self.threshold).astype(np.int64)
            truth = t[mask].reshape(-1)
            if self.semantics == "bernoulli":
                truth = (truth >= 0.5).astype(np.int64)
                inputs = {k: v.astype(np.int64) if k == "labels" else v for k, v in inputs.items()}
        return self._feed(truth, inputs, width)

    def update_logits(self, target: Any, logits: Any, *, valid: Any = None) -> int:
        """``update`` from raw outputs (class axis 1): softmax probabilities (categorical; the
        targets class indices shaped like the logits without their class axis, or one-hot / soft
        rows shaped like them), sigmoid probabilities decided at ``threshold`` (bernoulli) or the
        values themselves (continuous)."""
        self._require_intact()
        t, raw = tensor_of(target), tensor_of(logits).detach().cpu()
        t = t.detach().cpu()
        raw = raw if raw.is_floating_point() else raw.double()  # softmax / sigmoid in the logits' own precision
        categorical = self.semantics == "categorical"
        if categorical and raw.dim() < 2:
            raise TrainingInputError(f"categorical logits need a class axis 1, (N, C, ...), got {tuple(raw.shape)}")
        width = int(raw.shape[1]) if raw.dim() >= 2 else 1
        self._check_width(width, "logits")
        if not categorical:
            if t.shape != raw.shape:
                raise TrainingInputError(f"logits must be shaped like the targets {tuple(t.shape)}, "
                                         f"got {tuple(raw.shape)}")
            if self.semantics == "continuous":
                return self.update(t, values=raw, valid=valid)
            return self.update(t, probabilities=torch.sigmoid(raw), valid=valid)
        rows = (raw.shape[0], *raw.shape[2:])
        probs = torch.softmax(raw, dim=1).movedim(1, -1).reshape(-1, width)
        if t.is_floating_point() and t.shape == raw.shape:  # one-hot / soft rows: never ignore_index
            keep = torch.ones(rows, dtype=torch.bool) if valid is None else tensor_of(valid).bool().cpu()
            if tuple(keep.shape) != tuple(rows):
                raise TrainingInputError(f"valid must be shaped like the target rows {tuple(rows)}, "
                                         f"got {tuple(keep.shape)}")
            keep = (keep & ~torch.isnan(t).any(dim=1)).reshape(-1).numpy()
            truth = torch.nan_to_num(t).argmax(dim=1).reshape(-1).numpy()[keep]
            return self._feed(truth, self._categorical_inputs(probs.numpy()[keep]), width)
        if tuple(t.shape) != tuple(rows):
            raise TrainingInputError(f"categorical targets must be class indices shaped like the logits without "
                                     f"their class axis {tuple(rows)}, or one-hot / soft rows shaped like the logits, "
                                     f"got {tuple(t.shape)}")
        flat = t.reshape(-1).numpy()
        if valid is None:
            keep = np.ones(flat.shape, dtype=bool)
        else:
            keep = same_shape(host(valid), t.numpy(), "valid").astype(bool).reshape(-1)
        keep = target_rule(flat, keep, self.ignore_index)
        truth = integers(flat[keep], "categorical targets")
        class_range(truth, width)
        return self._feed(truth, self._categorical_inputs(probs.numpy()[keep]), width)

    def _categorical_inputs(self, probs: np.ndarray) -> dict[str, np.ndarray]:
        return {"probabilities": probs, "labels": probs.argmax(axis=1) if len(probs) else np.zeros(0, np.int64)}

    def _check_width(self, width: int, what: str) -> int:
        """The batch's classes / outputs along axis 1: the declared ``num_outputs`` or, undeclared,
        the width earlier batches fixed (which must hold every class index scored before)."""
        expected = self.num_outputs if self.num_outputs is not None else self._seen_width
        if expected is not None and width != expected:
            source = "are declared" if self.num_outputs is not None else "came in earlier batches"
            raise TrainingInputError(f"{what} have {width} outputs along axis 1 but {expected} {source}")
        if expected is None and self._top_class >= width:
            raise TrainingInputError(top_class_problem(self._top_class, width, f"these {what}"))
        return width

    def _feed(self, truth: np.ndarray, inputs: Mapping[str, np.ndarray], width: int | None) -> int:
        for spec, entry in zip(self.metrics, self._entries, strict=True):
            if entry.input not in inputs:
                keyword = "values" if entry.input == "continuous" else entry.input
                raise TrainingInputError(f"metric {spec.label!r} needs {entry.input} inputs: pass "
                                         f"update(..., {keyword}=...)")
        if width is not None and self._seen_width is None:
            self._seen_width = width
        n = int(truth.shape[0])
        if not n:
            return 0
        unchecked = self.semantics == "categorical" and self.num_outputs is None and self._seen_width is None
        try:
            for entry, acc in zip(self._entries, self._accumulators, strict=True):
                given = inputs[entry.input]
                if getattr(acc, "accepts_mask", False):  # a built-in: tensors
                    acc.update(torch.from_numpy(np.array(truth)), torch.from_numpy(np.array(given)))
                else:
                    acc.update(truth, given)
        except BaseException:
            self._broken = True
            raise
        if unchecked:
            top = int(truth.max()) if "labels" not in inputs else max(int(truth.max()), int(inputs["labels"].max()))
            self._top_class = max(self._top_class, top)
        self.count += n
        return n

    def _require_intact(self) -> None:
        if self._broken:
            raise _Inconsistent("a metric failed part-way through an update, so this accumulation is inconsistent; "
                                "start a new StreamingMetrics")

    # --- merge / finalize ------------------------------------------------------------------------

    def merge(self, other: StreamingMetrics) -> StreamingMetrics:
        """A new accumulation of both parts (disjoint samples); neither part changes."""
        if not isinstance(other, StreamingMetrics):
            raise TypeError(f"StreamingMetrics.merge needs a StreamingMetrics, got {type(other).__name__}")
        self._require_intact()
        other._require_intact()
        self._check_schema(other)
        merged = copy.copy(self)
        merged._accumulators = []
        for spec, mine, theirs in zip(self.metrics, self._accumulators, other._accumulators, strict=True):
            if callable(getattr(mine, "merge", None)):
                mine = copy.deepcopy(mine)
                if mine.merge(theirs) is not None:
                    raise TypeError(f"the accumulator of metric {spec.label!r} returned a value from merge(); "
                                    "merge(other) must add other's state to the accumulator in place and return None")
                merged._accumulators.append(mine)
            else:
                merged._accumulators.append(_merge(mine, theirs, spec.label))
        merged.count = self.count + other.count
        merged._seen_width = self._seen_width if self._seen_width is not None else other._seen_width
        merged._top_class = max(self._top_class, other._top_class)
        return merged

    def _check_schema(self, other: StreamingMetrics) -> None:
        """Declarations first, then what the batches fixed (widths, class indices)."""
        parts = (("metric declarations", "metrics"), ("probability semantics", "semantics"),
                 ("task labels", "labels"), ("decision thresholds", "threshold"),
                 ("output counts", "num_outputs"), ("ignore indices", "ignore_index"))
        for what, name in parts:
            mine, theirs = getattr(self, name), getattr(other, name)
            if name == "metrics":
                mine = [(s.label, s.id, s.version, dict(s.config)) for s in mine]
                theirs = [(s.label, s.id, s.version, dict(s.config)) for s in theirs]
            if mine != theirs and not (name == "threshold" and self.semantics != "bernoulli"):
                raise MetricMergeError(f"StreamingMetrics.merge: cannot merge different {what} ({mine!r} vs "
                                       f"{theirs!r}); merge only parts built with the same MetricSpecs and task")
        widths = (self._seen_width, other._seen_width)
        if None not in widths and widths[0] != widths[1]:
            raise MetricMergeError(f"StreamingMetrics.merge: cannot merge accumulations of different widths: "
                                   f"{widths[0]} vs {widths[1]} outputs")
        width = widths[0] if widths[0] is not None else widths[1]
        top = max(self._top_class, other._top_class)
        if self.semantics == "categorical" and width is not None and top >= width:
            raise MetricMergeError(f"StreamingMetrics.merge: cannot merge: "
                                   f"{top_class_problem(top, width, 'the merged accumulation')}")

    def finalize(self) -> MetricSnapshot:
        """The values so far (the accumulation can go on); none before any valid target."""
        self._require_intact()
        values: dict[str, float] = {}
        unavailable: list[str] = []
        for spec, acc in zip(self.metrics, self._accumulators, strict=True):
            value = acc.result() if self.count else None
            if value is None:
                unavailable.append(spec.label)
            else:
                values[spec.label] = float(value)
        return MetricSnapshot(self.count, MappingProxyType(values), tuple(unavailable))

    def __repr__(self) -> str:
        return f"StreamingMetrics({[s.label for s in self.metrics]}, {self.semantics!r}, count={self.count})"


def _merge(a: Any, b: Any, label: str) -> Any:
    """Two accumulator states added part by part (module docstring)."""
    if a is None or b is None:
        return copy.deepcopy(b if a is None else a)
    if isinstance(a, Confusion):
        a, b = copy.deepcopy(a), copy.deepcopy(b)
        a.resize(b.n)
        b.resize(a.n)
        out = Confusion(a.n)
        out.grows = a.grows and b.grows
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
