"""``nnx.nn.params.nn_vit_params``: out of scope here — every name raises ``OutOfScopeError`` (``nnx_api.scope``)."""

from nnx_api.scope import LM, refusing_module

__getattr__ = refusing_module("nnx.nn.params.nn_vit_params", LM)
