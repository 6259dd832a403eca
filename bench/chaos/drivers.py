"""Training scripts for the ckpt-chaos crash matrix: ``python bench/chaos/drivers.py DRIVER OUT [--resume]``.

Each driver is an ordinary user script on the public API (``import nnx_api as nnx``) that trains
into ``OUT/runs``. ckpt-chaos runs it once fault-free, then kills a copy at each file event
under ``OUT`` and runs the resume command on what the kill left:

* ``digits-explicit``: digits MLP; its resume command (``--resume``) starts a new run with
  ``resume_from_run_id=`` the crashed run and ``resume_mode="stateful"``;
* ``digits-auto``: digits MLP, ``resume="auto"``; resumed by the same command;
* ``ddp-writer0`` / ``ddp-writer1``: 2 gloo ranks, ``DDP(writer_rank=0 / 1)``, ``resume="auto"``;
* ``trainer-gan``: ``Trainer`` with optimizers ``gen`` and ``disc``, ``resume="auto"``;
* ``journal``: digits MLP, ``history=nnx.HistoryJournal(...)``, ``resume="auto"``;
* ``replace``: a finished digits run (trained beside ``OUT`` and moved in with one rename) is
  replaced with ``overwrite_existing=True`` by a run on other data (the pixels halved);
* ``mid-epoch``: digits MLP, ``resume="auto"``, ``commit_every=2`` over a ``DataLoader`` whose
  dataset adds noise from torch, ``random`` and NumPy in ``__getitem__`` (12 batches an epoch, so
  5 commits inside each epoch for 1 at its end);
* ``mid-epoch-journal``: ``mid-epoch`` with ``history=nnx.HistoryJournal(retention=8, chunk_size=4)``:
  every commit inside an epoch adds chunks, index lines and a manifest naming the epoch's open
  records; the epoch's end adds its summary row;
* ``preemption``: the same job with 2 loader workers and no ``commit_every``: a callback sends the
  process SIGTERM at update ``PREEMPT_AT`` (inside epoch 1); ``train()`` commits that update and
  raises ``TrainingPreempted``, and the script, as a requeued job would, trains the same
  configuration again with ``resume="auto"`` in the same process (the file events of both calls
  are the matrix's). Any other SIGTERM (ckpt-chaos's), also one that arrives while the driver's
  own is being obeyed, ends the process with ``TrainingPreempted``;
* ``async``: the background commit while training has moved on: ``async_commits=True``
  (spelled out), ``commit_every=3`` over ``mid-epoch``'s loader (3 commits inside each epoch for
  1 at its end), a wider MLP (hidden 1024 × 1024: a 13.5 MB payload with Adam's moments). Every
  commit's file events after admission (blob, history, LAST, phase tags and BEST) are made by the
  ``nnx-commit`` thread, and the driver holds each commit's blob write (``CommitWatch``, a
  slow disk) until training has trained 2 more updates, or until training waits for that commit
  (the next commit point, a preemption, the end of ``train()``): a crash at any event of the
  blob, history, LAST or tags then comes while training is past the snapshot being written;
* ``sync``: ``mid-epoch`` with ``async_commits=False``: every commit is written on the training
  thread before training goes on (the synchronous path stays in the matrix);
* ``search``: a hyperparameter search (``nnx_api.experiments.search.search``) of
  ``SEARCH_TRIALS`` (3) trials over the learning rate, each a plan fit of a digits MLP with
  ``commit_every=2`` (6 batches an epoch: 2 commits inside each epoch, 1 at its end), its
  Optuna study in ``OUT/study.journal`` (``JournalStorage(JournalFileBackend(...,
  JournalFileOpenLock(...)))``: Python file writes, so the study's bookkeeping -- the lock file,
  each journal append, the lock's release -- is the matrix's file events too, as are the trial
  leases under ``OUT/runs/.leases``). The same command continues the study: a trial whose
  worker died is resumed from its run's LAST. The open lock, not Optuna's default symlink lock:
  a lock a killed worker leaves is broken after its grace period (``SEARCH_LOCK_GRACE_S``, 3 s
  here for speed; Optuna's default is 30 s), where a symlink lock on a relative journal path
  dangles and the next worker spins forever.

The other drivers keep ``NNTrainParams``'s default, ``async_commits=True``: their commits are
written in the background as well, except the journal drivers' (a run with a ``HistoryJournal``
commits on the training thread: the journal's writer is not staged). ``async`` and ``sync`` check where their commits were written: a process of
``async`` that trained must have made file events on ``nnx-commit``, one of ``sync`` none
(exit 6, ``WRONG_THREAD``).

ckpt-chaos kills the rank that makes the file events: a DDP run's writer (the other rank
writes nothing). Every run ends with one line for ``--step-regex`` (``resumed at epoch K``),
after checking two promises itself, exiting non-zero if either is broken:

* the first epoch this process trained is the one after the newest epoch a reader saw
  committed before it started (a crash never costs a committed epoch): exit 4. For ``mid-epoch``,
  ``mid-epoch-journal``, ``async``, ``sync``, ``preemption`` and the DDP drivers (a SIGTERM
  preempts a DDP run on every rank, inside an epoch), whose LAST may be committed inside an epoch: the first update trained is
  the one after LAST's committed updates (``NNCheckpoint.resume_point``), and the first epoch is
  LAST's own when LAST is inside it; ``preemption`` checks its second call the same way;
* ``replace`` only: what a reader sees before training is exactly one of two runs, the finished
  run it replaces (its LAST, weights and history as they were) or the replacement with at least
  one committed epoch: exit 5 (``NEITHER``) for anything else. The first check then counts the
  replacement's epochs;
* the model in memory holds exactly the weights LAST holds on disk: exit 3.

``search`` checks, instead of the first two: every fit this process ran (a new trial or a dead
worker's) started at the update after its run's LAST as a reader saw it before the search
(``lost_update``; nothing committed: update 1 of epoch 0), every trial ended completed, with
one complete run of its own, and the runs root holds no other run (nothing lost, nothing
duplicated): exit 4. Its result (``digest.search_summary``) is every trial's outcome (number,
params, state, reason, value, BEST epoch, run and attempt ids, epochs, updates, what pruning
saw) and every run's LAST and BEST (epoch, weights digest) and history digest.

Then rank 0 writes ``OUT.result`` (``digest.summary``: LAST's epoch, a SHA-256 over its weights and
one over the committed history, BEST and the phase tags, read back from disk; ``digits-explicit``
without the phase tags, which its continuation run counts by its own plan), which ``--result-file`` compares with the
fault-free run's (``search``: ``digest.search_summary``). It lies beside ``OUT``, not in it, so
it adds no file event; ``digest.py OUT`` prints the same lines on its own (usable as ``--result-cmd``). ``--epochs N`` (default 2)
sets the job's length.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("NNX_PROGRESS", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import nnx_api as nnx  # noqa: E402

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2] / "examples")]
from digest import SEARCH_STUDY, committed_runs, final_checkpoint, search_storage, search_summary, state_digest, summary  # noqa: E402

import ddp_supervised  # noqa: E402  (examples/: the drivers train what the examples train)
import gan_trainer  # noqa: E402

torch.set_num_threads(1)
LOST_WORK, WRONG_MODEL, NEITHER, WRONG_THREAD = 4, 3, 5, 6


class FirstEpoch(nnx.Callback):
    """Records the first epoch this process trains (on every rank of a DDP run)."""

    distributed = "all"

    def __init__(self) -> None:
        self.epoch: int | None = None

    def on_epoch_begin(self, ctx: nnx.CallbackContext) -> None:
        if self.epoch is None:
            self.epoch = ctx.epoch


class FirstUpdate(FirstEpoch):
    """Also records the first committed update this process trains (``ctx.update_count``)."""

    def __init__(self) -> None:
        super().__init__()
        self.update: int | None = None

    def on_optimizer_update(self, ctx: nnx.CallbackContext, event: Any) -> None:
        if self.update is None:
            self.update = ctx.update_count


def digits() -> tuple[Any, Any]:
    """``examples/ddp_supervised.digits()``, read from scikit-learn's bundled file without importing
    scikit-learn: that import is 1.5 s of each of the matrix's ~2,000 interpreter starts."""
    sklearn = importlib.util.find_spec("sklearn")  # finds the package without importing it
    assert sklearn is not None and sklearn.submodule_search_locations
    data = np.loadtxt(Path(sklearn.submodule_search_locations[0]) / "datasets/data/digits.csv.gz", delimiter=",")
    return ddp_supervised.split(data[:, :-1], data[:, -1].astype(int))


def mlp() -> nnx.NNModel:
    """A seeded digits MLP with dropout (so a resume must restore the RNG streams too)."""
    nnx.set_seed(0)  # the same initial weights every time: the run id names one experiment
    return nnx.NNModel(
        nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=(32,), dropout_prob=0.1),
        nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY),
    )


def digits_params(epochs: int, **kw: Any) -> nnx.NNTrainParams:
    """Adam, a shuffling loader with its own seeded generator, validation every epoch."""
    train, val = digits()
    loader = DataLoader(train, batch_size=256, shuffle=True, generator=torch.Generator().manual_seed(0))
    return nnx.NNTrainParams(
        n_epochs=epochs, optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=3e-3), seed=0,
        train_loader=loader, val_loader=DataLoader(val, batch_size=512), progress=False, **kw,
    )


def newest_committed(root: Path) -> int:
    """The newest epoch any run under ``root`` has committed (LAST), as a reader sees it; -1: none."""
    epochs = [last.epoch for run in committed_runs(root) if (last := run.checkpoint("last")) is not None]
    return max(epochs, default=-1)


def committed_point(root: Path) -> tuple[int, int, bool]:
    """LAST as a reader sees it before training (``NNCheckpoint.resume_point``): its epoch (-1:
    nothing committed), its committed updates, and whether it was committed inside its epoch."""
    runs = committed_runs(root)
    point = nnx.NNCheckpoint.resume_point(runs[0], "last") if len(runs) == 1 else None
    if point is None:
        return -1, 0, False
    mid = point["position"] is not None
    return (point["position"]["epoch"] if mid else point["completed_epoch"]), int(point["committed_updates"]), mid


def lost_update(before: tuple[int, int, bool], first: FirstUpdate, epochs: int) -> str | None:
    """What is wrong with where training restarted (None: nothing): the first update trained must
    be the one after LAST's, in LAST's epoch when LAST is inside it, else in the next one."""
    epoch, updates, mid = before
    expected = epoch if mid else epoch + 1
    if first.update is None:  # nothing trained: the run must have been complete
        return None if expected == epochs and first.epoch is None else f"nothing trained, but LAST is {before}"
    if first.update != updates + 1 or first.epoch != expected:
        return (f"LAST held update {updates} (epoch {epoch}, {'inside it' if mid else 'its end'}); training restarted "
                f"at update {first.update} in epoch {first.epoch}")
    return None


def resume_point(run: nnx.NNRun) -> tuple[int, int, bool]:
    """``committed_point`` of one run: LAST's epoch (-1: nothing committed), its committed
    updates, and whether it was committed inside its epoch."""
    point = nnx.NNCheckpoint.resume_point(run, "last")
    if point is None:
        return -1, 0, False
    mid = point["position"] is not None
    return (point["position"]["epoch"] if mid else point["completed_epoch"]), int(point["committed_updates"]), mid


class Augmented(Dataset):
    """The digits rows plus noise drawn in ``__getitem__`` from torch, ``random`` and NumPy: in the
    main process from the run's streams, in a loader worker from the streams NNx seeds per sample."""

    def __init__(self, rows: Any) -> None:
        self.x, self.y = rows.tensors

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        noise = 0.02 * torch.randn(self.x.shape[1]) + 0.01 * random.random() + 0.01 * float(np.random.rand())
        return self.x[i] + noise, self.y[i]


def augmented_params(epochs: int, workers: int, **kw: Any) -> nnx.NNTrainParams:
    """``digits_params`` over ``Augmented`` rows, 128 a batch (12 batches an epoch), ``resume="auto"``."""
    train, val = digits()
    loader = DataLoader(Augmented(train), batch_size=128, shuffle=True, generator=torch.Generator().manual_seed(0),
                        num_workers=workers, timeout=120 if workers else 0)
    return nnx.NNTrainParams(
        n_epochs=epochs, optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=3e-3), seed=0, train_loader=loader,
        val_loader=DataLoader(val, batch_size=512), progress=False, resume="auto", **kw,
    )


# ------------------------------------------------------------------------------- drivers
def digits_auto(root: Path, epochs: int, first: FirstEpoch, resume: bool) -> nnx.NNModel:
    """``resume="auto"``: rerunning the same command continues the run."""
    model = mlp()
    model.train(digits_params(epochs, resume="auto"), callbacks=[first], root=root)
    return model


def digits_explicit(root: Path, epochs: int, first: FirstEpoch, resume: bool) -> nnx.NNModel:
    """First attempt: a plain run. ``--resume``: continue what it committed in a new lineage run."""
    model = mlp()
    sources = committed_runs(root)
    if not resume or not sources:  # never admitted: simply run it (again)
        model.train(digits_params(epochs), callbacks=[first], root=root)
        return model
    (source,) = sources
    last = source.checkpoint("last")
    if last is None:  # admitted but nothing committed: start it over
        model.train(digits_params(epochs, overwrite_existing=True), callbacks=[first], root=root)
    elif last.epoch + 1 < epochs:
        params = digits_params(epochs - last.epoch - 1, resume_from_run_id=source.id, resume_mode="stateful")
        model.train(params, callbacks=[first], root=root)
    else:  # it had committed its last epoch: the result is that run
        model.net.load_state_dict(last.weights())
    return model


def ddp(writer_rank: int) -> Any:
    """The digits job on the ranks of the group ckpt-chaos launches; ``writer_rank`` writes."""
    def driver(root: Path, epochs: int, first: FirstEpoch, resume: bool) -> nnx.NNModel:
        nnx.distributed.init_process_group(timeout_seconds=60)  # the environment ckpt-chaos --ranks sets, as torchrun
        train, val = digits()
        model = mlp()
        params = nnx.NNTrainParams(
            n_epochs=epochs, optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=3e-3), seed=0,
            train_loader=nnx.distributed.train_loader(train, batch_size=128, policy="pad", seed=0),
            val_loader=nnx.distributed.validation_loader(val, batch_size=256), resume="auto", progress=False,
        )
        model.train(params, callbacks=[first], root=root, distributed=nnx.distributed.DDP(writer_rank=writer_rank))
        nnx.distributed.shutdown(timeout_seconds=30)
        return model

    return driver


def trainer_gan(root: Path, epochs: int, first: FirstEpoch, resume: bool) -> nnx.NNModel:
    """examples/gan_trainer.py's GAN on points of a noisy ring: ``Trainer``, one optimizer per submodule."""
    trainer, params = gan_trainer.build(epochs, progress=False)
    trainer.train(params, trainer_step_fn=gan_trainer.gan_step, callbacks=[first], root=root)
    return trainer.model


def journal(root: Path, epochs: int, first: FirstEpoch, resume: bool) -> nnx.NNModel:
    """Chunks of 4 records, 6 records an epoch: chunks end inside epochs and the window evicts."""
    model = mlp()
    model.train(digits_params(epochs, resume="auto"), callbacks=[first], root=root,
                history=nnx.HistoryJournal(retention=8, chunk_size=4))
    return model


def replace(root: Path, epochs: int, first: FirstEpoch, resume: bool) -> nnx.NNModel:
    """What a user does after ``DataChangedError``: train the same configuration on other data with
    ``overwrite_existing=True``; once the replacement has committed an epoch, ``resume="auto"``."""
    train, val = digits()
    other = torch.utils.data.TensorDataset(train.tensors[0] * 0.5, train.tensors[1])
    replacing = replaced_state(root) is None
    model = mlp()
    loader = DataLoader(other, batch_size=256, shuffle=True, generator=torch.Generator().manual_seed(0))
    params = nnx.NNTrainParams(
        n_epochs=epochs, optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=3e-3), seed=0, train_loader=loader,
        val_loader=DataLoader(val, batch_size=512), progress=False,
        **({"overwrite_existing": True} if replacing else {"resume": "auto"}),
    )
    model.train(params, callbacks=[first], root=root)
    return model


def seed_replaced(root: Path, epochs: int) -> None:
    """The finished run ``replace`` replaces, trained beside ``OUT`` (no file event of the matrix)
    and moved to ``root`` with one rename; what it holds goes to ``OUT.old`` for ``replaced_state``."""
    seed = root.parent.with_name(root.parent.name + ".seed")
    shutil.rmtree(seed, ignore_errors=True)
    run = mlp().train(digits_params(epochs), root=seed / "runs")
    Path(f"{root.parent}.old").write_text(_held(seed / "runs", run.data_fingerprint))
    root.parent.mkdir(parents=True, exist_ok=True)
    os.rename(seed / "runs", root)


def _held(root: Path, data: Any) -> str:
    """A run's committed state (``digest.summary``) and the data it was trained on."""
    return summary(root) + f"data {json.dumps(data, sort_keys=True)}\n"


def replaced_state(root: Path) -> int | None:
    """What ``replace`` finds before it trains: None while the run is the finished run it replaces
    (intact: LAST, weights and history as seeded), else the replacement's newest committed epoch;
    exits ``NEITHER`` on anything else (no run, a run without LAST, the old data without the old state)."""
    runs = committed_runs(root)
    last = runs[0].checkpoint("last") if len(runs) == 1 else None
    if last is None:
        print(f"NEITHER: the runs root holds {[r.id for r in runs]}, without one committed run")
        sys.exit(NEITHER)
    held, old = _held(root, runs[0].data_fingerprint), Path(f"{root.parent}.old").read_text()
    if held == old:
        return None
    if held.rsplit("data ", 1)[1] == old.rsplit("data ", 1)[1]:
        print("NEITHER: the run holds the replaced run's data, but not its committed state")
        sys.exit(NEITHER)
    return last.epoch


def mid_epoch(root: Path, epochs: int, first: FirstEpoch, resume: bool, history: Any = None) -> nnx.NNModel:
    """``commit_every=2``: most of the run's commits (and file events) are inside an epoch."""
    model = mlp()
    model.train(augmented_params(epochs, workers=0, commit_every=2), callbacks=[first], root=root, history=history)
    return model


def mid_epoch_journal(root: Path, epochs: int, first: FirstEpoch, resume: bool) -> nnx.NNModel:
    """``mid_epoch`` with a history journal whose window (8 records) is smaller than an epoch (12)."""
    return mid_epoch(root, epochs, first, resume, history=nnx.HistoryJournal(retention=8, chunk_size=4))


COMMIT_THREAD = "nnx-commit"  # nnx_adapters.runner: the thread of a background commit
ASYNC_HIDDEN, ASYNC_EVERY, ASYNC_HOLD = (1024, 1024), 3, 2
_FILE_EVENTS = {"open", "os.rename", "os.replace", "os.remove", "os.unlink", "os.mkdir", "os.rmdir", "os.link",
                "os.truncate", "shutil.rmtree"}


class CommitWatch(nnx.Callback):
    """Where the run's file events under ``out`` are made (an audit hook that only looks: it
    adds no event) and, with ``hold``, a slow disk: a background commit's blob write (its
    ``.tmp-blob-*`` open, before any byte of the snapshot is serialized) waits until training
    has trained ``hold`` more updates, or until the training thread waits for the commit itself
    (the next commit point, a preemption's commit, the end of ``train()``). The hook waits on a
    condition, which raises no audit event; ``sys._current_frames`` raises one that is no file
    event."""

    def __init__(self, out: Path, hold: int = 0) -> None:
        self.out, self.hold = str(out.resolve()), hold
        self.updates = 0  # updates trained by this process (on_optimizer_update)
        self.cond = threading.Condition()
        self.main = threading.main_thread().ident
        self.events: dict[str, int] = {}  # thread name -> file events under out
        self.commits: list[list[int]] = []  # per background commit: updates at its blob's open and its last event
        self.held = self.timeouts = 0
        sys.addaudithook(self._hook)

    def on_optimizer_update(self, ctx: nnx.CallbackContext, event: Any) -> None:
        with self.cond:
            self.updates += 1
            self.cond.notify_all()

    def _hook(self, event: str, args: tuple) -> None:
        if event not in _FILE_EVENTS or not args or not isinstance(args[0], (str, os.PathLike)):
            return
        path = os.path.abspath(os.fspath(args[0]))
        if not (path == self.out or path.startswith(self.out + os.sep)):
            return
        if event == "open" and not (args[2] & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)) and not (
                isinstance(args[1], str) and any(c in args[1] for c in "wax+")):
            return  # a read
        thread = threading.current_thread()
        self.events[thread.name] = self.events.get(thread.name, 0) + 1
        if thread.name != COMMIT_THREAD:
            return
        blob = event == "open" and os.path.basename(path).startswith(".tmp-blob-")
        if blob:  # a commit's blob write opens its span (one writer thread runs every commit)
            self.commits.append([self.updates, self.updates])
            if self.hold:
                self._hold()
        if self.commits:
            self.commits[-1][1] = self.updates

    def _hold(self) -> None:
        self.held += 1
        with self.cond:
            target, waited = self.updates + self.hold, 0.0
            while self.updates < target and not self._training_waits():
                if waited > 30:  # never seen; a hung commit would otherwise hang the point
                    self.timeouts += 1
                    return
                self.cond.wait(0.005)
                waited += 0.005

    def _training_waits(self) -> bool:
        """Whether the training thread is waiting for a background commit (``ThreadRun.wait``)."""
        frame = sys._current_frames().get(self.main)
        while frame is not None:
            if frame.f_code.co_name == "wait" and frame.f_code.co_filename.endswith(os.path.join("nnx_adapters", "runner.py")):
                return True
            frame = frame.f_back
        return False

    def check(self, background: bool, trained: bool) -> int:
        """Print where the events were made; ``WRONG_THREAD`` if a process that trained made no
        background file event (``background``) or any (not ``background``)."""
        on_thread = self.events.get(COMMIT_THREAD, 0)
        spans = [last - first for first, last in self.commits]
        print(f"nnx-chaos commits: file events {dict(sorted(self.events.items()))}, {len(spans)} background commits, "
              f"updates trained during each one's file events {spans}, blob writes held {self.held} "
              f"(timed out {self.timeouts})", flush=True)
        if trained and (on_thread == 0 if background else on_thread > 0):
            print(f"WRONG_THREAD: {on_thread} file events on {COMMIT_THREAD} with async_commits={background}")
            return WRONG_THREAD
        return 0


def async_commits(root: Path, epochs: int, first: FirstEpoch, resume: bool) -> nnx.NNModel:
    """``commit_every=3`` with background commits of a 13.5 MB payload, each held until training
    has moved 2 updates on (``CommitWatch``)."""
    watch = CommitWatch(root.parent, hold=ASYNC_HOLD)
    nnx.set_seed(0)
    model = nnx.NNModel(
        nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=ASYNC_HIDDEN, dropout_prob=0.1),
        nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY),
    )
    params = augmented_params(epochs, workers=0, commit_every=ASYNC_EVERY, async_commits=True)
    model.train(params, callbacks=[first, watch], root=root)
    if code := watch.check(background=True, trained=watch.updates > 0):
        sys.exit(code)
    return model


def sync_commits(root: Path, epochs: int, first: FirstEpoch, resume: bool) -> nnx.NNModel:
    """``mid_epoch`` with ``async_commits=False``: every commit on the training thread."""
    watch = CommitWatch(root.parent)
    model = mlp()
    model.train(augmented_params(epochs, workers=0, commit_every=2, async_commits=False), callbacks=[first, watch],
                root=root)
    if code := watch.check(background=False, trained=watch.updates > 0):
        sys.exit(code)
    return model


PREEMPT_AT = 17  # epoch 1's fifth update (12 an epoch)


class SelfPreempt(nnx.Callback):
    """Sends this process SIGTERM once, as committed update ``at`` is announced, and counts the
    SIGTERMs that reach the handler ``train()`` installs (it wraps that handler and calls it): NNx
    obeys the first signal only, so a second one (ckpt-chaos's, during the preemption's commit)
    would otherwise go unseen by the script."""

    def __init__(self, at: int) -> None:
        self.at, self.sent, self.received = at, False, 0

    def on_train_begin(self, ctx: nnx.CallbackContext) -> None:
        inner = signal.getsignal(signal.SIGTERM)
        if callable(inner):
            def count(signum: int, frame: Any) -> None:
                self.received += 1
                inner(signum, frame)

            signal.signal(signal.SIGTERM, count)

    def on_optimizer_update(self, ctx: nnx.CallbackContext, event: Any) -> None:
        if ctx.update_count == self.at and not self.sent:
            self.sent = True
            signal.raise_signal(signal.SIGTERM)


def preemption(root: Path, epochs: int, first: FirstEpoch, resume: bool) -> nnx.NNModel:
    """Preempted by its own SIGTERM at update ``PREEMPT_AT``, then the same configuration again with
    ``resume="auto"`` (a rerun that starts past that update is simply not preempted)."""
    model, signaller = mlp(), SelfPreempt(PREEMPT_AT)
    try:
        model.train(augmented_params(epochs, workers=2), callbacks=[first, signaller], root=root)
        return model
    except nnx.TrainingPreempted as exc:
        if not (signaller.sent and signaller.received == 1 and exc.committed and exc.update == PREEMPT_AT):
            raise  # not (only) our signal: a preempted job ends here, non-zero
    before = committed_point(root)
    if before[1] != PREEMPT_AT or not before[2]:
        print(f"LOST_WORK: preempted at update {PREEMPT_AT}, but LAST holds {before}")
        sys.exit(LOST_WORK)
    model, again = mlp(), FirstUpdate()
    model.train(augmented_params(epochs, workers=2), callbacks=[again, SelfPreempt(PREEMPT_AT)], root=root)
    if (lost := lost_update(before, again, epochs)) is not None:
        print(f"LOST_WORK after the preemption: {lost}")
        sys.exit(LOST_WORK)
    return model


SEARCH_TRIALS = 3
SEARCH_LOCK_GRACE_S = 3  # a journal lock left by a killed worker is broken after this long (Optuna's default: 30 s)


def search_driver(out: Path, epochs: int) -> int:
    """``SEARCH_TRIALS`` trials, each a fit of a digits plan with ``commit_every=2``; rerunning
    continues the study in ``OUT/study.journal``. Returns the exit status (``LOST_WORK`` or 0)."""
    import optuna

    from nnx_api.experiments.plans import ExperimentPlan, PlanData
    from nnx_api.experiments.search import FloatParam, SearchBudget, SearchSpace, search

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    root = out / "runs"
    before = {run.id: resume_point(run) for run in committed_runs(root)}  # what a reader sees before the search
    train, val = digits()
    starts: list[FirstUpdate] = []

    def started() -> FirstUpdate:  # one per fit, in the order of the fits
        starts.append(FirstUpdate())
        return starts[-1]

    plan = ExperimentPlan(
        net=nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=(32,), dropout_prob=0.1),
        model=nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY),
        train=nnx.NNTrainParams(n_epochs=epochs, optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=3e-3),
                                metrics=(nnx.MetricSpec(id="nll"),), monitor=nnx.MonitorSpec(metric="nll"),
                                commit_every=2, progress=False),
        data=PlanData(train=lambda: DataLoader(train, batch_size=256, shuffle=True,
                                               generator=torch.Generator().manual_seed(0)),
                      val=lambda: DataLoader(val, batch_size=512)),
        seed=0, root=root, callback_factories=[started],
    )
    result = search(plan, SearchSpace(FloatParam("train.optim.max_lr", 1e-3, 3e-2, log=True)),
                    budget=SearchBudget(trials=SEARCH_TRIALS), study_name=SEARCH_STUDY,
                    storage=search_storage(out, SEARCH_LOCK_GRACE_S), pruner=optuna.pruners.NopPruner(),
                    apply=lambda p, values: p.with_optim(max_lr=values["train.optim.max_lr"]))
    if len(starts) != len(result.trial_runs):  # a fit that raised: its trial failed (reported below)
        print(f"LOST_WORK: {len(starts)} fits, {len(result.trial_runs)} trial runs")
        return LOST_WORK
    # the fits in order (search() records each trial's run as its fit returns): a new trial starts
    # at update 1, a dead worker's at the update after its LAST (a finished one trains nothing)
    for (number, run), first in zip(result.trial_runs.items(), starts, strict=True):
        if (lost := lost_update(before.get(run.id, (-1, 0, False)), first, epochs)) is not None:
            print(f"LOST_WORK: trial {number} (run {run.id}, LAST before: {before.get(run.id)}): {lost}")
            return LOST_WORK
    runs = {run.id: run for run in committed_runs(root)}
    outcomes = result.outcomes
    problems = [f"trial {o.number} is {o.state} ({o.reason})" for o in outcomes if o.state != "completed"]
    if len(outcomes) != SEARCH_TRIALS:
        problems.append(f"the study holds {len(outcomes)} trials, not {SEARCH_TRIALS}")
    if sorted(runs) != sorted(str(o.run_id) for o in outcomes):
        problems.append(f"the runs root holds {sorted(runs)}, the trials name {[o.run_id for o in outcomes]}")
    for run_id, run in runs.items():
        last = run.checkpoint("last")
        if last is None or last.epoch != epochs - 1:
            problems.append(f"run {run_id} ended at LAST {None if last is None else last.epoch}")
    if problems:
        print("LOST_WORK: " + "; ".join(problems))
        return LOST_WORK
    print(f"nnx-chaos search: trials {[o.number for o in outcomes]}, resumed {list(result.resumed)} from "
          f"{[before.get(run.id) for n, run in result.trial_runs.items() if n in result.resumed]}, "
          f"{len(starts)} fits here", flush=True)
    return 0


# LAST may be committed inside an epoch: the update check (a DDP run obeys SIGTERM too, on every
# rank: ckpt-chaos's term mode leaves a DDP run's LAST inside an epoch)
MID_EPOCH = ("mid-epoch", "mid-epoch-journal", "preemption", "async", "sync", "ddp-writer0", "ddp-writer1")
DRIVERS = {
    "digits-explicit": digits_explicit,
    "digits-auto": digits_auto,
    "ddp-writer0": ddp(0),
    "ddp-writer1": ddp(1),
    "trainer-gan": trainer_gan,
    "journal": journal,
    "replace": replace,
    "mid-epoch": mid_epoch,
    "mid-epoch-journal": mid_epoch_journal,
    "preemption": preemption,
    "async": async_commits,
    "sync": sync_commits,
    "search": None,  # search_driver: a search of several runs, checked on its own
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("driver", choices=sorted(DRIVERS))
    parser.add_argument("out", type=Path, help="ckpt-chaos's {out}: the runs root is OUT/runs")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--resume", action="store_true", help="digits-explicit: the resume command")
    args = parser.parse_args(argv)
    root, result, rank = args.out / "runs", Path(f"{args.out}.result"), os.environ.get("RANK", "0")
    if rank == "0":
        result.unlink(missing_ok=True)  # only this run's own result may be judged
    if args.driver == "search":
        if (code := search_driver(args.out, args.epochs)) != 0:
            return code
        result.write_text(search_summary(args.out))
        print("nnx-chaos search: resumed at epoch 0", flush=True)  # --step-regex: a search has no one epoch
        return 0
    if args.driver == "replace" and not root.exists():  # not seeded yet (or killed before the rename)
        seed_replaced(root, args.epochs)
    # read before training: what the crash left (replace: the replacement's epochs; -1 for the old run)
    committed = newest_committed(root) if args.driver != "replace" else _or_none(replaced_state(root))
    point = committed_point(root) if args.driver in MID_EPOCH else None
    first = FirstUpdate() if point is not None else FirstEpoch()
    model = DRIVERS[args.driver](root, args.epochs, first, args.resume)
    resumed = args.epochs if first.epoch is None else first.epoch  # nothing left to train: the run was complete
    if isinstance(first, FirstUpdate) and point is not None and (lost := lost_update(point, first, args.epochs)):
        print(f"LOST_WORK rank {rank}: {lost}")
        return LOST_WORK
    if point is None and resumed != committed + 1:
        print(f"LOST_WORK rank {rank}: epoch {committed} was committed, training restarted at epoch {resumed}")
        return LOST_WORK
    if state_digest(model.net.state_dict()) != state_digest(final_checkpoint(root).weights()):
        print(f"WRONG_MODEL rank {rank}: the model does not hold the weights of the final run's LAST")
        return WRONG_MODEL
    if rank == "0":
        result.write_text(summary(root, phases=args.driver != "digits-explicit"))
    print(f"nnx-chaos rank {rank}: committed epoch {committed} before this run, resumed at epoch {resumed}", flush=True)
    return 0


def _or_none(epoch: int | None) -> int:
    return -1 if epoch is None else epoch


if __name__ == "__main__":
    sys.exit(main())
