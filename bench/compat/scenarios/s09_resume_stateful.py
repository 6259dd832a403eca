"""Resume: 2 epochs, then resume_from_run_id (stateful) for 2 more vs one uninterrupted 4-epoch run."""
from _observe import describe, floats, nnx, toy_data, toy_model, weights


def make():
    model = toy_model()
    return model


def observe(o):
    _, _, loader = toy_data()
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.05, momentum=0.9, weight_decay=0.0)
    whole = make()
    whole.train(nnx.NNTrainParams(n_epochs=4, optim=optim, train_loader=loader, seed=1))
    first = make()
    src = first.train(nnx.NNTrainParams(n_epochs=2, optim=optim, train_loader=loader, seed=1))
    fresh = make()
    with_resume = nnx.NNTrainParams(n_epochs=2, optim=optim, train_loader=loader, seed=1,
                                    resume_from_run_id=src.id, resume_mode="stateful")
    o["state_has_lineage"] = sorted(k for k in with_resume.state() if "parent" in k)
    run = o.call("resume", lambda: fresh.train(with_resume), describe)
    if run is not None:
        o["new_run_id"] = run.id != src.id
        o["epochs"] = [i.epoch_idx for i in run.idps]
        o["iter_idx"] = [i.iter_idx for i in run.idps]
        o["update_count"] = [getattr(i, "update_count", None) for i in run.idps]
        o["resume_status.mode"] = run.resume_status.mode
        o["resume_status.source_epoch"] = run.resume_status.source_epoch
        o["weights"] = weights(fresh.net)
        w_whole, w_res = weights(whole.net), weights(fresh.net)
        o["max_abs_diff_vs_uninterrupted"] = max(
            max(abs(a - b) for a, b in zip(w_whole[k], w_res[k], strict=True)) for k in w_whole) < 1e-6
    o["source_weights_untouched"] = floats(nnx.NNCheckpoint.load(run=src.id, type=nnx.Checkpoints.LAST)
                                           .net_state[sorted(first.net.state_dict())[0]])[:4]
    o.call("resume_missing_run", lambda: make().train(nnx.NNTrainParams(
        n_epochs=1, optim=optim, train_loader=loader, resume_from_run_id="0" * 32)), describe)
    o.call("resume_and_parent", lambda: nnx.NNTrainParams(
        n_epochs=1, optim=optim, train_loader=loader, resume_from_run_id=src.id, parent_run_id=src.id), describe)
    o.call("resume_mode_bogus", lambda: nnx.NNTrainParams(
        n_epochs=1, optim=optim, train_loader=loader, resume_from_run_id=src.id, resume_mode="bogus"), describe)
