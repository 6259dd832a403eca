"""NNx path ``nnx.nn.net.transformer_nn``: placeholders for transformers and language-model helpers, out of scope here; using a name raises ``OutOfScopeError`` (nnx_api/nnx_paths.py)."""

from nnx_api.scope import LM, refusing_module

__getattr__ = refusing_module("nnx.nn.net.transformer_nn", LM)
