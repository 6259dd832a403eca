"""``nnx.nn.dataset.nn_dataset_base``: ``NNDatasetBase``."""

from nnx_api.parts.datasets import NNDatasetBase

__all__ = ["NNDatasetBase"]
