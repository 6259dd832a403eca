"""``nnx.nn.dataset.nn_dataset``: ``NNDataset`` (vision dataset classes)."""

from nnx_api.parts.datasets import NNDataset

__all__ = ["NNDataset"]
