"""``history=HistoryJournal(...)``: layout, what callbacks see, resume and lineage, readers, export,
migration, corruption, and bounded memory over a 2,500-epoch run (tracemalloc, not timings)."""

from __future__ import annotations

import gc
import itertools
import json
import os
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from nnx_core.commit import LAST, RunFiles
from nnx_core.eager_history import EagerHistory
from nnx_core.journal import JournalWriter
from nnx_core.journal_format import JournalFiles, encode_record
from nnx_core.journal_reader import JournalReader
from nnx_core.records import IterationDataPoint
from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.storage.memory import MemoryStorage
import nnx_api as nnx
import nnx_api.launch
import nnx_api.runs.run
from nnx_api.cli import main as cli

from tests.api.tiny import batches, tiny_data

N_EPOCHS = 5
SPEC = nnx.HistoryJournal(retention=6, chunk_size=2)  # 3 batches an epoch: chunks split epochs


def build(n_epochs: int = N_EPOCHS, **kw):
    x, y = tiny_data()
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
    params = nnx.NNTrainParams(
        n_epochs=n_epochs, seed=0, train_loader=batches(x, y, 16), val_loader=batches(x, y, 24), progress=False, **kw
    )
    return model, params


def train(root, n_epochs=N_EPOCHS, history=SPEC, callbacks=None, **kw):
    model, params = build(n_epochs, **kw)
    return model, model.train(params, root=root, history=history, callbacks=callbacks)


def keys(records) -> list[bytes]:
    return [encode_record(r) for r in records]


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """The same configuration trained with a journal and eagerly (its own root each)."""
    base = tmp_path_factory.mktemp("journal")
    _, journal = train(base / "journal")
    _, eager = train(base / "eager", history=None)
    return journal, eager


# -- the spec -------------------------------------------------------------------------------------


def test_spec_defaults_and_refusals():
    assert nnx.HistoryJournal().retention == 1000 and nnx.HistoryJournal().chunk == 250
    assert nnx.HistoryJournal(retention=40).chunk == 40
    assert nnx.HistoryJournal(retention=40, chunk_size=8).chunk == 8
    for bad in ({"retention": 0}, {"retention": True}, {"retention": 2.0}, {"retention": 4, "chunk_size": 5},
                {"chunk_size": 0}):
        with pytest.raises(nnx.ParamsError):
            nnx.HistoryJournal(**bad)


# -- layout and readers ---------------------------------------------------------------------------


def test_journal_run_layout_readers_and_the_eager_csv_layout(both, tmp_path):
    journal, eager = both
    assert journal.id == eager.id  # the history format is not part of the run id
    assert not (journal.path / "idps.csv").exists()
    folder = journal.path / "history"
    names = sorted(p.name for p in folder.iterdir())
    assert names == [f"chunk-{i:08d}.jsonl" for i in range(10)] + ["epochs.jsonl", "index.jsonl", "journal.json"]
    manifest = json.loads((folder / "journal.json").read_text())
    assert manifest["format"] == "nnx.history-journal" and manifest["version"] == 1
    assert (manifest["records"], manifest["chunks"], manifest["epochs"], manifest["last_epoch"]) == (15, 10, 5, 4)
    assert manifest["index_bytes"] == (folder / "index.jsonl").stat().st_size
    assert len((folder / "epochs.jsonl").read_text().splitlines()) == N_EPOCHS

    every = list(nnx.iter_history(journal.id, journal.root))
    assert keys(every) == keys(eager.idps) and len(every) == 15
    loaded = nnx.NNRun.load(journal.id, journal.root)
    assert keys(loaded.idps) == keys(every[-SPEC.retention :])  # the last `retention` records
    assert loaded.best() == eager.best() and loaded.best() is not None

    out = tmp_path / "history.csv"
    assert nnx.export_history_csv(journal.id, out, journal.root) == 15
    assert out.read_bytes() == (eager.path / "idps.csv").read_bytes()  # byte for byte the eager layout
    assert nnx.export_history_csv(eager.id, tmp_path / "eager.csv", eager.root) == 15
    assert (tmp_path / "eager.csv").read_bytes() == out.read_bytes()


def test_cli_show_and_verify_read_the_journal(both, capsys):
    journal, _ = both
    assert cli(["runs", "show", journal.id, "--root", str(journal.root)]) == 0
    shown = capsys.readouterr().out
    epochs = shown.split("\nepochs:\n")[-1].splitlines()[1:]
    assert [line.split()[0] for line in epochs] == [str(e) for e in range(N_EPOCHS)]  # beyond the window too
    assert "best: epoch" in shown
    assert cli(["runs", "verify", journal.id, "--root", str(journal.root)]) == 0
    assert "OK" in capsys.readouterr().out


# -- what callbacks see ---------------------------------------------------------------------------


class Window(nnx.Callback):
    def __init__(self):
        self.seen: list[tuple[int, list[int]]] = []
        self.view = None

    def on_epoch_end(self, ctx):
        self.view = ctx.idps
        self.seen.append((len(ctx.idps), [r.iter_idx for r in ctx.idps]))


class Full(Window):
    history_access = "full"

    def on_train_begin(self, ctx):
        self.begin_len = len(ctx.idps)


def test_callbacks_see_a_read_only_window_or_declare_full_access(tmp_path):
    window, full = Window(), Full()
    train(tmp_path, callbacks=[window, full])
    assert [n for n, _ in window.seen] == [3, 6, 6, 6, 6]  # live, never more than retention
    assert window.seen[-1][1] == list(range(9, 15))
    assert isinstance(window.view, Sequence) and not isinstance(window.view, list)
    with pytest.raises(TypeError):
        window.view[0] = window.view[1]  # type: ignore[index]
    assert not hasattr(window.view, "append")
    assert [ids for _, ids in full.seen] == [list(range(3 * (e + 1))) for e in range(N_EPOCHS)]
    assert full.view[0].iter_idx == 0 and full.view[-1].iter_idx == 14 and len(full.view[2:11]) == 9
    assert full.begin_len == 0


def test_lr_monitor_is_bounded_by_the_journal_unless_told_otherwise(tmp_path):
    # update_history is filled on the optimizer_update clock only
    sched = nnx.NNSchedulerParams(kind=nnx.Schedulers.STEP, step_size=1, factor=0.5, clock="optimizer_update")
    bounded, unbounded, eager = nnx.LRMonitor(), nnx.LRMonitor(bounded=False), nnx.LRMonitor()
    train(tmp_path / "j", n_epochs=8, history=nnx.HistoryJournal(retention=3), callbacks=[bounded, unbounded], scheduler=sched)
    train(tmp_path / "e", n_epochs=8, history=None, callbacks=[eager], scheduler=sched)
    assert len(unbounded.history) == 8 and eager.history == unbounded.history
    assert bounded.history == unbounded.history[-3:]
    assert len(eager.update_history) == len(unbounded.update_history) == 8 * 3  # 3 batches an epoch
    assert bounded.update_history == unbounded.update_history[-3 * 3 :]
    with pytest.raises(nnx.ParamsError, match="LRMonitor.bounded"):
        nnx.LRMonitor(bounded="no")


def test_plain_function_callbacks_are_refused_before_anything_is_written(tmp_path):
    with pytest.raises(nnx.ParamsError, match="plain-function"):
        train(tmp_path / "runs", callbacks=[lambda idps: None])
    with pytest.raises(nnx.ParamsError, match="history"):
        train(tmp_path / "runs", history={"retention": 10})
    assert not (tmp_path / "runs").exists()


# -- failures, resume and lineage -----------------------------------------------------------------


def _chunks(run_path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (run_path / "history").glob("chunk-*")}


class StopAt(nnx.Callback):
    """Fail the attempt at one epoch's end (before it commits): epochs < ``epoch`` stay committed."""

    def __init__(self, epoch):
        self.epoch = epoch

    def on_epoch_end(self, ctx):
        if ctx.epoch == self.epoch:
            raise RuntimeError("stop")


def test_failed_last_republishes_the_previous_manifest_and_resume_continues(tmp_path, monkeypatch, both):
    reference, _ = both
    root = tmp_path / "runs"
    real = RunFiles.write_tag

    def failing(self, manifest):
        if manifest.tag == LAST and manifest.epoch == 2:
            raise OSError(28, "injected ENOSPC on LAST")
        return real(self, manifest)

    monkeypatch.setattr(RunFiles, "write_tag", failing)
    with pytest.raises(OSError, match="LAST"):
        train(root, resume="auto")
    monkeypatch.setattr(RunFiles, "write_tag", real)
    rid = reference.id
    manifest = json.loads((root / rid / "history" / "journal.json").read_text())
    assert (manifest["last_epoch"], manifest["records"]) == (1, 6)  # epoch 2's manifest was taken back
    index = root / rid / "history" / "index.jsonl"
    assert index.stat().st_size > manifest["index_bytes"]  # appended, never published: ignored
    committed = _chunks(root / rid)
    assert keys(nnx.iter_history(rid, root)) == keys(list(nnx.iter_history(rid, reference.root))[:6])

    _, run = train(root, resume="auto")  # continues the same run in place
    after = _chunks(run.path)
    kept = [name for name in committed if int(name[6:14]) < manifest["chunks"]]
    assert kept and all(after[name] == committed[name] for name in kept)  # published chunks never rewritten
    assert keys(nnx.iter_history(rid, root)) == keys(nnx.iter_history(rid, reference.root))
    assert cli(["runs", "verify", rid, "--root", str(root)]) == 0


def test_a_crash_between_manifest_and_last_leaves_an_ignored_tail(tmp_path, monkeypatch, both, capsys):
    reference, _ = both
    root = tmp_path / "runs"
    real = RunFiles.write_tag

    class Killed(BaseException):
        pass

    def killed(self, manifest):
        if manifest.tag == LAST and manifest.epoch == 3:
            raise Killed()  # the process dies after the manifest, before LAST: no rollback runs
        return real(self, manifest)

    monkeypatch.setattr(RunFiles, "write_tag", killed)
    monkeypatch.setattr(JournalWriter, "rollback", lambda self: None)
    with pytest.raises(Killed):
        train(root, resume="auto")
    monkeypatch.undo()
    rid = reference.id
    manifest = json.loads((root / rid / "history" / "journal.json").read_text())
    assert manifest["last_epoch"] == 3  # published, but LAST stayed at epoch 2
    loaded = nnx.NNRun.load(rid, root)
    assert max(r.epoch_idx for r in loaded.idps) == 2
    assert [r.epoch_idx for r in nnx.iter_history(rid, root)] == [e for e in range(3) for _ in range(3)]
    assert cli(["runs", "verify", rid, "--root", str(root)]) == 0
    assert "newer than LAST" in capsys.readouterr().out

    train(root, resume="auto")  # the tail is cut first (republished from LAST), then epochs 3, 4
    assert keys(nnx.iter_history(rid, root)) == keys(nnx.iter_history(rid, reference.root))
    assert _chunks(root / rid) == _chunks(reference.path)  # same chunks, each written once


def test_a_continuation_writes_its_own_chunks_and_readers_follow_the_lineage(tmp_path):
    root = tmp_path / "runs"
    _, parent = train(root, n_epochs=4)
    before = {p.name: p.read_bytes() for p in (parent.path / "history").iterdir()}
    _, child = train(root, n_epochs=3, resume_from_run_id=parent.id, resume_from_checkpoint="q2")
    assert child.id != parent.id
    assert {p.name: p.read_bytes() for p in (parent.path / "history").iterdir()} == before
    q2 = nnx.NNRun.load(parent.id, root).checkpoint("q2").epoch
    own = list(nnx.iter_history(child.id, root))
    assert sorted({r.epoch_idx for r in own}) == [q2 + 1, q2 + 2, q2 + 3]
    lineage = list(nnx.iter_history(child.id, root, lineage=True))
    assert [r.epoch_idx for r in lineage] == [e for e in range(q2 + 4) for _ in range(3)]
    assert keys(lineage[: 3 * (q2 + 1)]) == keys(list(nnx.iter_history(parent.id, root))[: 3 * (q2 + 1)])
    assert nnx.export_history_csv(child.id, tmp_path / "all.csv", root, lineage=True) == len(lineage)


def test_a_run_keeps_its_history_format_when_continued(tmp_path):
    root = tmp_path / "runs"
    with pytest.raises(RuntimeError):
        train(root, history=None, resume="auto", callbacks=[StopAt(2)])
    with pytest.raises(nnx.ParamsError, match="migrate_history"):
        train(root, resume="auto")


# -- corruption -----------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["missing chunk", "flipped byte", "edited index", "short index"])
def test_damaged_journals_raise_history_corruption(both, tmp_path, damage):
    import shutil

    journal, _ = both
    root = tmp_path / "runs"
    shutil.copytree(journal.root, root)
    folder = root / journal.id / "history"
    if damage == "missing chunk":
        (folder / "chunk-00000009.jsonl").unlink()
    elif damage == "flipped byte":
        chunk = folder / "chunk-00000003.jsonl"
        data = bytearray(chunk.read_bytes())
        data[10] ^= 1
        chunk.write_bytes(bytes(data))
    elif damage == "edited index":
        index = folder / "index.jsonl"
        index.write_text(index.read_text().replace('"records":2', '"records":3', 1))
    else:
        index = folder / "index.jsonl"
        index.write_bytes(index.read_bytes()[:-10])
    with pytest.raises(nnx.HistoryCorruptionError):
        list(nnx.iter_history(journal.id, root))
    assert cli(["runs", "verify", journal.id, "--root", str(root)]) == 1


# -- migration ------------------------------------------------------------------------------------


def test_migrate_an_eager_run_then_continue_it_with_a_journal(tmp_path, both):
    _, reference = both
    root = tmp_path / "runs"
    with pytest.raises(RuntimeError):
        train(root, history=None, resume="auto", callbacks=[StopAt(3)])
    rid = reference.id
    eager_records = keys(nnx.iter_history(rid, root))
    with FileStorage(root).lease(rid), pytest.raises(nnx.RunLeaseError):
        nnx.migrate_history(rid, root)
    assert nnx.migrate_history(rid, root, spec=SPEC) == 9
    assert not (root / rid / "idps.csv").exists()
    assert keys(nnx.iter_history(rid, root)) == eager_records
    assert nnx.migrate_history(rid, root) == 9  # idempotent
    with pytest.raises(nnx.ParamsError, match="journal"):
        train(root, history=None, resume="auto")
    train(root, resume="auto")
    assert keys(nnx.iter_history(rid, root)) == keys(reference.idps)


def test_migrate_refuses_an_uncommitted_tail_unless_discarded(tmp_path):
    root = tmp_path / "runs"
    _, run = train(root, n_epochs=2, history=None)
    files = RunFiles(FileStorage(root), run.id)
    rows = list(run.idps) + [IterationDataPoint(iter_idx=6, epoch_idx=2, batch_idx=0, lr=0.1,
                                                train_edp=run.idps[0].train_edp)]
    files.storage.write(files.history, EagerHistory(rows).render())  # a commit that never reached LAST
    with pytest.raises(nnx.ParamsError, match="discard_uncommitted"):
        nnx.migrate_history(run.id, root)
    assert nnx.migrate_history(run.id, root, discard_uncommitted=True) == 6


# -- memory ---------------------------------------------------------------------------------------


RETENTION = 25
PLATEAU = 3 * RETENTION  # epochs traced around each checkpoint of the run


class MemoryProbe(nnx.Callback):
    """Measures, with tracemalloc, what the run keeps alive (one record per epoch).

    Tracing everything for 2,500 epochs would be slow, so memory is traced in windows of
    ``PLATEAU`` epochs ending at epoch 1,000 and at 2,500: in each window the traced memory still
    held from NNx's own code (``nnx_core`` / ``nnx_api``: records, the window, the writer) is read
    every ``RETENTION`` epochs. A bounded history holds at epoch 2,500 what it held at epoch 1,000,
    point for point; an unbounded one grows by the same step every ``RETENTION`` epochs. ``len(ctx.idps)`` is checked at every epoch, and the live
    ``IterationDataPoint`` objects (``gc``) are counted at the end of each window.
    """

    def __init__(self, store: MemoryStorage | None, ends: tuple[int, ...]):
        self.store, self.ends = store, ends
        self.longest = 0
        self.samples: dict[int, list[int]] = {}
        self.live_records: dict[int, int] = {}

    def on_epoch_end(self, ctx):
        self.longest = max(self.longest, len(ctx.idps))
        if self.store is not None:
            self.store.log.clear()  # the crash model's operation log is not the run's memory
        for end in self.ends:
            offset = ctx.epoch - (end - PLATEAU)
            if offset == 0:
                gc.collect()
                tracemalloc.start()
            if 0 < offset <= PLATEAU and offset % RETENTION == 0:
                gc.collect()
                snap = tracemalloc.take_snapshot().filter_traces(
                    [tracemalloc.Filter(True, "*/nnx_core/*"), tracemalloc.Filter(True, "*/nnx_api/*")]
                )
                self.samples.setdefault(end, []).append(sum(t.size for t in snap.traces))
            if offset == PLATEAU:
                tracemalloc.stop()
                self.live_records[end] = sum(type(o) is IterationDataPoint for o in gc.get_objects())


def tiny_run(root, n_epochs, history, probe):
    torch.manual_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=3, output_dim=2, hidden_dims=(4,)), nnx.NNModelParams())
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 0, 1])
    params = nnx.NNTrainParams(n_epochs=n_epochs, train_loader=[(x, y)], progress=False, save_phase_checkpoints=False)
    return model.train(params, root=root, history=history, callbacks=[probe])


def test_memory_stays_bounded_over_2500_epochs(monkeypatch):
    """Bytes are the allocator's, so every bound is in units of what one retained record costs
    here, measured as a slope over two window sizes (retention 25 and 50, at epoch ~1,000)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    store = MemoryStorage()  # the crash model's store: no disk renames in the way of 2,500 commits
    monkeypatch.setattr(nnx_api.launch, "FileStorage", lambda root: store)
    monkeypatch.setattr(nnx_api.runs.run, "FileStorage", lambda root: store)
    try:
        probe = MemoryProbe(store, ends=(999, 2499))
        run = tiny_run("runs", 2500, nnx.HistoryJournal(retention=RETENTION), probe)
        wider = MemoryProbe(store, ends=(999,))
        tiny_run("runs-wider", 1000, nnx.HistoryJournal(retention=2 * RETENTION), wider)
    finally:
        torch.set_num_threads(threads)
    assert probe.longest == RETENTION and wider.longest == 2 * RETENTION
    early, late = probe.samples[999], probe.samples[2499]
    record = (wider.samples[999][-1] - early[-1]) / RETENTION  # bytes per retained record: the slope
    assert record > 0, (early, wider.samples)
    # 1,500 epochs on, at each point of the window traced (tracing starts mid-run, so what the run
    # allocated before shows only once replaced): not one record's worth more
    assert all(abs(b - a) < record for a, b in zip(early, late, strict=True)), (early, late, record)
    assert abs(probe.live_records[2499] - probe.live_records[999]) <= 2, probe.live_records  # records alive
    manifest = JournalReader.open(store, run.id, 2499).manifest
    assert manifest.records == 2500 and len(run.idps) == RETENTION

    # the same probe on an eager history sees what the journal avoids: a record more per epoch
    eager = MemoryProbe(store, ends=(PLATEAU,))
    tiny_run("runs", PLATEAU + 1, None, eager)
    grown = eager.samples[PLATEAU]
    if os.environ.get("NNX_REPORT") == "1":  # the numbers docs/history-journal.md quotes (pytest -s)
        print(f"\njournal traced bytes every {RETENTION} epochs: epoch ~1000 {early}, epoch ~2500 {late}; "
              f"retention {2 * RETENTION}: {wider.samples[999]}; {record:.0f} B per record; "
              f"live records {probe.live_records}; eager: {grown}")
    steps = [b - a for a, b in itertools.pairwise(grown)]
    assert all(step > RETENTION * record / 2 for step in steps), (grown, record)


def test_full_view_reads_old_records_from_chunks_lazily():
    store = MemoryStorage()
    spec = nnx.HistoryJournal(retention=3, chunk_size=2)
    writer = JournalWriter(store, "f" * 32, spec, last_epoch=None)
    full = writer.full_view()
    records = []
    for epoch in range(6):
        batch = [IterationDataPoint(iter_idx=2 * epoch + i, epoch_idx=epoch, batch_idx=i, lr=0.1,
                                    train_edp=nnx.EvaluationDataPoint(loss=float(epoch)))
                 for i in range(2)]
        records += batch
        writer.extend(batch)
        assert keys(full) == keys(records) and len(full) == len(records)
        assert keys(full[i] for i in range(len(full))) == keys(records)
        writer.commit()
        assert keys(full) == keys(records) and len(writer.window) <= 3
    assert keys(full[1:9:3]) == keys(records[1:9:3])
    assert [p for p in store.snapshot() if "chunk-" in p] == [JournalFiles("f" * 32).chunk(i) for i in range(6)]


def test_a_writer_retrying_after_a_rollback_republishes_and_cuts_first():
    store = MemoryStorage()
    rid = "e" * 32
    writer = JournalWriter(store, rid, nnx.HistoryJournal(retention=4, chunk_size=2), last_epoch=None)

    def epoch(e):
        return [IterationDataPoint(iter_idx=3 * e + i, epoch_idx=e, batch_idx=i, lr=0.1,
                                   train_edp=nnx.EvaluationDataPoint(loss=1.0 + e)) for i in range(3)]

    writer.extend(epoch(0))
    writer.commit()
    writer.extend(epoch(1))
    writer.commit()
    writer.rollback()  # LAST of epoch 1 failed: readers are back at epoch 0
    files = JournalFiles(rid)
    assert JournalReader.open(store, rid, 1).manifest.last_epoch == 0
    assert keys(writer.idps) == keys(epoch(0))
    writer.extend(epoch(1))  # the same writer retries the epoch
    writer.commit()
    reader = JournalReader.open(store, rid, 1)
    assert keys(reader) == keys(epoch(0) + epoch(1)) and keys(writer.idps) == keys((epoch(0) + epoch(1))[-4:])
    snap = store.snapshot()
    assert len(snap[files.index]) == reader.manifest.index_bytes and len(snap[files.epochs]) == reader.manifest.epochs_bytes
    assert sorted(p for p in snap if "chunk-" in p) == [files.chunk(i) for i in range(4)]


def test_the_trainer_accepts_a_journal_too(tmp_path):
    from torch import nn

    def trainer():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
        return nnx.Trainer(nnx.NNModel(module=net, params=nnx.NNModelParams()))

    x, y = tiny_data()
    sgd = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.3, momentum=0.0)
    params = nnx.NNTrainerParams(n_epochs=3, optims={"all": sgd}, train_loader=batches(x, y, 16), progress=False)
    objective = nnx.supervised_objective()
    with pytest.raises(nnx.ParamsError, match="plain-function"):
        trainer().train(params, objective=objective, callbacks=[print], root=tmp_path / "j", history=SPEC)
    assert not (tmp_path / "j").exists()
    journal = trainer().train(params, objective=objective, root=tmp_path / "j", history=SPEC)
    eager = trainer().train(params, objective=objective, root=tmp_path / "e")
    assert not (journal.path / "idps.csv").exists() and (journal.path / "history" / "journal.json").exists()
    assert keys(nnx.iter_history(journal.id, tmp_path / "j")) == keys(eager.idps)


def test_saving_a_loaded_journal_run_as_idps_csv_is_refused(tmp_path):
    """A loaded journal run's idps are the retained tail: writing them as idps.csv would pass the
    tail off as the whole history, so it is refused naming the ways; run.yaml alone still saves."""
    _, run = train(tmp_path)
    loaded = nnx.NNRun.load(run.id, root=tmp_path)
    assert len(loaded.idps) < len(list(nnx.iter_history(run.id, root=tmp_path)))  # a window, not the whole
    with pytest.raises(nnx.ParamsError, match=r"keeps its history in a journal.*eager_history=False.*iter_history"):
        loaded.save(eager_history=True)
    assert not (tmp_path / run.id / "idps.csv").exists()
    loaded.save()  # NNx's call: run.yaml and metadata.yaml, no idps.csv
    assert not (tmp_path / run.id / "idps.csv").exists()
    with pytest.raises(nnx.ParamsError, match="keeps its history in the journal at .*export_history_csv"):
        loaded.save(root=tmp_path / "elsewhere")  # its records stay in its journal: not under another root
    assert not (tmp_path / "elsewhere").exists()
    loaded.save(eager_history=False)
