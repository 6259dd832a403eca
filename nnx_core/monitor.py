"""One monitor decision per epoch, obeyed by BEST, the plateau scheduler and EarlyStopping.

What is watched and the improvement rule are the monitor's vocabulary (``nnx_core.monitor_spec``:
``MonitorSpec``, ``improves``, ``FALLBACK``). Without a named monitor the signal is the documented
fallback (``fallback_signal``: first finite of val error, val loss, train error, train loss;
direction min).

``Monitor`` is a checkpointed component (``nnx.monitor``): its best value survives a stateful
resume, so decisions after a resume equal those of an uninterrupted run.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import attrs

from nnx_core.errors import MonitorUnavailableError, ParamsError
from nnx_core.monitor_spec import FALLBACK, MonitorSpec, improves
from nnx_core.records import IterationDataPoint, MonitorRecord


@attrs.frozen(kw_only=True)
class MonitorDecision:
    """The epoch's one decision: the value read, its status, whether it improved, the best so far."""

    epoch: int
    value: float | None
    status: str  # "ok" | "missing" | "nonfinite"
    improved: bool
    best: float | None


def first_finite(*values: float | None) -> float | None:
    """The first value that is a finite number, else None."""
    for value in values:
        if value is not None and math.isfinite(value):
            return value
    return None


def fallback_signal(idp: IterationDataPoint | None) -> float | None:
    """The documented default signal: first finite of val error, val loss, train error, train loss.

    The training side uses the whole-epoch summary when there is one, else the last batch.
    """
    if idp is None:
        return None
    val = idp.val_edp
    train = idp.monitored_train_edp()
    return first_finite(
        val.error if val else None,
        val.loss if val else None,
        train.error,
        train.loss,
    )


def warn_nonfinite_fallback(idp: IterationDataPoint, epoch: int) -> None:
    """Warn (``RuntimeWarning``) when the fallback signal skips non-finite candidates: which ones,
    and the value it uses instead, if any."""
    val, train = idp.val_edp, idp.monitored_train_edp()
    candidates = (("val_edp.error", val.error if val else None), ("val_edp.loss", val.loss if val else None),
                  ("train_edp.error", train.error), ("train_edp.loss", train.loss))
    rejected = [f"{name}={value}" for name, value in candidates if value is not None and not math.isfinite(value)]
    if not rejected:
        return
    chosen = next(((name, value) for name, value in candidates if value is not None and math.isfinite(value)), None)
    using = f"using {chosen[0]}={chosen[1]}" if chosen else "no finite value remains: the epoch selects no BEST"
    warnings.warn(f"epoch {epoch}: ignoring non-finite metric(s) {', '.join(rejected)} for the fallback monitor; {using}",
                  RuntimeWarning, stacklevel=4)


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
        """Decide for one epoch and update the best value. The fallback monitor warns when it
        passes over a non-finite candidate (as NNx's plateau signal does)."""
        if self.spec is None:
            warn_nonfinite_fallback(idp, epoch)
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
