"""Many workers, one study: which worker runs which trial, and how a dead worker's trial goes on.

Any number of processes run one search by running the same command against the same Optuna
study storage and the same runs root. Optuna numbers the trials (one number per ``ask``, in
the storage); everything else is decided here, in this order::

    orphan?  a RUNNING trial whose worker is gone: its trial lease in this runs root is free, or
      │      (never named) the worker lease of the worker that asked it is free
      ├─yes─▶ take its lease ─▶ still RUNNING? ─▶ name this worker ─▶ fit(attempt, resume="auto"):
      │       the run goes on from its LAST (a trial never trained starts) ─▶ tell ─▶ release
      ▼no
    budget left? ─no─▶ stop ("budget")
      ▼yes
    ask (marked with this worker's id in the same write) ─▶ fewer than ``trials`` counted trials
      │    numbered below this one? ─no─▶ discard it (told FAIL, marked discarded: never trained,
      │    never counted or reported) ─▶ stop ("budget")
      ▼yes
    take the trial's lease (created locked, made durable) ─▶ name the attempt and this worker
      ▼    on the trial
    fit ─▶ tell ─▶ release the lease

The lease is a file under the runs root, ``.leases/trial-<attempt>.lock``, held with ``flock``
for as long as the worker trains and tells the trial, and made durable before the worker names
itself. A worker names itself on the trial only while it holds the lease, so a RUNNING trial
whose lease is free was left by a process that died (SIGKILL, OOM, a lost node), and telling the
trial comes before the release, so a worker that takes a free lease and reads the trial again
knows whether it is still open. Each worker also holds a worker lease while it searches,
``.leases/worker-<id>.lock``, and the write that asks a trial carries that id (a template
trial), so a trial whose worker died between asking it and naming itself is adopted too, once
its asker's worker lease is free; a live worker's trial never is, and a trial asked by other
code (plain Optuna) is left alone.

A worker sees another's named trial only through a runs root they share: on per-worker runs
roots a dead worker's trial is continued by rerunning that worker's command. Runs on storage
that is not a file system (``MemoryStorage``) hold no trial leases, so their orphans are
reported, not resumed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

from nnx_core.errors import NNxError, ParamsError, RunLeaseError
from nnx_adapters.storage.fs import FileStorage, flock_lease
from nnx_adapters.storage.paths import LEASE_FOLDER
from nnx_api.callbacks.progress import message_stream
from nnx_api.runs.store import runs_root

OPEN_TRIES = 5  # a study or schema created by workers started together: tried again after a pause
MARK_ATTR = "nnx.asked_by"  # set in the write that asks the trial: the asking worker's id (its worker lease)
WORKER_ATTR = "worker"  # the trial's user attribute: "<host>:<pid>" of the worker that holds (held) it
DISCARDED_ATTR = "discarded"  # a trial asked past the budget by a worker that lost the race for the last one


class StudyStorageError(NNxError, RuntimeError):
    """The study's storage cannot be opened or reached (a ``RuntimeError``); nothing was run."""


def worker_name() -> str:
    """This process as the trials name it: ``"<host>:<pid>"``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def say(study_name: str, text: str) -> None:
    """One line of this worker's log: which trial it starts, resumes, ends or discards."""
    print(f"search {study_name} [{worker_name()}]: {text}", file=message_stream(), flush=True)


def lease_root(plan: Any) -> str | None:
    """The folder the trials' leases live in: the runs root of the plan (None when its runs are
    not on a file system)."""
    if plan.storage is None:
        return str(runs_root(plan.root))
    return plan.storage.root if isinstance(plan.storage, FileStorage) else None


def _lease_id(attempt: str) -> str:
    return f"trial-{attempt}"


@contextlib.contextmanager
def claimed(root: str | None, attempt: str) -> Iterator[None]:
    """Hold a trial's lease, made durable (nothing to hold when the runs are not on a file system):
    a crash after the worker named itself can never leave a named trial without its lease file."""
    with held(root, _lease_id(attempt)):
        yield


@contextlib.contextmanager
def held(root: str | None, lease_id: str) -> Iterator[None]:
    """Hold lease ``lease_id`` under ``root``, its file and folders made durable first."""
    if root is None:
        yield
        return
    with flock_lease(root, lease_id):
        with open(_lease_path(root, lease_id), "ab") as handle:  # the file, then the folders naming it
            os.fsync(handle.fileno())
        for folder in (os.path.join(root, LEASE_FOLDER), root):
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        yield


def worker_lease(root: str | None) -> tuple[str, contextlib.AbstractContextManager[None]]:
    """A new worker id and the lease it holds while it searches, ``.leases/worker-<id>.lock``:
    the trials it asks carry its id, so another worker can tell whether it is alive."""
    worker = uuid.uuid4().hex[:16]
    return worker, held(root, f"worker-{worker}")


def _lease_path(root: str, lease_id: str) -> str:
    return os.path.join(root, LEASE_FOLDER, f"{lease_id}.lock")


def ask(study: Any, worker: str) -> Any:
    """A new trial, marked with this worker's id in the same write that makes it RUNNING: made
    from a template trial that carries the mark (as Optuna's own ``ask`` makes an empty one). A
    trial a user enqueued is asked as Optuna asks it, then marked."""
    import optuna

    if study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        trial = study.ask()
        trial.set_user_attr(MARK_ATTR, worker)
        return trial
    template = optuna.trial.create_trial(state=optuna.trial.TrialState.RUNNING, user_attrs={MARK_ATTR: worker})
    return optuna.trial.Trial(study, study._storage.create_new_trial(study._study_id, template_trial=template))


def take_orphan(study: Any, root: str | None, attempt_of: Any, stack: contextlib.ExitStack) -> Any:
    """The first trial a dead worker left running, its lease now held on ``stack``; None when
    there is none here. ``attempt_of(number)`` names the attempt of a trial whose worker died
    before recording it."""
    if root is None:
        return None
    for frozen in _running(study):
        attrs = frozen.user_attrs
        if WORKER_ATTR not in attrs and not _asker_died(root, attrs.get(MARK_ATTR)):
            continue  # asked by other code than a search worker, or its worker is alive (about to name itself)
        attempt = attrs.get("attempt_id") or attempt_of(frozen.number)
        if WORKER_ATTR in attrs and not os.path.exists(_lease_path(root, _lease_id(attempt))):
            continue  # named under a lease on another runs root: its runs are there
        inner = contextlib.ExitStack()
        try:
            inner.enter_context(claimed(root, attempt))
        except RunLeaseError:
            continue  # its worker is alive
        if any(t.number == frozen.number for t in _running(study)):  # told meanwhile? then not an orphan
            stack.push(inner.pop_all())
            return frozen
        inner.close()
    return None


def _asker_died(root: str, asker: Any) -> bool:
    """Whether the worker that asked a trial (``asker``: its id) is gone: its worker lease is in
    this runs root and free."""
    if not isinstance(asker, str) or not os.path.exists(_lease_path(root, f"worker-{asker}")):
        return False
    try:
        with flock_lease(root, f"worker-{asker}"):
            return True
    except RunLeaseError:
        return False


def _running(study: Any) -> list[Any]:
    from optuna.trial import TrialState

    return list(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))


def counted(trials: Any) -> int:
    """How many of the study's trials the budget counts: every one asked and not discarded."""
    return sum(t.state.name != "WAITING" and not t.user_attrs.get(DISCARDED_ATTR) for t in trials)


def over_budget(study: Any, number: int, trials: int) -> bool:
    """Whether trial ``number`` came after the budget was spent by other workers' trials."""
    earlier = [t for t in study.get_trials(deepcopy=False) if t.number < number]
    return counted(earlier) >= trials


def trial_seeded_tpe(optuna: Any, seed: int) -> Any:
    """The default sampler: Optuna's TPE, drawing trial ``n`` from a generator seeded with
    ``(seed, n)``. What trial ``n`` is asked then depends on the seed, ``n`` and the trials the
    study holds, not on which process asks it or what that process asked before: a search
    continued after a kill asks what an uninterrupted one asks, and parallel workers never repeat
    each other's random start-up draws."""

    class TrialSeededTPE(optuna.samplers.BaseSampler):
        def __init__(self) -> None:
            self.inner = optuna.samplers.TPESampler(seed=seed)

        def before_trial(self, study: Any, trial: Any) -> None:
            mixed = int.from_bytes(hashlib.sha256(f"{seed}:{trial.number}".encode()).digest()[:4], "little")
            self.inner = optuna.samplers.TPESampler(seed=mixed)  # TPE keeps nothing but its generator between trials
            self.inner.before_trial(study, trial)

        def infer_relative_search_space(self, study: Any, trial: Any) -> Any:
            return self.inner.infer_relative_search_space(study, trial)

        def sample_relative(self, study: Any, trial: Any, search_space: Any) -> Any:
            return self.inner.sample_relative(study, trial, search_space)

        def sample_independent(self, study: Any, trial: Any, name: str, distribution: Any) -> Any:
            return self.inner.sample_independent(study, trial, name, distribution)

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            self.inner.after_trial(study, trial, state, values)

        def reseed_rng(self) -> None:
            self.inner.reseed_rng()

    return TrialSeededTPE()


def open_study(optuna: Any, *, name: str, storage: Any, direction: str, sampler: Any, pruner: Any) -> Any:
    """Create or load study ``name`` (``StudyStorageError`` when its storage cannot be reached;
    ``ParamsError`` when a stored study of that name optimizes the other way). Workers started
    together race to create the database's tables and the study; the losers try again."""
    for attempt in range(OPEN_TRIES):
        try:
            study = optuna.create_study(direction=direction, sampler=sampler, pruner=pruner, study_name=name,
                                        storage=storage, load_if_exists=True)
            break
        except Exception as exc:  # the driver's or database library's own (sqlalchemy's OperationalError, ...)
            if attempt + 1 < OPEN_TRIES and _creation_race(exc):
                time.sleep(0.2 * (attempt + 1))  # workers started together all create the schema; one wins
                continue
            sqlite = isinstance(storage, str) and storage.startswith("sqlite")
            fix = ("SQLite creates the database file but not its folder: create the folder, or give a path in one "
                   "that exists" if sqlite else "check the URL, that the database server is up and reachable from "
                   "this machine, and that its Python driver is installed")
            raise StudyStorageError(f"study {name!r}: its storage {_shown(storage)} cannot be opened "
                                    f"({type(exc).__name__}: {exc}). Nothing was run; {fix}") from exc
    stored = study.direction.name.lower()
    if stored != direction:
        raise ParamsError("search.study_name", f"study {name!r} is stored to {stored} and this search's monitor "
                          f"wants to {direction}; use another study_name, or a monitor whose mode matches the study")
    return study


def _creation_race(exc: BaseException) -> bool:
    """Whether ``exc`` is another worker creating the same study or schema at the same moment
    (a unique constraint, or SQLite's lock), which a moment later is gone."""
    text = f"{type(exc).__name__}: {exc}"
    return any(sign in text for sign in ("IntegrityError", "UNIQUE constraint", "already exists", "database is locked"))


def _shown(storage: Any) -> str:
    """A storage for an error message: a URL with any password hidden."""
    if isinstance(storage, str):
        head, sep, tail = storage.partition("@")
        if sep and ":" in head.split("//")[-1]:
            return repr(head.rsplit(":", 1)[0] + ":***@" + tail)
        return repr(storage)
    return type(storage).__name__
