"""``nnx.nn.dataset.nn_tabular_dataset``: ``NNTabularDataset`` (tables)."""

from nnx_api.parts.datasets import DatasetColumnError, NNTabularDataset

__all__ = ["DatasetColumnError", "NNTabularDataset"]
