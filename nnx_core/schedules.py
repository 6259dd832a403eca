"""Reduce-on-plateau as a rule over the epoch's monitor decision.

It has no comparator of its own: an epoch is "bad" exactly when the run's one
``MonitorDecision`` did not improve (missing values do not count). After more than ``patience``
bad epochs each group's learning rate is multiplied by ``factor`` (not below ``min_lr``) and
``cooldown`` epochs follow in which bad epochs are not counted — torch's ReduceLROnPlateau
semantics, fed by the shared decision.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs


@attrs.define(kw_only=True)
class PlateauRule:
    """State and rule of a reduce-on-plateau schedule."""

    factor: float
    patience: int
    cooldown: int
    min_lr: float
    bad_epochs: int = 0
    cooldown_left: int = 0
    reductions: list[int] = attrs.field(factory=list)

    def step(self, epoch: int, improved: bool, status: str, lrs: list[float], set_lr: Callable[[int, float], None]) -> bool:
        """Account one epoch decision; return whether the learning rate was reduced."""
        if status == "missing":
            return False
        self.bad_epochs = 0 if improved else self.bad_epochs + 1
        if self.cooldown_left > 0:
            self.cooldown_left -= 1
            self.bad_epochs = 0
        if self.bad_epochs <= self.patience:
            return False
        for i, lr in enumerate(lrs):
            set_lr(i, max(lr * self.factor, self.min_lr))
        self.cooldown_left, self.bad_epochs = self.cooldown, 0
        self.reductions.append(epoch)
        return True

    def state(self) -> dict[str, Any]:
        """Counters (for checkpoints)."""
        return {"bad_epochs": self.bad_epochs, "cooldown_left": self.cooldown_left, "reductions": list(self.reductions)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state`."""
        self.bad_epochs = int(state["bad_epochs"])
        self.cooldown_left = int(state["cooldown_left"])
        self.reductions = [int(e) for e in state["reductions"]]
