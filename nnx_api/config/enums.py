"""Enums of the public API. Values are lowercase strings; members that build torch objects are
factories: ``Losses.CROSS_ENTROPY()`` returns the loss module, ``Devices.CPU()`` the device.

Every enum accepts its member, its value or its name in any case (``Optims("ADAM")``,
``"Adam"``, ``Optims.ADAM``); ``parse`` turns anything else into a ``ParamsError`` that names the
field and lists the allowed values. Devices are named as PyTorch users name them: a ``Devices``
member, ``"auto"``, ``"cuda:1"`` or a ``torch.device`` (``device_of``); ``resolve_device`` is the one
place a device name becomes a ``torch.device``.
"""

from __future__ import annotations

import difflib
import enum
from typing import Any

import torch
from torch import nn

from nnx_core.errors import ParamsError


class ValueEnum(str, enum.Enum):
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
    """Built-in networks. ``FEED_FWD`` is an MLP built from :class:`NNParams`."""

    FEED_FWD = "feed_fwd"


class Activations(ValueEnum):
    """Activation functions of the built-in nets."""

    RELU = "relu"
    LEAKY_RELU = "leaky_relu"
    ELU = "elu"
    SELU = "selu"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    SOFTPLUS = "softplus"
    GELU = "gelu"

    def __call__(self) -> nn.Module:
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

    @classmethod
    def get(cls) -> Devices:
        """The best available device: MPS, then CUDA, then CPU (NNx's order)."""
        if torch.backends.mps.is_available():
            return cls.MPS
        if torch.cuda.is_available():
            return cls.CUDA
        return cls.CPU


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


class Schedulers(ValueEnum):
    """Learning-rate schedules (REFERENCE §7)."""

    REDUCE_LR_ON_PLATEAU = "reduce_lr_on_plateau"
    STEP = "step"
    COSINE_ANNEALING = "cosine_annealing"
    ONE_CYCLE = "one_cycle"
    LINEAR_WARMUP_DECAY = "linear_warmup_decay"


class Checkpoints(ValueEnum):
    """Built-in checkpoint tags."""

    FIRST = "first"
    Q1 = "q1"
    Q2 = "q2"
    Q3 = "q3"
    LAST = "last"
    BEST = "best"
