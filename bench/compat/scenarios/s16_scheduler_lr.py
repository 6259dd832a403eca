"""Schedulers: STEP on the epoch clock, warm-up/decay on the update clock, and LRMonitor."""
from _observe import nnx, toy_data, toy_model


def sched(**kw):
    base = dict(min_lr=0.0, factor=0.5, patience=1, cooldown=0, threshold=0.0)
    base.update(kw)
    return nnx.NNSchedulerParams(**base)


def observe(o):
    _, _, loader = toy_data(n=16)
    model = toy_model()
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0, weight_decay=0.0)
    mon = nnx.LRMonitor()
    run = model.train(nnx.NNTrainParams(n_epochs=3, optim=optim, train_loader=loader,
                                        scheduler=sched(kind=nnx.Schedulers.STEP, step_size=1)), callbacks=[mon])
    o["step.idp_lrs"] = [float(i.lr) for i in run.idps]
    o["step.monitor_history"] = [float(v) for v in mon.history]
    o["step.state_keys"] = list(sched(kind=nnx.Schedulers.STEP, step_size=1).state())
    opt2 = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.12, momentum=0.0, weight_decay=0.0)
    mon2 = nnx.LRMonitor()
    sp = o.call("warmup.params", lambda: sched(kind=nnx.Schedulers.LINEAR_WARMUP_DECAY, warmup_steps=3,
                                               total_steps=8, clock="optimizer_update"), lambda v: v.state())
    if sp is not None:
        run2 = o.call("warmup.train", lambda: model.train(nnx.NNTrainParams(
            n_epochs=2, optim=opt2, train_loader=loader, scheduler=sp, data_id="w"), callbacks=[mon2]),
            lambda v: type(v).__name__)
        if run2 is not None:
            o["warmup.idp_lrs"] = [float(i.lr) for i in run2.idps]
            o["warmup.update_history"] = [[int(a), float(b)] for a, b in mon2.update_history]
    o.call("plateau_on_update_clock", lambda: model.train(nnx.NNTrainParams(
        n_epochs=1, optim=opt2, train_loader=loader, scheduler=sched(clock="optimizer_update"), data_id="p")),
        lambda v: "ok")
    o.call("one_cycle_total_too_small", lambda: model.train(nnx.NNTrainParams(
        n_epochs=3, optim=opt2, train_loader=loader, data_id="oc",
        scheduler=sched(kind=nnx.Schedulers.ONE_CYCLE, total_steps=2))), lambda v: "ok")
