"""NNx path ``nnx.nn.params.nn_vit_params``: placeholders for transformers and language-model helpers, out of scope here; using a name raises ``OutOfScopeError`` (nnx_api/nnx_paths.py)."""

from nnx_api.scope import LM, refusing_module

__getattr__ = refusing_module("nnx.nn.params.nn_vit_params", LM)
