"""Objectives: declare the loss, let NNx own the update.

An objective is any callable ``objective(ctx: ObjectiveContext) -> ObjectiveResult``. It runs the
forward and returns named :class:`LossTerm` s — each a *numerator* (a sum over samples) with, for
a mean term, its *denominator* (how many samples it summed; 0 = all masked). It never calls
backward or steps an optimizer: the shared update engine (``nnx_core.engine``) accumulates the
terms over each update window, divides every mean term by its window-wide denominator, and runs
unscale → finite check → clip → step once per optimizer. That is what makes gradient
accumulation, masking and multi-term losses exact.

    run = model.train(params, objective=nnx.supervised_objective())
    run = student.train(params, objective=nnx.kd_objective(teacher, alpha=0.5, temperature=4.0))

A run has exactly one update owner: a step function (``train_step_fn`` / ``trainer_step_fn``)
or an objective, never both (refused before anything is written).

The update engine runs as the run's update owner (``nnx_api.training.owners.ObjectiveStep``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch
import torch.nn.functional as F
from torch import nn

from nnx_core.engine import MEAN, REDUCTIONS, SUM, TermReading
from nnx_core.errors import ParamsError
from nnx_core.records import EvaluationDataPoint
from nnx_core.validate import check_float
from nnx_adapters.pytorch.batches import split_batch, to_device
from nnx_adapters.pytorch.tasks import ModuleLossTask
from nnx_api.callbacks import UpdateEvent
from nnx_api.callbacks.names import guard_frozen


# ---------------------------------------------------------------------------------------- values
def _check_numerator(instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        raise ParamsError(
            f"LossTerm({instance.name!r}).numerator",
            f"must be a scalar tensor (a sum over samples), got {type(value).__name__}"
            + (f" of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else ""),
        )


def _check_denominator(instance: Any, attribute: Any, value: Any) -> None:
    path = f"LossTerm({instance.name!r}).denominator"
    if instance.reduction == SUM:
        if value is not None:
            raise ParamsError(path, "a sum term takes no denominator (its numerator is already the loss)")
        return
    if value is None:
        raise ParamsError(path, "a mean term needs its sample count (0 when every sample is masked)")
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ParamsError(path, f"must be a number or a scalar tensor, got shape {tuple(value.shape)}")
        return  # read (and checked ≥ 0, finite) with the numerators, once per microbatch
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise ParamsError(path, f"must be a finite number ≥ 0, got {value!r}")


def _check_name(instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ParamsError("LossTerm.name", f"must be a non-blank string, got {value!r}")


def _check_reduction(instance: Any, attribute: Any, value: Any) -> None:
    if value not in REDUCTIONS:
        raise ParamsError(f"LossTerm({instance.name!r}).reduction", f"must be 'mean' or 'sum', got {value!r}")


def _check_weight(instance: Any, attribute: Any, value: Any) -> None:
    check_float(f"LossTerm({instance.name!r}).weight", value)


@attrs.frozen(kw_only=False)
class LossTerm:
    """One named part of a loss for one microbatch.

    ``numerator``: a scalar tensor, the *sum* of the per-sample losses. ``denominator`` (mean
    terms): how many samples it summed — a number or scalar tensor, 0 when all are masked.
    ``reduction="sum"`` terms take no denominator. ``weight`` multiplies the term's window value.
    """

    name: str = attrs.field(validator=_check_name)
    numerator: Any = attrs.field(validator=_check_numerator, repr=False)
    denominator: Any = attrs.field(default=None, validator=_check_denominator)
    reduction: str = attrs.field(default=MEAN, validator=_check_reduction)
    weight: float = attrs.field(default=1.0, validator=_check_weight)

    @property
    def value(self) -> float | None:
        """This microbatch's value: numerator / denominator (None when masked), or the numerator."""
        num = float(self.numerator.detach())
        if self.reduction == SUM:
            return num
        den = float(self.denominator)
        return num / den if den else None


def _terms(value: Any) -> tuple[LossTerm, ...]:
    if isinstance(value, LossTerm):
        return (value,)
    return tuple(value)


def _check_terms(instance: Any, attribute: Any, value: tuple[LossTerm, ...]) -> None:
    if not value:
        raise ParamsError("ObjectiveResult.terms", "needs at least one LossTerm")
    for term in value:
        if not isinstance(term, LossTerm):
            raise ParamsError("ObjectiveResult.terms", f"must hold LossTerm values, got {type(term).__name__}")
    names = [t.name for t in value]
    if len(set(names)) != len(names):
        raise ParamsError("ObjectiveResult.terms", f"term names must be unique, got {names}")


def _check_record(instance: Any, attribute: Any, value: Any) -> None:
    if value is not None and not isinstance(value, EvaluationDataPoint):
        raise ParamsError("ObjectiveResult.record", f"must be an EvaluationDataPoint or None, got {type(value).__name__}")


@attrs.frozen
class ObjectiveResult:
    """An objective's answer for one microbatch: its loss terms and an optional training record
    (a record whose ``loss`` is None gets the microbatch's weighted loss filled in)."""

    terms: tuple[LossTerm, ...] = attrs.field(converter=_terms, validator=_check_terms)
    record: EvaluationDataPoint | None = attrs.field(default=None, validator=_check_record)

    def loss(self) -> float | None:
        """Σ weight · value over the unmasked terms (None when every term is masked)."""
        values = [(t.weight, t.value) for t in self.terms]
        live = [w * v for w, v in values if v is not None]
        return sum(live) if live else None


@guard_frozen
@dataclasses.dataclass(frozen=True)
class ObjectiveContext:
    """What an objective receives for one microbatch: a frozen dataclass with NNx's fields in
    NNx's order.

    ``precision`` is the run's resolved precision ("fp32", "bf16", "fp16"; None on a context
    built by hand: full precision); run the forward under ``ctx.autocast()`` and compute losses
    from ``ctx.full_precision(output)``. ``extra_metrics`` are the run's ``{name: fn(y_true,
    y_pred)}``, for the ``extra`` of the result's record.
    """

    model: Any
    batch: Any
    epoch_idx: int
    batch_idx: int
    extra_metrics: Mapping[str, Callable[[Any, Any], float]] | None = None
    precision: str | None = None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The forward's autocast context for the run's precision (a no-op in fp32)."""
        return self.model.autocast_context()()

    @staticmethod
    def full_precision(tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` as float32 when autocast produced fp16/bf16 (losses are computed in fp32)."""
        return tensor.float() if tensor.dtype in (torch.float16, torch.bfloat16) else tensor

    def inputs_and_target(self) -> tuple[Any, torch.Tensor]:
        """The batch's ``(inputs, target)`` on the model's device."""
        inputs, target = split_batch(self.batch)
        device = self.model.device
        return to_device(inputs, device), to_device(target, device)

    def forward(self, inputs: Any) -> torch.Tensor:
        """The model's forward under the run's autocast."""
        net = self.model.net
        with self.autocast():
            return net(*inputs) if isinstance(inputs, (tuple, list)) else net(inputs)


class Objective:
    """Base class of objectives (any callable ``ctx -> ObjectiveResult`` works as well).

    ``nonfinite``: "fail" (default) raises ``NonFiniteLossError`` before any parameter changes;
    "skip" drops the window holding a non-finite term or gradient. Optional hooks:
    ``check_run(model, *, optimizers, callbacks)`` runs before anything is written;
    ``after_update(events)`` after every optimizer of a commit stepped, before the callbacks see it.
    """

    def __init__(self, nonfinite: str = "fail") -> None:
        if nonfinite not in ("fail", "skip"):
            raise ParamsError("Objective.nonfinite", f"must be 'fail' or 'skip', got {nonfinite!r}")
        self.nonfinite = nonfinite

    def __call__(self, ctx: ObjectiveContext) -> ObjectiveResult:
        raise NotImplementedError

    def check_run(self, model: Any, *, optimizers: Sequence[str], callbacks: Sequence[Any]) -> None:
        """Refuse a run this objective cannot serve (before anything is written)."""

    def after_update(self, events: Sequence[UpdateEvent]) -> None:
        """After a commit's optimizers stepped (e.g. an EMA target advances here)."""


def supervised_terms(task: Any, output: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, Any]:
    """The task loss's (numerator, denominator) for an objective. A categorical task with the
    built-in loss leaves its ignored targets out (``ignore_index``, else -100, as ``F.cross_entropy``
    does): the denominator is then the valid count on the device (read with the terms, no sync of
    its own)."""
    if task.categorical and not isinstance(task, ModuleLossTask):
        return task.masked_terms(output, target)
    return task.sum_terms(output, target)


def supervised_term(name: str, task: Any, numerator: torch.Tensor, count: Any, weight: float = 1.0) -> LossTerm:
    """The supervised term: normalised by ``count``, or summed for a sum-reduced ``loss_fn``."""
    if task.additive:
        return LossTerm(name, numerator, None, reduction=SUM, weight=weight)
    return LossTerm(name, numerator, count, weight=weight)


def _record(task: Any, output: torch.Tensor, target: torch.Tensor, count: Any) -> EvaluationDataPoint:
    """Accuracy/error and valid-target count of a batch (its loss is filled in from the terms), and
    the declared task's ``kind`` (as the default step's records carry it); ``count`` may be a 0-d
    tensor, read in the same host sync as the correct count."""
    correct, rows = task.correct(output.detach(), target)
    if isinstance(count, torch.Tensor):
        hits, count = torch.stack([correct.double(), count.double()]).tolist() if correct is not None else (None, float(count))
        count = int(count)
    else:
        hits = None if correct is None else float(correct)
    if hits is None:
        return EvaluationDataPoint(count=count, kind=task.record_kind)
    denominator = rows if rows is not None else count
    accuracy = hits / denominator if denominator else None
    return EvaluationDataPoint(accuracy=accuracy, error=None if accuracy is None else 1.0 - accuracy, count=count,
                               kind=task.record_kind)


class SupervisedObjective(Objective):
    """The model's own task loss: numerator over the valid targets, normalised by their count."""

    def __call__(self, ctx: ObjectiveContext) -> ObjectiveResult:
        inputs, target = ctx.inputs_and_target()
        output = ctx.forward(inputs)
        task = ctx.model.task_adapter
        task.check(output, target)
        numerator, count = supervised_terms(task, output, target)
        return ObjectiveResult(supervised_term("loss", task, numerator, count), _record(task, output, target, count))


def supervised_objective(*, nonfinite: str = "fail") -> SupervisedObjective:
    """The default supervised loss as an objective (term ``"loss"``, as NNx names it)."""
    return SupervisedObjective(nonfinite=nonfinite)


def softened_kl(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """Σ over rows of KL(teacher_T ‖ student_T) · T² (temperature-softened, class axis last)."""
    width = student.shape[-1]
    s = F.log_softmax(student.reshape(-1, width).float() / temperature, dim=-1)
    t = F.log_softmax(teacher.reshape(-1, width).float() / temperature, dim=-1)
    return F.kl_div(s, t, reduction="sum", log_target=True) * (temperature * temperature)


class KDObjective(Objective):
    """Knowledge distillation: a frozen teacher's softened outputs plus the task loss."""

    def __init__(self, teacher: Any, alpha: float = 0.5, temperature: float = 4.0, *, nonfinite: str = "fail") -> None:
        super().__init__(nonfinite)
        self.teacher_model = teacher if hasattr(teacher, "autocast_context") else None
        net = teacher.net if self.teacher_model is not None else teacher
        if not isinstance(net, nn.Module):
            raise ParamsError("kd_objective.teacher", f"must be an NNModel or a torch.nn.Module, got {type(teacher).__name__}")
        self.teacher = net
        self.alpha = check_float("kd_objective.alpha", alpha, minimum=0.0, maximum=1.0)
        self.temperature = check_float("kd_objective.temperature", temperature, minimum=0.0, exclusive_min=True)
        self.teacher.requires_grad_(False)  # frozen: the teacher is never updated
        self.teacher.eval()

    def check_run(self, model: Any, *, optimizers: Sequence[str], callbacks: Sequence[Any]) -> None:
        if model.task_adapter.kind != "categorical":
            raise ParamsError("kd_objective", f"distillation needs a categorical task, not {model.task_adapter.kind!r}")
        if self.teacher is model.net:
            raise ParamsError("kd_objective.teacher", "the teacher must be a different network than the student")
        student_params = {id(p) for p in model.net.parameters()}
        if any(id(p) in student_params for p in self.teacher.parameters()):
            raise ParamsError("kd_objective.teacher", "the teacher shares parameters with the student")

    def __call__(self, ctx: ObjectiveContext) -> ObjectiveResult:
        inputs, target = ctx.inputs_and_target()
        teacher = self.teacher
        if teacher.training:
            teacher.eval()
        # the teacher runs in its own precision (an NNModel's policy, a module in fp32), not under the
        # student's autocast the objective is called in
        own = self.teacher_model is not None and self.teacher_model.precision != "fp32"
        teacher_cast = self.teacher_model.autocast_context()() if own else torch.autocast(ctx.model.device.type, enabled=False)
        with torch.no_grad(), teacher_cast:
            soft = teacher(*inputs) if isinstance(inputs, (tuple, list)) else teacher(inputs)
        output = ctx.forward(inputs)
        task = ctx.model.task_adapter
        task.check(output, target)
        rows = output.numel() // output.shape[-1]
        supervised, count = supervised_terms(task, output, target)
        return ObjectiveResult(
            (
                LossTerm("distillation", softened_kl(output, soft, self.temperature), rows, weight=self.alpha),
                supervised_term("supervised", task, supervised, count, weight=1.0 - self.alpha),
            ),
            _record(task, output, target, count),
        )


def kd_objective(teacher: Any, alpha: float = 0.5, temperature: float = 4.0, *, nonfinite: str = "fail") -> KDObjective:
    """Distil ``teacher`` (an NNModel or module; frozen, eval mode) into the trained model.

    Terms: ``"distillation"`` = softened KL·T² summed over rows / rows, weight ``alpha``;
    ``"supervised"`` = the task loss / valid targets, weight ``1 - alpha``.
    """
    return KDObjective(teacher, alpha, temperature, nonfinite=nonfinite)


def read_terms(terms: Sequence[LossTerm]) -> tuple[list[torch.Tensor], list[TermReading]]:
    """The numerators (for backward) and every number of the terms, read with one host sync."""
    numbers_: list[torch.Tensor] = []
    for t in terms:
        numbers_.append(t.numerator.detach().reshape(()).float())
        if isinstance(t.denominator, torch.Tensor):
            numbers_.append(t.denominator.detach().reshape(()).float())
    values = torch.stack(numbers_).tolist() if len(numbers_) > 1 else [float(numbers_[0])]
    readings = []
    i = 0
    for t in terms:
        numerator = values[i]
        i += 1
        denominator: float | None = None
        if isinstance(t.denominator, torch.Tensor):
            denominator = values[i]
            i += 1
        elif t.denominator is not None:
            denominator = float(t.denominator)
        readings.append(TermReading(name=t.name, numerator=numerator, denominator=denominator, reduction=t.reduction, weight=float(t.weight)))
    return [t.numerator.reshape(()) for t in terms], readings


def microbatch_loss(readings: Sequence[TermReading]) -> float | None:
    """Σ weight · value of one microbatch's terms (masked terms left out)."""
    total, live = 0.0, False
    for r in readings:
        if r.reduction == SUM:
            total += r.weight * r.numerator
            live = True
        elif r.denominator:
            total += r.weight * r.numerator / r.denominator
            live = True
    return total if live else None


class ObjectiveSummary:
    """The whole-epoch training summary of an objective run (docs/steps-objectives.md, "The epoch
    summary"), kept for every objective run (host-side sums of the readings already read).

    A mean term's epoch value is its Σnumerator / Σdenominator; a sum term's is its Σnumerator /
    the samples the epoch saw (each microbatch's rows, ``sample_count``): the per-sample average.
    ``extra`` holds each term's value by name, ``loss`` their weighted sum."""

    def __init__(self) -> None:
        self.sums: dict[str, list[float]] = {}
        self.microbatches = 0
        self.samples = 0.0  # the rows of every microbatch this process saw

    def add(self, readings: Sequence[TermReading], samples: float = 0.0) -> None:
        self.microbatches += 1
        self.samples += samples
        for r in readings:
            entry = self.sums.setdefault(r.name, [0.0, 0.0, r.weight, r.reduction == SUM])
            entry[0] += r.numerator
            if r.reduction != SUM:
                entry[1] += float(r.denominator or 0.0)
            entry[2] = r.weight

    def result(self, samples: float | None = None) -> dict[str, Any]:
        """``loss`` and ``extra`` of the epoch; ``samples``: the epoch's rows when they differ
        from this process's (a group's union)."""
        seen = self.samples if samples is None else samples
        values = {
            name: num / (seen if is_sum else den)
            for name, (num, den, _w, is_sum) in self.sums.items()
            if (seen if is_sum else den)
        }
        loss = sum(self.sums[name][2] * v for name, v in values.items()) if values else None
        return {"loss": loss, "extra": values}


def full_precision_only(step: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a step function as full-precision only (a bf16/fp16 run refuses it before writing)."""
    step.nnx_full_precision_only = True  # type: ignore[attr-defined]
    return step


__all__ = [
    "KDObjective",
    "LossTerm",
    "Objective",
    "ObjectiveContext",
    "ObjectiveResult",
    "SupervisedObjective",
    "full_precision_only",
    "kd_objective",
    "softened_kl",
    "supervised_objective",
]
