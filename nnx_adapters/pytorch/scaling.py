"""fp16 loss scaling: a ``GradScaler`` behind the ``Optimizer`` and ``LossScale`` ports.

* ``ScaledTorchOptimizer`` — the ``Optimizer`` port with a ``GradScaler`` (fp16 on CUDA):
  ``unscale`` divides the gradients by the loss scale, ``step`` goes through the scaler.
* ``TorchLossScale`` — the engine's ``LossScale`` over the same scaler (one update per window,
  after every optimizer of the commit stepped).
* ``ScaledLoss`` — wraps a task adapter so the loss numerator's gradient is multiplied by the
  loss scale as it enters autograd (a tensor hook): the default step's backward becomes a scaled
  backward without changing its code, and the recorded loss stays unscaled.
* ``AgreedGradScaler`` — a ``GradScaler`` whose overflow decision is a group's (``DDP()``): the
  found-inf flag of every ``unscale_`` is agreed over the ranks before ``step`` reads it, so every
  rank skips, or steps, and backs off its scale alike.

fp16 needs CUDA; these paths are written to torch's documented ``GradScaler`` protocol
(``scale`` → backward → ``unscale_`` → clip → ``step`` → ``update``) but are not exercised on a
GPU by this repository's tests (the scaler mechanics are, on CPU).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from nnx_adapters.pytorch.optim import TorchOptimizer


def make_grad_scaler(device: torch.device, agree: Callable[[bool], bool] | None = None) -> Any:
    """A ``GradScaler`` for ``device`` (fp16 runs are only admitted on CUDA); with ``agree`` (a
    group's overflow agreement) an ``AgreedGradScaler``."""
    if agree is None:
        return torch.amp.GradScaler(device.type)
    return AgreedGradScaler(device.type, agree)


class AgreedGradScaler(torch.amp.GradScaler):
    """A ``GradScaler`` whose skip-or-step decision is the group's.

    ``unscale_`` finds (or not) inf/NaN in this rank's gradients; ``agree(found)`` — called at
    the same point on every rank, True when any rank found one — then becomes every found-inf
    flag ``step`` and ``update`` read. So a scaler-skipped step is skipped on every rank and the
    scale backs off alike, even where the ranks' gradients differ (a custom step unscales before
    its gradients are summed). The flags are torch's own per-optimizer state, as in torch's
    sharded (FSDP) scaler; one host read per ``unscale_`` (``step`` reads the flag anyway).
    """

    def __init__(self, device: str, agree: Callable[[bool], bool]) -> None:
        super().__init__(device)
        self.agree = agree

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Unscale this rank's gradients, then make the overflow flag the group's."""
        super().unscale_(optimizer)
        if not self.is_enabled():
            return
        found = self._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
        overflow = self.agree(any(bool(flag.item()) for flag in found.values()))
        if not found:  # no gradient on this rank: it still takes the group's decision
            assert self._scale is not None
            found[self._scale.device] = torch.zeros((), dtype=torch.float32, device=self._scale.device)
        for flag in found.values():
            flag.fill_(1.0 if overflow else 0.0)


class ScaledTorchOptimizer(TorchOptimizer):
    """The ``Optimizer`` port with dynamic loss scaling.

    With ``auto_update`` (the default step: one optimizer) ``step`` also updates the scale and
    reports a scaler-skipped step (the scale went down) as not committed. The update engine sets
    ``auto_update=False`` and updates the shared scale once per window (``TorchLossScale``).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, names: Any, scaler: Any, *, auto_update: bool = True) -> None:
        super().__init__(optimizer, names)
        self.scaler = scaler
        self.auto_update = auto_update

    @classmethod
    def wrap(cls, opt: TorchOptimizer, scaler: Any, *, auto_update: bool = True) -> ScaledTorchOptimizer:
        """The same torch optimizer behind a scaled port."""
        wrapped = cls(opt.optimizer, opt._names, scaler, auto_update=auto_update)
        wrapped.factory = opt.factory
        return wrapped

    def unscale(self) -> None:
        """Divide the gradients by the loss scale (records overflow for ``step``)."""
        self.scaler.unscale_(self.optimizer)

    def step(self) -> bool:
        """Step through the scaler (it skips a step whose gradients overflowed)."""
        if not self.auto_update:
            self.scaler.step(self.optimizer)
            return True
        before = self.scaler.get_scale()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return not self.scaler.get_scale() < before

    def state(self) -> dict[str, Any]:
        """The optimizer's state plus the scaler's."""
        return {**super().state(), "scaler": self.scaler.state_dict()}

    def load_state(self, state: Any) -> None:
        """Restore both."""
        super().load_state(state)
        if "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])


class TorchLossScale:
    """The engine's ``LossScale`` over a ``GradScaler``."""

    def __init__(self, scaler: Any) -> None:
        self.scaler = scaler

    def update(self) -> None:
        """Grow or shrink the scale after a window."""
        self.scaler.update()


class ScaledLoss:
    """A task adapter whose loss numerator back-propagates a scaled gradient (fp16)."""

    def __init__(self, task: Any, scaler: Any) -> None:
        self._task = task
        self._scaler = scaler

    def __getattr__(self, name: str) -> Any:
        return getattr(self._task, name)

    def sum_terms(self, output: torch.Tensor, target: torch.Tensor, count: int | None = None) -> tuple[torch.Tensor, int]:
        """The task's (numerator, count); the numerator's gradient is multiplied by the scale."""
        total, count = self._task.sum_terms(output, target, count)
        if total.requires_grad:
            total.register_hook(self._scaler.scale)
        return total, count
