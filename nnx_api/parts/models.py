"""Networks from registered factories, and batch adapters.

* ``register_model_factory(id, version, factory)``: ``factory(config) -> nn.Module`` builds the
  net of ``NNModelParams(net=ModelSpec(id, version, config, seed=...))``. ``build_module(spec)``
  calls it under ``torch.manual_seed(spec.seed)`` with every RNG stream restored afterwards, so
  the same spec gives the same initial weights and the caller's random state is untouched.
* Batch adapters say how a batch reaches the net — in the default training step, validation,
  ``evaluate`` and prediction: ``split(batch) -> (args, kwargs, target)`` and
  ``output(raw) -> logits``. Custom steps and objectives unpack ``ctx.batch`` themselves.
  ``PositionalInputs(n)`` takes the first ``n`` items of a tuple batch as positional inputs and
  the last as the target; ``KeywordInputs(names, target="labels")`` reads a mapping batch. Without
  an adapter a batch is an ``(inputs, targets)`` pair. Either adapter's ``prediction=`` names the
  prediction in a net that returns more than one tensor (an index, a key or an attribute name).

>>> PositionalInputs(2).split((1, 2, 3))
((1, 2), {}, 3)
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from nnx_core.errors import BatchKeyError, BatchTypeError, NNxError, ParamsError, TrainingInputError
from nnx_api.config.identity import module_topology as module_topology
from nnx_api.config.identity import tensor_layout as tensor_layout
from nnx_api.config.params import ModelSpec

ModelFactory = Callable[[Mapping[str, Any]], nn.Module]
_REGISTRY: dict[tuple[str, int], ModelFactory] = {}


class MissingModelFactoryError(NNxError, ValueError, LookupError):
    """A ``ModelSpec`` names a factory this process has not registered. A ``ValueError`` as NNx
    raises it (and still a ``LookupError``, as it was here before)."""


def register_model_factory(id: str, version: int, factory: ModelFactory, *, replace: bool = False) -> None:
    """Register ``factory(config) -> nn.Module`` as ``(id, version)`` for this process. An
    existing registration is kept unless ``replace=True``: bump ``version`` when the architecture
    changes, so saved weights never load into another topology."""
    key = ModelSpec(id, version)
    if not callable(factory):
        raise ParamsError("register_model_factory.factory", f"must be callable config -> nn.Module, got {factory!r}")
    if (key.id, key.version) in _REGISTRY and not replace:
        raise ParamsError(
            "register_model_factory", f"{key.id}@v{key.version} is already registered; pass replace=True or a new version"
        )
    _REGISTRY[(key.id, key.version)] = factory


def unregister_model_factory(id: str, version: int) -> bool:
    """Forget ``(id, version)``; whether it was registered."""
    return _REGISTRY.pop((id, version), None) is not None


def registered_model_factories() -> tuple[tuple[str, int], ...]:
    """The registered ``(id, version)`` pairs, sorted."""
    return tuple(sorted(_REGISTRY))


def build_module(spec: ModelSpec) -> nn.Module:
    """The module of ``spec``, built by its factory under ``spec.seed`` (RNG streams restored)."""
    factory = _REGISTRY.get((spec.id, spec.version))
    if factory is None:
        versions = sorted(version for key, version in _REGISTRY if key == spec.id)
        known = (f"registered versions of {spec.id!r}: {', '.join(f'v{v}' for v in versions)}" if versions
                 else f"registered: {list(registered_model_factories()) or 'none'}")
        raise MissingModelFactoryError(
            f"model factory {spec.id}@v{spec.version} is not registered in this process ({known}); call "
            f"nnx.register_model_factory({spec.id!r}, {spec.version}, factory) first"
        )
    py_state, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        random.seed(spec.seed)
        np.random.seed(spec.seed % 2**32)
        try:
            module = factory(dict(spec.config))
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)
    if not isinstance(module, nn.Module):
        raise ParamsError(f"model factory {spec.id}@v{spec.version}", f"returned {type(module).__name__}, not a torch.nn.Module")
    return module


class BatchAdapter:
    """How a batch reaches the net. Subclass and implement ``split``; ``output`` picks the logits
    out of a richer return value: by default the item ``prediction`` names (an index into a tuple
    or list, a key of a mapping, or an attribute of a dataclass or named tuple), or the value
    itself when ``prediction`` is None."""

    prediction: int | str | None = None

    def split(self, batch: Any) -> tuple[tuple[Any, ...], dict[str, Any], Any]:
        """``(positional inputs, keyword inputs, target)`` of one batch (target None if absent)."""
        raise NotImplementedError

    def output(self, raw: Any) -> torch.Tensor:
        """The logits in the net's return value (the item ``prediction`` names, or ``raw``)."""
        return raw if self.prediction is None else pick_prediction(raw, self.prediction)


def pick_prediction(raw: Any, prediction: int | str) -> Any:
    """The item ``prediction`` names in a net's return value ``raw`` (see ``BatchAdapter``); a
    ``TrainingInputError`` naming what the value holds when it has no such item."""
    if isinstance(prediction, int) and isinstance(raw, (tuple, list)) and -len(raw) <= prediction < len(raw):
        return raw[prediction]
    if isinstance(prediction, str) and isinstance(raw, Mapping) and prediction in raw:
        return raw[prediction]
    if isinstance(prediction, str) and not isinstance(raw, Mapping) and hasattr(raw, prediction):
        return getattr(raw, prediction)
    raise TrainingInputError(
        f"prediction={prediction!r} names no output of the net, which returned {output_items(raw)}; "
        "name one of those"
    )


def output_items(raw: Any) -> str:
    """What a net's return value holds, for messages: its type and its items' names or positions."""
    if isinstance(raw, torch.Tensor):
        return f"one tensor of shape {list(raw.shape)}"
    if isinstance(raw, Mapping):
        return f"a {type(raw).__name__} with keys {list(raw)}"
    fields = _record_fields(raw)
    if fields:
        return f"a {type(raw).__name__} with fields {list(fields)}"
    if isinstance(raw, (tuple, list)):
        shapes = [list(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__ for v in raw]
        return f"a {type(raw).__name__} of {len(raw)} items {shapes}"
    return f"a {type(raw).__name__}"


def _record_fields(raw: Any) -> list[str]:
    """The field names of a named tuple or dataclass instance (empty for anything else)."""
    if hasattr(raw, "_fields"):
        return list(raw._fields)
    if dataclasses.is_dataclass(raw) and not isinstance(raw, type):
        return [f.name for f in dataclasses.fields(raw)]
    return []


def prediction_hint(raw: Any) -> str:
    """How to say which of a net's outputs is the prediction, for a value that is not one tensor."""
    if isinstance(raw, Mapping):
        example = next((k for k in raw if isinstance(k, str)), "logits")
    elif _record_fields(raw):
        example = _record_fields(raw)[0]
    elif isinstance(raw, (tuple, list)):
        example = 0
    else:
        return "return one tensor of logits, or use a custom train_step_fn / eval_step_fn"
    return (
        f"say which output is the prediction: NNModel(..., batch_adapter=PositionalInputs(1, prediction={example!r})) "
        f"(KeywordInputs(..., prediction={example!r}) for mapping batches)"
    )


def _checked_prediction(owner: str, prediction: Any) -> int | str | None:
    if prediction is None or (isinstance(prediction, str) and prediction):
        return prediction
    if isinstance(prediction, int) and not isinstance(prediction, bool):
        return prediction
    raise ParamsError(
        f"{owner}.prediction", f"must be an index (a tuple output), a key or attribute name (a mapping or "
        f"dataclass output), or None (one tensor), got {prediction!r}"
    )


class PositionalInputs(BatchAdapter):
    """A tuple batch of ``n_inputs`` positional inputs followed by the target (optional: a batch
    of exactly ``n_inputs`` items has no target)."""

    def __init__(self, n_inputs: int = 1, *, prediction: int | str | None = None) -> None:
        if isinstance(n_inputs, bool) or not isinstance(n_inputs, int) or n_inputs < 1:
            raise ParamsError("PositionalInputs.n_inputs", f"must be an integer ≥ 1, got {n_inputs!r}")
        self.n_inputs = n_inputs
        self.prediction = _checked_prediction("PositionalInputs", prediction)

    def __repr__(self) -> str:
        picked = "" if self.prediction is None else f", prediction={self.prediction!r}"
        return f"PositionalInputs({self.n_inputs}{picked})"

    def split(self, batch: Any) -> tuple[tuple[Any, ...], dict[str, Any], Any]:
        items = tuple(batch) if isinstance(batch, (list, tuple)) else (batch,)
        if len(items) not in (self.n_inputs, self.n_inputs + 1):
            raise TrainingInputError(
                f"{self!r} expects batches of {self.n_inputs} input(s) (+ an optional target), got {len(items)} items"
            )
        target = items[self.n_inputs] if len(items) > self.n_inputs else None
        return items[: self.n_inputs], {}, target


class KeywordInputs(BatchAdapter):
    """A mapping batch: the ``inputs`` keys are passed as keyword arguments, ``target`` (a key,
    or None) is the target."""

    def __init__(
        self, inputs: Sequence[str], target: str | None = "labels", *, prediction: int | str | None = None
    ) -> None:
        names = (inputs,) if isinstance(inputs, str) else tuple(inputs)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise ParamsError("KeywordInputs.inputs", f"must name at least one input key, got {inputs!r}")
        if target is not None and (not isinstance(target, str) or not target or target in names):
            raise ParamsError(
                "KeywordInputs.target", f"must be None or a non-empty key distinct from the inputs {list(names)}, got {target!r}"
            )
        self.inputs, self.target = names, target
        self.prediction = _checked_prediction("KeywordInputs", prediction)

    def __repr__(self) -> str:
        picked = "" if self.prediction is None else f", prediction={self.prediction!r}"
        return f"KeywordInputs({list(self.inputs)!r}, target={self.target!r}{picked})"

    def split(self, batch: Any) -> tuple[tuple[Any, ...], dict[str, Any], Any]:
        if not isinstance(batch, Mapping):
            raise BatchTypeError(f"{self!r} expects mapping batches, got {type(batch).__name__}")
        missing = [n for n in self.inputs if n not in batch]
        if missing:
            raise BatchKeyError(f"{self!r}: the batch is missing input key(s) {missing} (keys: {sorted(batch)})")
        target = batch.get(self.target) if self.target is not None else None
        return (), {n: batch[n] for n in self.inputs}, target
