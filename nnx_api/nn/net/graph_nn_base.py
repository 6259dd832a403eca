"""NNx path ``nnx.nn.net.graph_nn_base``: placeholders, out of scope here (nnx_api/nnx_paths.py)."""

from nnx_api.scope import GRAPH, refusing_module

__getattr__ = refusing_module("nnx.nn.net.graph_nn_base", GRAPH)
