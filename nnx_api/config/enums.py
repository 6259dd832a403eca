"""Enums of the public API. Values are lowercase strings; members that build torch objects are
factories: ``Losses.CROSS_ENTROPY()`` returns the loss module, ``Devices.CPU()`` the device.

Calling a member builds its torch object: ``Nets.FEED_FWD(params=...)`` the net,
``Optims.ADAM(net, lr_start=...)`` the optimizer, ``Schedulers.STEP(optimizer, params, n_epochs)``
the LR scheduler, ``Activations.RELU()`` the activation, ``Losses.CROSS_ENTROPY()`` the loss.

Every enum accepts its member, its value or its name in any case (``Optims("ADAM")``,
``"Adam"``, ``Optims.ADAM``); ``parse`` turns anything else into a ``ParamsError`` that names the
field and lists the allowed values. Devices are named as PyTorch users name them: a ``Devices``
member, ``"auto"``, ``"cuda:1"`` or a ``torch.device`` (``device_of``); ``resolve_device`` is the one
place a device name becomes a ``torch.device``.
"""

from __future__ import annotations

import difflib
import enum
import types
from typing import Any

import torch
from torch import nn

from nnx_core.commit import phase_tags
from nnx_core.errors import ParamsError, ScheduleBudgetError
from nnx_core.schedules import budget_problems
from nnx_adapters.pytorch.nets import ConvNN, FeedFwdNN
from nnx_adapters.pytorch.optim import build_optimizer, build_scheduler
from nnx_adapters.pytorch.optim import param_groups as param_groups_of
from nnx_api.scope import GRAPH, LM, MOE, refuse


class ValueEnum(str, enum.Enum):  # noqa: UP042  (a StrEnum would change what str() returns)
    """Base of the API enums: lowercase string values, looked up by member, value or name in any case."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> Any:
        key = value.strip().lower() if isinstance(value, str) else None
        return next((member for member in cls if member.value == key), None)

    @classmethod
    def parse(cls, path: str, value: Any) -> Any:
        """The member ``value`` names (member, value or name, any case), else ``ParamsError``."""
        try:
            return cls(value)
        except ValueError:
            allowed = [member.value for member in cls]
            close = difflib.get_close_matches(str(value).lower(), allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ParamsError(
                path,
                f"must be one of {', '.join(map(repr, allowed))} (any case) or a member of {cls.__name__}; "
                f"got {value!r}{hint}",
            ) from None


class Nets(ValueEnum):
    """Built-in networks; calling a member builds the net: ``Nets.FEED_FWD(params=NNParams(...))``
    is a :class:`FeedFwdNN`, ``Nets.CONV(params=NNConvParams(...))`` a :class:`ConvNN`.

    The graph, transformer, vision-transformer and mixture-of-experts members exist so that
    configurations naming them parse, but building one raises :class:`OutOfScopeError`: those
    nets are outside this implementation's scope (``docs/nnx-compat.md``); build such a module
    yourself and pass it as ``NNModel(params=..., module=...)``."""

    CONV = "conv"
    FEED_FWD = "feed_fwd"
    FEED_FWD_MOE = "feed_fwd_moe"
    GRAPH_ATT = "graph_att"
    GRAPH_CONV = "graph_conv"
    GRAPH_SAGE = "graph_sage"
    TRANSFORMER = "transformer"
    VIT = "vit"

    @property
    def out_of_scope(self) -> str | None:
        """The scope a member falls outside of, None for the nets built here."""
        return {"feed_fwd_moe": MOE, "graph_att": GRAPH, "graph_conv": GRAPH, "graph_sage": GRAPH, "transformer": LM,
                "vit": LM}.get(self.value)

    def __call__(self, params: Any) -> nn.Module:
        scope = self.out_of_scope
        if scope is not None:
            refuse(f"Nets.{self.name}", scope)
        if params is None:
            raise ParamsError(f"Nets.{self.name}", "needs params=NNParams(...)")
        conv = getattr(params, "conv_channels", None) is not None
        if (self is Nets.CONV) != conv:
            expected = "NNConvParams" if self is Nets.CONV else "NNParams (NNConvParams belong to Nets.CONV)"
            raise ParamsError(f"Nets.{self.name}", f"needs {expected}, got {type(params).__name__}")
        return ConvNN(params) if conv else FeedFwdNN(params)


class Activations(ValueEnum):
    """Activation functions of the built-in nets."""

    RELU = "relu"
    LEAKY_RELU = "leaky_relu"
    ELU = "elu"
    SELU = "selu"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    SOFTPLUS = "softplus"
    SOFTMAX = "softmax"
    GELU = "gelu"

    def __call__(self) -> nn.Module:
        if self is Activations.SOFTMAX:
            return nn.Softmax(dim=-1)
        return {
            "relu": nn.ReLU,
            "leaky_relu": nn.LeakyReLU,
            "elu": nn.ELU,
            "selu": nn.SELU,
            "tanh": nn.Tanh,
            "sigmoid": nn.Sigmoid,
            "softplus": nn.Softplus,
            "gelu": nn.GELU,
        }[self.value]()


class Losses(ValueEnum):
    """Losses. Nets output raw logits; NLL gets an internal ``log_softmax``."""

    CROSS_ENTROPY = "cross_entropy"
    NEGATIVE_LOG_LIKELIHOOD = "negative_log_likelihood"
    BINARY_CROSS_ENTROPY = "binary_cross_entropy"
    MEAN_SQUARED_ERROR = "mean_squared_error"

    def __call__(self, **kwargs: Any) -> nn.Module:
        return {
            "cross_entropy": nn.CrossEntropyLoss,
            "negative_log_likelihood": nn.NLLLoss,
            "binary_cross_entropy": nn.BCEWithLogitsLoss,
            "mean_squared_error": nn.MSELoss,
        }[self.value](**kwargs)

    @property
    def task_kind(self) -> str:
        """The task kind this loss implies by default."""
        return {
            "cross_entropy": "categorical",
            "negative_log_likelihood": "categorical",
            "binary_cross_entropy": "multilabel",
            "mean_squared_error": "regression",
        }[self.value]


class Devices(ValueEnum):
    """Devices. Calling a member gives its ``torch.device``; ``AUTO`` resolves, when called, to
    the first available of CUDA, MPS and CPU. ``Devices.get()`` keeps NNx's documented
    preference (MPS, then CUDA, then CPU)."""

    CPU = "cpu"
    CUDA = "cuda"
    MPS = "mps"
    AUTO = "auto"

    def __call__(self) -> torch.device:
        return resolve_device(self.value)

    def torch_device(self) -> torch.device:
        """This member's ``torch.device`` (the same as calling it)."""
        return self()

    @classmethod
    def get(cls) -> Devices:
        """The best available device: MPS, then CUDA, then CPU (NNx's order)."""
        if torch.backends.mps.is_available():
            return cls.MPS
        if torch.cuda.is_available():
            return cls.CUDA
        return cls.CPU

    @classmethod
    def get_torch_device(cls) -> torch.device:
        """The ``torch.device`` of :meth:`get`."""
        return cls.get()()


class Device(str):
    """A device with an index, as PyTorch names it (``"cuda:1"``); calling it gives the
    ``torch.device``. Devices without an index are ``Devices`` members."""

    __slots__ = ()

    def __call__(self) -> torch.device:
        return resolve_device(self)

    def __repr__(self) -> str:
        return f"Device({str(self)!r})"


_DEVICE_HELP = "'auto', 'cpu', 'cuda', 'cuda:N', 'mps', a Devices member or a torch.device"


def device_of(path: str, value: Any) -> Devices | Device:
    """The device ``value`` names: a ``Devices`` member (``"cpu"``, ``"CUDA"``, ``"auto"``,
    ``torch.device("cpu")``) or a :class:`Device` for an indexed one (``"cuda:1"``)."""
    if isinstance(value, (Devices, Device)):
        return value
    if isinstance(value, torch.device):
        value = str(value)
    if isinstance(value, str):
        name = value.strip().lower()
        if name in {member.value for member in Devices}:
            return Devices(name)
        try:
            device = torch.device(name)
        except (RuntimeError, ValueError):
            device = None
        if device is not None and device.type in ("cpu", "cuda", "mps"):
            return Devices(device.type) if device.index is None else Device(f"{device.type}:{device.index}")
    raise ParamsError(path, f"must be {_DEVICE_HELP}; got {value!r}")


def resolve_device(name: str) -> torch.device:
    """The ``torch.device`` a device name means on this machine. ``"auto"`` is the first available
    of CUDA, MPS and CPU; ``"cuda:N"`` must name a GPU this machine has."""
    if name == Devices.AUTO.value:
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps" if torch.backends.mps.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and device.index is not None and torch.cuda.is_available():
        count = torch.cuda.device_count()
        if device.index >= count:
            raise ParamsError(
                "NNModelParams.device", f"{name} names GPU {device.index} but this machine has {count} (0..{count - 1})"
            )
    return device


class Optims(ValueEnum):
    """Optimizers."""

    SGD = "sgd"
    SGD_NESTEROV = "sgd_nesterov"
    ADAM = "adam"
    ADAM_AMSGRAD = "adam_amsgrad"
    ADAMW = "adamw"

    @property
    def is_adam(self) -> bool:
        """Whether momentum is a (beta1, beta2) pair."""
        return self.value.startswith("adam")

    def __call__(
        self,
        net: nn.Module,
        lr_start: float,
        weight_decay: float = 0.0,
        momentum: Any = None,
        param_groups: Any = None,
        strict_param_groups: bool = False,
        eps: float = 1e-8,
    ) -> torch.optim.Optimizer:
        """The torch optimizer over ``net``'s trainable parameters; ``param_groups``
        (``NNParamGroupSpec``s) give matching parameters their own lr / decay, the rest form a
        default group (``strict_param_groups=True``: the rest are left out). ``momentum``: a
        float for SGD, ``(beta1, beta2)`` for Adam (default 0.0 / (0.9, 0.999))."""
        if momentum is None:
            momentum = (0.9, 0.999) if self.is_adam else 0.0
        spec = types.SimpleNamespace(param_groups=param_groups, max_lr=lr_start)
        groups, _ = param_groups_of(net, self.value, spec, strict=strict_param_groups, required=False)
        return build_optimizer(
            self.value, groups, lr=lr_start, momentum=tuple(momentum) if self.is_adam else momentum,
            weight_decay=weight_decay, eps=eps,
        )


class Schedulers(ValueEnum):
    """Learning-rate schedules (REFERENCE §7)."""

    REDUCE_LR_ON_PLATEAU = "reduce_lr_on_plateau"
    STEP = "step"
    COSINE_ANNEALING = "cosine_annealing"
    ONE_CYCLE = "one_cycle"
    LINEAR_WARMUP_DECAY = "linear_warmup_decay"
    WARMUP_COSINE = "warmup_cosine"  # an NNx extension: not in REFERENCE §7.1 (docs/metrics.md §4)

    def __call__(self, optimizer: torch.optim.Optimizer, params: Any, n_epochs: int) -> Any:
        """The torch LR scheduler of this kind over ``optimizer``, from ``NNSchedulerParams``,
        for a run of ``n_epochs`` (one step per epoch; REFERENCE §7.1 defaults). A budgeted kind
        whose ``total_steps`` is shorter than the run is refused (``ScheduleBudgetError``)."""
        problems = budget_problems(kind=self.value, clock="epoch", total_steps=params.total_steps, n_epochs=n_epochs,
                                   epochs_this_call=n_epochs, per_epoch=1)
        if problems:
            raise ScheduleBudgetError(f"{problems[0]} (the {self.value} schedule steps once per epoch here)")
        return build_scheduler(
            optimizer, self.value, clock="epoch", horizon=n_epochs, min_lr=params.min_lr, factor=params.factor,
            patience=params.patience, cooldown=params.cooldown, threshold=params.threshold,
            step_size=params.step_size, T_max=params.T_max, max_lr=params.max_lr, total_steps=params.total_steps,
            warmup_steps=params.warmup_steps,
        ).scheduler


class Checkpoints(ValueEnum):
    """Built-in checkpoint tags."""

    FIRST = "first"
    Q1 = "q1"
    Q2 = "q2"
    Q3 = "q3"
    LAST = "last"
    BEST = "best"


def phase_tag(local_epoch: int, n_epochs: int) -> Checkpoints | None:
    """The phase tag (FIRST, Q1..Q3) epoch ``local_epoch`` of a ``train()`` call of ``n_epochs``
    commits, or None (``nnx_core.commit.phase_tags``: for short runs a colliding quarter is skipped)."""
    tags = phase_tags(local_epoch, n_epochs)
    return Checkpoints(tags[0]) if tags else None
