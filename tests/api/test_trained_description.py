"""run.yaml describes what trained a run: the net that ran, who owned the updates and the loss.

The configuration (the run id's content) keeps NNModelParams as given, defaults included, so a
``module=`` model trained by an objective carries ``net: feed_fwd`` and ``loss: cross_entropy``
there; the ``trained`` section beside it says what actually ran, and the id does not move."""

from __future__ import annotations

import torch
from torch import nn

from nnx_core.identity import run_id
import nnx_api as nnx
from nnx_api.runs.store import dump_yaml, load_yaml

from tests.api.tiny import TwoPart, batches, tiny_data, two_part_model


def _run_yaml(run) -> dict:
    return load_yaml((run.path / "run.yaml").read_bytes(), where="test")


def _params(**kw) -> nnx.NNTrainParams:
    x, y = tiny_data(n=16)
    return nnx.NNTrainParams(**{"n_epochs": 1, "seed": 0, "train_loader": batches(x, y, 8), "progress": False, **kw})


def _summed_objective(ctx):
    x, y = ctx.inputs_and_target()
    out = ctx.forward(x)
    return nnx.ObjectiveResult([nnx.LossTerm("nll", nn.functional.cross_entropy(out, y, reduction="sum"), reduction="sum")])


def _own_step(ctx):
    return nnx.default_train_step(ctx)


def test_a_module_trained_by_an_objective_is_not_described_by_the_model_defaults(tmp_path):
    run = two_part_model().train(_params(), objective=_summed_objective, root=tmp_path)
    doc = _run_yaml(run)
    assert doc["model"]["net"] == "feed_fwd" and doc["model"]["loss"] == "cross_entropy"  # the identity, as given
    assert doc["trained"] == {
        "net": f"module {TwoPart.__module__}.TwoPart",
        "update": f"objective {__name__}._summed_objective",
        "loss": "the objective's loss terms",
    }
    assert doc.pop("id") == run.id == run_id({k: v for k, v in doc.items() if k != "trained"})  # outside the id
    assert nnx.NNRun.load(run.id, tmp_path).trained == doc["trained"]


def test_the_built_in_step_names_the_loss_it_computed(tmp_path):
    x, y = tiny_data(n=16)
    regression = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=1, hidden_dims=(4,)),
                             nnx.NNModelParams(task=nnx.TaskSpec.regression()))  # loss stays the default cross_entropy
    run = regression.train(_params(train_loader=batches(x, torch.randn(16, 1), 8)), root=tmp_path)
    assert _run_yaml(run)["trained"] == {"net": "built-in feed_fwd", "update": "built-in step", "loss": "mean_squared_error"}

    nll = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(4,)),
                      nnx.NNModelParams(loss=nnx.Losses.NEGATIVE_LOG_LIKELIHOOD))
    assert _run_yaml(nll.train(_params(), root=tmp_path))["trained"]["loss"] == "negative_log_likelihood"

    own_loss = two_part_model()
    own_loss.loss_fn = nn.CrossEntropyLoss(reduction="sum")
    run = own_loss.train(_params(), objective=nnx.supervised_objective(), root=tmp_path)
    assert _run_yaml(run)["trained"]["update"] == "objective nnx_api.training.objectives.SupervisedObjective"
    assert _run_yaml(run)["trained"]["loss"] == "loss_fn torch.nn.modules.loss.CrossEntropyLoss (reduction='sum')"


def test_a_step_function_owns_the_loss_it_computes(tmp_path):
    run = two_part_model().train(_params(), train_step_fn=_own_step, root=tmp_path)
    assert _run_yaml(run)["trained"] == {
        "net": f"module {TwoPart.__module__}.TwoPart", "update": f"train_step_fn {__name__}._own_step",
        "loss": "computed by the step",
    }


def test_the_cli_shows_what_trained_and_a_run_without_the_section_still_loads(tmp_path, capsys):
    run = two_part_model().train(_params(), objective=_summed_objective, root=tmp_path)
    from nnx_api.cli import main

    assert main(["runs", "show", run.id[:8], "--root", str(tmp_path)]) == 0
    assert f"trained: net module {TwoPart.__module__}.TwoPart; objective " in capsys.readouterr().out

    doc = _run_yaml(run)  # a run written before the section existed
    del doc["trained"]
    (run.path / "run.yaml").write_bytes(dump_yaml(doc))
    loaded = nnx.NNRun.load(run.id, tmp_path)
    assert loaded.trained is None and loaded.id == run.id
