"""Enums of the public API. Values are lowercase strings; members that build torch objects are
factories: ``Losses.CROSS_ENTROPY()`` returns the loss module, ``Devices.CPU()`` the device."""

from __future__ import annotations

import enum
from typing import Any

import torch
from torch import nn


class _StrEnum(str, enum.Enum):
    def __str__(self) -> str:
        return self.value


class Nets(_StrEnum):
    """Built-in networks. ``FEED_FWD`` is an MLP built from :class:`NNParams`."""

    FEED_FWD = "feed_fwd"


class Activations(_StrEnum):
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


class Losses(_StrEnum):
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


class Devices(_StrEnum):
    """Devices. ``Devices.get()`` prefers CUDA, then MPS, then CPU."""

    CPU = "cpu"
    CUDA = "cuda"
    MPS = "mps"

    def __call__(self) -> torch.device:
        return torch.device(self.value)

    @classmethod
    def get(cls) -> Devices:
        """The best available device."""
        if torch.cuda.is_available():
            return cls.CUDA
        if torch.backends.mps.is_available():
            return cls.MPS
        return cls.CPU


class Optims(_StrEnum):
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


class Schedulers(_StrEnum):
    """Learning-rate schedules (REFERENCE §7)."""

    REDUCE_LR_ON_PLATEAU = "reduce_lr_on_plateau"
    STEP = "step"
    COSINE_ANNEALING = "cosine_annealing"
    ONE_CYCLE = "one_cycle"
    LINEAR_WARMUP_DECAY = "linear_warmup_decay"


class Checkpoints(_StrEnum):
    """Built-in checkpoint tags."""

    FIRST = "first"
    Q1 = "q1"
    Q2 = "q2"
    Q3 = "q3"
    LAST = "last"
    BEST = "best"
