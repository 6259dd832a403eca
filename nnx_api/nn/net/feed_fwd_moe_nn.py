"""NNx path ``nnx.nn.net.feed_fwd_moe_nn``: placeholders, out of scope here (nnx_api/nnx_paths.py)."""

from nnx_api.scope import MOE, refusing_module

__getattr__ = refusing_module("nnx.nn.net.feed_fwd_moe_nn", MOE)
