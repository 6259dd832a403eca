"""NNx: train PyTorch models into durable, content-addressed, exactly resumable runs.

Users write ``import nnx_api as nnx``. The public names are re-exported here.
"""

from nnx_core.compilation import CompileRecord

# NNx 0.4's public names (docs/nnx-compat.md); NNx's module paths live in nnx_api.nn and the modules below
from nnx_core.errors import (
    CodeChangedError,
    CompileError,
    ComponentRestoreError,
    CorruptRunError,
    DataChangedError,
    HistoryCorruptionError,
    InvalidRunIdError,
    MonitorUnavailableError,
    NNxError,
    NonFiniteLossError,
    OutOfScopeError,
    ParamsError,
    PrecisionUnsupportedError,
    PredictionInputError,
    ResumeMismatchError,
    ResumePointError,
    RunExistsError,
    RunLeaseError,
    RunNotFoundError,
    ScheduleBudgetError,
    TaskValidationError,
    TrainingInputError,
    UpdateOwnerError,
)
from nnx_core.monitor import MonitorDecision, MonitorSpec
from nnx_core.precision import ResolvedPrecision
from nnx_core.records import EvaluationDataPoint, IterationDataPoint, MonitorRecord
from nnx_core.records import EvaluationDataPoint as NNEvaluationDataPoint
from nnx_core.records import IterationDataPoint as NNIterationDataPoint
from nnx_core.resume import ResumeStatus
from nnx_adapters.pytorch.metrics import register_metric
from nnx_adapters.pytorch.nets import ConvNN, FeedFwdNN
from nnx_adapters.pytorch.state import dataloader_worker_init_fn, set_seed
from nnx_api import (
    decision_jobs,
    decisions,
    distributed,
    finetune,
    history,
    models,
    monitors,
    objectives,
    optimizers,
    precision,
    prediction,
    seeding,
    streaming,
    tasks,
)
from nnx_api.callbacks import Callback, CallbackContext, EarlyStopping, LRMonitor, ModelCheckpoint, UpdateEvent
from nnx_api.config.builders import NNOptimParamsBuilder, NNSchedulerParamsBuilder, NNTrainerParamsBuilder
from nnx_api.config.compilation import CompileSpec
from nnx_api.config.enums import Activations, Checkpoints, Device, Devices, Losses, Nets, Optims, Schedulers
from nnx_api.config.metrics import MetricSpec
from nnx_api.config.nets import NNConvParams
from nnx_api.config.params import (
    ModelSpec,
    NNModelParams,
    NNOptimFactoryParams,
    NNOptimParams,
    NNParamGroupSpec,
    NNParams,
    NNSchedulerParams,
    NNTrainerParams,
    NNTrainParams,
    OptimizerFactorySpec,
    PrecisionPolicy,
    TaskSpec,
)
from nnx_api.datasets import NNDataset, NNDatasetBase, NNTabularDataset
from nnx_api.finetune import LoadPretrainedResult, build_param_groups, freeze, frozen, load_pretrained, unfreeze
from nnx_api.inference import (
    PredictionBatch,
    PredictionStream,
    PredictionValidationError,
    ProbabilitySpec,
    StreamClosedError,
    prediction_from_logits,
)
from nnx_api.model import NNModel, PredictionResult, PredictResult
from nnx_api.models import (
    BatchAdapter,
    KeywordInputs,
    MissingModelFactoryError,
    PositionalInputs,
    register_model_factory,
    registered_model_factories,
    unregister_model_factory,
)
from nnx_api.optimizers import (
    MissingOptimizerFactoryError,
    build_optimizer,
    register_optimizer_factory,
    registered_optimizer_factories,
    unregister_optimizer_factory,
)
from nnx_api.precision import precision_support
from nnx_api.runs.checkpoint import NNCheckpointTransform
from nnx_api.runs.journal import HistoryJournal, export_history_csv, iter_history, migrate_history
from nnx_api.runs.run import Checkpoint, NNCheckpoint, NNRun
from nnx_api.scope import SCOPES as _OUT_OF_SCOPE
from nnx_api.scope import placeholder as _placeholder
from nnx_api.trainer import Trainer
from nnx_api.training.objectives import LossTerm, Objective, ObjectiveContext, ObjectiveResult, kd_objective, supervised_objective
from nnx_api.training.paradigms import kd_train_step_factory
from nnx_api.training.steps import (
    EvalStepContext,
    EvalStepFn,
    GradientAccumulationState,
    TrainerStepContext,
    TrainerStepFn,
    TrainStepContext,
    TrainStepFn,
    default_train_step,
    finalize_step,
    streaming_eval_step,
)

_LAZY = {"TensorBoardCallback": "nnx_api.callbacks.trackers", "WandbCallback": "nnx_api.callbacks.trackers",
         "ExperimentPlan": "nnx_api.experiments.plans"}


def __getattr__(name: str) -> object:  # these modules import nnx_api themselves: bound on first use
    if name in _OUT_OF_SCOPE:
        return _placeholder(name)
    if name not in _LAZY:
        raise AttributeError(f"module 'nnx_api' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)


__all__ = [name for name in dir() if not name.startswith("_")] + list(_LAZY)
