"""What a stateful resume restores, checked before anything is touched and put back whole.

* ``collect_components``: the run's checkpointed components by name (callbacks, the monitor, an
  objective's update engine, update-clock schedules).
* ``restore_problems``: everything that keeps a checkpoint from being restored here — optimizer
  names, types and parameter topology, schedule kinds, every component — as one list, before
  anything is written.
* ``training_state``: the optimizer part of a checkpoint, as an NNModel or a Trainer writes it.
* ``restore_checkpoint``: weights, optimizer and schedule states, components and RNG streams;
  weights, optimizer states, components and RNG streams are put back if any part fails.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from nnx_core.errors import ComponentRestoreError
from nnx_core.schedules import PlateauRule
from nnx_adapters.pytorch import state as torch_state
from nnx_adapters.pytorch.optim import TorchClock
from nnx_api.callbacks.component_spec import call_with_version, spec_of
from nnx_api.runs.payload import CheckpointPayload


def restore_problems(
    payload: CheckpointPayload, optimizers: Mapping[str, Any], schedules: Mapping[str, Any], components: Mapping[str, Any]
) -> list[str]:
    """Everything that keeps a stateful resume from restoring ``payload`` here, before anything is
    touched: optimizer names, types and parameter topology, schedule kinds, and every component."""
    saved_opts, saved_scheds, _ = payload.named_state()
    if set(saved_opts) != set(optimizers):
        return [f"the optimizer names differ: checkpoint optimizers {sorted(saved_opts)} != this run's {sorted(optimizers)}"]
    problems = []
    for name, opt in optimizers.items():
        mine, saved = opt.state(), saved_opts[name]
        if saved["type"] != mine["type"]:
            problems.append(f"optimizer {name!r}: type {saved['type']} != {mine['type']} (optimizer type mismatch)")
        # a registered factory: same id, version and config, type-strict (1, 1.0 and True differ, as in run.yaml)
        if json.dumps(saved.get("factory"), sort_keys=True) != json.dumps(mine.get("factory"), sort_keys=True):
            problems.append(f"optimizer factory mismatch for {name!r}: {saved.get('factory')} != {mine.get('factory')}")
        if saved["topology"] != opt.topology():
            problems.append(f"optimizer {name!r}: parameter topology for {name!r} does not match the checkpoint's (the "
                            "optimizer parameter topology: names/shapes of its groups)")
        sched, saved_sched = schedules[name], saved_scheds[name]
        if ("bad_epochs" in saved_sched) != isinstance(sched, PlateauRule):
            problems.append(f"optimizer {name!r}: scheduler kind differs from the checkpoint's (scheduler type mismatch)")
        elif isinstance(sched, TorchClock) and saved_sched["type"] != sched.state()["type"]:
            problems.append(f"optimizer {name!r}: scheduler type {saved_sched['type']} != {sched.state()['type']} "
                            "(scheduler type mismatch)")
    saved, optional = payload.components, set(payload.optional_components)
    for name, obj in components.items():
        if name not in saved:
            if component_required(obj):  # an optional one simply starts fresh
                problems.append(f"missing required component {name!r}: it has no saved state in the checkpoint")
        elif hasattr(obj, "check_component_state"):
            problems.extend(call_with_version(obj.check_component_state, saved[name], spec_of(obj)[1]))
    problems += [
        f"unknown required component {name!r}: the checkpoint holds its state, but this run does not register it"
        for name in saved
        if name not in components and name not in optional
    ]
    return problems


def component_required(obj: Any) -> bool:
    """Whether a resume must restore ``obj``'s saved state (``component_required = False``: an
    optional component such as ``EarlyStopping`` starts fresh when the checkpoint has none, and
    its saved state is ignored by a run that does not register it; so does ``ComponentSpec(required=False)``)."""
    return spec_of(obj)[2]


def collect_components(objects: Sequence[Any]) -> dict[str, Any]:
    """The checkpointed components among ``objects`` by name; two different objects with one name
    are refused (``ComponentRestoreError``)."""
    found: dict[str, Any] = {}
    for obj in objects:
        if not hasattr(obj, "component_spec"):
            continue
        name = spec_of(obj)[0]
        if name in found and found[name] is not obj:
            raise ComponentRestoreError([f"two components are named {name!r}; give them distinct names"])
        found[name] = obj
    return found


def restore_checkpoint(
    view: CheckpointPayload, net: torch.nn.Module, optimizers: Mapping[str, Any], schedules: Mapping[str, Any],
    components: Mapping[str, Any], loaders: Sequence[Any],
) -> dict[str, int] | None:
    """Restore this rank's view of a checkpoint (``restore_problems`` found nothing in the way);
    returns the saved per-optimizer update counts (None: an NNModel checkpoint, one optimizer)."""
    saved_weights = {k: v.detach().clone() for k, v in net.state_dict().items()}
    saved_rng = torch_state.capture_rng()
    saved_optimizers = {n: o.state() for n, o in optimizers.items()}
    saved_components = {name: copy.deepcopy(obj.component_state()) for name, obj in components.items()
                        if name in view.components}
    try:
        net.load_state_dict(view.weights)
        opts, scheds, counts = view.named_state()
        for name, opt in optimizers.items():
            opt.load_state(opts[name])
            schedules[name].load_state(scheds[name])
        for name, obj in components.items():
            if name in view.components:  # an optional component without saved state starts fresh
                call_with_version(obj.load_component_state, view.components[name], spec_of(obj)[1])
        torch_state.restore_rng(view.rng, loaders)
    except BaseException:
        net.load_state_dict(saved_weights)
        for name, opt in optimizers.items():
            opt.load_state(saved_optimizers[name])
        torch_state.restore_rng(saved_rng)
        for name, before in saved_components.items():  # every component as it was before the call
            try:
                call_with_version(components[name].load_component_state, before, spec_of(components[name])[1])
            except Exception as exc:  # the first failure is the one raised; this one is said
                warnings.warn(f"component {name!r} could not be rolled back after a failed restore: {exc!r}",
                              RuntimeWarning, stacklevel=2)
        raise
    return {n: int(c) for n, c in counts.items()} if counts else None


def training_state(
    optimizers: Mapping[str, Any], schedules: Mapping[str, Any], primary: str, update_counts: Mapping[str, int], *,
    named: bool,
) -> dict[str, Any]:
    """The optimizer part of a checkpoint's fields: the primary's optimizer and schedule (an
    NNModel), or every named optimizer's with its update count (a Trainer)."""
    if not named:
        return {"optimizer": optimizers[primary].state(), "schedule": schedules[primary].state()}
    return {  # an NNModel resume sees a stateful checkpoint of another kind and refuses it
        "optimizer": {"type": "nnx.Trainer", "topology": None, "names": list(optimizers)},
        "schedule": {"type": "nnx.Trainer"},
        "optimizers": {n: o.state() for n, o in optimizers.items()},
        "schedules": {n: s.state() for n, s in schedules.items()},
        "update_counts": dict(update_counts),
    }
