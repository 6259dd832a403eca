"""What callbacks and steps read during ``train()`` (``nnx_api.training.context_views``).

``ctx.idps`` is live inside an epoch: a read shows the records of the batches trained so far
(NNx's running list), made from the device statistics only at that read; the records, the
summary and the commits are those of a run nobody read mid-epoch. A journal's view is read-only
and bounded by ``retention``; a value the journal cannot store is refused at the first batch.
``ctx.scheduler`` under the default plateau schedule reads like torch's ``ReduceLROnPlateau``.

Oracles: the (epoch, batch) pairs and a weighted mean by hand; NNx 0.4.1's refusal message
("cannot store as JSON") and its read-only window (TypeError, no ``append``); torch's own
``ReduceLROnPlateau`` (its ``state_dict`` keys, ``num_bad_epochs`` counting epochs since the last
improvement); a run of the same configuration that never reads ``ctx.idps`` mid-epoch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from nnx_core.errors import UpdateOwnerError
import nnx_api as nnx

from tests.api.tiny import batches, tiny_data

BATCHES = 3  # 48 rows, 16 a batch


def fit(root, *, n_epochs=2, callbacks=(), history=None, step=None, rows=48, **kw):
    x, y = tiny_data(n=rows)
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
    # a positioned loader (a DataLoader over a map-style dataset) when commits happen inside epochs
    loader = DataLoader(TensorDataset(x, y), batch_size=16) if "commit_every" in kw else batches(x, y, 16)
    params = nnx.NNTrainParams(n_epochs=n_epochs, seed=0, train_loader=loader, val_loader=batches(x, y, 24),
                               progress=False, **kw)
    return model.train(params, root=root, history=history, callbacks=list(callbacks), train_step_fn=step)


class ReadAtUpdates(nnx.Callback):
    """At every committed update: how many records ``ctx.idps`` shows and the last one's position."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, tuple[int, int] | None]] = []
        self.refused: list[str] = []

    def on_optimizer_update(self, ctx, event) -> None:
        idps = ctx.idps
        last = (idps[-1].epoch_idx, idps[-1].batch_idx) if len(idps) else None
        self.seen.append((len(idps), last))
        try:
            idps[0] = idps[-1]
        except TypeError as exc:
            self.refused.append(type(exc).__name__)
        except IndexError:
            pass


def states(run) -> list[dict]:
    return [r.state() for r in run.idps]


def expected_reads(n_epochs: int, retention: int | None) -> list[tuple[int, tuple[int, int] | None]]:
    """By hand: at batch k of epoch e's update, the records of every batch before it."""
    out = []
    for e in range(n_epochs):
        for k in range(BATCHES):
            made = BATCHES * e + k
            last = (e, k - 1) if k else (e - 1, BATCHES - 1) if e else None
            out.append((made if retention is None else min(made, retention), last))
    return out


def test_an_eager_runs_idps_grows_batch_by_batch_and_the_run_is_unchanged(tmp_path):
    reader = ReadAtUpdates()
    read = fit(tmp_path / "read", callbacks=[reader])
    assert reader.seen == expected_reads(2, None)
    assert reader.refused == []  # an eager run's list takes edits (its own copy)
    plain = fit(tmp_path / "plain")
    assert states(read) == states(plain)  # the records a read made are the epoch-end records, bit for bit


def test_a_journals_idps_is_live_bounded_and_read_only(tmp_path):
    reader = ReadAtUpdates()
    spec = nnx.HistoryJournal(retention=4, chunk_size=2)
    read = fit(tmp_path / "read", callbacks=[reader], history=spec, n_epochs=3)
    assert reader.seen == expected_reads(3, 4)
    assert reader.refused and set(reader.refused) == {"TypeError"}

    class Held(nnx.Callback):
        def on_train_begin(self, ctx) -> None:
            self.view = ctx.idps

    held = Held()
    plain = fit(tmp_path / "plain", history=spec, n_epochs=3, callbacks=[held])
    assert not isinstance(held.view, list) and not hasattr(held.view, "append")
    assert [(r.epoch_idx, r.batch_idx) for r in held.view] == [(1, 2), (2, 0), (2, 1), (2, 2)]
    assert list(reversed(held.view)) == held.view[::-1] and held.view[-2:] == list(held.view)[-2:]
    assert states(read) == states(plain)


def test_a_step_reading_idps_keeps_the_summary_weighted_by_its_batches(tmp_path):
    """Batches of 16, 16 and 8 rows; the step's record loss is its batch index: the epoch's
    summary loss is (0·16 + 1·16 + 2·8) / 40 = 0.8 whether or not the step reads ``ctx.idps``."""
    held: dict = {}

    class Hold(nnx.Callback):
        def on_train_begin(self, ctx) -> None:
            held["idps"] = ctx.idps

    lengths = []

    def step(ctx):
        lengths.append(len(held["idps"]))
        return nnx.EvaluationDataPoint(loss=float(ctx.batch_idx), error=0.5)

    run = fit(tmp_path, callbacks=[Hold()], step=step, rows=40, n_epochs=2, monitor=nnx.MonitorSpec("loss", split="train"))
    assert lengths == [0, 1, 2, 3, 4, 5]
    summaries = [r.train_summary.loss for r in run.idps if r.train_summary is not None]
    assert summaries == [pytest.approx(0.8), pytest.approx(0.8)]


def test_a_mid_epoch_commit_after_a_read_keeps_every_record(tmp_path):
    reader = ReadAtUpdates()
    read = fit(tmp_path / "read", callbacks=[reader], commit_every=2)
    plain = fit(tmp_path / "plain", commit_every=2)
    assert states(read) == states(plain) and len(read.idps) == 2 * BATCHES


def test_a_value_the_journal_cannot_store_is_refused_at_the_first_batch(tmp_path):
    calls = []

    def step(ctx):
        calls.append(ctx.batch_idx)
        return nnx.EvaluationDataPoint(loss=0.5, error=0.5, extra={"per_class": np.array([0.9, 0.8])})

    with pytest.raises(TypeError, match="cannot store as JSON"):
        fit(tmp_path / "journal", step=step, history=nnx.HistoryJournal(retention=4, chunk_size=2))
    assert calls == [0]
    calls.clear()
    fit(tmp_path / "eager", step=step, n_epochs=1)  # idps.csv stores it as text
    assert calls == [0, 1, 2]


def test_ctx_scheduler_reads_the_plateau_schedule_with_torchs_names(tmp_path):
    seen = []

    class Reader(nnx.Callback):
        def on_epoch_end(self, ctx) -> None:
            sched = ctx.scheduler
            seen.append((sched.state_dict(), sched.num_bad_epochs, ctx.decision.improved, sched.get_last_lr(),
                         [g["lr"] for g in ctx.optimizer.param_groups]))
            with pytest.raises(UpdateOwnerError):
                sched.step()

    plateau = nnx.NNSchedulerParams(patience=100, factor=0.5, cooldown=0, min_lr=0.0)
    fit(tmp_path, callbacks=[Reader()], n_epochs=4, scheduler=plateau)
    torch_keys = set(torch.optim.lr_scheduler.ReduceLROnPlateau(
        torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)).state_dict())
    bad = 0
    for state, num_bad, improved, last_lr, lrs in seen:
        assert set(state) <= torch_keys and state["patience"] == 100 and state["factor"] == 0.5
        bad = 0 if improved else bad + 1  # torch's count: epochs since the last improvement
        assert num_bad == state["num_bad_epochs"] == bad
        assert last_lr == lrs


class StopInSecondEpoch(nnx.Callback):
    """Stops at the second update of epoch 1, reading ``ctx.idps`` there and at ``on_train_end``."""

    def __init__(self) -> None:
        self.inside: list[tuple[int, int]] = []
        self.at_end: list[tuple[int, int]] = []

    def on_optimizer_update(self, ctx, event) -> None:
        if ctx.epoch == 1 and event.batch_idx == 1:
            self.inside = [(r.epoch_idx, r.batch_idx) for r in ctx.idps]
            ctx.stop_at_update = True

    def on_train_end(self, ctx) -> None:
        self.at_end = [(r.epoch_idx, r.batch_idx) for r in ctx.idps]


@pytest.mark.parametrize("journal", [False, True], ids=["eager", "journal"])
def test_records_an_early_stop_did_not_commit_leave_ctx_idps_as_they_leave_the_run(tmp_path, journal):
    """Inside the epoch the read shows its batches so far; once ``stop_at_update`` ended it without
    a commit, ``on_train_end`` sees what the returned run holds: epoch 0's records, as NNx 0.4.1 shows."""
    stop = StopInSecondEpoch()
    run = fit(tmp_path, n_epochs=3, callbacks=[stop], history=nnx.HistoryJournal(retention=10) if journal else None)
    committed = [(0, b) for b in range(BATCHES)]
    assert stop.inside == committed + [(1, 0)]  # the update of batch 1 happens before its record is made
    assert stop.at_end == committed == [(r.epoch_idx, r.batch_idx) for r in run.idps]
