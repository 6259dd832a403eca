"""The built-in step (``nnx_api.training.builtin_step``): one step, whether the run drives it
(``DefaultStep``), a ``train_step_fn`` calls it (``default_train_step`` inside a run) or a user
calls it on a context built by hand (``HandBuiltSync``, its window read from
``ctx.accumulation_state`` and ``batch_idx``).

Oracles: a plain-torch loop written out by hand (each window's summed loss over its valid targets,
divided by the window's valid-target count, one SGD step; the epoch's last batch closes a trailing
window) and ``nnx_core.update.UpdateWindow.ends`` for where each window closes.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from nnx_core.update import UpdateWindow
import nnx_api as nnx
from nnx_api.training.epoch import Updates
from nnx_api.training.steps import GradientAccumulationState

from tests.api.tiny import batches, tiny_data

IGNORE = -100


def model_for(seed=0, ignore_index=None):
    torch.manual_seed(seed)
    task = nnx.TaskSpec.categorical(ignore_index=ignore_index) if ignore_index is not None else None
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams(task=task))


# ---------------------------------------------------------------------------- one step, three callers
LR, ACCUMULATE, EPOCHS = 0.3, 2, 2


def uneven_masked_batches():
    """Five batches of 4, 4, 4, 4 and 3 rows (the last one short) with targets masked unevenly:
    2, 4, 1, 4 and 2 valid targets."""
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(19, 4, generator=g), torch.randint(0, 3, (19,), generator=g)
    y[[1, 2, 9, 10, 11, 17]] = IGNORE
    return batches(x, y, 4)


def plain_torch_loop(net, parts):
    """The update written out in plain torch: per window, Σ cross-entropy over the valid targets
    of its microbatches, divided by their count, one SGD step (the last batch closes its window)."""
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    for _ in range(EPOCHS):
        for start in range(0, len(parts), ACCUMULATE):
            window = parts[start : start + ACCUMULATE]
            valid = sum(int((t != IGNORE).sum()) for _, t in window)
            opt.zero_grad()
            for x, y in window:
                F.cross_entropy(net(x), y, ignore_index=IGNORE, reduction="sum").backward()
            with torch.no_grad():
                for p in net.parameters():
                    p.grad /= valid
            opt.step()
    return [p.detach() for p in net.parameters()]


def window_ends(n_batches):
    """The batches ``UpdateWindow`` closes a window after, over one epoch."""
    window, ends = UpdateWindow(ACCUMULATE), []
    for i in range(n_batches):
        window.add(1.0)
        if window.ends(is_last_batch=i == n_batches - 1):
            window.close()
            ends.append(i)
    return ends


def test_default_train_step_by_hand_and_in_a_run_gives_the_plain_torch_loops_weights(runs):
    parts = uneven_masked_batches()
    expected = plain_torch_loop(copy.deepcopy(model_for(ignore_index=IGNORE).net), parts)
    ends = window_ends(len(parts))
    assert ends == [1, 3, 4]  # windows of two, and the short last batch alone
    closes = [(epoch, i) for epoch in range(EPOCHS) for i in ends]

    # a context built by hand (no run): its window from accumulation_state and batch_idx
    by_hand = model_for(ignore_index=IGNORE)
    opt = torch.optim.SGD(by_hand.net.parameters(), lr=LR)
    reported = []
    for epoch in range(EPOCHS):
        state = GradientAccumulationState()  # one per epoch
        for i, batch in enumerate(parts):
            ctx = nnx.TrainStepContext(
                by_hand, batch, opt, None, None, None, ACCUMULATE, i, epoch, is_last_batch=i == len(parts) - 1,
                accumulation_state=state, report_update=lambda epoch=epoch, i=i: reported.append((epoch, i)),
            )
            assert ctx.session is None
            nnx.default_train_step(ctx)
    assert reported == closes  # each committed update reported once, where UpdateWindow closes the window

    # inside a run: a train_step_fn that calls it, and the run's own built-in step
    committed = {}

    class Commits(nnx.Callback):
        def __init__(self, name):
            self.name = name

        def on_optimizer_update(self, ctx, event):
            committed.setdefault(self.name, []).append((event.epoch_idx, event.batch_idx))

    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=LR, momentum=0.0, weight_decay=0.0,
                              accumulate_grad_batches=ACCUMULATE)
    params = nnx.NNTrainParams(n_epochs=EPOCHS, optim=optim, train_loader=parts)
    in_a_run, built_in = model_for(ignore_index=IGNORE), model_for(ignore_index=IGNORE)
    in_a_run.train(params, train_step_fn=lambda ctx: nnx.default_train_step(ctx), callbacks=[Commits("step fn")],
                   root=runs / "step_fn")
    built_in.train(params, callbacks=[Commits("built-in")], root=runs / "built_in")
    assert committed == {"step fn": closes, "built-in": closes}

    # float32 tolerances, not bits: the loop's sums and the step's run through different kernels
    for name, model in (("by hand", by_hand), ("train_step_fn", in_a_run), ("built-in", built_in)):
        for got, want in zip(model.net.parameters(), expected, strict=True):
            torch.testing.assert_close(got.detach(), want, msg=lambda m, name=name: f"{name}: {m}")


def test_default_train_step_on_hand_built_contexts_accumulates_like_the_default_step(runs):
    """Two hand-built microbatches (accumulation_state carried) give the run's one update."""
    x, y = tiny_data(n=16)
    parts = batches(x, y, 8)
    trained = model_for()
    trained.train(nnx.NNTrainParams(n_epochs=1, optim=nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.5, momentum=0.0,
                                                                        accumulate_grad_batches=2),
                                    train_loader=parts), root=runs)
    model = model_for()
    opt = torch.optim.SGD(model.net.parameters(), lr=0.5)
    state = GradientAccumulationState()
    for i, batch in enumerate(parts):
        nnx.default_train_step(nnx.TrainStepContext(
            model, batch, opt, None, None, None, 2, i, 0, is_last_batch=i == len(parts) - 1, accumulation_state=state))
    assert state.normalization_weight == 0.0 and state.loss_numerator == 0.0  # the window closed
    for a, b in zip(model.net.parameters(), trained.net.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    with pytest.raises(nnx.ParamsError, match="accumulation_state"):
        nnx.default_train_step(nnx.TrainStepContext(model, parts[0], opt, None, None, None, 2, 0, 0))


def test_a_hand_built_window_drops_earlier_gradients_and_leaves_its_own_in_grad():
    """As NNx: the gradients are zeroed when a window starts (a stale ``.grad`` is not added to)
    and the applied ones stay in ``.grad`` after the update."""
    x, y = tiny_data(n=8)
    clean, stale = model_for(), model_for()
    stale.net.load_state_dict(clean.net.state_dict())
    for p in stale.net.parameters():
        p.grad = torch.full_like(p, 5.0)
    for model in (clean, stale):
        opt = torch.optim.SGD(model.net.parameters(), lr=0.0)
        nnx.default_train_step(nnx.TrainStepContext(model, (x, y), opt, None, None, None, 1, 0, 0, is_last_batch=True))
    for a, b in zip(clean.net.parameters(), stale.net.parameters(), strict=True):
        assert a.grad is not None and torch.equal(a.grad, b.grad)


# -- each update's loss for a callback of yours --------------------------------------------------


class LossLog(nnx.Callback):
    def __init__(self) -> None:
        self.losses: list[float | None] = []

    def on_optimizer_update(self, ctx, event) -> None:
        self.losses.append(event.loss)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_callback_of_yours_hears_each_updates_loss_as_a_plain_loop_computes_it(tmp_path, accumulate):
    """Oracle: a plain torch loop on the same rows and initial weights; the update's loss is the
    window's mean over its targets (with accumulation: the two batches' rows together)."""
    x, y = tiny_data()
    torch.manual_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3), nnx.NNModelParams())
    net = copy.deepcopy(model.net)
    log = LossLog()
    model.train(nnx.NNTrainParams(n_epochs=1, seed=0, train_loader=batches(x, y, 8), progress=False,
                                  optim=nnx.NNOptimParams(name="sgd", max_lr=0.1, momentum=0.0,
                                                          accumulate_grad_batches=accumulate)),
                root=tmp_path, callbacks=[log])
    opt, plain = torch.optim.SGD(net.parameters(), lr=0.1), []
    window = list(zip(*[iter(batches(x, y, 8))] * accumulate, strict=True))
    for parts in window:
        opt.zero_grad()
        total = sum(F.cross_entropy(net(xb), yb, reduction="sum") for xb, yb in parts)
        rows = sum(len(yb) for _, yb in parts)
        (total / rows).backward()
        opt.step()
        plain.append((total / rows).item())
    assert len(log.losses) == len(plain)
    assert log.losses == pytest.approx(plain, rel=1e-6)


def test_nnx_own_callbacks_do_not_make_the_step_read_the_loss():
    quiet = Updates(ctx=nnx.callbacks.CallbackContext(model=None, run=None, optimizer=None, save_weights=None, epoch=0),
                    hooks=[nnx.LRMonitor().on_optimizer_update], optimizers={}, schedules={}, primary="default", auto_step=True)
    heard = Updates(ctx=quiet.ctx, hooks=[LossLog().on_optimizer_update], optimizers={}, schedules={}, primary="default",
                    auto_step=True)
    assert (quiet.wants_loss, heard.wants_loss) == (False, True)
