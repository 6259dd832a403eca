"""Built-in callbacks as NNx 0.4.1 users and NNx's own tests use them (oracle: the wheel's observed
behaviour and file layout): ``EarlyStopping._wait``, ``LRMonitor`` on a context that has no
update-clock trace, ``ModelCheckpoint``'s ``runs/<id>/checkpoints/<tag>_e<epoch>.pt`` files (an
export of the committed tag that resume and verification never read), and ``restored_components``
listing only what the run declared."""

from __future__ import annotations

import io
import os
from types import SimpleNamespace

import pytest
import torch

import nnx_api as nnx
from nnx_api.cli import main
from nnx_api.nn.callbacks import EarlyStopping, LRMonitor, ModelCheckpoint, NNCheckpoint

from tests.api.tiny import batches, tiny_data, two_part_model


def model_for(seed=0):
    torch.manual_seed(seed)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())


def sgd(lr=0.1):
    return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=lr, momentum=0.0)


def params(n_epochs, **kw):
    x, y = tiny_data(n=8)
    return nnx.NNTrainParams(n_epochs=n_epochs, optim=sgd(), train_loader=[(x, y)], val_loader=[(x, y)], **kw)


def namespace_ctx(epoch, lr, val_error=None):
    """The plain context NNx's callback tests build: no update-clock trace, no retention."""
    idp = SimpleNamespace(epoch_idx=epoch, val_edp=None if val_error is None else SimpleNamespace(error=val_error),
                          train_edp=SimpleNamespace(error=0.5), lr=lr)
    return SimpleNamespace(model=None, run=None, optimizer=SimpleNamespace(param_groups=[{"lr": lr}]), epoch=epoch,
                           idp=idp, idps=[idp], should_stop=False)


# ----------------------------------------------------------------------------- EarlyStopping / LRMonitor
def test_early_stopping_wait_is_also_named_as_nnx_names_it():
    es = EarlyStopping(monitor="val_edp.error", patience=3)
    assert es._wait == es.wait == 0
    for epoch in range(2):
        es.on_epoch_end(namespace_ctx(epoch, 1e-3, val_error=0.5))
    assert es._wait == es.wait == 1
    es._wait = 2  # one counter: setting either name sets both
    assert es.wait == 2
    es.on_epoch_end(namespace_ctx(2, 1e-3, val_error=0.5))
    assert es._wait == 3 and es.stopped_epoch == 2


def test_lr_monitor_records_a_context_without_an_update_trace(runs):
    mon = LRMonitor()
    for epoch, lr in [(0, 1e-3), (1, 5e-4), (2, 1e-4)]:
        mon.on_epoch_end(namespace_ctx(epoch, lr))
    assert mon.history == [1e-3, 5e-4, 1e-4] and mon.update_history == []
    x, y = tiny_data(n=16)  # and in a run, the update-clock trace is still read
    mon = LRMonitor()
    step = nnx.NNSchedulerParams(kind=nnx.Schedulers.STEP, step_size=1, factor=0.5, clock="optimizer_update")
    model_for().train(nnx.NNTrainParams(n_epochs=2, optim=sgd(), scheduler=step, train_loader=batches(x, y, 8)),
                      callbacks=[mon], root=runs)
    assert len(mon.history) == 2 and [i for i, _ in mon.update_history] == [1, 2, 3, 4]


def test_early_stopping_monitor_naming_an_undeclared_metric_is_refused_as_nnx_words_it():
    es = EarlyStopping(monitor=nnx.MonitorSpec(metric="nll"))
    with pytest.raises(ValueError, match="EarlyStopping monitor 'val.nll' names an undeclared metric; declared: loss, error"):
        es.check_run(None, ())


# ----------------------------------------------------------------------------- ModelCheckpoint files
def pt_files(root, run):
    return sorted(p.name for p in (root / run.id / "checkpoints").glob("*.pt"))


def test_model_checkpoint_writes_nnx_milestone_files_at_the_listed_epochs(runs):
    run = model_for().train(params(3), callbacks=[ModelCheckpoint(epochs=[0, 2], tag="snap"), ModelCheckpoint()],
                            root=runs)
    assert pt_files(runs, run) == ["snap_e0.pt", "snap_e2.pt"]  # ModelCheckpoint() with no epochs writes nothing
    folder = runs / run.id / "checkpoints"
    assert not [n for n in os.listdir(folder) if n.startswith(".")]  # no temporary left behind
    by_nnx_name = NNCheckpoint.from_file(str(folder / "snap_e0.pt"))  # in a run folder: the verified tag
    committed = NNCheckpoint.load(run.id, "snap_e0", runs)
    assert by_nnx_name == committed and by_nnx_name.idp.epoch_idx == 0 and by_nnx_name.training_state_present is False
    raw = torch.load(folder / "snap_e0.pt", weights_only=True)  # the safe loader reads it: nothing to unpickle
    assert raw["epoch"] == 0 and raw["tag"] == "snap_e0" and raw["run_id"] == run.id
    assert raw["net_state"].keys() == committed.net_state.keys()
    assert all(torch.equal(raw["net_state"][k], v) for k, v in committed.net_state.items())  # the committed weights
    copied = runs / "snap_e0.pt"  # copied out of the run, it is a standalone checkpoint file
    copied.write_bytes((folder / "snap_e0.pt").read_bytes())
    standalone = NNCheckpoint.from_file(copied)
    assert standalone == committed and standalone.idp == committed.idp
    rebuilt = nnx.NNModel.from_checkpoint(standalone)
    assert torch.equal(rebuilt.net.layers[0].weight, committed.net_state["layers.0.weight"])


def test_trainer_writes_the_milestone_files_too(runs):
    x, y = tiny_data(n=16)
    run = nnx.Trainer(two_part_model()).train(
        nnx.NNTrainerParams(n_epochs=2, optims={"all": sgd()}, train_loader=batches(x, y, 8)),
        objective=nnx.supervised_objective(), callbacks=[ModelCheckpoint(epochs=[1], tag="milestone")], root=runs,
    )
    assert pt_files(runs, run) == ["milestone_e1.pt"]
    assert NNCheckpoint.from_file(runs / run.id / "checkpoints" / "milestone_e1.pt").epoch == 1


def test_the_export_is_never_read_by_verification_or_resume(runs):
    run = model_for().train(params(2), callbacks=[ModelCheckpoint(epochs=[1], tag="snap")], root=runs)
    export = runs / run.id / "checkpoints" / "snap_e1.pt"
    assert export.is_file()
    export.write_bytes(b"damaged export")
    out = io.StringIO()
    assert main(["runs", "verify", run.id, "--root", str(runs)], out=out, err=io.StringIO()) == 0, out.getvalue()
    assert "OK" in out.getvalue()
    assert NNCheckpoint.verify(run.id, "snap_e1", runs)["completed_epoch"] == 1
    assert NNCheckpoint.from_file(export) == NNCheckpoint.load(run.id, "snap_e1", runs)  # the tag, not the export
    warm = model_for(seed=1).train(params(1, resume_from_run_id=run.id, resume_from_checkpoint="snap_e1"), root=runs)
    assert warm.resume_status["mode"] == "weights_only" and list(warm.epochs) == [2]
    again = model_for().train(params(1, resume_from_run_id=run.id), root=runs)  # a stateful resume from LAST
    assert again.resume_status["mode"] == "stateful"


# ----------------------------------------------------------------------------- restored components
def test_restored_components_list_the_monitor_only_when_the_run_declares_one(runs):
    source = model_for().train(params(2), callbacks=[EarlyStopping()], root=runs)
    assert "nnx.monitor" in source.checkpoint("last").payload()["components"]  # its best is still saved
    resumed = model_for().train(params(1, resume_from_run_id=source.id), callbacks=[EarlyStopping()], root=runs)
    assert resumed.resume_status.mode == "stateful"
    assert resumed.resume_status.restored_components == ("early_stopping",)
    warm = model_for().train(params(1, resume_from_run_id=source.id, resume_mode="weights_only", data_id="w"),
                             callbacks=[EarlyStopping()], root=runs)
    assert warm.resume_status.fresh_components == ("early_stopping",)
    monitored = params(2, monitor=nnx.MonitorSpec(metric="loss"))
    source = model_for().train(monitored, callbacks=[EarlyStopping()], root=runs)
    resumed = model_for().train(monitored.replace(n_epochs=1, resume_from_run_id=source.id), callbacks=[EarlyStopping()],
                                root=runs)
    assert resumed.resume_status.restored_components == ("early_stopping", "nnx.monitor")
