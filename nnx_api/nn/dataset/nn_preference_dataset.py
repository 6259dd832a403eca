"""NNx path ``nnx.nn.dataset.nn_preference_dataset``: placeholders for the training paradigms beyond supervised learning and distillation (diffusion, JEPA, DPO, contrastive), out of scope here; using a name raises ``OutOfScopeError`` (nnx_api/nnx_paths.py).

DPO preference pairs."""

from nnx_api.scope import PARADIGMS, refusing_module

__getattr__ = refusing_module("nnx.nn.dataset.nn_preference_dataset", PARADIGMS)
