"""What fitting and probing an ``ExperimentPlan`` give back: ``FitResult`` (the trained model,
its committed run, the metrics of the epoch BEST holds, the attempt id), the per-split
``SplitMetrics`` of that epoch (``selected_metrics``), and ``ProbeResult`` (one no-grad forward
of a throw-away model). The plans themselves live in ``nnx_api.experiments.plans``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from nnx_core.records import EvaluationDataPoint, IterationDataPoint
from nnx_api.model import NNModel
from nnx_api.runs.curves import committed_records, epoch_scalars, iter_epochs
from nnx_api.runs.run import NNRun


@attrs.frozen(kw_only=True)
class FitResult:
    """What ``fit()`` produced: the trained model, its committed run, the metrics of the epoch
    BEST holds (the last epoch when nothing was selected) and the attempt id.

    ``metrics`` holds that epoch's scalars by flat name (``"epoch"``, ``"val/loss"``,
    ``"monitor/val.nll"``, …) and, as NNx 0.4 gives them, ``metrics["train"]`` and
    ``metrics["val"]``: a :class:`SplitMetrics` each, of the final epoch (the trained model's)."""

    model: NNModel
    run: NNRun
    metrics: Mapping[str, Any]
    attempt_id: str

    @property
    def best_epoch(self) -> int | None:
        """The epoch BEST holds, if any."""
        best = self.run.best()
        return None if best is None else best.epoch_idx

    @property
    def value(self) -> float | None:
        """The monitored value of the epoch BEST holds (what a search optimizes)."""
        best = self.run.best()
        return None if best is None or best.selection is None else best.selection.value


@attrs.frozen(kw_only=True)
class ProbeResult:
    """One no-grad forward of a throw-away model: the output's shape and dtype, the target's shape,
    the loss and valid target count, and the model's parameter counts."""

    output_shape: tuple[int, ...]
    loss: float | None
    count: int
    output_dtype: str = "float32"
    target_shape: tuple[int, ...] | None = None
    n_parameters: int = 0
    n_trainable: int = 0


@attrs.frozen(kw_only=True)
class SplitMetrics:
    """One split's metrics of the epoch a fit selected (``FitResult.metrics["train"]`` /
    ``["val"]``, as NNx 0.4 gives them): ``available`` (False, with the ``reason``, when the epoch
    has no record of that split), ``epoch``, ``source`` (``"epoch"``: a whole-epoch record — the
    validation, or the training summary a run with declared metrics keeps; ``"last_batch"``: the
    epoch's last training batch) and ``values`` (loss, error, accuracy, f1, precision, recall and
    each named metric that the record holds)."""

    split: str
    available: bool
    epoch: int | None = None
    source: str | None = None
    values: Mapping[str, float] = attrs.field(factory=dict, hash=False)
    reason: str | None = None


NO_VAL = "the plan has no validation data"
NO_EPOCHS = "the run recorded no epochs"


def _split(name: str, epoch: int, record: EvaluationDataPoint | None, source: str, missing: str | None = None) -> SplitMetrics:
    if record is None:
        reason = missing or f"epoch {epoch} has no {name} record"
        return SplitMetrics(split=name, available=False, epoch=epoch, reason=reason)
    fields = ("loss", "error", "accuracy", "f1", "precision", "recall")
    values = {f: getattr(record, f) for f in fields if getattr(record, f) is not None}
    extra = {f"extra/{k}": v for k, v in record.extra.items()}  # never shadows a recorded field
    return SplitMetrics(split=name, available=True, epoch=epoch, source=source,
                        values={**values, **record.metrics, **extra})


def selected_metrics(run: NNRun, *, has_val: bool = True) -> dict[str, Any]:
    """``epoch_scalars`` of the epoch BEST holds (else the last epoch), plus ``epoch``; and, as
    NNx gives them, the final epoch's ``train`` and ``val`` :class:`SplitMetrics` (the epoch of
    the trained model; ``has_val=False``: the plan gave no validation data, which the val split's
    ``reason`` says)."""
    best = run.best()
    chosen: tuple[int, list[IterationDataPoint]] | None = None
    final: tuple[int, list[IterationDataPoint]] | None = None
    for final in iter_epochs(committed_records(run)):
        if best is None or final[0] == best.epoch_idx:
            chosen = final
    if chosen is None or final is None:
        return {"train": SplitMetrics(split="train", available=False, reason=NO_EPOCHS),
                "val": SplitMetrics(split="val", available=False, reason=NO_EPOCHS if has_val else NO_VAL)}
    epoch, last = final[0], final[1][-1]
    train = _split("train", epoch, last.train_summary or last.train_edp, "epoch" if last.train_summary else "last_batch")
    val = _split("val", epoch, last.val_edp, "epoch", None if has_val else NO_VAL)
    return {"epoch": float(chosen[0]), **epoch_scalars(chosen[1]), "train": train, "val": val}


__all__ = ["FitResult", "ProbeResult", "SplitMetrics", "selected_metrics"]
