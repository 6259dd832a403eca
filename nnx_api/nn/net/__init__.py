"""NNx path ``nnx.nn.net``: a re-export module (nnx_api/nnx_paths.py).

The built-in networks, one module each as well."""

from nnx_adapters.pytorch.nets import ConvNN, FeedFwdNN

__all__ = ["ConvNN", "FeedFwdNN"]
