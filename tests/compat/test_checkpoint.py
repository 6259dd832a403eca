"""NNx's checkpoint handle over this project's verified checkpoints (REFERENCE §3.2, §6.3, §9.4,
§9.5, §9.9; seed: a blob is verified before use; trust boundary: nothing is ever unpickled).

``NNCheckpoint.load(run=…, type=…)`` gives ``net_params, net_state, model_params, idp`` (the
epoch's last record) and ``training_state_present``; ``NNModel.from_checkpoint(checkpoint,
device=None)`` rebuilds the model (and the ``(run_id, tag)`` form still works);
``load_training_state`` / ``resume_point`` read the resume state / its stamp; ``ModelCheckpoint``
files are weights-only and readable by ``NNCheckpoint.from_file``; no epochs, no writes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import pickle
import shlex

import attrs
import pytest
import torch

from nnx_core.commit import BlobRef, RunFiles, TagManifest
from nnx_adapters.storage.fs import FileStorage
import nnx_api as nnx
from nnx_api.nn.callbacks import ModelCheckpoint
from nnx_api.nn.enum.checkpoints import Checkpoints
from nnx_api.nn.params.nn_checkpoint import NNCheckpoint

N_EPOCHS = 4


def data(seed=0):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(32, 4, generator=g), torch.randint(0, 3, (32,), generator=g)
    return x, y


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt") / "runs"
    x, y = data()
    torch.manual_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(6,)))
    snap = ModelCheckpoint(epochs=[1], tag="snap")
    run = model.train(
        nnx.NNTrainParams(n_epochs=N_EPOCHS, train_loader=[(x[:16], y[:16]), (x[16:], y[16:])], val_loader=[(x, y)],
                          progress=False),
        callbacks=[snap, ModelCheckpoint()],
        root=root,
    )
    return root, run, model


def test_load_gives_nnx_fields_of_the_committed_checkpoint(trained):
    root, run, model = trained
    ckpt = NNCheckpoint.load(run=run.id, type=Checkpoints.LAST, root=root)
    assert ckpt.net_params == model.net_params and ckpt.model_params == model.params
    assert ckpt.reconstructible and ckpt.training_state_present is True
    assert ckpt.epoch == N_EPOCHS - 1 and ckpt.idp.epoch_idx == ckpt.epoch and ckpt.idp.val_edp is not None
    assert all(torch.equal(ckpt.net_state[k], v) for k, v in model.net.state_dict().items())
    best = NNCheckpoint.load(run.id, "best", root)  # a tag name works as well as the member
    assert best.idp == run.best()
    assert NNCheckpoint.load(run=nnx.NNRun.load(run.id, root), type=Checkpoints.LAST).epoch == ckpt.epoch


def test_run_checkpoints_are_the_five_phase_handles_best_excluded(trained, tmp_path):
    """REFERENCE §9.7: ``checkpoints(root)``: [FIRST, Q1, Q2, Q3, LAST] (None where absent; BEST
    excluded). Four epochs commit every phase tag; a run trained with
    ``save_phase_checkpoints=False`` has LAST alone."""
    root, run, model = trained
    handles = nnx.NNRun.load(run.id, root).checkpoints()
    phases = ["first", "q1", "q2", "q3", "last"]
    assert len(handles) == 5
    for tag, handle in zip(phases, handles, strict=True):
        if tag not in run.tags():
            assert handle is None
            continue
        assert isinstance(handle, NNCheckpoint) and handle.tag == tag and handle.epoch == run.checkpoint(tag).epoch
        assert all(torch.equal(handle.net_state[k], v) for k, v in run.checkpoint(tag).weights().items())
    assert handles[0].epoch == 0 and handles[-1].epoch == N_EPOCHS - 1 and "best" in run.tags()
    present = [h.epoch for h in handles if h is not None]
    assert present == sorted(present) and len(present) >= 3
    assert [h and h.tag for h in run.checkpoints(root)] == [h and h.tag for h in handles]  # read through a root

    x, y = data(1)
    lean = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(6,))).train(
        nnx.NNTrainParams(n_epochs=2, train_loader=[(x, y)], save_phase_checkpoints=False, progress=False),
        root=tmp_path / "runs",
    )
    first, q1, q2, q3, last = lean.checkpoints()
    assert (first, q1, q2, q3) == (None, None, None, None) and last.tag == "last" and last.epoch == 1


def test_a_loaded_run_has_nnx_fields_net_train_model_trainer_salt(trained):
    """REFERENCE §9.1/§9.7: ``NNRun(net, train, model, trainer=None, salt=None)``; ``load`` rebuilds
    the params (``resolve_from_state`` for the net)."""
    root, run, model = trained
    loaded = nnx.NNRun.load(id=run.id, root=root)
    assert loaded.net == model.net_params and loaded.model == model.params
    assert loaded.train.n_epochs == N_EPOCHS and loaded.train.optim == nnx.NNTrainParams(n_epochs=1).optim
    assert loaded.trainer is None and loaded.salt is None
    assert loaded.precision == run.precision  # metadata.yaml's record
    # the model's resolution, scoped to what a default-step run applies it to
    assert run.precision == model.resolved_precision.scoped(("NNModel.train (default step and objectives)", "evaluate()", "predict() / predict_proba()"))
    conv = nnx.NNConvParams(input_dim=64, output_dim=2, conv_channels=(2,), kernel_size=3)
    run_config = {**loaded.config, "net": conv.state(), "salt": "s"}
    assert attrs.evolve(loaded, config=run_config).net == conv  # read back as the subclass that wrote it
    assert attrs.evolve(loaded, config=run_config).salt == "s"


def test_missing_runs_and_tags_give_none_but_unsafe_ids_are_refused(trained):
    root, run, _ = trained
    assert NNCheckpoint.load(run="0" * 32, type=Checkpoints.LAST, root=root) is None
    assert NNCheckpoint.load(run=run.id, type="q1", root=root) is None  # 4 epochs: Q1 collides with FIRST
    assert NNCheckpoint.load_training_state("0" * 32, Checkpoints.LAST, root) is None
    assert NNCheckpoint.resume_point("0" * 32, Checkpoints.LAST, root) is None
    with pytest.raises(nnx.InvalidRunIdError):
        NNCheckpoint.load(run="../x", type=Checkpoints.LAST, root=root)
    with pytest.raises(nnx.InvalidRunIdError):
        NNCheckpoint.load(run=run.id, type="../last", root=root)


def test_from_checkpoint_accepts_the_handle_and_the_run_id_form(trained):
    root, run, model = trained
    x, _ = data(1)
    ckpt = NNCheckpoint.load(run=run.id, type=Checkpoints.LAST, root=root)
    by_handle = nnx.NNModel.from_checkpoint(checkpoint=ckpt)
    by_id = nnx.NNModel.from_checkpoint(run.id, "last", root=root)
    on_cpu = nnx.NNModel.from_checkpoint(ckpt, device="cpu")
    expected = model.predict(x).logits
    for loaded in (by_handle, by_id, on_cpu):
        assert (loaded.predict(x).logits == expected).all()
    with pytest.raises(nnx.RunNotFoundError, match="tags"):
        nnx.NNModel.from_checkpoint(run.id, "q1", root=root)


def test_a_cuda_trained_checkpoint_loads_on_this_host_with_a_device_override(trained):
    root, run, model = trained
    ckpt = NNCheckpoint.load(run=run.id, type=Checkpoints.LAST, root=root)
    cuda_ckpt = attrs.evolve(ckpt, model_params=dataclasses.replace(ckpt.model_params, device="cuda"))
    if not torch.cuda.is_available():
        with pytest.raises(nnx.ParamsError, match="device='cpu'"):
            nnx.NNModel.from_checkpoint(cuda_ckpt)
    loaded = nnx.NNModel.from_checkpoint(cuda_ckpt, device="cpu")
    assert loaded.device == torch.device("cpu")
    x, _ = data(2)
    assert (loaded.predict(x).logits == model.predict(x).logits).all()
    for device in ("cpu", nnx.Devices.CPU, torch.device("cpu")):  # NNx's positional from_checkpoint(checkpoint, device)
        assert nnx.NNModel.from_checkpoint(cuda_ckpt, device).device == torch.device("cpu")
    with pytest.raises(nnx.ParamsError, match="device once"):
        nnx.NNModel.from_checkpoint(cuda_ckpt, "cpu", device="cpu")


def test_training_state_and_resume_point(trained):
    root, run, _ = trained
    state = NNCheckpoint.load_training_state(run=run.id, type=Checkpoints.LAST, root=root)
    assert state["completed_epoch"] == N_EPOCHS - 1 and "weights" not in state
    assert {"optimizer", "scheduler", "rng", "components"} <= set(state)
    optimizer = NNCheckpoint.load_optimizer_state(run.id, Checkpoints.LAST, root)
    assert optimizer["type"] == state["optimizer"]["type"] == "torch.optim.adam.Adam"
    ckpt, same = NNCheckpoint.load_with_training_state(run.id, Checkpoints.LAST, root)
    assert ckpt.epoch == same["completed_epoch"]
    point = NNCheckpoint.resume_point(run.id, Checkpoints.LAST, root)
    blob = (root / run.id / "checkpoints" / "objects" / point["checkpoint_id"]).read_bytes()
    assert point["checkpoint_id"] == hashlib.sha256(blob).hexdigest() == point["files"]["state"]["sha256"]
    assert point["completed_epoch"] == N_EPOCHS - 1 and point["weights_only"] is False
    assert point["committed_updates"] == 2 * N_EPOCHS
    assert NNCheckpoint.verify(run.id, Checkpoints.LAST, root) == point


def test_model_checkpoint_writes_weights_only_files_that_from_file_reads(trained):
    root, run, model = trained
    files = sorted(os.listdir(root / run.id / "checkpoints"))
    assert [f for f in files if f.startswith("custom")] == []  # ModelCheckpoint() with no epochs writes nothing
    assert "snap_e1.json" in files
    by_nnx_name = NNCheckpoint.from_file(str(root / run.id / "checkpoints" / "snap_e1.pt"))
    by_manifest = NNCheckpoint.from_file(root / run.id / "checkpoints" / "snap_e1.json")
    assert by_nnx_name == by_manifest
    assert by_nnx_name.epoch == 1 and by_nnx_name.tag == "snap_e1" and by_nnx_name.idp.epoch_idx == 1
    assert by_nnx_name.training_state_present is False
    assert NNCheckpoint.load_training_state(run.id, "snap_e1", root) is None
    assert NNCheckpoint.resume_point(run.id, "snap_e1", root)["weights_only"] is True
    assert NNCheckpoint.from_file(root / run.id / "checkpoints" / "nothing.pt") is None
    rebuilt = nnx.NNModel.from_checkpoint(by_nnx_name)
    assert not torch.equal(rebuilt.net.layers[0].weight, model.net.layers[0].weight)  # epoch 1, not the last


def test_to_file_round_trips_through_the_safe_loader(trained, tmp_path):
    root, run, _ = trained
    ckpt = NNCheckpoint.load(run=run.id, type=Checkpoints.BEST, root=root)
    path = ckpt.to_file(tmp_path / "best.ckpt")
    back = NNCheckpoint.from_file(path)
    assert back.net_params == ckpt.net_params and back.model_params == ckpt.model_params and back.idp == ckpt.idp
    assert all(torch.equal(back.net_state[k], v) for k, v in ckpt.net_state.items())
    assert back.training_state_present is False
    with pytest.raises(nnx.ParamsError, match="unknown checkpoint format 'hdf5'"):
        ckpt.to_file(tmp_path / "x.pt", format="hdf5")


def test_to_file_safetensors_round_trips_in_nnx_layout(trained, tmp_path):
    """NNx's portable layout: tensors, and the params and record as JSON metadata; from_file
    tells it apart by its header, whatever the file's name."""
    pytest.importorskip("safetensors")
    from safetensors import safe_open

    root, run, _ = trained
    ckpt = NNCheckpoint.load(run=run.id, type=Checkpoints.BEST, root=root)
    path = ckpt.to_file(tmp_path / "best.pt", format="safetensors")
    with safe_open(str(path), framework="pt") as handle:
        meta = handle.metadata()
    assert meta["nnx_format_version"] == "1" and meta["nnx.run_id"] == run.id
    back = NNCheckpoint.from_file(path)
    assert back.net_params == ckpt.net_params and back.model_params == ckpt.model_params and back.idp == ckpt.idp
    assert all(torch.equal(back.net_state[k], v) for k, v in ckpt.net_state.items())
    assert (back.run_id, back.tag, back.epoch) == (ckpt.run_id, ckpt.tag, ckpt.epoch)
    with pytest.raises(nnx.ParamsError, match="safetensors.*map_location"):
        NNCheckpoint.from_file(path, map_location={"cuda:0": "cpu"})
    loose = attrs.evolve(ckpt, net_state={**ckpt.net_state, "_extra_state": {"labels": ["a"]}})
    with pytest.raises(nnx.ParamsError, match="non-tensor state_dict entry '_extra_state'"):
        loose.to_file(tmp_path / "loose" / "x.safetensors", format="safetensors")
    assert not (tmp_path / "loose").exists()  # refused before anything is written


def armed_blob(marker):
    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {shlex.quote(str(marker))}",))

    buffer = io.BytesIO()
    torch.save({"nnx_payload_format": 1, "kind": "nnmodel", "epoch": 0, "weights": Exploit()}, buffer)
    return buffer.getvalue()


def test_no_loader_here_ever_unpickles(trained, tmp_path):
    root, run, _ = trained
    marker = tmp_path / "marker"
    data_ = armed_blob(marker)
    torch.load(io.BytesIO(data_), weights_only=False)  # the blob is live under an unsafe loader
    assert marker.exists()
    marker.unlink()

    standalone = tmp_path / "evil.pt"
    standalone.write_bytes(data_)
    with pytest.raises(nnx.CorruptRunError, match="safe loader"):
        NNCheckpoint.from_file(standalone)
    standalone.write_bytes(pickle.dumps({"kind": "nnx.checkpoint"}))
    with pytest.raises(nnx.CorruptRunError):
        NNCheckpoint.from_file(standalone)

    files = RunFiles(FileStorage(root), run.id)
    old = files.read_tag("snap_e1")
    sha = hashlib.sha256(data_).hexdigest()
    files.storage.write(files.blob_path(sha), data_)
    files.write_tag(TagManifest(tag="snap_e1", run_id=run.id, epoch=old.epoch, blobs={"state": BlobRef(sha, len(data_))},
                                meta=dict(old.meta)))
    try:
        for load in (lambda: NNCheckpoint.load(run.id, "snap_e1", root),
                     lambda: NNCheckpoint.from_file(root / run.id / "checkpoints" / "snap_e1.pt"),
                     lambda: NNCheckpoint.load_training_state(run.id, "snap_e1", root)):
            with pytest.raises(nnx.CorruptRunError, match="safe loader"):
                load()
    finally:
        files.write_tag(old)
    assert not marker.exists()


def test_a_corrupted_blob_is_refused_by_load_and_verify(trained, tmp_path):
    import shutil

    root, run, _ = trained
    copy = tmp_path / "runs"
    shutil.copytree(root, copy)
    ref = RunFiles(FileStorage(copy), run.id).read_tag("last").blobs["state"]
    path = copy / run.id / "checkpoints" / "objects" / ref.sha256
    damaged = bytearray(path.read_bytes())
    damaged[50] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(nnx.CorruptRunError, match="SHA-256"):
        NNCheckpoint.verify(run.id, Checkpoints.LAST, copy)
    with pytest.raises(nnx.CorruptRunError, match="SHA-256"):
        NNCheckpoint.load(run.id, Checkpoints.LAST, copy)
