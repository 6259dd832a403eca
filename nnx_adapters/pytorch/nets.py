"""The built-in networks, laid out as NNx lays them out.

* ``FeedFwdNN``: ``layers`` is a ``ModuleList`` of ``Linear`` layers over ``dims`` (state-dict keys
  ``layers.<i>.weight`` / ``.bias``); between two layers the hidden layer's activation, then its
  dropout. Inputs are flattened to ``(batch, -1)``.
* ``ConvNN``: LeNet-style — ``convs`` (``Conv2d`` → activation → max-pool per block) over a square
  image, then ``fcs`` (``Linear`` layers, activation and dropout between them). Inputs may be
  images ``(B, C, H, W)`` or their flattened rows.

Layers are created in order with PyTorch's default initialisation, so under the same seed the
same shape gives the same initial weights. Both take a *shape* object (``NNParams`` /
``NNConvParams``): ``dims``, ``activation_for(i)`` (the activation factory of hidden layer ``i``)
and ``dropout_for(i)``; a conv shape also has ``conv_channels``, ``in_channels``,
``kernel_size``, ``stride``, ``padding``, ``pool_size``, ``image_side()``, ``flatten_dim()`` and
``activation``. ``unpack_batch(batch)`` splits an ``(inputs, targets)`` batch into
``((inputs,), targets)``.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

_SEQUENTIAL_KEY = re.compile(r"^(\d+)\.(.+)$")


def _unpack(name: str, batch: Any) -> tuple[tuple[Any, ...], Any]:
    if isinstance(batch, (list, tuple)) and len(batch) == 2:
        return (batch[0],), batch[1]
    raise TypeError(f"{name}.unpack_batch expects an (inputs, targets) list/tuple batch, got {type(batch).__name__}")


def _hidden(shape: Any, n_hidden: int) -> list[tuple[Any, float]]:
    return [(shape.activation_for(i)(), float(shape.dropout_for(i))) for i in range(n_hidden)]


def _dense(X: torch.Tensor, layers: nn.ModuleList, hidden: list[tuple[Any, float]], training: bool) -> torch.Tensor:
    """``Linear`` layers with each hidden layer's activation, then its dropout, between them.

    ``zip`` stops at the last hidden layer without slicing ``layers`` (a slice builds a new
    ``ModuleList``, ~20 µs a forward); a dropout of 0 is skipped (``F.dropout`` returns its input
    unchanged then, drawing no random numbers)."""
    for layer, (activation, dropout) in zip(layers, hidden, strict=False):  # the output layer has none
        X = activation(layer(X))
        if dropout:
            X = F.dropout(X, p=dropout, training=training)
    return layers[-1](X)


class FeedFwdNN(nn.Module):
    """The built-in feed-forward net: ``Linear`` layers over ``params.dims`` in ``self.layers``."""

    def __init__(self, params: Any) -> None:
        super().__init__()
        self.params = params
        dims = list(params.dims)
        self.layers = nn.ModuleList(nn.Linear(i, o) for i, o in itertools.pairwise(dims))
        self.__dict__["_hidden"] = _hidden(params, len(dims) - 2)  # plain attribute: not a submodule
        self._register_load_state_dict_pre_hook(self._legacy_keys)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return _dense(X.reshape(X.size(0), -1), self.layers, self._hidden, self.training)

    def unpack_batch(self, batch: Any) -> tuple[tuple[Any, ...], Any]:
        """``((inputs,), targets)`` of an ``(inputs, targets)`` batch."""
        return _unpack("FeedFwdNN", batch)

    def to_file(self, path: str) -> None:
        """Write the weights (``state_dict()``) to ``path`` with ``torch.save``."""
        torch.save(self.state_dict(), path)

    @classmethod
    def from_file(cls, path: str, params: Any, map_location: Any = "cpu") -> FeedFwdNN:
        """A net of ``params`` holding the weights :meth:`to_file` wrote, read by PyTorch's safe
        loader (``weights_only=True``: a file holding anything but tensors and plain containers is
        refused with ``pickle.UnpicklingError``, never unpickled)."""
        return cls.from_state(torch.load(path, weights_only=True, map_location=map_location), params)

    @classmethod
    def from_state(cls, state_dict: Any, params: Any) -> FeedFwdNN:
        """A net of ``params`` holding ``state_dict`` (strict: every key must fit)."""
        net = cls(params)
        net.load_state_dict(state_dict)
        return net

    def _legacy_keys(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        """Checkpoints of earlier releases keyed the layers as an ``nn.Sequential`` (``0.weight``,
        ``2.weight``, ...): the n-th numbered module becomes ``layers.<n>``."""
        numbered = sorted({int(m.group(1)) for k in state_dict if k.startswith(prefix)
                           if (m := _SEQUENTIAL_KEY.match(k[len(prefix):]))})
        rank = {index: n for n, index in enumerate(numbered)}
        for key in [k for k in state_dict if k.startswith(prefix)]:
            match = _SEQUENTIAL_KEY.match(key[len(prefix):])
            if match:
                state_dict[f"{prefix}layers.{rank[int(match.group(1))]}.{match.group(2)}"] = state_dict.pop(key)

    def __str__(self) -> str:
        return f"FeedFwdNN={self.params}"


class ConvNN(nn.Module):
    """The built-in LeNet-style net: ``convs`` then ``fcs``, over square images."""

    def __init__(self, params: Any) -> None:
        super().__init__()
        self.params = params
        channels = [params.in_channels, *params.conv_channels]
        self.convs = nn.ModuleList(
            nn.Conv2d(i, o, kernel_size=params.kernel_size, stride=params.stride, padding=params.padding)
            for i, o in itertools.pairwise(channels)
        )
        fc_dims = [params.flatten_dim(), *params.hidden_dims, params.output_dim]
        self.fcs = nn.ModuleList(nn.Linear(i, o) for i, o in itertools.pairwise(fc_dims))
        self.__dict__["_conv_activation"] = params.activation()
        self.__dict__["_hidden"] = _hidden(params, len(fc_dims) - 2)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        side = self.params.image_side()
        X = X.reshape(X.size(0), self.params.in_channels, side, side)
        for conv in self.convs:
            X = F.max_pool2d(self._conv_activation(conv(X)), kernel_size=self.params.pool_size)
        return _dense(X.reshape(X.size(0), -1), self.fcs, self._hidden, self.training)

    def unpack_batch(self, batch: Any) -> tuple[tuple[Any, ...], Any]:
        """``((inputs,), targets)`` of an ``(inputs, targets)`` batch."""
        return _unpack("ConvNN", batch)

    def __str__(self) -> str:
        return f"ConvNN={self.params}"
