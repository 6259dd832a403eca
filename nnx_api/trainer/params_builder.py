"""NNx path ``nnx.trainer.params_builder``: a re-export module (nnx_api/nnx_paths.py).
"""

from nnx_api.config.builders import NNTrainerParamsBuilder

__all__ = ["NNTrainerParamsBuilder"]
