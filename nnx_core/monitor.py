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
from collections.abc import Mapping
from typing import Any

import attrs

from nnx_core.convert import OMIT, Stateful
from nnx_core.errors import MonitorUnavailableError
from nnx_core.records import IterationDataPoint, MonitorRecord, fallback_signal
from nnx_core.validate import check_choice, check_float, check_str

SPLITS = ("val", "train")
MODES = ("min", "max")
POLICIES = ("skip", "error")
FALLBACK = "fallback"


@dataclasses.dataclass(frozen=True, slots=True)
class MonitorSpec(Stateful):
    """Which value to watch: ``metric`` on ``split`` ("val" or the whole-epoch "train" summary).

    ``MonitorSpec("f1", mode="max")``. ``mode`` defaults to the metric's own direction (min for
    loss/error) and is in ``state()`` only when set. ``on_missing`` / ``on_nonfinite``: "skip"
    (the epoch does not improve) or "error" (raise ``MonitorUnavailableError``).
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
        check_choice("MonitorSpec.split", self.split, SPLITS)
        if self.mode is not None:
            check_choice("MonitorSpec.mode", self.mode, MODES)
        check_float("MonitorSpec.min_delta", self.min_delta, minimum=0.0)
        check_choice("MonitorSpec.on_missing", self.on_missing, POLICIES)
        check_choice("MonitorSpec.on_nonfinite", self.on_nonfinite, POLICIES)


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
        value = self.read(idp)
        if value is None:
            status = "missing"
            if self.spec and self.spec.on_missing == "error":
                raise MonitorUnavailableError(
                    f"monitor {self.label} has no value at epoch {epoch}; compute it (metrics=..., a val_loader) "
                    "or set on_missing='skip'"
                )
        elif not math.isfinite(value):
            status = "nonfinite"
            if self.spec and self.spec.on_nonfinite == "error":
                raise MonitorUnavailableError(f"monitor {self.label} is {value} at epoch {epoch}")
        else:
            status = "ok"
        improved = status == "ok" and improves(value, self.best, self.mode, self.min_delta)  # type: ignore[arg-type]
        if improved:
            self.best, self.best_epoch = value, epoch
        return MonitorDecision(epoch=epoch, value=value, status=status, improved=improved, best=self.best)

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
