"""Constructing the step-hook contexts and objective values by hand."""
import dataclasses

import torch

from _observe import describe, field_names, nnx, sub


def observe(o):
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=[8], dropout_prob=0.0,
                                      activation=nnx.Activations.RELU),
                        nnx.NNModelParams(net=nnx.Nets.FEED_FWD))
    opt = torch.optim.SGD(model.net.parameters(), lr=0.1)
    batch = (torch.zeros(2, 4), torch.tensor([0, 1]))
    o["TrainStepContext.fields"] = field_names(nnx.TrainStepContext)
    o["EvalStepContext.fields"] = field_names(nnx.EvalStepContext)
    o["TrainerStepContext.fields"] = field_names(nnx.TrainerStepContext)
    ctx = o.call("TrainStepContext.minimal", lambda: nnx.TrainStepContext(
        model=model, batch=batch, optimizer=opt, scaler=None, grad_clip_norm=None, extra_metrics=None,
        accumulate_grad_batches=1, batch_idx=0, epoch_idx=0), describe)
    if ctx is not None:
        o["ctx.is_last_batch"] = ctx.is_last_batch
        o["ctx.accumulation_state"] = describe(ctx.accumulation_state)
        o["ctx.precision"] = describe(getattr(ctx, "precision", "<no attribute>"))
        o.call("ctx.report_update()", lambda: ctx.report_update(), describe)
        o.call("ctx.frozen", lambda: setattr(ctx, "batch_idx", 3), describe)
        o.call("ctx.replace", lambda: dataclasses.replace(ctx, batch_idx=3).batch_idx)
        edp = o.call("default_train_step(ctx)", lambda: nnx.default_train_step(
            dataclasses.replace(ctx, is_last_batch=True)), lambda v: type(v).__name__)
        if edp is not None:
            o["default_train_step.loss"] = describe(edp.loss)
    o.call("TrainStepContext.positional", lambda: nnx.TrainStepContext(model, batch, opt, None, None, None, 1, 0, 0),
           describe)
    o.call("TrainStepContext.missing", lambda: nnx.TrainStepContext(model=model, batch=batch), describe)
    o.call("EvalStepContext.minimal", lambda: nnx.EvalStepContext(model=model, val_loader=[batch],
                                                                  extra_metrics=None, epoch_idx=0), describe)
    objectives = sub("objectives")
    o.call("LossTerm.mean.value", lambda: float(objectives.LossTerm("t", torch.tensor(8.0), 2.0).value))
    o.call("LossTerm.tensor_denominator", lambda: float(objectives.LossTerm("t", torch.tensor(8.0), torch.tensor(2.0)).value))
    o.call("LossTerm.masked.value", lambda: describe(objectives.LossTerm("t", torch.tensor(0.0), 0).value))
    o.call("LossTerm.sum_with_denominator", lambda: objectives.LossTerm(
        "t", torch.tensor(1.0), 2.0, reduction="sum"), describe)
    o.call("LossTerm.mean_without_denominator", lambda: objectives.LossTerm("t", torch.tensor(1.0)), describe)
    o.call("ObjectiveResult.loss", lambda: float(objectives.ObjectiveResult(terms=(
        objectives.LossTerm("a", torch.tensor(8.0), 2.0),
        objectives.LossTerm("b", torch.tensor(1.0), 1.0))).loss()))
    o.call("ObjectiveResult.empty", lambda: objectives.ObjectiveResult(terms=()), describe)
    o.call("ObjectiveContext.fields", lambda: field_names(nnx.ObjectiveContext))
