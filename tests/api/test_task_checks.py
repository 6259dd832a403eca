"""What a declared ``TaskSpec`` refuses, and when: a loss of another task kind when the model is
built (as NNx 0.4.1 refuses it), multilabel labels other than 0/1 before anything is written.

Oracles: NNx 0.4.1's own behaviour for these configurations (it raises ``TaskValidationError``
from ``NNModel(...)`` and from its multilabel batch check), and the files on disk (none).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import nnx_api as nnx


def _model(task: nnx.TaskSpec, loss: nnx.Losses, output_dim: int) -> nnx.NNModel:
    return nnx.NNModel(nnx.NNParams(input_dim=3, output_dim=output_dim, hidden_dims=(4,)),
                       nnx.NNModelParams(loss=loss, task=task))


@pytest.mark.parametrize(("task", "loss", "needs"), [
    (nnx.TaskSpec.categorical(), nnx.Losses.MEAN_SQUARED_ERROR, "Losses.CROSS_ENTROPY or Losses.NEGATIVE_LOG_LIKELIHOOD"),
    (nnx.TaskSpec.regression(), nnx.Losses.BINARY_CROSS_ENTROPY, "Losses.MEAN_SQUARED_ERROR"),
    (nnx.TaskSpec.multilabel(), nnx.Losses.NEGATIVE_LOG_LIKELIHOOD, "Losses.BINARY_CROSS_ENTROPY"),
])
def test_a_loss_of_another_task_kind_is_refused_when_the_model_is_built(task, loss, needs):
    with pytest.raises(nnx.TaskValidationError, match=f"Losses.{loss.name}, but a {task.kind} TaskSpec needs {needs}"):
        _model(task, loss, 2)


def test_the_default_loss_yields_to_the_declared_task(tmp_path):
    """NNModelParams(task=TaskSpec.regression()) keeps the default loss field and trains the task's
    MSE: the batch's record is torch's MSE of the weights before the update."""
    model = _model(nnx.TaskSpec.regression(), nnx.NNModelParams().loss, 1)
    initial = copy.deepcopy(model.net)
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    run = model.train(nnx.NNTrainParams(n_epochs=1, train_loader=[(x, y)], progress=False), root=tmp_path)
    with torch.no_grad():
        assert run.idps[0].train_edp.loss == pytest.approx(float(torch.nn.functional.mse_loss(initial(x), y)), rel=1e-5)
    assert run.idps[0].train_edp.kind == "regression"


def test_a_declared_width_other_than_the_nets_is_refused_when_the_model_is_built():
    with pytest.raises(nnx.TaskValidationError, match=r"declares 2 output\(s\).*output_dim is 3"):
        _model(nnx.TaskSpec.regression(2), nnx.Losses.MEAN_SQUARED_ERROR, 3)


def test_task_adapter_check_model_refuses_what_nnx_refuses():
    adapter = nnx.task_adapter(nnx.TaskSpec.categorical(3))
    adapter.check_model(loss=nnx.Losses.NEGATIVE_LOG_LIKELIHOOD, output_dim=3)  # fits
    adapter.check_model(loss=nnx.Losses.CROSS_ENTROPY, output_dim=None)  # the width is not known yet
    with pytest.raises(nnx.TaskValidationError, match="declares 3"):
        adapter.check_model(loss=nnx.Losses.CROSS_ENTROPY, output_dim=4)


@pytest.mark.parametrize("where", ["first batch", "later batch"])
def test_multilabel_labels_other_than_0_and_1_are_refused_before_any_update(tmp_path, where):
    torch.manual_seed(0)
    model = _model(nnx.TaskSpec.multilabel(2), nnx.Losses.BINARY_CROSS_ENTROPY, 2)
    before = [p.detach().clone() for p in model.net.parameters()]
    good, soft = (torch.randn(4, 3), torch.ones(4, 2)), (torch.randn(4, 3), torch.full((4, 2), 0.5))
    batches = [soft, good] if where == "first batch" else [good, soft]
    params = nnx.NNTrainParams(n_epochs=1, train_loader=batches, progress=False,
                               optim=nnx.NNOptimParams(accumulate_grad_batches=2))
    with pytest.raises(nnx.TaskValidationError, match="must be 0 or 1.*got 0.5"):
        model.train(params, root=tmp_path / "runs")
    assert all(torch.equal(p.detach(), b) for p, b in zip(model.net.parameters(), before, strict=True))
    if where == "first batch":
        assert not (tmp_path / "runs").exists()  # refused before anything is written


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_integer_and_bool_multilabel_targets_train_as_their_float_values(tmp_path, dtype):
    """0/1 labels held as integers or bools (a multi-hot tensor) train as NNx 0.4.1 trains them; the
    oracle: torch's mean BCE with logits on the same labels as floats, at the weights before the update;
    a 2 among integer labels is still refused."""
    torch.manual_seed(0)
    model = _model(nnx.TaskSpec.multilabel(2), nnx.Losses.BINARY_CROSS_ENTROPY, 2)
    initial = copy.deepcopy(model.net)
    x, y = torch.randn(6, 3), torch.tensor([[0, 1], [1, 1], [0, 0], [1, 0], [1, 1], [0, 1]])
    run = model.train(nnx.NNTrainParams(n_epochs=1, train_loader=[(x, y.to(dtype))], progress=False), root=tmp_path)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(initial(x), y.float())
    assert run.idps[0].train_edp.loss == pytest.approx(float(expected), rel=1e-5)
    with pytest.raises(nnx.TaskValidationError, match="must be 0 or 1.*got 2"):
        _model(nnx.TaskSpec.multilabel(2), nnx.Losses.BINARY_CROSS_ENTROPY, 2).train(
            nnx.NNTrainParams(n_epochs=1, train_loader=[(x, y * 2)], progress=False), root=tmp_path / "other")


def test_soft_targets_train_without_a_declared_task(tmp_path):
    """BCE on soft targets stays available: the task the loss implies does not restrict the values."""
    model = nnx.NNModel(nnx.NNParams(input_dim=3, output_dim=2, hidden_dims=(4,)),
                        nnx.NNModelParams(loss=nnx.Losses.BINARY_CROSS_ENTROPY))
    params = nnx.NNTrainParams(n_epochs=1, train_loader=[(torch.randn(4, 3), torch.full((4, 2), 0.3))], progress=False)
    assert model.train(params, root=tmp_path).idps[0].train_edp.loss is not None


def test_decode_array_is_decode_on_numpy_and_never_overflows():
    """NNx's rule: argmax classes; a label is on when its logit reaches log(t / (1 - t)), which is
    p >= t without computing exp (so ±1000 decode without a floating-point overflow)."""
    logits = np.array([[-1000.0, 1000.0, 0.0], [2.0, -0.5, -0.9]])
    multilabel = nnx.task_adapter(nnx.TaskSpec.multilabel(3, threshold=0.3))
    with np.errstate(over="raise"):
        got = multilabel.decode_array(logits)
    probabilities = 1.0 / (1.0 + np.exp(-np.clip(logits, -50, 50)))
    np.testing.assert_array_equal(got, (probabilities >= 0.3).astype(np.int64))
    np.testing.assert_array_equal(got, multilabel.decode(torch.from_numpy(logits)).numpy())
    np.testing.assert_array_equal(nnx.task_adapter(nnx.TaskSpec.categorical(3)).decode_array(logits), [1, 0])
    np.testing.assert_array_equal(nnx.task_adapter(nnx.TaskSpec.regression(3)).decode_array(logits), logits)


def test_the_adapter_carries_the_declared_spec_and_a_checkpoint_keeps_it(tmp_path):
    spec = nnx.TaskSpec.regression(2)
    model = _model(spec, nnx.Losses.MEAN_SQUARED_ERROR, 2)
    assert model.task_adapter.spec == spec and nnx.task_adapter(spec).spec == spec
    assert nnx.NNModel(nnx.NNParams(input_dim=3, output_dim=2)).task_adapter.spec is None  # implied by the loss
    run = model.train(nnx.NNTrainParams(n_epochs=1, train_loader=[(torch.randn(4, 3), torch.randn(4, 2))],
                                        progress=False), root=tmp_path)
    assert nnx.NNModel.from_checkpoint(run.id, "last", root=tmp_path).task_adapter.spec == spec


@pytest.mark.parametrize("net", [nnx.Nets.TRANSFORMER, nnx.Nets.VIT])
def test_check_model_refuses_nets_whose_output_is_no_score_vector(net):
    """As NNx's adapter does; an NNModel naming them is refused by the net's own out-of-scope error."""
    with pytest.raises(nnx.TaskValidationError, match=f"Nets.{net.name}"):
        nnx.task_adapter(nnx.TaskSpec.categorical()).check_model(net=net, loss=nnx.Losses.CROSS_ENTROPY)
    nnx.task_adapter(nnx.TaskSpec.categorical()).check_model(net=nnx.Nets.FEED_FWD, loss=nnx.Losses.CROSS_ENTROPY)


@pytest.mark.parametrize(("nnx_state", "spec"), [  # the states NNx 0.4.1's TaskSpec.state() writes
    ({"version": 1, "kind": "categorical", "num_outputs": 3, "ignore_index": -100, "labels": ["a", "b", "c"]},
     nnx.TaskSpec.categorical(3, ignore_index=-100, labels=["a", "b", "c"])),
    ({"version": 1, "kind": "multilabel", "num_outputs": 2, "threshold": 0.3}, nnx.TaskSpec.multilabel(2, threshold=0.3)),
    ({"version": 1, "kind": "regression"}, nnx.TaskSpec.regression()),
])
def test_nnx_task_states_are_read_and_ours_are_written_unchanged(nnx_state, spec):
    assert nnx.TaskSpec.from_state(nnx_state) == spec
    assert nnx.NNModelParams.from_state({"loss": "cross_entropy", "task": nnx_state}).task == spec
    assert "version" not in spec.state() and "num_outputs" not in spec.state()  # part of existing run ids
    with pytest.raises(nnx.TaskValidationError, match="version 2"):
        nnx.TaskSpec.from_state({**nnx_state, "version": 2})
