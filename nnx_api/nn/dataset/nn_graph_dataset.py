"""NNx path ``nnx.nn.dataset.nn_graph_dataset``: placeholders for graph nets, out of scope here; using a name raises ``OutOfScopeError`` (nnx_api/nnx_paths.py)."""

from nnx_api.scope import GRAPH, refusing_module

__getattr__ = refusing_module("nnx.nn.dataset.nn_graph_dataset", GRAPH)
