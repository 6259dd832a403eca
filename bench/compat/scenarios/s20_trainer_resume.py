"""A two-optimizer Trainer run continued from its LAST checkpoint: the training state's keys and
the continued run's records and weights against one uninterrupted run."""
from _observe import describe, idp_rows, nnx, sub, toy_data, toy_model, weights


def observe(o):
    _, _, loader = toy_data()

    def params(n_epochs, model, **kw):
        names = [n for n, _ in model.net.named_parameters()]

        def optim(lr, pats):
            return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=lr, momentum=0.9, weight_decay=0.0,
                                     param_groups=[nnx.NNParamGroupSpec(name_pattern=p) for p in pats])

        return nnx.NNTrainerParams(n_epochs=n_epochs, train_loader=loader,
                                   optims={"body": optim(0.1, names[:2]), "head": optim(0.05, names[2:])}, **kw)

    def step(ctx):
        x, y = ctx.batch
        for opt in ctx.optimizers.values():
            opt.zero_grad()
        out = ctx.model.net(x)
        loss = ctx.model.loss_fn(out, y)
        loss.backward()
        for name, opt in ctx.optimizers.items():
            opt.step()
            ctx.report_update(name)
        return nnx.NNEvaluationDataPoint.of(y.tolist(), out.argmax(-1).tolist()).with_loss(float(loss))

    first = toy_model()
    run = o.call("train", lambda: nnx.Trainer(first).train(params(2, first), trainer_step_fn=step), describe)
    if run is None:
        return
    checkpoint = sub("nn.params.nn_checkpoint").NNCheckpoint
    state = o.call("training_state", lambda: checkpoint.load_training_state(run=run.id, type=nnx.Checkpoints.LAST),
                   lambda s: sorted(s) if isinstance(s, dict) else describe(s))
    if isinstance(state, dict):
        for key in ("schedulers", "optimizers", "scheduler", "optimizer"):
            value = state.get(key, "<absent>")
            o[f"training_state.{key}"] = sorted(value) if isinstance(value, dict) else describe(type(value).__name__)
    second = toy_model()
    resumed = o.call("resume", lambda: nnx.Trainer(second).train(
        params(3, second, resume_from_run_id=run.id), trainer_step_fn=step), describe)
    if resumed is not None:
        o["resumed.idps"] = idp_rows(resumed.idps)
        o["resumed.weights"] = weights(second.net)
    straight = toy_model()
    whole = o.call("straight", lambda: nnx.Trainer(straight).train(params(3, straight, data_id="straight"),
                                                                   trainer_step_fn=step), describe)
    if whole is not None:
        o["straight.weights"] = weights(straight.net)
