"""Task adapters: how a model's output and targets become a loss numerator, a denominator and
cheap on-device statistics. No host synchronisation happens here unless a class target mask's
valid count must be read back from the device (no ``host_count`` was given), once per batch.

* categorical — logits ``(B, C)``, integer targets ``(B,)``; targets equal to ``ignore_index``
  are masked out of the loss and every statistic. A task that names no ``ignore_index`` masks
  ``-100`` (``IGNORED_CLASS``), as ``torch.nn.CrossEntropyLoss`` / ``NLLLoss`` do by default.
  Denominator: valid targets, counted on the host copy of the targets when the caller has one
  (``host_count``), so the mask costs no device read.
* multilabel — logits ``(B, C)``, 0/1 targets of the same shape, float, integer or bool (BCE with
  logits, on the targets cast to the logits' dtype).
  Denominator: elements. "correct" counts rows whose every label is right (subset accuracy).
* regression — outputs and float targets of the same shape (MSE). NaN targets are masked: they
  weigh zero in the loss, its gradient, the count and every metric (one host read per batch for
  the valid count); ±inf targets are refused. Denominator: valid (non-NaN) elements.

A ``model.loss_fn`` the user assigned replaces the built-in loss (``ModuleLossTask``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from nnx_core.errors import TaskValidationError
from nnx_core.records import EvaluationDataPoint

_HALF = (torch.float16, torch.bfloat16)


_CLASS_TARGETS = (torch.long, torch.uint8)

_LOSSES_OF_KIND = {
    "categorical": ("CROSS_ENTROPY", "NEGATIVE_LOG_LIKELIHOOD"),
    "multilabel": ("BINARY_CROSS_ENTROPY",),
    "regression": ("MEAN_SQUARED_ERROR",),
}  # the built-in losses (``Losses`` member names) each task kind is scored with

_NOT_SCORED = {
    "TRANSFORMER": "a language model's token stream (out of scope here)",
    "VIT": "one d_model vector per patch token, not class scores",
}  # built-in nets a task adapter cannot drive

IGNORED_CLASS = -100
"""The class target a categorical task leaves out when its ``TaskSpec`` names no ``ignore_index``:
the default ``ignore_index`` of ``torch.nn.CrossEntropyLoss`` and ``NLLLoss``."""


def _wide(output: torch.Tensor) -> torch.Tensor:
    """Half-precision outputs (autocast) are scored in float32; float32 and float64 stay as they are."""
    return output.float() if output.dtype in _HALF else output


class TaskAdapter:
    """Loss numerator/denominator, decoding and statistics for one task kind."""

    additive = False  # True: the loss is a sum (reduction="sum"): windows are not normalised, records hold the sum

    def __init__(
        self, kind: str, loss: str, ignore_index: int | None = None, threshold: float = 0.5, *, explicit: bool = False,
        n: int | None = None, spec: Any = None,
    ) -> None:
        self.kind = kind
        self.n = n  # the declared output width (TaskSpec n), None: unset
        self.spec = spec  # the declared TaskSpec this adapter serves (None: the task the loss implies)
        self.loss = loss
        self.categorical = kind == "categorical"
        # the declared ignore_index; a categorical task that declares none masks torch's default -100
        self.ignore_index = IGNORED_CLASS if ignore_index is None and self.categorical else ignore_index
        self.threshold = threshold
        self.explicit = explicit  # a TaskSpec the user declared (not the one the loss implies)

    @property
    def record_kind(self) -> str | None:
        """The ``kind`` a record of this task carries: the declared ``TaskSpec``'s kind, or None
        when the task is only implied by the loss (NNx's records without a TaskSpec)."""
        return self.kind if self.explicit else None

    @property
    def loss_name(self) -> str:
        """The loss this task computes, as a run's description names it (``sum_terms`` below):
        the categorical loss NNModelParams names, else the one the task kind implies."""
        if self.categorical:
            return "negative_log_likelihood" if self.loss == "negative_log_likelihood" else "cross_entropy"
        return "binary_cross_entropy" if self.kind == "multilabel" else "mean_squared_error"

    def check_model(self, *, net: Any = None, loss: Any = None, output_dim: int | None = None) -> None:
        """Refuse a model this declared task cannot drive, before anything is built: a built-in
        ``loss`` (a ``Losses`` member; None: not checked) of another task kind, or an
        ``output_dim`` other than the task's ``n`` (None: not known until the first batch), or a
        ``net`` (a ``Nets`` member) whose output is not one score vector per target:
        ``Nets.TRANSFORMER`` (a language model) and ``Nets.VIT`` (an encoder)."""
        member = getattr(net, "name", None)
        if member in _NOT_SCORED:
            raise TaskValidationError(
                f"a TaskSpec scores (..., C) supervised outputs, and Nets.{member} gives {_NOT_SCORED[member]}; "
                "put a head on it in a module of your own (NNModel(module=...)) or train it with a step function"
            )
        allowed = _LOSSES_OF_KIND[self.kind]
        name = getattr(loss, "name", str(loss))
        if loss is not None and name not in allowed:
            raise TaskValidationError(
                f"NNModelParams.loss is Losses.{name}, but a {self.kind} TaskSpec needs "
                f"{' or '.join('Losses.' + a for a in allowed)}; set NNModelParams(loss=Losses.{allowed[0]}) "
                "(assign model.loss_fn afterwards for a loss of your own)"
            )
        if self.n is not None and output_dim is not None and output_dim != self.n:
            raise TaskValidationError(
                f"NNModelParams.task.n declares {self.n} output(s) (a {self.kind} TaskSpec) but NNParams.output_dim "
                f"is {output_dim}; make them equal (or leave n unset)"
            )

    def with_loss(self, fn: Any) -> TaskAdapter:
        """This task with its loss computed by ``fn`` (a ``model.loss_fn`` the user assigned)."""
        return ModuleLossTask(self, fn)

    def check(self, output: torch.Tensor, target: Any) -> None:
        """Refuse a target of the wrong type, dtype or shape with an actionable error."""
        if not isinstance(target, torch.Tensor):
            raise TaskValidationError(
                f"targets must be a torch.Tensor, got {type(target).__name__}; batches are (inputs, targets)"
            )
        if self.categorical:
            if target.dtype not in _CLASS_TARGETS:  # what F.cross_entropy / F.nll_loss take
                raise TaskValidationError(
                    f"a categorical task needs integer class targets (integer class indices, torch.long), got {target.dtype}; "
                    "convert with targets.long()"
                )
            if target.shape != output.shape[:-1]:
                raise TaskValidationError(
                    f"targets have shape {tuple(target.shape)} but logits {tuple(output.shape)} need "
                    f"{tuple(output.shape[:-1])} (one class index per row)"
                )
        else:
            labels = self.kind == "multilabel" and not target.dtype.is_complex  # 0/1 integers or bools are labels too
            if not target.dtype.is_floating_point and not labels:
                raise TaskValidationError(
                    f"a {self.kind} task needs floating-point targets, got {target.dtype}; convert with targets.float()"
                )
            if target.shape != output.shape:
                raise TaskValidationError(
                    f"targets have shape {tuple(target.shape)} but the outputs {tuple(output.shape)}; they must match "
                    "(no broadcasting)"
                )

    def host_count(self, target: Any) -> int | None:
        """The valid class targets of a batch's targets while they are still on the CPU (before they
        move to the device), so that ``sum_terms`` need not read the count back from the device;
        None when there is nothing to count there (not a categorical task, or not a CPU tensor). A
        declared multilabel task's labels are checked here too (``check_values``)."""
        if not isinstance(target, torch.Tensor) or target.device.type != "cpu":
            return None
        if not self.categorical:
            self.check_values(target)
            return None
        if not target.numel() or int(target.min()) > self.ignore_index:  # nothing ignored: one reduction
            return target.numel()
        return int((target != self.ignore_index).sum())

    def check_values(self, target: Any) -> None:
        """Refuse label values a multilabel task cannot score: each label is 0 or 1 (a NaN is left to
        the loss's own check) — for a declared task, and for integer labels of the task BCE implies
        (soft float targets stay open to it). One read of the targets, free while they are on the CPU."""
        if self.kind != "multilabel" or not isinstance(target, torch.Tensor) or target.dtype == torch.bool:
            return
        if not self.explicit and (target.dtype.is_floating_point or isinstance(self, ModuleLossTask)):
            return
        odd = target[(target != 0) & (target != 1) & ~torch.isnan(target)]
        if odd.numel():
            raise TaskValidationError(
                f"multilabel targets must be 0 or 1 (one per label), got {float(odd[0]):g}; threshold soft "
                "labels first, or pass soft float targets without a TaskSpec to train BCE on them"
            )

    def sum_terms(self, output: torch.Tensor, target: torch.Tensor, count: int | None = None) -> tuple[torch.Tensor, int]:
        """The training loop's terms: (sum of per-target losses, number of valid targets); ``count``:
        the valid targets when already known (``host_count``), else a categorical task reads them
        from the device. (``loss_terms`` is the public per-batch protocol, with a loss of the
        caller's.)"""
        if self.categorical:
            total, flat_target = self._class_sum(output, target)
            return total, int((flat_target != self.ignore_index).sum()) if count is None else count
        if self.kind == "multilabel":
            out = _wide(output)
            return F.binary_cross_entropy_with_logits(out, target.to(out.dtype), reduction="sum"), target.numel()
        out = _wide(output)
        wanted = target.to(out.dtype)
        valid, count = regression_mask(wanted)
        if valid is not None:  # a masked element's target is the output itself: zero loss, zero gradient
            wanted = torch.where(valid, wanted, out.detach())
        return F.mse_loss(out, wanted, reduction="sum"), count

    def _class_sum(self, output: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A categorical loss's sum over the targets other than ``ignore_index``, and the flat targets."""
        logits = _wide(output)
        if self.loss == "negative_log_likelihood":
            logits, fn = F.log_softmax(logits, dim=-1), F.nll_loss
        else:
            fn = F.cross_entropy
        # (B, C) logits with (B,) targets go in as they are: a reshape would add autograd nodes
        flat_logits = logits if logits.dim() == 2 else logits.reshape(-1, logits.shape[-1])
        flat_target = target if target.dim() == 1 else target.reshape(-1)
        return fn(flat_logits, flat_target, reduction="sum", ignore_index=self.ignore_index), flat_target

    def masked_terms(self, output: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A categorical loss's (sum over the targets other than ``ignore_index``, their count as a
        0-d tensor on the device): read with the caller's next host sync, not one of its own."""
        total, flat_target = self._class_sum(output, target)
        return total, (flat_target != self.ignore_index).sum()

    def prepare(self, output: torch.Tensor, target: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Check one batch (``check``; class indices in ``[0, C)``, 0/1 labels, finite regression
        targets) and return ``(output, target, valid)`` ready for ``loss_terms``, ``valid`` being
        the boolean mask of the targets that count. Categorical: ``(M, C)`` rows of logits and
        ``(M,)`` class targets (every leading axis flattened; the class axis is the last),
        ``valid`` where the target is not ``ignore_index``. Multilabel: the output as it is and
        the targets as floats (integer or bool labels cast to the output's dtype), ``valid`` where
        the target is not NaN. Regression: both as they are (a float32 target stays float32 next to
        a half-precision output), ``valid`` where the target is not NaN. Refuses a bad batch with
        ``TaskValidationError``, before any loss is computed."""
        if isinstance(output, torch.Tensor) and not output.dtype.is_floating_point:
            raise TaskValidationError(f"a {self.kind} task scores floating-point outputs, got {output.dtype}")
        self.check(output, target)
        if self.categorical:
            rows, flat_target = output.reshape(-1, output.shape[-1]), target.reshape(-1)
            valid = flat_target != self.ignore_index
            if valid.any():
                low, high = (int(v) for v in torch.stack(torch.aminmax(flat_target[valid])).tolist())
                if low < 0 or high >= rows.shape[-1]:
                    raise TaskValidationError(
                        f"class targets must be in [0, {rows.shape[-1]}) (or ignore_index={self.ignore_index}), got "
                        f"values from {low} to {high}"
                    )
            return rows, flat_target, valid
        if self.kind == "multilabel":
            self.check_values(target)
            if not target.dtype.is_floating_point:
                target = target.to(output.dtype)  # 0 and 1 are exact in every float dtype
            return output, target, ~torch.isnan(target)
        regression_mask(target)  # refuses ±inf
        return output, target, ~torch.isnan(target)

    def loss_terms(
        self, loss_fn: Any, output: torch.Tensor, target: torch.Tensor, valid: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, float | None]:
        """One prepared batch's ``(display loss, additive numerator, normalisation weight)`` under
        ``loss_fn`` (a loss module or function), over the ``valid`` targets only: the display loss
        is what ``loss_fn`` reports, the numerator what a window sums, the weight its share of the
        window's denominator (None for a ``reduction="sum"`` loss, whose numerator is the loss).
        A batch with nothing masked goes to ``loss_fn`` as it is; masked categorical rows are left
        out before the loss; masked multilabel / regression elements need a stock elementwise loss
        (MSE, L1, SmoothL1, Huber, BCE, BCE with logits, soft margin, Poisson NLL, KL divergence):
        it is evaluated at full shape, so per-label weights such as ``pos_weight`` still apply, and
        the masked elements are dropped from its sum; any other loss is refused
        (``TaskValidationError``). A batch without a valid target gives a NaN display loss, a
        zero numerator that still back-propagates, and weight 0."""
        n_valid = int(valid.sum())
        if not n_valid:
            zero = output.sum() * 0.0
            return zero + math.nan, zero, 0.0
        if n_valid < valid.numel():
            if not self.categorical:
                return _masked_loss_terms(loss_fn, output, target, valid, n_valid, self.kind)
            output, target = output[valid], target[valid]
        return _module_loss_terms(loss_fn, output, target)

    def correct(self, output: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor | None, int | None]:
        """(on-device count of correct rows, rows scored); (None, None) for regression."""
        if self.categorical:
            hit = (output.argmax(-1) == target) & (target != self.ignore_index)
            return hit.sum(), None  # rows scored = the valid count
        if self.kind == "multilabel":
            rows = output.shape[0] if output.dim() > 1 else 1
            hit = (torch.sigmoid(_wide(output)) >= self.threshold) == (target >= 0.5)
            return hit.reshape(rows, -1).all(-1).sum(), rows
        return None, None

    def decode(self, output: torch.Tensor) -> torch.Tensor:
        """Predictions: argmax classes, thresholded labels, or the values themselves."""
        if self.categorical:
            return output.argmax(-1)
        if self.kind == "multilabel":
            return (torch.sigmoid(_wide(output)) >= self.threshold).long()
        return output

    def decode_array(self, logits: Any) -> np.ndarray:
        """``decode`` for a NumPy array of outputs (classes along the last axis): argmax classes,
        labels whose logit reaches the threshold's logit (``p >= threshold`` without computing
        ``exp``, so extreme logits never overflow), or the values themselves."""
        values = np.asarray(logits)
        if self.categorical:
            return values.argmax(axis=-1)
        if self.kind == "multilabel":
            edge = math.inf if self.threshold >= 1.0 else math.log(self.threshold / (1.0 - self.threshold))
            return (values >= edge).astype(np.int64)
        return values

    def record(
        self, output: torch.Tensor, target: Any, *, loss: Any = None,
        extra_metrics: Mapping[str, Callable[[Any, Any], Any]] | None = None,
    ) -> EvaluationDataPoint:
        """One batch's record, as a custom step returns it: ``loss`` (a float or 0-d tensor) as
        given, ``count`` the valid targets, ``kind``, and the task's scores over the valid
        targets only — categorical: accuracy, ``error``, macro f1 / precision / recall;
        multilabel: subset accuracy as ``accuracy`` (and ``metrics.subset_accuracy``),
        ``metrics.element_accuracy``, macro f1 / precision / recall over the labels;
        regression: ``metrics.mse`` / ``metrics.mae`` (no classification fields, no error). A
        batch without a valid target has no scores. ``extra_metrics[name](y_true, y_pred)`` is
        called once per name on NumPy vectors of the valid targets only and their predictions
        (class indices; 0/1 labels as int64; regression values as float64), its value kept in
        ``extra[name]``."""
        scored = self._scored(output.detach(), target, loss)
        if not extra_metrics or not scored.count:
            return scored
        y_true, y_pred = self._valid_pairs(output.detach(), target)
        for name, fn in extra_metrics.items():
            scored = scored.with_extra(name, float(fn(y_true, y_pred)))
        return scored

    def _valid_pairs(self, output: torch.Tensor, target: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """(targets, predictions) at the valid targets only, flattened, as NumPy vectors."""
        if self.categorical:
            flat_target = target.reshape(-1)
            keep = flat_target != self.ignore_index
            return flat_target[keep].cpu().numpy(), output.reshape(-1, output.shape[-1]).argmax(-1)[keep].cpu().numpy()
        valid = ~torch.isnan(target)
        if self.kind == "multilabel":
            truth = (target[valid] >= 0.5).long()
            return truth.cpu().numpy(), self.decode(output)[valid].cpu().numpy()
        return target[valid].double().cpu().numpy(), output[valid].double().cpu().numpy()

    def _scored(self, output: torch.Tensor, target: Any, loss: Any) -> EvaluationDataPoint:
        """``record`` without the user's extra metrics."""
        self.check(output, target)
        value = None if loss is None else float(loss.detach() if isinstance(loss, torch.Tensor) else loss)
        fields: dict[str, Any] = {"loss": value, "kind": self.kind}
        if self.categorical:
            flat_target = target.reshape(-1)
            pred = output.reshape(-1, output.shape[-1]).argmax(-1)
            keep = flat_target != self.ignore_index
            fields["count"] = int(keep.sum())
            if fields["count"]:
                scored = EvaluationDataPoint.of(flat_target[keep].cpu(), pred[keep].cpu())
                fields.update(accuracy=scored.accuracy, f1=scored.f1, precision=scored.precision, recall=scored.recall)
                fields["error"] = 1.0 - scored.accuracy  # type: ignore[operator]
            return EvaluationDataPoint(**fields)
        valid = ~torch.isnan(target)
        fields["count"] = int(valid.sum())
        if not fields["count"]:
            return EvaluationDataPoint(**fields)
        if self.kind == "multilabel":
            truth = (target >= 0.5) & valid
            pred = (torch.sigmoid(_wide(output)) >= self.threshold) & valid
            hits = (truth == pred) & valid
            rows_valid = valid.reshape(valid.shape[0], -1).any(-1)
            rows_right = ((hits | ~valid).reshape(valid.shape[0], -1).all(-1) & rows_valid).sum()
            subset = float(rows_right) / float(rows_valid.sum())
            axes = tuple(range(truth.dim() - 1))
            tp = (truth & pred).sum(axes).double()
            fp = (~truth & pred & valid).sum(axes).double()
            fn = (truth & ~pred).sum(axes).double()

            def ratio(num: torch.Tensor, den: torch.Tensor) -> float:
                return float(torch.where(den > 0, num / den.clamp(min=1), torch.zeros_like(num)).mean())

            fields.update(
                accuracy=subset, error=1.0 - subset, f1=ratio(2 * tp, 2 * tp + fp + fn),
                precision=ratio(tp, tp + fp), recall=ratio(tp, tp + fn),
                metrics={"subset_accuracy": subset, "element_accuracy": float(hits.sum()) / fields["count"]},
            )
            return EvaluationDataPoint(**fields)
        squared, absolute, _ = regression_errors(output, target).double().tolist()
        count = fields["count"]
        fields["metrics"] = {"mse": squared / count, "mae": absolute / count}
        return EvaluationDataPoint(**fields)

    def probabilities(self, output: torch.Tensor) -> torch.Tensor | None:
        """Softmax / sigmoid probabilities; None for regression."""
        if self.categorical:
            return torch.softmax(_wide(output), dim=-1)
        if self.kind == "multilabel":
            return torch.sigmoid(_wide(output))
        return None


def regression_mask(target: torch.Tensor) -> tuple[torch.Tensor | None, int]:
    """(the mask of a regression target's valid elements, None when every one is; their count).
    NaN marks a masked target; ±inf is refused (``TaskValidationError``). One host read."""
    nan = torch.isnan(target)
    missing, infinite = (int(v) for v in torch.stack([nan.sum(), torch.isinf(target).sum()]).tolist())
    if infinite:
        raise TaskValidationError(
            f"regression targets must be finite: {infinite} are ±inf (NaN marks a masked target, which is left out)"
        )
    return (~nan if missing else None), target.numel() - missing


def regression_errors(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A regression batch's on-device ``[Σ squared error, Σ absolute error, valid count]``
    (float32) over its valid (non-NaN) targets: no host read (the loss's ``regression_mask``
    already refused ±inf)."""
    diff = output.detach().float() - target.detach().float()
    valid = ~torch.isnan(target.detach())
    diff = torch.where(valid, diff, torch.zeros_like(diff))
    return torch.stack([diff.square().sum(), diff.abs().sum(), valid.sum().float()])


_ELEMENTWISE = (
    "BCELoss", "BCEWithLogitsLoss", "MSELoss", "L1Loss", "HuberLoss", "SmoothL1Loss", "KLDivLoss", "GaussianNLLLoss",
    "PoissonNLLLoss", "SoftMarginLoss",
)


class ModuleLossTask(TaskAdapter):
    """A task whose loss is a module or function the user assigned to ``model.loss_fn``.

    Its value per batch is what the records show. ``reduction="sum"`` makes the loss additive
    (windows are not normalised; a record's loss is the batch's sum, a pass's loss the sum over
    it); otherwise the numerator is the value times the loss's own mean denominator, so windows
    of unequal batches normalise exactly: the targets counted by ``CrossEntropyLoss`` /
    ``NLLLoss`` (those not equal to its ``ignore_index``; class weights summed when it has
    them), the elements of an elementwise loss (BCE, MSE, L1, Huber, ...), else the rows.

    A ``CrossEntropyLoss`` / ``NLLLoss`` over class targets leaves the targets equal to its
    ``ignore_index`` out of every statistic too, as it leaves them out of the loss. A stock
    ``NLLLoss`` (its own ``forward``) gets ``log_softmax`` of the net's raw logits, as NNx gives
    it: an NLL of raw logits is not a likelihood; a subclass with its own ``forward`` gets the
    output as it is.
    """

    def __init__(self, base: TaskAdapter, fn: Any) -> None:
        class_loss = base.categorical and isinstance(fn, (torch.nn.CrossEntropyLoss, torch.nn.NLLLoss))
        ignore_index = fn.ignore_index if class_loss else base.ignore_index
        super().__init__(base.kind, base.loss, ignore_index, base.threshold, explicit=base.explicit, n=base.n, spec=base.spec)
        self.fn = fn
        self.reduction = getattr(fn, "reduction", "mean")
        self.additive = self.reduction == "sum"
        self.log_probabilities = isinstance(fn, torch.nn.NLLLoss) and type(fn).forward is torch.nn.NLLLoss.forward

    def host_count(self, target: Any) -> None:
        """None: the loss counts its own valid targets (``_denominator``); a declared multilabel
        task's labels are still checked (``check_values``)."""
        if isinstance(target, torch.Tensor) and target.device.type == "cpu":
            self.check_values(target)
        return None

    @property
    def loss_name(self) -> str:
        """``loss_fn <its class or function>`` (reduction sum: said)."""
        fn = self.fn if hasattr(self.fn, "__qualname__") else type(self.fn)
        return f"loss_fn {fn.__module__}.{fn.__qualname__}" + (" (reduction='sum')" if self.additive else "")

    def sum_terms(self, output: torch.Tensor, target: torch.Tensor, count: int | None = None) -> tuple[torch.Tensor, int]:
        """(the numerator: the sum, or the value × its mean denominator; the valid targets, as the
        loss itself counts them: a host count for the built-in loss is not used here)."""
        value = self.fn(F.log_softmax(output, dim=1) if self.log_probabilities else output, target)
        if self.reduction == "none":
            return value.sum(), value.numel()
        count = self._denominator(output, target)
        if not self.additive and not count:  # every target ignored: the mean is NaN, the numerator 0
            return output.sum() * 0.0, count  # type: ignore[return-value]
        return (value if self.additive else value * count), count  # type: ignore[return-value]

    def _denominator(self, output: torch.Tensor, target: torch.Tensor) -> int | float:
        """The loss's own mean denominator (the class docstring): one host read for a class loss."""
        return mean_denominator(self.fn, output, target)


def mean_denominator(fn: Any, output: torch.Tensor, target: torch.Tensor) -> int | float:
    """How many targets a mean-reduced loss ``fn`` divides by (``ModuleLossTask``'s docstring):
    the targets a ``CrossEntropyLoss`` / ``NLLLoss`` counts over class targets (its class weights
    summed when it has them; one host read), the elements of an elementwise loss, else the rows."""
    name = type(fn).__name__
    if name in ("CrossEntropyLoss", "NLLLoss") and not target.dtype.is_floating_point:
        flat = target.reshape(-1)
        valid = flat != getattr(fn, "ignore_index", -100)
        weight = getattr(fn, "weight", None)
        return float(weight[flat[valid]].sum()) if weight is not None else int(valid.sum())
    if name in _ELEMENTWISE:
        return math.prod(torch.broadcast_shapes(output.shape, target.shape))
    return output.shape[0] if output.dim() else 1


def _module_loss_terms(fn: Any, output: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float | None]:
    """``TaskAdapter.loss_terms`` of a batch the loss sees whole: a stock ``NLLLoss`` gets the
    log-probabilities of the logits (as in training); an unreduced loss is averaged for display."""
    native_nll = isinstance(fn, torch.nn.NLLLoss) and type(fn).forward is torch.nn.NLLLoss.forward
    value = fn(F.log_softmax(output, dim=1) if native_nll else output, target)
    reduction = getattr(fn, "reduction", "mean")
    if reduction == "sum":
        return value, value, None
    if reduction == "none" or value.dim():
        return value.mean(), value.sum(), float(value.numel())
    weight = float(mean_denominator(fn, output, target))
    if not weight:  # every target ignored by the loss itself: NaN to show, nothing to add
        return value, output.sum() * 0.0, 0.0
    return value, value * weight, weight


_MASKABLE = (
    torch.nn.MSELoss, torch.nn.L1Loss, torch.nn.SmoothL1Loss, torch.nn.HuberLoss, torch.nn.BCEWithLogitsLoss,
    torch.nn.BCELoss, torch.nn.SoftMarginLoss, torch.nn.PoissonNLLLoss, torch.nn.KLDivLoss,
)  # stock losses whose reduction="none" form is one loss per element


def _masked_loss_terms(
    fn: Any, output: torch.Tensor, target: torch.Tensor, valid: torch.Tensor, n_valid: int, kind: str
) -> tuple[torch.Tensor, torch.Tensor, float | None]:
    """``TaskAdapter.loss_terms`` of a batch with masked (NaN) elements: the loss's unreduced form
    (a copy of the module with ``reduction="none"``, sharing its weights) over the targets with
    the masked ones zero-filled, then only the valid elements summed."""
    stock = any(isinstance(fn, base) and type(fn).forward is base.forward for base in _MASKABLE)
    reduction = getattr(fn, "reduction", None)
    if not stock or reduction not in ("mean", "sum"):
        name = getattr(fn, "__qualname__", type(fn).__name__)
        raise TaskValidationError(
            f"this {kind} batch has masked (NaN) targets, and {name} cannot be masked: only a stock elementwise loss "
            "(MSELoss, L1Loss, SmoothL1Loss, HuberLoss, BCELoss, BCEWithLogitsLoss, SoftMarginLoss, PoissonNLLLoss, "
            "KLDivLoss; reduction 'mean' or 'sum') scores each target apart; use one, or drop the NaN targets"
        )
    per_element = copy.copy(fn)
    per_element.reduction = "none"
    filled = torch.where(valid, target, torch.zeros_like(target))
    losses = per_element(output, filled)
    numerator = torch.where(valid, losses, torch.zeros_like(losses)).sum()
    if reduction == "sum":
        return numerator, numerator, None
    return numerator / n_valid, numerator, float(n_valid)
