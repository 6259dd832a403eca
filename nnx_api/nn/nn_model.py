"""``nnx.nn.nn_model``: ``NNModel`` and the names of its step hooks."""

from nnx_core.records import EvaluationDataPoint as NNEvaluationDataPoint
from nnx_core.records import IterationDataPoint as NNIterationDataPoint
from nnx_api.config.enums import Checkpoints, Devices, Nets
from nnx_api.config.params import ModelSpec, NNModelParams, NNParams, NNTrainParams
from nnx_api.model import NNModel, PredictResult
from nnx_api.parts.models import BatchAdapter, MissingModelFactoryError
from nnx_api.runs.checkpoint import NNCheckpointTransform
from nnx_api.runs.run import NNCheckpoint, NNRun
from nnx_api.training.steps import (
    EvalStepContext,
    EvalStepFn,
    GradientAccumulationState,
    TrainStepContext,
    TrainStepFn,
    default_train_step,
    streaming_eval_step,
)

__all__ = ["BatchAdapter", "Checkpoints", "Devices", "EvalStepContext", "EvalStepFn", "GradientAccumulationState", "MissingModelFactoryError", "ModelSpec", "NNCheckpoint", "NNCheckpointTransform", "NNEvaluationDataPoint", "NNIterationDataPoint", "NNModel", "NNModelParams", "NNParams", "NNRun", "NNTrainParams", "Nets", "PredictResult", "TrainStepContext", "TrainStepFn", "default_train_step", "streaming_eval_step"]
