"""NNx path ``nnx.nn.params.nn_model_params``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.config.params import ModelSpec, NNModelParams, PrecisionPolicy, TaskSpec

__all__ = ["ModelSpec", "NNModelParams", "PrecisionPolicy", "TaskSpec"]
