"""A custom train_step_fn that inspects its TrainStepContext and wraps default_train_step."""
from _observe import describe, field_names, idp_rows, nnx, toy_data, toy_model, weights


def observe(o):
    model = toy_model()
    _, _, loader = toy_data()
    calls = []

    def step(ctx):
        calls.append({
            "batch_idx": ctx.batch_idx, "epoch_idx": ctx.epoch_idx, "is_last_batch": ctx.is_last_batch,
            "accumulate_grad_batches": ctx.accumulate_grad_batches, "grad_clip_norm": ctx.grad_clip_norm,
            "optimizer": type(ctx.optimizer).__name__, "scaler": describe(ctx.scaler),
            "accumulation_state": type(ctx.accumulation_state).__name__,
            "model_is_trained_model": ctx.model is model,
        })
        edp = nnx.default_train_step(ctx)
        calls[-1]["returned"] = type(edp).__name__
        return edp

    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0, weight_decay=0.0,
                              accumulate_grad_batches=2, grad_clip_norm=1.0)
    run = model.train(nnx.NNTrainParams(n_epochs=1, optim=optim, train_loader=loader), train_step_fn=step)
    o["calls"] = calls
    o["ctx_fields"] = field_names(nnx.TrainStepContext)
    o["idps"] = idp_rows(run.idps)
    o["weights"] = weights(model.net)
    # an objective and a step function together: exactly one update owner per run
    both = nnx.NNTrainParams(n_epochs=1, optim=optim, train_loader=loader, data_id="both")
    o.call("step_and_objective", lambda: model.train(both, train_step_fn=step,
                                                     objective=nnx.supervised_objective()), describe)
