"""NNx path ``nnx.nn.net.conv_nn``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_adapters.pytorch.nets import ConvNN

__all__ = ["ConvNN"]
