"""NNx path ``nnx.nn.dataset.nn_preference_dataset``: placeholders, out of scope here (nnx_api/nnx_paths.py).

DPO preference pairs."""

from nnx_api.scope import PARADIGMS, refusing_module

__getattr__ = refusing_module("nnx.nn.dataset.nn_preference_dataset", PARADIGMS)
