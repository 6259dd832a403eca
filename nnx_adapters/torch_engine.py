"""torch adapters of the update engine's ports, and fp16 loss scaling.

* ``TorchGradientSlots`` — the engine's ``GradientSlots``: slot 0 is each parameter's ``.grad``,
  slots 1.. are side buffers (allocated only when a window mixes ≥2 scale classes).
* ``ScaledTorchOptimizer`` — the ``Optimizer`` port with a ``GradScaler`` (fp16 on CUDA):
  ``unscale`` divides the gradients by the loss scale, ``step`` goes through the scaler.
* ``TorchLossScale`` — the engine's ``LossScale`` over the same scaler (one update per window,
  after every optimizer of the commit stepped).
* ``ScaledLoss`` — wraps a task adapter so the loss numerator's gradient is multiplied by the
  loss scale as it enters autograd (a tensor hook): the default step's backward becomes a scaled
  backward without changing its code, and the recorded loss stays unscaled.

fp16 needs CUDA; these paths are written to torch's documented ``GradScaler`` protocol
(``scale`` → backward → ``unscale_`` → clip → ``step`` → ``update``) but are not exercised on a
GPU by this repository's tests (the scaler mechanics are, on CPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from nnx_adapters.torch_optim import TorchOptimizer


class TorchGradientSlots:
    """Gradient slots over a fixed list of parameters (the union of the run's optimizers)."""

    def __init__(self, params: Sequence[torch.Tensor], scaler: Any = None) -> None:
        self.params = list(params)
        self.scaler = scaler
        self._terms: Sequence[torch.Tensor] = ()
        self._buffers: dict[int, list[torch.Tensor | None]] = {}

    def set_terms(self, numerators: Sequence[torch.Tensor]) -> None:
        """The current microbatch's term numerators (the engine refers to them by index)."""
        self._terms = numerators

    def backward(self, plan: Sequence[tuple[int, Sequence[tuple[int, float]]]]) -> None:
        """Back-propagate each slot's weighted numerators; the graph is kept until the last slot."""
        todo = []
        for slot, parts in plan:
            total = None
            for index, scale in parts:
                term = self._terms[index]
                if not term.requires_grad:
                    continue  # a constant term has no gradient
                piece = term if scale == 1.0 else term * scale
                total = piece if total is None else total + piece
            if total is not None:
                todo.append((slot, total))
        for j, (slot, total) in enumerate(todo):
            if self.scaler is not None:
                total = self.scaler.scale(total)
            retain = j < len(todo) - 1
            if slot == 0:
                torch.autograd.backward(total, inputs=self.params, retain_graph=retain)
                continue
            grads = torch.autograd.grad(total, self.params, retain_graph=retain, allow_unused=True)
            buffer = self._buffers.setdefault(slot, [None] * len(self.params))
            for k, g in enumerate(grads):
                if g is not None:
                    buffer[k] = g if buffer[k] is None else buffer[k].add_(g)

    def combine(self, factors: Sequence[float]) -> None:
        """``.grad = factors[0]·.grad + Σ_k factors[k]·buffer_k``; buffers released."""
        first = factors[0]
        grads = [p.grad for p in self.params if p.grad is not None]
        if grads and first != 1.0:
            torch._foreach_mul_(grads, first)
        for slot, buffer in self._buffers.items():
            factor = factors[slot]
            if factor == 0.0:
                continue
            for p, b in zip(self.params, buffer, strict=True):
                if b is None:
                    continue
                if p.grad is None:
                    p.grad = b.mul_(factor)
                else:
                    p.grad.add_(b, alpha=factor)
        self._buffers.clear()

    def discard(self) -> None:
        """Drop every gradient and side buffer."""
        self._buffers.clear()
        self._terms = ()
        for p in self.params:
            p.grad = None


def make_grad_scaler(device: torch.device) -> Any:
    """A ``GradScaler`` for ``device`` (fp16 runs are only admitted on CUDA)."""
    return torch.amp.GradScaler(device.type)


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
        return cls(opt.optimizer, opt._names, scaler, auto_update=auto_update)

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

    def loss_terms(self, output: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, int]:
        """The task's (numerator, count); the numerator's gradient is multiplied by the scale."""
        total, count = self._task.loss_terms(output, target)
        if total.requires_grad:
            total.register_hook(self._scaler.scale)
        return total, count
