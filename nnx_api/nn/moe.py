"""``nnx.nn.moe``: out of scope here — every name raises ``OutOfScopeError`` (``nnx_api.scope``)."""

from nnx_api.scope import MOE, refusing_module

__getattr__ = refusing_module("nnx.nn.moe", MOE)
