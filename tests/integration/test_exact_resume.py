"""Exact resume: a 4-epoch seeded run crashed at every file operation resumes to the same bits.

For every k over the file operations an uninterrupted run makes (``FileStorage.write``,
``append`` and ``delete`` calls: admission, blobs, history, LAST, phase/BEST tags, attempt
records, finalization), the k-th call "kills" the process: it leaves a torn temporary of what it
was writing (a hard kill mid-write), raises a ``BaseException`` that ``except Exception`` cannot
eat, and every later file operation of that process fails the same way (the process is dead).
Then the same script is simply run again with ``resume="auto"``. It must end with weights
``torch.equal`` to the uninterrupted run's (the caller's model and the LAST checkpoint), the same
history rows, no stale temporary, and — right after the crash — the committed rows must already
be the uninterrupted run's rows for those epochs.
"""

from __future__ import annotations

import os

import pytest
import tinyrun
import torch

from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.storage.paths import split_path, temporary_name
import nnx_api as nnx

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("one_thread")]


class ProcessKilled(BaseException):
    """The simulated process died at a file operation."""


class KillAt:
    """Patch FileStorage so its k-th file operation kills the process (1-based; 0: never)."""

    MUTATIONS = ("write", "append", "copy", "delete")

    def __init__(self, monkeypatch: pytest.MonkeyPatch, k: int) -> None:
        self.k, self.calls, self.dead, self.log = k, 0, False, []
        for name in self.MUTATIONS:
            monkeypatch.setattr(FileStorage, name, self._wrap(name, getattr(FileStorage, name)))

    def _wrap(self, name, original):
        def op(storage: FileStorage, path: str, *args, **kwargs):
            if self.dead:
                raise ProcessKilled("the process is dead")
            self.calls += 1
            self.log.append((name, args[0] if name == "copy" else path))  # a copy by its destination
            if self.calls == self.k:
                self.dead = True
                if name in ("write", "append") and args:
                    _torn_temporary(storage, path, bytes(args[0]))
                elif name == "copy":  # killed between the link and the rename
                    os.link(os.path.join(storage.root, path), _temporary(storage, args[0]))
                raise ProcessKilled(f"killed at file operation {self.k}: {name} {path}")
            return original(storage, path, *args, **kwargs)

        return op


def _temporary(storage: FileStorage, path: str) -> str:
    """An owned temporary beside ``path``, its folders made (as the write had made them)."""
    parts = split_path(path)
    folder = os.path.join(storage.root, *parts[:-1])
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, temporary_name(parts[-1]))


def _torn_temporary(storage: FileStorage, path: str, data: bytes) -> None:
    """What a kill in the middle of a durable replace leaves: half the bytes in an owned temporary."""
    with open(_temporary(storage, path), "wb") as f:
        f.write(data[: len(data) // 2])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run, and the file operations it makes."""
    root = tmp_path_factory.mktemp("reference")
    mp = pytest.MonkeyPatch()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        counter = KillAt(mp, 0)
        model, run = tinyrun.train(root)
    finally:
        mp.undo()
        torch.set_num_threads(threads)
    return {
        "root": root,
        "id": run.id,
        "weights": {k: v.clone() for k, v in model.net.state_dict().items()},
        "last": run.checkpoint("last").weights(),
        "idps": list(run.idps),
        "ops": list(counter.log),
    }


def test_the_reference_run_commits_every_epoch_through_the_protocol(reference):
    kinds = [path.rsplit("/", 1)[-1] for _, path in reference["ops"]]
    assert kinds.count("last.json") == tinyrun.N_EPOCHS + 1  # one per epoch + the finalization refresh
    assert kinds.count("idps.csv") == tinyrun.N_EPOCHS + 1  # admission + one per epoch
    assert len(reference["ops"]) >= 20
    assert sorted({i.epoch_idx for i in reference["idps"]}) == list(range(tinyrun.N_EPOCHS))
    assert tinyrun.same_weights(reference["weights"], reference["last"])


def test_every_crash_point_resumes_bit_identical(reference, tmp_path, monkeypatch):
    n_ops = len(reference["ops"])
    outcomes = {}
    for k in range(1, n_ops + 1):
        root = tmp_path / f"crash-{k:02d}"
        with monkeypatch.context() as mp:
            killer = KillAt(mp, k)
            with pytest.raises(ProcessKilled):
                tinyrun.train(root)
            assert killer.dead
        # what survived obeys the load rules, and its committed rows are the reference's rows
        committed = tinyrun.check_committed_state(root, reference["id"])
        if committed is not None:
            run = nnx.NNRun.load(reference["id"], root)
            assert list(run.idps) == [i for i in reference["idps"] if i.epoch_idx <= committed]
        # the same script, simply rerun
        model, run = tinyrun.train(root)
        assert tinyrun.same_weights(model.net.state_dict(), reference["weights"]), f"crash point {k}"
        assert tinyrun.same_weights(run.checkpoint("last").weights(), reference["last"]), f"crash point {k}"
        assert list(run.idps) == reference["idps"], f"crash point {k}"
        assert tinyrun.disk_temporaries(root) == [], f"crash point {k}: a stale temporary was not cleaned"
        outcomes[k] = committed
    # the crash points really spread over the run: nothing committed, then each epoch committed
    assert set(outcomes.values()) == {None, *range(tinyrun.N_EPOCHS)}
    if os.environ.get("NNX_REPORT") == "1":
        found = [outcomes[k] for k in sorted(outcomes)]
        print(f"\nexact resume: {n_ops} crash points, LAST found after each: {found}; all resumed bit-identical")


def test_rerunning_a_finished_script_returns_the_finished_model(reference):
    model, run = tinyrun.train(reference["root"])
    assert run.id == reference["id"]
    assert tinyrun.same_weights(model.net.state_dict(), reference["weights"])
    assert list(run.idps) == reference["idps"]
