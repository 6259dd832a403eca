"""Update windows: how microbatches become one committed optimizer update.

A window collects ``accumulate`` microbatches (the epoch's last batch closes a trailing partial
window). Each microbatch back-propagates its loss *numerator* (a sum over its valid targets) and
adds its *denominator* (its valid-target count) here. At the window's end the gradient is divided
by the window's total ``W``, so uneven batches and masked targets give exactly the update of one
batch of their union. ``W == 0`` (everything masked) commits nothing.

The update itself reads top to bottom (``commit_update``): unscale → normalise → finite check →
clip → step → clear gradients. It reaches torch only through the ``Optimizer`` port.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from nnx_core.errors import NonFiniteLossError
from nnx_core.ports import Optimizer


@attrs.define
class UpdateWindow:
    """Accounting of the current window (host-side numbers only)."""

    accumulate: int
    microbatches: int = 0
    weight: float = 0.0
    additive: bool = False  # sum-reduced losses: no normalisation

    @property
    def is_open(self) -> bool:
        """Whether a microbatch has been added since the last close."""
        return self.microbatches > 0

    def add(self, denominator: float | None) -> None:
        """Account one microbatch; ``None`` marks an additive (sum-reduced) loss."""
        self.microbatches += 1
        if denominator is None:
            self.additive = True
        else:
            self.weight += denominator

    def ends(self, is_last_batch: bool) -> bool:
        """Whether the window closes after the microbatch just added."""
        return self.microbatches >= self.accumulate or is_last_batch

    def close(self) -> tuple[float | None, int]:
        """``(W, microbatches)`` and reset. ``W`` is None for additive losses."""
        weight = None if self.additive else self.weight
        count = self.microbatches
        self.microbatches, self.weight, self.additive = 0, 0.0, False
        return weight, count


def commit_update(
    optimizer: Optimizer,
    weight: float | None,
    *,
    max_norm: float | None = None,
    check_finite: Callable[[], bool] | None = None,
    nonfinite: str = "fail",
) -> bool:
    """Apply one window's update; return whether it was committed.

    ``weight`` None means additive (no normalisation); 0 means fully masked (nothing committed).
    ``check_finite`` (default: the optimizer's gradient check) runs before clipping; with
    ``nonfinite="fail"`` a non-finite window raises before any parameter changes, with "skip" it
    is dropped.
    """
    if weight == 0:
        optimizer.zero_grad()
        return False
    optimizer.unscale()
    if weight is not None and weight != 1:
        optimizer.scale_grads(1.0 / weight)
    finite = (check_finite or optimizer.grads_finite)()
    if not finite:
        optimizer.zero_grad()
        if nonfinite == "skip":
            return False
        raise NonFiniteLossError(
            "the loss or its gradients are not finite; no parameter was updated. Lower the learning rate, "
            "check the inputs for NaN/inf, or set grad_clip_norm"
        )
    if max_norm is not None:
        optimizer.clip(max_norm)
    committed = optimizer.step()
    optimizer.zero_grad()
    return committed
