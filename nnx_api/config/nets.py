"""Params of the built-in nets beyond the feed-forward shape: ``NNConvParams`` (``Nets.CONV``).
``NNParams.resolve_from_state`` reads a saved ``conv_channels`` state back as one."""

from __future__ import annotations

import dataclasses
import math

from nnx_core.convert import OMIT
from nnx_core.errors import ParamsError
from nnx_api.config.base import count, frozen_dims, items, param
from nnx_api.config.params import NNParams


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NNConvParams(NNParams):
    """A LeNet-style ``ConvNN``: ``conv_channels`` out-channels per Conv → activation → max-pool
    block over a square image of ``input_dim / in_channels`` pixels, then fully connected
    ``hidden_dims → output_dim``. ``activation`` is used by every conv block; ``activations`` /
    ``dropout_probs`` override the fully connected hidden layers only. The LeNet defaults
    (``in_channels=1, kernel_size=5, stride=1, padding=0, pool_size=2``) are left out of the state.

    >>> NNConvParams(input_dim=784, output_dim=10, conv_channels=(6, 16), hidden_dims=(120, 84)).flatten_dim()
    256
    """

    conv_channels: tuple[int, ...] = param((), check=frozen_dims(items(count(1))))
    in_channels: int = param(1, check=count(1), state=OMIT)
    kernel_size: int = param(5, check=count(1), state=OMIT)
    stride: int = param(1, check=count(1), state=OMIT)
    padding: int = param(0, check=count(0), state=OMIT)
    pool_size: int = param(2, check=count(1), state=OMIT)

    def _check(self) -> None:
        if self.activation is None:
            raise ParamsError(
                "NNConvParams.activation",
                "needs a scalar activation for the convolution blocks (activations=[...] covers only the fully "
                "connected hidden layers); give activation=Activations.RELU (or another)",
            )
        NNParams._check(self)
        if not self.conv_channels:
            raise ParamsError("NNConvParams.conv_channels", "needs at least one conv block, e.g. (6, 16)")
        if self.input_dim % self.in_channels:
            raise ParamsError(
                "NNConvParams.input_dim", f"{self.input_dim} is not divisible by in_channels={self.in_channels}"
            )
        pixels = self.input_dim // self.in_channels
        if math.isqrt(pixels) ** 2 != pixels:
            raise ParamsError(
                "NNConvParams.input_dim",
                f"input_dim / in_channels = {pixels} is not a square image (e.g. 784 for 28×28)",
            )
        if self.spatial_sizes()[-1] < 1:
            raise ParamsError(
                "NNConvParams.conv_channels",
                f"the conv/pool blocks shrink the {self.image_side()}-pixel image below 1×1 "
                f"(spatial sides {self.spatial_sizes()}); use fewer blocks, a smaller kernel or padding",
            )

    def image_side(self) -> int:
        """The side of the square input image."""
        return math.isqrt(self.input_dim // self.in_channels)

    def spatial_sizes(self) -> list[int]:
        """The feature map's side after each Conv → pool block (floor arithmetic, as PyTorch)."""
        sides, side = [], self.image_side()
        for _ in self.conv_channels:
            side = ((side + 2 * self.padding - self.kernel_size) // self.stride + 1) // self.pool_size
            sides.append(side)
        return sides

    def flatten_dim(self) -> int:
        """The input width of the first fully connected layer."""
        return self.conv_channels[-1] * self.spatial_sizes()[-1] ** 2
