"""NNx path ``nnx.trainer.trainer``: a re-export module (nnx_api/nnx_paths.py).
"""

from nnx_api.trainer import Trainer
from nnx_api.training.steps import TrainerStepContext, TrainerStepFn

__all__ = ["Trainer", "TrainerStepContext", "TrainerStepFn"]
