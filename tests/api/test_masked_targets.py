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


def test_the_built_in_step_refuses_minus_100_without_ignore_index_on_any_batch(tmp_path):
    """The built-in step counts every target: -100 needs TaskSpec.categorical(ignore_index=-100),
    on the first batch (before anything is written) and on any later one."""
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
    y[6] = -100
    model = nnx.NNModel(module=_linear())
    params = nnx.NNTrainParams(n_epochs=1, train_loader=[(x[:4], y[:4]), (x[4:], y[4:])], progress=False)
    with pytest.raises(nnx.TrainingInputError, match=r"batch 1 \(0-based\) of epoch 0 holds class label -100.*ignore_index=-100"):
        model.train(params, root=tmp_path)
    masked = nnx.NNModel(module=_linear(), params=nnx.NNModelParams(task=nnx.TaskSpec.categorical(ignore_index=-100)))
    assert masked.train(params, root=tmp_path / "masked").checkpoint("last").epoch == 0  # with it, -100 is masked
