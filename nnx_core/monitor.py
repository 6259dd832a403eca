"""One monitor decision per epoch, obeyed by BEST, the plateau scheduler and EarlyStopping.

The rule (``improves``): the first finite value improves; a later one must beat the best by more
than ``min_delta`` in the monitor's direction; ties never improve; a non-finite value never
improves. Without a named monitor the signal is the documented fallback (first finite of val
error, val loss, train error, train loss; direction min).

``Monitor`` is a checkpointed component (``nnx.monitor``): its best value survives a stateful
resume, so decisions after a resume equal those of an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from nnx_core.convert import OMIT, Stateful, converter
from nnx_core.errors import MonitorUnavailableError, ParamsError
from nnx_core.records import IterationDataPoint, MonitorRecord, fallback_signal
from nnx_core.validate import check_choice, check_float, check_str

SPLITS = ("val", "train")
MODES = ("min", "max")
POLICIES = ("skip", "error")
FALLBACK = "fallback"
RECORD_MODES: Mapping[str, str] = {"loss": "min", "error": "min"}
"""The record's own fields a monitor names without declaring them, with their direction."""
BUILTIN_MODES: Mapping[str, str] = {**RECORD_MODES, "accuracy": "max", "f1": "max", "precision": "max", "recall": "max"}
"""Every value a run may compute without a declared metric (the scores of a classification run too)."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")

DirectionLookup = Callable[[str, Sequence[Any]], str]
_lookups: list[DirectionLookup] = []


def register_direction_lookup(lookup: DirectionLookup) -> None:
    """Teach :meth:`MonitorSpec.resolve` a declared metric's direction: ``lookup(label, metrics)``
    returns "min" or "max" (the metric registry lives outside the core)."""
    if lookup not in _lookups:
        _lookups.append(lookup)


def _direction(label: str, metrics: Sequence[Any]) -> str | None:
    for lookup in _lookups:
        try:
            return lookup(label, metrics)
        except LookupError:  # e.g. a metric not registered (yet): fall back to what the spec says
            break
    for spec in metrics:
        if getattr(spec, "label", None) == label and getattr(spec, "mode", None) in MODES:
            return str(spec.mode)
    return BUILTIN_MODES.get(label)


@dataclasses.dataclass(frozen=True, slots=True)
class MonitorSpec(Stateful):
    """Which value to watch: ``metric`` on ``split`` ("val" or the whole-epoch "train" summary).

    ``MonitorSpec("f1", mode="max")``. ``mode`` left at None is filled in at once for loss and
    error ("min"); a declared metric's direction comes from :meth:`resolve`. ``state()`` holds
    ``mode`` only when it is not that natural direction, so a filled-in one changes no run id.
    ``metric`` is a name of letters, digits, ``.``, ``_`` and ``-``. ``on_missing`` /
    ``on_nonfinite``: "skip" (the epoch does not improve) or "error" (raise
    ``MonitorUnavailableError``).
    """

    metric: str = "loss"
    split: str = "val"
    mode: str | None = dataclasses.field(default=None, metadata=OMIT)
    min_delta: float = 0.0
    on_missing: str = "skip"
    on_nonfinite: str = "skip"

    @property
    def key(self) -> str:
        """``"split.metric"`` (``"val.loss"``, ``"train.f1"``): how records and messages name it."""
        return f"{self.split}.{self.metric}"

    def __post_init__(self) -> None:
        check_str("MonitorSpec.metric", self.metric)
        if not _NAME.fullmatch(self.metric):
            raise ParamsError(
                "MonitorSpec.metric",
                f"must be a metric name of letters, digits, '.', '_' and '-' (the part after 'val.' / 'train.'), "
                f"got {self.metric!r}",
            )
        check_choice("MonitorSpec.split", self.split, SPLITS)
        if self.mode is not None:
            check_choice("MonitorSpec.mode", self.mode, MODES)
        elif self.metric in RECORD_MODES:
            object.__setattr__(self, "mode", RECORD_MODES[self.metric])
        check_float("MonitorSpec.min_delta", self.min_delta, minimum=0.0)
        check_choice("MonitorSpec.on_missing", self.on_missing, POLICIES)
        check_choice("MonitorSpec.on_nonfinite", self.on_nonfinite, POLICIES)

    def check_names(self, metrics: Sequence[Any], owner: str = "monitor") -> None:
        """Refuse a metric that is neither a built-in value nor declared in ``metrics`` (objects
        with a ``label``, as ``MetricSpec``)."""
        labels = [str(getattr(spec, "label", spec)) for spec in metrics]
        if self.metric in BUILTIN_MODES or self.metric in labels:
            return
        declared = ", ".join(["loss", "error", *sorted(labels)])
        raise ParamsError(
            owner,
            f"monitor {self.key!r} names an undeclared metric; declared: {declared} (a classification run also "
            f"computes accuracy, f1, precision and recall); a run does not compute {self.metric!r} unless "
            f"metrics=(MetricSpec({self.metric!r}),) declares it",
        )

    def resolve(self, metrics: Sequence[Any], owner: str = "monitor") -> MonitorSpec:
        """This spec checked against the declared ``metrics``, with ``mode`` filled in from the
        metric's own direction when it is None (``MonitorSpec("accuracy")`` → "max")."""
        self.check_names(metrics, owner)
        if self.mode is not None:
            return self
        mode = _direction(self.metric, metrics)
        if mode is None:
            raise ParamsError(owner, f"{owner} {self.key!r}: the direction of {self.metric!r} is unknown; give mode='min' or 'max'")
        return dataclasses.replace(self, mode=mode)

    def step_problem(self, *, default_step: bool) -> str | None:
        """Why this monitor can never have a value when a step function (or an objective) trains
        instead of the default step (``default_step=False``): the whole-epoch training summary is
        then built from the step's records alone, which carry loss and error but no declared metric."""
        if default_step or self.split != "train" or self.metric in RECORD_MODES:
            return None
        return (
            f"monitor {self.key!r} needs {self.metric!r} over the whole training epoch, which only the default "
            f"training step records (a step function's records give loss and error); monitor "
            f"'val.{self.metric}' or 'train.loss' instead"
        )

    def improved(self, current: float, best: float | None) -> bool:
        """The shared rule (:func:`improves`) in this spec's direction; a spec without a direction
        must be resolved first."""
        if self.mode is None:
            raise ParamsError(
                "MonitorSpec.mode", f"monitor {self.key!r} has no direction yet; resolve() it against the declared metrics"
            )
        return improves(current, best, self.mode, self.min_delta)


_plain_state: Callable[[Any], Any] = converter.get_unstructure_hook(MonitorSpec)  # the generated one, before ours


def _unstructure_spec(spec: MonitorSpec) -> Any:
    state = _plain_state(spec)
    if "mode" in state and RECORD_MODES.get(spec.metric) == state["mode"]:
        del state["mode"]  # the natural direction, filled in: the same state (and run id) as before
    return state


converter.register_unstructure_hook(MonitorSpec, _unstructure_spec)


@attrs.frozen(kw_only=True)
class MonitorDecision:
    """The epoch's one decision: the value read, its status, whether it improved, the best so far."""

    epoch: int
    value: float | None
    status: str  # "ok" | "missing" | "nonfinite"
    improved: bool
    best: float | None


def improves(value: float, best: float | None, mode: str, min_delta: float) -> bool:
    """The shared improvement rule."""
    if not math.isfinite(value):
        return False
    if best is None:
        return True
    return value < best - min_delta if mode == "min" else value > best + min_delta


class Monitor:
    """Makes the epoch decision and remembers the best value (a checkpointed component)."""

    def __init__(self, spec: MonitorSpec | None, mode: str = "min") -> None:
        self.spec = spec
        self.mode = (spec.mode or mode) if spec else "min"
        self.min_delta = spec.min_delta if spec else 0.0
        self.best: float | None = None
        self.best_epoch: int | None = None
        self.warn_missing = False

    @property
    def label(self) -> str:
        """``split.metric`` for a named monitor, ``fallback`` otherwise."""
        return self.spec.key if self.spec else FALLBACK

    def read(self, idp: IterationDataPoint) -> float | None:
        """The monitored value of an epoch's last record (None when missing)."""
        if self.spec is None:
            return fallback_signal(idp)
        edp = idp.val_edp if self.spec.split == "val" else (idp.train_summary or idp.train_edp)
        if edp is None:
            return None
        metric = self.spec.metric
        # a declared metric wins over a built-in field of the same name (e.g. f1 with average="micro")
        return edp.metrics[metric] if metric in edp.metrics else edp.get(metric)

    def decide(self, epoch: int, idp: IterationDataPoint) -> MonitorDecision:
        """Decide for one epoch and update the best value."""
        return self.judge(self.read(idp), epoch)

    def judge(self, value: float | None, epoch: int) -> MonitorDecision:
        """Decide on one epoch's value (None: missing) and update the best value. A missing
        value warns once when ``warn_missing`` is set (a monitor nothing feeds never selects)."""
        if value is None:
            status = "missing"
            if self.spec and self.spec.on_missing == "error":
                raise MonitorUnavailableError(
                    f"monitor {self.label!r} has no value at epoch {epoch}; compute it (metrics=..., a val_loader) "
                    "or set on_missing='skip'"
                )
            if self.warn_missing and self.spec is not None:
                self.warn_missing = False
                warnings.warn(
                    f"epoch {epoch}: monitor {self.label!r} has no value, so the epoch selects no BEST and steps no "
                    "plateau (said once a run); a custom train or eval step must put the metric in its record's "
                    "metrics",
                    RuntimeWarning,
                    stacklevel=4,
                )
        elif not math.isfinite(value):
            status = "nonfinite"
            if self.spec and self.spec.on_nonfinite == "error":
                raise MonitorUnavailableError(f"monitor {self.label!r} is non-finite ({value}) at epoch {epoch}")
        else:
            status = "ok"
        improved = status == "ok" and improves(value, self.best, self.mode, self.min_delta)  # type: ignore[arg-type]
        if improved:
            self.best, self.best_epoch = value, epoch
        return MonitorDecision(epoch=epoch, value=value, status=status, improved=improved, best=self.best)

    def observe(self, value: float | None, *, epoch: int) -> MonitorRecord:
        """:meth:`judge` one value and return the epoch's record (NNx's tracker call)."""
        return self.record(self.judge(None if value is None else float(value), epoch))

    def record(self, decision: MonitorDecision) -> MonitorRecord:
        """The decision as stored on the epoch's last record."""
        spec = self.spec
        return MonitorRecord(
            metric=spec.metric if spec else FALLBACK,
            split=spec.split if spec else FALLBACK,
            mode=self.mode,
            value=decision.value,
            status=decision.status,
            improved=decision.improved,
            best=decision.best,
        )

    # checkpointed component protocol
    def component_spec(self) -> tuple[str, int]:
        """Component name and schema version."""
        return ("nnx.monitor", 1)

    def component_state(self) -> dict[str, Any]:
        """Best value and epoch, plus identity (label, direction, min_delta) for mismatch checks."""
        return {
            "label": self.label,
            "mode": self.mode,
            "min_delta": self.min_delta,
            "best": self.best,
            "best_epoch": self.best_epoch,
        }

    def check_component_state(self, state: Mapping[str, Any], *, version: int | None = None) -> list[str]:
        """Problems restoring ``state`` into this monitor (empty when it fits): a different
        metric, split, direction or min_delta would make the saved best mean something else."""
        saved = (state.get("label"), state.get("mode"), state.get("min_delta", self.min_delta))
        if saved != (self.label, self.mode, self.min_delta):
            return [
                f"nnx.monitor: the checkpoint's monitor is {saved[0]} ({saved[1]}, min_delta={saved[2]}) but this run "
                f"monitors {self.label} ({self.mode}, min_delta={self.min_delta}); resume with the same monitor "
                "or resume_mode='weights_only'"
            ]
        return []

    def load_component_state(self, state: Mapping[str, Any], *, version: int | None = None) -> None:
        """Continue from a saved best value."""
        self.best, self.best_epoch = state.get("best"), state.get("best_epoch")


class MonitorTracker(Monitor):
    """A named monitor applied value by value: ``observe(value, epoch=...)`` returns the epoch's
    ``MonitorRecord`` and keeps ``best`` / ``best_epoch``. The spec needs a direction (loss and
    error have one; ``spec.resolve(metrics)`` gives a declared metric its own).
    ``warn_missing=True`` warns the first time a value is missing."""

    def __init__(self, spec: MonitorSpec, *, warn_missing: bool = False) -> None:
        if spec.mode is None:
            raise ParamsError(
                "MonitorTracker.spec", f"monitor {spec.key!r} has no direction yet; pass spec.resolve(metrics) or a mode"
            )
        super().__init__(spec, spec.mode)
        self.warn_missing = warn_missing
