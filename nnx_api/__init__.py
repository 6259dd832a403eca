"""NNx: train PyTorch models into durable, content-addressed, exactly resumable runs.

Users write ``import nnx_api as nnx``. The public names are re-exported here, lazily (PEP 562):
importing the package binds none of them, and the first use of a re-exported object
(``nnx.NNModel``, ``from nnx_api import NNRun``, ``from nnx_api import *``) imports every module
below, in the order the package used to import them eagerly, and binds every name at once. A
public module (``nnx.models``) is imported by itself, as ``import nnx_api.models`` would.

Why lazily: every submodule import runs this ``__init__`` first, so the ``nnx`` console script
(``nnx_api.cli``) paid for torch and the whole training stack before printing ``--help``.
Why everything at the first use rather than one module per name: after it the package is exactly
what the eager imports made it (the same objects, the modules bound as attributes, every import-time
registration done, such as the converter hooks of ``nnx_api.config.convert``), so no user code can
tell the difference; only code that never uses a re-exported object (the CLI) skips the imports.
``_EXPORTS`` (module → names, in the eager order) and ``_MODULES`` are the table; the
``TYPE_CHECKING`` block says the same to type checkers and IDEs (``tests/api/test_cli_startup.py``
keeps the two equal), and ``__all__`` is the names, sorted, as before. NNx's module paths
(``nnx_api.history``, ``nnx_api.nn.params.nn_train_params``, ...) are declared apart, in
``nnx_api/nnx_paths.py``; ``tests/compat/test_paths.py`` checks that both tables give one object per name.
"""

import importlib
from typing import TYPE_CHECKING, Any

from nnx_api.scope import SCOPES as _OUT_OF_SCOPE
from nnx_api.scope import placeholder as _placeholder

if TYPE_CHECKING:
    # NNx 0.4's public names (docs/nnx-compat.md); NNx's module paths are declared in nnx_api/nnx_paths.py
    from nnx_core.compilation import CompileRecord
    from nnx_core.errors import (
        CodeChangedError,
        CompileError,
        ComponentRestoreError,
        ContextAttributeError,
        CorruptRunError,
        DataChangedError,
        DivergedCopiesError,
        ExtraMetricError,
        HistoryCorruptionError,
        InputWidthError,
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
        StaleCheckpointError,
        TaskValidationError,
        TrainingInputError,
        TrainingPreempted,
        UpdateOwnerError,
    )
    from nnx_core.errors import CompileError as CompileFailed
    from nnx_core.monitor import MonitorDecision
    from nnx_core.monitor_spec import MonitorSpec
    from nnx_core.precision import ResolvedPrecision
    from nnx_core.records import EvaluationDataPoint, IterationDataPoint, MonitorRecord
    from nnx_core.records import EvaluationDataPoint as NNEvaluationDataPoint
    from nnx_core.records import IterationDataPoint as NNIterationDataPoint
    from nnx_core.resume import ResumeStatus
    from nnx_adapters.pytorch.metrics import register_metric, registered_metrics, unregister_metric
    from nnx_adapters.pytorch.nets import ConvNN, FeedFwdNN
    from nnx_adapters.pytorch.state import dataloader_worker_init_fn, set_seed
    from nnx_adapters.pytorch.tasks import TaskAdapter
    from nnx_api import (
        abstention,
        bundles,
        calibration,
        compilation,
        components,
        data_splits,
        decisions,
        distributed,
        finetune,
        history,
        models,
        monitors,
        objectives,
        optimizers,
        paradigms,
        precision,
        prediction,
        preprocessing,
        provenance,
        result,
        seeding,
        streaming,
        tasks,
        transforms,
        utils,
        vis_utils,
        viz,
    )
    from nnx_api.callbacks import Callback, CallbackContext, EarlyStopping, LRMonitor, ModelCheckpoint, UpdateEvent
    from nnx_api.components import ComponentRegistry, ComponentSpec, StatefulComponent
    from nnx_api.config.builders import NNOptimParamsBuilder, NNSchedulerParamsBuilder, NNTrainerParamsBuilder
    from nnx_api.config.compilation import CompileSpec
    from nnx_api.config.enums import Activations, Checkpoints, Device, Devices, Losses, Nets, Optims, Schedulers
    from nnx_api.config.metrics import MetricSpec
    from nnx_api.config.nets import NNConvParams
    from nnx_api.config.optim_params import (
        NNOptimFactoryParams,
        NNOptimParams,
        NNParamGroupSpec,
        NNSchedulerParams,
        OptimizerFactorySpec,
    )
    from nnx_api.config.params import ModelSpec, NNModelParams, NNParams, PrecisionPolicy, TaskSpec
    from nnx_api.config.train_params import NNTrainerParams, NNTrainParams
    from nnx_api.finetune import LoadPretrainedResult, build_param_groups, freeze, frozen, load_pretrained, unfreeze
    from nnx_api.lr_finder import LRFinderResult, lr_finder
    from nnx_api.model import NNModel, PredictionResult, PredictResult
    from nnx_api.models import (
        BatchAdapter,
        KeywordInputs,
        MissingModelFactoryError,
        PositionalInputs,
        RuntimeModule,
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
    from nnx_api.parts.datasets import NNDataset, NNDatasetBase, NNTabularDataset
    from nnx_api.parts.inference import (
        PredictionBatch,
        PredictionStream,
        PredictionValidationError,
        ProbabilitySpec,
        StreamClosedError,
        prediction_from_logits,
    )
    from nnx_api.precision import precision_support
    from nnx_api.runs.checkpoint import NNCheckpointTransform
    from nnx_api.runs.journal import HistoryJournal, export_history_csv, iter_history, migrate_history
    from nnx_api.runs.run import Checkpoint, NNCheckpoint, NNRun
    from nnx_api.streaming_metrics import MetricSnapshot, StreamingMetrics
    from nnx_api.tasks import task_adapter
    from nnx_api.trainer import Trainer
    from nnx_api.training.builtin_step import default_train_step
    from nnx_api.training.objectives import (
        LossTerm,
        Objective,
        ObjectiveContext,
        ObjectiveResult,
        kd_objective,
        supervised_objective,
    )
    from nnx_api.training.paradigms import kd_train_step_factory
    from nnx_api.training.steps import (
        EvalStepContext,
        EvalStepFn,
        GradientAccumulationState,
        TrainerStepContext,
        TrainerStepFn,
        TrainStepContext,
        TrainStepFn,
        finalize_step,
        streaming_eval_step,
    )
    from nnx_api.utils import Utils
    from nnx_api.vis_utils import VisUtils

# module -> the public names it gives ("A as B": bound as B), in the order of the eager imports
_EXPORTS: dict[str, tuple[str, ...]] = {
    "nnx_core.compilation": ("CompileRecord",),
    "nnx_core.errors": (
        "CodeChangedError", "CompileError", "CompileError as CompileFailed", "ComponentRestoreError", "ContextAttributeError", "CorruptRunError", "DataChangedError",
        "DivergedCopiesError", "ExtraMetricError", "HistoryCorruptionError", "InputWidthError", "InvalidRunIdError", "MonitorUnavailableError", "NNxError", "NonFiniteLossError",
        "OutOfScopeError", "ParamsError", "PrecisionUnsupportedError", "PredictionInputError", "ResumeMismatchError",
        "ResumePointError", "RunExistsError", "RunLeaseError", "RunNotFoundError", "ScheduleBudgetError",
        "StaleCheckpointError", "TaskValidationError", "TrainingInputError", "TrainingPreempted", "UpdateOwnerError",
    ),
    "nnx_core.monitor": ("MonitorDecision",),
    "nnx_core.monitor_spec": ("MonitorSpec",),
    "nnx_core.precision": ("ResolvedPrecision",),
    "nnx_core.records": (
        "EvaluationDataPoint", "IterationDataPoint", "MonitorRecord",
        "EvaluationDataPoint as NNEvaluationDataPoint", "IterationDataPoint as NNIterationDataPoint",
    ),
    "nnx_core.resume": ("ResumeStatus",),
    "nnx_adapters.pytorch.metrics": ("register_metric", "registered_metrics", "unregister_metric"),
    "nnx_adapters.pytorch.nets": ("ConvNN", "FeedFwdNN"),
    "nnx_adapters.pytorch.state": ("dataloader_worker_init_fn", "set_seed"),
    **{f"nnx_api.{name}": () for name in (  # public modules (in _MODULES), imported here in this order
        "decisions", "distributed", "finetune", "history", "models", "monitors", "objectives",
        "optimizers", "precision", "prediction", "seeding", "streaming", "tasks",
    )},
    "nnx_api.callbacks": ("Callback", "CallbackContext", "EarlyStopping", "LRMonitor", "ModelCheckpoint", "UpdateEvent"),
    "nnx_api.components": ("ComponentRegistry", "ComponentSpec", "StatefulComponent"),
    "nnx_api.config.builders": ("NNOptimParamsBuilder", "NNSchedulerParamsBuilder", "NNTrainerParamsBuilder"),
    "nnx_api.config.compilation": ("CompileSpec",),
    "nnx_api.config.enums": ("Activations", "Checkpoints", "Device", "Devices", "Losses", "Nets", "Optims", "Schedulers"),
    "nnx_api.config.metrics": ("MetricSpec",),
    "nnx_api.config.nets": ("NNConvParams",),
    "nnx_api.config.params": ("ModelSpec", "NNModelParams", "NNParams", "PrecisionPolicy", "TaskSpec"),
    "nnx_api.config.optim_params": (
        "NNOptimFactoryParams", "NNOptimParams", "NNParamGroupSpec", "NNSchedulerParams", "OptimizerFactorySpec",
    ),
    "nnx_api.config.train_params": ("NNTrainerParams", "NNTrainParams"),
    "nnx_api.parts.datasets": ("NNDataset", "NNDatasetBase", "NNTabularDataset"),
    "nnx_adapters.pytorch.tasks": ("TaskAdapter",),
    "nnx_api.finetune": ("LoadPretrainedResult", "build_param_groups", "freeze", "frozen", "load_pretrained", "unfreeze"),
    "nnx_api.lr_finder": ("LRFinderResult", "lr_finder"),
    "nnx_api.parts.inference": (
        "PredictionBatch", "PredictionStream", "PredictionValidationError", "ProbabilitySpec", "StreamClosedError",
        "prediction_from_logits",
    ),
    "nnx_api.model": ("NNModel", "PredictionResult", "PredictResult"),
    "nnx_api.models": (
        "BatchAdapter", "KeywordInputs", "MissingModelFactoryError", "PositionalInputs", "register_model_factory",
        "registered_model_factories", "unregister_model_factory",
        "RuntimeModule",
    ),
    "nnx_api.optimizers": (
        "MissingOptimizerFactoryError", "build_optimizer", "register_optimizer_factory", "registered_optimizer_factories",
        "unregister_optimizer_factory",
    ),
    "nnx_api.precision": ("precision_support",),
    "nnx_api.runs.checkpoint": ("NNCheckpointTransform",),
    "nnx_api.streaming_metrics": ("MetricSnapshot", "StreamingMetrics"),
    "nnx_api.tasks": ("task_adapter",),  # the public module above (this entry keeps its place in the order)
    "nnx_api.runs.journal": ("HistoryJournal", "export_history_csv", "iter_history", "migrate_history"),
    "nnx_api.runs.run": ("Checkpoint", "NNCheckpoint", "NNRun"),
    "nnx_api.trainer": ("Trainer",),
    "nnx_api.utils": ("Utils",),
    "nnx_api.vis_utils": ("VisUtils",),
    "nnx_api.training.objectives": (
        "LossTerm", "Objective", "ObjectiveContext", "ObjectiveResult", "kd_objective", "supervised_objective",
    ),
    "nnx_api.training.paradigms": ("kd_train_step_factory",),
    "nnx_api.training.steps": (
        "EvalStepContext", "EvalStepFn", "GradientAccumulationState", "TrainerStepContext", "TrainerStepFn",
        "TrainStepContext", "TrainStepFn", "finalize_step", "streaming_eval_step",
    ),
    "nnx_api.training.builtin_step": ("default_train_step",),
}
# the package's own modules that are public names: those imported above, and those the eager imports bound
_MODULES = (
    "abstention", "bundles", "calibration", "callbacks", "compilation", "components", "config", "data_splits",
    "decide", "decisions", "distributed", "finetune", "history", "launch", "model", "models", "monitors",
    "objectives", "optimizers", "paradigms", "parts", "precision", "prediction", "preprocessing", "provenance",
    "result", "runs", "scope", "seeding", "streaming", "tasks", "trainer", "training", "transforms", "utils",
    "vis_utils", "viz",
)
_NAMES: dict[str, tuple[str, str | None]] = {  # public name -> (module, attribute; None: the module itself)
    **{name: (f"{__name__}.{name}", None) for name in _MODULES},
    **{spec.rpartition(" as ")[2]: (module, spec.partition(" as ")[0]) for module, specs in _EXPORTS.items() for spec in specs},
}
# NNx's out-of-scope names that are placeholders made on use (an out-of-scope module, nnx.bundles, is a module above)
_OUT_OF_SCOPE = {name: scope for name, scope in _OUT_OF_SCOPE.items() if name not in _NAMES}
# bound on first use, outside the load above: these modules import nnx_api themselves
_LAZY = {"TensorBoardCallback": "nnx_api.callbacks.trackers", "WandbCallback": "nnx_api.callbacks.trackers",
         "ExperimentPlan": "nnx_api.experiments.plans", "FitResult": "nnx_api.experiments.results"}
_LAZY_MODULES = ("plans", "search")  # NNx's public modules imported on first use of their names (they import nnx_api)
# NNx lists its out-of-scope names too (they resolve to placeholders that refuse on use), but not these
_UNLISTED = frozenset({"GraphAttNN", "GraphConvNN", "GraphSageNN", "NNGraphDataset"})
_loading = False


def _load() -> None:
    """Import every module of the table in the eager order and bind every public name."""
    global _loading
    _loading = True
    try:
        for module in _EXPORTS:
            importlib.import_module(module)
        for name in _NAMES:
            _bind(name)
    finally:
        _loading = False


def _bind(name: str) -> Any:
    module, attribute = _NAMES[name]
    value = importlib.import_module(module)
    value = value if attribute is None else getattr(value, attribute)
    globals()[name] = value
    return value


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        if _NAMES[name][1] is None or _loading:  # one of the package's modules (``from nnx_api import finetune``
            return _bind(name)  # inside nnx_api.model), or a name a module the load is importing asks for
        _load()  # the first re-exported object used: everything, as the eager package did
        return globals()[name]
    if name in _LAZY_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name == "__version__":  # the installed distribution's version (None from a bare source tree)
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("nnx")
        except PackageNotFoundError:
            return None
    if name in _OUT_OF_SCOPE:
        return _placeholder(name)
    if name not in _LAZY:
        raise AttributeError(f"module 'nnx_api' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = sorted(_NAMES) + list(_LAZY) + list(_LAZY_MODULES) + sorted(set(_OUT_OF_SCOPE) - _UNLISTED)
