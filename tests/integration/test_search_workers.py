"""Search workers as real processes: a trial killed mid-epoch, and many workers on one study.

Each test runs ``search_worker.py`` (a digits plan searched over the learning rate: 6 batches x
3 epochs = 18 updates a trial) in child processes, each with a hard timeout:

- a worker SIGKILLed in the middle of a trial (mid-epoch), then the same command run again
  (SQLite and ``JournalStorage``): the same outcomes as an uninterrupted search, the killed trial
  resumed from its run's LAST, each run written once and bit-identical to the uninterrupted run's
  (LAST and BEST);
- three workers started together on one study (SQLite and ``JournalStorage``): every trial run
  once by one worker, every run written once;
- three workers on a budget of two trials: a trial asked past the budget is discarded, never
  trained;
- two workers on a PostgreSQL study (``NNX_DEEP=1``), the server started by the test.

PostgreSQL recipe
-----------------
The server runs as the ``postgres`` user when the tests run as root (PostgreSQL refuses root; its
folder is then a ``mktemp -d /tmp/nnx-pg-XXXX`` owned by ``postgres``, since pytest's base
temporary folder is private to root), and as the current user otherwise (under ``tmp_path``)::

    D=$(mktemp -d /tmp/nnx-pg-XXXX); chmod 755 "$D"; mkdir "$D/data" "$D/sock"
    chown -R postgres: "$D"                      # as root only; then prefix each command below
    AS="runuser -u postgres --"                  # with $AS (empty when not root)
    $AS /usr/local/bin/initdb -D "$D/data" -U nnx --auth=trust -E UTF8
    $AS /usr/local/bin/pg_ctl -D "$D/data" -l "$D/server.log" -w -t 60 \\
        -o "-k $D/sock -p $PORT -c listen_addresses=''" start
    # study storage: postgresql+psycopg2://nnx@/postgres?host=$D/sock&port=$PORT
    # (the test makes Optuna's tables first: optuna.storages.RDBStorage(URL), then starts the workers)
    $AS /usr/local/bin/pg_ctl -D "$D/data" -m fast -w -t 60 stop

The server listens on its unix socket only (no TCP); ``PORT`` is a free port, which names the
socket file. The driver: ``pip install psycopg2-binary`` (the tests skip without it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import nnx_api as nnx

SCRIPT = Path(__file__).with_name("search_worker.py")
pytestmark = pytest.mark.timeout(600)
DEEP = os.environ.get("NNX_DEEP") == "1"
UPDATES = 18  # per trial: 6 batches x 3 epochs
BATCHES = 6
KILL_AFTER = 45  # trial 2's 9th update (epoch 1, batch 3): in a trial, mid-epoch, past a mid-epoch LAST (commit_every 2)
CHILD_TIMEOUT = 240
PG_BIN = Path("/usr/local/bin")


# ---------------------------------------------------------------------------------- helpers
def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "NNX_PROGRESS": "0", "PYTHONUNBUFFERED": "1",
            "PYTHONWARNINGS": "ignore"}


class Worker:
    """One ``search_worker.py`` process; its log (stdout and stderr) goes to a file."""

    def __init__(self, tmp: Path, name: str, root: Path, storage: str, study: str, trials: int, *extra: str) -> None:
        self.log_path, self.out = tmp / f"{name}.log", tmp / f"{name}.json"
        args = [str(root), storage, study, str(trials), "--out", str(self.out), *extra]
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen([sys.executable, str(SCRIPT), *args], stdout=log, stderr=subprocess.STDOUT,
                                         text=True, env=env(), cwd=SCRIPT.parent)

    def wait(self) -> int:
        try:
            return self.proc.wait(timeout=CHILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"worker ran past {CHILD_TIMEOUT} s:\n{self.log}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    @property
    def result(self) -> dict:
        return json.loads(self.out.read_text())

    def trials_logged(self, what: str) -> list[int]:
        """The trial numbers this worker's log says it ``what`` (started, resumed, completed, discarded)."""
        pid = self.proc.pid
        pattern = rf"^search \S+ \[[^\]]*:{pid}\]: trial (\d+) {what}\b"
        return sorted(int(m) for m in re.findall(pattern, self.log, flags=re.M))


def run(tmp: Path, name: str, *args: str) -> Worker:
    worker = Worker(tmp, name, *args)
    worker.wait()
    return worker


def with_tables(storage: str) -> str:
    """The database storage with Optuna's tables made (no study): workers that open a new database
    file together race to make them, which ``open_study`` retries
    (``test_workers_started_together_on_a_new_sqlite_file_all_open_it``); these tests are about the trials."""
    if not storage.startswith("journal:"):
        import optuna

        optuna.storages.RDBStorage(storage).remove_session()
    return storage


def together(tmp: Path, n: int, root: Path, storage: str, study: str, trials: int, *extra: str) -> list[Worker]:
    """``n`` workers started at once, searching from the same moment (a barrier after their imports)."""
    barrier = ["--barrier", str(tmp / f"barrier-{study}"), "--barrier-count", str(n), *extra]
    workers: list[Worker] = []
    try:
        for i in range(n):
            workers.append(Worker(tmp, f"{study}-w{i}", root, storage, study, trials, *barrier))
        for w in workers:
            assert w.wait() == 0, w.log
    finally:
        for w in workers:
            w.stop()
    return workers


def run_folders(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")}


def without(outcomes: list[dict], *keys: str) -> list[dict]:
    return [{k: v for k, v in o.items() if k not in keys} for o in outcomes]


def storage_url(kind: str, tmp: Path, name: str) -> str:
    return f"sqlite:///{tmp / name}.db" if kind == "sqlite" else f"journal:{tmp / name}.journal"


def load_trials(storage: str, study: str) -> list:
    import optuna
    from optuna.storages.journal import JournalFileBackend

    if storage.startswith("journal:"):
        storage = optuna.storages.JournalStorage(JournalFileBackend(storage.removeprefix("journal:")))
    return optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)


# ---------------------------------------------------------------------------------- a killed trial
@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted search of four trials (SQLite)."""
    tmp = tmp_path_factory.mktemp("reference")
    root = tmp / "runs"
    w = run(tmp, "ref", root, storage_url("sqlite", tmp, "ref"), "s1", "4", "--commit-every", "2")
    assert w.proc.returncode == 0, w.log
    return root, w.result


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_trial_killed_mid_epoch_is_resumed_by_the_same_command_bit_identical(tmp_path, reference, kind):
    ref_root, ref = reference
    assert len({o["run_id"] for o in ref["outcomes"]}) == 4
    assert [o["updates"] for o in ref["outcomes"]] == [UPDATES] * 4 and [o["state"] for o in ref["outcomes"]] == ["completed"] * 4
    killed_trial = (KILL_AFTER - 1) // UPDATES
    root, storage = tmp_path / "runs", storage_url(kind, tmp_path, "study")
    command = (root, storage, "s1", "4", "--commit-every", "2", "--kill-after", str(KILL_AFTER))

    first = run(tmp_path, "killed", *command)
    assert first.proc.returncode == -9, first.log  # died by SIGKILL
    marker = tmp_path / "killed-s1"  # beside ROOT: the kill happened, at this update of the trial
    assert marker.exists(), first.log
    at = int(marker.read_text())
    assert 0 < at < UPDATES and at % BATCHES != 0, f"the kill must land inside a trial, mid-epoch (update {at})"
    assert first.trials_logged("started") == list(range(killed_trial + 1))
    assert first.trials_logged("completed") == list(range(killed_trial))
    assert not first.out.exists()
    # what the kill left: the killed trial's run, with a LAST short of its end that the rerun must go on from
    left = {rid: nnx.NNCheckpoint.resume_point(rid, "last", root) for rid in run_folders(root)}
    assert len(left) == killed_trial + 1 and all(point is not None for point in left.values()), left
    cut = [rid for rid, point in left.items() if point["committed_updates"] != UPDATES]
    assert len(cut) == 1 and 0 < left[cut[0]]["committed_updates"] < at, left

    second = run(tmp_path, "rerun", *command)
    assert second.proc.returncode == 0, second.log
    got = second.result
    # the same trials as the uninterrupted search (its runs are another study's: other run ids)
    assert without(got["outcomes"], "worker", "run_id") == without(ref["outcomes"], "worker", "run_id")
    assert got["resumed"] == [killed_trial] and got["ran"] == list(range(killed_trial, 4))
    assert second.trials_logged("resumed from its LAST") == [killed_trial]
    assert second.trials_logged("started") == list(range(killed_trial + 1, 4))
    assert second.trials_logged("completed") == list(range(killed_trial, 4))
    assert marker.read_text() == f"{at}\n"  # killed once only

    ids = [o["run_id"] for o in got["outcomes"]]
    assert ids[killed_trial] == cut[0] and set(ids[: killed_trial + 1]) == set(left)  # went on in the run it left
    assert len(set(ids)) == 4 and run_folders(root) == set(ids)  # one run per trial, each written once
    for mine_id, theirs_id in zip(ids, (o["run_id"] for o in ref["outcomes"]), strict=True):  # bit-identical to the uninterrupted runs
        for tag in ("last", "best"):
            mine = nnx.NNCheckpoint.resume_point(mine_id, tag, root)
            theirs = nnx.NNCheckpoint.resume_point(theirs_id, tag, ref_root)
            assert mine is not None and theirs is not None
            assert mine["checkpoint_id"] == theirs["checkpoint_id"], (mine_id, tag)
            assert mine["committed_updates"] == theirs["committed_updates"] == UPDATES


# ---------------------------------------------------------------------------------- many workers
def check_shared(workers: list[Worker], root: Path, storage: str, study: str, trials: int) -> None:
    """Every trial run once by one worker, every run written once, each worker's log naming its trials."""
    frozen = load_trials(storage, study)
    discarded = [t for t in frozen if t.user_attrs.get("discarded")]
    counted = [t for t in frozen if not t.user_attrs.get("discarded")]
    assert len(counted) == trials, [(t.number, t.state.name) for t in frozen]
    assert all(t.state.name == "COMPLETE" for t in counted), [(t.number, t.state.name) for t in counted]
    for t in discarded:  # asked past the budget: told failed, never trained
        assert t.state.name == "FAIL" and "run_id" not in t.user_attrs and "attempt_id" not in t.user_attrs, t.user_attrs

    ran = [w.result["ran"] for w in workers]
    assert sorted(n for r in ran for n in r) == sorted(t.number for t in counted)  # each once: no overlap
    assert sum(bool(r) for r in ran) >= 2, f"the workers must share the study: {ran}"
    run_ids = [t.user_attrs["run_id"] for t in counted]
    assert len(set(run_ids)) == trials and run_folders(root) == set(run_ids)  # every run written once
    for w, mine in zip(workers, ran, strict=True):
        result = w.result
        assert result["resumed"] == [] and result["asked"] == len(mine)
        assert {o["number"] for o in result["outcomes"]} <= {t.number for t in counted}  # no discarded one reported
        assert w.trials_logged("started") == mine == w.trials_logged("completed"), w.log
        assert w.trials_logged("resumed from its LAST") == []
        names = {t.user_attrs["worker"] for t in counted if t.number in mine}
        assert all(n.endswith(f":{w.proc.pid}") for n in names), (names, w.proc.pid)
    assert sorted(n for w in workers for n in w.trials_logged("discarded")) == sorted(t.number for t in discarded)


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_three_workers_run_every_trial_once_and_write_every_run_once(tmp_path, kind):
    root, storage = tmp_path / "runs", storage_url(kind, tmp_path, "study")
    workers = together(tmp_path, 3, root, with_tables(storage), "par", 9)
    check_shared(workers, root, storage, "par", 9)


def test_workers_started_together_on_a_new_sqlite_file_all_open_it(tmp_path):
    root, storage = tmp_path / "runs", storage_url("sqlite", tmp_path, "study")
    workers = together(tmp_path, 3, root, storage, "fresh", 3)
    check_shared(workers, root, storage, "fresh", 3)


def test_asks_past_the_budget_are_discarded_never_trained(tmp_path):
    """Three workers pass their budget check (2 trials) before any trial exists, then ask (the
    storage makes no trial until all three are asking: ``--ask-together``): the third trial asked,
    number 2, is discarded."""
    root, storage = tmp_path / "runs", storage_url("sqlite", tmp_path, "study")
    workers = together(tmp_path, 3, root, with_tables(storage), "tight", 2, "--ask-together")
    check_shared(workers, root, storage, "tight", 2)
    discarded = [t.number for t in load_trials(storage, "tight") if t.user_attrs.get("discarded")]
    assert discarded == [2], discarded
    for w in workers:
        assert len(w.result["outcomes"]) <= 2 and w.result["stop_reason"] == "budget"


# ---------------------------------------------------------------------------------- PostgreSQL
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def postgres(tmp_path):
    """A PostgreSQL server of this test's own on a unix socket (the recipe in the module docstring);
    the study storage URL."""
    if not DEEP:
        pytest.skip("NNX_DEEP=1: a PostgreSQL server started by the test")
    missing = [b for b in ("initdb", "pg_ctl") if not (PG_BIN / b).exists()]
    if missing:
        pytest.skip(f"PostgreSQL's {', '.join(missing)} not in {PG_BIN}")
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pytest.skip("no PostgreSQL driver for SQLAlchemy: pip install psycopg2-binary")
    as_user: list[str] = []
    if os.geteuid() == 0:  # postgres refuses root: run it as the postgres user, in a folder it can reach
        runuser = shutil.which("runuser")
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            runuser = None
        if runuser is None:
            pytest.skip("running as root, and PostgreSQL refuses root: no 'postgres' user or runuser to run it as")
        as_user = [runuser, "-u", "postgres", "--"]
        folder = Path(tempfile.mkdtemp(prefix="nnx-pg-", dir="/tmp"))
        folder.chmod(0o755)
    else:
        folder = tmp_path / "pg"
        folder.mkdir()
    data, sock, port = folder / "data", folder / "sock", free_port()
    data.mkdir()
    sock.mkdir()
    if as_user:
        shutil.chown(folder, "postgres", "postgres")
        for p in (data, sock):
            shutil.chown(p, "postgres", "postgres")

    def pg(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*as_user, *args], capture_output=True, text=True, timeout=120)

    started = False
    try:
        done = pg(str(PG_BIN / "initdb"), "-D", str(data), "-U", "nnx", "--auth=trust", "-E", "UTF8")
        assert done.returncode == 0, done.stdout + done.stderr
        done = pg(str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"), "-w", "-t", "60",
                  "-o", f"-k {sock} -p {port} -c listen_addresses=''", "start")
        started = done.returncode == 0
        assert started, done.stdout + done.stderr + (folder / "server.log").read_text()
        yield f"postgresql+psycopg2://nnx@/postgres?host={sock}&port={port}"
    finally:
        if started:
            pg(str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop")
        if as_user:
            shutil.rmtree(folder, ignore_errors=True)


def test_two_workers_share_a_postgresql_study(tmp_path, postgres):
    root = tmp_path / "runs"
    workers = together(tmp_path, 2, root, with_tables(postgres), "pg", 6)
    check_shared(workers, root, postgres, "pg", 6)
