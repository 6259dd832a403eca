"""NNx's dataset wrappers (``nnx.nn.dataset``). A re-export module: the code lives in
``nnx_api.parts.datasets``."""

from nnx_api.parts.datasets import DatasetColumnError, NNDataset, NNDatasetBase, NNTabularDataset

__all__ = ["DatasetColumnError", "NNDataset", "NNDatasetBase", "NNTabularDataset"]
