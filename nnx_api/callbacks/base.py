"""The callback hook base class, the update event and the context callbacks receive.

Hooks run in callback order, except ``on_train_end`` which runs in reverse for every callback
whose ``on_train_begin`` completed (``nnx_core.lifecycle``). A callback only pays for the hooks
it overrides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from nnx_core.monitor import MonitorDecision
from nnx_core.records import IterationDataPoint
from nnx_api.callbacks.names import context_getattr, unknown_attribute


class Callback:
    """Base class: override any of the hooks. ``distributed`` declares rank behaviour
    (``"all"``: runs on every rank and must not write; ``"writer"``: writer rank only)."""

    distributed: str | None = None

    def on_train_begin(self, ctx: CallbackContext) -> None:
        """Once, before the first epoch."""

    def on_epoch_begin(self, ctx: CallbackContext) -> None:
        """At the start of every epoch."""

    def on_optimizer_update(self, ctx: CallbackContext, event: UpdateEvent) -> None:
        """After each committed optimizer update, before update-clock schedulers tick."""

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        """After validation, the decision and epoch-clock ticks; before the epoch commits."""

    def on_train_end(self, ctx: CallbackContext) -> None:
        """Once at the end, in reverse order, also after a failure."""

    def checkpoint_transforms(self) -> tuple[Mapping[str, Any], ...]:
        """Recipes for topology changes made in ``on_train_end``; persisted with the final LAST."""
        return ()


@attrs.frozen(kw_only=True)
class UpdateEvent:
    """One committed optimizer update. ``loss``: the update's loss — under the built-in step the
    window's mean loss over its valid targets (this rank's), read only when a callback of yours
    hears updates; an objective's combined loss; None from a step function — and ``losses`` an
    objective's terms."""

    optimizer: str
    update_idx: int
    epoch_idx: int
    batch_idx: int
    microbatches: int
    loss: float | None = None
    losses: Mapping[str, float] = attrs.field(factory=dict)


@attrs.define(kw_only=True)
class CallbackContext:
    """What callbacks see during one ``train()`` (mutable; lives for the call).

    ``epoch`` is the global epoch index; ``idp`` the epoch's last record (validation, training
    summary and the decision as ``selection``); ``idps`` the running history, one object for the
    call, live inside an epoch too (``nnx_api.training.context_views``); ``decision`` the
    epoch's one :class:`MonitorDecision`; set ``should_stop`` to stop after this epoch commits;
    append zero-argument writers to ``deferred_checkpoint_writes`` (run after the epoch commits);
    ``update_count`` counts committed optimizer updates; ``update_lrs`` is the
    ``(update, lr after its scheduler step)`` trace of an update-clock schedule;
    ``update_listeners`` are ``fn(ctx)`` called after each committed update and its scheduler step;
    ``stop_at_update`` stops right after the current committed update. ``retention`` is the
    history journal's retention (records kept in memory), None with the eager history.
    ``scheduler`` is the optimizer's torch LR scheduler, to read (NNx steps it); for the plateau
    schedule (this project's monitor-driven rule) a read-only view with torch's
    ``ReduceLROnPlateau`` names; None in a ``Trainer`` (its named schedules are its own).
    ``committed_updates`` is ``update_count``.

    An attribute it does not have, read or set (Keras's ``ctx.stop_training = True``), raises
    ``ContextAttributeError`` naming NNx's (``should_stop``).
    """

    model: Any
    run: Any
    optimizer: Any = None
    optimizers: Mapping[str, Any] | None = None
    trainer: Any = None
    epoch: int = -1
    idp: IterationDataPoint | None = None
    idps: Sequence[IterationDataPoint] = attrs.field(factory=list)
    decision: MonitorDecision | None = None
    should_stop: bool = False
    stop_at_update: bool = False
    deferred_checkpoint_writes: list[Callable[[], None]] = attrs.field(factory=list)
    update_count: int = 0
    update_lrs: list[tuple[int, float]] = attrs.field(factory=list)
    update_listeners: list[Callable[[CallbackContext], None]] = attrs.field(factory=list)
    save_weights: Callable[[str], Callable[[], None]] | None = None
    retention: int | None = None
    scheduler: Any = None

    __getattr__ = context_getattr

    @property
    def committed_updates(self) -> int:
        """NNx's name of ``update_count``: the optimizer updates committed so far (across a resume)."""
        return self.update_count

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _CONTEXT_FIELDS:
            raise unknown_attribute(self, name, setting=True)
        object.__setattr__(self, name, value)


_CONTEXT_FIELDS = frozenset(f.name for f in attrs.fields(CallbackContext))


class LegacyCallback(Callback):
    """Wraps a plain function ``fn(idps)`` called at every epoch end."""

    distributed = "writer"

    def __init__(self, fn: Callable[[Sequence[IterationDataPoint]], Any]) -> None:
        self.fn = fn

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        self.fn(ctx.idps)
