"""User ``extra_metrics``: ``{name: fn(y_true, y_pred) -> float}`` over decoded predictions.

Each function is called as NNx calls it: with NumPy arrays, the valid targets first (targets equal
to the task's ``ignore_index`` removed, class targets flattened) and the decoded predictions
second (argmax classes, thresholded 0/1 labels, or the outputs themselves); its value is stored as
a ``float`` in the record's ``extra``. Validation and ``evaluate`` call it once on the whole pass
(the concatenated arrays, never a mean of batch values); the default training step once per batch.

``ExtraMetrics`` keeps each batch's decoded predictions and targets on the device and copies them
to the host once, when the values are asked for: collecting adds no host synchronisation per
batch. ``Rows`` are one batch (or one pass) on the host; a data-parallel run gathers every rank's
rows and scores the union (``merge``), so every rank records the same values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import torch

from nnx_core.errors import ExtraMetricError

ExtraFn = Callable[[Any, Any], float]


@attrs.frozen
class Rows:
    """Targets, decoded predictions and the valid-target mask (None: every target is valid) of
    some samples, on the host, samples along the first axis (class targets: one per position)."""

    target: np.ndarray
    prediction: np.ndarray
    mask: np.ndarray | None = None

    def valid(self) -> tuple[np.ndarray, np.ndarray]:
        """``(y_true, y_pred)`` as the functions receive them: masked targets removed."""
        if self.mask is not None:
            return self.target[self.mask], self.prediction[self.mask]
        return self.target, self.prediction


def concat(rows: Sequence[Rows]) -> Rows:
    """The samples of ``rows`` one after another."""
    if len(rows) == 1:
        return rows[0]
    masks = [r.mask for r in rows]
    return Rows(
        np.concatenate([r.target for r in rows]),
        np.concatenate([r.prediction for r in rows]),
        None if all(m is None for m in masks) else np.concatenate(
            [m if m is not None else np.ones(r.target.shape, dtype=bool) for r, m in zip(rows, masks, strict=True)]
        ),
    )


def placed(parts: Sequence[tuple[Sequence[int], Rows]]) -> Rows:
    """One pass from several shards that know their dataset rows: each sample at its row index
    (a data-parallel validation scores rows ``rank::world``; this puts them back in dataset order)."""
    whole = concat([rows for _, rows in parts])
    order = np.argsort(np.concatenate([np.asarray(index, dtype=np.int64) for index, _ in parts]), kind="stable")
    return Rows(whole.target[order], whole.prediction[order], None if whole.mask is None else whole.mask[order])


def values(fns: Mapping[str, ExtraFn], rows: Rows) -> dict[str, float]:
    """Each function on the valid targets and predictions of ``rows``; ``{}`` when none is valid
    (there is nothing to score). A failing function is an ``ExtraMetricError`` naming it, its own
    error the cause."""
    y_true, y_pred = rows.valid()
    if y_true.size == 0:
        return {}
    out: dict[str, float] = {}
    for name, fn in fns.items():
        try:
            out[name] = float(fn(y_true, y_pred))
        except Exception as exc:
            said = (str(exc).strip().splitlines() or [""])[0][:300]
            raise ExtraMetricError(
                f"extra_metrics[{name!r}] raised {type(exc).__name__}: {said} "
                f"(called as fn(y_true, y_pred) with NumPy arrays: y_true {y_true.dtype} of shape {list(y_true.shape)}, "
                f"y_pred {y_pred.dtype} of shape {list(y_pred.shape)}, decoded predictions as NNModel.predict gives "
                "them); fix the function or leave it out of extra_metrics"
            ) from exc
    return out


class ExtraMetrics:
    """Collects batches for ``extra_metrics`` on the device (module docstring)."""

    def __init__(self, task: Any, fns: Mapping[str, ExtraFn]) -> None:
        self.task = task
        self.fns = dict(fns)
        self._batches: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []

    def add(self, output: torch.Tensor, target: torch.Tensor) -> None:
        """Keep one batch's decoded predictions, targets and valid mask (no host sync)."""
        prediction = self.task.decode(output.detach())
        target = target.detach()
        mask = None
        if self.task.categorical:  # one class target per position: flattened, as the functions see them
            prediction, target = prediction.reshape(-1), target.reshape(-1)
            if self.task.ignore_index is not None:
                mask = target != self.task.ignore_index
        self._batches.append((target, prediction, mask))

    def __len__(self) -> int:
        return len(self._batches)

    def batches(self) -> list[Rows]:
        """Every batch on the host (one copy per tensor kind for the whole pass)."""
        if not self._batches:
            return []
        targets, predictions, masks = zip(*self._batches, strict=True)
        cuts = np.cumsum([len(t) for t in targets])[:-1]

        def host(parts: Sequence[torch.Tensor]) -> list[np.ndarray]:
            return np.split(torch.cat(parts).cpu().numpy(), cuts)

        mask_parts = host(masks) if masks[0] is not None else [None] * len(targets)
        return [Rows(t, p, m) for t, p, m in zip(host(targets), host(predictions), mask_parts, strict=True)]

    def whole(self) -> Rows | None:
        """The whole pass on the host (None when no batch was added)."""
        batches = self.batches()
        return concat(batches) if batches else None

    def values(self, rows: Rows | None) -> dict[str, float]:
        """The functions on ``rows`` (``{}`` for None or no valid target)."""
        return {} if rows is None else values(self.fns, rows)


def gathered_pass(extras: ExtraMetrics, collective: Any, index: Sequence[int] | None = None) -> Rows | None:
    """The whole pass of every rank of ``collective`` (one gather; a group of one: this rank's).
    When every shard knows its dataset rows (``index``, e.g. ``rank::world``) the samples are put
    back in dataset order, so the functions see what one process scoring the whole set would."""
    whole = extras.whole()
    if collective.world_size == 1:
        return whole
    parts = [(i, rows) for i, rows in collective.all_gather((index, whole)) if rows is not None]
    if not parts:
        return None
    if all(i is not None and len(i) == len(rows.target) for i, rows in parts):
        return placed(parts)
    return concat([rows for _, rows in parts])


def gathered_batches(extras: ExtraMetrics, collective: Any) -> list[Rows]:
    """Each batch of the pass; in a group of several ranks the union of every rank's batch ``i``
    (rank order; one gather), so every rank scores the same samples."""
    batches = extras.batches()
    if collective.world_size > 1:
        batches = [concat(parts) for parts in zip(*collective.all_gather(batches), strict=True)]
    return batches


__all__ = ["ExtraFn", "ExtraMetrics", "Rows", "concat", "gathered_batches", "gathered_pass", "placed", "values"]
