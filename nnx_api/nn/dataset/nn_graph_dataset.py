"""NNx path ``nnx.nn.dataset.nn_graph_dataset``: placeholders, out of scope here (nnx_api/nnx_paths.py)."""

from nnx_api.scope import GRAPH, refusing_module

__getattr__ = refusing_module("nnx.nn.dataset.nn_graph_dataset", GRAPH)
