"""The user code a run trains with is recorded, and ``resume="auto"`` refuses other code.

Oracle: the code itself — two functions whose source differs by one constant must count as
changed; the same source reformatted (comments, blank lines) must not.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import nnx_api as nnx
from nnx_api.commands.runs_extra import render_comparison
from nnx_api.training import code
from nnx_api.training.roles import NNMODEL

from tests.api.tiny import batches, tiny_data

STEP = """
def step(ctx):
    xb, yb = ctx.batch
    ctx.optimizer.zero_grad()
    loss = {factor} * F.cross_entropy(ctx.model.net(xb), yb)  # {comment}
    loss.backward()
    ctx.optimizer.step()
    ctx.report_update()
    return nnx.EvaluationDataPoint(loss=loss.item())
"""


def _step(tmp_path, factor: str, comment: str = "the loss", blank: str = ""):
    """A step function with its own source file (``inspect.getsource`` reads it)."""
    path = tmp_path / f"step_{abs(hash((factor, comment, blank)))}.py"
    path.write_text("import torch.nn.functional as F\nimport nnx_api as nnx\n" + blank + STEP.format(factor=factor, comment=comment))
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace["step"]


def _train(root, step=None, module=None, **train):
    x, y = tiny_data()
    torch.manual_seed(0)
    model = nnx.NNModel(module=module) if module is not None else nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3))
    params = nnx.NNTrainParams(**{"n_epochs": 2, "train_loader": batches(x, y, 16), "progress": False, "resume": "auto", **train})
    return model.train(params, train_step_fn=step, root=root)


def test_a_changed_step_is_refused_a_reformatted_one_is_not(tmp_path):
    root = tmp_path / "runs"
    run = _train(root, _step(tmp_path, "1.0"))
    assert run.code_fingerprint["train_step_fn"]["name"] == "step"
    again = _train(root, _step(tmp_path, "1.0", comment="reworded", blank="\n\n"))  # same code: the finished run
    assert again.id == run.id and len(again.epochs) == 2
    with pytest.raises(nnx.CodeChangedError, match=r"train_step_fn step changed.*salt=.*resume_from_run_id="):
        _train(root, _step(tmp_path, "2.0"))
    with pytest.raises(nnx.CodeChangedError, match="train_step_fn was given then, not now"):
        _train(root)  # the built-in step instead


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 3)

    def forward(self, x):
        return self.body(x)


class Doubled(Net):
    def forward(self, x):
        return 2 * self.body(x)


Doubled.__qualname__ = Doubled.__name__ = "Net"  # the same name and parameters: only forward differs


def test_a_modules_changed_forward_is_refused_and_compare_says_so(tmp_path):
    root = tmp_path / "runs"
    run = _train(root, module=Net())
    with pytest.raises(nnx.CodeChangedError, match=r"module.forward Doubled.forward \(was Net.forward\) changed"):
        _train(root, module=Doubled())
    other = _train(tmp_path / "other", module=Doubled())
    assert other.id == run.id  # the run id cannot tell them apart: the recorded code does
    table = render_comparison([nnx.NNRun.load(run.id, root), nnx.NNRun.load(other.id, tmp_path / "other")])
    assert "code (user code that differs)" in table and "module.forward" in table


def test_nnx_own_code_is_not_recorded_and_an_unreadable_source_only_warns(tmp_path):
    assert set(code.code_fingerprint(type("E", (), {
        "kind": NNMODEL, "step_fn": nnx.default_train_step, "eval_step_fn": None, "objective": None,
        "model": nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3)), "config": {},
    })())) == {code.SETTINGS}
    root = tmp_path / "runs"
    namespace: dict = {}
    exec(textwrap.dedent(STEP.format(factor="1.0", comment="typed in a shell")), {"F": F, "nnx": nnx}, namespace)
    _train(root, namespace["step"])  # no source file: recorded as unreadable
    with pytest.warns(RuntimeWarning, match="the source of train_step_fn cannot be read"):
        _train(root, namespace["step"])


# -- what else decides a training: the module's structure, the constants code reads, kept callbacks --


class Dropped(nn.Module):
    """Parameters of the same shapes whatever ``p`` and ``act``: the run id cannot tell them apart."""

    def __init__(self, p: float = 0.25, act: type = nn.Tanh):
        super().__init__()
        self.body, self.drop, self.act = nn.Linear(4, 3), nn.Dropout(p), act()

    def forward(self, x):
        return self.act(self.drop(self.body(x)))


@pytest.mark.parametrize("changed", [{"p": 0.1}, {"act": nn.Hardtanh}])
def test_a_module_whose_layers_settings_changed_is_refused(tmp_path, changed):
    root = tmp_path / "runs"
    run = _train(root, module=Dropped())
    assert _train(root, module=Dropped()).id == run.id  # the same module: the finished run
    with pytest.raises(nnx.CodeChangedError, match=r"other code or settings \(module.structure test_code_fingerprint.Dropped changed\)"):
        _train(root, module=Dropped(**changed))
    assert _train(tmp_path / "other", module=Dropped(**changed)).id == run.id


STEP_READING = """
import torch.nn.functional as F
import nnx_api as nnx

real_label = {label}


def step(ctx):
    xb, yb = ctx.batch
    ctx.optimizer.zero_grad()
    loss = real_label * F.cross_entropy(ctx.model.net(xb), yb)
    loss.backward()
    ctx.optimizer.step()
    ctx.report_update()
    return nnx.EvaluationDataPoint(loss=loss.item())
"""


def _reading(tmp_path, label: str):
    path = tmp_path / f"reading_{label.replace('.', '_')}.py"
    path.write_text(STEP_READING.format(label=label))
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace["step"]


def test_a_changed_constant_a_step_reads_is_refused(tmp_path):
    """The step's source is the same; the module-level constant it reads is not."""
    root = tmp_path / "runs"
    run = _train(root, _reading(tmp_path, "0.9"))
    assert run.code_fingerprint["train_step_fn constant real_label"]["name"] == "real_label"
    assert _train(root, _reading(tmp_path, "0.9")).id == run.id
    with pytest.raises(nnx.CodeChangedError, match="train_step_fn constant real_label real_label changed"):
        _train(root, _reading(tmp_path, "1.0"))


def _with_callbacks(root, callbacks):
    x, y = tiny_data()
    torch.manual_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3))
    params = nnx.NNTrainParams(n_epochs=2, train_loader=batches(x, y, 16), val_loader=batches(x, y, 16), progress=False,
                               resume="auto")
    return model.train(params, root=root, callbacks=callbacks)


def test_a_kept_callbacks_changed_setting_is_refused_a_logger_is_not(tmp_path):
    """EarlyStopping's state is the run's (a component): patience 3 then 5 is another training; a
    callback that only watches is not part of it."""

    class Printer(nnx.Callback):
        def __init__(self, prefix: str) -> None:
            self.prefix = prefix

    root = tmp_path / "runs"
    run = _with_callbacks(root, [nnx.EarlyStopping(patience=3), Printer("a")])
    assert _with_callbacks(root, [nnx.EarlyStopping(patience=3), Printer("b")]).id == run.id
    with pytest.raises(nnx.ComponentRestoreError, match="early_stopping nnx_api.callbacks.builtin.EarlyStopping changed since run"):
        _with_callbacks(root, [nnx.EarlyStopping(patience=5)])
    assert _with_callbacks(root, []).id == run.id  # an optional component left out: NNx's rule, not refused


def test_a_run_recorded_before_the_settings_compares_code_only():
    """A record without the marker (an older run) is not refused for roles it could not hold."""
    old = {"train_step_fn": {"name": "step", "sha256": "0" * 16}}
    now = {**old, code.SETTINGS: {"name": "..."}, "module.structure": {"name": "Net", "sha256": "1" * 16},
           "train_step_fn constant real_label": {"name": "real_label", "sha256": "2" * 16},
           "callback early_stopping": {"name": "EarlyStopping", "sha256": "3" * 16}}
    assert code.code_refusal("r" * 32, old, now) is None and code.unreadable(old, now) == []
    marked = {**now, "module.structure": {"name": "Net", "sha256": "4" * 16}}
    assert "module.structure Net changed" in str(code.code_refusal("r" * 32, marked, now))


def test_a_fresh_run_that_differs_only_in_n_epochs_says_how_to_train_the_other_on(tmp_path):
    """n_epochs is part of the id: 3 → 5 epochs is a fresh run, and the call says which run it
    could have continued and how; the suggested call then continues its epochs."""
    root = tmp_path / "runs"
    three = _train(root, n_epochs=3)
    with pytest.warns(UserWarning, match=rf"starts fresh: run {three.id} .* n_epochs=3 .* resume_from_run_id='{three.id}'"):
        _train(root, n_epochs=5)
    x, y = tiny_data()
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3))
    on = model.train(nnx.NNTrainParams(n_epochs=2, train_loader=batches(x, y, 16), progress=False, resume_from_run_id=three.id),
                     root=root)
    assert sorted({r.epoch_idx for r in on.idps}) == [3, 4] and on.resume_status.mode == "stateful"


def test_a_fresh_run_with_no_such_neighbour_says_nothing(tmp_path, recwarn):
    root = tmp_path / "runs"
    _train(root, n_epochs=3, seed=1)
    _train(root, n_epochs=5, seed=2)  # another seed: another configuration, not another length
    assert not [w for w in recwarn if "starts fresh" in str(w.message)]
