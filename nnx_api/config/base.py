"""What every params class shares: frozen dataclasses whose fields check themselves.

A params class is a frozen, slotted ``dataclasses.dataclass`` deriving from :class:`Params`; so
``dataclasses.replace(params, max_lr=3e-3)`` (or ``params.replace(...)``) is a validated copy, and
``state()`` / ``from_state()`` go through the one converter (``nnx_core.convert``). Each field is
declared with :func:`param`: its default, its check (run at construction, the value it returns is
stored) and its state rule (``OMIT`` when default, or ``RUNTIME``-only). Every refusal is a
``ParamsError`` naming ``Class.field`` and what to write instead.

:class:`ParamsBuilder` is the base of the fluent builders (``NNOptimParams.builder()`` ...):
setters record only the fields they touch, so ``build()`` leaves every other field at its default
and ``state()`` omits it exactly as for hand-written arguments.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, TypeVar

from nnx_core.convert import Stateful
from nnx_core.errors import ParamsError
from nnx_core.validate import check_choice, check_float, check_int, check_str

__all__ = [
    "FrozenDict", "FrozenDims", "Params", "ParamsBuilder", "count", "flag", "frozen_dims", "instance", "items", "json_like",
    "member", "one_of", "optional", "param", "params_class", "positional_params_class", "real", "text", "typed_init",
]

Check = Callable[[str, Any], Any]
"""``check(path, value) -> value to store``; raises ``ParamsError`` naming ``path``."""

P = TypeVar("P", bound="Params")
B = TypeVar("B", bound="ParamsBuilder")


class Params(Stateful):
    """Base of the params classes: field checks at construction, ``replace``, state via the converter."""

    __slots__ = ()

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            check = field.metadata.get("check")
            if check is not None:
                object.__setattr__(self, field.name, check(f"{owner}.{field.name}", getattr(self, field.name)))
        self._check()

    def _check(self) -> None:
        """Rules that span fields (none by default)."""

    def replace(self: P, **changes: Any) -> P:
        """A validated copy with ``changes`` applied (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


def typed_init(cls: type[P]) -> type[P]:
    """Make a params dataclass's constructor refuse a missing or unknown argument with a
    ``ParamsError`` naming the class, the field and the fields there are (a close match is
    suggested), instead of Python's bare ``TypeError``."""
    init = cls.__init__
    signature = inspect.signature(init)
    fields = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            signature.bind(self, *args, **kwargs)
        except TypeError:
            raise ParamsError(cls.__name__, _binding_problem(cls.__name__, signature, fields, args, kwargs)) from None
        init(self, *args, **kwargs)

    cls.__init__ = checked  # type: ignore[method-assign]
    return cls


def params_class(cls: type) -> Any:
    """Make ``cls`` (deriving from :class:`Params`) a params class: a frozen, keyword-only, slotted
    dataclass whose constructor names a missing or unknown argument (:func:`typed_init`)."""
    return typed_init(dataclasses.dataclass(frozen=True, kw_only=True, slots=True)(cls))


def positional_params_class(cls: type) -> Any:
    """As :func:`params_class`, its fields given by position too (``PrecisionPolicy("bf16")``)."""
    return typed_init(dataclasses.dataclass(frozen=True, slots=True)(cls))


# The names PyTorch users bring (torch.optim, torch.optim.lr_scheduler, Lightning/HF loops) → NNx's field.
TORCH_NAMES = {
    "lr": "max_lr", "learning_rate": "max_lr", "betas": "momentum", "gamma": "factor", "eta_min": "min_lr",
    "epochs": "n_epochs", "max_epochs": "n_epochs", "num_epochs": "n_epochs", "num_train_epochs": "n_epochs",
    "max_norm": "grad_clip_norm", "gradient_clip_val": "grad_clip_norm", "max_grad_norm": "grad_clip_norm",
    "accumulate_grad": "accumulate_grad_batches", "gradient_accumulation_steps": "accumulate_grad_batches",
    "warmup": "warmup_steps", "num_warmup_steps": "warmup_steps", "num_training_steps": "total_steps",
}


# PyTorch's flags that NNx spells elsewhere (a kind's name, the run's monitor) → what to write instead, per class.
TORCH_FLAGS = {
    ("NNOptimParams", "nesterov"): "NNx names Nesterov momentum as a kind: write NNOptimParams(name='sgd_nesterov', "
                                   "momentum=0.9)",
    ("NNOptimParams", "amsgrad"): "NNx names AMSGrad as a kind: write NNOptimParams(name='adam_amsgrad')",
    ("NNSchedulerParams", "mode"): "ReduceLROnPlateau's mode is the direction of the run's monitor: write "
                                   "NNTrainParams(monitor=MonitorSpec('accuracy', mode='max')); the schedule follows it",
    ("NNSchedulerParams", "threshold_mode"): "NNx's plateau threshold is relative (threshold=...), in the direction of "
                                             "the run's monitor: set NNTrainParams(monitor=MonitorSpec(..., mode=...))",
}


def _binding_problem(name: str, signature: inspect.Signature, fields: list[str], args: tuple, kwargs: dict) -> str:
    unknown = [k for k in kwargs if k not in fields]
    if unknown and (name, unknown[0]) in TORCH_FLAGS:
        return f"has no field {unknown[0]!r} (PyTorch's flag): {TORCH_FLAGS[name, unknown[0]]}"
    if unknown:
        ours = TORCH_NAMES.get(unknown[0])
        close = [ours] if ours in fields else difflib.get_close_matches(unknown[0], fields, n=1)
        hint = (f" (PyTorch's {unknown[0]!r} is {close[0]}= here)" if ours in fields
                else f" (did you mean {close[0]}=?)" if close else "")
        return f"has no field {unknown[0]!r}{hint}; its fields are {', '.join(fields)}"
    required = [p.name for p in list(signature.parameters.values())[1:] if p.default is inspect.Parameter.empty]
    missing = [f for f in required[len(args):] if f not in kwargs]
    if missing:
        return f"needs {', '.join(f'{m}=' for m in missing)}: e.g. {name}({', '.join(f'{m}=...' for m in missing)})"
    positional = [p.name for p in list(signature.parameters.values())[1:] if p.kind is p.POSITIONAL_OR_KEYWORD]
    return (f"takes its fields by name ({', '.join(f'{f}=...' for f in fields[:3])}, ...)" if not positional else
            f"takes at most {len(positional)} positional argument(s) ({', '.join(positional)})")


def param(
    default: Any = dataclasses.MISSING,
    *,
    factory: Any = dataclasses.MISSING,
    check: Check | None = None,
    state: Mapping[str, str] | None = None,
    compare: bool = True,
) -> Any:
    """A params field: ``default`` (or ``factory``), its ``check``, its state rule (``OMIT`` /
    ``RUNTIME`` from ``nnx_core.convert``) and whether it takes part in equality."""
    metadata = {**(state or {}), **({"check": check} if check else {})}
    return dataclasses.field(default=default, default_factory=factory, compare=compare, metadata=metadata)


# ------------------------------------------------------------------------------------ checks
def _ruled(check: Callable[..., Any], rule: str | None, path: str, value: Any, **bounds: Any) -> Any:
    """``check(path, value, **bounds)``; a value of the right type outside ``bounds`` is refused
    with ``rule`` (NNx's wording of the domain, ``"n_epochs >= 1"``) added to the message."""
    if rule is None:
        return check(path, value, **bounds)
    checked = check(path, value)
    try:
        check(path, value, **bounds)
    except ParamsError as error:
        raise ParamsError(path, f"{error.detail} (requires {rule})") from None
    return checked


def count(minimum: int | None = None, *, rule: str | None = None) -> Check:
    """An integer ≥ ``minimum`` (bools and floats refused; NumPy integers become ``int``);
    ``rule`` words the domain in a refusal (``"n_epochs >= 1"``)."""
    return lambda path, value: _ruled(check_int, rule, path, value, minimum=minimum)


def real(*, rule: str | None = None, **bounds: Any) -> Check:
    """A finite number within ``bounds`` (see ``check_float``); stored as given, so ``1`` stays
    ``1`` and existing run ids never drift. ``rule`` words the domain in a refusal."""

    def run(path: str, value: Any) -> Any:
        _ruled(check_float, rule, path, value, **bounds)
        return value

    return run


def one_of(*choices: str) -> Check:
    """One of ``choices``."""
    return lambda path, value: check_choice(path, value, choices)


def text() -> Check:
    """A non-blank string."""
    return check_str


def flag() -> Check:
    """``True`` or ``False``."""

    def run(path: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise ParamsError(path, f"must be True or False, got {type(value).__name__} {value!r}")
        return value

    return run


def member(enum_type: Any) -> Check:
    """A member of ``enum_type``, given as the member, its value or its name in any case."""
    return enum_type.parse


def optional(check: Check) -> Check:
    """``check``, letting None through."""
    return lambda path, value: None if value is None else check(path, value)


def instance(cls: type, hint: Callable[[Any], str] | None = None) -> Check:
    """An instance of ``cls``; a mapping is read as its saved state (``cls.from_state``). Anything
    else is refused with ``hint(value)``: what to write instead."""

    def run(path: str, value: Any) -> Any:
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping) and issubclass(cls, Stateful):
            return cls.from_state(value)
        advice = hint(value) if hint else f"{cls.__name__}(...)"
        article = "an" if cls.__name__[0] in "AEIOU" or cls.__name__.startswith("NN") else "a"
        raise ParamsError(path, f"must be {article} {cls.__name__}, got {type(value).__name__} {value!r}; write {advice}")

    return run


def items(check: Check) -> Check:
    """A sequence (list, tuple, ...; not a string) stored as a tuple, each item checked as ``path[i]``."""

    def run(path: str, value: Any) -> tuple[Any, ...]:
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
            raise ParamsError(path, f"must be a list or tuple, got {type(value).__name__} {value!r}")
        return tuple(check(f"{path}[{i}]", item) for i, item in enumerate(value))

    return run


def json_like(path: str, value: Any) -> Any:
    """A value of JSON-like parts only (numbers, strings, booleans, None, lists, mappings with text
    keys), mappings and sequences rebuilt as dicts and lists (a registered spec's ``config``)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {text()(f"{path} key", k): json_like(f"{path}[{k!r}]", v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_like(f"{path}[{i}]", v) for i, v in enumerate(value)]
    raise ParamsError(path, f"must hold only JSON-like values (numbers, strings, lists, mappings), got {value!r}")


def _immutable(method: str) -> TypeError:
    return TypeError(
        f"params list fields are immutable: params are frozen, so {method}() cannot change one in place; build a "
        "new value instead, e.g. dataclasses.replace(params, hidden_dims=[*params.hidden_dims, 16])"
    )


class FrozenDims(tuple):  # type: ignore[type-arg]
    """A params field's sequence (``hidden_dims``, ``conv_channels``, ``activations``,
    ``param_groups``, ...): a tuple — hashed and written exactly like the plain tuple, so run ids
    and ``state()`` do not change — that also compares equal to the list of the same items, as
    NNx's list fields do (``params.hidden_dims == [128, 64]``), and whose list methods
    (``append``, ``extend``, ``insert``, ``remove``, ``pop``, ``clear``, ``sort``, ``reverse``)
    raise ``TypeError`` saying params are immutable, as NNx's immutable list does (a bare tuple
    would raise ``AttributeError``)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return tuple.__eq__(self, tuple(other) if isinstance(other, list) else other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = tuple.__hash__

    def append(self, *_: Any) -> None:
        """Refused (``TypeError``): params are immutable."""
        raise _immutable("append")

    def extend(self, *_: Any) -> None:
        """Refused (``TypeError``): params are immutable."""
        raise _immutable("extend")

    def insert(self, *_: Any) -> None:
        """Refused (``TypeError``): params are immutable."""
        raise _immutable("insert")

    def remove(self, *_: Any) -> None:
        """Refused (``TypeError``): params are immutable."""
        raise _immutable("remove")

    def pop(self, *_: Any) -> None:
        """Refused (``TypeError``): params are immutable."""
        raise _immutable("pop")

    def clear(self) -> None:
        """Refused (``TypeError``): params are immutable."""
        raise _immutable("clear")

    def sort(self, *_: Any, **__: Any) -> None:
        """Refused (``TypeError``): params are immutable."""
        raise _immutable("sort")

    def reverse(self) -> None:
        """Refused (``TypeError``): params are immutable."""
        raise _immutable("reverse")

    def __setitem__(self, *_: Any) -> None:
        raise _immutable("__setitem__")

    def __delitem__(self, *_: Any) -> None:
        raise _immutable("__delitem__")


def frozen_dims(check: Check) -> Check:
    """``check``'s tuple stored as a :class:`FrozenDims`."""
    return lambda path, value: FrozenDims(check(path, value))


class FrozenDict(dict):  # type: ignore[type-arg]
    """A read-only mapping of a params field (``NNTrainerParams.optims`` / ``schedulers``,
    ``extra_metrics``): a ``dict`` whose mutating methods raise ``TypeError``. Unlike
    ``types.MappingProxyType`` it deep-copies and pickles, so ``dataclasses.asdict(params)`` and
    ``copy.deepcopy(params)`` work (as on NNx's params)."""

    __slots__ = ()

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise TypeError(f"{type(self).__name__} is read-only: params are frozen; use dataclasses.replace(params, ...)")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self),))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        import copy

        return type(self)({copy.deepcopy(k, memo): copy.deepcopy(v, memo) for k, v in self.items()})


# ---------------------------------------------------------------------------------- builders
def _is_default(field: dataclasses.Field[Any], value: Any) -> bool:
    if field.default is not dataclasses.MISSING:
        # identity first: a runtime value (a loader, an array) is never compared element-wise
        return value is field.default or (field.default is not None and value is not None and value == field.default)
    if field.default_factory is not dataclasses.MISSING:
        return bool(value == field.default_factory())
    return False


class ParamsBuilder:
    """Base of the fluent builders. Setters return the builder; a variant method replaces the
    fields the previous variant set (last variant wins) and keeps every modifier; ``copy()``
    branches; ``Builder.from_params(p).build() == p``."""

    VARIANTS: ClassVar[tuple[str, ...]] = ()
    """The variant methods; when there are any, ``build()`` needs one of them (or ``from_params``)."""
    VARIANT_FIELDS: ClassVar[frozenset[str]] = frozenset()
    """The fields a variant sets; every other field is a modifier and survives a variant change."""

    def __init__(self, target: type[Params]) -> None:
        self._target = target
        self._fields: dict[str, Any] = {}
        self._chosen = not self.VARIANTS

    def copy(self: B) -> B:
        """An independent branch: later calls on either builder never show on the other."""
        branch = type(self)(self._target)
        branch._fields = {name: dict(v) if isinstance(v, dict) else v for name, v in self._fields.items()}
        branch._chosen = self._chosen
        return branch

    @classmethod
    def from_params(cls: type[B], params: Any) -> B:
        """A builder holding every field of ``params`` that is not at its default."""
        builder = params.builder() if isinstance(params, Params) and hasattr(params, "builder") else None
        if type(builder) is not cls:
            raise ParamsError(f"{cls.__name__}.from_params", f"cannot rebuild a {type(params).__name__}")
        for field in dataclasses.fields(params):
            value = getattr(params, field.name)
            if not _is_default(field, value):
                builder._fields[field.name] = dict(value) if isinstance(value, Mapping) else value
        builder._chosen = True
        return builder

    def _set(self: B, **fields: Any) -> B:
        self._fields.update(fields)
        return self

    def _variant(self: B, **fields: Any) -> B:
        """Choose a variant: its given (not None) fields replace every variant field set before."""
        self._fields = {name: v for name, v in self._fields.items() if name not in self.VARIANT_FIELDS}
        self._fields.update({name: value for name, value in fields.items() if value is not None})
        self._chosen = True
        return self

    def build(self) -> Any:
        """The params (validated by their constructor)."""
        if not self._chosen:
            methods = ", ".join(f".{name}(...)" for name in self.VARIANTS)
            raise ParamsError(f"{type(self).__name__}.build", f"call one of {methods} first")
        return self._target(**self._fields)
