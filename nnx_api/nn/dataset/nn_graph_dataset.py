"""``nnx.nn.dataset.nn_graph_dataset``: out of scope here — every name raises ``OutOfScopeError`` (``nnx_api.scope``)."""

from nnx_api.scope import GRAPH, refusing_module

__getattr__ = refusing_module("nnx.nn.dataset.nn_graph_dataset", GRAPH)
