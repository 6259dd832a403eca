"""Known differences between NNx 0.4.1 and this project, as the differential oracle sees them.

Key: ``"<scenario>/<observable>"`` (an ``fnmatch`` pattern is allowed, e.g. ``"s09_resume_stateful/weights.*"``).
Value: ``(disposition, reason)`` where disposition is

* ``"kept"``  — the difference is current and stays for the stated reason (or is open, being fixed);
* ``"fixed"`` — the difference was seen and has since been removed; it must not come back.

``tests/compat/test_compat_diff.py`` fails on a difference with no "kept" entry, on a "fixed" entry
that differs again, and on a "kept" entry that no longer matches any difference (remove it then).
"""

from __future__ import annotations

KEPT = "kept"

DISPOSITIONS: dict[str, tuple[str, str]] = {}


def _kept(reason: str, *keys: str) -> None:
    for key in keys:
        assert key not in DISPOSITIONS, key
        DISPOSITIONS[key] = (KEPT, reason)


def _fixed(reason: str, *keys: str) -> None:
    for key in keys:
        assert key not in DISPOSITIONS, key
        DISPOSITIONS[key] = ("fixed", reason)


_fixed(
    "fixed: class targets of -100 under an objective are left out of the loss as F.cross_entropy leaves them out, "
    "the window normalised by its valid targets only",
    "s05_objective_masked/idps[[]0].train_loss",
    "s05_objective_masked/idps[[]1].train_loss",
    "s05_objective_masked/weights.*",
)


_fixed(
    "fixed: an assigned model.loss_fn trains, records and evaluates: reduction='sum' is summed, not normalised",
    "s06_loss_fn_sum/idps[[]?].train_loss",
    "s06_loss_fn_sum/evaluate.loss",
    "s06_loss_fn_sum/val_loss",
    "s06_loss_fn_sum/weights.*",
)

_kept(
    "the journal folder's path names this project's run id (ids are content addresses of another canonical form: "
    "docs, run identity); the folder is the same",
    "s11_run_load_history/journal.history",
    "s11_run_load_history/journal.load.history",
)

_fixed(
    "fixed: NNRun.history (the journal folder, or None), ctx.epoch in on_train_begin, max_lr=0 accepted",
    "s11_run_load_history/plain.history",
    "s11_run_load_history/plain.load.history",
    "s19_callback_events/log[[]0]",
    "s07_early_stopping/max_lr_zero",
)

_fixed(
    "fixed: an objective run writes the committed-update count after each microbatch on every record (0 before the "
    "first update), as NNx",
    "s05_objective_masked/idps[[]?].update_count",
)

_fixed(
    "fixed: an objective run writes the committed-update count on every record, as NNx",
    "s19_callback_events/idp.update_count",
)

_fixed(
    "fixed: TrainStepContext is a frozen dataclass of NNx's fields (keyword or positional, the later ones defaulted; "
    "ours' extras ride on report_update), and default_train_step runs on a hand-built one",
    "s13_step_contexts/TrainStepContext.minimal",
    "s13_step_contexts/TrainStepContext.minimal.type",
    "s13_step_contexts/TrainStepContext.positional",
    "s13_step_contexts/TrainStepContext.positional.type",
    "s13_step_contexts/TrainStepContext.missing",
    "s13_step_contexts/EvalStepContext.minimal",
    "s13_step_contexts/ctx.accumulation_state",
    "s13_step_contexts/ctx.frozen",
    "s13_step_contexts/ctx.is_last_batch",
    "s13_step_contexts/ctx.precision",
    "s13_step_contexts/ctx.replace",
    "s13_step_contexts/ctx.report_update()",
    "s13_step_contexts/default_train_step.loss",
)

_kept(
    "the record class is named EvaluationDataPoint / IterationDataPoint here (nnx_api.NN* names are that class): "
    "isinstance works, type().__name__ differs",
    "s13_step_contexts/default_train_step(ctx)",
)

_fixed(
    "fixed: a TaskSpec whose width differs from NNParams.output_dim is refused at NNModel construction with "
    "TaskValidationError (a ValueError), as NNx refuses it",
    "s17_regression_task/width_mismatch",
    "s17_regression_task/width_mismatch.type",
)

_kept(
    "typed error: ours raises PredictionInputError (a RuntimeError, like NNx's RuntimeError, and a ValueError, as "
    "REFERENCE documents); except clauses written for NNx still catch it",
    "s02_predict/predict_empty_loader",
)

_fixed(
    "fixed: appending to hidden_dims raises TypeError (params are immutable), as NNx",
    "s10_params_dataclasses/hidden_dims_append",
)

_kept(
    "asdict() works on NNTrainerParams (its read-only optims / schedulers mappings deep-copy); its keys differ with "
    "the fields (ours adds async_commits, parent_checkpoint, progress, resume)",
    "s10_params_dataclasses/NNTrainerParams.asdict_keys",
)

_fixed(
    "fixed: evaluate() leaves count None without a TaskSpec, as NNx does (with one it holds the valid targets)",
    "s14_evaluate_edp/evaluate.count",
)

_fixed(
    "fixed: the step contexts are frozen dataclasses and the iteration record supports dataclasses.fields(), with "
    "NNx's fields in NNx's order",
    "s03_trainer_two_optims/ctx_fields",
    "s04_custom_train_step/ctx_fields",
    "s13_step_contexts/EvalStepContext.fields",
    "s13_step_contexts/ObjectiveContext.fields",
    "s13_step_contexts/TrainStepContext.fields",
    "s13_step_contexts/TrainerStepContext.fields",
    "s14_evaluate_edp/IDP.fields",
)

_fixed(
    "fixed: dataclasses.fields() on the evaluation record gives NNx's fields in NNx's order (status included)",
    "s14_evaluate_edp/EDP.fields",
)

_kept(
    "dataclasses.fields() works on NNCheckpoint with NNx's fields first; ours adds run_id, tag, epoch, module_signature",
    "s15_checkpoint_restore/best.fields",
)

_fixed(
    "fixed: on the update clock a record's lr is the lr its update used, read before the scheduler steps (REFERENCE "
    "example: 0.04, 0.08, 0.12, 0.12)",
    "s16_scheduler_lr/warmup.idp_lrs",
    "s16_scheduler_lr/step.idp_lrs",
)

_kept(
    "accepted here: parent_run_id is derived from resume_from_run_id, so a copy of resumed params holds both (NNx: ValueError), as documented under Errors",
    "s09_resume_stateful/resume_and_parent",
    "s09_resume_stateful/resume_and_parent.type",
)

_fixed(
    "fixed: records of step-function and default-step runs leave update_count None, as NNx (objective runs only)",
    "s01_train_accumulate/idps[[]*].update_count",
    "s03_trainer_two_optims/idps[[]*].update_count",
    "s04_custom_train_step/idps[[]*].update_count",
    "s06_loss_fn_sum/idps[[]*].update_count",
    "s09_resume_stateful/update_count",
    "s11_run_load_history/plain.load.idps[[]*].update_count",
)

_fixed(
    "fixed: predict / predict_proba / iter_predict results hold NumPy arrays, as NNx 0.4.1 returns them "
    "(logits and probabilities float32, classes and decoded classes int64, regression values float32)",
    "s02_predict/predict.classes.dtype",
    "s02_predict/predict.classes.type",
    "s02_predict/predict.logits.dtype",
    "s02_predict/predict.logits.type",
    "s02_predict/predict_numpy.classes.dtype",
    "s02_predict/predict_numpy.classes.type",
    "s02_predict/predict_numpy.logits.dtype",
    "s02_predict/predict_numpy.logits.type",
    "s02_predict/predict_proba_spec.decoded.dtype",
    "s02_predict/predict_proba_spec.decoded.type",
    "s02_predict/predict_proba_spec.logits.dtype",
    "s02_predict/predict_proba_spec.logits.type",
    "s02_predict/predict_proba_spec.probabilities.dtype",
    "s02_predict/predict_proba_spec.probabilities.type",
    "s17_regression_task/predict_proba.decoded.dtype",
    "s17_regression_task/predict_proba.decoded.type",
)

_fixed(
    "fixed: records have a kind attribute: None without a TaskSpec, else the task kind (as NNx)",
    "s14_evaluate_edp/evaluate.kind",
    "s17_regression_task/train.kind",
    "s17_regression_task/val.kind",
)

_fixed(
    "fixed: records of a declared regression task carry metrics.mse / metrics.mae (batch records and whole passes), as NNx's",
    "s17_regression_task/train.metrics",
    "s17_regression_task/train.metrics.mae",
    "s17_regression_task/train.metrics.mse",
    "s17_regression_task/val.metrics",
    "s17_regression_task/val.metrics.mae",
    "s17_regression_task/val.metrics.mse",
)

_fixed(
    "fixed: EvaluationDataPoint.state() (and so mean_of(...).state()) writes loss / error as None while unset, as NNx "
    "does; a record nested in an iteration's saved state keeps leaving them out (saved runs keep their layout)",
    "s14_evaluate_edp/EDP.mean_of.error",
    "s14_evaluate_edp/EDP.mean_of.loss",
    "s14_evaluate_edp/EDP.state.error",
    "s14_evaluate_edp/EDP.state.loss",
)

_kept(
    "default activation is RELU here (NNx: LEAKY_RELU), as documented: changing it would change every existing run id; pass activation= for NNx's network",
    "s10_params_dataclasses/NNParams.state.activation",
)

_kept(
    "the default optimizer's weight_decay is 0.0 here (NNx: 5e-5), as documented: changing it would change existing run ids",
    "s10_params_dataclasses/default_train_optim.weight_decay",
)

_kept(
    "typed error: ours raises ParamsError (a TypeError, like NNx's TypeError) for predict_proba without a spec and "
    "without a TaskSpec; except clauses written for NNx still catch it",
    "s02_predict/predict_proba.type",
)

_fixed(
    "fixed: predict_proba without a spec and without a TaskSpec refuses (the spec is never inferred, as REFERENCE "
    "says and NNx does) instead of returning a categorical result",
    "s02_predict/predict_proba.decoded.dtype",
    "s02_predict/predict_proba.decoded.shape",
    "s02_predict/predict_proba.decoded.type",
    "s02_predict/predict_proba.logits.dtype",
    "s02_predict/predict_proba.logits.shape",
    "s02_predict/predict_proba.logits.type",
    "s02_predict/predict_proba.probabilities.dtype",
    "s02_predict/predict_proba.probabilities.shape",
    "s02_predict/predict_proba.probabilities.type",
    "s02_predict/predict_proba.sample_ids.dtype",
    "s02_predict/predict_proba.sample_ids.shape",
    "s02_predict/predict_proba.sample_ids.type",
    "s02_predict/predict_proba.spec",
)

_kept(
    "TaskSpec.state() has its own layout here ({kind, n, …}); NNx's is versioned with num_outputs",
    "s17_regression_task/model_params.task.n",
    "s17_regression_task/model_params.task.num_outputs",
    "s17_regression_task/model_params.task.version",
)

_kept(
    "asdict() keys differ with the fields (NNx has a private _dims and n_heads / resume_epochs; ours parent_checkpoint, progress, resume)",
    "s10_params_dataclasses/NNParams.asdict_keys",
    "s10_params_dataclasses/NNTrainParams.asdict_keys",
)

_kept(
    "checkpoints are verified tag manifests (checkpoints/<tag>.json) + content-addressed blobs, not pickled .pt files "
    "(docs: layout); only ModelCheckpoint's <tag>_e<epoch>.pt is exported beside its tag",
    "s08_model_checkpoint/files_present.checkpoints/best.pt",
    "s08_model_checkpoint/files_present.checkpoints/first.pt",
    "s08_model_checkpoint/files_present.checkpoints/last.pt",
    "s08_model_checkpoint/files_present.checkpoints/q3.pt",
)

_kept(
    "enum values are parsed in any case here (docs: enums); NNx accepts only the lowercase value",
    "s18_enums/Optims('ADAM')",
)

_kept(
    "field order (and private/extra fields) differ; the classes are keyword-only, so only dataclasses.fields() order shows it",
    "s10_params_dataclasses/NNModelParams.fields",
    "s10_params_dataclasses/NNOptimParams.fields",
    "s10_params_dataclasses/NNParams.fields",
    "s10_params_dataclasses/NNTrainParams.fields",
    "s10_params_dataclasses/NNTrainerParams.fields",
)

_kept(
    "hidden_dims is a tuple here (FrozenDims, whose list methods raise TypeError); NNx's is its own immutable list type",
    "s10_params_dataclasses/hidden_dims_type",
)

_kept(
    "loaders are excluded from equality here, so from_state(state()) == params holds with a loader; NNx compares the loaders (False)",
    "s10_params_dataclasses/NNTrainParams.roundtrip",
)

_kept(
    "no cross-run runs/best election here: every run keeps its own BEST tag (docs: NNRun.save)",
    "s08_model_checkpoint/runs_best_exists",
)

_kept(
    "ours accepts a device string (as REFERENCE's example passes); NNx 0.4.1 raises TypeError ('str' object is not callable)",
    "s15_checkpoint_restore/from_checkpoint.device_str",
    "s15_checkpoint_restore/from_checkpoint.device_str.type",
)

_kept(
    "ours accepts any re-iterable of batches for predict (as train does); NNx 0.4.1 refuses a plain list of batches with ValueError",
    "s02_predict/predict_loader.logits",
    "s02_predict/predict_loader.logits.dtype",
    "s02_predict/predict_loader.logits.shape",
    "s02_predict/predict_loader.logits.type",
)

_kept(
    "ours adds Activations.GELU",
    "s18_enums/Activations.values",
)

_kept(
    "ours adds Schedulers.WARMUP_COSINE (an extension: linear warm-up, then cosine decay; docs/metrics.md)",
    "s18_enums/Schedulers.values",
)

_kept(
    "ours adds Devices.AUTO (sorted first)",
    "s18_enums/Devices.str_first",
    "s18_enums/Devices.values",
)

_kept(
    "ours also accepts a 0-d tensor denominator; NNx requires a Python number (ValueError)",
    "s13_step_contexts/LossTerm.tensor_denominator",
)

_kept(
    "state() holds plain JSON values (lists) here, not NNx's Python-repr strings (\"(0.9, 0.999)\", \"[8, 4]\")",
    "s10_params_dataclasses/NNOptimParams.state.momentum",
    "s10_params_dataclasses/NNParams.state.hidden_dims",
    "s10_params_dataclasses/default_train_optim.momentum",
    "s10_params_dataclasses/replace.accumulate.momentum",
)

_kept(
    "state() key order differs (content addressing is this project's canonical JSON, docs: run identity)",
    "s10_params_dataclasses/NNModelParams.state_keys",
    "s10_params_dataclasses/NNOptimParams.state_keys",
    "s10_params_dataclasses/NNParams.state_keys",
    "s10_params_dataclasses/NNSchedulerParams.state_keys",
    "s16_scheduler_lr/step.state_keys",
)

_kept(
    "the record class is named EvaluationDataPoint / IterationDataPoint here (nnx_api.NN* names are that class): isinstance works, type().__name__ differs",
    "s04_custom_train_step/calls[0].returned",
    "s04_custom_train_step/calls[1].returned",
    "s04_custom_train_step/calls[2].returned",
    "s11_run_load_history/iter_history.item_type",
    "s14_evaluate_edp/evaluate.type",
)

_kept(
    "typed error: ours raises InvalidRunIdError (a ValueError, like NNx's ValueError); except clauses written for NNx still catch it",
    "s08_model_checkpoint/bad_tag",
    "s11_run_load_history/load_bad_id",
)

_kept(
    "typed error: ours raises ParamsError (a TypeError, like NNx's TypeError); except clauses written for NNx still catch it",
    "s10_params_dataclasses/positional",
    "s12_param_errors/unknown_keyword",
)

_kept(
    "typed error: ours raises ParamsError (a ValueError, like NNx's ValueError); except clauses written for NNx still catch it",
    "s03_trainer_two_optims/two_optims_without_groups",
    "s07_early_stopping/bad_monitor",
    "s07_early_stopping/max_without_monitor",
    "s07_early_stopping/negative_patience",
    "s09_resume_stateful/resume_mode_bogus",
    "s10_params_dataclasses/replace.bad_value",
    "s11_run_load_history/journal.bad_retention",
    "s11_run_load_history/journal.chunk_over_retention",
    "s12_param_errors/accumulate_float",
    "s12_param_errors/accumulate_zero",
    "s12_param_errors/blank_data_id",
    "s12_param_errors/conv_without_conv_params",
    "s12_param_errors/dropout_above_one",
    "s12_param_errors/freeze_no_pattern",
    "s12_param_errors/grad_clip_zero",
    "s12_param_errors/hidden_dim_negative",
    "s12_param_errors/input_dim_bool",
    "s12_param_errors/input_dim_float",
    "s12_param_errors/input_dim_zero",
    "s12_param_errors/lr_nan",
    "s12_param_errors/lr_negative",
    "s12_param_errors/model_without_net_params",
    "s12_param_errors/n_epochs_zero",
    "s12_param_errors/param_group_lr_and_multiplier",
    "s12_param_errors/scheduler_factor_zero",
    "s12_param_errors/sgd_eps",
    "s12_param_errors/train_all_frozen",
    "s12_param_errors/train_none_params",
    "s12_param_errors/trainer_no_optims",
    "s12_param_errors/trainer_sched_unknown_key",
    "s13_step_contexts/LossTerm.mean_without_denominator",
    "s13_step_contexts/LossTerm.sum_with_denominator",
    "s13_step_contexts/ObjectiveResult.empty",
    "s16_scheduler_lr/plateau_on_update_clock",
)

_kept(
    "typed error: ours raises ResumeMismatchError (a ValueError, like NNx's ValueError); except clauses written for NNx still catch it",
    "s08_model_checkpoint/resume_from_snap_stateful",
)

_kept(
    "typed error: ours raises RunNotFoundError (a FileNotFoundError and OSError, like NNx's FileNotFoundError); except clauses written for NNx still catch it",
    "s11_run_load_history/load_missing",
)

_kept(
    "typed error: ours raises RunNotFoundError (a ValueError, like NNx's ValueError); except clauses written for NNx still catch it",
    "s09_resume_stateful/resume_missing_run",
)

_kept(
    "typed error: ours raises ScheduleBudgetError (a ValueError, like NNx's ValueError); except clauses written for NNx still catch it",
    "s16_scheduler_lr/one_cycle_total_too_small",
)

_kept(
    "typed error: ours raises TrainingInputError (a ValueError, like NNx's ValueError); except clauses written for NNx still catch it",
    "s12_param_errors/train_empty_loader",
    "s12_param_errors/train_without_loader",
    "s14_evaluate_edp/evaluate.empty",
)

_kept(
    "typed error: ours raises UpdateOwnerError (a ValueError, like NNx's ValueError); except clauses written for NNx still catch it",
    "s04_custom_train_step/step_and_objective",
)

_kept(
    "the training state is this implementation's checkpoint payload (docs: checkpoint layout): NNx's keys a user "
    "reads are there (optimizers, schedulers, optimizer, scheduler, completed_epoch, rng, components), its own "
    "bookkeeping (generation, checkpoint_id, sidecar versions, factories, topologies) is not",
    "s20_trainer_resume/training_state",
)

_fixed(
    "fixed: a Trainer checkpoint's training state has schedulers by optimizer name (NNx's key; KeyError before), "
    "and no single optimizer / scheduler",
    "s20_trainer_resume/training_state.schedulers",
    "s20_trainer_resume/training_state.optimizer",
    "s20_trainer_resume/training_state.scheduler",
)
