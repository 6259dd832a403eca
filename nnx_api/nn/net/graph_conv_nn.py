"""NNx path ``nnx.nn.net.graph_conv_nn``: placeholders for graph nets, out of scope here; using a name raises ``OutOfScopeError`` (nnx_api/nnx_paths.py)."""

from nnx_api.scope import GRAPH, refusing_module

__getattr__ = refusing_module("nnx.nn.net.graph_conv_nn", GRAPH)
