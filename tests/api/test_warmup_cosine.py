"""The ``warmup_cosine`` schedule (an extension: REFERENCE §7.1 lists no such kind; docs/metrics.md §4).

Linear warm-up over ``warmup_steps`` ticks — tick ``s`` uses ``(s + 1) / warmup`` of the base LR,
as ``linear_warmup_decay`` — then a cosine from the base LR down to ``min_lr`` at ``total_steps``:
``min_lr + (base - min_lr) * (1 + cos(pi * (s - warmup) / (total - warmup))) / 2``. The expected
curves below are that formula written out here, never the code under test.
"""

from __future__ import annotations

import math

import pytest
import torch

from nnx_core.errors import ParamsError
import nnx_api as nnx

from tests.api.tiny import UsedLR


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("NNX_PROGRESS", "0")


def hand_curve(base: float, warmup: int, total: int, min_lr: float, ticks: int) -> list[float]:
    """The LR of ticks 0..ticks-1, by hand."""
    out = []
    for s in range(ticks):
        if s < warmup:
            out.append(base * (s + 1) / warmup)
        else:
            done = min(1.0, (s - warmup) / (total - warmup))
            out.append(min_lr + (base - min_lr) * (1 + math.cos(math.pi * done)) / 2)
    return out


def test_hand_curve_worked_example():
    """The formula itself, on numbers one can check on paper: base 0.12, warmup 3, total 7, min 0.02:
    0.04, 0.08, 0.12, then the cosine's quarter points 0.12, 0.12 - 0.1·(1 - cos(π/4))/2, 0.07, ..."""
    curve = hand_curve(0.12, 3, 7, 0.02, 8)
    half = 0.07  # min + (base - min) / 2
    assert curve[:4] == pytest.approx([0.04, 0.08, 0.12, 0.12])
    assert curve[5] == pytest.approx(half)
    assert curve[7] == pytest.approx(0.02)
    assert curve[4] == pytest.approx(0.02 + 0.1 * (1 + math.sqrt(0.5)) / 2)


def loader(n_batches: int = 4, size: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, 4, generator=g), torch.randint(0, 2, (size,), generator=g)) for _ in range(n_batches)]


def model(seed: int = 0) -> nnx.NNModel:
    torch.manual_seed(seed)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=2), nnx.NNModelParams())


def warmup_cosine(**kw) -> nnx.NNSchedulerParams:
    return nnx.NNSchedulerParams(kind=nnx.Schedulers.WARMUP_COSINE, **kw)


def params(n_epochs: int, scheduler: nnx.NNSchedulerParams, lr: float = 0.12, accumulate: int = 1, **kw):
    kw.setdefault("train_loader", loader())
    kw.setdefault("val_loader", loader(1))
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=lr, momentum=0.0, accumulate_grad_batches=accumulate)
    return nnx.NNTrainParams(n_epochs=n_epochs, optim=optim, scheduler=scheduler, **kw)


def test_update_clock_curve_matches_the_hand_computation(tmp_path):
    """Every committed update uses the formula's LR (accumulation: one tick per window, not per batch)."""
    used = UsedLR()
    sched = warmup_cosine(warmup_steps=3, total_steps=12, min_lr=0.02, clock="optimizer_update")
    run = model().train(params(3, sched, accumulate=2, train_loader=loader(8)), callbacks=[used], root=tmp_path)
    expected = hand_curve(0.12, 3, 12, 0.02, 12)  # 3 epochs × 8 batches / 2 per window
    assert used.used == pytest.approx(expected, rel=1e-12, abs=0)
    assert run.checkpoint("last").payload()["update_count"] == 12


def test_epoch_clock_defaults_span_the_run():
    """On the epoch clock total_steps defaults to n_epochs and warmup_steps to max(1, n // 10)
    (the enum's factory, REFERENCE §7.1 style): 20 epochs warm up over 2, decay to min_lr at 20."""
    net = torch.nn.Linear(2, 2)
    sgd = torch.optim.SGD(net.parameters(), lr=0.5)
    sched = nnx.Schedulers.WARMUP_COSINE(sgd, warmup_cosine(min_lr=0.05), 20)
    seen = []
    for _ in range(22):
        seen.append(sgd.param_groups[0]["lr"])
        sgd.step()
        sched.step()
    assert seen == pytest.approx(hand_curve(0.5, 2, 20, 0.05, 22), rel=1e-12, abs=0)
    assert seen[20] == seen[21] == pytest.approx(0.05)  # held at min_lr past total_steps


def test_each_param_group_decays_from_its_own_lr_to_the_same_floor(tmp_path):
    """min_lr is absolute (as cosine_annealing's eta_min), not a fraction of each group's LR."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.2, momentum=0.0,
                              param_groups=[nnx.NNParamGroupSpec("0.*", lr_multiplier=0.1)])
    sgd = nnx.build_optimizer(net, optim)
    sched = nnx.Schedulers.WARMUP_COSINE(sgd, warmup_cosine(warmup_steps=2, total_steps=6, min_lr=0.001), 6)
    seen = []
    for _ in range(7):
        seen.append([g["lr"] for g in sgd.param_groups])
        sgd.step()
        sched.step()
    assert [s[0] for s in seen] == pytest.approx(hand_curve(0.02, 2, 6, 0.001, 7), rel=1e-12, abs=0)
    assert [s[1] for s in seen] == pytest.approx(hand_curve(0.2, 2, 6, 0.001, 7), rel=1e-12, abs=0)


@pytest.mark.parametrize("field, value", [("T_max", 5), ("step_size", 2), ("max_lr", 0.1)])
def test_fields_it_does_not_read_are_refused(field, value):
    sched = warmup_cosine(**{field: value})  # accepted alone: a factory (Schedulers.STEP(opt, sched, n)) may read it
    with pytest.raises(ParamsError, match=rf"'warmup_cosine' does not read {field} .*min_lr, total_steps, warmup_steps"):
        nnx.NNTrainParams(n_epochs=1, scheduler=sched)  # a run uses its own kind


def test_a_warmup_longer_than_the_schedule_is_refused():
    with pytest.raises(ParamsError, match="warmup_steps=9 exceeds total_steps=8"):
        warmup_cosine(warmup_steps=9, total_steps=8)
    assert warmup_cosine(warmup_steps=8, total_steps=8).warmup_steps == 8  # all warm-up: allowed


def test_its_own_fields_and_the_builder_round_trip():
    sched = warmup_cosine(warmup_steps=3, total_steps=8, min_lr=1e-4, clock="optimizer_update")
    assert sched.state()["kind"] == "warmup_cosine" and nnx.NNSchedulerParams.from_state(sched.state()) == sched
    assert nnx.NNSchedulerParams(kind="Warmup_Cosine").kind is nnx.Schedulers.WARMUP_COSINE
    assert nnx.NNSchedulerParamsBuilder.from_params(sched).build() == sched


def test_a_budget_the_run_outgrows_is_refused_before_anything_is_written(tmp_path):
    """As every budgeted schedule (one_cycle, linear_warmup_decay): a total_steps the run's
    updates outgrow is refused with the count to set, before a run folder exists."""
    with pytest.raises(nnx.ScheduleBudgetError, match=r"warmup_cosine schedule runs out: total_steps=6 .* makes 8"):
        model().train(params(2, warmup_cosine(total_steps=6, clock="optimizer_update")), root=tmp_path)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def _resume_params(n_epochs: int, **kw) -> nnx.NNTrainParams:
    sched = warmup_cosine(warmup_steps=5, total_steps=8 * 3, min_lr=0.01, clock="optimizer_update")
    return params(n_epochs, sched, accumulate=2, train_loader=loader(5), seed=2, **kw)


def test_stateful_resume_continues_the_curve_exactly(tmp_path):
    """3 epochs, then a stateful resume for 5 more: the LRs and the final weights are those of 8
    epochs in one go, to the bit (the resumed run starts from other initial weights, so
    everything comes from the checkpoint)."""
    used, lrm = UsedLR(), nnx.LRMonitor()
    straight = model(seed=1).train(_resume_params(8), callbacks=[used, lrm], root=tmp_path / "straight")
    assert used.used == pytest.approx(hand_curve(0.12, 5, 24, 0.01, 24), rel=1e-12, abs=0)

    source = model(seed=1).train(_resume_params(3), root=tmp_path)
    assert source.checkpoint("last").payload()["components"]["nnx.scheduler_clock"] == {
        "clock": "optimizer_update", "kind": "warmup_cosine", "budget": 24, "ticks": 9}
    used2, lrm2 = UsedLR(), nnx.LRMonitor()
    resumed = model(seed=5).train(_resume_params(5, resume_from_run_id=source.id), callbacks=[used2, lrm2],
                                  root=tmp_path)
    assert list(resumed.epochs) == [3, 4, 5, 6, 7]
    assert used2.used == used.used[9:]  # exactly, not approximately
    assert lrm2.update_history == lrm.update_history[9:]
    for k, v in straight.checkpoint("last").weights().items():
        torch.testing.assert_close(resumed.checkpoint("last").weights()[k], v, rtol=0, atol=0)
