"""Class targets of -100 under an objective are left out of the loss, as ``F.cross_entropy`` leaves
them out (and NNx follows it), with the window normalised by its valid targets only: a committed
update equals one plain-torch SGD step on the union of the window's rows.

The oracle is plain torch: ``F.cross_entropy(net(x), y)`` over every row at once (its default
``ignore_index=-100``, the mean over the valid targets), one ``w - lr · ∇`` step.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import nnx_api as nnx

from tests.api.tiny import sgd_step_tolerance

LR = 0.1


def _linear() -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 3)


def _plain_step(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    net = _linear()
    F.cross_entropy(net(x), y).backward()
    with torch.no_grad():
        return [p - LR * p.grad for p in net.parameters()]


@pytest.mark.parametrize("masked", [[1, 2, 5], [4, 5, 6, 7]], ids=["scattered", "the window's last microbatch all masked"])
def test_supervised_objective_masks_minus_100_and_equals_one_step_on_the_union(tmp_path, masked):
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
    y[masked] = -100
    expected = _plain_step(x, y)
    valid = int((y != -100).sum())
    tol = sgd_step_tolerance(
        _linear(), lambda net, i: F.cross_entropy(net(x[i : i + 1].double()), y[i : i + 1], reduction="sum") / valid, x, LR
    )
    model = nnx.NNModel(module=_linear())
    params = nnx.NNTrainParams(n_epochs=1, optim=nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=LR, accumulate_grad_batches=2),
                               train_loader=[(x[:4], y[:4]), (x[4:], y[4:])], progress=False)
    run = model.train(params, objective=nnx.supervised_objective(), root=tmp_path)
    for got, want in zip(model.net.parameters(), expected, strict=True):
        torch.testing.assert_close(got.detach(), want, atol=tol, rtol=0)
    counts = [r.train_edp.count for r in run.idps]
    assert counts == [int((y[:4] != -100).sum()), int((y[4:] != -100).sum())]  # each record counts its valid targets


@pytest.mark.parametrize("task", [None, nnx.TaskSpec.categorical(3)], ids=["loss-implied task", "declared task"])
@pytest.mark.parametrize("masked", [[1, 2, 5], [4, 5, 6, 7]], ids=["scattered", "the window's last microbatch all masked"])
def test_the_built_in_step_masks_minus_100_and_equals_one_step_on_the_union(tmp_path, masked, task):
    """A task that names no ignore_index leaves -100 out as F.cross_entropy does: the window's
    update is plain torch's step on the union, each record counts and scores its valid targets."""
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
    y[masked] = -100
    expected = _plain_step(x, y)
    valid = int((y != -100).sum())
    tol = sgd_step_tolerance(
        _linear(), lambda net, i: F.cross_entropy(net(x[i : i + 1].double()), y[i : i + 1], reduction="sum") / valid, x, LR
    )
    model = nnx.NNModel(module=_linear(), params=nnx.NNModelParams(task=task))
    params = nnx.NNTrainParams(n_epochs=1, optim=nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=LR, accumulate_grad_batches=2),
                               train_loader=[(x[:4], y[:4]), (x[4:], y[4:])], progress=False)
    run = model.train(params, root=tmp_path)
    for got, want in zip(model.net.parameters(), expected, strict=True):
        torch.testing.assert_close(got.detach(), want, atol=tol, rtol=0)
    with torch.no_grad():  # each batch's record: torch's mean over its valid targets, before the update
        for record, rows in zip([r.train_edp for r in run.idps], (slice(0, 4), slice(4, 8)), strict=True):
            xb, yb = x[rows], y[rows]
            keep = yb != -100
            assert record.count == int(keep.sum())
            if record.count:
                assert record.loss == pytest.approx(float(F.cross_entropy(_linear()(xb), yb)), rel=1e-5)
                assert record.accuracy == pytest.approx(float((_linear()(xb).argmax(-1)[keep] == yb[keep]).double().mean()))
    scored = model.evaluate([(x[:4], y[:4]), (x[4:], y[4:])])  # evaluate masks them too
    with torch.no_grad():
        keep = y != -100
        assert scored.loss == pytest.approx(float(F.cross_entropy(model.net(x), y)), rel=1e-5)
        assert scored.accuracy == pytest.approx(float((model.net(x).argmax(-1)[keep] == y[keep]).double().mean()))


def test_labels_other_than_the_ignored_one_are_still_refused(tmp_path):
    """-1 is no ignored class, and a task that declares another ignore_index counts -100 as a label:
    both are refused on the batch that holds them."""
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
    y[6] = -1
    model = nnx.NNModel(module=_linear())
    params = nnx.NNTrainParams(n_epochs=1, train_loader=[(x[:4], y[:4]), (x[4:], y[4:])], progress=False)
    with pytest.raises(nnx.TrainingInputError, match=r"batch 1 \(0-based\) of epoch 0 holds class label -1.*ignore_index=-1"):
        model.train(params, root=tmp_path)
    y[6] = -100
    declared = nnx.NNModel(module=_linear(), params=nnx.NNModelParams(task=nnx.TaskSpec.categorical(ignore_index=2)))
    with pytest.raises(nnx.TaskValidationError, match="holds class label -100"):
        declared.train(params, root=tmp_path / "declared")
