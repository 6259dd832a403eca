"""``nnx.components``: checkpointed components — state a run carries beside its weights.

A component is any object with ``component_spec()`` (a ``ComponentSpec(name, version=,
required=)``, or a plain ``(name, version)`` pair), ``component_state()`` (plain,
``torch.load(weights_only=True)``-safe data) and ``load_component_state(state, *, version)``;
``check_component_state(state, *, version)`` may list problems before anything is restored.
``ComponentSpec(required=False)`` (or a class attribute ``component_required = False`` beside a
plain pair) makes it optional: it starts fresh when a checkpoint has none. Pass extra ones as
``train(..., components=[...])``; callbacks and step functions that implement the protocol are
found by themselves. A stateful resume that cannot restore them raises one
``ComponentRestoreError`` listing every problem, before anything is changed.

``ComponentRegistry`` is the same contract on its own, for code that checkpoints components
itself: ``collect()`` the states, ``plan(saved)`` them (every problem in one report, nothing
touched) and ``restore(plan)`` (all or nothing: a failure puts every component back).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from nnx_core.errors import ComponentRestoreError, ParamsError
from nnx_core.ports import Component as StatefulComponent
from nnx_core.resume import ResumeStatus
from nnx_api.callbacks.builtin import EarlyStopping
from nnx_api.callbacks.component_spec import ComponentSpec, call_with_version, spec_of

COMPONENT_STATE_VERSION = 1
"""Version of the ``{name: state}`` mapping checkpoints keep under ``"components"``."""

__all__ = [
    "COMPONENT_STATE_VERSION", "ComponentPlan", "ComponentRegistry", "ComponentRestoreError", "ComponentSpec",
    "ResumeStatus", "StatefulComponent",
]


@attrs.define
class ComponentPlan:
    """What ``ComponentRegistry.restore`` will do: ``load`` (name → saved entry) and ``fresh`` (the
    optional components the checkpoint has no state for, left as they are)."""

    load: dict[str, Mapping[str, Any]]
    fresh: list[str]


class ComponentRegistry:
    """Named checkpointed components, in registration order; names are unique."""

    def __init__(self, components: Iterable[Any] = ()) -> None:
        self._components: dict[str, Any] = {}
        for component in components:
            self.register(component)

    @classmethod
    def discover(cls, callbacks: Iterable[Any] | None, *others: Any, explicit: Iterable[Any] = ()) -> ComponentRegistry:
        """The components among ``callbacks`` and ``others`` (step functions, objectives: whatever
        is not a ``StatefulComponent`` is skipped), then ``explicit`` ones, which must be components. Unnamed
        ``EarlyStopping`` callbacks are numbered in order (``early_stopping``, ``early_stopping.2``,
        ...), skipping names already taken."""
        registry = cls()
        found = [c for c in [*(callbacks or ()), *others] if isinstance(c, StatefulComponent)]
        for component in explicit or ():
            if not isinstance(component, StatefulComponent):
                raise ParamsError("components", f"{type(component).__name__} is not a StatefulComponent: it needs "
                                                "component_spec(), component_state() and load_component_state()")
            found.append(component)
        taken = {spec_of(c)[0] for c in found if not (isinstance(c, EarlyStopping) and c.name is None)}
        unnamed = 0
        for component in found:
            if isinstance(component, EarlyStopping) and component.name is None and component not in registry:
                unnamed += 1
                name = "early_stopping" if unnamed == 1 else f"early_stopping.{unnamed}"
                while name in taken:
                    unnamed += 1
                    name = f"early_stopping.{unnamed}"
                component.component_name = name
                taken.add(name)
            registry.register(component)
        return registry

    def __contains__(self, component: object) -> bool:
        return any(c is component for c in self._components.values())

    @property
    def names(self) -> tuple[str, ...]:
        """The registered names, in order."""
        return tuple(self._components)

    def register(self, component: Any) -> str:
        """Add ``component`` and return its name; the same object again is a no-op, another object
        with a taken name is refused."""
        name = spec_of(component)[0]
        ComponentSpec(name)  # a slug
        held = self._components.get(name)
        if held is not None and held is not component:
            given = component.name if isinstance(component, EarlyStopping) else None  # the user's name, if it differs
            said = f"{given!r} (checkpointed as {name!r})" if given is not None and given != name else repr(name)
            raise ParamsError("components", f"duplicate component name {said}: give each component its own name")
        self._components[name] = component
        return name

    def collect(self) -> dict[str, dict[str, Any]]:
        """``{name: {"version", "required", "state"}}`` of every component, as a checkpoint keeps it."""
        out = {}
        for name, component in self._components.items():
            _, version, required = spec_of(component)
            out[name] = {"version": version, "required": required, "state": component.component_state()}
        return out

    def plan(self, saved: Mapping[str, Mapping[str, Any]]) -> ComponentPlan:
        """Check ``saved`` (what ``collect`` returned) against the registered components; every
        problem is reported at once (``ComponentRestoreError``) and nothing is changed."""
        problems, load, fresh = [], {}, []
        for name, component in self._components.items():
            _, version, required = spec_of(component)
            entry = saved.get(name)
            if entry is None:
                if required:
                    problems.append(f"missing required component {name!r}: the checkpoint has no state for it")
                else:
                    fresh.append(name)
                continue
            if entry.get("version") != version:
                problems.append(f"incompatible component {name!r}: the checkpoint holds version {entry.get('version')}, "
                                f"this run's is version {version}")
                continue
            checked = []
            if hasattr(component, "check_component_state"):
                checked = call_with_version(component.check_component_state, entry["state"], version)
            problems += [f"incompatible component {name!r}: {problem}" for problem in checked or ()]
            load[name] = entry
        problems += [f"unknown required component {name!r}: the checkpoint holds its state, but nothing registers it"
                     for name, entry in saved.items() if name not in self._components and entry.get("required", True)]
        if problems:
            raise ComponentRestoreError(problems)
        return ComponentPlan(load, fresh)

    def restore(self, plan: ComponentPlan) -> tuple[str, ...]:
        """Load every planned state, in order; the names restored. If one fails, every component
        is put back to its state before the call (a rollback that fails too is warned about) and
        the failure is raised."""
        before = {name: copy.deepcopy(self._components[name].component_state()) for name in plan.load}
        touched = []
        try:
            for name, entry in plan.load.items():
                touched.append(name)
                component = self._components[name]
                call_with_version(component.load_component_state, entry["state"], spec_of(component)[1])
        except BaseException:
            for name in touched:
                component = self._components[name]
                try:
                    call_with_version(component.load_component_state, before[name], spec_of(component)[1])
                except Exception as exc:  # keep the first failure, roll back the others
                    warnings.warn(f"could not roll back {name!r} after a failed restore: {exc!r}", RuntimeWarning,
                                  stacklevel=2)
            raise
        return tuple(plan.load)
