"""The code fingerprint (``nnx_api.training.code``) of an objective: every kind is fingerprinted.

A function by its source (as a step function); an instance by its class's source plus its
configuration (its plain-data attributes); NNx's own objectives by their configuration only. The
configuration joins the fingerprint, never the run id (ids do not drift).

Oracles: the objective's code and constructor arguments themselves — one changed constant or
argument must count as changed (``CodeChangedError`` naming the objective), the same source must
not, and must not be warned of as unreadable.
"""

from __future__ import annotations

import textwrap
import warnings

import pytest
import torch

import nnx_api as nnx
from nnx_api.training import code

from tests.api.tiny import batches, tiny_data

FUNCTION = """
import nnx_api as nnx

_inner = nnx.supervised_objective()

def scaled(ctx):
    result = _inner(ctx)
    return nnx.ObjectiveResult([nnx.LossTerm("loss", {factor} * t.numerator, t.denominator) for t in result.terms])
"""

CLASS = """
import nnx_api as nnx

class Weighted(nnx.Objective):
    def __init__(self, weight):
        super().__init__()
        self.weight = weight
        self._inner = nnx.supervised_objective()

    def __call__(self, ctx):
        result = self._inner(ctx)
        return nnx.ObjectiveResult([nnx.LossTerm("loss", {factor} * t.numerator, t.denominator, weight=self.weight)
                                    for t in result.terms])
"""


def _load(tmp_path, template: str, name: str, factor: str = "1.0"):
    """``name`` from ``template`` written to its own source file (``inspect.getsource`` reads it)."""
    path = tmp_path / f"{name}_{abs(hash((template, factor)))}.py"
    path.write_text(textwrap.dedent(template.format(factor=factor)))
    namespace: dict = {"__name__": f"user_{path.stem}"}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace[name]


def _train(root, objective):
    x, y = tiny_data(n=32)
    torch.manual_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)))
    params = nnx.NNTrainParams(n_epochs=1, train_loader=batches(x, y, 16), progress=False, resume="auto")
    return model.train(params, objective=objective, root=root)


def _quiet_rerun(root, objective):
    """A rerun that must not warn that the objective's source cannot be read."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = _train(root, objective)
    assert not [w for w in caught if "cannot be read" in str(w.message)]
    return run


def test_a_function_objective_is_fingerprinted_by_its_source(tmp_path):
    root = tmp_path / "runs"
    run = _train(root, _load(tmp_path, FUNCTION, "scaled"))
    recorded = nnx.NNRun.load(run.id, root).code_fingerprint["objective"]
    assert recorded["name"] == "scaled" and recorded["sha256"]
    again = _quiet_rerun(root, _load(tmp_path, FUNCTION, "scaled"))  # the same code: the finished run, no warning
    assert again.id == run.id
    with pytest.raises(nnx.CodeChangedError, match=r"objective scaled changed.*salt="):
        _train(root, _load(tmp_path, FUNCTION, "scaled", factor="2.0"))


def test_an_objective_instance_is_fingerprinted_by_its_class_and_constructor_arguments(tmp_path):
    root = tmp_path / "runs"
    weighted = _load(tmp_path, CLASS, "Weighted")
    run = _train(root, weighted(0.5))
    assert nnx.NNRun.load(run.id, root).code_fingerprint["objective"]["name"] == "Weighted"
    assert _quiet_rerun(root, weighted(0.5)).id == run.id
    with pytest.raises(nnx.CodeChangedError, match=r"objective Weighted changed"):
        _train(root, weighted(0.7))  # another constructor argument, the same run id
    with pytest.raises(nnx.CodeChangedError, match=r"objective Weighted changed"):
        _train(root, _load(tmp_path, CLASS, "Weighted", factor="3.0")(0.5))  # the class's code changed


def test_a_builtin_objectives_configuration_is_fingerprinted_not_in_the_run_id(tmp_path):
    root = tmp_path / "runs"
    torch.manual_seed(1)
    teacher = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)))
    run = _train(root, nnx.kd_objective(teacher, alpha=0.5))
    recorded = nnx.NNRun.load(run.id, root).code_fingerprint["objective"]
    assert recorded["name"] == "KDObjective" and recorded["config"] is True
    assert _quiet_rerun(root, nnx.kd_objective(teacher, alpha=0.5)).id == run.id
    with pytest.raises(nnx.CodeChangedError, match=r"objective KDObjective changed"):
        _train(root, nnx.kd_objective(teacher, alpha=0.7))
    assert _train(tmp_path / "plain", nnx.supervised_objective()).id == _train(tmp_path / "other", None).id


def test_records_made_before_objectives_were_fingerprinted_are_not_refused():
    """An older run recorded a function objective as ``function.__call__`` (no digest) and an
    objective class by its ``__call__``; NNx's objectives not at all. None of them can be
    compared: no refusal (the unrecorded NNx objective silently, as then)."""
    now = {"objective": {"name": "scaled", "sha256": "0123456789abcdef"}}
    old = {"objective": {"name": "function.__call__", "sha256": None}}
    assert code.code_refusal("r" * 32, old, now) is None and code.unreadable(old, now) == ["objective"]
    old_class = {"objective": {"name": "Weighted.__call__", "sha256": "fedcba9876543210"}}
    now_class = {"objective": {"name": "Weighted", "sha256": "0123456789abcdef"}}
    assert code.code_refusal("r" * 32, old_class, now_class) is None and code.unreadable(old_class, now_class) == ["objective"]
    builtin = {"objective": {"name": "KDObjective", "sha256": "0123456789abcdef", "config": True}}
    assert code.code_refusal("r" * 32, {}, builtin) is None and code.unreadable({}, builtin) == []
    assert code.code_refusal("r" * 32, now, now) is None and code.unreadable(now, now) == []


def test_configuration_is_plain_data_only():
    class Obj:
        def __init__(self):
            self.weight, self.name, self.flag, self.dims, self.none = 0.5, "kl", True, (1, 2), None
            self.module, self.tensor, self._private = torch.nn.Linear(1, 1), torch.ones(1), 3

    assert code._config(Obj()) == {"weight": 0.5, "name": "kl", "flag": True, "dims": [1, 2], "none": None}


class Kl(nnx.Objective):
    def __init__(self, weight):
        super().__init__()
        self.weight = weight

    def __call__(self, ctx):
        raise NotImplementedError


def test_an_importable_class_is_read_from_its_source_and_its_configuration():
    record = code._objective(Kl(0.5))
    assert record["name"] == "Kl" and record["sha256"] and "config" not in record
    assert code._objective(Kl(0.5)) == record and code._objective(Kl(0.7))["sha256"] != record["sha256"]
