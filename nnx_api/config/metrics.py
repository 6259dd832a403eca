"""Named metrics (``MetricSpec``) and the monitor spec.

A ``MetricSpec`` holds no code: ``MetricSpec("f1", config={"average": "micro"}, name="f1_micro")``
is ``(id, version, config, name)``. The registry maps ``(id, version)`` to an accumulator factory;
an unknown pair is refused before any run folder is created.

A declared or monitored value must arrive: ``unarrived`` names each one that a run's first epoch's
records lack (a custom train or eval step that never puts it in its record), and the session
refuses that epoch before it is committed. ``MetricSpec(..., optional=True)`` excepts a metric
that a step gives only sometimes; later epochs without the monitored value follow the monitor's
``on_missing``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from nnx_core.convert import OMIT, Stateful
from nnx_core.errors import MonitorUnavailableError, ParamsError
from nnx_core.monitor_spec import BUILTIN_MODES, MonitorSpec
from nnx_core.validate import check_int, check_str
from nnx_adapters.pytorch.host_metrics import HostAccumulator
from nnx_adapters.pytorch.metrics import registered_entry

__all__ = ["MetricSpec", "MonitorSpec", "computed_names", "monitor_problems", "refuse_unarrived", "unarrived",
           "undeclared_monitor"]

RESERVED = ("loss", "error")
_SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _json_like(value: Any) -> bool:
    """Whether ``value`` is plain JSON data (a finite float; string keys)."""
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_json_like(v) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _json_like(v) for k, v in value.items())
    return False


@dataclasses.dataclass(frozen=True, slots=True)
class MetricSpec(Stateful):
    """A declared metric. ``label`` (``name`` or ``id``) is how records and monitors name it;
    ``config``, ``name`` and ``optional`` are in ``state()`` only when set. A declared metric
    must be in the records of a run's first epoch (under a custom train or eval step, the step
    puts it there); ``optional=True`` lets a record lack it."""

    id: str
    version: int = 1
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict, metadata=OMIT)
    name: str | None = dataclasses.field(default=None, metadata=OMIT)
    optional: bool = dataclasses.field(default=False, metadata=OMIT)

    def __post_init__(self) -> None:
        check_str("MetricSpec.id", self.id)
        if _SLUG.fullmatch(self.id) is None:
            raise ParamsError("MetricSpec.id", f"must be a slug (letters, digits, '.', '_', '-'), got {self.id!r}")
        object.__setattr__(self, "version", check_int("MetricSpec.version", self.version, minimum=1))
        config = {} if self.config is None else self.config
        if not isinstance(config, Mapping) or not all(isinstance(key, str) for key in config):
            raise ParamsError("MetricSpec.config", f"must be a mapping with string keys, got {config!r}")
        if not _json_like(config):
            raise ParamsError("MetricSpec.config", f"must be JSON-like (None, bool, int, finite float, str, lists "
                                                   f"and string-keyed mappings), got {config!r}")
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

    def check(self) -> None:
        """Refuse (``ParamsError``) a config the registered metric does not take."""
        entry = registered_entry(self.id, self.version)
        problems = entry.check_config(self.config) if entry.check_config else []
        if problems:
            raise ParamsError("MetricSpec.config", "; ".join(problems))

    @property
    def input(self) -> str:
        """What the registered metric reads: ``"labels"``, ``"probabilities"`` or ``"continuous"``."""
        return registered_entry(self.id, self.version).input

    @property
    def mode(self) -> str:
        """The registered metric's direction: ``"min"`` or ``"max"``."""
        return registered_entry(self.id, self.version).mode

    def accumulator(self) -> HostAccumulator:
        """A fresh accumulator of this metric for use outside a run: ``update(target, prediction)``
        per batch, ``result()`` over the whole sample (None before any)."""
        return HostAccumulator(registered_entry(self.id, self.version), self.config)

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
    if monitor.metric in BUILTIN_MODES and monitor.metric not in names and task_kind not in ("categorical", "multilabel"):
        problems.append(  # a classifier's score in a run of another task: no MetricSpec makes it computed
            f"monitor {monitor.split}.{monitor.metric} names a value this run does not compute: {monitor.metric} is "
            f"computed for a classification run only, and this {task_kind} run computes {', '.join(names)} on "
            f"{monitor.split}; monitor one of those (MonitorSpec('loss', split={monitor.split!r})) or declare a metric "
            "of its task (metrics=(MetricSpec('mae'),))"
        )
    elif monitor.metric not in names:
        problems.append(
            f"monitor {monitor.split}.{monitor.metric} names a value this run does not compute "
            f"(a {task_kind} run computes {', '.join(names)} on {monitor.split}); declare it in "
            f"metrics=(MetricSpec({monitor.metric!r}),) or monitor one of those"
        )
    if monitor.split == "val" and not has_val:
        problems.append("the monitor reads split 'val' but no val_loader is configured; pass one or use split='train'")
    return problems


def undeclared_monitor(monitor: MonitorSpec, specs: tuple[MetricSpec, ...], extra_names: Any, registered: Any) -> str | None:
    """Why ``monitor`` names no value a run could compute, when the reason is one of the usual
    mix-ups (None otherwise; a registered metric left undeclared is ``check_names``'s message):
    the split in the name (Keras's ``val_loss``), an ``extra_metrics`` function, or a name that
    is neither built in, declared nor registered."""
    labels = {s.label for s in specs}
    name = monitor.metric
    if name in BUILTIN_MODES or name in labels:
        return None
    mode = f", mode={monitor.mode!r}" if monitor.mode is not None else ""
    for split in ("val", "train"):
        for sep in ("_", "."):
            rest = name[len(split) + 1:] if name.startswith(split + sep) else ""
            if rest and (rest in BUILTIN_MODES or rest in labels or rest in registered):
                return (f"monitor {name!r} puts the split in the metric's name (Keras's spelling); NNx names the split "
                        f"apart: MonitorSpec({rest!r}, split={split!r}{mode})")
    if name in (extra_names or ()):
        return (f"{name!r} is an extra_metrics function: extra metrics are reported in each record's extra but cannot be "
                "monitored (the monitor chooses BEST and is part of the run id; a function is not). To select by it, "
                f"register it as a metric (nnx.register_metric({name!r}, 1, factory, input='labels', mode='max')) and "
                f"declare metrics=(MetricSpec({name!r}),); or monitor a built-in value (loss, error, accuracy, f1)")
    if name in registered:
        return None
    return (f"monitor {monitor.key!r} names {name!r}, which is neither a built-in value ({', '.join(BUILTIN_MODES)}) "
            f"nor declared in metrics= ({', '.join(sorted(labels)) or 'none'}) nor a registered metric; register it "
            f"with nnx.register_metric({name!r}, 1, factory, input=..., mode=...) and declare "
            f"metrics=(MetricSpec({name!r}),), or monitor one of those")


def unarrived(specs: tuple[MetricSpec, ...], monitor: MonitorSpec | None, last: Any) -> list[str]:
    """The declared metrics (``specs``, optional ones excepted) that an epoch's validation record
    lacks, and the user's ``monitor`` that its split's record lacks (``last``: the epoch's last
    record, with ``train_summary`` and ``val_edp``), as ``split.name``; a split without a record is
    not looked at. Declared metrics are validation's: an objective's or a step's training summary
    may leave them out."""
    optional = {s.label for s in specs if s.optional}
    records = {"train": last.train_summary, "val": last.val_edp}
    wanted = [("val", s.label) for s in specs if not s.optional]
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
    (the session calls it on a run's first epoch, before it is committed); nothing when every
    value arrived."""
    missing = unarrived(specs, monitor, last)
    if missing:
        raise MonitorUnavailableError(
            f"epoch {epoch}'s records lack {', '.join(missing)}, which this run declares (metrics=) or monitors "
            "(monitor=); nothing of the epoch is committed. A custom train or eval step must put each in the "
            "record it returns (EvaluationDataPoint(..., metrics={name: value}); ctx.metrics lists the declared "
            "ones), or declare one a step gives only sometimes as MetricSpec(..., optional=True)"
        )
