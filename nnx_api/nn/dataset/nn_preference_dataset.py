"""``nnx.nn.dataset.nn_preference_dataset``: out of scope here (DPO preference pairs) — every name
raises ``OutOfScopeError`` (``nnx_api.scope``)."""

from nnx_api.scope import PARADIGMS, refusing_module

__getattr__ = refusing_module("nnx.nn.dataset.nn_preference_dataset", PARADIGMS)
