"""``TorchGradientSlots``: the update engine's ``GradientSlots`` port over torch autograd.

Slot 0 is each parameter's ``.grad``; slots 1.. are side buffers of the same shapes, allocated
only when a window mixes two or more scale classes (``nnx_core.engine``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


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
        # parameters frozen now (requires_grad=False, e.g. for this epoch only) get no gradient
        live = [k for k, p in enumerate(self.params) if p.requires_grad]
        inputs = [self.params[k] for k in live]
        for j, (slot, total) in enumerate(todo):
            if self.scaler is not None:
                total = self.scaler.scale(total)
            retain = j < len(todo) - 1
            if slot == 0:
                torch.autograd.backward(total, inputs=inputs, retain_graph=retain)
                continue
            grads = torch.autograd.grad(total, inputs, retain_graph=retain, allow_unused=True)
            buffer = self._buffers.setdefault(slot, [None] * len(self.params))
            for k, g in zip(live, grads, strict=True):
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
