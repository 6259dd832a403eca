"""Every refusal NNx 0.4.1 raises as a builtin is, here, an instance of that builtin: code written
for NNx (``except ValueError:``, ``pytest.raises(FileNotFoundError)``) keeps catching our typed
``NNxError`` subclasses.

The table ``NNX_RAISES`` was recorded from NNx 0.4.1 with bench/compat/exception_bases.py
(``--package nnx`` in a virtualenv holding the ``thekaveh-nnx==0.4.1`` wheel); each probe is the
same short user-level call, run here against ``nnx_api``. The builtins listed are the most
specific ones NNx's exception derives from (``FileNotFoundError`` implies ``OSError`` and so on).
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "compat" / "exception_bases.py"

# probe -> the builtins NNx 0.4.1's exception derives from (recorded with exception_bases.py)
NNX_RAISES: dict[str, tuple[type[BaseException], ...]] = {
    # params validation
    "params_epochs_zero": (ValueError,),
    "params_epochs_str": (ValueError,),
    "params_lr_negative": (ValueError,),
    "params_input_dim_zero": (ValueError,),
    "params_data_id_blank": (ValueError,),
    "model_no_net_params": (ValueError,),
    "precision_mode": (ValueError,),
    "precision_fp16_on_cpu": (ValueError,),
    "freeze_no_patterns": (ValueError,),
    "train_no_loader": (ValueError,),
    "step_and_objective": (ValueError,),
    "schedule_budget_too_small": (ValueError,),
    "nonfinite_loss": (FloatingPointError,),
    "predict_wrong_width": (RuntimeError,),
    "tabular_missing_column": (KeyError,),
    # registries
    "model_factory_missing": (ValueError,),
    "optimizer_factory_missing": (ValueError,),
    "metric_unknown_id": (ValueError,),
    "metric_reserved_name": (ValueError,),
    # search: bounds, budgets, the study
    "search_float_low_above_high": (ValueError,),
    "search_float_low_equals_high": (ValueError,),
    "search_float_log_nonpositive": (ValueError,),
    "search_float_step_nonpositive": (ValueError,),
    "search_float_step_and_log": (ValueError,),
    "search_int_low_above_high": (ValueError,),
    "search_int_step_zero": (ValueError,),
    "search_int_log_nonpositive": (ValueError,),
    "search_categorical_empty": (ValueError,),
    "search_space_empty": (ValueError,),
    "search_space_duplicate": (ValueError,),
    "search_budget_trials_zero": (ValueError,),
    "search_budget_trials_float": (ValueError,),
    "search_budget_updates_zero": (ValueError,),
    "search_budget_deadline_zero": (ValueError,),
    "search_blank_study_name": (ValueError,),
    # experiment plans
    "plan_empty_fit": (ValueError, TypeError),
    "plan_epochs_zero": (ValueError, TypeError),
    "plan_seed_str": (ValueError, TypeError),
    "plan_attempt_reused": (FileExistsError,),
    # named monitors, EarlyStopping
    "monitor_split": (ValueError,),
    "monitor_mode": (ValueError,),
    "monitor_min_delta_negative": (ValueError,),
    "monitor_on_missing": (ValueError,),
    "monitor_blank_metric": (ValueError,),
    "monitor_missing_error_policy": (ValueError,),
    "monitor_nonfinite_error_policy": (ValueError,),
    "early_stopping_mode": (ValueError,),
    "early_stopping_patience_negative": (ValueError,),
    "early_stopping_spec_with_mode": (ValueError,),
    # DDP
    "ddp_writer_rank_negative": (ValueError,),
    "ddp_without_group": (RuntimeError,),
    "rank_partition_rank_out_of_range": (ValueError,),
    "rank_partition_policy": (ValueError,),
    # runs, resume
    "run_load_missing": (FileNotFoundError,),
    "run_load_traversal": (ValueError,),
    "run_exists": (FileExistsError,),
    "run_exists_other_data": (FileExistsError,),
    "resume_missing_run": (ValueError,),
    "resume_missing_tag": (ValueError,),
    "resume_mode_bad": (ValueError,),
    "resume_other_optimizer": (ValueError,),
}


@pytest.fixture(scope="module")
def probes():
    spec = importlib.util.spec_from_file_location("exception_bases", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("exception_bases", module)
    spec.loader.exec_module(module)
    return module.Probes("nnx_api")


@pytest.mark.parametrize("probe", sorted(NNX_RAISES))
def test_refusal_is_the_builtin_nnx_raises(probe, probes, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # runs the probes train land under tmp_path/runs
    expected = NNX_RAISES[probe]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as caught:
            getattr(probes, "p_" + probe)()
    missing = [b.__name__ for b in expected if not isinstance(caught.value, b)]
    assert not missing, (
        f"{probe}: NNx raises a {'/'.join(b.__name__ for b in expected)}; ours raised "
        f"{type(caught.value).__name__} (mro {[c.__name__ for c in type(caught.value).__mro__]}), not a {missing}: "
        f"{caught.value}"
    )


def test_every_probe_of_the_script_is_pinned_or_listed_as_a_known_difference(probes):
    """A probe added to the script is either pinned above or named here with why it is not."""
    known = {
        "monitor_undeclared_metric",  # f1 is in every validation record here, so the monitor is computed
        "params_parent_and_resume",  # parent_run_id is set from resume_from_run_id here: copies hold both
        "early_stopping_other_spec",  # NNx accepts it; here a second monitor differing from the run's is refused
        "target_out_of_range",  # NNx leaks torch's IndexError; here the first-batch check says which label
    }
    names = {n[2:] for n in dir(type(probes)) if n.startswith("p_")}
    assert names == set(NNX_RAISES) | known
