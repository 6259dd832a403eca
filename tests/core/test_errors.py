"""Typed errors: what each one carries (its ``path``, ``problems`` or ``record``) and how its
message reads, since callers and users match on both."""

from __future__ import annotations

import inspect
import pickle

import pytest

import nnx_core.errors as errors
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


def _error_classes() -> list[type[BaseException]]:
    return [cls for _, cls in inspect.getmembers(errors, inspect.isclass)
            if issubclass(cls, BaseException) and cls.__module__ == "nnx_core.errors"]


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda cls: cls.__name__)
def test_every_error_survives_pickle_with_its_message_and_fields(cls):
    """Errors cross process boundaries (a rank's failure gathered to every rank, a loader worker's,
    multiprocessing): each rebuilds as the same type, message and fields, whatever its __init__
    takes (the default pickling calls __init__ with the message alone)."""
    required = [p for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
                if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    error = cls(*[["first problem", "second"] if p.name == "problems" else f"<{p.name}>" for p in required])
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls and str(again) == str(error) and again.__dict__ == error.__dict__
