"""A Callback's hooks, context fields and optimizer-update events under an objective with accumulation."""
from _observe import nnx, toy_data, toy_model, weights


def observe(o):
    model = toy_model()
    _, _, loader = toy_data(n=20)  # 5 batches: windows of 2, 2 and a trailing 1
    log = []

    class Spy(nnx.Callback):
        def on_train_begin(self, ctx):
            log.append(["train_begin", ctx.epoch if hasattr(ctx, "epoch") else None])

        def on_epoch_begin(self, ctx):
            log.append(["epoch_begin", ctx.epoch])

        def on_optimizer_update(self, ctx, event):
            log.append(["update", event.optimizer, event.update_idx, event.epoch_idx, event.batch_idx,
                        event.microbatches, sorted(event.losses), round(float(event.loss), 5)])

        def on_epoch_end(self, ctx):
            log.append(["epoch_end", ctx.epoch, getattr(ctx, "update_count", None), len(ctx.idps),
                        ctx.idp.batch_idx, ctx.should_stop])

        def on_train_end(self, ctx):
            log.append(["train_end", len(ctx.idps)])

    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0, weight_decay=0.0,
                              accumulate_grad_batches=2)
    run = model.train(nnx.NNTrainParams(n_epochs=2, optim=optim, train_loader=loader),
                      callbacks=[Spy()], objective=nnx.supervised_objective())
    o["log"] = log
    o["idp.update_count"] = [getattr(i, "update_count", None) for i in run.idps]
    o["weights"] = weights(model.net)
    legacy = []
    model.train(nnx.NNTrainParams(n_epochs=2, optim=optim, train_loader=loader, data_id="legacy"),
                callbacks=[lambda idps: legacy.append(len(idps))])
    o["legacy_callable_calls"] = legacy
