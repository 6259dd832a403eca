"""The one update tail: how a closed window becomes (or does not become) a committed update.

Every update owner ends here — the default step, the data-parallel step, the shared update
engine of objectives, and ``finalize_step`` of the built-in paradigm steps. Read
``commit_window`` top to bottom; this order is the contract (seed §2, §3):

    W == 0                      everything masked (on every rank: W is global) → nothing commits
    unscale                     undo fp16 loss scaling, every optimizer
    normalise                   gradients × 1/W (an additive, sum-reduced loss: no normalisation)
    finite?                     no → a loss scale shrinks and the window is an overflow skip;
                                      ``nonfinite="skip"`` drops it; ``"fail"`` raises before any
                                      parameter changes
    clip                        each optimizer by its own max norm
    step                        every optimizer once; a scaler may still skip (overflow)
    clear                       gradients dropped, ready for the next window

A committed update is then announced (``announce``): every optimizer's event of the commit is
delivered (``on_optimizer_update``) before any update-clock schedule ticks, and only then do the
update listeners and stop checks run. A skipped window announces nothing, so it never ticks an
update-clock schedule.

``UpdateWindow`` is the host-side accounting of one window: ``accumulate`` microbatches (the
epoch's last batch closes a trailing partial window), each adding its loss *denominator* (valid
targets) so uneven batches and masked targets give exactly the update of one batch of their union.

No framework imports: the tail reaches torch only through the ``Optimizer`` and ``LossScale`` ports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import attrs

from nnx_core.errors import NonFiniteLossError
from nnx_core.ports import LossScale, Optimizer

COMMITTED, MASKED, NONFINITE, OVERFLOW = "committed", "masked", "nonfinite", "overflow"
NONFINITE_POLICIES = ("fail", "skip")

NONFINITE_MESSAGE = (
    "non-finite training loss: a non-finite loss or non-finite gradient was found, so nothing was stepped; no parameter was "
    "updated. Lower the learning rate, check the inputs for NaN/inf, or set grad_clip_norm"
)


@attrs.define
class UpdateWindow:
    """Accounting of the current window (host-side numbers only)."""

    accumulate: int
    microbatches: int = 0
    weight: float = 0.0
    additive: bool = False  # sum-reduced losses: no normalisation

    def add(self, denominator: float | None) -> None:
        """Account one microbatch; ``None`` marks an additive (sum-reduced) loss."""
        self.microbatches += 1
        if denominator is None:
            self.additive = True
        else:
            self.weight += denominator

    def closes(self, is_last_batch: bool) -> bool:
        """Whether the window closes with the microbatch about to be added."""
        return self.microbatches + 1 >= self.accumulate or is_last_batch

    def ends(self, is_last_batch: bool) -> bool:
        """Whether the window closes after the microbatch just added."""
        return self.microbatches >= self.accumulate or is_last_batch

    def close(self) -> tuple[float | None, int]:
        """``(W, microbatches)`` and reset. ``W`` is None for additive losses."""
        weight = None if self.additive else self.weight
        count = self.microbatches
        self.microbatches, self.weight, self.additive = 0, 0.0, False
        return weight, count


def commit_window(
    optimizers: Mapping[str, Optimizer],
    weight: float | None,
    *,
    max_norms: Mapping[str, float | None] | None = None,
    finite: Callable[[], bool] | None = None,
    nonfinite: str = "fail",
    loss_scale: LossScale | None = None,
) -> str:
    """Apply one window's update to every optimizer; return its status (module docstring).

    ``weight``: the window's denominator W (None: additive, no normalisation; 0: masked).
    ``finite``: the finiteness check (default: every optimizer's gradients); it runs after
    unscaling and normalising, before clipping.
    """
    opts = list(optimizers.values())
    if weight == 0:
        _clear(opts)
        return MASKED
    for opt in opts:
        opt.unscale()
    if weight is not None and weight != 1:
        for opt in opts:
            opt.scale_grads(1.0 / weight)
    ok = finite() if finite is not None else all(opt.grads_finite() for opt in opts)
    if not ok:
        _clear(opts)
        if loss_scale is not None:
            loss_scale.update()  # the scale shrinks; no optimizer steps (a silent skip)
            return OVERFLOW
        if nonfinite == "skip":
            return NONFINITE
        raise NonFiniteLossError(NONFINITE_MESSAGE)
    norms = max_norms or {}
    for name, opt in optimizers.items():
        norm = norms.get(name)
        if norm is not None:
            opt.clip(norm)
    stepped = [opt.step() for opt in opts]
    if loss_scale is not None:
        loss_scale.update()
    _clear(opts)
    return COMMITTED if all(stepped) else OVERFLOW


def _clear(opts: Sequence[Optimizer]) -> None:
    for opt in opts:
        opt.zero_grad()


E = TypeVar("E")


def announce(
    events: Sequence[E],
    *,
    deliver: Callable[[E], None],
    tick: Callable[[E], None],
    after: Callable[[], None] = lambda: None,
) -> None:
    """Seed §2: every optimizer's event of one commit is delivered (``on_optimizer_update``)
    before any update-clock schedule ticks; then ``after`` (update listeners, stop checks)."""
    for event in events:
        deliver(event)
    for event in events:
        tick(event)
    after()
