"""A run's configuration in one line, as NNx's ``str(run)`` lays it out (``NNRun.__str__``):
loss, device and net (a built-in net with its dims, dropout and activation; a registered one as
``id@vN`` with its config and seed), the epochs, the optimizer and the schedule."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def run_summary(config: Mapping[str, Any]) -> str:
    """``{loss=…, device=…, net=…, …, n_epochs=…, max_lr=…, momentum=…, decay=…, scheduler=[…]}``:
    a run's configuration as NNx's ``str(run)`` lays it out (a built-in net with its dims,
    dropout and activation; a registered one as ``id@vN``, ``kind=registered``, its config and
    seed)."""
    model, net, train = config.get("model") or {}, config.get("net") or {}, config.get("train") or {}
    parts = [f"loss={model.get('loss')}", f"device={model.get('device')}"]
    described = model.get("net")
    if isinstance(described, Mapping):  # a ModelSpec
        parts += [f"net={described.get('id')}@v{described.get('version', 1)}", "kind=registered",
                  f"config={json.dumps(described.get('config') or {}, sort_keys=True)}", f"seed={described.get('seed', 0)}"]
    else:
        parts.append(f"net={described}")
        if net:
            dims = [net.get("input_dim"), *(net.get("hidden_dims") or ()), net.get("output_dim")]
            parts += [f"dims={dims}", f"dropout={net.get('dropout_prob')}", f"activation={net.get('activation')}",
                      f"n_heads={net.get('n_heads')}"]
    parts.append(f"n_epochs={train.get('n_epochs')}")
    optim = train.get("optim")
    if isinstance(optim, Mapping):
        momentum = optim.get("momentum")
        parts += [f"max_lr={optim.get('max_lr')}", f"momentum={tuple(momentum) if isinstance(momentum, list) else momentum}",
                  f"decay={optim.get('weight_decay')}"]
    scheduler = train.get("scheduler")
    if isinstance(scheduler, Mapping):
        kind = scheduler.get("kind") or "plateau"
        if kind == "plateau":
            shown = [f"patience={scheduler.get('patience')}", f"cooldown={scheduler.get('cooldown')}",
                     f"factor={scheduler.get('factor'):.0e}", f"threshold={scheduler.get('threshold'):.0e}",
                     f"min_lr={scheduler.get('min_lr'):.0e}"]
        else:
            shown = [f"{k}={v}" for k, v in scheduler.items() if k != "kind"]
        parts.append(f"scheduler=[{', '.join([kind, *shown])}]")
    return "{" + ", ".join(parts) + "}"


__all__ = ["run_summary"]
