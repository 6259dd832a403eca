"""Named metrics (``MetricSpec``) and the monitor spec.

A ``MetricSpec`` holds no code: ``(id, version, config, name)``. The registry maps ``(id, version)``
to an accumulator factory; an unknown pair is refused before any run folder is created.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from nnx_core.errors import ParamsError
from nnx_core.monitor import MonitorSpec
from nnx_core.validate import check_int, check_str, validator

__all__ = ["MetricSpec", "MonitorSpec", "computed_names", "monitor_problems"]

RESERVED = ("loss", "error")


def _as_config(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ParamsError("MetricSpec.config", f"must be a mapping, got {type(value).__name__}")
    return dict(sorted(value.items()))


@attrs.frozen(kw_only=True)
class MetricSpec:
    """A declared metric. ``label`` (``name`` or ``id``) is how records and monitors name it."""

    id: str = attrs.field(validator=validator(check_str))
    version: int = attrs.field(default=1, validator=validator(check_int, minimum=1))
    config: Mapping[str, Any] = attrs.field(factory=dict, converter=_as_config)
    name: str | None = attrs.field(default=None)

    def __attrs_post_init__(self) -> None:
        if self.label in RESERVED:
            raise ParamsError("MetricSpec.name", f"{self.label!r} is reserved for the built-in loss/error fields")

    @property
    def label(self) -> str:
        """The metric's name in records."""
        return self.name or self.id

    def state(self) -> dict[str, Any]:
        """Plain mapping (``config``/``name`` only when set)."""
        out: dict[str, Any] = {"id": self.id, "version": self.version}
        if self.config:
            out["config"] = dict(self.config)
        if self.name:
            out["name"] = self.name
        return out

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> MetricSpec:
        """Inverse of :meth:`state`."""
        return cls(**state)

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
