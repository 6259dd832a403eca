"""NNx path ``nnx.nn.params.nn_vit_params``: placeholders, out of scope here (nnx_api/nnx_paths.py)."""

from nnx_api.scope import LM, refusing_module

__getattr__ = refusing_module("nnx.nn.params.nn_vit_params", LM)
