"""``nnx.nn.params.nn_transformer_params_builder``: out of scope here — every name raises ``OutOfScopeError`` (``nnx_api.scope``)."""

from nnx_api.scope import LM, refusing_module

__getattr__ = refusing_module("nnx.nn.params.nn_transformer_params_builder", LM)
