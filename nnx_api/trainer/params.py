"""NNx path ``nnx.trainer.params``: a re-export module (nnx_api/nnx_paths.py).
"""

from nnx_api.config.train_params import NNTrainerParams

__all__ = ["NNTrainerParams"]
