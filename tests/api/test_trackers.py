"""TensorBoard and W&B callbacks: what a run logs is read back with each tool's own reader."""

from __future__ import annotations

import json
import struct
import sys

import pytest

import nnx_api as nnx
from nnx_api.runs.curves import epoch_scalars, records_by_epoch

from tests.api.ecosystem_helpers import run_doc, train_digits

NLL = nnx.MetricSpec(id="nll")
MONITOR = nnx.MonitorSpec(metric="nll")


def expected_by_epoch(run):
    """What the committed history says each epoch's scalars are."""
    return {epoch: epoch_scalars(records) for epoch, records in records_by_epoch(run.idps).items()}


def read_events(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def test_tensorboard_event_files_hold_every_epoch_scalar(tmp_path):
    log_dir = tmp_path / "tb"
    _, run = train_digits(tmp_path / "runs", epochs=3, metrics=(NLL,), monitor=MONITOR,
                          callbacks=[nnx.TensorBoardCallback(log_dir=log_dir)])
    acc = read_events(log_dir)
    tags = set(acc.Tags()["scalars"])
    assert {
        "train/loss", "train_epoch/loss", "train_epoch/accuracy", "train_epoch/nll",
        "val/loss", "val/accuracy", "val/error", "val/f1", "val/nll",
        "lr", "monitor/val.nll", "monitor/improved", "monitor/best",
    } <= tags
    expected = expected_by_epoch(nnx.NNRun.load(run.id, tmp_path / "runs"))
    assert sorted(expected) == [0, 1, 2]
    for tag in tags:
        events = acc.Scalars(tag)
        assert [e.step for e in events] == [0, 1, 2], tag  # one point per committed epoch, step = epoch
        for event in events:
            assert event.value == pytest.approx(expected[event.step][tag], rel=1e-6, abs=1e-7), (tag, event.step)
    # the monitor curve is the decision BEST obeyed: improved flags match the history's selection
    improved = [e.value for e in acc.Scalars("monitor/improved")]
    assert improved == [1.0 if run.epochs[e].selection.improved else 0.0 for e in range(3)]
    assert acc.Scalars("monitor/val.nll")[run.best().epoch_idx].value == pytest.approx(run.best().selection.value)


def test_tensorboard_default_log_dir_is_per_run_beside_the_runs(tmp_path):
    root = tmp_path / "runs"
    callback = nnx.TensorBoardCallback()
    _, run = train_digits(root, epochs=2, callbacks=[callback])
    assert callback.path == root / ".tensorboard" / run.id
    acc = read_events(callback.path)
    assert [e.step for e in acc.Scalars("val/loss")] == [0, 1]
    assert "monitor/fallback" in acc.Tags()["scalars"]  # no named monitor: the documented fallback signal
    assert [r.id for r in nnx.NNRun.all(root)] == [run.id]  # the log folder is not mistaken for a run


def offline_run_dir(wandb_dir):
    """The one offline run folder, once W&B's service has written everything (``run.finish()``
    returns before its writer has flushed; shutting the service down waits for it)."""
    import wandb

    wandb.teardown()
    (run_dir,) = wandb_dir.glob("offline-run-*")
    return run_dir


def wandb_records(run_dir):
    """Records of an offline W&B run file (a LevelDB-style log of protobuf records)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, pending, out = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pos += 7
        if kind == 0 and length == 0:
            pos += left - 7
            continue
        chunk, pos = data[pos : pos + length], pos + length
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            out.append(pending + chunk)
    records = []
    for raw in out:
        record = pb.Record()
        record.ParseFromString(raw)
        records.append(record)
    return records


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    import wandb

    wandb.teardown()  # the W&B singleton keeps the settings (WANDB_DIR) of the first run in a process
    yield tmp_path / "wandb"
    wandb.teardown()


def test_wandb_offline_run_directory_holds_the_logged_history(tmp_path, wandb_offline):
    callback = nnx.WandbCallback(project="nnx-tests", dir=str(tmp_path))
    _, run = train_digits(tmp_path / "runs", epochs=3, metrics=(NLL,), monitor=MONITOR, callbacks=[callback])
    run_dir = offline_run_dir(wandb_offline)
    records = wandb_records(run_dir)
    rows = []
    for record in records:
        if record.WhichOneof("record_type") == "history":
            items = record.history.item
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items})
    assert [row["epoch"] for row in rows] == [0, 1, 2]
    expected = expected_by_epoch(run)
    for row in rows:
        want = expected[row["epoch"]]
        assert row["_step"] == row["epoch"]
        for key in ("val/loss", "val/nll", "train_epoch/loss", "lr", "monitor/val.nll", "monitor/improved"):
            assert row[key] == pytest.approx(want[key], rel=1e-12), key
    (start,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert start.display_name == run.id and start.project == "nnx-tests"
    config = {item.key: json.loads(item.value_json) for item in start.config.update}
    assert config["nnx_run_id"] == run.id
    assert callback.run is None  # its own W&B run is finished at train end


def test_wandb_logs_into_a_given_run_and_leaves_it_open(tmp_path, wandb_offline):
    import wandb

    outer = wandb.init(project="nnx-tests", name="outer", dir=str(tmp_path))
    try:
        train_digits(tmp_path / "runs", epochs=2, callbacks=[nnx.WandbCallback(wandb_run=outer)])
        outer.log({"after": 1.0}, step=5)  # still open: the caller owns it
    finally:
        outer.finish()
    run_dir = offline_run_dir(wandb_offline)
    steps = [r.history for r in wandb_records(run_dir) if r.WhichOneof("record_type") == "history"]
    assert len(steps) == 3


def test_trackers_are_writer_callbacks_and_name_their_extra_when_missing(monkeypatch):
    assert nnx.TensorBoardCallback.distributed == "writer" and nnx.WandbCallback.distributed == "writer"
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r'pip install "nnx\[wandb\]"'):
        nnx.WandbCallback()
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ImportError, match=r'pip install "nnx\[tensorboard\]"'):
        nnx.TensorBoardCallback()


def test_tracker_names_import_in_either_order():
    import subprocess

    for first in ("import nnx_api.callbacks.trackers", "import nnx_api"):
        code = f"{first}; import nnx_api as nnx; from nnx_api.callbacks.trackers import TensorBoardCallback as T; " \
               "assert nnx.TensorBoardCallback is T and 'WandbCallback' in nnx.__all__"
        subprocess.run([sys.executable, "-c", code], check=True)


def test_docs_tracking_snippets_run(tmp_path, wandb_offline, monkeypatch):
    ns = run_doc("tracking.md", tmp_path, monkeypatch)
    assert ns["run"].best() is not None
