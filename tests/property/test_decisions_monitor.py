"""Property: BEST, the plateau scheduler and EarlyStopping all obey the same epoch decisions.

For random scripted metric sequences (ties, min_delta edges, NaN/inf and missing values, both
directions) real ``NNModel.train`` runs record one decision per epoch. From those decisions
alone — no access to the values — we derive BEST's epoch, the epochs where the plateau scheduler
reduced the LR and the epoch EarlyStopping stopped at, and compare them with what the run did
(BEST read back from disk). The decisions themselves are checked against an independent
statement of the rule, and the LR sequence against torch's ``ReduceLROnPlateau`` given the
monitor's comparator. A second property interrupts the run and resumes it.

Bounded: 50 examples per property (500 with ``NNX_DEEP=1``), no deadline.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import nnx_api as nnx

DEEP = os.environ.get("NNX_DEEP") == "1"
SETTINGS = settings(
    max_examples=500 if DEEP else 50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
BASE_LR = 0.1
GRID = [i / 20 for i in range(21)]  # coarse values: ties and min_delta edges happen often
VALUE = st.one_of(
    st.sampled_from(GRID),
    st.sampled_from(GRID),  # twice: finite values are drawn twice as often as the specials
    st.sampled_from([float("nan"), float("inf"), float("-inf"), None]),
)


@pytest.fixture(autouse=True)
def _quiet_and_fast(monkeypatch):
    monkeypatch.setenv("NNX_PROGRESS", "0")
    # durability is proven by the storage tests; here fsync only costs time
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 8))
    return {
        "values": draw(st.lists(VALUE, min_size=n, max_size=n)),
        "mode": draw(st.sampled_from(["min", "max"])),
        "min_delta": draw(st.sampled_from([0.0, 0.05, 0.1])),
        "es_patience": draw(st.integers(0, 3)),
        "patience": draw(st.integers(0, 2)),
        "cooldown": draw(st.integers(0, 2)),
    }


# --------------------------------------------------------------------------- oracles
def rule_decisions(values, mode, min_delta):
    """The documented rule, stated independently: (status, improved) per epoch."""
    best, out = None, []
    for v in values:
        if v is None:
            out.append(("missing", False))
        elif not math.isfinite(v):
            out.append(("nonfinite", False))
        else:
            better = best is None or (v < best - min_delta if mode == "min" else v > best + min_delta)
            best = v if better else best
            out.append(("ok", better))
    return out


def best_epoch(decisions):
    improved = [e for e, (_, imp) in enumerate(decisions) if imp]
    return improved[-1] if improved else None


def plateau_reductions(decisions, patience, cooldown):
    bad = cool = 0
    out = []
    for e, (status, improved) in enumerate(decisions):
        if status == "missing":
            continue
        bad = 0 if improved else bad + 1
        if cool:
            cool, bad = cool - 1, 0
        if bad > patience:
            out.append(e)
            cool, bad = cooldown, 0
    return out


def early_stop(decisions, patience):
    wait = 0
    for e, (status, improved) in enumerate(decisions):
        if status == "missing":
            continue
        wait = 0 if improved else wait + 1
        if wait >= patience and not improved:
            return e
    return None


def torch_plateau_lrs(values, mode, min_delta, patience, cooldown):
    """torch's ReduceLROnPlateau with the monitor's comparator; missing skips, non-finite is worse."""
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=BASE_LR)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(
        opt, mode=mode, factor=0.5, patience=patience, cooldown=cooldown, threshold=min_delta, threshold_mode="abs"
    )
    out = []
    for v in values:
        if v is not None:
            sched.step(v if math.isfinite(v) else float("nan"))
        out.append(opt.param_groups[0]["lr"])
    return out


# --------------------------------------------------------------------------- a real run
def _batches():
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(4, 3, generator=g), torch.randint(0, 2, (4,), generator=g))]


def train(sc, root, *, crash_at=None):
    values = sc["values"]

    def eval_step(ctx):
        v = values[ctx.epoch_idx]
        return nnx.EvaluationDataPoint(loss=1.0, metrics={} if v is None else {"score": v})

    class Crash(nnx.Callback):
        def on_epoch_begin(self, ctx):
            if ctx.epoch == crash_at:
                raise KeyboardInterrupt  # a kill: nothing is cleaned up, committed epochs stay

    spec = nnx.MonitorSpec(metric="score", mode=sc["mode"], min_delta=sc["min_delta"])
    params = nnx.NNTrainParams(
        n_epochs=len(values),
        optim=nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=BASE_LR, momentum=0.0),
        scheduler=nnx.NNSchedulerParams(patience=sc["patience"], cooldown=sc["cooldown"], factor=0.5, min_lr=0.0),
        metrics=(nnx.MetricSpec(id="nll", name="score", optional=True),),  # the script leaves epochs without it
        monitor=spec,
        train_loader=_batches(),
        val_loader=_batches(),
        save_phase_checkpoints=False,
        resume="auto",
        progress=False,
    )
    es, lrm = nnx.EarlyStopping(monitor=spec, patience=sc["es_patience"]), nnx.LRMonitor()
    torch.manual_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=3, output_dim=2), nnx.NNModelParams())
    callbacks = [es, lrm] + ([Crash()] if crash_at is not None else [])
    run = model.train(params, callbacks=callbacks, eval_step_fn=eval_step, root=root)
    return run, es, lrm


def recorded(run):
    return [(idp.selection.status, idp.selection.improved) for _, idp in sorted(run.epochs.items())]


def selections(run):
    """Each epoch's stored decision, comparable with NaN values (repr(nan) == 'nan')."""
    return [repr(idp.selection) for _, idp in sorted(run.epochs.items())]


def reductions_from_lrs(history):
    return [e for e, lr in enumerate(history) if lr < (history[e - 1] if e else BASE_LR)]


@SETTINGS
@given(sc=scenarios())
def test_best_plateau_and_early_stopping_derive_from_the_same_decisions(sc):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run, es, lrm = train(sc, root)
        decided = recorded(run)
        trained = len(decided)

        # 1. the decisions follow the documented rule
        assert decided == rule_decisions(sc["values"], sc["mode"], sc["min_delta"])[:trained]

        # 2. BEST (read back from disk) is the last improved epoch
        on_disk = nnx.NNRun.load(run.id, root)
        best = on_disk.checkpoint("best")
        assert (best.epoch if best else None) == best_epoch(decided)
        if best is not None:
            assert best.payload()["components"]["nnx.monitor"]["best_epoch"] == best.epoch

        # 3. the plateau scheduler reduced exactly where the decisions say (and where torch would)
        assert reductions_from_lrs(lrm.history) == plateau_reductions(decided, sc["patience"], sc["cooldown"])
        assert lrm.history == pytest.approx(
            torch_plateau_lrs(sc["values"], sc["mode"], sc["min_delta"], sc["patience"], sc["cooldown"])[:trained]
        )

        # 4. EarlyStopping stopped at the epoch the decisions say
        stop = early_stop(decided, sc["es_patience"])
        assert es.stopped_epoch == stop
        assert trained - 1 == (stop if stop is not None else len(sc["values"]) - 1)
        assert on_disk.checkpoint("last").epoch == trained - 1


@SETTINGS
@given(sc=scenarios(), data=st.data())
def test_a_killed_and_resumed_run_decides_exactly_like_an_uninterrupted_one(sc, data):
    expected_stop = early_stop(rule_decisions(sc["values"], sc["mode"], sc["min_delta"]), sc["es_patience"])
    last = len(sc["values"]) - 1 if expected_stop is None else expected_stop
    assume(last >= 1)
    crash_at = data.draw(st.integers(1, last), label="crash_at")
    with tempfile.TemporaryDirectory() as tmp:
        straight, es, lrm = train(sc, Path(tmp) / "a")
        with pytest.raises(KeyboardInterrupt):
            train(sc, Path(tmp) / "b", crash_at=crash_at)
        resumed, es2, lrm2 = train(sc, Path(tmp) / "b")
        assert resumed.id == straight.id and resumed.resume_status["source_epoch"] == crash_at - 1
        assert selections(resumed) == selections(straight)
        assert lrm2.history == lrm.history[crash_at:]
        assert es2.stopped_epoch == es.stopped_epoch and max(resumed.epochs) == max(straight.epochs)
        best, best2 = straight.checkpoint("best"), resumed.checkpoint("best")
        assert (best and best.epoch) == (best2 and best2.epoch)
