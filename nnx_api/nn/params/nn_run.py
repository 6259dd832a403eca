"""NNx path ``nnx.nn.params.nn_run``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.runs.run import NNRun

__all__ = ["NNRun"]
