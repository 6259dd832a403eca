"""``nnx.nn.net.graph_nn_base``: out of scope here — every name raises ``OutOfScopeError`` (``nnx_api.scope``)."""

from nnx_api.scope import GRAPH, refusing_module

__getattr__ = refusing_module("nnx.nn.net.graph_nn_base", GRAPH)
