"""Objectives, the one-update-owner refusal, the step and objective examples and the precision policy
through NNModel (the step utilities, owners and session rules: ``tests/api/training/``)."""

from __future__ import annotations

import copy
import itertools
import runpy
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from nnx_core.monitor_spec import MonitorSpec
import nnx_api as nnx

from tests.api.tiny import batches, sgd_step_tolerance, tiny_data

ROOT = Path(__file__).resolve().parents[2]


def model_for(seed=0, ignore_index=None, precision=None, hidden=(8,)):
    torch.manual_seed(seed)
    task = nnx.TaskSpec.categorical(ignore_index=ignore_index) if ignore_index is not None else None
    return nnx.NNModel(
        nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=hidden), nnx.NNModelParams(task=task, precision=precision)
    )


def sgd(accumulate=1, lr=0.5):
    return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=lr, momentum=0.0, accumulate_grad_batches=accumulate)


def same_weights(a, b):
    return all(torch.equal(p, q) for p, q in zip(a.net.parameters(), b.net.parameters(), strict=True))


# ---------------------------------------------------------------------------- objectives
@pytest.mark.parametrize("accumulate", [1, 3])
def test_supervised_objective_gives_the_default_steps_updates(runs, accumulate):
    x, y = tiny_data(n=40)
    default, objective = model_for(), model_for()
    params = nnx.NNTrainParams(n_epochs=2, optim=sgd(accumulate), train_loader=batches(x, y, 9))
    a = default.train(params, root=runs / "a")
    b = objective.train(params, objective=nnx.supervised_objective(), root=runs / "b")
    assert same_weights(default, objective)
    # an objective run counts committed updates on every record (as NNx); the default step leaves them None
    assert all(i.update_count is None for i in a.idps)
    assert b.idps[-1].update_count == a.checkpoint("last").payload()["update_count"] == b.checkpoint("last").payload()["update_count"]
    assert b.idps[-1].train_edp.accuracy is not None and b.idps[-1].train_edp.loss is not None


def test_kd_accumulation_over_unequal_masked_batches_equals_one_batch_of_their_union(runs):
    x, y = tiny_data(n=23)
    y[[1, 5, 17]] = -100
    y[3:6] = -100  # with the cuts below, the second microbatch is fully masked
    cuts = [0, 3, 6, 13, 23]
    parts = [(x[a:b], y[a:b]) for a, b in itertools.pairwise(cuts)]
    teacher = model_for(seed=7, hidden=(16,))
    accumulated, union = model_for(ignore_index=-100), model_for(ignore_index=-100)
    kd = nnx.kd_objective(teacher, alpha=0.6, temperature=2.0)
    valid, soft = int((y != -100).sum()), copy.deepcopy(teacher.net).double()

    def share(net, i):  # row i's share: 0.6 · KL·T² over the rows + 0.4 · CE over the valid targets
        out, t = net(x[i : i + 1].double()) / 2.0, soft(x[i : i + 1].double()) / 2.0
        kl = F.kl_div(F.log_softmax(out, -1), F.log_softmax(t, -1), reduction="sum", log_target=True) * 4.0
        ce = F.cross_entropy(out * 2.0, y[i : i + 1], ignore_index=-100, reduction="sum")
        return 0.6 * kl / len(x) + 0.4 * ce / valid

    tol = sgd_step_tolerance(union.net, share, x, lr=0.5)
    accumulated.train(nnx.NNTrainParams(n_epochs=1, optim=sgd(accumulate=4), train_loader=parts), objective=kd, root=runs)
    union.train(nnx.NNTrainParams(n_epochs=1, optim=sgd(), train_loader=[(x, y)]), objective=kd, root=runs)
    for a, b in zip(accumulated.net.parameters(), union.net.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=0)


class Events(nnx.Callback):
    def __init__(self, log=None):
        self.log = [] if log is None else log
        self.events = []

    def on_optimizer_update(self, ctx, event):
        self.events.append(event)
        self.log.append(f"event:{event.optimizer}:{event.update_idx}")


def test_kd_objective_terms_reach_callbacks_and_the_teacher_stays_frozen(runs):
    x, y = tiny_data()
    teacher = model_for(seed=5, hidden=(16,))
    teacher.net.train()
    frozen = {k: v.clone() for k, v in teacher.net.state_dict().items()}
    events = Events()
    model_for().train(
        nnx.NNTrainParams(n_epochs=2, optim=sgd(accumulate=2), train_loader=batches(x, y, 8)),
        objective=nnx.kd_objective(teacher, alpha=0.25, temperature=3.0), callbacks=[events], root=runs,
    )
    assert all(torch.equal(frozen[k], v) for k, v in teacher.net.state_dict().items())
    assert not teacher.net.training and not any(p.requires_grad for p in teacher.net.parameters())
    assert [e.update_idx for e in events.events] == list(range(1, 7))  # 6 batches / 2 per window × 2 epochs
    e = events.events[0]
    assert set(e.losses) == {"distillation", "supervised"} and e.microbatches == 2 and e.optimizer == "default"
    assert e.loss == pytest.approx(0.25 * e.losses["distillation"] + 0.75 * e.losses["supervised"])


def two_term_objective(ctx):
    """A sum term (Σ squared outputs) and a masked mean term (cross-entropy over targets ≠ -100)."""
    xb, yb = ctx.batch
    out = ctx.model.net(xb)
    valid = yb != -100
    ce = F.cross_entropy(out[valid], yb[valid], reduction="sum") if valid.any() else out.sum() * 0.0
    return nnx.ObjectiveResult([
        nnx.LossTerm("energy", out.pow(2).sum(), reduction="sum", weight=0.5),
        nnx.LossTerm("ce", ce, int(valid.sum())),
    ])


def expected_summary(model, parts):
    """What the epoch summary must hold, recomputed by hand (forwards only, with the start weights)."""
    energy = ce = valid = rows = 0.0
    with torch.no_grad():
        for xb, yb in parts:
            out = model.net(xb)
            keep = yb != -100
            energy += float(out.pow(2).sum())
            ce += float(F.cross_entropy(out[keep], yb[keep], reduction="sum")) if keep.any() else 0.0
            valid, rows = valid + int(keep.sum()), rows + len(xb)
    return {"energy": energy / rows, "ce": ce / valid}


@pytest.mark.parametrize("monitor", [None, MonitorSpec(metric="loss", split="train")])
def test_objective_summary_is_per_sample_holds_each_term_and_is_always_present(runs, monitor):
    """A sum term's epoch value is its epoch sum over the rows the epoch saw; a mean term's is
    Σnumerator / Σdenominator; ``extra`` holds each term, ``loss`` their weighted sum; with or
    without a monitor (the issue's VAE: 5437.50 and ``extra == {}`` with one, None without)."""
    x, y = tiny_data(n=23)
    y[[1, 5, 17]] = -100
    parts = [(x[a:b], y[a:b]) for a, b in itertools.pairwise([0, 3, 6, 13, 23])]
    model = model_for()
    expected = expected_summary(model, parts)  # lr 0: the weights never move, so the epoch is recomputable
    params = nnx.NNTrainParams(n_epochs=1, optim=sgd(lr=0.0), train_loader=parts, monitor=monitor)
    run = model.train(params, objective=two_term_objective, root=runs)
    summary = run.idps[-1].train_summary
    assert summary is not None
    assert summary.extra == pytest.approx(expected, rel=1e-5)
    assert summary.loss == pytest.approx(0.5 * expected["energy"] + expected["ce"], rel=1e-5)


def test_progress_line_shows_the_objective_summary(runs):
    """The progress line's loss and ``train_summary.loss`` are the same number (no monitor declared)."""
    from nnx_api.callbacks.progress import epoch_values

    x, y = tiny_data(n=23)
    parts = [(x[a:b], y[a:b]) for a, b in itertools.pairwise([0, 3, 6, 13, 23])]
    seen = []

    class Seen(nnx.Callback):
        def on_epoch_end(self, ctx):
            seen.append((epoch_values(ctx.idp, ctx.idps)["loss"], ctx.idp.train_summary.loss))

    params = nnx.NNTrainParams(n_epochs=2, optim=sgd(lr=0.1), train_loader=parts)
    model_for().train(params, objective=two_term_objective, callbacks=[Seen()], root=runs)
    assert len(seen) == 2 and all(shown == f"{loss:.4g}" for shown, loss in seen)


def test_loss_term_and_result_validation():
    t = torch.tensor(6.0, requires_grad=True)
    assert nnx.LossTerm("a", t, 3).value == 2.0 and nnx.LossTerm("a", t, 0).value is None
    assert nnx.ObjectiveResult([nnx.LossTerm("a", t, 3, weight=0.5), nnx.LossTerm("b", t, reduction="sum")]).loss() == 7.0
    with pytest.raises(nnx.ParamsError, match="needs its sample count"):
        nnx.LossTerm("a", t)
    with pytest.raises(nnx.ParamsError, match="takes no denominator"):
        nnx.LossTerm("a", t, 2, reduction="sum")
    with pytest.raises(nnx.ParamsError, match="finite"):
        nnx.LossTerm("a", t, 2, weight=float("nan"))
    with pytest.raises(nnx.ParamsError, match="scalar tensor"):
        nnx.LossTerm("a", torch.ones(3), 2)
    with pytest.raises(nnx.ParamsError, match="unique"):
        nnx.ObjectiveResult([nnx.LossTerm("a", t, 1), nnx.LossTerm("a", t, 1)])


def test_nonfinite_objective_fails_before_any_update_or_skips_the_window(runs):
    x, y = tiny_data(n=32)

    class Poisoned(nnx.Objective):
        def __call__(self, ctx):
            result = nnx.supervised_objective()(ctx)
            term = result.terms[0]
            bad = term.numerator * float("nan") if ctx.batch_idx == 1 else term.numerator
            return nnx.ObjectiveResult(nnx.LossTerm("supervised", bad, term.denominator))

    model = model_for()
    before = [p.detach().clone() for p in model.net.parameters()]
    params = nnx.NNTrainParams(n_epochs=1, optim=sgd(), train_loader=batches(x, y, 8))
    with pytest.raises(nnx.NonFiniteLossError):
        model.train(params, objective=Poisoned(), root=runs)
    assert nnx.NNRun.all(runs) == []  # nothing committed: the run folder is gone
    skipping = model_for()
    run = skipping.train(params, objective=Poisoned(nonfinite="skip"), root=runs)
    assert run.idps[-1].update_count == 3  # 4 windows, the poisoned one dropped
    assert not all(torch.equal(a, b) for a, b in zip(before, skipping.net.parameters(), strict=True))


# ---------------------------------------------------------------------------- update owners
def test_one_update_owner_per_run_is_enforced_before_anything_is_written(runs):
    x, y = tiny_data()
    params = nnx.NNTrainParams(n_epochs=1, train_loader=batches(x, y, 16))
    model = model_for()
    with pytest.raises(nnx.UpdateOwnerError, match="not both"):
        model.train(params, train_step_fn=nnx.default_train_step, objective=nnx.supervised_objective(), root=runs)
    with pytest.raises(nnx.UpdateOwnerError, match="pass it as objective="):
        model.train(params, train_step_fn=nnx.supervised_objective(), root=runs)
    with pytest.raises(nnx.UpdateOwnerError, match="step function"):
        model.train(params, objective=nnx.default_train_step, root=runs)
    assert not runs.exists()


# ---------------------------------------------------------------------------- precision
def test_fp16_is_refused_on_cpu_unless_falling_back_to_fp32():
    with pytest.raises(nnx.PrecisionUnsupportedError, match="fp16 needs CUDA"):
        model_for(precision=nnx.PrecisionPolicy(mode="fp16"))
    assert model_for(precision=nnx.PrecisionPolicy(mode="fp16", fallback="fp32")).precision == "fp32"


@pytest.mark.parametrize("objective", [None, "supervised"])
def test_bf16_autocast_on_cpu_tracks_fp32_and_keeps_float32_parameters(runs, objective):
    x, y = tiny_data(n=64)
    params = nnx.NNTrainParams(n_epochs=3, optim=nnx.NNOptimParams(max_lr=1e-2), train_loader=batches(x, y, 16),
                               val_loader=[(x, y)])
    obj = nnx.supervised_objective() if objective else None
    full = model_for().train(params, objective=obj, root=runs / "fp32")
    bf16_model = model_for(precision=nnx.PrecisionPolicy(mode="bf16"))
    assert bf16_model.precision == "bf16"
    bf16 = bf16_model.train(params, objective=obj, root=runs / "bf16")
    assert all(p.dtype == torch.float32 for p in bf16_model.net.parameters())
    for a, b in zip(full.idps, bf16.idps, strict=True):
        assert abs(a.train_edp.loss - b.train_edp.loss) < 5e-2
    assert abs(full.idps[-1].val_edp.loss - bf16.idps[-1].val_edp.loss) < 5e-2


# ---------------------------------------------------------------------------- examples
@pytest.mark.parametrize(
    ("example", "argv"),
    [
        ("autoencoder_step.py", ["--epochs", "3"]),
        ("distillation_kd.py", ["--epochs", "2", "--teacher-epochs", "3"]),
        ("custom_eval_step.py", ["--epochs", "3"]),
    ],
)
def test_step_and_objective_examples_run(tmp_path, monkeypatch, example, argv):
    monkeypatch.setattr(sys, "argv", [example])
    run = runpy.run_path(str(ROOT / "examples" / example), run_name="example")["main"](["--root", str(tmp_path), *argv])
    assert run.checkpoint("last") is not None and run.idps[-1].val_edp is not None
    if example == "custom_eval_step.py":
        assert 0.0 <= run.idps[-1].val_edp.extra["top2_accuracy"] <= 1.0
    if example == "autoencoder_step.py":
        assert run.epochs[2].val_edp.loss < run.epochs[0].val_edp.loss


def test_docs_steps_objectives_examples_run(tmp_path, monkeypatch):
    import re

    monkeypatch.chdir(tmp_path)
    text = (ROOT / "docs" / "steps-objectives.md").read_text()
    namespace: dict = {}
    for snippet in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL):
        exec(compile(snippet, "steps-objectives.md", "exec"), namespace)  # noqa: S102 - our own docs


