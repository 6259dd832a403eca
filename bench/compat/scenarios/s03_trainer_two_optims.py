"""A Trainer with two named optimizers over disjoint parameter groups and its own step function."""
from _observe import describe, field_names, idp_rows, nnx, toy_data, toy_model, weights


def observe(o):
    model = toy_model()
    names = [n for n, _ in model.net.named_parameters()]
    first, rest = names[:2], names[2:]
    _, _, loader = toy_data()

    def optim(lr, pats):
        return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=lr, momentum=0.0, weight_decay=0.0,
                                 param_groups=[nnx.NNParamGroupSpec(name_pattern=p) for p in pats])

    seen = {}

    def step(ctx):
        seen.setdefault("ctx_fields", field_names(ctx))
        seen.setdefault("optimizer_keys", sorted(ctx.optimizers))
        x, y = ctx.batch
        for opt in ctx.optimizers.values():
            opt.zero_grad()
        out = ctx.model.net(x)
        loss = ctx.model.loss_fn(out, y)
        loss.backward()
        for name, opt in ctx.optimizers.items():
            opt.step()
            if hasattr(ctx, "report_update"):
                ctx.report_update(name)
        return nnx.NNEvaluationDataPoint.of(y.tolist(), out.argmax(-1).tolist()).with_loss(float(loss))

    params = nnx.NNTrainerParams(n_epochs=2, optims={"body": optim(0.1, first), "head": optim(0.05, rest)},
                                 train_loader=loader)
    run = o.call("train", lambda: nnx.Trainer(model).train(params, trainer_step_fn=step), describe)
    o["ctx_fields"] = seen.get("ctx_fields")
    o["optimizer_keys"] = seen.get("optimizer_keys")
    if run is not None:
        o["n_idps"] = len(run.idps)
        o["idps"] = idp_rows(run.idps)
        o["run.trainer"] = describe(run.trainer)
        o["run.train.optim.max_lr"] = run.train.optim.max_lr
    o["weights"] = weights(model.net)
    single = nnx.NNTrainerParams(n_epochs=1, optims={"a": nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1,
                                 momentum=0.0, weight_decay=0.0), "b": nnx.NNOptimParams(name=nnx.Optims.SGD,
                                 max_lr=0.1, momentum=0.0, weight_decay=0.0)}, train_loader=loader)
    o.call("two_optims_without_groups", lambda: nnx.Trainer(model).train(single, trainer_step_fn=step), describe)
