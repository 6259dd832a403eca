"""Params classes as dataclasses: fields, replace, asdict, frozen, state() round trip."""
import dataclasses

from _observe import describe, field_names, nnx


def observe(o):
    net = nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=[8, 4], dropout_prob=0.1)
    optim = nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=0.01, momentum=(0.9, 0.999), weight_decay=0.0)
    sched = nnx.NNSchedulerParams(min_lr=1e-7, factor=0.5, patience=3, cooldown=1, threshold=1e-3)
    train = nnx.NNTrainParams(n_epochs=2, optim=optim, scheduler=sched, train_loader=[(1, 2)])
    model = nnx.NNModelParams(net=nnx.Nets.FEED_FWD)
    trainer = nnx.NNTrainerParams(n_epochs=1, optims={"a": optim})
    for label, obj in (("NNParams", net), ("NNOptimParams", optim), ("NNSchedulerParams", sched),
                       ("NNTrainParams", train), ("NNModelParams", model), ("NNTrainerParams", trainer)):
        o[f"{label}.fields"] = field_names(obj)
        o[f"{label}.is_dataclass"] = dataclasses.is_dataclass(obj)
        o[f"{label}.slots"] = hasattr(type(obj), "__slots__")
        o.call(f"{label}.asdict_keys", lambda obj=obj: sorted(dataclasses.asdict(obj)))
        o.call(f"{label}.state_keys", lambda obj=obj: list(obj.state()))
        o.call(f"{label}.roundtrip", lambda obj=obj: type(obj).from_state(obj.state()) == obj)
    o["NNParams.state"] = net.state()
    o["NNOptimParams.state"] = optim.state()
    o["NNSchedulerParams.state"] = sched.state()
    o["NNModelParams.state"] = model.state()
    o["NNTrainerParams.state"] = describe(trainer.state())
    o.call("replace.max_lr", lambda: dataclasses.replace(optim, max_lr=0.5).max_lr)
    o.call("replace.accumulate", lambda: dataclasses.replace(optim, accumulate_grad_batches=4).state())
    o.call("replace.bad_value", lambda: dataclasses.replace(optim, max_lr=-1.0), describe)
    o.call("replace.n_epochs", lambda: dataclasses.replace(train, n_epochs=5).n_epochs)
    o.call("replace.keeps_loader", lambda: dataclasses.replace(train, n_epochs=5).train_loader == [(1, 2)])
    o.call("setattr_frozen", lambda: setattr(optim, "max_lr", 1.0), describe)
    o.call("positional", lambda: nnx.NNOptimParams(nnx.Optims.ADAM, 0.01, 0.0, (0.9, 0.999)), describe)
    o.call("hidden_dims_type", lambda: type(net.hidden_dims).__name__)
    o.call("hidden_dims_append", lambda: net.hidden_dims.append(3), describe)
    o.call("dims", lambda: list(net.dims))
    o.call("with_train_loader", lambda: train.with_train_loader([(3, 4)]).train_loader == [(3, 4)])
    o.call("default_train_optim", lambda: nnx.NNTrainParams(n_epochs=1).optim.state())
    o.call("default_train_scheduler", lambda: nnx.NNTrainParams(n_epochs=1).scheduler.state())
