"""The rules over what user code gives NNx and reads from it: contexts, callbacks, step functions,
objectives. Each rule covers a class of mistakes, checked before anything is written (the
refusals leave no run folder) or at no cost on the default path; each says what went wrong and
the fix. Oracle: the mistake made by hand, as a user makes it."""

from __future__ import annotations

import pickle
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nnx_core.lifecycle import ReturnChecked, dispatch_table
import nnx_api as nnx

from tests.api.tiny import batches, tiny_data


def model_for():
    torch.manual_seed(0)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())


def params(n_epochs=1, **kw):
    x, y = tiny_data(n=32)
    return nnx.NNTrainParams(n_epochs=n_epochs, seed=0, progress=False, train_loader=batches(x, y, 8), **kw)


def step(ctx):
    xb, yb = ctx.batch
    ctx.optimizer.zero_grad()
    loss = F.cross_entropy(ctx.model.net(xb), yb)
    loss.backward()
    ctx.optimizer.step()
    ctx.report_update()
    return nnx.EvaluationDataPoint(loss=float(loss.detach()))


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.disc = nn.Linear(4, 1)
        self.gen = nn.Linear(2, 4)

    def forward(self, x):
        return self.disc(x)


def trainer_params(**kw):
    def group(pattern):
        return nnx.NNOptimParams(max_lr=1e-3, param_groups=[nnx.NNParamGroupSpec(name_pattern=pattern)])
    x, _ = tiny_data(n=32)
    return nnx.NNTrainerParams(n_epochs=1, seed=0, progress=False, train_loader=batches(x, torch.zeros(32), 8),
                               optims={"disc": group("disc.*"), "gen": group("gen.*")}, **kw)


def pair_trainer():
    torch.manual_seed(0)
    return nnx.Trainer(nnx.NNModel(module=Pair(), params=nnx.NNModelParams(loss="mean_squared_error")))


# -- every context answers an unknown attribute with ContextAttributeError ------------------------------
def test_an_unknown_attribute_of_any_context_names_the_nearest_and_is_still_an_attribute_error(runs):
    seen = {}

    class Probe(nnx.Callback):
        def on_epoch_end(self, ctx):
            with pytest.raises(nnx.ContextAttributeError, match=r"stop_training.*should_stop = True"):
                ctx.stop_training = True  # Keras's flag
            with pytest.raises(nnx.ContextAttributeError, match=r"did you mean ctx\.update_count\?"):
                ctx.update_cont  # noqa: B018 - a typo
            seen["hasattr"] = hasattr(ctx, "stop_training")
            seen["default"] = getattr(ctx, "trainer_state", "absent")
            ctx.should_stop = True  # a field is still set

    run = model_for().train(params(n_epochs=3), callbacks=[Probe()], root=runs)
    assert seen == {"hasattr": False, "default": "absent"} and len(run.epochs) == 1

    def trainer_step(ctx):
        ctx.optimizer  # noqa: B018 - NNModel's step context's name
    with pytest.raises(nnx.ContextAttributeError, match=r"TrainerStepContext has no attribute 'optimizer': use ctx\.optimizers\[name\]"):
        pair_trainer().train(trainer_params(), trainer_step_fn=trainer_step, root=runs / "trainer")
    x, y = tiny_data(n=4)
    opt = torch.optim.SGD(model_for().net.parameters(), lr=0.1)
    contexts = [
        nnx.TrainStepContext(model_for(), (x, y), opt, None, None, None, 1, 0, 0),
        nnx.TrainerStepContext(model_for(), (x, y), {"a": opt}, {"a": None}, None, 0, 0),
        nnx.EvalStepContext(model_for(), [(x, y)], None, 0),
        nnx.ObjectiveContext(model_for(), (x, y), 0, 0),
    ]
    for ctx in contexts:
        with pytest.raises(nnx.ContextAttributeError, match=r"has no attribute 'epoch_ix': did you mean ctx\.epoch_idx\?"):
            ctx.epoch_ix  # noqa: B018
        with pytest.raises(nnx.ContextAttributeError, match="cannot set 'loss'"):
            ctx.loss = 1.0
        assert not hasattr(ctx, "loss") and getattr(ctx, "loss", None) is None
        with pytest.raises(AttributeError):  # a field stays frozen
            ctx.epoch_idx = 3
    with pytest.raises(nnx.ContextAttributeError, match=r"ctx\.optimizer \(an NNModel step has one optimizer"):
        contexts[0].optimizers  # noqa: B018
    error = nnx.ContextAttributeError("CallbackContext has no attribute 'x'")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is nnx.ContextAttributeError and str(again) == str(error)
    assert isinstance(again, AttributeError) and isinstance(again, nnx.NNxError)


# -- callbacks -----------------------------------------------------------------------------------------------
def test_a_hook_that_returns_a_value_is_warned_once_naming_should_stop(runs):
    class Stop(nnx.Callback):
        def on_epoch_end(self, ctx):
            return True

    with pytest.warns(UserWarning, match=r"Stop\.on_epoch_end returned True.*ctx\.should_stop = True") as caught:
        model_for().train(params(n_epochs=3), callbacks=[Stop()], root=runs)
    assert len([w for w in caught if "returned True" in str(w.message)]) == 1
    table = dispatch_table([Stop(), nnx.EarlyStopping(patience=1)], nnx.Callback)
    assert isinstance(table["on_epoch_end"][0], ReturnChecked)
    assert not isinstance(table["on_epoch_end"][1], ReturnChecked)  # the library's own hooks: dispatched bare


def test_the_same_callback_or_component_twice_is_refused_before_anything_is_written(runs):
    class Count(nnx.Callback):
        def on_epoch_end(self, ctx):
            pass
    count = Count()
    with pytest.raises(nnx.ParamsError, match=r"callbacks\[1\]: is the same object as callbacks\[0\] \(Count\), given more than once"):
        model_for().train(params(), callbacks=[count, count], root=runs)
    es = nnx.EarlyStopping(patience=2)
    with pytest.raises(nnx.ParamsError, match=r"components\[1\]: is the same object as components\[0\]"):
        model_for().train(params(), components=[es, es], root=runs)
    assert not runs.exists()


def test_a_hook_assigned_on_an_instance_is_refused_naming_a_subclass(runs):
    cb = nnx.Callback()
    cb.on_epoch_end = lambda ctx: None
    with pytest.raises(nnx.ParamsError, match=r"callbacks\[0\]\.on_epoch_end: is set on the instance.*define it on a subclass"):
        model_for().train(params(), callbacks=[cb], root=runs)
    assert not runs.exists()


# -- every function NNx calls: its signature, its slot -------------------------------------------------------
def test_every_user_function_is_checked_against_the_call_nnx_makes_before_anything_is_written(runs):
    def two(model, batch):
        return nnx.EvaluationDataPoint(loss=0.0)

    with pytest.raises(nnx.ParamsError, match=r"train_step_fn: two\(model, batch\) cannot be called .* two\(ctx\).*ctx\.model, ctx\.batch"):
        model_for().train(params(), train_step_fn=two, root=runs)
    with pytest.raises(nnx.ParamsError, match=r"objective: two\(model, batch\).*write def two\(ctx\)"):
        model_for().train(params(), objective=two, root=runs)
    with pytest.raises(nnx.ParamsError, match=r"eval_step_fn: two\(model, batch\)"):
        model_for().train(params(val_loader=batches(*tiny_data(n=8), 8)), eval_step_fn=two, root=runs)
    with pytest.raises(nnx.ParamsError, match=r"trainer_step_fn: two\(model, batch\)"):
        pair_trainer().train(trainer_params(), trainer_step_fn=two, root=runs)
    with pytest.raises(nnx.ParamsError, match=r"call it: objective=supervised_objective\(\)"):
        model_for().train(params(), objective=nnx.supervised_objective, root=runs)

    def factory():
        return step
    with pytest.raises(nnx.ParamsError, match=r"takes no positional argument.*call it: train_step_fn=factory\(\)"):
        model_for().train(params(), train_step_fn=factory, root=runs)
    assert not runs.exists()
    flexible = model_for().train(params(), train_step_fn=lambda ctx, *rest, scale=1: step(ctx), root=runs)
    assert len(flexible.epochs) == 1


def test_nnx_own_steps_are_refused_in_a_slot_not_theirs(runs):
    with pytest.raises(nnx.UpdateOwnerError, match=r"eval_step_fn=default_train_step: .* training step function; pass it as train_step_fn="):
        model_for().train(params(val_loader=batches(*tiny_data(n=8), 8)), eval_step_fn=nnx.default_train_step, root=runs)
    with pytest.raises(nnx.UpdateOwnerError, match=r"trainer_step_fn=default_train_step"):
        pair_trainer().train(trainer_params(), trainer_step_fn=nnx.default_train_step, root=runs)
    with pytest.raises(nnx.UpdateOwnerError, match=r"train_step_fn=streaming_eval_step.*pass it as eval_step_fn="):
        model_for().train(params(), train_step_fn=nnx.streaming_eval_step, root=runs)
    assert not runs.exists()


def test_an_eval_step_without_a_val_loader_is_refused(runs):
    with pytest.raises(nnx.ParamsError, match="eval_step_fn: is given but the run has no val_loader, so it would never be called"):
        model_for().train(params(), eval_step_fn=lambda ctx: nnx.EvaluationDataPoint(loss=1.0), root=runs)
    assert not runs.exists()


# -- the update a step reports ------------------------------------------------------------------------------
def test_a_step_that_steps_but_never_reports_is_warned_once(runs):
    def silent(ctx):
        xb, yb = ctx.batch
        ctx.optimizer.zero_grad()
        F.cross_entropy(ctx.model.net(xb), yb).backward()
        ctx.optimizer.step()
        return nnx.EvaluationDataPoint(loss=0.0)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model_for().train(params(n_epochs=2), train_step_fn=silent, root=runs)
    said = [str(w.message) for w in caught if "called ctx.report_update() 0 time(s)" in str(w.message)]
    assert len(said) == 1 and "stepped ctx.optimizer 1 time(s) in epoch 0 batch 0" in said[0]


def test_a_step_that_steps_its_own_optimizer_is_told_to_step_ctx_optimizer(runs):
    model = model_for()
    mine = torch.optim.SGD(model.net.parameters(), lr=0.1)

    def own(ctx):
        xb, yb = ctx.batch
        mine.zero_grad()
        F.cross_entropy(ctx.model.net(xb), yb).backward()
        mine.step()
        ctx.report_update()
        return nnx.EvaluationDataPoint(loss=0.0)

    with pytest.raises(nnx.UpdateOwnerError, match=r"ctx\.optimizer never stepped .* step ctx\.optimizer instead"):
        model.train(params(), train_step_fn=own, root=runs)


def test_a_trainer_step_must_name_the_optimizer_it_reports(runs):
    def unnamed(ctx):
        ctx.report_update()
        return nnx.EvaluationDataPoint(loss=0.0)

    with pytest.raises(nnx.UpdateOwnerError, match=r"optimizers \['disc', 'gen'\]: call ctx\.report_update\('disc'\) or"):
        pair_trainer().train(trainer_params(), trainer_step_fn=unnamed, root=runs)


def test_a_step_that_steps_the_plateau_schedule_is_refused(runs):
    seen = []

    def stepping(ctx):
        out = step(ctx)
        seen.append(ctx.scheduler.patience)  # the rule's settings still read
        ctx.scheduler.step()
        return out

    with pytest.raises(nnx.UpdateOwnerError, match=r"ctx\.scheduler\.step\(\) was called on the reduce_lr_on_plateau schedule, which NNx steps"):
        model_for().train(params(), train_step_fn=stepping, root=runs)
    assert seen == [nnx.NNSchedulerParams().patience]


def test_an_objective_that_runs_backward_itself_is_told_nnx_does(runs):
    def objective(ctx):
        xb, yb = ctx.batch
        total = F.cross_entropy(ctx.forward(xb), yb, reduction="sum")
        total.backward()
        return nnx.ObjectiveResult([nnx.LossTerm("ce", total, len(yb))])

    with pytest.raises(nnx.UpdateOwnerError, match=r"an objective returns its loss terms and never calls backward \(NNx does"):
        model_for().train(params(), objective=objective, root=runs)


def test_lightnings_trainer_should_stop_is_refused_naming_ctx_should_stop(runs):
    class Stop(nnx.Callback):
        def on_epoch_end(self, ctx):
            ctx.trainer.should_stop = True  # Lightning's flag, on NNx's Trainer

    with pytest.raises(nnx.ContextAttributeError, match=r"Trainer\.should_stop is Lightning's name.*ctx\.should_stop = True"):
        pair_trainer().train(trainer_params(), trainer_step_fn=lambda ctx: nnx.EvaluationDataPoint(loss=0.0),
                             callbacks=[Stop()], root=runs)
    assert not hasattr(pair_trainer(), "should_stop")
