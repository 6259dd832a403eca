"""The monitor's vocabulary: which value to watch (``MonitorSpec``) and the improvement rule.

The rule (``improves``): the first finite value improves; a later one must beat the best by more
than ``min_delta`` in the monitor's direction; ties never improve; a non-finite value never
improves. ``FALLBACK`` names the documented signal of a run without a named monitor (first finite
of val error, val loss, train error, train loss; direction min: ``nnx_core.monitor.fallback_signal``).
A declared metric's direction comes from the lookups ``register_direction_lookup`` installs (the
metric registry lives outside the core).

The records (``nnx_core.records``: ``MonitorRecord.monitor``) and the monitor that decides
(``nnx_core.monitor``) both import this module; it imports neither.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nnx_core.convert import OMIT, Stateful, converter
from nnx_core.errors import ParamsError
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


def improves(value: float, best: float | None, mode: str, min_delta: float) -> bool:
    """The shared improvement rule."""
    if not math.isfinite(value):
        return False
    if best is None:
        return True
    return value < best - min_delta if mode == "min" else value > best + min_delta
