"""``nnx.nn.dataset``: NNx's dataset wrappers (``nnx_api.datasets``)."""

from nnx_api.parts.datasets import DatasetColumnError, NNDataset, NNDatasetBase, NNTabularDataset

__all__ = ["DatasetColumnError", "NNDataset", "NNDatasetBase", "NNTabularDataset"]
