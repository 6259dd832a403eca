"""Callbacks: the hook base class, the context they receive, and the built-in callbacks.

Hooks run in callback order, except ``on_train_end`` which runs in reverse for every callback
whose ``on_train_begin`` completed. A callback only pays for the hooks it overrides.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from nnx_core.errors import ParamsError
from nnx_core.identity import validate_tag
from nnx_core.monitor import MonitorDecision, MonitorSpec
from nnx_core.records import IterationDataPoint
from nnx_core.validate import check_float, check_int


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
    """One committed optimizer update."""

    optimizer: str
    update_idx: int
    epoch_idx: int
    batch_idx: int
    microbatches: int
    loss: float | None = None
    losses: Mapping[str, float] = attrs.field(factory=dict)


@attrs.define(kw_only=True)
class CallbackContext:
    """What callbacks see during one ``train()`` (mutable; lives for the call)."""

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
    save_weights: Callable[[str], Callable[[], None]] | None = None


class LegacyCallback(Callback):
    """Wraps a plain function ``fn(idps)`` called at every epoch end."""

    distributed = "writer"

    def __init__(self, fn: Callable[[Sequence[IterationDataPoint]], Any]) -> None:
        self.fn = fn

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        self.fn(ctx.idps)


def normalize_callbacks(callbacks: Sequence[Any] | None) -> list[Callback]:
    """Callback instances as given; plain callables wrapped as legacy callbacks."""
    out: list[Callback] = []
    for cb in callbacks or ():
        if isinstance(cb, Callback):
            out.append(cb)
        elif callable(cb):
            out.append(LegacyCallback(cb))
        else:
            raise ParamsError("callbacks", f"{cb!r} is neither a Callback nor a callable")
    return out


class EarlyStopping(Callback):
    """Stop when the run's monitor decision has not improved for ``patience`` epochs.

    It has no comparator of its own: it counts on the epoch's one ``MonitorDecision`` (the same
    that selects BEST and drives the plateau scheduler). ``monitor`` may repeat the run's
    ``NNTrainParams(monitor=...)`` for readability; a different one is refused before training.
    Epochs whose monitored value is missing are not counted. A checkpointed component: a
    stateful resume continues the count.
    """

    distributed = "all"

    def __init__(self, monitor: MonitorSpec | None = None, patience: int = 10, name: str | None = None) -> None:
        self.monitor = monitor
        self.patience = check_int("EarlyStopping.patience", patience, minimum=0)
        self.name = name
        self.wait = 0
        self.best: float | None = None
        self.stopped_epoch: int | None = None

    def check_run(self, monitor: MonitorSpec | None) -> None:
        """Refuse a monitor that differs from the run's (there is one comparator per run)."""
        if self.monitor is not None and self.monitor != monitor:
            raise ParamsError(
                "EarlyStopping.monitor",
                f"{self.monitor} differs from the run's monitor {monitor}; declare it once as "
                "NNTrainParams(monitor=...) and pass EarlyStopping() without one",
            )

    def on_train_begin(self, ctx: CallbackContext) -> None:
        self.stopped_epoch = None

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        decision = ctx.decision
        if decision is None or decision.status == "missing":
            return
        if decision.improved:
            self.wait, self.best = 0, decision.best
        else:
            self.wait += 1
        if self.wait >= self.patience and not decision.improved:
            ctx.should_stop = True
            self.stopped_epoch = ctx.epoch

    def component_spec(self) -> tuple[str, int]:
        """Name and schema version of the checkpointed state."""
        return (f"early_stopping{'.' + self.name if self.name else ''}", 1)

    def component_state(self) -> dict[str, Any]:
        """Counter state."""
        return {"wait": self.wait, "best": self.best, "patience": self.patience}

    def check_component_state(self, state: Mapping[str, Any]) -> list[str]:
        """Problems restoring ``state``."""
        return [] if isinstance(state.get("wait"), int) else ["early_stopping: saved state has no 'wait' count"]

    def load_component_state(self, state: Mapping[str, Any]) -> None:
        """Continue the count."""
        self.wait, self.best = int(state["wait"]), state.get("best")


class LRMonitor(Callback):
    """Records the learning rate: ``history`` per epoch, ``update_history`` per committed update."""

    distributed = "all"

    def __init__(self) -> None:
        self.history: list[float] = []
        self.update_history: list[tuple[int, float]] = []

    def on_optimizer_update(self, ctx: CallbackContext, event: UpdateEvent) -> None:
        self.update_history.append((event.update_idx, ctx.optimizer.param_groups[0]["lr"]))

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        self.history.append(float(ctx.optimizer.param_groups[0]["lr"]))


class ModelCheckpoint(Callback):
    """Write the model's weights as tag ``<tag>_e<epoch>`` on the listed epochs, after the epoch
    commits (a deferred write: it can never name an uncommitted epoch)."""

    distributed = "writer"

    def __init__(self, epochs: Sequence[int] | None = None, tag: str = "custom") -> None:
        self.epochs = None if epochs is None else {check_int("ModelCheckpoint.epochs", e, minimum=0) for e in epochs}
        self.tag = validate_tag(tag)
        self.written: list[str] = []

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        if self.epochs is not None and ctx.epoch not in self.epochs:
            return
        if ctx.save_weights is None:
            warnings.warn("ModelCheckpoint: this run cannot save weights", RuntimeWarning, stacklevel=2)
            return
        name = f"{self.tag}_e{ctx.epoch}"
        ctx.deferred_checkpoint_writes.append(ctx.save_weights(name))
        self.written.append(name)


def check_min_delta(value: float) -> float:
    """A non-negative finite min_delta."""
    return check_float("min_delta", value, minimum=0.0)
