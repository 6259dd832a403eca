"""The bad-input catalogue: one case per mistake a new user makes in the first hour.

Each case asserts three things: the error is the typed ``NNxError`` the table names (never a raw
``TypeError`` / ``RuntimeError`` from deep inside), its message names the field or the fix, and
the runs root is byte-for-byte what it was before the call (a fresh root: still absent; a root
holding a run: the same files with the same bytes). The table is in docs/reliability.md
("The bad-input catalogue"); ``CATEGORIES`` counts the cases per category.
"""

from __future__ import annotations

import re
import shutil
import signal
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from nnx_core.commit import LAST, RunFiles
from nnx_core.eager_history import EagerHistory, parse_history
from nnx_adapters.storage.fs import FileStorage
import nnx_api as nnx
from nnx_api.cli import main

X, Y = torch.randn(32, 4, generator=torch.Generator().manual_seed(0)), torch.arange(32) % 3
NET = dict(input_dim=4, output_dim=3, hidden_dims=(8,))
E = nnx.ParamsError
T = nnx.TrainingInputError


def loader(x: Any = X, y: Any = Y, batch_size: int = 8) -> DataLoader:
    return DataLoader(TensorDataset(x, y), batch_size=batch_size)


def fit(root: Path, *, net: dict | None = None, model: dict | None = None, module: nn.Module | None = None,
        data: Any = None, val: Any = None, call: dict | None = None, **train: Any) -> Any:
    """One ``NNModel.train`` with the tiny defaults, changed by the case's arguments."""
    params = nnx.NNModelParams(**(model or {}))
    m = nnx.NNModel(params=params, module=module) if module is not None else nnx.NNModel(nnx.NNParams(**{**NET, **(net or {})}), params)
    train = {"n_epochs": 2, "seed": 0, "train_loader": loader() if data is None else data, "progress": False, **train}
    if val is not None:
        train["val_loader"] = val
    return m.train(nnx.NNTrainParams(**train), root=root, **(call or {}))


class Wide(nn.Module):
    """A custom module of output width 5 (its last Linear)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class Tupled(Wide):
    def forward(self, x: torch.Tensor) -> Any:
        return self.body(x), x


class Broken(Wide):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x.T)


class _Empty:
    """A re-iterable without len() that yields nothing."""

    def __iter__(self):
        return iter(())


def _gen():
    yield X, Y


class _Surgery(nnx.Callback):
    """A topology-changing callback (it declares the transform it makes at the end)."""

    def checkpoint_transforms(self):
        return ({"name": "prune", "version": 1},)


class _StepClass:
    def __call__(self, ctx):
        return nnx.default_train_step(ctx)


class _NoCtx(nnx.Callback):
    def on_epoch_end(self):
        pass


class _KerasStyle(nnx.Callback):
    def on_epoch_end(self, epoch, logs=None):
        pass


class _NoEvent(nnx.Callback):
    def on_optimizer_update(self, ctx):
        pass


class _Plain:
    def on_epoch_end(self, ctx):
        pass


SPEC = nnx.CompileSpec(backend="eager")


# (category, name, call(root), error type, a pattern the message must match)
Case = tuple[str, str, Callable[[Path], Any], type, str]
CASES: list[Case] = [
    # -- net shape (NNParams) ------------------------------------------------------------------
    ("net", "input_dim zero", lambda r: nnx.NNParams(input_dim=0, output_dim=3), E, "NNParams.input_dim"),
    ("net", "input_dim negative", lambda r: nnx.NNParams(input_dim=-4, output_dim=3), E, "NNParams.input_dim"),
    ("net", "input_dim as text", lambda r: nnx.NNParams(input_dim="4", output_dim=3), E, "NNParams.input_dim"),
    ("net", "input_dim float", lambda r: nnx.NNParams(input_dim=4.5, output_dim=3), E, "NNParams.input_dim"),
    ("net", "input_dim None", lambda r: nnx.NNParams(input_dim=None, output_dim=3), E, "NNParams.input_dim"),
    ("net", "input_dim missing", lambda r: nnx.NNParams(output_dim=3), E, "input_dim"),
    ("net", "output_dim zero", lambda r: nnx.NNParams(input_dim=4, output_dim=0), E, "NNParams.output_dim"),
    ("net", "output_dim bool", lambda r: nnx.NNParams(input_dim=4, output_dim=True), E, "NNParams.output_dim"),
    ("net", "hidden_dims zero", lambda r: nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(0,)), E, "hidden_dims"),
    ("net", "hidden_dims int", lambda r: nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=32), E, "hidden_dims"),
    ("net", "hidden_dims text", lambda r: nnx.NNParams(input_dim=4, output_dim=3, hidden_dims="32"), E, "hidden_dims"),
    ("net", "dropout above 1", lambda r: nnx.NNParams(input_dim=4, output_dim=3, dropout_prob=1.5), E, "dropout_prob"),
    ("net", "dropout negative", lambda r: nnx.NNParams(input_dim=4, output_dim=3, dropout_prob=-0.1), E, "dropout_prob"),
    ("net", "activation unknown", lambda r: nnx.NNParams(input_dim=4, output_dim=3, activation="relux"), E, "relu"),
    ("net", "activation a module", lambda r: nnx.NNParams(input_dim=4, output_dim=3, activation=nn.ReLU), E, "activation"),
    ("net", "unknown field", lambda r: nnx.NNParams(input_dim=4, output_dim=3, hidden=(8,)), E, "hidden"),
    # -- model (NNModelParams, TaskSpec, PrecisionPolicy, NNModel) ------------------------------
    ("model", "device gpu", lambda r: nnx.NNModelParams(device="gpu"), E, "device.*(cuda|auto)"),
    ("model", "device bad index", lambda r: nnx.NNModelParams(device="cuda:x"), E, "device"),
    ("model", "device int", lambda r: nnx.NNModelParams(device=3.5), E, "device"),
    ("model", "cuda absent", lambda r: nnx.NNModel(nnx.NNParams(**NET), nnx.NNModelParams(device="cuda")), E, "(?i)cuda|cpu")
    if not torch.cuda.is_available() else ("model", "cuda index absent", lambda r: nnx.NNModel(
        nnx.NNParams(**NET), nnx.NNModelParams(device="cuda:99")), E, "cuda"),
    ("model", "loss unknown", lambda r: nnx.NNModelParams(loss="mse2"), E, "mean_squared_error"),
    ("model", "loss a torch module", lambda r: nnx.NNModelParams(loss=nn.CrossEntropyLoss()), E, "loss"),
    ("model", "net kind unknown", lambda r: nnx.NNModelParams(net="cnn"), E, "feed_fwd"),
    ("model", "task as text", lambda r: nnx.NNModelParams(task="categorical"), E, "TaskSpec.categorical"),
    ("model", "task kind unknown", lambda r: nnx.TaskSpec(kind="binary"), E, "categorical"),
    ("model", "task n zero", lambda r: nnx.TaskSpec.categorical(n=0), E, "TaskSpec.n"),
    ("model", "threshold zero", lambda r: nnx.TaskSpec.multilabel(threshold=0.0), E, "threshold"),
    ("model", "threshold above 1", lambda r: nnx.TaskSpec.multilabel(threshold=1.5), E, "threshold"),
    ("model", "precision as text", lambda r: nnx.NNModelParams(precision="bf16"), E, "PrecisionPolicy"),
    ("model", "precision mode unknown", lambda r: nnx.PrecisionPolicy("fp8"), E, "bf16"),
    ("model", "precision fallback unknown", lambda r: nnx.PrecisionPolicy("bf16", fallback="cpu"), E, "fallback"),
    ("model", "params not NNModelParams", lambda r: nnx.NNModel(nnx.NNParams(**NET), {"loss": "mse"}), E, "NNModelParams"),
    ("model", "net params not NNParams", lambda r: nnx.NNModel({"input_dim": 4}), E, "NNParams"),
    ("model", "module not a Module", lambda r: nnx.NNModel(module=lambda x: x), E, "nn.Module"),
    ("model", "net params and module", lambda r: nnx.NNModel(nnx.NNParams(**NET), module=Wide()), E, "net_params=None with module="),
    ("model", "fp16 on cpu", lambda r: nnx.NNModel(nnx.NNParams(**NET), nnx.NNModelParams(precision=nnx.PrecisionPolicy("fp16"))),
     nnx.PrecisionUnsupportedError, "fp16|fallback"),
    ("model", "task n disagrees with output_dim", lambda r: fit(r, model={"task": nnx.TaskSpec.categorical(n=5)}),
     nnx.TaskValidationError, "task.n.*output_dim"),  # NNx refuses it when the model is built
    ("model", "labels disagree with width", lambda r: fit(r, model={"task": nnx.TaskSpec.categorical(labels=("a", "b"))}),
     E, "labels"),
    # -- optimizer and scheduler ----------------------------------------------------------------
    ("optim", "name unknown", lambda r: nnx.NNOptimParams(name="adamw2"), E, "adamw"),
    ("optim", "name a torch class", lambda r: nnx.NNOptimParams(name=torch.optim.Adam), E, "NNOptimParams.name"),
    ("optim", "max_lr negative", lambda r: nnx.NNOptimParams(max_lr=-1e-3), E, "max_lr"),
    ("optim", "max_lr text", lambda r: nnx.NNOptimParams(max_lr="1e-3"), E, "max_lr"),
    ("optim", "max_lr nan", lambda r: nnx.NNOptimParams(max_lr=float("nan")), E, "max_lr"),
    # the other momentum shape is built (is_valid() is False, as in NNx) and refused when training starts
    ("optim", "adam momentum float", lambda r: fit(r, optim=nnx.NNOptimParams(name="adam", momentum=0.9)), E,
     "beta1, beta2"),
    ("optim", "adam beta 1", lambda r: nnx.NNOptimParams(name="adam", momentum=(1.0, 0.999)), E, "momentum"),
    ("optim", "sgd momentum tuple", lambda r: fit(r, optim=nnx.NNOptimParams(name="sgd", momentum=(0.9, 0.99))), E,
     "momentum"),
    ("optim", "weight_decay negative", lambda r: nnx.NNOptimParams(weight_decay=-0.1), E, "weight_decay"),
    ("optim", "eps for sgd", lambda r: nnx.NNOptimParams(name="sgd", eps=1e-6), E, "eps"),
    ("optim", "grad clip zero", lambda r: nnx.NNOptimParams(grad_clip_norm=0), E, "grad_clip_norm"),
    ("optim", "accumulate zero", lambda r: nnx.NNOptimParams(accumulate_grad_batches=0), E, "accumulate_grad_batches"),
    ("optim", "param group as text", lambda r: nnx.NNOptimParams(param_groups=("encoder.*",)), E, "NNParamGroupSpec"),
    ("optim", "param group lr and multiplier", lambda r: nnx.NNParamGroupSpec("a.*", lr=1e-3, lr_multiplier=0.1), E,
     "lr_multiplier"),
    ("optim", "optim as text", lambda r: nnx.NNTrainParams(n_epochs=1, optim="adam"), E, "NNOptimParams\\(name='adam'"),
    ("optim", "optim a torch optimizer", lambda r: nnx.NNTrainParams(n_epochs=1, optim=torch.optim.SGD), E, "NNOptimParams"),
    ("optim", "PyTorch's lr", lambda r: nnx.NNOptimParams(name="adam", lr=1e-3), E, "PyTorch's 'lr' is max_lr= here"),
    ("optim", "PyTorch's betas", lambda r: nnx.NNOptimParams(name="adam", betas=(0.9, 0.99)), E, "'betas' is momentum= here"),
    ("sched", "scheduler as text", lambda r: nnx.NNTrainParams(n_epochs=1, scheduler="cosine"), E, "NNSchedulerParams"),
    ("sched", "kind unknown", lambda r: nnx.NNSchedulerParams(kind="cosine"), E, "cosine_annealing"),
    ("sched", "factor zero", lambda r: nnx.NNSchedulerParams(factor=0), E, "factor"),
    ("sched", "patience negative", lambda r: nnx.NNSchedulerParams(patience=-1), E, "patience"),
    ("sched", "clock unknown", lambda r: nnx.NNSchedulerParams(clock="batch"), E, "optimizer_update"),
    ("sched", "plateau on update clock", lambda r: nnx.NNSchedulerParams(clock="optimizer_update"), E, "clock='epoch'"),
    ("sched", "step_size zero", lambda r: nnx.NNSchedulerParams(kind="step", step_size=0), E, "step_size"),
    ("sched", "PyTorch's gamma", lambda r: nnx.NNSchedulerParams(kind="step", gamma=0.5), E, "'gamma' is factor= here"),
    ("sched", "warmup_steps on a cosine", lambda r: nnx.NNTrainParams(n_epochs=1, scheduler=nnx.NNSchedulerParams(
        kind="cosine_annealing", warmup_steps=100)), E, "'cosine_annealing' does not read warmup_steps .* read by linear_warmup_decay"),
    ("sched", "T_max on a step schedule", lambda r: nnx.NNTrainParams(n_epochs=1, scheduler=nnx.NNSchedulerParams(
        kind="step", step_size=2, T_max=10)), E, "'step' does not read T_max"),
    ("sched", "step_size on the plateau default", lambda r: nnx.NNTrainParams(n_epochs=1, scheduler=nnx.NNSchedulerParams(
        step_size=3)), E, "'reduce_lr_on_plateau' does not read step_size.*kind='step'"),
    ("sched", "one cycle horizon too short", lambda r: fit(r, scheduler=nnx.NNSchedulerParams(
        kind="one_cycle", total_steps=2, clock="optimizer_update")), nnx.ScheduleBudgetError, "total_steps"),
    # -- training parameters ----------------------------------------------------------------------
    ("train", "n_epochs zero", lambda r: nnx.NNTrainParams(n_epochs=0), E, "n_epochs"),
    ("train", "PyTorch's epochs", lambda r: nnx.NNTrainParams(epochs=3), E, "'epochs' is n_epochs= here"),
    ("train", "n_epochs text", lambda r: nnx.NNTrainParams(n_epochs="10"), E, "n_epochs"),
    ("train", "n_epochs float", lambda r: nnx.NNTrainParams(n_epochs=2.5), E, "n_epochs"),
    ("train", "n_epochs missing", lambda r: nnx.NNTrainParams(), E, "n_epochs"),
    ("train", "seed negative", lambda r: nnx.NNTrainParams(n_epochs=1, seed=-1), E, "seed"),
    ("train", "seed float", lambda r: nnx.NNTrainParams(n_epochs=1, seed=0.5), E, "seed"),
    ("train", "data_id blank", lambda r: nnx.NNTrainParams(n_epochs=1, data_id=" "), E, "data_id"),
    ("train", "data_id int", lambda r: nnx.NNTrainParams(n_epochs=1, data_id=3), E, "data_id"),
    ("train", "resume yes", lambda r: nnx.NNTrainParams(n_epochs=1, resume="yes"), E, "auto"),
    ("train", "resume True", lambda r: nnx.NNTrainParams(n_epochs=1, resume=True), E, "auto"),
    ("train", "resume and resume_from", lambda r: nnx.NNTrainParams(n_epochs=1, resume="auto", resume_from_run_id="a" * 32),
     E, "not both"),
    ("train", "resume_mode unknown", lambda r: nnx.NNTrainParams(n_epochs=1, resume_mode="weights"), E, "weights_only"),
    ("train", "overwrite as text", lambda r: nnx.NNTrainParams(n_epochs=1, overwrite_existing="yes"), E, "overwrite_existing"),
    ("train", "an empty root", lambda r: fit(""), E, "root: is empty"),
    ("train", "progress as text", lambda r: nnx.NNTrainParams(n_epochs=1, progress="no"), E, "progress"),
    ("train", "phase checkpoints as text", lambda r: nnx.NNTrainParams(n_epochs=1, save_phase_checkpoints="no"), E,
     "save_phase_checkpoints"),
    ("train", "extra_metrics a list", lambda r: nnx.NNTrainParams(n_epochs=1, extra_metrics=[len]), E, "extra_metrics"),
    ("train", "extra_metrics not callable", lambda r: nnx.NNTrainParams(n_epochs=1, extra_metrics={"a": 1}), E,
     "extra_metrics\\['a'\\]"),
    ("train", "commit_every zero", lambda r: nnx.NNTrainParams(n_epochs=1, commit_every=0), E, "commit_every: must be at least 1"),
    ("train", "commit_every negative", lambda r: nnx.NNTrainParams(n_epochs=1, commit_every=-3), E,
     "commit_every: must be at least 1"),
    ("train", "commit_every a zero timedelta", lambda r: nnx.NNTrainParams(n_epochs=1, commit_every=timedelta(0)), E,
     "commit_every: must be a positive timedelta"),
    ("train", "commit_every as text", lambda r: nnx.NNTrainParams(n_epochs=1, commit_every="5"), E, "commit_every=5"),
    ("train", "commit_every with a loader NNx cannot position",
     lambda r: fit(r, data=[(X[:8], Y[:8]), (X[8:16], Y[8:16])], commit_every=2), E,
     "commit_every: commits inside an epoch need a train_loader NNx can position: list"),
    ("train", "commit_every float", lambda r: nnx.NNTrainParams(n_epochs=1, commit_every=2.5), E,
     "commit_every=timedelta\\(seconds=2.5\\)"),
    ("train", "preempt_signals SIGKILL", lambda r: nnx.NNTrainParams(n_epochs=1, preempt_signals=(signal.SIGKILL,)), E,
     "preempt_signals\\[0\\]: SIGKILL cannot be caught"),
    ("train", "preempt_signals as names", lambda r: nnx.NNTrainParams(n_epochs=1, preempt_signals=("TERM",)), E,
     "preempt_signals\\[0\\]: .*signal.SIGTERM"),
    ("train", "unknown field", lambda r: nnx.NNTrainParams(n_epochs=1, epochs=3), E, "epochs"),
    ("train", "params not NNTrainParams", lambda r: nnx.NNModel(nnx.NNParams(**NET)).train({"n_epochs": 1}, root=r), E,
     "NNTrainParams"),
    ("train", "trainer params to NNModel", lambda r: nnx.NNModel(nnx.NNParams(**NET)).train(
        nnx.NNTrainerParams(n_epochs=1, optims={"main": nnx.NNOptimParams()}), root=r), E, "NNTrainParams"),
    ("train", "salt blank", lambda r: fit(r, call={"salt": ""}), E, "salt"),
    ("train", "salt int", lambda r: fit(r, call={"salt": 3}), E, "salt"),
    ("train", "no trainable parameter", lambda r: _frozen(r), E, "requires grad"),
    # -- metrics and monitor ----------------------------------------------------------------------
    ("metrics", "metrics as names", lambda r: nnx.NNTrainParams(n_epochs=1, metrics=("accuracy",)), E, "MetricSpec\\('accuracy'\\)"),
    ("metrics", "metrics a string", lambda r: nnx.NNTrainParams(n_epochs=1, metrics="f1"), E, "NNTrainParams.metrics"),
    ("metrics", "metric unknown", lambda r: fit(r, metrics=(nnx.MetricSpec("auc2"),)), E, "metrics"),
    ("metrics", "metric named loss", lambda r: nnx.MetricSpec("nll", name="loss"), E, "reserved"),
    ("metrics", "metric config not a mapping", lambda r: nnx.MetricSpec("f1", config=["micro"]), E, "config"),
    ("metrics", "monitor as text", lambda r: nnx.NNTrainParams(n_epochs=1, monitor="val.loss"), E,
     "MonitorSpec\\('loss', split='val'\\)"),
    ("metrics", "monitor split unknown", lambda r: nnx.MonitorSpec("loss", split="test"), E, "split"),
    ("metrics", "monitor mode unknown", lambda r: nnx.MonitorSpec("loss", mode="lowest"), E, "mode"),
    ("metrics", "monitor not computed", lambda r: fit(r, val=loader(), monitor=nnx.MonitorSpec("auc")), E, "monitor"),
    ("metrics", "monitor val without val_loader", lambda r: fit(r, monitor=nnx.MonitorSpec("loss")), E, "val_loader"),
    ("metrics", "early stopping mode", lambda r: nnx.EarlyStopping(mode="max"), E, "EarlyStopping.mode.*explicit monitor"),
    ("metrics", "early stopping other monitor", lambda r: fit(r, val=loader(), call={
        "callbacks": [nnx.EarlyStopping(monitor=nnx.MonitorSpec("error"))]}), E, "EarlyStopping.monitor"),
    ("metrics", "two early stoppings named alike", lambda r: fit(r, call={
        "callbacks": [nnx.EarlyStopping(name="a"), nnx.EarlyStopping(name="a")]}), E, "EarlyStopping.name"),
    # -- callbacks and update owners --------------------------------------------------------------
    ("callbacks", "callback class", lambda r: fit(r, call={"callbacks": [nnx.EarlyStopping]}), E, "EarlyStopping\\(\\.\\.\\.\\)"),
    ("callbacks", "callback class alone", lambda r: fit(r, call={"callbacks": nnx.LRMonitor}), E, "list of callbacks"),
    ("callbacks", "one callback, no list", lambda r: fit(r, call={"callbacks": nnx.LRMonitor()}), E, "\\[LRMonitor\\(\\.\\.\\.\\)\\]"),
    ("callbacks", "callback a string", lambda r: fit(r, call={"callbacks": ["early_stopping"]}), E, "callbacks\\[0\\]"),
    ("callbacks", "callbacks a dict", lambda r: fit(r, call={"callbacks": {"es": nnx.EarlyStopping()}}), E, "list"),
    ("callbacks", "a hook without ctx", lambda r: fit(r, call={"callbacks": [_NoCtx()]}), E,
     r"on_epoch_end: takes \(self\) but NNx calls it as on_epoch_end\(ctx\)"),
    ("callbacks", "Keras's on_epoch_end(epoch, logs)", lambda r: fit(r, call={"callbacks": [_KerasStyle()]}), E,
     "has Keras's signature .* ctx.epoch"),
    ("callbacks", "an update hook without the event", lambda r: fit(r, call={"callbacks": [_NoEvent()]}), E,
     r"on_optimizer_update\(ctx, event\)"),
    ("callbacks", "hooks on a plain object", lambda r: fit(r, call={"callbacks": [_Plain()]}), E, "derive its class from nnx.Callback"),
    ("callbacks", "lr monitor bounded text", lambda r: nnx.LRMonitor(bounded="yes"), E, "LRMonitor.bounded"),
    ("callbacks", "checkpoint tag unsafe", lambda r: nnx.ModelCheckpoint(tag="../x"), nnx.InvalidRunIdError, "x"),
    ("callbacks", "checkpoint epochs negative", lambda r: nnx.ModelCheckpoint(epochs=[-1]), E, "ModelCheckpoint.epochs"),
    ("owner", "train_step_fn not callable", lambda r: fit(r, call={"train_step_fn": "step"}), nnx.UpdateOwnerError, "train_step_fn"),
    ("owner", "train_step_fn a class", lambda r: fit(r, call={"train_step_fn": _StepClass}), E,
     r"train_step_fn: is the class _StepClass, not an instance or a function; write train_step_fn=_StepClass\(\.\.\.\)"),
    ("owner", "objective a class", lambda r: fit(r, call={"objective": _StepClass}), E, "objective: is the class _StepClass"),
    ("owner", "eval_step_fn a class", lambda r: fit(r, val=loader(), call={"eval_step_fn": _StepClass}), E,
     "eval_step_fn: is the class _StepClass"),
    ("owner", "a component without the protocol", lambda r: fit(r, call={"components": [lambda: None]}), E,
     r"components\[0\]: .* has no component_spec\(\)"),
    ("owner", "step and objective", lambda r: fit(r, call={"train_step_fn": lambda c: None,
                                                          "objective": nnx.supervised_objective()}), nnx.UpdateOwnerError, "objective"),
    ("owner", "distributed not DDP", lambda r: fit(r, call={"distributed": True}), E, "DDP"),
    ("owner", "history not a journal", lambda r: fit(r, call={"history": "journal"}), E, "HistoryJournal"),
    ("owner", "journal with a plain callback", lambda r: fit(r, call={"history": nnx.HistoryJournal(), "callbacks": [print]}),
     E, "plain-function"),
    ("owner", "journal retention zero", lambda r: nnx.HistoryJournal(retention=0), E, "retention"),
    ("owner", "trainer without owner", lambda r: nnx.Trainer(nnx.NNModel(nnx.NNParams(**NET))).train(
        nnx.NNTrainerParams(n_epochs=1, optims={"main": nnx.NNOptimParams()}, train_loader=loader(), progress=False), root=r),
     nnx.UpdateOwnerError, "trainer_step_fn"),
    ("owner", "trainer of a non-model", lambda r: nnx.Trainer(nn.Linear(4, 3)), E, "NNModel"),
    ("owner", "trainer optims empty", lambda r: nnx.NNTrainerParams(n_epochs=1, optims={}), E, "optims"),
    ("owner", "trainer scheduler for no optimizer", lambda r: nnx.NNTrainerParams(
        n_epochs=1, optims={"g": nnx.NNOptimParams()}, schedulers={"d": nnx.NNSchedulerParams()}), E, "schedulers"),
    ("owner", "trainer optimizer name unsafe", lambda r: nnx.NNTrainerParams(n_epochs=1, optims={"a/b": nnx.NNOptimParams()}),
     E, "slug"),
    # -- compilation (CompileSpec, train(compile=...)) -------------------------------------------
    ("compile", "backend blank", lambda r: nnx.CompileSpec(backend=" "), E, "CompileSpec.backend"),
    ("compile", "mode unknown", lambda r: nnx.CompileSpec(mode="fast"), E, "reduce-overhead"),
    ("compile", "fullgraph as text", lambda r: nnx.CompileSpec(fullgraph="yes"), E, "CompileSpec.fullgraph"),
    ("compile", "on_failure unknown", lambda r: nnx.CompileSpec(on_failure="ignore"), E, "CompileSpec.on_failure.*eager"),
    ("compile", "compile as text", lambda r: fit(r, call={"compile": "inductor"}), E, "compile: must be CompileSpec"),
    ("compile", "with a custom step", lambda r: fit(r, call={"compile": SPEC, "train_step_fn": nnx.default_train_step}), E,
     "compile: .*train_step_fn"),
    ("compile", "with an objective", lambda r: fit(r, call={"compile": SPEC, "objective": nnx.supervised_objective()}), E,
     "compile: .*objective"),
    ("compile", "at reduced precision", lambda r: fit(r, model={"precision": nnx.PrecisionPolicy("bf16")}, call={"compile": SPEC}),
     E, "compile: .*PrecisionPolicy\\('fp32'\\)"),
    ("compile", "a custom module", lambda r: fit(r, module=Wide(), call={"compile": SPEC}), E, "compile: .*built-in non-graph nets"),
    ("compile", "a topology-changing callback", lambda r: fit(r, call={"compile": SPEC, "callbacks": [_Surgery()]}), E,
     "compile: callbacks\\[0\\].*topology"),
    ("compile", "in a Trainer", lambda r: nnx.Trainer(nnx.NNModel(nnx.NNParams(**NET))).train(
        nnx.NNTrainerParams(n_epochs=1, optims={"main": nnx.NNOptimParams()}, train_loader=loader(), progress=False),
        objective=nnx.supervised_objective(), root=r, compile=SPEC), E, "compile: a Trainer run"),
    ("compile", "an unknown backend", lambda r: fit(r, call={"compile": nnx.CompileSpec(backend="nope")}), E,
     "compile.backend: 'nope' is not a torch.compile backend"),
    # -- loaders ------------------------------------------------------------------------------------
    ("loader", "no train_loader", lambda r: fit(r, train_loader=None), T, "train_loader"),
    ("loader", "a tensor as loader", lambda r: fit(r, data=X), T, "train_loader.*\\(inputs, targets\\)"),
    ("loader", "a generator as loader", lambda r: nnx.NNTrainParams(n_epochs=1, train_loader=_gen()), E, "one-shot"),
    ("loader", "a string as loader", lambda r: nnx.NNTrainParams(n_epochs=1, train_loader="data.csv"), E, "train_loader"),
    ("loader", "a dataset as loader", lambda r: fit(r, data=TensorDataset(X, Y)), E, "train_loader"),
    ("loader", "empty loader", lambda r: fit(r, data=[]), T, "empty"),
    ("loader", "empty val loader", lambda r: fit(r, val=[]), T, "val_loader is empty"),
    ("loader", "a val tensor", lambda r: fit(r, val=Y), T, "val_loader.*\\(inputs, targets\\)"),
    ("loader", "an empty generator loader", lambda r: fit(r, data=_Empty()), T, "train_loader yielded no batches"),
    # -- the first batch (checked before anything is written) ------------------------------------
    ("batch", "feature width", lambda r: fit(r, net={"input_dim": 8}), T, "input_dim is 8"),
    ("batch", "feature width in val", lambda r: fit(r, val=loader(torch.randn(32, 5))), T, "val_loader.*input_dim"),
    ("batch", "float64 inputs", lambda r: fit(r, data=loader(X.double())), T, "x.float\\(\\)"),
    ("batch", "float64 val inputs", lambda r: fit(r, val=loader(X.double())), T, "val_loader.*float"),
    ("batch", "numpy batches", lambda r: fit(r, data=[(X.numpy(), Y.numpy())]), T, "torch.from_numpy"),
    ("batch", "numpy targets", lambda r: fit(r, data=[(X, Y.numpy())]), T, "NumPy"),
    ("batch", "label above output_dim", lambda r: fit(r, data=loader(X, Y + 3)), T, "output_dim is 3"),
    ("batch", "label equal to output_dim", lambda r: fit(r, data=loader(X, torch.full((32,), 3))), T, "at least 4"),
    ("batch", "label above in val", lambda r: fit(r, val=loader(X, Y * 2)), T, "val_loader.*output_dim"),
    ("batch", "negative labels", lambda r: fit(r, data=loader(X, Y - 1)), T, "ignore_index=-1"),
    ("batch", "float class targets", lambda r: fit(r, data=loader(X, Y.float())), T, "targets.long\\(\\)"),
    ("batch", "int32 class targets", lambda r: fit(r, data=loader(X, Y.int())), T, "int32; convert with targets.long\\(\\)"),
    ("batch", "one-hot targets", lambda r: fit(r, data=loader(X, nn.functional.one_hot(Y, 3))), T, "one class index per row"),
    ("batch", "column targets", lambda r: fit(r, data=loader(X, Y[:, None])), T, "one class index per row"),
    ("batch", "regression targets of other shape", lambda r: fit(r, net={"output_dim": 1}, model={"loss": "mean_squared_error"},
                                                                  data=loader(X, Y.float())), T, "must match"),
    ("batch", "regression integer targets", lambda r: fit(r, net={"output_dim": 1}, model={"loss": "mean_squared_error"},
                                                           data=loader(X, Y[:, None])), T, "targets.float\\(\\)"),
    ("batch", "multilabel integer targets other than 0/1", lambda r: fit(r, model={"loss": "binary_cross_entropy"},
                                                           data=loader(X, 2 * nn.functional.one_hot(Y, 3))), T, "0 or 1"),
    ("batch", "batch of three", lambda r: fit(r, data=[(X, Y, Y)]), T, "\\(inputs, targets\\)"),
    ("batch", "batch of inputs only", lambda r: fit(r, data=[X]), T, "\\(inputs, targets\\)"),
    ("batch", "dict batches", lambda r: fit(r, data=[{"x": X, "y": Y}]), T, "KeywordInputs"),
    ("batch", "targets a list", lambda r: fit(r, data=[(X, Y.tolist())]), T, "torch.Tensor"),
    ("batch", "module output wider than task", lambda r: fit(r, module=Wide(), model={"task": nnx.TaskSpec.categorical(n=3)}),
     T, "TaskSpec"),
    ("batch", "module forward fails", lambda r: fit(r, module=Broken()), T, "forward failed"),
    ("batch", "module returns a tuple", lambda r: fit(r, module=Tupled()), T, "prediction=0"),
    ("batch", "image inputs to the MLP", lambda r: fit(r, data=loader(torch.randn(32, 1, 2, 2))), T, "features|input_dim"),
    # -- resume, ids and loading --------------------------------------------------------------------
    ("ids", "resume from a missing run", lambda r: fit(r, resume_from_run_id="0" * 32), nnx.RunNotFoundError, "nnx runs list"),
    ("ids", "resume from an unsafe id", lambda r: fit(r, resume_from_run_id="../x"), nnx.InvalidRunIdError, "run id"),
    ("ids", "resume from an unsafe tag", lambda r: fit(r, resume_from_run_id="0" * 32, resume_from_checkpoint="../b"),
     nnx.InvalidRunIdError, "tag"),
    ("ids", "load a missing run", lambda r: nnx.NNRun.load("0" * 32, r), nnx.RunNotFoundError,
     "that folder does not exist; pass the root the run was trained with"),
    ("ids", "load a folder as pretrained weights", lambda r: nnx.NNModel(nnx.NNParams(**NET)).load_pretrained(r.parent), E,
     "is a folder; load_pretrained reads one file"),
    ("ids", "load an unsafe id", lambda r: nnx.NNRun.load("../etc", r), nnx.InvalidRunIdError, "run id"),
    ("ids", "load a glob", lambda r: nnx.NNRun.load("*", r), nnx.InvalidRunIdError, "run id"),
    ("ids", "load an empty id", lambda r: nnx.NNRun.load("", r), nnx.InvalidRunIdError, "non-empty"),
    ("ids", "checkpoint of a missing run", lambda r: nnx.NNModel.from_checkpoint("f" * 32, root=r), nnx.RunNotFoundError, "no run"),
    ("ids", "DDP writer rank negative", lambda r: nnx.distributed.DDP(writer_rank=-1), E, "writer_rank"),
    ("ids", "a train loader's policy", lambda r: nnx.distributed.train_loader(TensorDataset(X, Y), 8, policy="wrap"), E, "pad"),
    ("ids", "a train loader's batch size", lambda r: nnx.distributed.train_loader(TensorDataset(X, Y), 0), E, "batch_size"),
    ("ids", "a global batch that does not divide among the ranks",
     lambda r: nnx.distributed.train_loader(TensorDataset(X, Y), global_batch_size=30, rank=0, world_size=4), E, "28 or 32"),
    ("ids", "a sharded loader of a tensor", lambda r: nnx.distributed.validation_loader(X.tolist, 8), E, "dataset"),
]


def _frozen(root: Path) -> Any:
    model = nnx.NNModel(nnx.NNParams(**NET))
    for p in model.net.parameters():
        p.requires_grad_(False)
    return model.train(nnx.NNTrainParams(n_epochs=1, train_loader=loader(), progress=False), root=root)


def snapshot(root: Path) -> dict[str, bytes] | None:
    """Every file under ``root`` with its bytes (None: no root at all)."""
    if not root.exists():
        return None
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _params(cases: list[Case]) -> list[Any]:
    return [pytest.param(fn, error, pattern, id=f"{cat}: {name}") for cat, name, fn, error, pattern in cases]


def assert_refused(root: Path, call: Callable[[Path], Any], error: type, pattern: str) -> str:
    before = snapshot(root)
    with pytest.raises(nnx.NNxError) as raised:
        call(root)
    exc = raised.value
    assert isinstance(exc, error), f"{type(exc).__name__} is not {error.__name__}: {exc}"
    assert re.search(pattern, str(exc)), f"the message does not name the field or fix ({pattern!r}): {exc}"
    assert snapshot(root) == before, "the runs root changed"
    return str(exc)


@pytest.mark.parametrize(("call", "error", "pattern"), _params(CASES))
def test_a_mistake_is_a_typed_error_that_names_the_fix_and_writes_nothing(tmp_path, call, error, pattern):
    assert_refused(tmp_path / "runs", call, error, pattern)


# -- mistakes over a run that exists: refused, and the run's files keep every byte ---------------
def rerun(root: Path, **changes: Any) -> Any:
    """The trained run's own call again (``resume="auto"``, 3 epochs), with ``changes``."""
    return fit(root, val=changes.pop("val", loader()), resume=changes.pop("resume", "auto"), n_epochs=3, **changes)


def _drop_last_epoch(root: Path) -> None:
    files = RunFiles(FileStorage(root), RID[0])
    last = files.read_tag(LAST).epoch
    rows = [r for r in parse_history(files.storage.read(files.history)) if r.epoch_idx != last]
    files.storage.write(files.history, EagerHistory(rows).render())


def _drop_checkpoints(root: Path) -> None:
    shutil.rmtree(root / RID[0] / "checkpoints")


def _read_only(root: Path, call: Callable[[Path], Any]) -> Any:
    """``call`` over ``root`` mounted read-only (simulated: the tests may run as root)."""
    from tests.api.test_second_contact import read_only  # here: the table's generator runs without tests/

    with pytest.MonkeyPatch.context() as patch:
        read_only(patch, root)
        return call(root)


def _held(root: Path, rid: str) -> Any:
    with FileStorage(root).lease(rid):
        return rerun(root)


OVER_A_RUN: list[Case] = [
    ("run", "the same call without resume", lambda r: rerun(r, resume=None), nnx.RunExistsError, "overwrite_existing=True"),
    ("run", "other rows, resume='auto'", lambda r: rerun(r, data=loader(X[:24], Y[:24])), nnx.DataChangedError, "data_id="),
    ("run", "same size, other values", lambda r: rerun(r, data=loader(X + 1)), nnx.DataChangedError, "sampled rows differ"),
    ("run", "other batch size", lambda r: rerun(r, data=loader(batch_size=16)), nnx.DataChangedError, "batches 4 → 2"),
    ("run", "other validation data", lambda r: rerun(r, val=loader(X * 2)), nnx.DataChangedError, "val_loader"),
    ("run", "other dtype of targets", lambda r: rerun(r, data=loader(X, Y.to(torch.uint8))), nnx.DataChangedError, "uint8"),
    ("run", "history lacks LAST's epoch", rerun, nnx.CorruptRunError, "nnx runs verify"),
    ("run", "checkpoints vanished", rerun, nnx.CorruptRunError, "checkpoints/"),
    ("run", "checkpoints vanished, no resume", lambda r: rerun(r, resume=None), nnx.CorruptRunError, "overwrite_existing=True"),
    ("run", "lease held by another writer", lambda r: _held(r, RID[0]), nnx.RunLeaseError, "wait for it to finish"),
    ("run", "resume from a missing tag", lambda r: fit(r, resume_from_run_id=RID[0], resume_from_checkpoint="q9"),
     nnx.RunNotFoundError, "tags"),
    ("run", "continue another run with another learning rate", lambda r: fit(
        r, resume_from_run_id=RID[0], optim=nnx.NNOptimParams(max_lr=0.5)), nnx.ResumeMismatchError,
     r"optim.max_lr 0.01 → 0.5.* resume_mode='weights_only'"),
    ("run", "load with the run's folder as the id", lambda r: nnx.NNRun.load(str(r / RID[0])), nnx.InvalidRunIdError,
     "is a path, not a run id: .* NNRun.load"),
    ("run", "load with the run's folder as the root", lambda r: nnx.NNRun.load(RID[0], r / RID[0]), nnx.RunNotFoundError,
     "is the folder of run"),
    ("run", "load with the root's parent as the root", lambda r: nnx.NNRun.load(RID[0], r.parent), nnx.RunNotFoundError,
     "holds it: pass root="),
    ("run", "resume stateful from weights only", lambda r: fit(r, resume_from_run_id=RID[0], resume_from_checkpoint="wts",
                                                               resume_mode="stateful"), nnx.ResumeMismatchError, "weights_only"),
    ("run", "checkpoint tag missing", lambda r: nnx.NNModel.from_checkpoint(RID[0], "q9", root=r), nnx.RunNotFoundError, "tags"),
    ("run", "an ambiguous id prefix", lambda r: nnx.NNRun.load("abc", r), nnx.InvalidRunIdError, "give more characters"),
    ("run", "resume stateful into another optimizer", lambda r: fit(r, optim=nnx.NNOptimParams(name="sgd"),
                                                                    resume_from_run_id=RID[0], resume_mode="stateful"),
     nnx.ComponentRestoreError, "optimizer 'default': type"),
    ("run", "a read-only root without its lease file", lambda r: _read_only(r, rerun), nnx.RunLeaseError,
     "read-only.*NNRun.load"),
    ("run", "trainer resumes an NNModel run", lambda r: nnx.Trainer(nnx.NNModel(nnx.NNParams(**NET))).train(
        nnx.NNTrainerParams(n_epochs=3, optims={"default": nnx.NNOptimParams()}, train_loader=loader(), progress=False,
                            resume_from_run_id=RID[0], resume_mode="stateful"),
        trainer_step_fn=lambda c: None, root=r), nnx.ResumeMismatchError, "NNModel.train"),
]
RID: list[str] = []
PREPARE = {"history lacks LAST's epoch": _drop_last_epoch, "checkpoints vanished": _drop_checkpoints,
           "checkpoints vanished, no resume": _drop_checkpoints,
           "an ambiguous id prefix": lambda r: _two_dirs(r),
           "a read-only root without its lease file": lambda r: shutil.rmtree(r / ".leases")}  # done before the snapshot


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A committed 2-of-3-epoch run (the call ``rerun`` repeats) with a weights-only tag ``wts``."""
    root = tmp_path_factory.mktemp("over") / "runs"
    run = fit(root, val=loader(), n_epochs=3, resume="auto", call={"callbacks": [_StopAfter(1)]})
    RID[:] = [run.id]
    return root


class _StopAfter(nnx.Callback):
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_epoch_end(self, ctx: Any) -> None:
        if ctx.epoch == 0:
            ctx.deferred_checkpoint_writes.append(ctx.save_weights("wts"))
        ctx.should_stop = ctx.epoch >= self.epoch


@pytest.mark.parametrize(("name", "call", "error", "pattern"), [pytest.param(n, *p.values, id=p.id) for n, p in zip(
    [c[1] for c in OVER_A_RUN], _params(OVER_A_RUN), strict=True)])
def test_a_mistake_over_an_existing_run_leaves_its_files_as_they_were(trained, tmp_path, name, call, error, pattern):
    root = tmp_path / "runs"
    shutil.copytree(trained, root)
    PREPARE.get(name, lambda r: None)(root)
    assert_refused(root, call, error, pattern)


# -- the command line: an exit code and one line, never a traceback, the root untouched ----------
CLI: list[tuple[str, str, Callable[[Path, Path], list[str]], int, str]] = [
    ("cli", "no command", lambda r, t: [], 2, "nnx runs export"),
    ("cli", "unknown command", lambda r, t: ["runs", "delete", "x"], 2, "invalid choice"),
    ("cli", "show an unsafe id", lambda r, t: ["runs", "show", "../x", "--root", str(r)], 2, "not allowed"),
    ("cli", "show a missing run", lambda r, t: ["runs", "show", "f" * 32, "--root", str(r)], 1, "no run"),
    ("cli", "verify a missing run", lambda r, t: ["runs", "verify", "0" * 32, "--root", str(r)], 1, "nnx runs list"),
    ("cli", "an ambiguous prefix", lambda r, t: (_two_dirs(r), ["runs", "show", "abc", "--root", str(r)])[1], 2,
     "give more characters"),
    ("cli", "plot to an unknown format", lambda r, t: ["runs", "plot", RID[0][:8], "-o", str(t / "x.xyz"), "--root", str(r)],
     2, "\\*\\.png"),
    ("cli", "plot into a file's folder", lambda r, t: ["runs", "plot", RID[0][:8], "-o", str(_file(t) / "x.png"),
                                                       "--root", str(r)], 1, "cannot write"),
    ("cli", "export to an unknown format", lambda r, t: ["runs", "export", RID[0][:8], str(t / "m.pt"), "--root", str(r)],
     2, "safetensors"),
    ("cli", "export an old opset", lambda r, t: ["runs", "export", RID[0][:8], str(t / "m.onnx"), "--opset", "5",
                                                 "--root", str(r)], 2, "--opset"),
    ("cli", "export into a file's folder", lambda r, t: ["runs", "export", RID[0][:8], str(_file(t) / "m.safetensors"),
                                                         "--root", str(r)], 1, "cannot write"),
    ("cli", "export a missing tag", lambda r, t: ["runs", "export", RID[0][:8], str(t / "m.safetensors"), "--tag", "q9",
                                                  "--root", str(r)], 1, "q9"),
    ("cli", "list with a bad filter", lambda r, t: ["runs", "list", "--where", "n_epochs", "--root", str(r)], 2, "KEY=VALUE"),
    ("cli", "list by an unknown key", lambda r, t: ["runs", "list", "--sort", "loss", "--root", str(r)], 2, "choose from"),
    ("cli", "list where a key is misspelt", lambda r, t: ["runs", "list", "--where", "n_epoch=2", "--root", str(r)], 2,
     "did you mean n_epochs"),
    ("cli", "compare a missing run", lambda r, t: ["runs", "compare", RID[0][:8], "e" * 32, "--root", str(r)], 1, "no run"),
]


def _two_dirs(root: Path) -> None:
    (root / "abc0").mkdir(exist_ok=True)
    (root / "abc1").mkdir(exist_ok=True)


def _file(folder: Path) -> Path:
    path = folder / "a-file"
    path.write_text("not a folder")
    return path


@pytest.mark.parametrize(("argv", "code", "pattern"), [pytest.param(a, c, p, id=f"{cat}: {n}") for cat, n, a, c, p in CLI])
def test_a_command_line_mistake_is_one_line_and_an_exit_code(trained, tmp_path, capsys, argv, code, pattern):
    root = tmp_path / "runs"
    shutil.copytree(trained, root)
    args = argv(root, tmp_path)
    before = snapshot(root)
    assert main(args) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err and re.search(pattern, err), err
    assert snapshot(root) == before


def test_the_catalogue_is_large_enough():
    counts = {}
    for cat, *_ in [*CASES, *OVER_A_RUN, *CLI]:
        counts[cat] = counts.get(cat, 0) + 1
    assert sum(counts.values()) >= 120, counts


# -- the table in docs/reliability.md, generated from the lists above ------------------------------
DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
BEGIN = "<!-- the catalogue: generated by `python tests/api/test_bad_inputs.py`; do not edit by hand -->"
END = "<!-- end of the catalogue -->"
LABELS = {
    "net": "net shape (`NNParams`)", "model": "model, task, precision (`NNModelParams`, `TaskSpec`, `PrecisionPolicy`)",
    "optim": "optimizer (`NNOptimParams`)", "sched": "scheduler (`NNSchedulerParams`)",
    "train": "training parameters (`NNTrainParams`, `train()` arguments)", "metrics": "metrics and monitor",
    "callbacks": "callbacks", "owner": "update owners, `Trainer`, history",
    "compile": "compilation (`CompileSpec`, `train(compile=...)`)", "loader": "loaders",
    "batch": "the first batch", "ids": "ids, loading, distributed loaders",
    "run": "over an existing run (resume, changed data, damage, leases)", "cli": "the command line",
}
FRESH, KEPT = "nothing: the root does not exist", "the run's files, byte for byte"


def catalogue_table() -> str:
    """The catalogue as markdown: the count per category, then input → error → what the message
    must name → what is left on disk, one row per case."""
    rows = [(c, n, f"`{e.__name__}`", p, FRESH) for c, n, _, e, p in CASES]
    rows += [(c, n, f"`{e.__name__}`", p, KEPT) for c, n, _, e, p in OVER_A_RUN]
    rows += [(c, n, f"exit {code}, one line on stderr", p, KEPT) for c, n, _, code, p in CLI]
    counts = {cat: sum(1 for r in rows if r[0] == cat) for cat in LABELS}
    assert sum(counts.values()) == len(rows), "a category without a label"
    def cell(text):
        return text.replace("|", "\\|")
    lines = [f"{len(rows)} cases:", "", "| category | cases |", "|---|---|"]
    lines += [f"| {LABELS[cat]} | {n} |" for cat, n in counts.items()]
    lines += ["", "| category | input | error | the message matches | left on disk |", "|---|---|---|---|---|"]
    lines += [f"| {c} | {cell(n)} | {e} | `{cell(p)}` | {left} |" for c, n, e, p, left in rows]
    return "\n".join([BEGIN, *lines, END])


def test_the_table_in_docs_reliability_is_this_catalogue():
    text = DOC.read_text()
    assert BEGIN in text and END in text, f"{DOC.name} lost the catalogue's markers"
    shown = text[text.index(BEGIN):text.index(END) + len(END)]
    assert shown == catalogue_table(), "the table drifted: run `python tests/api/test_bad_inputs.py`"


if __name__ == "__main__":  # rewrite the table in docs/reliability.md
    text = DOC.read_text()
    DOC.write_text(text[:text.index(BEGIN)] + catalogue_table() + text[text.index(END) + len(END):])
