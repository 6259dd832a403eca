"""ModelCheckpoint and the checkpoint files a user is told about (relative to the run folder)."""
import os

from _observe import describe, nnx, toy_data, toy_model

DOCUMENTED = ["run.yaml", "metadata.yaml", "idps.csv"] + [
    f"checkpoints/{t}.pt" for t in ("first", "q1", "q2", "q3", "last", "best", "snap_e0", "snap_e1", "snap_e2")]


def observe(o):
    model = toy_model()
    _, _, loader = toy_data()
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0, weight_decay=0.0)
    run = model.train(nnx.NNTrainParams(n_epochs=3, optim=optim, train_loader=loader),
                      callbacks=[nnx.ModelCheckpoint(epochs=[0, 2], tag="snap")])
    folder = os.path.join("runs", run.id)
    o["files_present"] = {f: os.path.isfile(os.path.join(folder, f)) for f in DOCUMENTED}
    o["runs_best_exists"] = os.path.lexists(os.path.join("runs", "best"))
    snap = o.call("snap_e0.from_file", lambda: nnx.NNCheckpoint.from_file(
        os.path.join(folder, "checkpoints", "snap_e0.pt")), lambda v: type(v).__name__)
    if snap is not None:
        o["snap_e0.training_state_present"] = snap.training_state_present
        o["snap_e0.idp.epoch_idx"] = snap.idp.epoch_idx
    last = nnx.NNCheckpoint.load(run=run.id, type=nnx.Checkpoints.LAST)
    o["last.idp.epoch_idx"] = last.idp.epoch_idx
    o["last.training_state_present"] = last.training_state_present
    o["last.net_state"] = describe(last.net_state)
    o["load_missing_tag"] = describe(nnx.NNCheckpoint.load(run=run.id, type=nnx.Checkpoints.Q1))
    o.call("bad_tag", lambda: nnx.ModelCheckpoint(epochs=[0], tag="bad/tag"), describe)
    warm = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=[8], dropout_prob=0.0,
                                      activation=nnx.Activations.RELU),
                       nnx.NNModelParams(net=nnx.Nets.FEED_FWD))
    resumed = o.call("resume_from_snap", lambda: warm.train(nnx.NNTrainParams(
        n_epochs=1, optim=optim, train_loader=loader, resume_from_run_id=run.id,
        resume_from_checkpoint="snap_e0")), describe)
    if resumed is not None:
        o["resume_from_snap.epochs"] = [i.epoch_idx for i in resumed.idps]
        o["resume_from_snap.mode"] = resumed.resume_status.mode
    o.call("resume_from_snap_stateful", lambda: warm.train(nnx.NNTrainParams(
        n_epochs=1, optim=optim, train_loader=loader, resume_from_run_id=run.id,
        resume_from_checkpoint="snap_e0", resume_mode="stateful", data_id="s")), describe)
