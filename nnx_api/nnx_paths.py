"""NNx's public module paths, declared once: what each one is and where its names come from.

Code written for NNx imports ``nnx.history`` or ``nnx.nn.params.nn_train_params``; here it imports
the same paths with ``nnx`` → ``nnx_api``. ``PATHS`` maps every such path to an :class:`NNxPath`:
its ``kind``, its ``homes`` (home module → the names taken from it; ``"A as B"`` binds ``A`` as
``B``), and for an out-of-scope path the ``scope`` its names refuse with.

* ``SHIM`` — a real file, so type checkers and IDEs see the module, holding only a docstring whose
  first line is :func:`first_line`, imports of exactly the declared names from the declared homes,
  and ``__all__``: no logic, no registration (importing a home is enough to use its names).
* ``HOME`` — the module itself is the real code (``nnx_api.finetune``); ``homes`` is the module
  itself, with the names it must keep exposing (its ``__all__`` may hold more).
* ``OUT_OF_SCOPE`` — a placeholder module: its names import, and using one raises
  ``OutOfScopeError`` naming ``scope``; beside them it may define the real error class NNx's
  handlers catch, or re-export the one in-scope name (``nnx.paradigms.kd_train_step_factory``).
* ``PROJECT`` — a public re-export module of this project's own, with no NNx path
  (``nnx_api.storage``); it is written and checked as a shim.

This project's own old paths were retired (``RETIRED``: where their names live now).

``NOT_MIRRORED`` gives, for every other module of NNx 0.4.1's wheel, why there is no such path here.
``tests/compat/test_paths.py`` checks the files, the objects and the wheel's module list
(``tests/compat/nnx_wheel_modules.txt``) against this table; ``tests/core/test_layering.py``
checks that a shim imports nothing but its declared names. Plain data: importing it imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from nnx_api.scope import (
    EXTRAS,
    GGUF,
    GRAPH,
    LM,
    MOE,
    PARADIGMS,
    PEFT,
    PREPROCESSING,
    PROVIDERS,
    QUANT,
    SCOPES,
    SPLITS,
    SURGERY,
    TRANSFORMS,
    VIZ,
)

SHIM = "shim"
"""An NNx path whose file re-exports the names of other modules (its homes)."""
HOME = "home"
"""An NNx path whose module is itself the real code."""
OUT_OF_SCOPE = "out-of-scope"
"""An NNx path whose names import as placeholders that refuse with ``OutOfScopeError``."""
PROJECT = "project"
"""A public re-export module of this project's own (no NNx path)."""
KINDS = (SHIM, HOME, OUT_OF_SCOPE, PROJECT)
"""Every kind of path, in the order above."""
RE_EXPORTS = (SHIM, PROJECT)
"""The kinds whose files hold only a docstring, imports from their homes and ``__all__``."""
TABLE = "nnx_api/nnx_paths.py"
"""Where every shim's first docstring line points."""


class NNxPath(NamedTuple):
    """One module path: its ``kind``, its ``homes`` (module → the names bound from it, ``"A as B"``
    when bound as ``B``), and the ``scope`` an out-of-scope path names."""

    kind: str
    homes: Mapping[str, tuple[str, ...]]
    scope: str = ""

    @property
    def bindings(self) -> dict[str, tuple[str, str]]:
        """Every name the path binds → (home module, the name there)."""
        return {
            spec.rpartition(" as ")[2]: (home, spec.partition(" as ")[0])
            for home, specs in self.homes.items() for spec in specs
        }

    @property
    def names(self) -> tuple[str, ...]:
        """The public names (``__all__``), sorted: the bindings less the private and dunder ones."""
        return tuple(sorted(name for name in self.bindings if not name.startswith("_")))


# --- the table ---------------------------------------------------------------------------------------
PATHS: dict[str, NNxPath] = {
    # the package: the top-level names NNx 0.4 documents (REFERENCE §1–§3, §8, §9); every top-level
    # name, and the module each comes from, is the lazy table nnx_api._EXPORTS
    "nnx_api": NNxPath(HOME, {"nnx_api": (
        "Activations", "Checkpoints", "ConvNN", "Devices", "EvalStepFn", "FeedFwdNN", "KeywordInputs", "Losses",
        "ModelSpec", "NNCheckpoint", "NNCheckpointTransform", "NNConvParams", "NNEvaluationDataPoint",
        "NNIterationDataPoint", "NNModel", "NNModelParams", "NNOptimParams", "NNParams", "NNRun", "NNSchedulerParams",
        "NNTrainParams", "NNTrainerParams", "Nets", "Optims", "PositionalInputs", "PredictionResult",
        "PredictionStream", "PredictionValidationError", "ProbabilitySpec", "Schedulers", "TrainStepFn",
        "TrainerStepFn", "freeze", "frozen", "load_pretrained", "prediction_from_logits", "register_model_factory",
        "unfreeze",
    )}),
    # --- nnx.<module> (REFERENCE §8–§11) ---
    "nnx_api.abstention": NNxPath(OUT_OF_SCOPE, {"nnx_api.abstention": (
        "FORMAT", "INPUT_FIELDS", "MAX_DEFAULT_CANDIDATES", "POLICY_KINDS", "REASONS", "AbstentionError",
        "AbstentionPolicy", "AbstentionResult", "AbstentionSchemaError", "AcceptedRows", "CoverageAccumulator",
        "CoverageReport", "CurvePoint", "Outcome", "SelectiveDecision", "ThresholdSelection", "decide",
        "risk_coverage_curve", "scores", "select_threshold",
    )}, scope=EXTRAS),
    "nnx_api.bundles": NNxPath(OUT_OF_SCOPE, {"nnx_api.bundles": (
        "BUNDLE_FORMAT", "BUNDLE_VERSION", "BundleCapabilityError", "BundleError", "BundleInfo", "BundleIntegrityError",
        "BundleReconstructionError", "ReconstructedBundle", "export_bundle", "inspect_bundle", "reconstruct_bundle",
        "validate_bundle",
    )}, scope=EXTRAS),
    "nnx_api.calibration": NNxPath(OUT_OF_SCOPE, {"nnx_api.calibration": (
        "DEFAULT_EPSILON", "FORMAT", "CalibratedPrediction", "CalibrationError", "CalibrationFit", "CalibrationFitError",
        "CalibrationMetrics", "CalibrationMismatchError", "CalibrationReport", "ReliabilityBin", "TemperatureCalibrator",
        "brier_score", "expected_calibration_error", "fit_temperature", "model_fingerprint", "negative_log_likelihood",
        "reliability_bins",
    )}, scope=EXTRAS),
    "nnx_api.compilation": NNxPath(SHIM, {
        "nnx_core.compilation": ("CompileRecord",),
        "nnx_core.errors": ("CompileError as CompileFailed",),
        "nnx_api.config.compilation": ("COMPILE_MODES", "CompileSpec"),
    }),
    "nnx_api.components": NNxPath(HOME, {"nnx_api.components": (
        "COMPONENT_STATE_VERSION", "ComponentPlan", "ComponentRegistry", "ComponentRestoreError", "ComponentSpec",
        "ResumeStatus", "StatefulComponent",
    )}),
    "nnx_api.data_splits": NNxPath(OUT_OF_SCOPE, {"nnx_api.data_splits": (
        "FORMAT", "SPLITS", "STRATEGIES", "SplitError", "SplitIndices", "SplitManifest", "plan_split",
    )}, scope=SPLITS),
    "nnx_api.decisions": NNxPath(SHIM, {"nnx_api.decide.provider": (
        "PRIMITIVES", "PROBABILITY_TOLERANCE", "Boolean", "BooleanResult", "Capabilities", "Choice", "ChoiceResult",
        "DecisionError", "DecisionJob", "DecisionProvider", "DecisionResult", "FixedHeadProvider", "Follow",
        "InvalidDecisionRequest", "InvalidDecisionResponse", "InvalidJob", "JobError", "JobFailed", "JobLimitExceeded",
        "JobResult", "JobTimeout", "Limits", "Option", "ProviderFailure", "Question", "QuestionOutcome", "RowOutcome",
        "Score", "ScoreResult", "UnsupportedCapability", "question_from_state", "validate_response",
        "__getattr__",  # NNx's NLI and Jev providers: placeholders (scope.PROVIDERS)
    )}),
    "nnx_api.distributed": NNxPath(HOME, {"nnx_api.distributed": (
        "DDP", "DDP_KIND", "DataParallel", "DistributedFailure", "GroupInfo", "RankPartition", "RankSync", "ShardedTrainLoader",
        "ShardedValidationLoader", "WriterOnly", "init_process_group", "refuse_process_group", "shutdown",
        "train_loader", "validation_loader", "writer_only",
    )}),
    "nnx_api.export_conformance": NNxPath(HOME, {"nnx_api.export_conformance": (
        "EXIT_CODES", "FAILURES", "FORMAT", "LEVELS", "MODEL", "PROFILES", "STAGES", "ConformanceError", "Profile",
        "build_model", "execute", "exit_code", "run_profile", "run_profiles", "save_report", "summary_lines",
        "validate_record", "verify_artifacts",
    )}),
    "nnx_api.finetune": NNxPath(HOME, {"nnx_api.finetune": (
        "LoadPretrainedResult", "NNParamGroupSpec", "build_param_groups", "freeze", "frozen", "load_pretrained",
        "read_state_dict", "unfreeze",
    )}),
    "nnx_api.finetune.freezing": NNxPath(SHIM, {"nnx_api.finetune": ("freeze", "frozen", "unfreeze")}),
    "nnx_api.finetune.loading": NNxPath(SHIM, {"nnx_api.finetune": ("LoadPretrainedResult", "load_pretrained")}),
    "nnx_api.finetune.param_groups": NNxPath(SHIM, {"nnx_api.finetune": ("NNParamGroupSpec", "build_param_groups")}),
    "nnx_api.history": NNxPath(SHIM, {
        "nnx_core.errors": ("HistoryCorruptionError",),
        "nnx_core.journal_format": ("JOURNAL_FORMAT", "JOURNAL_VERSION"),
        "nnx_api.runs.journal": ("HistoryJournal", "export_history_csv", "iter_history", "migrate_history"),
    }),
    "nnx_api.lr_finder": NNxPath(HOME, {"nnx_api.lr_finder": ("LRFinderResult", "lr_finder")}),
    "nnx_api.models": NNxPath(SHIM, {
        "nnx_api.config.params": ("ModelSpec", "RuntimeModule"),
        "nnx_api.parts.models": (
            "BatchAdapter", "KeywordInputs", "MissingModelFactoryError", "PositionalInputs", "build_module",
            "register_model_factory", "registered_model_factories", "unregister_model_factory",
        ),
    }),
    "nnx_api.monitors": NNxPath(SHIM, {
        "nnx_core.errors": ("MonitorUnavailableError",),
        "nnx_core.monitor": ("MonitorDecision", "MonitorTracker"),
        "nnx_core.monitor_spec": ("MonitorSpec",),
        "nnx_core.records": ("MonitorRecord",),
        "nnx_adapters.pytorch.metrics": ("register_metric", "registered_metrics", "unregister_metric"),  # which registers the metric directions
        "nnx_api.config.metrics": ("MetricSpec",),
    }),
    "nnx_api.objectives": NNxPath(SHIM, {"nnx_api.training.objectives": (
        "KDObjective", "LossTerm", "Objective", "ObjectiveContext", "ObjectiveResult", "SupervisedObjective",
        "full_precision_only", "kd_objective", "softened_kl", "supervised_objective",
    )}),
    "nnx_api.optimizers": NNxPath(HOME, {"nnx_api.optimizers": (
        "MissingOptimizerFactoryError", "NNOptimFactoryParams", "OptimizerFactory", "OptimizerFactorySpec",
        "build_optimizer", "register_optimizer_factory", "registered_optimizer_factories",
        "unregister_optimizer_factory",
    )}),
    "nnx_api.paradigms": NNxPath(OUT_OF_SCOPE, {
        "nnx_api.training.paradigms": ("kd_train_step_factory",),
        "nnx_api.paradigms": (
            "feature_kd_train_step_factory", "born_again_train", "simclr_train_step_factory", "nt_xent_loss",
            "mixup_train_step_factory", "cutmix_train_step_factory", "moe_train_step_factory",
            "jepa_train_step_factory", "build_target_encoder", "update_ema", "random_block_mask", "JEPAPredictor",
            "JEPAObjective", "jepa_objective", "JEPATrainStep", "dpo_train_step_factory", "TeacherRecord",
            "TeacherDataset", "OfflineDistillationObjective", "evaluate_offline", "read_teacher_records",
            "write_teacher_records",
        ),
    }, scope=PARADIGMS),
    "nnx_api.plans": NNxPath(SHIM, {
        "nnx_api.experiments.plans": (
            "SALT_PREFIX as ATTEMPT_SALT_PREFIX", "Diagnostic", "ExperimentPlan", "PlanError", "PlanValidation",
        ),
        "nnx_api.experiments.results": ("FitResult", "ProbeResult", "SplitMetrics"),
    }),
    "nnx_api.precision": NNxPath(HOME, {"nnx_api.precision": (
        "REFERENCE_TOLERANCES", "PrecisionPolicy", "PrecisionUnsupportedError", "ReferenceTolerance",
        "ResolvedPrecision", "precision_support", "resolve_precision",
    )}),
    "nnx_api.prediction": NNxPath(SHIM, {"nnx_api.parts.inference": (
        "PredictionResult", "PredictionValidationError", "ProbabilitySpec", "prediction_from_logits",
    )}),
    "nnx_api.provenance": NNxPath(OUT_OF_SCOPE, {"nnx_api.provenance": (
        "FORMAT", "Attempt", "ExperimentManifest", "FieldComparison", "IdentityRef", "ProvenanceComparison",
        "ProvenanceRecord", "canonical_bytes", "compare", "hash_bytes", "hash_file", "load_provenance",
    )}, scope=EXTRAS),
    "nnx_api.preprocessing": NNxPath(OUT_OF_SCOPE, {"nnx_api.preprocessing": (
        "FORMAT", "PreprocessingError", "SplitView", "Standardizer", "describe_transform",
    )}, scope=PREPROCESSING),
    "nnx_api.result": NNxPath(HOME, {"nnx_api.result": (
        "BoundaryError", "Err", "Ok", "Result", "UnwrapError", "decide_result", "inspect_bundle_result",
        "validate_decision_request_result",
    )}),
    "nnx_api.search": NNxPath(SHIM, {"nnx_api.experiments.search": (
        "CategoricalParam", "FloatParam", "IntParam", "SearchBudget", "SearchError", "SearchResult", "SearchSpace",
        "TrialControl", "TrialOutcome", "apply_params", "search",
    )}),
    "nnx_api.seeding": NNxPath(SHIM, {"nnx_adapters.pytorch.state": ("dataloader_worker_init_fn", "set_seed"),
                                          "nnx_api.runs.store": ("env_snapshot",)}),
    "nnx_api.streaming": NNxPath(SHIM, {
        "nnx_api.parts.inference": ("PredictionBatch", "PredictionStream", "StreamClosedError", "concatenate_predictions"),
        "nnx_api.streaming_metrics": ("MetricMergeError", "MetricSnapshot", "StreamingMetrics"),
        "nnx_api.training.steps": ("streaming_eval_step",),
    }),
    "nnx_api.tasks": NNxPath(HOME, {"nnx_api.tasks": ("TaskAdapter", "TaskSpec", "TaskValidationError", "task_adapter")}),
    "nnx_api.trainer": NNxPath(HOME, {"nnx_api.trainer": (
        "NNTrainerParams", "NNTrainerParamsBuilder", "Trainer", "TrainerStepContext",
    )}),
    "nnx_api.trainer.params": NNxPath(SHIM, {"nnx_api.config.train_params": ("NNTrainerParams",)}),
    "nnx_api.trainer.params_builder": NNxPath(SHIM, {"nnx_api.config.builders": ("NNTrainerParamsBuilder",)}),
    "nnx_api.trainer.trainer": NNxPath(SHIM, {"nnx_api.trainer": ("Trainer",),
                                              "nnx_api.training.steps": ("TrainerStepContext", "TrainerStepFn")}),
    "nnx_api.transforms": NNxPath(OUT_OF_SCOPE, {"nnx_api.transforms": (
        "RecipeError", "TransformOp", "TransformRecipe", "check_optimizer", "lora", "low_rank",
    )}, scope=TRANSFORMS),
    "nnx_api.utils": NNxPath(HOME, {"nnx_api.utils": ("Utils", "flatten_dict", "print_table", "print_tree")}),
    "nnx_api.vis_utils": NNxPath(HOME, {"nnx_api.vis_utils": (
        "VisUtils", "classification_report", "confusion_matrix", "generate_colors", "get_scatter_plot_vm",
        "multi_line_plot", "scatter_plot", "two_dim_tsne_checkpoint_logits",
    )}),
    "nnx_api.viz": NNxPath(OUT_OF_SCOPE, {"nnx_api.viz": (
        "activation_map", "attribute", "gradient_flow", "netron_export", "summary", "weight_histogram",
    )}, scope=VIZ),
    # --- nnx.nn.* (REFERENCE §0–§3) ---
    "nnx_api.nn": NNxPath(SHIM, {}),
    "nnx_api.nn.callbacks": NNxPath(SHIM, {
        "nnx_core.monitor_spec": ("MonitorSpec",),
        "nnx_core.records": ("IterationDataPoint as NNIterationDataPoint",),
        "nnx_api.callbacks": (
            "Callback", "CallbackContext", "EarlyStopping", "LRMonitor", "ModelCheckpoint", "UpdateEvent",
            "LegacyCallback as _LegacyCallback",  # NNx's private name of the plain fn(idps) callback's adapter
        ),
        "nnx_api.callbacks.trackers": ("TensorBoardCallback", "WandbCallback"),
        "nnx_api.config.metrics": ("MetricSpec",),
        "nnx_api.runs.checkpoint": ("NNCheckpointTransform",),
        "nnx_api.runs.run": ("NNCheckpoint",),
    }),
    "nnx_api.nn.dataset": NNxPath(SHIM, {"nnx_api.parts.datasets": (
        "DatasetColumnError", "NNDataset", "NNDatasetBase", "NNTabularDataset",
    )}),
    "nnx_api.nn.dataset.nn_dataset": NNxPath(SHIM, {"nnx_api.parts.datasets": ("NNDataset",)}),
    "nnx_api.nn.dataset.nn_dataset_base": NNxPath(SHIM, {"nnx_api.parts.datasets": ("NNDatasetBase",)}),
    "nnx_api.nn.dataset.nn_graph_dataset": NNxPath(OUT_OF_SCOPE, {
        "nnx_api.nn.dataset.nn_graph_dataset": ("NNGraphDataset",),
    }, scope=GRAPH),
    "nnx_api.nn.dataset.nn_preference_dataset": NNxPath(OUT_OF_SCOPE, {
        "nnx_api.nn.dataset.nn_preference_dataset": ("NNPreferenceDataset",),
    }, scope=PARADIGMS),
    "nnx_api.nn.dataset.nn_tabular_dataset": NNxPath(SHIM, {"nnx_api.parts.datasets": (
        "DatasetColumnError", "NNTabularDataset",
    )}),
    "nnx_api.nn.enum": NNxPath(SHIM, {"nnx_api.config.enums": (
        "Activations", "Checkpoints", "Devices", "Losses", "Nets", "Optims", "Schedulers",
    )}),
    "nnx_api.nn.enum.activations": NNxPath(SHIM, {"nnx_api.config.enums": ("Activations",)}),
    "nnx_api.nn.enum.checkpoints": NNxPath(SHIM, {"nnx_api.config.enums": ("Checkpoints", "phase_tag")}),
    "nnx_api.nn.enum.devices": NNxPath(SHIM, {"nnx_api.config.enums": ("Devices",)}),
    "nnx_api.nn.enum.losses": NNxPath(SHIM, {"nnx_api.config.enums": ("Losses",)}),
    "nnx_api.nn.enum.nets": NNxPath(SHIM, {"nnx_api.config.enums": ("Nets",)}),
    "nnx_api.nn.enum.optims": NNxPath(SHIM, {"nnx_api.config.enums": ("Optims",)}),
    "nnx_api.nn.enum.schedulers": NNxPath(SHIM, {"nnx_api.config.enums": ("Schedulers",)}),
    "nnx_api.nn.generative_nn_model": NNxPath(OUT_OF_SCOPE, {
        "nnx_api.nn.generative_nn_model": ("GenerativeNNModel",),
    }, scope=LM),
    "nnx_api.nn.moe": NNxPath(OUT_OF_SCOPE, {"nnx_api.nn.moe": ("MoELinear",)}, scope=MOE),
    "nnx_api.nn.net": NNxPath(SHIM, {"nnx_adapters.pytorch.nets": ("ConvNN", "FeedFwdNN")}),
    "nnx_api.nn.net.conv_nn": NNxPath(SHIM, {"nnx_adapters.pytorch.nets": ("ConvNN",)}),
    "nnx_api.nn.net.feed_fwd_moe_nn": NNxPath(OUT_OF_SCOPE, {"nnx_api.nn.net.feed_fwd_moe_nn": ("FeedFwdMoENN",)},
                                              scope=MOE),
    "nnx_api.nn.net.feed_fwd_nn": NNxPath(SHIM, {"nnx_adapters.pytorch.nets": ("FeedFwdNN",)}),
    "nnx_api.nn.net.graph_att_nn": NNxPath(OUT_OF_SCOPE, {"nnx_api.nn.net.graph_att_nn": ("GraphAttNN",)}, scope=GRAPH),
    "nnx_api.nn.net.graph_conv_nn": NNxPath(OUT_OF_SCOPE, {"nnx_api.nn.net.graph_conv_nn": ("GraphConvNN",)},
                                            scope=GRAPH),
    "nnx_api.nn.net.graph_nn_base": NNxPath(OUT_OF_SCOPE, {"nnx_api.nn.net.graph_nn_base": ("GraphNNBase",)},
                                            scope=GRAPH),
    "nnx_api.nn.net.graph_sage_nn": NNxPath(OUT_OF_SCOPE, {"nnx_api.nn.net.graph_sage_nn": ("GraphSageNN",)},
                                            scope=GRAPH),
    "nnx_api.nn.net.transformer_layers": NNxPath(OUT_OF_SCOPE, {"nnx_api.nn.net.transformer_layers": (
        "MultiHeadCausalAttention", "RMSNorm", "RoPE", "SwiGLU", "TransformerBlock", "apply_rotary",
        "build_causal_mask", "multi_head_causal_attention",
    )}, scope=LM),
    "nnx_api.nn.net.transformer_nn": NNxPath(OUT_OF_SCOPE, {"nnx_api.nn.net.transformer_nn": ("TransformerNN",)},
                                             scope=LM),
    "nnx_api.nn.net.vit_nn": NNxPath(OUT_OF_SCOPE, {"nnx_api.nn.net.vit_nn": ("ViTBlock", "ViTNN")}, scope=LM),
    "nnx_api.nn.nn_model": NNxPath(SHIM, {
        "nnx_core.records": (
            "EvaluationDataPoint as NNEvaluationDataPoint", "IterationDataPoint as NNIterationDataPoint",
        ),
        "nnx_api.config.enums": ("Checkpoints", "Devices", "Nets"),
        "nnx_api.config.params": ("ModelSpec", "NNModelParams", "NNParams"),
        "nnx_api.config.train_params": ("NNTrainParams",),
        "nnx_api.model": ("NNModel", "PredictResult"),
        "nnx_api.parts.models": ("BatchAdapter", "MissingModelFactoryError"),
        "nnx_api.runs.checkpoint": ("NNCheckpointTransform",),
        "nnx_api.runs.run": ("NNCheckpoint", "NNRun"),
        "nnx_api.training.builtin_step": ("default_train_step",),
        "nnx_api.training.steps": (
            "EvalStepContext", "EvalStepFn", "GradientAccumulationState", "TrainStepContext", "TrainStepFn",
            "streaming_eval_step",
        ),
    }),
    "nnx_api.nn.params": NNxPath(SHIM, {}),
    "nnx_api.nn.params.nn_checkpoint": NNxPath(SHIM, {
        "nnx_core.errors": ("ResumePointError",),
        "nnx_api.runs.checkpoint": ("NNCheckpointTransform",),
        "nnx_api.runs.run": ("NNCheckpoint",),
    }),
    "nnx_api.nn.params.nn_conv_params": NNxPath(SHIM, {"nnx_api.config.nets": ("NNConvParams",)}),
    "nnx_api.nn.params.nn_evaluation_data_point": NNxPath(SHIM, {
        "nnx_core.records": ("EvaluationDataPoint as NNEvaluationDataPoint",),
    }),
    "nnx_api.nn.params.nn_iteration_data_point": NNxPath(SHIM, {
        "nnx_core.records": ("IterationDataPoint as NNIterationDataPoint",),
    }),
    "nnx_api.nn.params.nn_model_params": NNxPath(SHIM, {"nnx_api.config.params": (
        "ModelSpec", "NNModelParams", "PrecisionPolicy", "TaskSpec",
    )}),
    "nnx_api.nn.params.nn_moe_params": NNxPath(OUT_OF_SCOPE, {"nnx_api.nn.params.nn_moe_params": ("NNMoEParams",)},
                                               scope=MOE),
    "nnx_api.nn.params.nn_optim_params": NNxPath(SHIM, {
        "nnx_api.config.optim_params": ("NNOptimParams", "NNParamGroupSpec"),
    }),
    "nnx_api.nn.params.nn_optim_params_builder": NNxPath(SHIM, {"nnx_api.config.builders": ("NNOptimParamsBuilder",)}),
    "nnx_api.nn.params.nn_params": NNxPath(SHIM, {"nnx_api.config.params": ("NNParams",)}),
    "nnx_api.nn.params.nn_run": NNxPath(SHIM, {"nnx_api.runs.run": ("NNRun",)}),
    "nnx_api.nn.params.nn_scheduler_params": NNxPath(SHIM, {"nnx_api.config.optim_params": ("NNSchedulerParams",)}),
    "nnx_api.nn.params.nn_scheduler_params_builder": NNxPath(SHIM, {
        "nnx_api.config.builders": ("NNSchedulerParamsBuilder",),
    }),
    "nnx_api.nn.params.nn_tokenizer_params": NNxPath(OUT_OF_SCOPE, {"nnx_api.nn.params.nn_tokenizer_params": (
        "NNTokenizerParams", "train_bpe",
    )}, scope=LM),
    "nnx_api.nn.params.nn_train_params": NNxPath(SHIM, {"nnx_api.config.train_params": ("NNTrainParams",)}),
    "nnx_api.nn.params.nn_transformer_params": NNxPath(OUT_OF_SCOPE, {"nnx_api.nn.params.nn_transformer_params": (
        "NNTransformerParams",
    )}, scope=LM),
    "nnx_api.nn.params.nn_transformer_params_builder": NNxPath(OUT_OF_SCOPE, {
        "nnx_api.nn.params.nn_transformer_params_builder": ("NNTransformerParamsBuilder",),
    }, scope=LM),
    "nnx_api.nn.params.nn_vit_params": NNxPath(OUT_OF_SCOPE, {"nnx_api.nn.params.nn_vit_params": ("NNViTParams",)},
                                               scope=LM),
    # --- this project's own public re-export modules (no NNx path) ---
    "nnx_api.storage": NNxPath(PROJECT, {
        "nnx_core.ports": ("Receipt", "Storage"),
        "nnx_adapters.storage.fs": ("FileStorage",),
        "nnx_adapters.storage.fsspec": ("FsspecStorage", "StorageGuaranteeError"),
        "nnx_adapters.storage.memory": ("MemoryStorage",),
    }),
}
"""Every module path NNx documents (``nnx`` → ``nnx_api``), and this project's own re-export modules."""

RETIRED: dict[str, str] = {
    "nnx_api.cli_extra": "nnx_api.commands.runs_extra",
    "nnx_api.datasets": "nnx_api.parts.datasets",
    "nnx_api.decision_jobs": "nnx_api.decide.jobs",
    "nnx_api.inference": "nnx_api.parts.inference",
}
"""This project's old module paths, never NNx's, now gone → the home of their names. Users import
them from NNx's paths: ``nnx_api.nn.dataset``, ``nnx_api.decisions``, ``nnx_api.prediction`` and
``nnx_api.streaming`` (or the top-level ``nnx_api``). No file imports the old paths any more."""

# --- NNx 0.4.1's modules with no path here, and why -------------------------------------------------
_PRIVATE = "private to NNx (a leading underscore): no import path its users write"
_PACKAGE = "an internal submodule of NNx's package: its names are imported from the package path here ({})"
_NOT_PROVIDED = "not provided here, and REFERENCE documents no such path ({})"

NOT_MIRRORED: dict[str, str] = {
    **dict.fromkeys([f"nnx_api._{name}" for name in (
        "artifacts", "builders", "config", "confusion", "metrics", "optional", "probability", "scheduler_clock",
        "step_helpers", "update_engine", "validation",
    )] + ["nnx_api.nn.params._pickling"], _PRIVATE),
    "nnx_api.benchmarking": _NOT_PROVIDED.format("forward benchmarks and profiling"),
    "nnx_api.comparison": "out of scope: multi-seed comparison (docs/nnx-compat.md)",
    "nnx_api.decisions.benchmark": "out of scope: the decision-provider benchmark (docs/nnx-compat.md)",
    "nnx_api.decisions.jev": PROVIDERS,
    "nnx_api.decisions.nli": PROVIDERS,
    **dict.fromkeys(["nnx_api.decisions.jobs", "nnx_api.decisions.providers", "nnx_api.decisions.schema"],
                    _PACKAGE.format("nnx_api.decisions")),
    **dict.fromkeys(["nnx_api.diffusion"] + [f"nnx_api.diffusion.{name}" for name in (
        "nets", "objective", "sampling", "schedules", "training")], PARADIGMS),
    **dict.fromkeys(["nnx_api.embeddings", "nnx_api.embeddings.contrastive_trainer",
                     "nnx_api.embeddings.faiss_export"], SCOPES["embeddings"]),
    **dict.fromkeys(["nnx_api.generation"] + [f"nnx_api.generation.{name}" for name in (
        "logits_chain", "logits_processors", "pipeline", "sampling")], LM),
    "nnx_api.graph_tasks": GRAPH,
    **dict.fromkeys(["nnx_api.interop", "nnx_api.interop.gguf", "nnx_api.interop.gguf.tensor_name_map",
                     "nnx_api.interop.gguf.writer", "nnx_api.interop.ollama"], GGUF),
    "nnx_api.link_tasks": GRAPH,
    "nnx_api.lm_tasks": LM,
    **dict.fromkeys([f"nnx_api.paradigms.{name}" for name in (
        "augmentation", "born_again", "contrastive", "dpo", "jepa", "jepa_objective", "offline_distillation")],
        PARADIGMS),
    "nnx_api.paradigms.distillation": _PACKAGE.format("nnx_api.paradigms"),
    "nnx_api.paradigms.moe": MOE,
    **dict.fromkeys(["nnx_api.peft"] + [f"nnx_api.peft.{name}" for name in (
        "_mode", "_ownership", "_source", "_targets", "adapters", "dora", "ia3", "lora", "prefix", "prompt")], PEFT),
    **dict.fromkeys(["nnx_api.prune", "nnx_api.prune.magnitude", "nnx_api.prune.semi_structured"], SURGERY),
    **dict.fromkeys(["nnx_api.quantize", "nnx_api.quantize.ptq", "nnx_api.quantize.qat"], QUANT),
    "nnx_api.ranking": "out of scope: the ranking task family (docs/nnx-compat.md)",
    **dict.fromkeys(["nnx_api.surgery"] + [f"nnx_api.surgery.{name}" for name in (
        "_utils", "deepen", "drop_layer", "embedding", "low_rank", "widen")], SURGERY),
    **dict.fromkeys([f"nnx_api.viz.{name}" for name in (
        "activation", "attribute", "gradient_flow", "netron", "summary", "weight_histogram")], VIZ),
}
"""Every module of NNx 0.4.1's wheel (``nnx`` → ``nnx_api``) that is not in ``PATHS`` → why."""


def nnx_name(path: str) -> str:
    """NNx's spelling of a path here: ``nnx_api.nn.moe`` → ``nnx.nn.moe``."""
    return "nnx" + path.removeprefix("nnx_api")


def first_line(path: str) -> str | None:
    """The first docstring line the file of ``path`` opens with; None for a home (its own docstring).
    The homes are not repeated there: the file's imports and this table name them."""
    entry = PATHS[path]
    if entry.kind == HOME:
        return None
    if entry.kind == PROJECT:
        return f"``{path}`` (this project's, no NNx path): a re-export module ({TABLE})."
    if entry.kind == OUT_OF_SCOPE:
        return f"NNx path ``{nnx_name(path)}``: placeholders, out of scope here ({TABLE})."
    what = "a re-export module" if entry.homes else "the package of the NNx paths below it"
    return f"NNx path ``{nnx_name(path)}``: {what} ({TABLE})."
