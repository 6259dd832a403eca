"""NNx path ``nnx.nn.dataset.nn_dataset``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.parts.datasets import NNDataset

__all__ = ["NNDataset"]
