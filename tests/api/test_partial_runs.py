"""A run whose LAST is mid-epoch, as readers see it: ``NNRun.load`` (``idps`` the complete epochs,
``partial`` the epoch in progress), ``nnx runs list / show / verify``, and the journal readers.

The runs are real: a tiny ``NNModel`` trains two epochs of three and fails as the third begins;
then the mid-epoch commits of epoch 2 are written by hand through ``nnx_core.commit.commit_epoch``
in the format the training session writes (the history's first records of the epoch → LAST naming
its ``position``, a blob holding the same position), and later the epoch's end.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest

from nnx_core.commit import LAST, POSITION, EpochCommit, RunFiles, commit_epoch, read_history
from nnx_core.eager_history import EagerHistory
from nnx_core.journal import JournalWriter
from nnx_adapters.storage.fs import FileStorage
import nnx_api as nnx
from nnx_api.cli import main
from nnx_api.runs.journal import epoch_summaries, migrate_history
from nnx_api.runs.partial import PartialEpoch
from nnx_api.runs.payload import SavedState, decode_payload

from tests.api.tiny import batches, tiny_data

BATCHES = 6  # batches (and updates, and records) an epoch: 48 rows in batches of 8


class FailAt(nnx.Callback):
    """Fails the attempt as epoch ``at`` begins (LAST stays at the epoch before)."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_epoch_begin(self, ctx: Any) -> None:
        if ctx.epoch == self.at:
            raise RuntimeError(f"stopped before epoch {self.at}")


def train(root: Path, history: Any = None) -> str:
    """Epochs 0 and 1 of a three-epoch run committed; the attempt failed as epoch 2 began."""
    x, y = tiny_data()
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
    params = nnx.NNTrainParams(n_epochs=3, seed=0, train_loader=batches(x, y, 8), val_loader=batches(x, y, 24), progress=False)
    with pytest.raises(RuntimeError, match="stopped before epoch 2"):
        model.train(params, root=root, callbacks=[FailAt(2)], history=history)
    (rid,) = [p.name for p in root.iterdir() if not p.name.startswith(".")]
    return rid


@pytest.fixture(scope="module")
def eager_base(tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("partial") / "runs"
    return root, train(root)


@pytest.fixture
def run(eager_base, tmp_path) -> tuple[Path, str, RunFiles]:
    root, rid = eager_base
    shutil.copytree(root, tmp_path / "runs")
    return tmp_path / "runs", rid, RunFiles(FileStorage(tmp_path / "runs"), rid)


def epoch2(files: RunFiles, upto: int, first: int = 0) -> list[Any]:
    """Records ``first``..``upto``-1 of epoch 2: epoch 1's, moved one epoch on (iter_idx counting on)."""
    last = files.read_tag(LAST)
    done = [r for r in read_history(files, last) if r.epoch_idx < 2]
    one = [r for r in done if r.epoch_idx == 1]
    return [attrs.evolve(r, epoch_idx=2, iter_idx=r.iter_idx + len(one)) for r in one[first:upto]]


def commit_partial(
    files: RunFiles, held: int, *, total: int | None = BATCHES, step: Any = None, blob_held: int | None = None
) -> None:
    """A mid-epoch commit of epoch 2 holding its first ``held`` records, as the session writes it."""
    last = files.read_tag(LAST)
    before = read_history(files, last)
    complete = [r for r in before if r.epoch_idx < 2]
    payload = decode_payload(files.read_blob(last.blobs["state"]), "LAST")
    seen = held if blob_held is None else blob_held
    state = {"epoch": 2, "batches": seen, "samples": 8 * seen, "updates": seen, "records": seen, "epoch_batches": BATCHES}
    updates = last.meta["update_count"] - last.meta.get(POSITION, {}).get("updates", 0)  # the run's, as epoch 2 began
    payload = attrs.evolve(payload, epoch=2, position=SavedState(state), update_count=updates + held)
    position = {"records": held, "batches": held, "updates": held, "samples": 8 * held, "epoch_batches": BATCHES,
                "epoch_updates": total}
    history = None if step is not None else EagerHistory(complete + epoch2(files, held)).render()
    commit_epoch(files, EpochCommit(
        epoch=2, payload=payload.encoder(), history=history, previous_history=EagerHistory(before).render(),
        history_step=step, meta={"update_count": updates + held, POSITION: position},
    ))


def cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_load_keeps_the_epoch_in_progress_apart_from_the_complete_epochs(run):
    root, rid, files = run
    before = nnx.NNRun.load(rid, root)
    assert before.partial is None and {r.epoch_idx for r in before.idps} == {0, 1}
    commit_partial(files, 3)
    loaded = nnx.NNRun.load(rid, root)
    assert loaded.idps == before.idps and set(loaded.epochs) == {0, 1}  # the complete epochs only
    assert isinstance(loaded.partial, PartialEpoch) and loaded.partial.epoch == 2
    assert loaded.partial.records == tuple(epoch2(files, 3)) and loaded.partial.updates == 3
    assert loaded.partial.position.epoch_updates == BATCHES and loaded.partial.position.records == 3
    assert loaded.partial.describe() == "epoch 2 in progress: 3 of 6 updates committed"
    assert list(loaded.committed_records()) == list(before.idps)
    assert list(loaded.committed_records(partial=True)) == [*before.idps, *epoch2(files, 3)]
    assert loaded.epoch_record(2) is None and loaded.epoch_record(1) == before.epochs[1]
    assert nnx.NNCheckpoint.resume_point(rid, "last", root)["completed_epoch"] == 1
    assert nnx.NNCheckpoint.resume_point(rid, "last", root)["position"]["updates"] == 3
    attempt = loaded.attempt()
    assert attempt["last_committed_epoch"] == 1 and attempt["last_committed_position"]["epoch"] == 2


def test_records_of_the_epoch_past_the_position_are_not_shown(run):
    """A crash between the next commit's history and its LAST: idps.csv holds more of epoch 2."""
    root, rid, files = run
    commit_partial(files, 2)
    data = files.storage.read(files.history)
    files.storage.write(files.history, EagerHistory(read_history(files, files.read_tag(LAST)) + epoch2(files, 5, 2)).render())
    assert len(files.storage.read(files.history)) > len(data)
    assert nnx.NNRun.load(rid, root).partial.records == tuple(epoch2(files, 2))


def test_the_epoch_end_makes_the_epoch_complete(run):
    root, rid, files = run
    commit_partial(files, 2)
    commit_partial(files, 4)
    last = files.read_tag(LAST)
    before = read_history(files, last)
    full = before + epoch2(files, BATCHES, 4)
    commit_epoch(files, EpochCommit(epoch=2, payload=files.read_blob(last.blobs["state"]),
                                    history=EagerHistory(full).render(), meta={"update_count": 1}))
    loaded = nnx.NNRun.load(rid, root)
    assert loaded.partial is None and loaded.idps == tuple(full) and set(loaded.epochs) == {0, 1, 2}


def test_show_says_how_far_the_epoch_in_progress_is_committed(run, capsys):
    root, rid, files = run
    commit_partial(files, 3)
    code, out = cli(capsys, "runs", "show", rid[:8], "--root", str(root))
    assert code == 0 and "\nepoch 2 in progress: 3 of 6 updates committed\n" in out
    assert "(LAST epoch 2, mid-epoch: 3 of 6 updates committed)" in out
    table = out.split("epochs:\n", 1)[1].splitlines()[1:]
    assert [line.split()[0] for line in table] == ["0", "1"]  # the epoch in progress is no row
    commit_partial(files, 4, total=None)
    # the epoch's updates not known (a masked window is no update): its batches are
    assert "\nepoch 2 in progress: 4 updates committed, 4 of 6 batches\n" in cli(capsys, "runs", "show", rid, "--root", str(root))[1]


def test_list_counts_complete_epochs_and_notes_the_epoch_in_progress(run, capsys):
    root, rid, files = run
    before = cli(capsys, "runs", "list", "--root", str(root))[1].splitlines()[1].split()
    commit_partial(files, 3)
    code, out = cli(capsys, "runs", "list", "--root", str(root))
    row = out.splitlines()[1]
    assert code == 0 and row.split()[4] == before[4] == "2"  # EPOCHS: committed whole
    assert row.endswith("failed (epoch 2 in progress: 3 of 6 updates committed)")


def test_verify_checks_a_mid_epoch_last_and_reports_a_history_lacking_its_records(run, capsys):
    root, rid, files = run
    commit_partial(files, 3)
    code, out = cli(capsys, "runs", "verify", rid, "--root", str(root))
    assert code == 0 and f"run {rid}: OK (LAST epoch 2, mid-epoch: 3 of 6 updates committed, " in out
    committed = read_history(files, files.read_tag(LAST))
    files.storage.write(files.history, EagerHistory(committed[:-1]).render())
    code, out = cli(capsys, "runs", "verify", rid, "--root", str(root))
    lacking = "PROBLEM: the history holds 2 rows of epoch 2, but LAST committed the epoch up to its first 3"
    assert code == 1 and lacking in out
    longer = EagerHistory(committed + epoch2(files, 5, 3)).render()  # the next commit's records, never committed
    assert longer.startswith(EagerHistory(committed).render())
    files.storage.write(files.history, longer)
    code, out = cli(capsys, "runs", "verify", rid, "--root", str(root))
    assert code == 0 and f"note: {len(longer) - len(EagerHistory(committed).render())} byte(s) of history newer than LAST" in out


def test_verify_reports_a_blob_whose_position_is_not_lasts(run, capsys):
    root, rid, files = run
    commit_partial(files, 3, blob_held=2)
    code, out = cli(capsys, "runs", "verify", rid, "--root", str(root))
    differ = "(batches, records, samples, updates)"
    assert code == 1 and f"PROBLEM: the blob of tag 'last' holds another mid-epoch position than its manifest names {differ}" in out


def test_an_interrupted_mid_epoch_run_is_continued_inside_its_epoch(run, capsys):
    root, rid, files = run
    commit_partial(files, 3)
    record = files.storage.read(files.attempt).replace(b'"failed"', b'"running"')
    files.storage.write(files.attempt, record)
    out = cli(capsys, "runs", "verify", rid, "--root", str(root))[1]
    assert "resume='auto' continues it inside epoch 2, after its update 3" in out


def test_migrating_a_mid_epoch_run_to_a_journal_keeps_its_epoch_in_progress(run):
    root, rid, files = run
    commit_partial(files, 3)
    before = nnx.NNRun.load(rid, root)
    assert migrate_history(rid, root) == len(before.idps) + 3
    assert not files.storage.exists(files.history)
    after = nnx.NNRun.load(rid, root)
    assert after.idps == before.idps and after.partial == before.partial
    writer = JournalWriter(files.storage, rid, nnx.HistoryJournal(), last_epoch=2, in_epoch=3)
    assert writer.manifest.open_records == 3 and writer.open == list(before.partial.records)  # the epoch goes on


def test_a_journal_run_with_a_mid_epoch_last_reads_the_same(tmp_path, capsys):
    root = tmp_path / "runs"
    rid = train(root, history=nnx.HistoryJournal(retention=100, chunk_size=4))
    files = RunFiles(FileStorage(root), rid)
    writer = JournalWriter(files.storage, rid, nnx.HistoryJournal(retention=100, chunk_size=4), last_epoch=1)
    before = nnx.NNRun.load(rid, root)
    new = [attrs.evolve(r, epoch_idx=2, iter_idx=r.iter_idx + BATCHES) for r in before.idps if r.epoch_idx == 1][:3]
    writer.extend(new, closes=False)
    commit_partial(files, 3, step=writer)
    loaded = nnx.NNRun.load(rid, root)
    assert loaded.idps == before.idps and loaded.partial.records == tuple(new)
    assert loaded.epoch_record(2) is None and loaded.epoch_record(1) == before.epochs[1]  # read from the journal
    assert [row["epoch"] for row in epoch_summaries(files.storage, rid, files.read_tag(LAST))] == [0, 1]
    code, out = cli(capsys, "runs", "verify", rid, "--root", str(root))
    assert code == 0, out
    assert "epoch 2 in progress: 3 of 6 updates committed" in cli(capsys, "runs", "show", rid, "--root", str(root))[1]
