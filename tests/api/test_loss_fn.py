"""An assigned ``model.loss_fn`` is the loss: training, records, validation and ``evaluate``.

Oracle: plain torch. ``reduction="sum"`` is summed, not normalised: an accumulated window equals
one ``w - lr · ∇ Σ loss`` step on the union; a class-weighted mean is normalised by its own
denominator (the weights of the window's targets), so uneven microbatches equal one weighted
``F.cross_entropy`` step on the union (REFERENCE §3.5).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import nnx_api as nnx

from tests.api.tiny import sgd_step_tolerance

LR = 0.05
G = torch.Generator().manual_seed(5)
X, Y = torch.randn(10, 4, generator=G), torch.randint(0, 3, (10,), generator=G)
PARTS = [(X[:3], Y[:3]), (X[3:], Y[3:])]  # uneven microbatches of one window
WEIGHT = torch.tensor([1.0, 3.0, 0.5])


def _linear() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(4, 3)


def _trained(loss_fn: nn.Module, tmp_path) -> tuple[nnx.NNModel, nnx.NNRun]:
    model = nnx.NNModel(module=_linear())
    model.loss_fn = loss_fn
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=LR, accumulate_grad_batches=2)
    run = model.train(nnx.NNTrainParams(n_epochs=1, optim=optim, train_loader=PARTS, progress=False), root=tmp_path)
    return model, run


def _plain_step(loss: nn.Module) -> list[torch.Tensor]:
    net = _linear()
    loss(net(X), Y).backward()
    with torch.no_grad():
        return [p - LR * p.grad for p in net.parameters()]


@pytest.mark.parametrize("loss_fn, share", [
    (nn.CrossEntropyLoss(reduction="sum"), lambda net, i: F.cross_entropy(net(X[i : i + 1].double()), Y[i : i + 1], reduction="sum")),
    (nn.CrossEntropyLoss(weight=WEIGHT), lambda net, i: WEIGHT[Y[i]].double() * F.cross_entropy(
        net(X[i : i + 1].double()), Y[i : i + 1], reduction="sum") / WEIGHT[Y].sum().double()),
], ids=["sum", "class-weighted mean"])
def test_an_assigned_loss_fn_trains_as_one_plain_torch_step_on_the_union(tmp_path, loss_fn, share):
    expected = _plain_step(loss_fn)
    tol = sgd_step_tolerance(_linear(), share, X, LR)
    model, run = _trained(loss_fn, tmp_path)
    for got, want in zip(model.net.parameters(), expected, strict=True):
        torch.testing.assert_close(got.detach(), want, atol=tol, rtol=0)
    with torch.no_grad():  # the first record's loss: the loss_fn's value on that batch, before any update
        first = float(loss_fn(_linear()(X[:3]), Y[:3]))
    assert run.idps[0].train_edp.loss == pytest.approx(first, rel=1e-6)


def test_a_sum_loss_fn_evaluates_to_the_sum_over_the_pass(tmp_path):
    model, _ = _trained(nn.CrossEntropyLoss(reduction="sum"), tmp_path)
    with torch.no_grad():
        expected = float(F.cross_entropy(model.net(X), Y, reduction="sum"))
    assert model.evaluate(PARTS).loss == pytest.approx(expected, rel=1e-5)


def test_a_loss_fn_that_is_not_callable_or_of_an_unknown_reduction_is_refused():
    model = nnx.NNModel(module=_linear())
    with pytest.raises(nnx.ParamsError, match="NNModel.loss_fn: must be a loss module"):
        model.loss_fn = "cross_entropy"
    with pytest.raises(nnx.ParamsError, match="reduction must be 'mean', 'sum' or 'none'"):
        model.loss_fn = nn.CrossEntropyLoss(reduction="batchmean")


def test_an_assigned_class_loss_leaves_its_ignored_targets_out_of_every_score():
    """``CrossEntropyLoss(ignore_index=-100)``: the ignored rows weigh nothing in the loss, the
    accuracy or the split of a pass into batches (NNx's behaviour); a pass of ignored rows only is
    refused, naming it."""
    model = nnx.NNModel(module=_linear())
    model.loss_fn = nn.CrossEntropyLoss(weight=WEIGHT, ignore_index=-100)
    y = Y.clone()
    y[:4] = -100
    split = model.evaluate([(X[:2], y[:2]), (X[2:5], y[2:5]), (X[5:], y[5:])])
    whole = model.evaluate([(X, y)])
    with torch.no_grad():
        logits = model.net(X)
    assert split.loss == pytest.approx(whole.loss) == pytest.approx(float(F.cross_entropy(logits, y, weight=WEIGHT)))
    kept = y != -100
    assert whole.accuracy == pytest.approx(float((logits[kept].argmax(1) == y[kept]).float().mean()))
    with pytest.raises(nnx.TrainingInputError, match="zero non-ignored samples"):
        model.evaluate([(X[:2], torch.full((2,), -100))])


def test_a_stock_nll_loss_is_given_log_probabilities_and_a_subclass_the_raw_output():
    model = nnx.NNModel(module=_linear())
    model.loss_fn = nn.NLLLoss()
    with torch.no_grad():
        logits = model.net(X)
    assert model.evaluate([(X, Y)]).loss == pytest.approx(float(F.nll_loss(F.log_softmax(logits, 1), Y)))

    class Raw(nn.NLLLoss):
        def forward(self, input, target):  # noqa: A002 - torch's names
            return super().forward(input, target)

    model.loss_fn = Raw()
    assert model.evaluate([(X, Y)]).loss == pytest.approx(float(F.nll_loss(logits, Y)))
