"""Named metrics (``MetricSpec``) and the monitor spec.

A ``MetricSpec`` holds no code: ``MetricSpec("f1", config={"average": "micro"}, name="f1_micro")``
is ``(id, version, config, name)``. The registry maps ``(id, version)`` to an accumulator factory;
an unknown pair is refused before any run folder is created.

A declared or monitored value must arrive: ``unarrived`` names each one that the first epoch's
records lack (a custom train or eval step that never puts it in its record), and the session
refuses that epoch before it is committed. ``MetricSpec(..., optional=True)`` excepts a metric
that a step gives only sometimes; later epochs without the monitored value follow the monitor's
``on_missing``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nnx_core.convert import OMIT, Stateful
from nnx_core.errors import MonitorUnavailableError, ParamsError
from nnx_core.monitor_spec import MonitorSpec
from nnx_core.validate import check_int, check_str

__all__ = ["MetricSpec", "MonitorSpec", "computed_names", "monitor_problems", "refuse_unarrived", "unarrived"]

RESERVED = ("loss", "error")


@dataclasses.dataclass(frozen=True, slots=True)
class MetricSpec(Stateful):
    """A declared metric. ``label`` (``name`` or ``id``) is how records and monitors name it;
    ``config``, ``name`` and ``optional`` are in ``state()`` only when set. A declared metric
    must be in the first epoch's records of a ``train()`` call (under a custom train or eval
    step, the step puts it there); ``optional=True`` lets a record lack it."""

    id: str
    version: int = 1
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict, metadata=OMIT)
    name: str | None = dataclasses.field(default=None, metadata=OMIT)
    optional: bool = dataclasses.field(default=False, metadata=OMIT)

    def __post_init__(self) -> None:
        check_str("MetricSpec.id", self.id)
        object.__setattr__(self, "version", check_int("MetricSpec.version", self.version, minimum=1))
        config = {} if self.config is None else self.config
        if not isinstance(config, Mapping) or not all(isinstance(key, str) for key in config):
            raise ParamsError("MetricSpec.config", f"must be a mapping with string keys, got {config!r}")
        object.__setattr__(self, "config", dict(sorted(config.items())))
        if self.name is not None:
            check_str("MetricSpec.name", self.name)
        if not isinstance(self.optional, bool):
            raise ParamsError("MetricSpec.optional", f"must be True or False, got {self.optional!r}")
        if self.label in RESERVED:
            raise ParamsError("MetricSpec.name", f"{self.label!r} is reserved for the built-in loss/error fields")

    @property
    def label(self) -> str:
        """The metric's name in records."""
        return self.name or self.id

    def __hash__(self) -> int:
        return hash((self.id, self.version, self.label))


def computed_names(task_kind: str, split: str, specs: tuple[MetricSpec, ...]) -> tuple[str, ...]:
    """The values a run computes on ``split`` for a task: loss, the task's built-in scores and
    every declared metric. Validation of a categorical task adds macro f1/precision/recall; the
    whole-epoch training summary has loss, error and accuracy only."""
    names = ["loss"]
    if task_kind in ("categorical", "multilabel"):
        names += ["error", "accuracy"]
        if task_kind == "categorical" and split == "val":
            names += ["f1", "precision", "recall"]
    return (*names, *(s.label for s in specs))


def monitor_problems(monitor: MonitorSpec | None, specs: tuple[MetricSpec, ...], task_kind: str, has_val: bool) -> list[str]:
    """Why ``monitor`` can never see a value in this run (empty when it can)."""
    if monitor is None:
        return []
    problems = []
    names = computed_names(task_kind, monitor.split, specs)
    if monitor.metric not in names:
        problems.append(
            f"monitor {monitor.split}.{monitor.metric} names a value this run does not compute "
            f"(a {task_kind} run computes {', '.join(names)} on {monitor.split}); declare it in "
            f"metrics=(MetricSpec({monitor.metric!r}),) or monitor one of those"
        )
    if monitor.split == "val" and not has_val:
        problems.append("the monitor reads split 'val' but no val_loader was given; pass one or use split='train'")
    return problems


def unarrived(specs: tuple[MetricSpec, ...], monitor: MonitorSpec | None, last: Any) -> list[str]:
    """The declared metrics (``specs``, optional ones excepted) and the user's ``monitor`` that
    the records of an epoch (``last``: its last record, with ``train_summary`` and ``val_edp``)
    lack, as ``split.name``; a split without a record is not looked at."""
    optional = {s.label for s in specs if s.optional}
    records = {"train": last.train_summary, "val": last.val_edp}
    wanted = [(split, s.label) for s in specs if not s.optional for split in records]
    if monitor is not None and monitor.metric not in optional:
        wanted.append((monitor.split, monitor.metric))
    missing = []
    for split, name in dict.fromkeys(wanted):
        edp = records[split] if split == "val" else records[split] or last.train_edp
        if edp is not None and name not in edp.metrics and edp.get(name) is None:  # a declared one wins over a field
            missing.append(f"{split}.{name}")
    return missing


def refuse_unarrived(specs: tuple[MetricSpec, ...], monitor: MonitorSpec | None, last: Any, epoch: int) -> None:
    """``MonitorUnavailableError`` naming what ``unarrived`` finds in epoch ``epoch``'s records
    (the session calls it on a call's first epoch, before it is committed); nothing when every
    value arrived."""
    missing = unarrived(specs, monitor, last)
    if missing:
        raise MonitorUnavailableError(
            f"epoch {epoch}'s records lack {', '.join(missing)}, which this run declares (metrics=) or monitors "
            "(monitor=); nothing of the epoch is committed. A custom train or eval step must put each in the "
            "record it returns (EvaluationDataPoint(..., metrics={name: value}); ctx.metrics lists the declared "
            "ones), or declare one a step gives only sometimes as MetricSpec(..., optional=True)"
        )
