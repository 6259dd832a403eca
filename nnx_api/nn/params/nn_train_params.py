"""``nnx.nn.params.nn_train_params``: ``NNTrainParams``."""

from nnx_api.config.params import NNTrainParams

__all__ = ["NNTrainParams"]
