"""Task adapters: how a model's output and targets become a loss numerator, a denominator and
cheap on-device statistics. No host synchronisation happens here unless a target mask forces the
valid count to be read (``ignore_index``), once per batch.

* categorical — logits ``(B, C)``, integer targets ``(B,)``; targets equal to ``ignore_index``
  are masked out of the loss and every statistic. Denominator: valid targets.
* multilabel — logits ``(B, C)``, float targets of the same shape (BCE with logits).
  Denominator: elements. "correct" counts rows whose every label is right (subset accuracy).
* regression — outputs and float targets of the same shape (MSE). NaN targets are masked: they
  weigh zero in the loss, its gradient, the count and every metric (one host read per batch for
  the valid count); ±inf targets are refused. Denominator: valid (non-NaN) elements.

A ``model.loss_fn`` the user assigned replaces the built-in loss (``ModuleLossTask``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from nnx_core.errors import TaskValidationError
from nnx_core.records import EvaluationDataPoint

_HALF = (torch.float16, torch.bfloat16)


_CLASS_TARGETS = (torch.long, torch.uint8)
_NO_TARGET = -(2**63)  # an ignore_index no class target holds: F.cross_entropy then refuses -100 (IndexError)


def _wide(output: torch.Tensor) -> torch.Tensor:
    """Half-precision outputs (autocast) are scored in float32; float32 and float64 stay as they are."""
    return output.float() if output.dtype in _HALF else output


class TaskAdapter:
    """Loss numerator/denominator, decoding and statistics for one task kind."""

    additive = False  # True: the loss is a sum (reduction="sum"): windows are not normalised, records hold the sum

    def __init__(
        self, kind: str, loss: str, ignore_index: int | None = None, threshold: float = 0.5, *, explicit: bool = False
    ) -> None:
        self.kind = kind
        self.loss = loss
        self.ignore_index = ignore_index
        self.threshold = threshold
        self.categorical = kind == "categorical"
        self.explicit = explicit  # a TaskSpec the user declared (not the one the loss implies)

    @property
    def record_kind(self) -> str | None:
        """The ``kind`` a record of this task carries: the declared ``TaskSpec``'s kind, or None
        when the task is only implied by the loss (NNx's records without a TaskSpec)."""
        return self.kind if self.explicit else None

    @property
    def loss_name(self) -> str:
        """The loss this task computes, as a run's description names it (``loss_terms`` below):
        the categorical loss NNModelParams names, else the one the task kind implies."""
        if self.categorical:
            return "negative_log_likelihood" if self.loss == "negative_log_likelihood" else "cross_entropy"
        return "binary_cross_entropy" if self.kind == "multilabel" else "mean_squared_error"

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
            if not target.dtype.is_floating_point:
                raise TaskValidationError(
                    f"a {self.kind} task needs floating-point targets, got {target.dtype}; convert with targets.float()"
                )
            if target.shape != output.shape:
                raise TaskValidationError(
                    f"targets have shape {tuple(target.shape)} but the outputs {tuple(output.shape)}; they must match "
                    "(no broadcasting)"
                )

    def loss_terms(self, output: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(sum of per-target losses, number of valid targets)."""
        if self.categorical:
            logits = _wide(output)
            if self.loss == "negative_log_likelihood":
                logits = F.log_softmax(logits, dim=-1)
                fn = F.nll_loss
            else:
                fn = F.cross_entropy
            # (B, C) logits with (B,) targets go in as they are: a reshape would add autograd nodes
            flat_logits = logits if logits.dim() == 2 else logits.reshape(-1, logits.shape[-1])
            flat_target = target if target.dim() == 1 else target.reshape(-1)
            if self.ignore_index is None:  # every target counts: torch's own -100 default would drop rows unseen
                return fn(flat_logits, flat_target, reduction="sum", ignore_index=_NO_TARGET), flat_target.numel()
            total = fn(flat_logits, flat_target, reduction="sum", ignore_index=self.ignore_index)
            return total, int((flat_target != self.ignore_index).sum())
        if self.kind == "multilabel":
            out = _wide(output)
            return F.binary_cross_entropy_with_logits(out, target.to(out.dtype), reduction="sum"), target.numel()
        out = _wide(output)
        wanted = target.to(out.dtype)
        valid, count = regression_mask(wanted)
        if valid is not None:  # a masked element's target is the output itself: zero loss, zero gradient
            wanted = torch.where(valid, wanted, out.detach())
        return F.mse_loss(out, wanted, reduction="sum"), count

    def masked_terms(self, output: torch.Tensor, target: torch.Tensor, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A categorical loss's (sum over the targets other than ``ignore_index``, their count as a
        0-d tensor on the device): read with the caller's next host sync, not one of its own."""
        logits = _wide(output)
        if self.loss == "negative_log_likelihood":
            logits, fn = F.log_softmax(logits, dim=-1), F.nll_loss
        else:
            fn = F.cross_entropy
        flat_target = target.reshape(-1)
        total = fn(logits.reshape(-1, logits.shape[-1]), flat_target, reduction="sum", ignore_index=ignore_index)
        return total, (flat_target != ignore_index).sum()

    def correct(self, output: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor | None, int | None]:
        """(on-device count of correct rows, rows scored); (None, None) for regression."""
        if self.categorical:
            hit = output.argmax(-1) == target
            if self.ignore_index is not None:
                hit &= target != self.ignore_index
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

    def record(self, output: torch.Tensor, target: Any, *, loss: Any = None) -> EvaluationDataPoint:
        """One batch's record, as a custom step returns it: ``loss`` (a float or 0-d tensor) as
        given, ``count`` the valid targets, ``kind``, and the task's scores over the valid
        targets only — categorical: accuracy, ``error``, macro f1 / precision / recall;
        multilabel: subset accuracy as ``accuracy`` (and ``metrics.subset_accuracy``),
        ``metrics.element_accuracy``, macro f1 / precision / recall over the labels;
        regression: ``metrics.mse`` / ``metrics.mae`` (no classification fields, no error). A
        batch without a valid target has no scores."""
        output = output.detach()
        self.check(output, target)
        value = None if loss is None else float(loss.detach() if isinstance(loss, torch.Tensor) else loss)
        fields: dict[str, Any] = {"loss": value, "kind": self.kind}
        if self.categorical:
            flat_target = target.reshape(-1)
            pred = output.reshape(-1, output.shape[-1]).argmax(-1)
            keep = flat_target != self.ignore_index if self.ignore_index is not None else torch.ones_like(flat_target, dtype=torch.bool)
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
        super().__init__(base.kind, base.loss, ignore_index, base.threshold, explicit=base.explicit)
        self.fn = fn
        self.reduction = getattr(fn, "reduction", "mean")
        self.additive = self.reduction == "sum"
        self.log_probabilities = isinstance(fn, torch.nn.NLLLoss) and type(fn).forward is torch.nn.NLLLoss.forward

    @property
    def loss_name(self) -> str:
        """``loss_fn <its class or function>`` (reduction sum: said)."""
        fn = self.fn if hasattr(self.fn, "__qualname__") else type(self.fn)
        return f"loss_fn {fn.__module__}.{fn.__qualname__}" + (" (reduction='sum')" if self.additive else "")

    def loss_terms(self, output: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(the numerator: the sum, or the value × its mean denominator; the valid targets)."""
        value = self.fn(F.log_softmax(output, dim=1) if self.log_probabilities else output, target)
        if self.reduction == "none":
            return value.sum(), value.numel()
        count = self._denominator(output, target)
        if not self.additive and not count:  # every target ignored: the mean is NaN, the numerator 0
            return output.sum() * 0.0, count  # type: ignore[return-value]
        return (value if self.additive else value * count), count  # type: ignore[return-value]

    def _denominator(self, output: torch.Tensor, target: torch.Tensor) -> int | float:
        """The loss's own mean denominator (the class docstring): one host read for a class loss."""
        name = type(self.fn).__name__
        if name in ("CrossEntropyLoss", "NLLLoss") and not target.dtype.is_floating_point:
            flat = target.reshape(-1)
            valid = flat != getattr(self.fn, "ignore_index", -100)
            weight = getattr(self.fn, "weight", None)
            return float(weight[flat[valid]].sum()) if weight is not None else int(valid.sum())
        if name in _ELEMENTWISE:
            return math.prod(torch.broadcast_shapes(output.shape, target.shape))
        return output.shape[0] if output.dim() else 1
