"""``nnx.nn.net.conv_nn``: ``ConvNN``."""

from nnx_adapters.pytorch.nets import ConvNN

__all__ = ["ConvNN"]
