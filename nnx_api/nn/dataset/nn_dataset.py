"""NNx path ``nnx.nn.dataset.nn_dataset``: a re-export of ``nnx_api.parts.datasets`` (nnx_api/nnx_paths.py)."""

from nnx_api.parts.datasets import NNDataset

__all__ = ["NNDataset"]
