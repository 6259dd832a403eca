"""The built-in callbacks: ``EarlyStopping``, ``LRMonitor``, ``ModelCheckpoint``, and how a
``callbacks=`` list is normalised (plain functions wrapped, EarlyStopping components named)."""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nnx_core.errors import ParamsError
from nnx_core.identity import validate_tag
from nnx_core.monitor_spec import MonitorSpec, improves
from nnx_core.validate import check_float, check_int
from nnx_api.callbacks.base import Callback, CallbackContext, LegacyCallback
from nnx_api.callbacks.exports import export_tag
from nnx_api.runs.run import NNRun


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
            said = repr(cb.component_name) if cb.name is None else f"{cb.name!r} (checkpointed as {cb.component_name!r})"
            raise ParamsError("EarlyStopping.name", f"duplicate component name {said}: two EarlyStopping callbacks "
                              "carry it; give each its own name")
        taken.add(cb.component_name)
    return out


_PACKAGE_DIRS = tuple(str(Path(__file__).parents[2] / name) + "/" for name in ("nnx_core", "nnx_adapters", "nnx_api"))


def warn_per_run(message: str, registry: dict[Any, int]) -> None:
    """A ``RuntimeWarning`` attributed to the first caller outside this package, deduplicated in
    ``registry`` (one per run) rather than once per process, so every run's diagnostic is shown."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIRS):
        frame = frame.f_back
    warnings.warn_explicit(message, RuntimeWarning, frame.f_code.co_filename, frame.f_lineno,
                           module=frame.f_globals.get("__name__"), registry=registry,
                           module_globals=frame.f_globals)


FIELD_MONITORS = ("val_edp.error", "val_edp.loss", "train_edp.error", "train_edp.loss")
"""The record fields ``EarlyStopping(monitor="...")`` reads."""


class EarlyStopping(Callback):
    """Stop after ``patience`` epochs in a row without improvement (``patience=0``: the first
    epoch that does not improve); ``ctx.should_stop`` is set and the run ends after that commit.

    Which comparison counts (the rule, decided before training):

    * **The run's one decision** — ``monitor=None`` (with the default ``min_delta``), a
      ``MonitorSpec`` equal to ``NNTrainParams(monitor=...)`` (a different one is refused), or a
      ``"val_edp.error"`` / ``"val_edp.loss"`` string whose ``mode`` and ``min_delta`` make it that
      same monitor: EarlyStopping then counts on the epoch's one ``MonitorDecision``, which also
      selects BEST and drives the plateau scheduler, so they can never disagree.
    * **Its own comparator** (as NNx documents it) — any other string monitor: it reads exactly
      that field of the epoch's last record (``train_edp`` is the epoch's last batch), with no
      fallback; an improvement is ``value < best - min_delta`` (``mode="min"``) or ``value > best
      + min_delta`` (``"max"``), the first finite value being the first best. ``monitor=None``
      with a ``min_delta`` compares itself too, on ``val_edp.error`` if the first validated epoch
      has a finite error, else ``val_edp.loss`` (``selected_monitor`` says which).

    An epoch whose value is missing is not counted (one ``RuntimeWarning`` per run says why); a
    NaN/inf never becomes the best and counts as no improvement (warned once). A checkpointed
    component (``early_stopping``, numbered when there are several; ``name=`` names it): a
    stateful resume continues the count, and refuses a checkpoint that tracked another monitor or
    mode. It is optional, as in NNx: resuming without it ignores its saved state, and adding it on
    a resume starts it fresh.
    """

    distributed = "all"
    component_required = False

    def __init__(
        self,
        monitor: str | MonitorSpec | None = None,
        patience: int = 10,
        min_delta: float = 0.0,
        mode: str = "min",
        name: str | None = None,
    ) -> None:
        if mode not in ("min", "max"):
            raise ParamsError("EarlyStopping.mode", f"mode must be 'min' or 'max', got {mode!r}")
        min_delta = check_min_delta(min_delta)
        if isinstance(monitor, MonitorSpec):
            if mode != "min" or min_delta != 0.0:
                raise ParamsError(
                    "EarlyStopping",
                    "EarlyStopping(monitor=MonitorSpec(...)) takes its direction and min_delta from the spec; "
                    "leave mode and min_delta at their defaults",
                )
        elif monitor is not None and monitor not in FIELD_MONITORS:
            raise ParamsError(
                "EarlyStopping.monitor", f"monitor must be None, a MonitorSpec or one of {sorted(FIELD_MONITORS)}, got {monitor!r}"
            )
        if monitor is None and mode == "max":
            raise ParamsError(
                "EarlyStopping.mode",
                "mode='max' requires an explicit monitor: the default (monitor=None) selects val_edp.error or "
                "val_edp.loss, which improve by decreasing",
            )
        self.monitor = monitor
        self.patience = check_int("EarlyStopping.patience", patience, minimum=0)
        self.min_delta = min_delta
        self.mode = mode
        if name is not None:
            validate_tag(name)
        self.name = name
        self.component_name = "early_stopping" if name is None else f"early_stopping.{name}"
        self.own = self._compares_itself(None)
        self.wait = 0
        self.best: float | None = None
        self.stopped_epoch: int | None = None
        self._selected: str | None = None
        self._warned: set[str] = set()
        self._warned_at: dict[Any, int] = {}  # this run's warning registry (warn_per_run)
        self._restored = False

    @property
    def _wait(self) -> int:
        """NNx's name of ``wait`` (its own tests read and set it): the same counter."""
        return self.wait

    @_wait.setter
    def _wait(self, value: int) -> None:
        self.wait = value

    def _compares_itself(self, run_monitor: MonitorSpec | None) -> bool:
        """Whether this callback keeps its own comparator rather than the run's decision."""
        if isinstance(self.monitor, MonitorSpec):
            return False
        if self.monitor is None:
            return self.min_delta != 0.0
        split, _, metric = self.monitor.partition("_edp.")
        if split != "val" or run_monitor is None:
            return True
        same = MonitorSpec(metric=metric, split="val", mode=self.mode, min_delta=self.min_delta)
        run = dataclasses.replace(run_monitor, mode=run_monitor.mode or "min")  # loss and error improve by decreasing
        return same != run

    def check_run(self, monitor: MonitorSpec | None, metrics: Sequence[Any] | None = None) -> None:
        """Refuse a ``MonitorSpec`` naming a metric the run does not declare (when ``metrics`` is
        given), or one that differs from the run's (there is one decision per run); decide whether a
        string monitor is the run's decision or compares itself."""
        if isinstance(self.monitor, MonitorSpec) and metrics is not None:
            try:
                self.monitor.check_names(metrics, owner="EarlyStopping.monitor")
            except ParamsError:
                labels = sorted(str(getattr(spec, "label", spec)) for spec in metrics)
                raise ParamsError(
                    "EarlyStopping.monitor",
                    f"EarlyStopping monitor {self.monitor.key!r} names an undeclared metric; declared: "
                    f"{', '.join(['loss', 'error', *labels])}; add MetricSpec({self.monitor.metric!r}) to metrics",
                ) from None
        if isinstance(self.monitor, MonitorSpec) and self.monitor != monitor:
            raise ParamsError(
                "EarlyStopping.monitor",
                f"{self.monitor} differs from the run's monitor {monitor}; declare it once as "
                "NNTrainParams(monitor=...) and pass EarlyStopping() without one",
            )
        self.own = self._compares_itself(monitor)

    @property
    def selected_monitor(self) -> str | None:
        """The field compared (its own comparator), or the run decision's ``split.metric``."""
        if isinstance(self.monitor, MonitorSpec):
            return f"{self.monitor.split}_edp.{self.monitor.metric}"
        return self._selected if self.monitor is None else self.monitor

    def on_train_begin(self, ctx: CallbackContext) -> None:
        if not self._restored:  # a fresh run starts counting from zero; a resumed one continues
            self.wait, self.best = 0, None
            self._selected = None
        self._restored = False
        self.stopped_epoch = None
        self._warned = set()
        self._warned_at = {}

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        if self.own or not hasattr(ctx, "decision"):  # driven by hand, outside a run: no run decision
            self._own_epoch_end(ctx)
            return
        decision = ctx.decision
        if decision is None or decision.status == "missing":
            self._warn("missing", f"epoch {ctx.epoch} has no monitored value, so it is not counted toward patience")
            return
        if self.monitor is None and self._selected is None:  # report what the run's decision read
            val = getattr(ctx.idp, "val_edp", None)
            self._selected = next((f"val_edp.{name}" for name in ("error", "loss")
                                   if val is not None and getattr(val, name) is not None
                                   and math.isfinite(getattr(val, name))), None)
        if decision.improved:
            self.wait, self.best = 0, decision.best
            return
        self._count(ctx)

    def _count(self, ctx: CallbackContext) -> None:
        self.wait += 1
        if self.wait >= self.patience:
            ctx.should_stop = True
            self.stopped_epoch = ctx.epoch

    def _own_epoch_end(self, ctx: CallbackContext) -> None:
        value = self._observe(ctx.idp, ctx.epoch)
        if value is None:
            return
        if improves(value, self.best, self.mode, self.min_delta):
            self.wait, self.best = 0, value
            return
        if not math.isfinite(value):
            self._warn("nonfinite", f"epoch {ctx.epoch}'s value is non-finite ({value}); it counts as no improvement")
        self._count(ctx)

    def _observe(self, idp: Any, epoch: int) -> float | None:
        """The compared value of the epoch, or None (not counted; the reason warned once)."""
        field = self.monitor if isinstance(self.monitor, str) else self._selected
        edp = getattr(idp, (field or "val_edp").partition(".")[0], None) if idp is not None else None
        if edp is None:
            where = "validation" if field is None or field.startswith("val") else "training"
            self._warn("absent", f"epoch {epoch} has no {where} data point (record), so it is not counted toward "
                       "patience"
                       + ("; configure a val_loader" if where == "validation" else ""))
            return None
        if field is None:  # automatic: the first validated epoch's finite error, else its loss
            for name in ("error", "loss"):
                value = getattr(edp, name)
                if value is not None and math.isfinite(value):
                    self._selected = field = f"val_edp.{name}"
                    break
            else:
                present = [v for v in (edp.error, edp.loss) if v is not None]
                if present:
                    return float(present[0])  # non-finite so far: counted, the choice stays open
                self._warn("no-field", f"epoch {epoch}'s validation record has neither an 'error' nor a 'loss' value")
                return None
        value = getattr(edp, field.partition(".")[2])
        if value is None:
            name = field.partition(".")[2]
            self._warn(field, f"epoch {epoch}'s record ({field}) has no {name!r} value, so it is not counted toward "
                       "patience")
            return None
        return float(value)

    def _warn(self, key: str, detail: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            label = self.monitor if not isinstance(self.monitor, MonitorSpec) else f"{self.monitor.split}.{self.monitor.metric}"
            warn_per_run(f"EarlyStopping(monitor={label!r}): {detail}", self._warned_at)

    def component_spec(self) -> tuple[str, int]:
        """Name and schema version of the checkpointed state."""
        return (self.component_name, 1)

    def _identity(self) -> tuple[Any, str]:
        monitor = self.monitor.state() if isinstance(self.monitor, MonitorSpec) else self.monitor
        return monitor, self.mode

    def component_state(self) -> dict[str, Any]:
        """Counter state and what it counts (monitor, mode, the automatic choice)."""
        monitor, mode = self._identity()
        return {"wait": self.wait, "best": self.best, "patience": self.patience, "monitor": monitor, "mode": mode,
                "selected": self._selected}

    def check_component_state(self, state: Mapping[str, Any], *, version: int | None = None) -> list[str]:
        """Problems restoring ``state``: no count, or a count of another monitor or mode."""
        if not isinstance(state.get("wait"), int):
            return [f"{self.component_name}: saved state has no 'wait' count"]
        saved = (state.get("monitor"), state.get("mode", "min"))
        if "monitor" in state and saved != self._identity():
            monitor, mode = self._identity()
            return [
                f"{self.component_name}: EarlyStopping tracked monitor={saved[0]!r}, mode={saved[1]!r} in the checkpoint "
                f"but is configured with monitor={monitor!r}, mode={mode!r}"
            ]
        return []

    def load_component_state(self, state: Mapping[str, Any], *, version: int | None = None) -> None:
        """Continue the count (``on_train_begin`` then keeps it)."""
        self.wait, self.best = int(state["wait"]), state.get("best")
        self._selected = state.get("selected")
        self._restored = True


class LRMonitor(Callback):
    """Records the primary optimizer's group-0 learning rate.

    ``history``: one entry per epoch, read at ``on_epoch_end`` (after the epoch-clock schedule
    stepped), whatever the scheduler's clock. ``update_history``: ``(update index, lr)`` after each
    committed update's scheduler step (the lr the next update will use), filled only when the
    primary optimizer's scheduler runs on the ``optimizer_update`` clock and NNx steps it — empty
    on the epoch clock and under ``Trainer(auto_step_schedulers=False)``.

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
        self._seen = 0  # how much of ctx.update_lrs is already in update_history

    def on_train_begin(self, ctx: CallbackContext) -> None:
        self._seen = len(_update_lrs(ctx))

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        self.history.append(float(ctx.optimizer.param_groups[0]["lr"]))
        update_lrs = _update_lrs(ctx)
        self.update_history.extend((int(i), float(lr)) for i, lr in update_lrs[self._seen :])
        self._seen = len(update_lrs)
        self._epoch_ends.append(len(self.update_history))
        limit = getattr(ctx, "retention", None) if self.bounded else None
        if limit is not None and len(self.history) > limit:
            cut = self._epoch_ends[-limit - 1]  # the updates of the epochs that fall out
            del self.history[:-limit]
            del self.update_history[:cut]
            self._epoch_ends = [end - cut for end in self._epoch_ends[-limit:]]


def _update_lrs(ctx: Any) -> Sequence[tuple[int, float]]:
    """The context's update-clock lr trace; a context built without one (NNx's callback tests
    hand a plain namespace) has none."""
    return getattr(ctx, "update_lrs", None) or ()


class ModelCheckpoint(Callback):
    """Write the model's weights as tag ``<tag>_e<epoch>`` on the listed (0-based, global)
    epochs, after the epoch commits (a deferred write: it can never name an uncommitted epoch).
    No epochs (None or empty) means nothing is written. Each tag is a weights-only checkpoint of
    the run (manifest ``<tag>_e<epoch>.json``): ``NNModel.from_checkpoint(run_id, "<tag>_e<epoch>")``,
    or ``resume_from_checkpoint="<tag>_e<epoch>"`` for a weights-only start. Right after the tag,
    NNx's file ``runs/<id>/checkpoints/<tag>_e<epoch>.pt`` is exported from it (weights, params,
    the epoch's record: ``NNCheckpoint.from_file``); it is a copy for users, never read by resume
    or verification (``nnx_api.callbacks.exports``)."""

    distributed = "writer"

    def __init__(self, epochs: Sequence[int] | None = None, tag: str = "custom") -> None:
        self.epochs = {check_int("ModelCheckpoint.epochs", e, minimum=0) for e in epochs or ()}
        self.tag = validate_tag(tag)
        self.written: list[str] = []

    def on_train_begin(self, ctx: CallbackContext) -> None:
        """Say which listed epochs this run never reaches (a silent no-op otherwise)."""
        n_epochs = getattr(getattr(ctx.run, "train", None), "n_epochs", None)
        if n_epochs is None:
            return
        source = getattr(ctx.run, "resume_status", None) or {}
        lineage = source.get("source_run_id") not in (None, ctx.run.id) and source.get("source_epoch") is not None
        first = source["source_epoch"] + 1 if lineage else 0  # a run started from another's checkpoint goes on counting
        beyond = sorted(e for e in self.epochs if e >= first + n_epochs)
        if beyond:
            warnings.warn(
                f"ModelCheckpoint(epochs={sorted(self.epochs)}): epoch(s) {beyond} lie beyond this run's last epoch "
                f"{first + n_epochs - 1} (epochs are 0-based), so nothing is written for them", RuntimeWarning, stacklevel=2,
            )

    def on_epoch_end(self, ctx: CallbackContext) -> None:
        if ctx.epoch not in self.epochs or ctx.idp is None:  # no completed record: nothing to keep
            return
        if ctx.save_weights is None:
            warnings.warn("ModelCheckpoint: this run cannot save weights", RuntimeWarning, stacklevel=2)
            return
        name = f"{self.tag}_e{ctx.epoch}"
        ctx.deferred_checkpoint_writes.append(ctx.save_weights(name))
        if isinstance(ctx.run, NNRun):  # then NNx's <tag>.pt, exported from the committed tag
            ctx.deferred_checkpoint_writes.append(functools.partial(export_tag, ctx.run, name, ctx.idp))
        self.written.append(name)


def check_min_delta(value: float) -> float:
    """A non-negative finite min_delta."""
    return check_float("min_delta", value, minimum=0.0)
