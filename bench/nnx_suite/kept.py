"""Why each item of NNx 0.4.1's own suite that still fails here is kept (docs/nnx-compat.md).

Key: an ``fnmatch`` pattern over item ids (``file::test[params]``, e.g.
``"test_trainer.py::test_resume_*"``). Value: ``(class, reason)``. The classes are the ones the
failures fall into:

* ``refused-before`` — a configuration error NNx raises before the first trial, fit or loader
  iteration, which ours raises later (or not at all);
* ``builtin-type`` — NNx raises another builtin exception type there;
* ``params-context`` — a parameter, context name, training-state field or run-folder file NNx code uses;
* ``semantics`` — the behaviour itself differs, on purpose;
* ``wording`` — the exception type is NNx's, the message is ours: it names the field and the fix
  (the reason quotes what NNx's test looks for);
* ``missing`` — in scope, not provided yet;
* ``environment`` — needs what this machine cannot install (``torchvision`` beside torch 2.13);
* ``repository`` — reads NNx's repository (examples, docs) that the sdist does not carry.

Items that reach NNx's private names and items that exercise out-of-scope features are counted
apart by ``run.py`` and need no entry; where its reading of a test does not see it (a private hook a
test class implements, an out-of-scope module imported inside a test), ``PRIVATE`` and
``OUT_OF_SCOPE`` name the item with the reason. ``tests/compat/test_nnx_suite.py`` fails on a failing public
item with no entry, and on an entry that no longer matches a failing item (remove it then).
"""

from __future__ import annotations

CLASSES = ("refused-before", "builtin-type", "params-context", "semantics", "wording", "missing", "environment",
           "repository")
"""Every class a kept failure may have, in the order docs/nnx-compat.md lists them."""

DISPOSITIONS: dict[str, tuple[str, str]] = {}
"""Pattern over item ids → (class, reason)."""

PRIVATE: dict[str, str] = {}
"""Pattern over item ids → how the test reaches NNx's internals (counted with the private items)."""

OUT_OF_SCOPE: dict[str, str] = {}
"""Pattern over item ids → the out-of-scope feature it exercises (counted with the out-of-scope items)."""

HANGS: dict[str, str] = {}
"""Item ids that hang here until pytest's timeout: not run, counted as failed (each also needs its entry)."""


def _keep(klass: str, reason: str, *patterns: str) -> None:
    assert klass in CLASSES, klass
    for pattern in patterns:
        assert pattern not in DISPOSITIONS, pattern
        DISPOSITIONS[pattern] = (klass, reason)


def _private(reason: str, *patterns: str) -> None:
    for pattern in patterns:
        assert pattern not in PRIVATE, pattern
        PRIVATE[pattern] = reason


def _out(reason: str, *patterns: str) -> None:
    for pattern in patterns:
        assert pattern not in OUT_OF_SCOPE, pattern
        OUT_OF_SCOPE[pattern] = reason


# --- plans and search ------------------------------------------------------------------------------
_keep("refused-before", "a params value NNx's plan holds until validate() (NNModelParams(loss=None), a loss class, "
      "NNTrainParams(seed=-5), a loader factory in NNTrainParams) is refused here when the params are built: "
      "a ParamsError (a ValueError) naming the field, before any plan holds it",
      "test_experiment_plan.py::test_round_eight_every_model_problem_is_reported_at_once",
      "test_experiment_plan.py::test_round_nine_a_lossless_model_is_one_diagnostic_not_a_crash",
      "test_experiment_plan.py::test_round_twenty_one_a_device_or_loss_of_the_wrong_type_is_a_diagnostic",
      "test_experiment_plan.py::test_round_three_the_effective_seed_and_orphan_identity_are_checked",
      "test_plan_execution.py::test_round_one_factories_inside_training_params_run_like_plan_factories")
_keep("semantics", "a plan's model defaults to NNModelParams() here (NNx requires it), and any well-formed tag is a "
      "resume checkpoint (user tags exist)",
      "test_experiment_plan.py::test_validate_aggregates_field_path_diagnostics")
_keep("semantics", "the checks made before anything is written read each loader's first batch, so a validation "
      "loader is iterated once more than the epochs",
      "test_plan_execution.py::test_metrics_name_their_split_and_availability_without_a_second_loader_pass")
_keep("semantics", "the streaming eval step accepts a metric without merge() (it accumulates in one process); "
      "declared metrics are checked against the task even without validation data, as train() does",
      "*::test_feat020_a_streaming_eval_step_reports_what_it_cannot_bound",
      "*::test_feat020_review_round_four_plan_checks_follow_train")
_keep("builtin-type", "a data/net width mismatch is found by the checks before anything is written: "
      "InputWidthError (a ValueError and a RuntimeError, its message holding torch's 'mat1 and mat2'), so the trial's "
      "reason is error:InputWidthError, not error:RuntimeError",
      "test_search.py::test_a_failed_fit_is_recorded_with_its_message_and_the_search_goes_on")
_keep("wording", "the missing-extra hint names this package's extra (pip install \"nnx[search]\"): NNx's "
      "'thekaveh-nnx[optuna]' would install the other package",
      "test_search.py::test_the_missing_extra_is_named")
_private("implements NNx's private _bind_metrics hook on a callback",
         "*::test_round_four_callback_monitors_use_the_bind_protocol_without_binding")
_private("patches ExperimentPlan._build_model",
         "test_plan_execution.py::test_round_seventeen_a_cuda_probe_starts_cuda_first_and_restores_it")
_out("imports nnx.paradigms.augmentation (mixup) inside the test",
     "*::test_precision_round_five_plans_check_the_policy_before_anything_runs")

# --- DDP -------------------------------------------------------------------------------------------
_keep("semantics", "a batch whose every target is ignored records loss None (no target, no loss; "
      "docs/distributed.md), where NNx's path without a TaskSpec records the running loss; the test's pytest.approx "
      "cannot compare None", "test_ddp_adapter.py::test_one_rank_matches_the_local_path")
_keep("semantics", "a rank's failure stops every rank with the same AgreedError (NNx's DistributedFailure), the "
      "failing rank's own error its __cause__; NNx re-raises the original error on the failing rank only",
      "test_ddp_adapter.py::test_a_failing_writer_callback_stops_every_rank_without_waiting_for_the_timeout")
_keep("refused-before", "ranks whose partition records differ are refused before training (TrainingInputError, a "
      "ValueError) instead of failing collectively mid-run",
      "test_ddp_adapter.py::test_unequal_step_counts_fail_collectively_not_hang")
_keep("semantics", "under DDP a plain train loader with len() and a HistoryJournal are accepted (docs/distributed.md)",
      "test_ddp_adapter.py::test_preflight_refusals_fail_on_every_rank_before_any_run")
_keep("builtin-type", "typed errors: NonFiniteLossError (a FloatingPointError) and SingleProcessError (a "
      "RuntimeError); the test compares the exception's class name",
      "test_ddp_adapter.py::test_a_non_finite_loss_on_one_rank_stops_every_rank",
      "test_ddp_adapter.py::test_single_process_entry_points_refuse_a_multi_rank_group")
_private("its torchrun scenario patches nn_checkpoint._sha256 or reads NNx's <tag>.pt.opt.<n> sidecar files",
         "test_ddp_resume.py::test_two_epochs_equal_one_plus_a_resume",
         "test_ddp_resume.py::test_a_planned_resume_continues_the_plan_on_every_rank",
         "test_ddp_resume.py::test_a_changed_world_or_partition_fails_before_anything_is_restored",
         "test_ddp_resume.py::test_a_single_process_stateful_resume_of_a_distributed_checkpoint_is_refused",
         "test_ddp_resume.py::test_only_the_writer_rank_hashes_the_resume_point",
         "test_ddp_resume.py::test_a_corrupted_resume_point_is_refused_on_every_rank_naming_the_reason",
         "test_ddp_resume.py::test_an_invalid_run_id_fails_alike_on_every_rank")
_out("its torchrun scenario builds an nnx.provenance.ExperimentManifest (and the Hub export)",
     "test_ddp_resume.py::test_every_rank_returns_the_writers_provenance",
     "test_ddp_resume.py::test_only_the_writer_rank_leases_and_writes",
     "test_ddp_resume.py::test_execution_owned_callbacks_are_built_on_the_writer_only",
     "test_ddp_resume.py::test_canonical_keys_in_checkpoint",
     "test_ddp_resume.py::test_canonical_keys_in_hub_and_onnx_export",
     "test_ddp_resume.py::test_checkpoints_carry_world_partition_and_every_ranks_rng")

# --- parameters ------------------------------------------------------------------------------------
_keep("semantics", "state() holds plain YAML values (momentum as a list), never Python-repr strings evaluated on load",
      "*::test_meaningful_zeros_and_none_sentinels_stay_valid")
_keep("semantics", "the TaskSpec state ({kind, n, labels}) and PrecisionPolicy's fallback are part of existing run "
      "ids (tests/api/test_run_id_pins.py): NNx's layout would change every such id",
      "*::test_nn_model_params_round_trip_with_task", "*::test_nn_model_params_state_omits_precision_when_unset")
_keep("semantics", "named optimizers are kept in name order: the run id ignores their order, so two runs of one id "
      "build, step and announce them in one order",
      "test_trainer_params.py::test_trainer_mapping_copy_and_roundtrip")
_private("patches nnx.optimizers.build_optimizer expecting training to call it through that module",
         "test_optimizer_factories.py::test_nn_model_and_trainer_share_one_build_hook")
_out("graph nets are out-of-scope placeholders, not nn.Module subclasses",
     "test_nets.py::test_graph_conv_nn_is_module", "test_nets.py::test_graph_sage_nn_is_module",
     "test_nets.py::test_graph_att_nn_is_module")

# --- callbacks, Trainer, monitors, objectives, metrics ---------------------------------------------
_private("reads or sets EarlyStopping._best", "test_callbacks.py::test_early_stopping_nonfinite_value_never_becomes_best",
         "test_callbacks.py::test_early_stopping_resets_state_on_train_begin")
_private("NNx's private modules nnx._update_engine / nnx._step_helpers (the public nnx.objectives.softened_kl exists)",
         "test_objective_engine.py::test_each_term_is_read_from_the_device_once",
         "test_objective_engine.py::test_mixing_summed_and_normalized_terms_fails",
         "test_objective_engine.py::test_summed_and_normalized_terms_keep_explicit_denominators",
         "test_objective_engine.py::test_kd_objective_matches_the_full_batch_update*",
         "test_objective_engine.py::test_single_microbatch_windows_take_one_backward_pass_and_zero_weights_none")
_private("patches Trainer._save_checkpoint / reads model._topology_transforms / patches model.evaluate inside "
         "Trainer validation, which calls its own pass",
         "test_trainer.py::test_trainer_checkpoint_failure_rolls_history_back",
         "test_trainer.py::test_trainer_records_completed_topology_transforms_on_live_model",
         "test_trainer.py::test_trainer_plateau_never_receives_nonfinite_metric")
_private("overrides NNModel._build_scheduler, calls the scheduler factory with its internal n_updates=, or rewrites "
         "NNx's pickled last.pt.opt.<id>.pt sidecar (no such file here: the training state is in the verified tag)",
         "test_scheduler_clocks.py::test_a_build_scheduler_override_without_n_updates_still_works",
         "test_scheduler_clocks.py::test_a_scheduler_the_update_clock_cannot_drive_is_refused_up_front*",
         "test_scheduler_clocks.py::test_a_checkpoint_from_before_component_state_cannot_resume_on_the_update_clock",
         "test_scheduler_clocks.py::test_only_the_clock_itself_refuses_a_legacy_checkpoint",
         "test_scheduler_clocks.py::test_the_default_warmup_follows_total_steps_not_one_runs_length")
_keep("semantics", "EarlyStopping(name='es') is the checkpointed component early_stopping.es (existing checkpoints use "
      "that name; renaming an optional component would restart its count silently); the duplicate refusal names 'es' "
      "as NNx does, with the checkpointed name",
      "test_component_registry.py::test_default_named_callbacks_are_numbered_so_existing_runs_keep_working",
      "test_component_registry.py::test_names_are_unique_and_discovery_is_ordered")
_keep("semantics", "a declared accuracy on a multilabel task is subset accuracy, as the record's accuracy and "
      "scikit-learn's accuracy_score (NNx scores each output); f1 keeps its per-label macro / micro / weighted averages "
      "there (NNx refuses all but 'binary', the pooled F1, which is provided)",
      "test_metric_specs.py::test_multilabel_labels_use_the_task_threshold",
      "test_metric_specs.py::test_f1_averaging_must_fit_the_model_outputs")
_keep("semantics", "an objective run records its training loss normalised by each term's denominator over the "
      "epoch (as the built-in step does), not NNx's summed loss",
      "test_objective_engine.py::test_objective_runs_record_the_exact_whole_epoch_training_loss")
_keep("semantics", "a Trainer objective run counts updates and fetches batches through the one pipeline "
      "(docs/architecture.md), as NNModel does",
      "test_objective_engine.py::test_trainer_runs_objectives_through_the_same_engine",
      "test_objective_engine.py::test_trainer_step_functions_keep_the_plain_fetch_order")
_keep("environment", "pytest 9.2's approx refuses nested values: LRMonitor.update_history holds (update index, lr) "
      "pairs, as NNx's own LRMonitor does, so NNx's LRMonitor fails this assertion the same way under pytest 9.2",
      "test_scheduler_clocks.py::test_a_split_run_reproduces_the_remaining_lr_sequence")
_keep("semantics", "report_update() without a step of ctx.optimizer is refused: a SAM-style wrapper that steps an "
      "inner optimizer keeps that optimizer's state outside the checkpoint, so a resume could not be exact; NNx "
      "counts the report", "test_scheduler_clocks.py::test_reports_are_authoritative")
_keep("semantics", "the monitor component compares the metric, split and mode on resume, not the plateau threshold",
      "test_named_monitors.py::*plain-threshold-changed*")
_keep("refused-before", "a custom step on an update-clock schedule with the default horizon is told its budget "
      "when the schedule is first stepped, not before training",
      "test_scheduler_clocks.py::test_a_custom_step_without_a_budget_is_told_why")
_keep("wording", "a plateau resume that changes the monitor names the checkpoint's monitor, this run's and the way "
      "out; NNx names PyTorch's threshold_mode, which the plateau rule here does not have",
      "test_named_monitors.py::*plateau*resume*")
_keep("wording", "a validation monitor that a custom evaluator never feeds is refused on the run's first epoch "
      "(MonitorUnavailableError) rather than warned of",
      "test_named_monitors.py::test_a_validation_monitor_a_custom_evaluator_never_feeds_warns_once")

# --- the import surface, export, precision, compile, model factories --------------------------------
_keep("repository", "loads NNx's repository script scripts/check_export_conformance.py, which the sdist does not "
      "carry; the same command is python -m nnx_api.export_conformance (--output, --artifacts, --profile, "
      "--source-revision, --force), covered by tests/api/test_export_conformance.py",
      "test_export_conformance.py::test_the_script_*",
      "test_export_conformance.py::test_a_non_finite_output_is_a_mismatch_and_the_report_is_kept")
_out("imports an out-of-scope subpackage or paradigm factory (diffusion, peft, interop, generation, viz, paradigms, "
     "LM / Jev extras), or a plot other than confusion_matrix",
     "test_imports.py::test_diffusion_submodules_import", "test_imports.py::test_peft_submodules_import",
     "test_imports.py::test_interop_subpackage_imports", "test_imports.py::test_generation_subpackage_imports",
     "test_imports.py::test_viz_submodules_import", "test_imports.py::test_paradigms_submodules_import",
     "test_imports.py::test_every_train_step_factory_is_top_level",
     "test_imports.py::test_lm_exports_fail_clearly_without_tokenizers",
     "test_imports.py::test_jev_provider_fails_clearly_without_the_typesafe_sdk",
     "test_public_api_exports.py::test_specialized_public_facades_are_available_from_top_level",
     "test_external_module_runtime.py::test_checkpoint_tsne_*",
     "test_external_module_runtime.py::test_paradigm_steps_and_objectives_split_batches_through_the_adapter",
     "test_model_factories.py::test_unknown_factories_and_bad_factories_fail_before_anything_is_built",
     "test_model_factories.py::test_registered_modules_keep_the_topology_reconstruction_guard",
     "test_precision_execution.py::test_a_teacher_never_shares_a_legacy_students_autocast*",
     "*::test_a_causal_lm_task_drives_validation_nll_as_a_named_monitor")
_private("imports NNx's private _suggest_lr", "test_lr_finder.py::test_suggest_lr_*")
_keep("semantics", "ModelSpec.state() has no 'kind' key: adding it would change the run id of every ModelSpec run",
      "test_model_factories.py::test_model_spec_is_immutable_serializable_and_json_like")
_keep("wording", "ModelSpec.id: must be a non-blank string (NNx restricts the id to letters and digits)",
      "test_model_factories.py::test_registry_registers_replaces_and_unregisters")
_keep("semantics", "str(run) and _repr_html_ show NNx's summary fields, not the module descriptor's kind; NNRun is "
      "made by train(), not by hand (docs: NNRun)",
      "test_model_factories.py::test_run_ids_follow_the_descriptor")
_keep("semantics", "the legacy mixed_precision flag applies here wherever a policy does (fp16 on CUDA in "
      "NNModel.train, a Trainer objective, evaluate and predict), so its record covers those surfaces; NNx's Trainer "
      "never applies it and its record claims NNModel.train only: changing what existing legacy runs train on CUDA "
      "would break their exact resume",
      "test_precision_policy.py::test_a_record_claims_only_the_surfaces_it_applied_to",
      "test_precision_policy.py::test_a_trainer_run_says_it_never_applies_the_legacy_flag",
      "test_precision_execution.py::test_a_legacy_trainer_run_records_full_precision_and_leaves_the_models_resolution")
_keep("semantics", "the precision policy's state (fallback kept, an explicit fp32 policy kept, the legacy flag kept "
      "beside a policy) is part of existing run ids",
      "test_precision_policy.py::test_precision_is_omitted_from_state_when_unset_and_round_trips_when_set",
      "test_precision_policy.py::test_an_explicit_fp32_policy_keeps_the_default_run_id",
      "test_precision_policy.py::test_the_legacy_flag_keeps_its_meaning_and_its_run_id",
      "test_precision_execution.py::test_the_legacy_flag_beside_an_fp16_policy_keeps_the_policys_run_id")
_keep("semantics", "NNx's pickled records and sidecar files are never read here (checkpoints are verified blobs read "
      "by the safe loader)",
      "test_precision_policy.py::test_a_pickle_from_before_the_precision_field_still_loads")
_private("patches nn_model.resolve_precision",
         "test_precision_policy.py::test_a_run_resolves_its_policy_once_and_reads_metadata_once")
_keep("semantics", "a Trainer step function trains in a reduced policy, called under the run's autocast "
      "(docs/steps-objectives.md), rather than being refused",
      "test_precision_execution.py::test_a_trainer_step_function_refuses_a_reduced_policy_before_any_run",
      "test_precision_execution.py::test_a_refused_trainer_step_function_leaves_the_global_rng_untouched")
_keep("semantics", "a step function is called under the run's autocast (docs/steps-objectives.md), so a "
      "default_train_step it delegates to runs its backward inside it; the built-in step's own backward runs outside "
      "autocast", "test_precision_execution.py::test_bf16_autocasts_the_forward_scaler_free_and_backward_outside_autocast")

# --- the training loop -----------------------------------------------------------------------------
_private("a fake model implementing NNx's private _fwd_pass protocol, or calls model._fwd_pass",
         "test_pass2_f_series.py::test_f2_accumulation_*", "test_pass2_f_series.py::test_f2_exact_cross_entropy_*",
         "test_pass2_f_series.py::test_f2_partially_ignored_cycle_*",
         "test_pass2_n_series.py::test_n7_evaluate_elementwise_loss_matches_combined_call*",
         "test_pass2_n_series.py::test_n7_evaluate_filters_exact_cross_entropy_ignore_index_from_metrics",
         "test_pass2_n_series.py::test_feat020_review_multi_output_bce_without_a_task_scores_like_evaluate",
         "*::test_binary_logits_use_zero_threshold_for_predictions")
_private("NNx's private nnx._step_helpers (ours: the public nnx.finalize_step)", "test_step_helpers.py::test_finalize_step_*")
_private("patches nn_run.os, NNModel._save_checkpoints or NNRun.save (the commit path here never calls it), or "
         "subclasses NNx's TaskAdapter(spec) extension protocol",
         "*::test_n6_best_symlink_falls_back*", "*::test_checkpoint_failure_rolls_run_history_back",
         "*::test_run_history_failure_cannot_publish_completed_checkpoint",
         "test_pass2_n_series.py::test_feat020_review_round_six*",
         "test_pass2_n_series.py::test_feat020_review_round_eight*",
         "test_pass2_n_series.py::test_feat020_review_round_eleven*")
_keep("semantics", "checkpoints are verified tag manifests and content-addressed blobs written by train() "
      "(docs: layout): no checkpoints/<tag>.pt or <tag>.pt.opt.<n>.pt sidecar files, no NNCheckpoint.save",
      "test_train_integration.py::test_train_end_to_end_produces_run_and_checkpoints",
      "*::test_u2_default_still_saves_first", "*::test_u2_save_phase_checkpoints_false_skips_phase_writes",
      "*::test_f1_resume_loads_weights_and_optimizer_state",
      "*::test_custom_step_without_error_field_doesnt_crash_best_compare",
      "*::test_failed_resume_rolls_back_model_and_loader_rng", "*::test_legacy_sidecars_without_component_state*",
      "*::test_training_state_rejects_*", "*::test_versioned_checkpoint_rejects_legacy_fallback_sidecar",
      "*::test_warm_resume_rejects_grad_scaler_presence_changes*", "*::test_interrupted_optimizerless_cleanup*",
      "*::test_legacy_resume_base_exception*", "*::test_sidecar_cleanup_treats_root_glob*",
      "*::test_ancillary_checkpoint_failure*", "*::test_component_state_never_mixes_checkpoint_generations*",
      "*::test_nn_run_load_rejects_empty_last_checkpoint")
_keep("semantics", "a window whose every target is ignored makes no update and raises nothing (masked, as an "
      "objective's window is); NNx raises FloatingPointError",
      "*::test_f2_all_ignored_accumulation_cycle_rejects_before_optimizer_step*",
      "test_ddp_adapter.py::test_a_global_window_with_no_valid_target_fails_on_every_rank")
_keep("refused-before", "an eval_step_fn that can never run (no validation loader) is refused before anything is "
      "written", "*::test_eval_step_fn_without_val_loader_is_never_called")
_keep("semantics", "the plateau schedule is a rule over the monitor decision, not torch's ReduceLROnPlateau (a spy on "
      "its step never fires)", "test_eval_step_fn.py::test_plateau_never_receives_nonfinite_metric",
      "*::test_phase_checkpoints_carry_complete_resume_state")
_keep("semantics", "a stateful resume is exact with num_workers > 0 (workers are reseeded from the restored "
      "generator): there is nothing to warn of", "*::test_resume_warns_only_for_worker_loaders")
_keep("semantics", "a reloaded record keeps a NaN loss (the journal stores floats exactly); NNx's CSV reads it back "
      "as None", "*::test_nonfinite_first_epoch_best_recovers")
_keep("semantics", "the precision record lives in metadata.yaml (run.precision), not in the training state; a "
      "stateful resume under another precision policy is accepted rather than refused",
      "*::test_the_precision_policy_round_trips*")
_keep("semantics", "NNRun has no writable_lease: train() takes the run's lease and admits the run itself (an "
      "overwrite keeps the old run aside until the new one commits); a run whose lease is held is refused "
      "(RunLeaseError), not waited on",
      "*::test_overwrite_waits_for_active_run_lease")
_keep("semantics", "metric accumulators are always bounded: a metric without merge() is accepted by the streaming "
      "eval step", "*::test_feat020_streaming_eval_step_refuses_what_it_cannot_bound*")
_keep("refused-before", "a functools.wraps wrapper of streaming_eval_step is refused before the run",
      "*::test_feat020_review_the_preflight_survives_functools_wrappers")
_keep("wording", "the model is restored before any callback runs, so it cannot fail to roll back; what warns is the "
      "component rollback", "*::test_a_reset_hook_that_changes_the_network*")
_keep("wording", "train(params=None) is refused naming the field and what it must be; the test anchors NNx's whole "
      "sentence", "*::test_train_rejects_none_or_invalid_params")
_keep("builtin-type", "run.yaml is parsed with ruamel.yaml's safe loader: a Python-object tag is CorruptRunError (a "
      "ValueError), not PyYAML's YAMLError", "*::test_r3_nnrun_load_rejects_python_object_tags")
_keep("environment", "the spawned worker re-imports the test module, whose top-level private import needs pytest's "
      "tolerant import (bench/nnx_suite/alias.py)", "*::test_concurrent_identical_runs*",
      "*::test_concurrent_checkpoint_writers*")
_keep("environment", "pytest 9's approx(None, rel=…) raises; both records hold accuracy=None",
      "*::test_feat020_streaming_eval_step_matches_the_eager_validation_record*regression-masked*")
_private("patches seeding._ENV_SNAPSHOT_CACHE", "*::test_v3_env_snapshot_is_cached_across_calls")

# --- persistence -----------------------------------------------------------------------------------
_private("patches NNModel._update_tqdm_postfix, history._write_chunk_file, nn_run._atomic_write_text, nnx.history.os "
         "or NNCheckpoint.save as NNx's training calls them (training here commits through nnx_core.commit)",
         "test_history_journal.py::test_a_crash_recovers_the_committed_epoch_exactly*",
         "test_history_journal.py::test_a_migration_interrupted_after_publishing_is_finished_by_a_retry",
         "test_history_journal.py::test_the_new_history_directory_and_files_are_flushed_writably")
_out("builds an nnx.provenance.ExperimentManifest at the file's top (provenance manifests are out of scope; the "
     "attempt record attempt.json is kept)", "test_attempt_provenance.py::*")
_keep("semantics", "a checkpoint is a tag manifest and a content-addressed blob, its generation the payload's SHA-256 "
      "(docs: layout): there is no checkpoints/last.pt, <tag>.pt.manifest.json or <tag>.pt.opt.<n>.pt to open, corrupt "
      "or delete, and a continuation's iter_idx starts at 0 in its own run",
      "test_exact_resume.py::test_a_flipped_bit_in_a_weight_tensor_is_refused_naming_the_file",
      "test_exact_resume.py::test_mixed_generations_and_a_torn_manifest_are_refused_with_their_reason",
      "test_exact_resume.py::test_a_corrupted_training_state_is_refused_naming_its_file",
      "test_exact_resume.py::test_a_planned_resume_needs_the_training_state_and_its_counters",
      "test_exact_resume.py::test_every_resume_point_is_generation_stamped_and_digested",
      "test_exact_resume.py::test_the_source_run_is_byte_identical_after_a_resume_and_lineage_is_recorded",
      "test_exact_resume.py::test_steps_and_updates_continue_logically_and_phase_tags_use_logical_epochs",
      "test_history_journal.py::test_a_migration_never_silently_drops_records_past_last",
      "test_history_journal.py::test_a_corrupt_parent_last_falls_back_to_the_childs_first_record")
_keep("semantics", "there is no cross-run runs/best pointer: every run keeps its own BEST tag (docs: NNRun.save)",
      "test_history_journal.py::test_a_run_loaded_through_the_best_pointer_keeps_its_own_journal",
      "test_history_journal.py::test_the_best_pointer_is_not_followed_as_a_lineage_parent")
_keep("semantics", "root= names the runs folder itself (NNx: the folder holding runs/); NNRun.load(id, root='.') "
      "refuses with the hint root='runs'", "test_history_journal.py::test_a_journal_run_is_not_saved_under_another_root")
_keep("semantics", "an epoch's history chunks are committed after on_epoch_end, in the commit order",
      "test_history_journal.py::test_a_full_read_back_checks_the_committed_chunks")
_keep("semantics", "NNCheckpoint.save is not provided: writing a tag from outside training, without the run's lease "
      "and the commit order, would break durable ordered commits",
      "test_history_journal.py::test_lineage_never_repeats_epochs_when_the_parent_checkpoint_moved_on")
_keep("semantics", "a torch file that holds something other than a checkpoint is CorruptRunError (NNx returns None): "
      "nothing is unpickled", "test_checkpoint_safetensors.py::test_pickle_checkpoint_load_defaults_to_cpu_map_location")
_keep("semantics", "a saved run's model_params.net reads Nets.FEED_FWD, not the runtime descriptor (keeps run ids); "
      "the runtime-only refusal itself is made",
      "test_checkpoint_safetensors.py::test_runtime_modules_write_non_reconstructible_weights_and_refuse_portable_saves")
_keep("semantics", "transforms are recorded, not replayed (no topology-changing transform is in scope); the final LAST "
      "holds the weights, RNG and components after on_train_end in this project's layout",
      "test_train_end_checkpoint.py::test_unknown_checkpoint_transform_fails_clearly",
      "test_train_end_checkpoint.py::test_transformed_last_sidecar_keeps_pre_transform_model_and_rng",
      "test_train_end_checkpoint.py::test_trainer_final_last_keeps_every_component_and_resumes_the_continuous_states")
_keep("environment", "pandas 3 reads idps.csv exactly, so the test's guard that a default read differs fails; the "
      "loaded history equals the trained one bit for bit",
      "test_run_load_exact_history.py::test_a_loaded_runs_history_equals_the_trained_runs_bit_for_bit")
_keep("environment", "NNDataset(ds_class=…) tests import torchvision, which cannot be installed beside torch 2.13 here",
      "test_nn_dataset.py::*", "test_dataset_batch_sizes.py::*")

# --- across files ----------------------------------------------------------------------------------
_keep("wording", "a plateau resume under another monitor rule names the checkpoint's monitor, this run's and the way "
      "out (weights_only); NNx names PyTorch's threshold_mode, which the plateau rule here does not have",
      "test_named_monitors.py::*plateau_saved_under_another_rule*")
_keep("semantics", "the training state's optimizer topology is a list of [name, shape] pairs per group; schedule "
      "clocks' component states have this project's layout (no 'state' key)",
      "test_optimizer_factories.py::test_factory_identity_is_saved_and_resume_accepts_the_same_factory",
      "test_scheduler_clocks.py::test_auto_step_schedulers_false_detaches_both_subscriptions_even_after_restore")
_keep("semantics", "borrowed loaders are shared by a search's trials as by any fit (a list of batches keeps no "
      "state; docs/plans-search.md); NNx refuses any borrowed loader in a search and asks for factories",
      "test_search.py::test_the_plan_and_monitor_are_checked_before_any_trial[[]<lambda>-factories]")

# --- prediction, tasks, decisions ------------------------------------------------------------------
_private("patches nnx.decisions.schema (one module here, not a package)",
         "test_result_boundaries.py::test_only_invalid_decision_request_is_converted")
_keep("semantics", "the built-in step's records carry no status (a given status is checked as NNx checks it) and a "
      "fully masked window warns of nothing; record state() keeps this project's key order (the journal's and "
      "idps.csv's layout); a hand-built NNRun is not saved",
      "test_task_adapters.py::test_regression_record_matches_the_mse_mae_oracle_and_its_masked_variant",
      "test_task_adapters.py::test_an_all_masked_window_takes_no_update_and_records_an_empty_batch",
      "test_task_evaluation_serialization.py::test_legacy_evaluation_records_keep_their_serialization",
      "test_task_evaluation_serialization.py::test_task_records_round_trip_through_run_csv_*")
_keep("semantics", "TaskSpec.state() writes its own {kind, n, …} layout (no 'version'; part of existing run ids); "
      "NNx's versioned layout is read, and a state without 'version' is this project's own, not refused",
      "test_task_adapters.py::test_task_spec_constructors_and_validation",
      "test_task_adapters.py::test_task_spec_versioned_round_trip_rejects_unknown_versions_and_keys",
      "test_task_evaluation_serialization.py::test_model_params_carry_a_versioned_task_and_legacy_state_is_unchanged")
_keep("refused-before", "NNModelParams' default loss (CROSS_ENTROPY) gives way to a declared TaskSpec "
      "(NNModelParams(task=TaskSpec.regression()) trains MSE and keeps its run id); a non-default loss of another kind "
      "is refused when the model is built, as NNx refuses it",
      "test_task_adapters.py::test_model_construction_rejects_an_incompatible_task[[]task0*",
      "test_task_adapters.py::test_model_construction_rejects_an_incompatible_task[[]task2*")
_keep("params-context", "default_train_step called by hand with accumulate_grad_batches > 1 needs the window's "
      "accumulation_state= across calls", "test_task_adapters.py::test_direct_step_callers_keep_a_window_whose_last_batch_is_masked")
_out("the abstention policy", "test_decision_jobs.py::test_an_abstention_policy_that_does_not_fit_its_question_is_refused_at_ask")
