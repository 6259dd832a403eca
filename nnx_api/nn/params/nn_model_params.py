"""``nnx.nn.params.nn_model_params``: ``ModelSpec``, ``NNModelParams``, ``PrecisionPolicy``, ``TaskSpec``."""

from nnx_api.config.params import ModelSpec, NNModelParams, PrecisionPolicy, TaskSpec

__all__ = ["ModelSpec", "NNModelParams", "PrecisionPolicy", "TaskSpec"]
