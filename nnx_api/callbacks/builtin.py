"""The built-in callbacks: ``EarlyStopping``, ``LRMonitor``, ``ModelCheckpoint``, and how a
``callbacks=`` list is normalised (plain functions wrapped, EarlyStopping components named)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from nnx_core.errors import ParamsError
from nnx_core.identity import validate_tag
from nnx_core.monitor import MonitorSpec
from nnx_core.validate import check_float, check_int
from nnx_api.callbacks.base import Callback, CallbackContext, LegacyCallback


def normalize_callbacks(callbacks: Sequence[Any] | None) -> list[Callback]:
    """Callback instances as given; plain callables wrapped as legacy callbacks.

    Several ``EarlyStopping`` callbacks get distinct component names here, before anything is
    written: unnamed ones are numbered (``early_stopping``, ``early_stopping.2``, ...), explicit
    names must be unique.
    """
    out: list[Callback] = []
    for cb in callbacks or ():
        if isinstance(cb, Callback):
            out.append(cb)
        elif callable(cb):
            out.append(LegacyCallback(cb))
        else:
            raise ParamsError("callbacks", f"{cb!r} is neither a Callback nor a callable")
    taken: set[str] = set()
    unnamed = 0
    for cb in out:
        if not isinstance(cb, EarlyStopping):
            continue
        if cb.name is None:
            unnamed += 1
            cb.component_name = "early_stopping" if unnamed == 1 else f"early_stopping.{unnamed}"
        else:
            cb.component_name = f"early_stopping.{cb.name}"
        if cb.component_name in taken:
            raise ParamsError("EarlyStopping.name", f"two EarlyStopping callbacks are named {cb.component_name!r}")
        taken.add(cb.component_name)
    return out


class EarlyStopping(Callback):
    """Stop when the run's monitor decision has not improved for ``patience`` epochs.

    It has no comparator of its own: it counts on the epoch's one ``MonitorDecision`` (the same
    that selects BEST and drives the plateau scheduler). ``monitor`` may repeat the run's
    ``NNTrainParams(monitor=...)`` for readability; a different one is refused before training,
    and so are a non-default ``min_delta`` / ``mode`` (set them on the ``MonitorSpec``). Epochs
    whose monitored value is missing are not counted; a non-finite value counts as no
    improvement. After ``patience`` epochs in a row without improvement ``ctx.should_stop`` is set
    (``patience=0``: the first epoch that does not improve). A checkpointed component
    (``early_stopping``, numbered when there are several): a stateful resume continues the count.
    """

    distributed = "all"

    def __init__(
        self,
        monitor: MonitorSpec | None = None,
        patience: int = 10,
        min_delta: float = 0.0,
        mode: str = "min",
        name: str | None = None,
    ) -> None:
        if check_min_delta(min_delta) != 0.0 or mode != "min":
            raise ParamsError(
                "EarlyStopping",
                "min_delta and mode belong to the run's one monitor: use NNTrainParams(monitor=MonitorSpec("
                "metric=..., mode=..., min_delta=...)) and EarlyStopping(patience=...)",
            )
        if monitor is not None and not isinstance(monitor, MonitorSpec):
            raise ParamsError("EarlyStopping.monitor", f"must be a MonitorSpec or None, got {monitor!r}")
        self.monitor = monitor
        self.patience = check_int("EarlyStopping.patience", patience, minimum=0)
        if name is not None:
            validate_tag(name)
        self.name = name
        self.component_name = "early_stopping" if name is None else f"early_stopping.{name}"
        self.wait = 0
        self.best: float | None = None
        self.stopped_epoch: int | None = None
        self._restored = False

    def check_run(self, monitor: MonitorSpec | None) -> None:
        """Refuse a monitor that differs from the run's (there is one comparator per run)."""
        if self.monitor is not None and self.monitor != monitor:
            raise ParamsError(
                "EarlyStopping.monitor",
                f"{self.monitor} differs from the run's monitor {monitor}; declare it once as "
                "NNTrainParams(monitor=...) and pass EarlyStopping() without one",
            )

    def on_train_begin(self, ctx: CallbackContext) -> None:
        if not self._restored:  # a fresh run starts counting from zero; a resumed one continues
            self.wait, self.best = 0, None
        self._restored = False
        self.stopped_epoch = None

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        decision = ctx.decision
        if decision is None or decision.status == "missing":
            return
        if decision.improved:
            self.wait, self.best = 0, decision.best
            return
        self.wait += 1
        if self.wait >= self.patience:
            ctx.should_stop = True
            self.stopped_epoch = ctx.epoch

    def component_spec(self) -> tuple[str, int]:
        """Name and schema version of the checkpointed state."""
        return (self.component_name, 1)

    def component_state(self) -> dict[str, Any]:
        """Counter state."""
        return {"wait": self.wait, "best": self.best, "patience": self.patience}

    def check_component_state(self, state: Mapping[str, Any], *, version: int | None = None) -> list[str]:
        """Problems restoring ``state``."""
        if not isinstance(state.get("wait"), int):
            return [f"{self.component_name}: saved state has no 'wait' count"]
        return []

    def load_component_state(self, state: Mapping[str, Any], *, version: int | None = None) -> None:
        """Continue the count (``on_train_begin`` then keeps it)."""
        self.wait, self.best = int(state["wait"]), state.get("best")
        self._restored = True


class LRMonitor(Callback):
    """Records the primary optimizer's group-0 learning rate.

    ``history``: one entry per epoch, read at ``on_epoch_end`` (after the epoch-clock schedule
    stepped). ``update_history``: ``(update index, lr)`` after each committed update's scheduler
    step (the lr the next update will use), recorded through ``ctx.update_listeners``.

    With a history journal (``train(..., history=HistoryJournal(retention=N))``) memory stays
    bounded: ``history`` keeps the last ``N`` epochs and ``update_history`` the updates of those
    epochs, unless ``bounded=False``. With the eager history both keep everything.
    """

    distributed = "all"

    def __init__(self, bounded: bool = True) -> None:
        if not isinstance(bounded, bool):
            raise ParamsError("LRMonitor.bounded", f"must be True or False, got {bounded!r}")
        self.bounded = bounded
        self.history: list[float] = []
        self.update_history: list[tuple[int, float]] = []
        self._epoch_ends: list[int] = []  # len(update_history) after each kept epoch

    def on_train_begin(self, ctx: CallbackContext) -> None:
        ctx.update_listeners.append(self._after_update)

    def _after_update(self, ctx: CallbackContext) -> None:
        self.update_history.append((ctx.update_count, float(ctx.optimizer.param_groups[0]["lr"])))

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        self.history.append(float(ctx.optimizer.param_groups[0]["lr"]))
        self._epoch_ends.append(len(self.update_history))
        limit = ctx.retention if self.bounded else None
        if limit is not None and len(self.history) > limit:
            cut = self._epoch_ends[-limit - 1]  # the updates of the epochs that fall out
            del self.history[:-limit]
            del self.update_history[:cut]
            self._epoch_ends = [end - cut for end in self._epoch_ends[-limit:]]


class ModelCheckpoint(Callback):
    """Write the model's weights as tag ``<tag>_e<epoch>`` on the listed (0-based, global)
    epochs, after the epoch commits (a deferred write: it can never name an uncommitted epoch).
    No epochs (None or empty) means nothing is written. Each tag is a weights-only checkpoint of
    the run: ``NNCheckpoint.from_file("runs/<id>/checkpoints/<tag>_e<epoch>.pt")`` (NNx's file
    name; the tag's manifest is ``<tag>_e<epoch>.json``), ``NNModel.from_checkpoint(run_id,
    "<tag>_e<epoch>")``, or ``resume_from_checkpoint="<tag>_e<epoch>"`` for a weights-only start."""

    distributed = "writer"

    def __init__(self, epochs: Sequence[int] | None = None, tag: str = "custom") -> None:
        self.epochs = {check_int("ModelCheckpoint.epochs", e, minimum=0) for e in epochs or ()}
        self.tag = validate_tag(tag)
        self.written: list[str] = []

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        if ctx.epoch not in self.epochs:
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
