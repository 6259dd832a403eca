"""NNx path ``nnx.nn.params.nn_train_params``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_api.config.train_params import NNTrainParams

__all__ = ["NNTrainParams"]
