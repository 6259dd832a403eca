"""NNx path ``nnx.nn.dataset.nn_tabular_dataset``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.parts.datasets import DatasetColumnError, NNTabularDataset

__all__ = ["DatasetColumnError", "NNTabularDataset"]
