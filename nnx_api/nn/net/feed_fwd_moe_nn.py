"""``nnx.nn.net.feed_fwd_moe_nn``: out of scope here — every name raises ``OutOfScopeError`` (``nnx_api.scope``)."""

from nnx_api.scope import MOE, refusing_module

__getattr__ = refusing_module("nnx.nn.net.feed_fwd_moe_nn", MOE)
