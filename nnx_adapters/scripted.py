"""Scripted fakes of the ``Optimizer`` and ``Clock`` ports: no torch, every call logged.

They let the core's rules (``nnx_core.update``, ``nnx_core.engine``, ``nnx_core.schedules``) be
driven and their order asserted without a framework, the way ``MemoryStorage`` stands in for a
disk and ``ThreadCollective`` for ranks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ScriptedOptimizer:
    """The ``Optimizer`` port as a script: ``finite`` answers the gradient check, ``steps``
    whether each ``step()`` commits (a loss scaler may skip one); every call lands in ``log``
    as ``"<call>:<name>"``."""

    def __init__(self, name: str = "default", log: list[str] | None = None, *, finite: bool = True,
                 steps: bool = True, lrs: list[float] | None = None) -> None:
        self.name = name
        self.log = log if log is not None else []
        self.finite = finite
        self.steps = steps
        self.updates = 0
        self._lrs = list(lrs or [0.1])

    def _record(self, call: str) -> None:
        self.log.append(f"{call}:{self.name}")

    def zero_grad(self) -> None:
        self._record("zero_grad")

    def scale_grads(self, factor: float) -> None:
        self._record(f"scale({factor:g})")

    def unscale(self) -> None:
        self._record("unscale")

    def grads_finite(self) -> bool:
        self._record("finite?")
        return self.finite

    def clip(self, max_norm: float) -> float:
        self._record(f"clip({max_norm:g})")
        return 0.0

    def step(self) -> bool:
        self._record("step")
        if self.steps:
            self.updates += 1
        return self.steps

    def state(self) -> Mapping[str, Any]:
        return {"updates": self.updates, "lrs": list(self._lrs)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.updates, self._lrs = int(state["updates"]), list(state["lrs"])

    @property
    def lrs(self) -> list[float]:
        return list(self._lrs)


class ScriptedClock:
    """The ``Clock`` port as a script: counts its ticks (and the values they were given)."""

    def __init__(self, clock: str = "epoch", kind: str = "step", budget: int | None = None) -> None:
        self._clock, self._kind, self._budget = clock, kind, budget
        self._ticks = 0
        self.values: list[float | None] = []

    @property
    def clock(self) -> str:
        return self._clock

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def budget(self) -> int | None:
        return self._budget

    @property
    def ticks(self) -> int:
        return self._ticks

    def tick(self, value: float | None = None) -> None:
        self._ticks += 1
        self.values.append(value)

    def state(self) -> Mapping[str, Any]:
        return {"ticks": self._ticks}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self._ticks = int(state["ticks"])
