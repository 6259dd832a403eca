"""NNx path ``nnx.nn.nn_model``: a re-export module (nnx_api/nnx_paths.py).

``NNModel`` and the names of its step hooks."""

from nnx_core.records import EvaluationDataPoint as NNEvaluationDataPoint
from nnx_core.records import IterationDataPoint as NNIterationDataPoint
from nnx_api.config.enums import Checkpoints, Devices, Nets
from nnx_api.config.params import ModelSpec, NNModelParams, NNParams
from nnx_api.config.train_params import NNTrainParams
from nnx_api.model import NNModel, PredictResult
from nnx_api.parts.models import BatchAdapter, MissingModelFactoryError
from nnx_api.runs.checkpoint import NNCheckpointTransform
from nnx_api.runs.run import NNCheckpoint, NNRun
from nnx_api.training.builtin_step import default_train_step
from nnx_api.training.steps import (
    EvalStepContext,
    EvalStepFn,
    GradientAccumulationState,
    TrainStepContext,
    TrainStepFn,
    streaming_eval_step,
)

__all__ = [
    "BatchAdapter", "Checkpoints", "Devices", "EvalStepContext", "EvalStepFn", "GradientAccumulationState",
    "MissingModelFactoryError", "ModelSpec", "NNCheckpoint", "NNCheckpointTransform", "NNEvaluationDataPoint",
    "NNIterationDataPoint", "NNModel", "NNModelParams", "NNParams", "NNRun", "NNTrainParams", "Nets", "PredictResult",
    "TrainStepContext", "TrainStepFn", "default_train_step", "streaming_eval_step",
]
