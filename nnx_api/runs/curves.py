"""Per-epoch scalars of a run: the one reading shared by trackers, plots and ``runs compare``.

An epoch's records are its iteration records; the last one holds validation, the whole-epoch
training summary and the monitor decision (``selection``). ``epoch_scalars`` turns them into
named floats, so a TensorBoard curve, a W&B history row and a point on ``run.plot()`` are the
same number. Names:

    train/<field>          the epoch's last training batch (loss, error, accuracy, f1, ...)
    train_epoch/<field>    the whole epoch: the training summary when the run keeps one, else the
                           mean of its batches weighted by each batch's valid-target count
    val/<field>            the validation pass (fields and declared metrics by label)
    train/extra/<name>, val/extra/<name>
    lr                     the learning rate the epoch's last batch trained with
    monitor/<split>.<metric>, monitor/improved (0/1), monitor/best
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from nnx_core.records import EDP_FIELDS, EvaluationDataPoint, IterationDataPoint

AVERAGED_FIELDS = ("loss", "error", "accuracy")


def edp_scalars(prefix: str, edp: EvaluationDataPoint | None) -> dict[str, float]:
    """``{prefix/field: value}`` for every set field and declared metric, extras under ``extra/``.

    A declared metric whose label equals a built-in field wins (as it does for the monitor)."""
    if edp is None:
        return {}
    out = {f"{prefix}/{name}": float(getattr(edp, name)) for name in EDP_FIELDS if getattr(edp, name) is not None}
    out.update({f"{prefix}/{name}": float(value) for name, value in edp.metrics.items() if value is not None})
    out.update({f"{prefix}/extra/{name}": float(value) for name, value in edp.extra.items() if value is not None})
    return out


def epoch_training(records: Sequence[IterationDataPoint]) -> EvaluationDataPoint | None:
    """The whole epoch's training record: the stored summary, else the count-weighted batch mean."""
    if not records:
        return None
    if records[-1].train_summary is not None:
        return records[-1].train_summary
    means: dict[str, float] = {}
    for name in AVERAGED_FIELDS:
        pairs = [(getattr(r.train_edp, name), r.train_edp.count or 1) for r in records]
        pairs = [(v, c) for v, c in pairs if v is not None]
        total = sum(c for _, c in pairs)
        if pairs and total:
            means[name] = sum(v * c for v, c in pairs) / total
    return EvaluationDataPoint(**means) if means else None


def monitor_label(idp: IterationDataPoint) -> str | None:
    """``split.metric`` of the epoch's monitor (``fallback`` for the documented default signal)."""
    sel = idp.selection
    if sel is None:
        return None
    return sel.metric if sel.split == sel.metric else f"{sel.split}.{sel.metric}"


def epoch_scalars(records: Sequence[IterationDataPoint]) -> dict[str, float]:
    """Named scalars of one epoch (see the module docstring); unset values are left out."""
    if not records:
        return {}
    last = records[-1]
    out: dict[str, float] = {"lr": float(last.lr)}
    out.update(edp_scalars("train", last.train_edp))
    out.update(edp_scalars("train_epoch", epoch_training(records)))
    out.update(edp_scalars("val", last.val_edp))
    sel = last.selection
    if sel is not None:
        if sel.value is not None:
            out[f"monitor/{monitor_label(last)}"] = float(sel.value)
        out["monitor/improved"] = 1.0 if sel.improved else 0.0
        if sel.best is not None:
            out["monitor/best"] = float(sel.best)
    return out


def iter_epochs(idps: Iterable[IterationDataPoint]) -> Iterator[tuple[int, list[IterationDataPoint]]]:
    """``(epoch, its records)`` in order, streamed (a history is ordered by epoch)."""
    epoch, records = None, []
    for idp in idps:
        if records and idp.epoch_idx != epoch:
            yield epoch, records  # type: ignore[misc]
            records = []
        epoch = idp.epoch_idx
        records.append(idp)
    if records:
        yield epoch, records  # type: ignore[misc]


def records_by_epoch(idps: Iterable[IterationDataPoint]) -> dict[int, list[IterationDataPoint]]:
    """Iteration records grouped by epoch, in epoch order."""
    return dict(iter_epochs(idps))


def run_series(idps: Iterable[IterationDataPoint]) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of every epoch as ``name -> [(epoch, value), ...]`` (records are streamed)."""
    series: dict[str, list[tuple[int, float]]] = {}
    for epoch, records in iter_epochs(idps):
        for name, value in epoch_scalars(records).items():
            series.setdefault(name, []).append((epoch, value))
    return series


def committed_records(run: Any) -> Iterable[IterationDataPoint]:
    """Every committed record of ``run`` (``NNRun.committed_records``: streamed for a journal run,
    whose loaded ``NNRun`` holds only the retained tail)."""
    return run.committed_records()


def current_epoch_records(idps: Sequence[IterationDataPoint], epoch: int) -> list[IterationDataPoint]:
    """The records of ``epoch`` at the end of a (possibly windowed) history."""
    out: list[IterationDataPoint] = []
    for idp in reversed(idps):
        if idp.epoch_idx != epoch:
            break
        out.append(idp)
    return out[::-1]


def finite(value: Any) -> bool:
    """A real finite number."""
    return isinstance(value, (int, float)) and math.isfinite(value)


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train": {"optim": {"max_lr": 0.1}}}`` → ``{"train.optim.max_lr": 0.1}``."""
    out: dict[str, Any] = {}
    for key in sorted(config):
        value = config[key]
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten_config(value, name + "."))
        else:
            out[name] = value
    return out


__all__ = [
    "committed_records",
    "iter_epochs",
    "current_epoch_records",
    "edp_scalars",
    "epoch_scalars",
    "epoch_training",
    "finite",
    "flatten_config",
    "monitor_label",
    "records_by_epoch",
    "run_series",
]
