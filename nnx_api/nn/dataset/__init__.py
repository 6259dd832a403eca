"""NNx path ``nnx.nn.dataset``: a re-export module (nnx_api/nnx_paths.py).

NNx's dataset wrappers (docs/nnx-compat.md), one module each as well."""

from nnx_api.parts.datasets import DatasetColumnError, NNDataset, NNDatasetBase, NNTabularDataset

__all__ = ["DatasetColumnError", "NNDataset", "NNDatasetBase", "NNTabularDataset"]
