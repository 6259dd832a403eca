"""Typed errors: what each one carries (its ``path``, ``problems`` or ``record``) and how its
message reads, since callers and users match on both."""

from __future__ import annotations

import pytest

from nnx_core.errors import CompileError, ComponentRestoreError, NNxError, ParamsError, ResumeMismatchError


def test_params_error_names_the_field_first_and_is_both_a_value_and_a_type_error():
    err = ParamsError("NNTrainParams.optim", "must be one of 'adam', 'sgd'; got 'x'")
    assert err.path == "NNTrainParams.optim"
    assert str(err) == "NNTrainParams.optim: must be one of 'adam', 'sgd'; got 'x'"
    assert err.args == ("NNTrainParams.optim: must be one of 'adam', 'sgd'; got 'x'",)
    for kind in (NNxError, ValueError, TypeError):
        with pytest.raises(kind):
            raise err


def test_component_restore_error_lists_every_problem_on_its_own_line():
    problems = ["nnx.update_engine: saved optimizers ['gen'] != ['default']", "nnx.scheduler_clock: saved kind"]
    err = ComponentRestoreError(problems)
    assert err.problems == problems and err.problems is not problems  # its own copy
    problems.append("later")
    assert len(err.problems) == 2
    assert str(err) == (
        "cannot restore components:\n"
        "  - nnx.update_engine: saved optimizers ['gen'] != ['default']\n"
        "  - nnx.scheduler_clock: saved kind"
    )
    assert isinstance(err, ResumeMismatchError)


def test_compile_error_carries_its_record():
    record = object()
    err = CompileError("inductor failed: no C++ compiler", record)
    assert err.record is record and str(err) == "inductor failed: no C++ compiler"
    assert err.args == ("inductor failed: no C++ compiler",)
    bare = CompileError("failed")
    assert bare.record is None and str(bare) == "failed"
    assert isinstance(err, NNxError) and isinstance(err, RuntimeError)
