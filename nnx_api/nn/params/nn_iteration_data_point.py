"""NNx path ``nnx.nn.params.nn_iteration_data_point``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_core.records import IterationDataPoint as NNIterationDataPoint

__all__ = ["NNIterationDataPoint"]
