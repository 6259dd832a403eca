"""NNRun.load, NNRun.all, .history (with and without a HistoryJournal), iter_history, export_history_csv."""
import os

from _observe import attr, describe, idp_rows, nnx, sub, toy_data, toy_model


def observe(o):
    history = sub("history")
    model = toy_model()
    _, _, loader = toy_data()
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0, weight_decay=0.0)
    plain = model.train(nnx.NNTrainParams(n_epochs=2, optim=optim, train_loader=loader, val_loader=loader))
    loaded = nnx.NNRun.load(plain.id)
    o["plain.load.type"] = type(loaded).__name__
    o["plain.load.equal_id"] = loaded.id == plain.id
    o["plain.load.idps"] = idp_rows(loaded.idps)
    o["plain.load.val_edp_last_loss"] = float(loaded.idps[-1].val_edp.loss)
    o["plain.history"] = attr(plain, "history")
    o["plain.load.history"] = attr(loaded, "history")
    o["plain.load.train.n_epochs"] = loaded.train.n_epochs
    o["plain.load.train_loader"] = describe(loaded.train.train_loader)
    o.call("plain.checkpoints", lambda: [None if c is None else c.idp.epoch_idx for c in loaded.checkpoints()])
    o.call("all.count", lambda: len(nnx.NNRun.all()))
    o.call("load_missing", lambda: nnx.NNRun.load("0" * 32), describe)
    o.call("load_bad_id", lambda: nnx.NNRun.load("../x"), describe)
    journal = model.train(nnx.NNTrainParams(n_epochs=3, optim=optim, train_loader=loader, data_id="j"),
                          history=history.HistoryJournal(retention=4))
    o["journal.history"] = attr(journal, "history")
    o["journal.n_idps"] = len(journal.idps)
    o["journal.idps_csv_exists"] = os.path.exists(os.path.join("runs", journal.id, "idps.csv"))
    o["journal.history_dir_exists"] = os.path.isdir(os.path.join("runs", journal.id, "history"))
    reloaded = nnx.NNRun.load(journal.id)
    o["journal.load.n_idps"] = len(reloaded.idps)
    o["journal.load.history"] = attr(reloaded, "history")
    o.call("iter_history.count", lambda: sum(1 for _ in history.iter_history(journal.id)))
    o.call("iter_history.item_type", lambda: type(next(iter(history.iter_history(journal.id)))).__name__)
    o.call("export_history_csv", lambda: history.export_history_csv(journal.id, "h.csv"))
    o.call("journal.bad_retention", lambda: history.HistoryJournal(retention=0), describe)
    o.call("journal.chunk_over_retention", lambda: history.HistoryJournal(retention=2, chunk_size=3), describe)
