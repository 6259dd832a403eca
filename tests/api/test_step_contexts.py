"""The step contexts and records as dataclasses, as NNx 0.4.1's are (REFERENCE §4, §8; bench/compat s13-s15).

Oracles: NNx's recorded ``dataclasses.fields()`` names and order; a ``TrainStepContext`` built from
NNx's documented fields alone (keyword or positional) with ``default_train_step`` run on it; the
records' ``state()`` layout (``idps.csv`` column order) unchanged by the dataclass view.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
import torch
import torch.nn.functional as F

import nnx_api as nnx

from tests.api.tiny import batches, tiny_data


def names(cls_or_obj):
    return [f.name for f in dataclasses.fields(cls_or_obj)]


def model_for(seed=0):
    torch.manual_seed(seed)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())


def test_the_contexts_fields_are_nnx_fields_in_nnx_order():
    assert names(nnx.TrainStepContext) == [
        "model", "batch", "optimizer", "scaler", "grad_clip_norm", "extra_metrics", "accumulate_grad_batches",
        "batch_idx", "epoch_idx", "is_last_batch", "accumulation_state", "epoch_summary", "precision", "report_update",
    ]
    assert names(nnx.EvalStepContext) == ["model", "val_loader", "extra_metrics", "epoch_idx", "metrics"]
    assert names(nnx.TrainerStepContext) == [
        "model", "batch", "optimizers", "schedulers", "extra_metrics", "batch_idx", "epoch_idx", "report_update",
    ]
    assert names(nnx.ObjectiveContext) == ["model", "batch", "epoch_idx", "batch_idx", "extra_metrics", "precision"]


def test_a_train_step_context_builds_from_nnx_fields_and_default_train_step_runs_on_it():
    model = model_for()
    opt = torch.optim.SGD(model.net.parameters(), lr=0.1)
    x, y = tiny_data(n=4)
    ctx = nnx.TrainStepContext(model=model, batch=(x, y), optimizer=opt, scaler=None, grad_clip_norm=None,
                               extra_metrics=None, accumulate_grad_batches=1, batch_idx=0, epoch_idx=0)
    positional = nnx.TrainStepContext(model, (x, y), opt, None, None, None, 1, 0, 0)
    assert (ctx.is_last_batch, ctx.accumulation_state, ctx.precision, ctx.report_update()) == (False, None, None, None)
    assert positional.batch_idx == 0 and ctx.session is None and ctx.scheduler is None and ctx.weigh(3) is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.batch_idx = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        nnx.TrainStepContext(model=model, batch=(x, y))  # type: ignore[call-arg]
    assert dataclasses.replace(ctx, batch_idx=3).batch_idx == 3
    before = [p.detach().clone() for p in model.net.parameters()]
    with torch.no_grad():
        expected = float(F.cross_entropy(model.net(x), y))
    reports = []
    record = nnx.default_train_step(dataclasses.replace(ctx, report_update=lambda: reports.append(1)))
    assert isinstance(record, nnx.EvaluationDataPoint) and record.loss == pytest.approx(expected, rel=1e-6)
    assert reports == [1] and not all(torch.equal(a, b) for a, b in zip(before, model.net.parameters(), strict=True))


def test_an_objective_context_builds_from_nnx_fields():
    ctx = nnx.ObjectiveContext(model_for(), (torch.zeros(2, 4), torch.tensor([0, 1])), 0, 0)
    assert ctx.precision is None and ctx.extra_metrics is None
    result = nnx.supervised_objective()(ctx)
    assert result.loss() is not None


def test_records_support_dataclasses_with_nnx_order_and_keep_their_state_layout():
    edp = nnx.EvaluationDataPoint(loss=0.5, accuracy=0.75, error=0.25, count=4, metrics={"nll": 0.4})
    idp = nnx.IterationDataPoint(iter_idx=0, epoch_idx=0, batch_idx=0, lr=0.1, train_edp=edp, update_count=1)
    assert names(nnx.IterationDataPoint) == [
        "lr", "iter_idx", "epoch_idx", "batch_idx", "train_edp", "val_edp", "train_summary", "selection", "update_count",
    ]
    assert names(edp)[:7] == ["f1", "recall", "accuracy", "precision", "loss", "error", "extra"]
    assert list(idp.state()) == ["iter_idx", "epoch_idx", "batch_idx", "lr", "train_edp", "update_count"]  # idps.csv
    assert nnx.IterationDataPoint.from_state(idp.state()) == idp
    assert dataclasses.replace(idp, lr=0.2) == idp.__class__(**{**dataclasses.asdict(idp), "lr": 0.2, "train_edp": edp})
    assert dataclasses.asdict(idp)["train_edp"]["metrics"] == {"nll": 0.4}
    assert dataclasses.replace(edp, loss=1.0).metrics == {"nll": 0.4}
    assert pickle.loads(pickle.dumps(idp)) == idp and copy.deepcopy(idp) == idp


def test_a_checkpoint_supports_dataclasses_with_nnx_fields_first(runs):
    x, y = tiny_data(n=16)
    run = model_for().train(nnx.NNTrainParams(n_epochs=1, train_loader=batches(x, y, 8)), root=runs)
    best = nnx.NNCheckpoint.load(run.id, nnx.Checkpoints.BEST, root=runs)
    assert names(best)[:7] == ["net_params", "net_state", "model_params", "idp", "transforms", "training_state_id",
                               "training_state_present"]
    assert dataclasses.replace(best, transforms=()).run_id == best.run_id
