"""ENOSPC / EIO in the background writer's commit (``async_commits=True``, the default): training
stops with the error a synchronous commit raises, the previous LAST intact, nothing lost.

Faults are injected by ``async_fault_worker.Faults``: in the K-th ``os.write`` (ENOSPC) or
``os.fsync`` (EIO) of one commit, only on the background writer's thread ("nnx-commit"); the
oracle is the same run with ``async_commits=False`` and the fault at the same call of the same
commit (on the main thread). The injector fires only once training has made an update past the
faulted commit's point: the commit was in flight while training moved on.

* one process, every write and fsync of the second of three epoch commits (blob, history, LAST,
  its folder fsyncs, the tags) and of the last one (the end of ``train()``): ``train()`` raises
  the injected error (the oracle's type and errno); the run on disk is byte for byte the oracle's
  (every tag, the history, the objects): LAST is the previous commit (or this one, when only the
  folder fsync after its rename failed, as synchronously), it loads, ``nnx runs verify`` passes,
  history is not ahead of LAST, no temporary remains; training stopped at the first update
  boundary after the failure was known; ``resume="auto"`` then ends bit-identical to the
  uninterrupted run;
* ``commit_every`` inside an epoch: a fault in a mid-epoch commit stops training at the next
  update boundary once the failure is known (exactly one update after the commit point), and
  without any help within the commit interval (the next commit point waits for the one in
  flight), never the whole run; the resume is bit-identical;
* two gloo ranks (``async_fault_worker.py``, one process per rank, hard wall-clock limit): the
  writer's background write fails; every rank stops at the same update boundary with the error
  the synchronous path gives every rank (``AgreedError`` naming rank 0's ``OSError`` and its
  message), both exit non-zero naming it, none hangs; the previous LAST intact.
"""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import async_fault_worker as worker
import ddp_common as common
import pytest
import tinyrun
import torch
from async_fault_worker import Faults, Updates
from torch.utils.data import DataLoader, TensorDataset

from nnx_core.commit import LAST, RunFiles, position_of
from nnx_adapters.storage.fs import FileStorage
import nnx_api as nnx
from nnx_api import cli

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("one_thread")]

HERE = Path(__file__).resolve().parent
N_EPOCHS = 3  # three epoch commits: the second is the one faulted (training goes on after it)
LAUNCH_S = 120  # hard wall-clock limit of the 2-rank launch
PRIMARY = {"write": errno.ENOSPC, "fsync": errno.EIO}


def train(root: Path, mp: pytest.MonkeyPatch | None, fail: tuple[int, str, int, int] | None, *, async_commits: bool,
          n_epochs: int = N_EPOCHS, build: Any = None, wait: bool = True, **kw: Any) -> tuple[Faults | None, Updates, BaseException | None, Any]:
    """One training with ``fail`` injected (asynchronous: on the writer's thread; synchronous: on
    the main thread); the injector, the updates seen, the error raised and the model."""
    faults = None if mp is None else Faults(mp, fail, thread="nnx-commit" if async_commits else "MainThread", wait=wait)
    updates = Updates(faults)
    model, params = (build or tinyrun.build)(n_epochs, async_commits=async_commits, **kw)
    try:
        model.train(params, callbacks=[updates], root=root)
    except Exception as exc:
        return faults, updates, exc, model
    return faults, updates, None, model


def on_disk(root: Path, rid: str) -> dict[str, Any]:
    """What a fault leaves behind and readers see: every tag file, the history and the objects."""
    run = root / rid
    tags = {p.name: p.read_bytes() for p in sorted((run / "checkpoints").glob("*.json"))}
    objects = sorted(p.name for p in (run / "checkpoints" / "objects").iterdir()) if (run / "checkpoints" / "objects").exists() else []
    history = (run / "idps.csv").read_bytes() if (run / "idps.csv").exists() else None
    return {"tags": tags, "objects": objects, "history": history}


def verify(root: Path, rid: str) -> str:
    """``nnx runs verify ID`` (exit code 0, its report)."""
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["runs", "verify", rid, "--root", str(root)], out=out, err=err)
    assert code == 0, out.getvalue() + err.getvalue()
    return out.getvalue()


def check_last_intact(root: Path, rid: str) -> Any:
    """LAST loads, its blob verifies and decodes, ``nnx runs verify`` passes, the history readers
    see is not ahead of LAST and no temporary remains; LAST's manifest."""
    assert tinyrun.disk_temporaries(root) == []
    last = RunFiles(FileStorage(root), rid).read_tag(LAST)
    assert last is not None
    checkpoint = nnx.NNRun.load(rid, root).checkpoint("last")
    assert checkpoint is not None and checkpoint.epoch == last.epoch
    assert checkpoint.payload()["weights"]  # decodes with the safe loader
    assert f"run {rid}: OK" in verify(root, rid)
    run = nnx.NNRun.load(rid, root)
    assert all(r.epoch_idx <= last.epoch for r in run.idps)  # history not ahead of LAST
    if position_of(last) is None:
        assert sorted({r.epoch_idx for r in run.idps}) == list(range(last.epoch + 1))
    return last


# ------------------------------------------------------------------------------- one process
@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, Any]:
    """The uninterrupted 3-epoch run (asynchronous): its commits' os calls and final weights; the
    synchronous run ends with the same weights and records."""
    root = tmp_path_factory.mktemp("async-faults-reference")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    mp = pytest.MonkeyPatch()
    try:
        faults, updates, error, model = train(root / "async", mp, None, async_commits=True)
        assert error is None, error
        mp.undo()
        sync_model, sync_run = tinyrun.train(root / "sync", N_EPOCHS, async_commits=False)
    finally:
        mp.undo()
        torch.set_num_threads(threads)
    assert faults is not None
    run = nnx.NNRun.load(tinyrun.run_id(N_EPOCHS), root / "async")
    weights = {k: v.clone() for k, v in model.net.state_dict().items()}
    assert tinyrun.same_weights(weights, sync_model.net.state_dict()) and list(run.idps) == list(sync_run.idps)
    return {"id": run.id, "commits": faults.commits, "updates": updates.seen, "idps": list(run.idps), "weights": weights}


def test_every_commit_is_written_by_the_background_writer_and_covers_blob_history_and_last(reference):
    commits = reference["commits"]
    assert [c["epoch"] for c in commits] == list(range(N_EPOCHS))
    assert {c["thread"] for c in commits} == {"nnx-commit"}
    for commit in commits[1:]:
        files = [path.rsplit("/", 1)[-1] for _, _, path in commit["trace"]]
        assert any(f.startswith(".tmp-blob-") for f in files), files  # the payload blob
        assert "idps.csv" in files or any(f.startswith(".tmp-idps.csv") for f in files), files  # the history
        assert any(f.startswith(".tmp-last.json") for f in files), files  # LAST
        assert files.count("checkpoints") >= 1, files  # the folder fsync after LAST's rename


def fault_points(reference: dict[str, Any], commit: int) -> list[tuple[int, str, int, int]]:
    """Every os.write (ENOSPC) and os.fsync (EIO) of commit ``commit`` (1-based)."""
    return [(commit, fn, k, PRIMARY[fn]) for fn, k, _ in reference["commits"][commit - 1]["trace"]]


def check_faults(reference: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, commit: int) -> int:
    rid, commits = reference["id"], reference["commits"]
    wait = commit < len(commits)  # the last commit: no update comes after it to wait for
    points = fault_points(reference, commit)
    for n, fault in enumerate(points):
        _, fn, k, code = fault
        path = commits[commit - 1]["trace"][n][2]
        where = f"{errno.errorcode[code]} at os.{fn} #{k} of commit {commit} (writing {path.rsplit('/', 2)[-2:]})"
        with monkeypatch.context() as mp:  # the oracle: the same fault in a synchronous commit
            sync_faults, _, sync_error, _ = train(tmp_path / f"sync-{n}", mp, fault, async_commits=False)
        assert sync_faults is not None and sync_faults.injected is not None, where
        assert sync_error is sync_faults.injected, f"{where}: synchronous: {sync_error!r}"
        oracle = on_disk(tmp_path / f"sync-{n}", rid)

        root = tmp_path / f"async-{n}"
        with monkeypatch.context() as mp:
            faults, updates, error, _ = train(root, mp, fault, async_commits=True, wait=wait)
        assert faults is not None and faults.injected is not None, f"{where}: never injected"
        assert faults.injected_on == "nnx-commit", where
        assert error is not None, f"{where}: train() returned: the background failure was swallowed"
        assert type(error) is type(sync_error) and error.errno == sync_error.errno == code, f"{where}: {error!r}"
        assert error is faults.injected, f"{where}: a different error surfaced: {error!r}"
        # the run on disk is the synchronous fault's, byte for byte; LAST intact, nothing ahead of it
        assert on_disk(root, rid) == oracle, f"{where}: the run on disk differs from the synchronous fault's"
        last = check_last_intact(root, rid)
        assert last.epoch in (commit - 2, commit - 1), where  # the previous commit, or (folder fsync) this one
        # where it surfaced: training had moved on, and stopped at the first update boundary after
        # the failure was known (the callback waited for the writer): one update past the commit
        assert not faults.waited_in_vain and not updates.commit_running_after_wait, where
        fault_update = commits[commit - 1]["update"]
        expected = reference["updates"][: reference["updates"].index(fault_update) + 2]
        if commit == len(commits):  # the last commit: no update after it, the end of train() raises
            expected = reference["updates"]
        assert updates.seen == expected, f"{where}: updates {updates.seen[-3:]}, expected to end at {expected[-1]}"

        model, run = tinyrun.train(root, N_EPOCHS)  # the script again, the disk fixed: nothing lost
        assert tinyrun.same_weights(model.net.state_dict(), reference["weights"]), where
        assert list(run.idps) == reference["idps"], where
    return len(points)


def test_a_fault_in_a_background_commit_raises_the_synchronous_error_and_keeps_the_previous_last(
    reference, tmp_path, monkeypatch
):
    """Every write and fsync of the second of three commits (training goes on into epoch 2)."""
    assert check_faults(reference, tmp_path, monkeypatch, commit=2) >= 6


def test_a_fault_in_the_last_background_commit_surfaces_at_the_end_of_train(reference, tmp_path, monkeypatch):
    """The last epoch's commit: nothing trains after it; ``train()`` raises instead of returning."""
    assert check_faults(reference, tmp_path, monkeypatch, commit=N_EPOCHS) >= 6


# ------------------------------------------------------------------------------- mid-epoch commits
EVERY, SMALL_BATCH, EPOCH_UPDATES = 6, 4, 24  # 96 rows in batches of 4: 24 updates an epoch, a commit every 6


def small_batches(n_epochs: int, **train_kw: Any) -> tuple[nnx.NNModel, nnx.NNTrainParams]:
    """``tinyrun``'s script with batches of 4 (24 updates an epoch)."""
    x, y = tinyrun.data()
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=x.shape[1], output_dim=3, hidden_dims=(16,)), nnx.NNModelParams())
    loader = DataLoader(TensorDataset(x, y), batch_size=SMALL_BATCH, shuffle=True, num_workers=0,
                        generator=torch.Generator().manual_seed(7))
    val = DataLoader(TensorDataset(x[:48], y[:48]), batch_size=24, num_workers=0)
    params = nnx.NNTrainParams(n_epochs=n_epochs, seed=0, train_loader=loader, val_loader=val, progress=False,
                               resume="auto", commit_every=EVERY, **train_kw)
    return model, params


@pytest.mark.parametrize("settle", [True, False], ids=["failure-known", "unaided"])
def test_a_fault_in_a_mid_epoch_commit_stops_training_at_the_next_update_boundary(tmp_path, monkeypatch, settle):
    n_epochs = 2
    model, params = small_batches(n_epochs, async_commits=True)
    straight = model.train(params, root=tmp_path / "straight")
    weights = {k: v.clone() for k, v in model.net.state_dict().items()}
    total = n_epochs * EPOCH_UPDATES

    fault = (3, "write", 1, errno.ENOSPC)  # the blob of the third commit: update 18, inside epoch 0
    with monkeypatch.context() as mp:
        faults = Faults(mp, fault)
        updates = Updates(faults, settle=settle)
        model, params = small_batches(n_epochs, async_commits=True)
        with pytest.raises(OSError) as raised:
            model.train(params, callbacks=[updates], root=tmp_path / "runs")
    assert raised.value is faults.injected and raised.value.errno == errno.ENOSPC
    assert faults.injected_on == "nnx-commit" and not faults.waited_in_vain
    point = faults.fault_update
    assert point == 3 * EVERY and [c["update"] for c in faults.commits] == [EVERY, 2 * EVERY, 3 * EVERY]
    assert updates.seen == list(range(1, updates.seen[-1] + 1))
    after = updates.seen[-1] - point  # updates made after the faulted commit's point
    if settle:  # the failure was known after update 19: training stopped at that boundary
        assert after == 1, updates.seen[-5:]
    else:  # at the latest the next commit point (it waits for the commit in flight), not the whole run
        assert 1 <= after <= EVERY, updates.seen[-5:]
    assert updates.seen[-1] < total
    rid = straight.id
    last = check_last_intact(tmp_path / "runs", rid)
    assert last.meta["update_count"] == 2 * EVERY and position_of(last) is not None  # the commit before the fault

    model, params = small_batches(n_epochs, async_commits=True)
    resumed = model.train(params, root=tmp_path / "runs")
    assert resumed.resume_status is not None and resumed.resume_status["mode"] == "stateful", resumed.resume_status
    assert tinyrun.same_weights(model.net.state_dict(), weights)
    assert list(resumed.idps) == list(straight.idps)


# ------------------------------------------------------------------------------- two gloo ranks
DDP_FAULTS = (  # commit 2 is epoch 1's (update 10); commit 3 the last epoch's (update 16, the end of train())
    (2, "write", 1, errno.ENOSPC),  # the blob
    (2, "fsync", 4, errno.EIO),  # LAST's own bytes
    (3, "write", 2, errno.ENOSPC),  # the history of the last commit: surfaces at the end of train()
)


def launch_group(base: Path, mode: str) -> list[subprocess.Popen[bytes]]:
    out, root = base / "out", base / "runs"
    out.mkdir(parents=True, exist_ok=True)
    port = common.free_port()
    faults = [arg for f in DDP_FAULTS for arg in ("--fault", ":".join(map(str, f)))]
    procs = []
    for rank in range(2):
        with open(out / f"rank{rank}.log", "w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, str(HERE / "async_fault_worker.py"), str(out), str(root), "--mode", mode, *faults],
                env=common.rank_env(rank, 2, port), stdout=log, stderr=subprocess.STDOUT, cwd=HERE, start_new_session=True,
            ))
    return procs


def wait_all(groups: dict[str, tuple[Path, list[subprocess.Popen[bytes]]]]) -> dict[str, list[int]]:
    """Every rank's exit code; past ``LAUNCH_S`` every process is killed and the test fails (a hang)."""
    deadline = time.monotonic() + LAUNCH_S
    codes: dict[str, list[int]] = {}
    try:
        for name, (_, procs) in groups.items():
            codes[name] = [p.wait(timeout=max(deadline - time.monotonic(), 0.1)) for p in procs]
    except subprocess.TimeoutExpired:
        for _, procs in groups.values():
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, 9)
                    p.wait()
        pytest.fail("a rank hung:\n" + "\n".join(
            f"--- {name} rank {r}\n" + (base / "out" / f"rank{r}.log").read_text()[-3000:]
            for name, (base, _) in groups.items() for r in range(2)))
    return codes


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="no gloo")
def test_two_ranks_stop_with_the_writers_background_error_and_keep_the_previous_last(tmp_path):
    # the asynchronous group and its oracle (the same faults in synchronous commits) side by side
    groups = {mode: (tmp_path / mode, launch_group(tmp_path / mode, mode)) for mode in ("async", "sync")}
    codes = wait_all(groups)
    logs = {mode: [(base / "out" / f"rank{r}.log").read_text() for r in range(2)] for mode, (base, _) in groups.items()}
    seen = {mode: [json.loads((base / "out" / f"rank{r}.json").read_text()) for r in range(2)]
            for mode, (base, _) in groups.items()}
    rid = nnx.NNRun(config=common.model().run_config(common.crash_params(n_epochs=3), None), root=".").id
    for mode in ("async", "sync"):
        assert codes[mode] == [1, 1], f"{mode}: every rank must exit non-zero: {codes[mode]}\n" + "\n".join(logs[mode])
        for i, fault in enumerate(DDP_FAULTS):
            writer = seen[mode][0][i]
            where = f"{mode}, fault {fault}"
            assert writer["injected"] is not None, f"{where}: never injected"
            assert writer["injected_on"] == ("nnx-commit" if mode == "async" else "MainThread"), where
            errors = [seen[mode][r][i]["error"] for r in range(2)]
            assert None not in errors, f"{where}: a rank did not stop: {errors}"
            assert errors[0]["type"] == errors[1]["type"] == "AgreedError", f"{where}: {errors}"
            assert errors[0]["message"] == errors[1]["message"], f"{where}: the ranks disagree: {errors}"
            assert f"failed on rank 0: OSError: {writer['injected']}" in errors[0]["message"], f"{where}: {errors}"
            assert errors[0]["cause"] == f"OSError: {writer['injected']}", where  # the writer's own error, chained
            if mode == "async":  # the error every rank raises is the synchronous path's, but for where it surfaced
                oracle = seen["sync"][0][i]["error"]["message"]
                assert errors[0]["message"].split(" failed on rank 0: ", 1)[1] == oracle.split(" failed on rank 0: ", 1)[1]
                # where: the next update boundary once the failure is known (it rides on the next
                # all-reduce: one more update), on every rank alike; the last commit: at the end
                assert not writer["waited_in_vain"] and not writer["commit_running_after_wait"], where
                stops = {seen[mode][r][i]["updates"][-1] for r in range(2)}
                assert len(stops) == 1, f"{where}: the ranks stopped at different updates: {stops}"
                (stop,) = stops
                if fault[0] < worker.N_EPOCHS:
                    assert writer["fault_update"] < stop <= writer["fault_update"] + 2, (where, stop)
                else:  # the last commit: every update was made, the end of train() raises
                    assert stop == writer["fault_update"], (where, stop)
            root = groups[mode][0] / "runs" / f"fault{i}"
            last = check_last_intact(root, rid)
            assert last.epoch == fault[0] - 2, where  # the previous commit
            if mode == "async":
                assert on_disk(root, rid)["tags"] == on_disk(groups["sync"][0] / "runs" / f"fault{i}", rid)["tags"], where
        # each rank's output names the writer's error (the last training's, raised out of the script)
        last_injected = seen[mode][0][-1]["injected"]
        for r in range(2):
            assert "AgreedError" in logs[mode][r] and f"OSError: {last_injected}" in logs[mode][r], logs[mode][r][-3000:]
    assert worker.WAIT_S < LAUNCH_S
