"""The model's params classes: the net's shape (``NNParams``), what its output means
(``TaskSpec``), the precision policy (``PrecisionPolicy``), a registered net (``ModelSpec``) or a
caller's own module (``RuntimeModule``), and ``NNModelParams``, which holds them.

The params classes are frozen, keyword-only, slotted dataclasses with lossless ``state()`` /
``from_state()`` round trips through the one converter; the optimizer and schedule params live in
``nnx_api.config.optim_params``, the training params in ``nnx_api.config.train_params``.

``state()`` is a plain YAML-safe mapping and is what a run id hashes. Fields added after a class
first shipped are omitted while they hold their default (``OMIT``), so ids never drift; runtime-only
fields (loaders, extra metrics, overwrite flags, resume mode, progress) never enter it. Every value
is checked at construction — ``dataclasses.replace(params, ...)`` checks again — and a bad one
raises ``ParamsError`` naming the field and what to write instead. Enum fields accept the member,
its value or its name in any case; devices are named as in PyTorch (``"auto"``, ``"cuda:1"``, a
``torch.device``). ``NNOptimParams``, ``NNSchedulerParams`` and ``NNTrainerParams`` have fluent
builders (``.builder()``, see ``nnx_api.config.builders``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nnx_core.convert import OMIT, as_given
from nnx_core.errors import ParamsError, TaskValidationError
from nnx_adapters.pytorch.devices import resolve_precision
from nnx_api.config.base import (
    FrozenDims,
    Params,
    count,
    flag,
    frozen_dims,
    instance,
    items,
    json_like,
    member,
    one_of,
    optional,
    param,
    params_class,
    positional_params_class,
    real,
    text,
)
from nnx_api.config.convert import converter
from nnx_api.config.enums import Activations, Device, Devices, Losses, Nets, device_of
from nnx_api.config.identity import module_topology
from nnx_api.scope import LM, refuse

_PROB = real(minimum=0.0, maximum=1.0)
_NET_VARIANTS: dict[str, type[NNParams]] = {}
_HIDDEN = frozen_dims(items(count(1, rule="all hidden_dims > 0")))


def _hidden_dims(path: str, value: Any) -> FrozenDims:
    """The hidden widths; None (NNx's spelling of no hidden layer) is stored as ``()``."""
    return _HIDDEN(path, () if value is None else value)


def _no_heads(path: str, value: Any) -> None:
    """NNx's ``n_heads`` (attention heads): None, its default, is accepted and changes nothing; a
    head count is out of scope here (transformers)."""
    if value is not None:
        refuse(path, LM)
    return None


@params_class
class NNParams(Params):
    """Shape of the built-in nets: ``input_dim → hidden_dims... → output_dim``.

    ``activation`` / ``dropout_prob`` apply to every hidden layer; ``activations`` /
    ``dropout_probs`` (one per hidden layer) override them layer by layer. A per-layer list
    equal to the scalar everywhere is stored as None, so it never changes the run id."""

    input_dim: int = param(check=count(1, rule="input_dim > 0"))
    output_dim: int = param(check=count(1, rule="output_dim > 0"))
    hidden_dims: tuple[int, ...] = param((), check=_hidden_dims)
    dropout_prob: float = param(0.0, check=real(minimum=0.0, maximum=1.0, rule="0.0 <= dropout_prob <= 1.0"))
    activation: Activations | None = param(Activations.RELU, check=optional(member(Activations)))
    activations: tuple[Activations, ...] | None = param(
        None, check=optional(frozen_dims(items(member(Activations)))), state=OMIT
    )
    dropout_probs: tuple[float, ...] | None = param(None, check=optional(frozen_dims(items(_PROB))), state=OMIT)
    n_heads: int | None = param(None, check=_no_heads, state=OMIT)

    def _check(self) -> None:
        if self.activation is None and self.hidden_dims and self.activations is None:
            raise ParamsError(
                f"{type(self).__name__}.activation",
                "is None, but the hidden layers need an activation: give activation=Activations.RELU (or another), "
                "or one per hidden layer with activations=[...]",
            )
        for name, scalar in (("activations", self.activation), ("dropout_probs", self.dropout_prob)):
            values = getattr(self, name)
            if values is None:
                continue
            if len(values) != len(self.hidden_dims):
                raise ParamsError(
                    f"{type(self).__name__}.{name}",
                    f"needs one entry per hidden layer ({len(self.hidden_dims)}), got {len(values)}",
                )
            if all(v == scalar for v in values):
                object.__setattr__(self, name, None)

    @property
    def dims(self) -> list[int]:
        """``[input_dim, *hidden_dims, output_dim]``."""
        return [self.input_dim, *self.hidden_dims, self.output_dim]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super(NNParams, cls).__init_subclass__(**kwargs)  # noqa: UP008  (zero-argument super() fails in a slotted dataclass)
        _NET_VARIANTS[cls.__qualname__] = cls  # the slotted class replaces the one the decorator started from

    @classmethod
    def resolve_from_state(cls, state: Mapping[str, Any]) -> NNParams:
        """The params a saved net state describes, read back as the subclass that wrote it (a state
        with ``conv_channels`` is an ``NNConvParams``): the subclass whose own fields it names."""
        own = {f.name for f in dataclasses.fields(cls)}
        for sub in _NET_VARIANTS.values():
            if sub.__base__ is cls and set(state) & ({f.name for f in dataclasses.fields(sub)} - own):
                return sub.resolve_from_state(state)
        return cls.from_state(state)

    def activation_for(self, layer: int) -> Activations:
        """The activation of hidden layer ``layer``."""
        return self.activations[layer] if self.activations is not None else self.activation

    def dropout_for(self, layer: int) -> float:
        """The dropout probability of hidden layer ``layer``."""
        return self.dropout_probs[layer] if self.dropout_probs is not None else self.dropout_prob


TASK_KINDS = ("categorical", "multilabel", "regression")


def _as_is(path: str, value: Any) -> Any:
    return value


@params_class
class TaskSpec(Params):
    """What the model's output means: categorical (with ``ignore_index``), multilabel or regression."""

    kind: str = param(check=one_of(*TASK_KINDS))
    n: int | None = param(None, check=optional(count(1)), state=OMIT)
    ignore_index: int | None = param(None, check=optional(count()), state=OMIT)
    threshold: float = param(0.5, check=real(minimum=0.0, maximum=1.0, exclusive_min=True), state=OMIT)
    labels: tuple[Any, ...] | None = param(None, check=optional(items(_as_is)), state=OMIT)

    @classmethod
    def categorical(cls, n: int | None = None, *, ignore_index: int | None = None, labels: Any = None) -> TaskSpec:
        """Classes decoded by argmax; targets equal to ``ignore_index`` are masked everywhere."""
        return cls(kind="categorical", n=n, ignore_index=ignore_index, labels=labels)

    @classmethod
    def multilabel(cls, n: int | None = None, *, threshold: float = 0.5, labels: Any = None) -> TaskSpec:
        """Independent sigmoid outputs decoded by ``p >= threshold``."""
        return cls(kind="multilabel", n=n, threshold=threshold, labels=labels)

    @classmethod
    def regression(cls, n: int | None = None, *, labels: Any = None) -> TaskSpec:
        """Continuous outputs; records carry loss, mse and mae (no error)."""
        return cls(kind="regression", n=n, labels=labels)

    @property
    def num_outputs(self) -> int | None:
        """NNx's name of ``n``: the class, label or target count along the output axis (None: unset)."""
        return self.n

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> TaskSpec:
        """A saved task: this project's ``{kind, n, ...}`` (what ``state()`` writes, part of run ids),
        or NNx's versioned layout ``{version: 1, kind, num_outputs, ...}`` read as the same spec."""
        if "version" in state or "num_outputs" in state:
            if state.get("version", 1) != 1:
                raise TaskValidationError(f"TaskSpec state version {state.get('version')!r} is not supported (1 is)")
            state = {("n" if key == "num_outputs" else key): value for key, value in state.items() if key != "version"}
        return super(TaskSpec, cls).from_state(state)  # noqa: UP008  (zero-argument super() fails in a slotted dataclass)


converter.register_structure_hook(TaskSpec | None, as_given)  # the field's check decodes (TaskSpec.from_state)


def _task_hint(value: Any) -> str:
    return "TaskSpec.categorical(...), TaskSpec.multilabel(...) or TaskSpec.regression(...)"


PRECISION_MODES = ("fp32", "bf16", "fp16")


def _policy_choice(*choices: str) -> Any:
    """One of ``choices``, the refusal naming the field twice as NNx's does: ``PrecisionPolicy.mode:
    the mode must be one of …``."""

    def run(path: str, value: Any) -> Any:
        if value not in choices:
            field = path.rpartition(".")[2]
            raise ParamsError(path, f"the {field} must be one of {', '.join(map(repr, choices))}; got {value!r}")
        return value

    return run


@positional_params_class
class PrecisionPolicy(Params):
    """Autocast policy: ``PrecisionPolicy("bf16")`` (CPU/CUDA), ``"fp16"`` (CUDA, GradScaler) or
    ``"fp32"`` (default). ``fallback="fp32"`` runs full precision where the mode is unsupported
    instead of refusing. Parameters always stay float32."""

    mode: str = param("fp32", check=_policy_choice(*PRECISION_MODES))
    fallback: str = param("error", check=_policy_choice("error", "fp32"))

    def resolve(self, device: Any) -> Any:
        """The ``ResolvedPrecision`` this policy becomes on ``device`` (a name or ``torch.device``);
        ``PrecisionUnsupportedError`` when the device cannot run ``mode`` and ``fallback`` is ``"error"``."""
        return resolve_precision(self, False, device)


@positional_params_class
class ModelSpec(Params):
    """A network built by a registered factory: ``ModelSpec("my-mlp", 1, {"width": 64}, seed=0)``
    as ``NNModelParams(net=...)``. ``register_model_factory(id, version, factory)`` registers
    ``factory(config) -> nn.Module``; the module is built under ``seed`` with every RNG stream
    restored afterwards, so the same spec always gives the same initial weights. The spec holds
    no code: a run naming it loads without the factory, only rebuilding the module needs it."""

    id: str = param(check=text())
    version: int = param(1, check=count(1))
    config: Mapping[str, Any] = param(factory=dict, check=json_like)
    _: dataclasses.KW_ONLY
    seed: int = param(0, check=count(0))


class RuntimeModule:
    """The descriptor of a caller's own ``torch.nn.Module`` (``NNModel(module=...)`` sets it as
    ``NNModelParams.net``): ``module`` is the class's qualified name, ``topology`` a digest of its
    parameter and buffer names, shapes and dtypes and of its ``repr`` (layer hyperparameters such
    as dropout rates), never of weight values. ``RuntimeModule.of(module)`` describes a module.
    No factory rebuilds it, so ``reconstructible`` is False: its weights load only into a module
    the caller passes again (``NNModel.from_checkpoint(ckpt, module=...)``)."""

    __slots__ = ("module", "topology")
    kind = "runtime"
    reconstructible = False
    module: str
    topology: str

    def __init__(self, module: str, topology: str) -> None:
        object.__setattr__(self, "module", text()("RuntimeModule.module", module))
        object.__setattr__(self, "topology", text()("RuntimeModule.topology", topology))

    @classmethod
    def of(cls, module: Any) -> RuntimeModule:
        """The descriptor of ``module`` (a ``torch.nn.Module``)."""
        return cls(*module_topology(module))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"RuntimeModule is immutable; {name!r} cannot be set")

    def __reduce__(self) -> tuple[Any, ...]:
        return (RuntimeModule, (self.module, self.topology))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RuntimeModule):
            return NotImplemented
        return (self.module, self.topology) == (other.module, other.topology)

    def __hash__(self) -> int:
        return hash((self.kind, self.module, self.topology))

    def __repr__(self) -> str:
        return f"RuntimeModule(module={self.module!r}, topology={self.topology!r})"

    def __str__(self) -> str:
        return f"runtime:{self.module}"

    def state(self) -> dict[str, Any]:
        """The descriptor as a plain mapping (``kind`` tells it from a ``ModelSpec``'s state)."""
        return {"kind": self.kind, "module": self.module, "topology": self.topology, "reconstructible": False}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> RuntimeModule:
        """The descriptor of :meth:`state`."""
        if not isinstance(state, Mapping) or state.get("kind", cls.kind) != cls.kind:
            raise ParamsError("RuntimeModule", f"expected the state of a runtime module descriptor, got {state!r}")
        return cls(state.get("module"), state.get("topology"))


converter.register_structure_hook(Nets | ModelSpec | RuntimeModule | None, as_given)  # the field's check decodes


def _net(path: str, value: Any) -> Nets | ModelSpec | RuntimeModule | None:
    if value is None or isinstance(value, (ModelSpec, RuntimeModule)):
        return value
    if isinstance(value, Mapping):
        if value.get("kind") == RuntimeModule.kind:
            return RuntimeModule.from_state(value)
        return ModelSpec.from_state({k: v for k, v in value.items() if k != "kind"})
    return Nets.parse(path, value)


@params_class
class NNModelParams(Params):
    """The model's net (a ``Nets`` member, a registered ``ModelSpec``, a ``RuntimeModule`` set by
    ``NNModel(module=...)``, or None: a feed-forward net when ``NNParams`` are given, the
    descriptor of ``module=`` otherwise), device, loss, and (optional) task and precision policy. ``mixed_precision=True`` is NNx's legacy flag: fp16
    autocast and loss scaling on CUDA, full precision elsewhere (no error), left out of the state
    (and the run id) while False; with a ``precision`` policy it must agree (fp16).

    ``device`` is a ``Devices`` member, ``"auto"`` (CUDA, then MPS, then CPU, resolved when the
    model is built), an indexed device (``"cuda:1"``) or a ``torch.device``; ``params.device()``
    is the ``torch.device`` it names on this machine."""

    net: Nets | ModelSpec | RuntimeModule | None = param(None, check=_net)
    device: Devices | Device = param(Devices.CPU, check=device_of)
    loss: Losses = param(Losses.CROSS_ENTROPY, check=member(Losses))
    task: TaskSpec | None = param(
        None, check=optional(instance(TaskSpec, _task_hint)), state=OMIT
    )
    precision: PrecisionPolicy | None = param(
        None, check=optional(instance(PrecisionPolicy, lambda v: f"PrecisionPolicy({v!r})")), state=OMIT
    )
    mixed_precision: bool = param(False, check=flag(), state=OMIT)

    def _check(self) -> None:
        if self.mixed_precision and self.precision is not None and self.precision.mode != "fp16":
            raise ParamsError(
                "NNModelParams.mixed_precision",
                f"is NNx's fp16 flag and contradicts precision={self.precision.mode!r} ({self.precision!r}); "
                "give one of them",
            )

    @property
    def resolved_task(self) -> TaskSpec:
        """The explicit task, else the one the loss implies."""
        return self.task or TaskSpec(kind=self.loss.task_kind)

    @property
    def builtin(self) -> bool:
        """Whether ``net`` names a built-in net (a ``Nets`` member)."""
        return isinstance(self.net, Nets)

    def _compared(self) -> tuple[Any, ...]:
        """The compared fields, an unset ``net`` as the ``Nets.FEED_FWD`` it stands for."""
        return tuple(
            Nets.FEED_FWD if f.name == "net" and self.net is None else getattr(self, f.name)
            for f in dataclasses.fields(self) if f.compare
        )

    def __eq__(self, other: object) -> bool:
        """Equal fields, an unset ``net`` equal to ``Nets.FEED_FWD``: both build the feed-forward
        net from ``NNParams``, write the same state and give the same run id (a state read back
        holds ``Nets.FEED_FWD``)."""
        if type(other) is not type(self):
            return NotImplemented
        return self._compared() == other._compared()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._compared())

    def state(self) -> dict[str, Any]:
        """The plain mapping of these params. An unset ``net`` is written as the feed-forward net
        it builds from ``NNParams`` (as when ``Nets.FEED_FWD`` was the default, so run ids hold);
        a ``RuntimeModule`` as its descriptor's mapping."""
        state = Params.state(self)
        if self.net is None:
            state["net"] = Nets.FEED_FWD.value
        elif isinstance(self.net, RuntimeModule):
            state["net"] = self.net.state()
        return state
