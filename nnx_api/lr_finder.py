"""``nnx.lr_finder``: a learning-rate range test (exponential sweep, loss per step).

The network and the optimizer it builds are scratch: the weights, the parameters' ``.grad``, every
submodule's train/eval flag, the Python, NumPy and torch RNG states and the loader's own generators
are put back when the sweep ends (also when it raises), and a persistent-worker iterator the sweep
created is dropped, so the test leaves no trace on the model or on the caller's next epoch. The
sweep runs in train mode.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import torch

from nnx_core.errors import ParamsError

__all__ = ["LRFinderResult", "lr_finder"]


@attrs.frozen
class LRFinderResult:
    """The sweep: ``lrs[i]`` and the smoothed loss ``losses[i]`` after step i, and
    ``suggested_lr`` (the lr of the steepest smoothed-loss descent)."""

    lrs: list[float]
    losses: list[float]
    suggested_lr: float

    @property
    def figure(self) -> Any:
        """A plotly figure of loss against lr (log x axis), built when read; needs the optional
        ``plotly`` package."""
        try:
            import plotly.graph_objects as go
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("LRFinderResult.figure needs plotly, which is not installed: pip install plotly") from exc
        fig = go.Figure(go.Scatter(x=self.lrs, y=self.losses, mode="lines"))
        fig.update_xaxes(type="log", title="learning rate")
        fig.update_yaxes(title="loss")
        return fig


def _batches(loader: Any) -> Any:
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise ParamsError("lr_finder.train_loader", "is empty: the train_loader produced zero batches")


def _generators(loader: Any) -> list[torch.Generator]:
    """The torch generators a loader draws its order from (its own, its sampler's, its batch sampler's)."""
    sampler, batches = getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)
    found = (getattr(loader, "generator", None), getattr(sampler, "generator", None),
             getattr(getattr(batches, "sampler", None), "generator", None), getattr(batches, "generator", None))
    return list(dict.fromkeys(g for g in found if isinstance(g, torch.Generator)))


def lr_finder(
    model: torch.nn.Module,
    train_loader: Any,
    *,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    optimizer_cls: type[torch.optim.Optimizer] = torch.optim.Adam,
    start_lr: float = 1e-7,
    end_lr: float = 10.0,
    num_iter: int = 100,
    diverge_threshold: float = 4.0,
    device: torch.device | None = None,
    ema_alpha: float = 0.5,
) -> LRFinderResult:
    """Train ``model`` for up to ``num_iter`` batches of ``train_loader`` (``(inputs, targets)``,
    cycled) with ``optimizer_cls`` while the lr grows geometrically from ``start_lr`` to
    ``end_lr``; record the exponentially smoothed loss (``ema_alpha``: the new loss's weight) and
    stop early once it exceeds ``diverge_threshold`` × the best. The model is restored afterwards
    (module docstring)."""
    if not 0 < start_lr < end_lr:
        raise ParamsError("lr_finder", f"needs 0 < start_lr < end_lr, got {start_lr} and {end_lr}")
    if not isinstance(num_iter, int) or num_iter < 2:
        raise ParamsError("lr_finder.num_iter", f"must be an int >= 2, got {num_iter!r}")
    if not diverge_threshold > 1:
        raise ParamsError("lr_finder.diverge_threshold", f"must be > 1 (a multiple of the best loss), got {diverge_threshold}")
    if not 0 < ema_alpha < 1:
        raise ParamsError("lr_finder.ema_alpha", f"must be between 0 and 1 (exclusive), got {ema_alpha}")
    cached = getattr(train_loader, "_iterator", None) is not None  # torch's persistent-worker iterator
    if cached and getattr(train_loader, "persistent_workers", False):
        raise ParamsError("lr_finder.train_loader", "has a live persistent-worker iterator, which the sweep would "
                          "advance; pass a fresh loader, or shut its workers down and clear the iterator first")
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    weights = copy.deepcopy(model.state_dict())
    grads = [(p, None if p.grad is None else p.grad.detach().clone()) for p in model.parameters()]
    modes = [(m, m.training) for m in model.modules()]
    rng = torch.get_rng_state(), random.getstate(), np.random.get_state()
    generators = [(g, g.get_state()) for g in _generators(train_loader)]
    factor = (end_lr / start_lr) ** (1.0 / (num_iter - 1))
    lrs: list[float] = []
    losses: list[float] = []
    try:
        model.train()
        optimizer = optimizer_cls([p for p in model.parameters() if p.requires_grad], lr=start_lr)
        smoothed, best = None, math.inf
        batches = _batches(train_loader)
        for step in range(num_iter):
            lr = start_lr * factor**step
            for group in optimizer.param_groups:
                group["lr"] = lr
            inputs, targets = next(batches)[:2]
            optimizer.zero_grad()
            loss = loss_fn(model(inputs.to(device)), targets.to(device))
            loss.backward()
            optimizer.step()
            value = float(loss.detach())
            smoothed = value if smoothed is None else ema_alpha * value + (1 - ema_alpha) * smoothed
            lrs.append(lr)
            losses.append(smoothed)
            best = min(best, smoothed)
            if not math.isfinite(smoothed) or smoothed > diverge_threshold * best:
                break
    finally:
        model.load_state_dict(weights)
        for parameter, grad in grads:
            parameter.grad = grad
        for module, training in modes:
            module.training = training
        torch.set_rng_state(rng[0])
        random.setstate(rng[1])
        np.random.set_state(rng[2])
        for generator, state in generators:
            generator.set_state(state)
        if not cached and getattr(train_loader, "_iterator", None) is not None:
            train_loader._iterator = None  # the workers the sweep started shut down; the caller's epoch starts fresh
    return LRFinderResult(lrs=lrs, losses=losses, suggested_lr=_suggest(lrs, losses))


def _suggest(lrs: list[float], losses: list[float]) -> float:
    """The lr where the smoothed loss falls fastest per log-lr step (the first lr without two finite points)."""
    finite = [(lr, loss) for lr, loss in zip(lrs, losses, strict=True) if math.isfinite(loss)]
    if len(finite) < 2:
        return float(lrs[0])
    slopes = [
        (b[1] - a[1]) / (math.log(b[0]) - math.log(a[0])) for a, b in zip(finite, finite[1:], strict=False)
    ]
    steepest = min(range(len(slopes)), key=slopes.__getitem__)
    return float(finite[steepest][0])
