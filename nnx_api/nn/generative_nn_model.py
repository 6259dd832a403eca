"""NNx path ``nnx.nn.generative_nn_model``: placeholders, out of scope here (nnx_api/nnx_paths.py)."""

from nnx_api.scope import LM, refusing_module

__getattr__ = refusing_module("nnx.nn.generative_nn_model", LM)
