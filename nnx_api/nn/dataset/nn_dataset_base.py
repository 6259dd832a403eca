"""NNx path ``nnx.nn.dataset.nn_dataset_base``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.parts.datasets import NNDatasetBase

__all__ = ["NNDatasetBase"]
