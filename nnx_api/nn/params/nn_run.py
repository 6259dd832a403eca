"""NNx path ``nnx.nn.params.nn_run``: a re-export of ``nnx_api.runs.run`` (nnx_api/nnx_paths.py)."""

from nnx_api.runs.run import NNRun

__all__ = ["NNRun"]
