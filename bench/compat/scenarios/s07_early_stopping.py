"""EarlyStopping on a run that cannot improve (lr 1e-12, min_delta 1e-3): when it stops, what it reports."""
from _observe import describe, nnx, toy_data, toy_model


def observe(o):
    model = toy_model()
    _, _, loader = toy_data()
    o.call("max_lr_zero", lambda: nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.0, momentum=0.0,
                                                    weight_decay=0.0), lambda v: v.max_lr)
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=1e-12, momentum=0.0, weight_decay=0.0)
    es = nnx.EarlyStopping(monitor="val_edp.loss", patience=1, min_delta=1e-3)
    run = model.train(nnx.NNTrainParams(n_epochs=6, optim=optim, train_loader=loader, val_loader=loader),
                      callbacks=[es])
    o["explicit.epochs_run"] = sorted({i.epoch_idx for i in run.idps})
    auto = nnx.EarlyStopping(patience=2, min_delta=1e-3)
    o.call("auto.selected_monitor_before", lambda: auto.selected_monitor)
    run2 = model.train(nnx.NNTrainParams(n_epochs=6, optim=optim, train_loader=loader, val_loader=loader,
                                         data_id="auto"), callbacks=[auto])
    o["auto.epochs_run"] = sorted({i.epoch_idx for i in run2.idps})
    o.call("auto.selected_monitor", lambda: auto.selected_monitor)
    noval = nnx.EarlyStopping(patience=1, min_delta=1e-3)
    run3 = model.train(nnx.NNTrainParams(n_epochs=3, optim=optim, train_loader=loader, data_id="noval"),
                       callbacks=[noval])
    o["no_val.epochs_run"] = sorted({i.epoch_idx for i in run3.idps})
    o.call("bad_monitor", lambda: nnx.EarlyStopping(monitor="val_edp.bogus"), describe)
    o.call("negative_patience", lambda: nnx.EarlyStopping(patience=-1), describe)
    o.call("max_without_monitor", lambda: nnx.EarlyStopping(mode="max"), describe)
