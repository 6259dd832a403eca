"""NNx path ``nnx.nn.params.nn_moe_params``: placeholders for mixture-of-experts nets, out of scope here; using a name raises ``OutOfScopeError`` (nnx_api/nnx_paths.py)."""

from nnx_api.scope import MOE, refusing_module

__getattr__ = refusing_module("nnx.nn.params.nn_moe_params", MOE)
