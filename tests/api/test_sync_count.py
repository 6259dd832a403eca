"""Host synchronisations on the training path (issue 18: a GPU-ready hot path).

The rule: at most one host synchronisation per optimizer update (the finite check the
specification needs before any parameter changes) and none per batch otherwise; batch statistics
stay on the device and are read once per epoch. On a CPU a synchronisation is a call that would
make the host wait for a device: ``Tensor.item``, ``.tolist``, ``.cpu``, ``.numpy``, and the
conversions ``bool()``, ``float()``, ``int()``, ``operator.index()``. The test counts those calls
when they are made from NNx's own code (``nnx_core``, ``nnx_adapters``, ``nnx_api``: the
optimizer's internals are torch's, and the plain loop pays them too) during each epoch, for two
epoch lengths: the growth of the count with the number of batches is what the hot path costs.
(On a GPU, ``torch.cuda.set_sync_debug_mode("warn")`` over an epoch shows the same: tests/gpu.)
``TaskAdapter.host_count`` is not counted: it reads the loader's own CPU targets before they move
to the device (the valid class targets), which never waits for a device.
"""

from __future__ import annotations

import collections
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx

SYNCS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")
HOST_READS = ("host_count",)  # reads of the batch's CPU targets before the move (module docstring)
PROJECT = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), package) + os.sep
    for package in ("nnx_core", "nnx_adapters", "nnx_api")
)


class SyncCounter:
    """Counts the host-sync calls NNx's own code makes on tensors, by where they are made."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        self.total = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in SYNCS:
            monkeypatch.setattr(torch.Tensor, name, self._wrap(name, getattr(torch.Tensor, name)))

    def _wrap(self, name: str, original: Any) -> Any:
        counter = self

        def counted(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            frame = sys._getframe(1)
            if frame.f_code.co_filename.startswith(PROJECT) and frame.f_code.co_name not in HOST_READS:
                counter.total += 1
                counter.calls[f"{name} at {os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"] += 1
            return original(tensor, *args, **kwargs)

        return counted


class EpochSyncs(nnx.Callback):
    """The counter's growth over each epoch's batches, validation and records (begin → end)."""

    def __init__(self, counter: SyncCounter) -> None:
        self.counter = counter
        self.per_epoch: list[int] = []
        self.where: list[collections.Counter[str]] = []
        self.updates: list[int] = []
        self._start = 0
        self._calls: collections.Counter[str] = collections.Counter()
        self._updates = 0

    def on_epoch_begin(self, ctx: Any) -> None:
        self._start, self._calls, self._updates = self.counter.total, collections.Counter(self.counter.calls), 0

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        self._updates += 1

    def on_epoch_end(self, ctx: Any) -> None:
        self.per_epoch.append(self.counter.total - self._start)
        self.where.append(collections.Counter(self.counter.calls) - self._calls)
        self.updates.append(self._updates)


def run(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, *, batches: int, accumulate: int, **task: Any) -> EpochSyncs:
    gen = torch.Generator().manual_seed(0)
    classes = task.pop("classes", 3)
    x = torch.randn(batches * 8 + 16, 4, generator=gen)
    y = torch.randint(0, classes, (len(x),), generator=gen)
    if task.get("ignore_index") is not None:
        y[::5] = task["ignore_index"]
    train = DataLoader(TensorDataset(x[16:], y[16:]), batch_size=8)
    val = DataLoader(TensorDataset(x[:16], y[:16]), batch_size=8)
    model = nnx.NNModel(
        nnx.NNParams(input_dim=4, output_dim=classes, hidden_dims=(6,)),
        nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY, **({"task": nnx.TaskSpec(**task)} if task else {})),
    )
    params = nnx.NNTrainParams(
        n_epochs=2, seed=0, train_loader=train, val_loader=val, progress=False,
        optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=1e-2, accumulate_grad_batches=accumulate),
    )
    counter = SyncCounter()
    epochs = EpochSyncs(counter)
    with monkeypatch.context() as patch:
        counter.install(patch)
        model.train(params, callbacks=[epochs], root=str(tmp_path / f"runs-{batches}"))
    return epochs


def growth(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple[int, int, Iterator[str]]:
    """(extra syncs, extra updates) of an epoch of 32 batches over one of 8 (the second epoch
    of each run: steady state), and where the extra syncs were made."""
    short = run(tmp_path, monkeypatch, batches=8, **kw)
    long = run(tmp_path, monkeypatch, batches=32, **kw)
    extra = long.where[1] - short.where[1]
    return long.per_epoch[1] - short.per_epoch[1], long.updates[1] - short.updates[1], iter(sorted(extra))


@pytest.mark.parametrize("accumulate", [1, 4])
def test_at_most_one_sync_per_update_and_none_per_batch(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, accumulate: int) -> None:
    syncs, updates, where = growth(tmp_path, monkeypatch, accumulate=accumulate)
    assert updates == 24 // accumulate
    assert syncs <= updates, f"{syncs} host syncs for {updates} more updates; extra calls: {list(where)}"


def test_the_counter_sees_a_sync_per_batch(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The instrument works: a step that reads its loss every batch is counted once per batch."""
    from nnx_api.training import builtin_step

    real = builtin_step.DefaultStep.update

    def reading(self: Any, *args: Any) -> Any:
        out = real(self, *args)
        float(out.loss)  # a per-batch read, as a naive hot path would do
        return out

    monkeypatch.setattr(builtin_step.DefaultStep, "update", reading)
    monkeypatch.setattr(sys.modules[__name__], "PROJECT", (*PROJECT, os.path.abspath(__file__)))  # count this file too
    syncs, updates, _ = growth(tmp_path, monkeypatch, accumulate=4)
    assert syncs >= 24 + updates

