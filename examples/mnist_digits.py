"""A small convolutional classifier of handwritten digits, trained with Adadelta and a step schedule.

    python examples/mnist_digits.py [--root runs] [--epochs 5] [--log-interval 10]

What PyTorch's MNIST example does, on the 8×8 digits scikit-learn bundles (``load_digits``:
1797 images, nothing to download): two 3×3 convolutions with ReLU, a 2×2 max-pool, dropout, two
linear layers with dropout between them, and a negative log-likelihood loss over log-softmax
outputs; Adadelta (lr 1.0) whose learning rate a step schedule multiplies by 0.7 after every
epoch. It prints the training loss every ``--log-interval`` batches and the test loss and
accuracy after each epoch.

How it maps onto NNx:

* the network is a plain ``nn.Module`` passed as ``NNModel(module=...)``. It returns raw scores:
  ``Losses.NEGATIVE_LOG_LIKELIHOOD`` applies ``log_softmax`` itself before ``nll_loss``, so a
  module that ended in ``log_softmax`` (as the PyTorch example's does) would have it applied twice;
* Adadelta is not one of ``nnx.Optims``: it is registered once per process with
  ``nnx.register_optimizer_factory`` and named by ``NNOptimFactoryParams(factory=
  OptimizerFactorySpec(id, version, config))`` — the spec (id, version and Adadelta's ``rho`` /
  ``eps``) is part of the run's configuration and id, the code is not;
* ``StepLR(step_size=1, gamma=0.7)`` is ``NNSchedulerParams(kind="step", step_size=1,
  factor=0.7)`` on the epoch clock (it steps after each epoch's validation, as the example's
  ``scheduler.step()`` after ``test()``);
* the per-batch prints come from a callback: ``on_optimizer_update`` receives each update's
  ``UpdateEvent`` whose ``loss`` is the batch's mean loss; the per-epoch test line reads the
  epoch's validation record (``ctx.idp.val_edp``).

The script checks itself against ``plain_torch``, the same training as a hand-written loop (same
initial weights, the same seeded shuffling ``DataLoader``, the same dropout draws, Adadelta and
``StepLR``): the final weights are **bit-identical** — the same kernels run in the same order;
NNx's mean loss is ``nll_loss(..., reduction="sum")`` back-propagated with the seed ``1/rows``,
which is the gradient ``reduction="mean"`` computes to the bit — and so are the logged training
losses; the test loss agrees within float32 rounding (NNx sums it over batches on the device, the
loop in Python floats), the test accuracy exactly.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx

BATCH, TEST_BATCH = 64, 500
LR, GAMMA = 1.0, 0.7
ADADELTA = {"rho": 0.9, "eps": 1e-6}  # torch's defaults, written down: they are part of the run id
ADADELTA_ID = ("torch.optim.Adadelta", 1)
SEED, SHUFFLE_SEED = 0, 1


class DigitsConvNet(nn.Module):
    """1×8×8 → conv 3×3 (16) → conv 3×3 (32) → max-pool 2 → dropout → 64 → dropout → 10 scores."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3)   # 8×8 → 6×6
        self.conv2 = nn.Conv2d(16, 32, 3)  # 6×6 → 4×4, pooled to 2×2
        self.drop_conv = nn.Dropout(0.25)
        self.fc1 = nn.Linear(32 * 2 * 2, 64)
        self.drop_fc = nn.Dropout(0.5)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        h = F.relu(self.fc1(torch.flatten(self.drop_conv(h), 1)))
        return self.fc2(self.drop_fc(h))  # raw scores: the NLL loss takes their log-softmax


def digits() -> tuple[TensorDataset, TensorDataset]:
    """Train (1437 images) and test (360) sets, standardised by the training pixels' mean and std."""
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32).view(-1, 1, 8, 8)
    y = torch.tensor(y, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(SEED))
    train, test = order[:1437], order[1437:]
    mean, std = x[train].mean(), x[train].std()
    x = (x - mean) / std
    return TensorDataset(x[train], y[train]), TensorDataset(x[test], y[test])


def train_loader(train: TensorDataset) -> DataLoader:
    """Shuffled batches from a generator of their own: the same order on every run, in NNx and the twin."""
    return DataLoader(train, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(SHUFFLE_SEED))


def eval_batches(test: TensorDataset) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = test.tensors
    return list(zip(x.split(TEST_BATCH), y.split(TEST_BATCH), strict=True))


def register_adadelta() -> None:
    """Make ``OptimizerFactorySpec("torch.optim.Adadelta", 1, ...)`` buildable in this process (once)."""
    if ADADELTA_ID not in nnx.registered_optimizer_factories():
        nnx.register_optimizer_factory(*ADADELTA_ID, lambda groups, config: torch.optim.Adadelta(groups, **config))


class PrintProgress(nnx.Callback):
    """The training loss every ``interval`` batches and the test loss / accuracy after each epoch."""

    def __init__(self, interval: int, batches: int, rows: int) -> None:
        self.interval, self.batches, self.rows = interval, batches, rows
        self.logged: list[tuple[int, int, float]] = []  # (epoch, batch, loss)

    def on_optimizer_update(self, ctx: nnx.CallbackContext, event: nnx.UpdateEvent) -> None:
        if event.batch_idx % self.interval == 0:
            self.logged.append((event.epoch_idx, event.batch_idx, event.loss))
            seen = min(event.batch_idx * BATCH, self.rows)
            print(f"epoch {event.epoch_idx} · batch {event.batch_idx:>2}/{self.batches} "
                  f"({seen:>4}/{self.rows} images) · training loss {event.loss:.6f}")

    def on_epoch_end(self, ctx: nnx.CallbackContext) -> None:
        val = ctx.idp.val_edp
        print(f"epoch {ctx.epoch} · test loss {val.loss:.4f} · accuracy {val.accuracy:.2%}")


def plain_torch(train: TensorDataset, test: TensorDataset, epochs: int, interval: int):
    """The same training as a hand-written PyTorch loop: the final net, the logged (epoch, batch,
    loss) and each epoch's (test loss per image, accuracy)."""
    torch.manual_seed(SEED)
    net = DigitsConvNet()
    torch.manual_seed(SEED)  # what NNTrainParams(seed=0) does before the first epoch: the dropout stream
    optimizer = torch.optim.Adadelta(net.parameters(), lr=LR, **ADADELTA)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=GAMMA)
    loader = train_loader(train)
    logged, scores = [], []
    for epoch in range(epochs):
        net.train()
        for batch_idx, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = F.nll_loss(F.log_softmax(net(x), dim=1), y)
            loss.backward()
            optimizer.step()
            if batch_idx % interval == 0:
                logged.append((epoch, batch_idx, loss.item()))
        net.eval()
        total, correct = 0.0, 0
        with torch.no_grad():
            for x, y in eval_batches(test):
                scores_ = net(x)
                total += F.nll_loss(F.log_softmax(scores_, dim=1), y, reduction="sum").item()
                correct += int((scores_.argmax(1) == y).sum())
        scores.append((total / len(test), correct / len(test)))
        schedule.step()
    return net, logged, scores


def main(argv: list[str] | None = None) -> nnx.NNRun:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="runs root (default ./runs)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--log-interval", type=int, default=10, help="batches between training-loss lines")
    args = parser.parse_args(argv)
    train, test = digits()
    register_adadelta()

    torch.manual_seed(SEED)
    model = nnx.NNModel(module=DigitsConvNet(), params=nnx.NNModelParams(loss=nnx.Losses.NEGATIVE_LOG_LIKELIHOOD))
    loader = train_loader(train)
    params = nnx.NNTrainParams(
        n_epochs=args.epochs,
        optim=nnx.NNOptimFactoryParams(factory=nnx.OptimizerFactorySpec(*ADADELTA_ID, ADADELTA), max_lr=LR),
        scheduler=nnx.NNSchedulerParams(kind=nnx.Schedulers.STEP, step_size=1, factor=GAMMA),
        seed=SEED, data_id="sklearn-digits-8x8", train_loader=loader, val_loader=eval_batches(test), resume="auto",
    )
    progress = PrintProgress(args.log_interval, len(loader), len(train))
    run = model.train(params, callbacks=[progress], root=args.root)

    reference, logged, scores = plain_torch(train, test, args.epochs, args.log_interval)
    if progress.logged:  # empty when resume="auto" returned a finished run
        assert progress.logged == logged, (progress.logged, logged)
    for epoch, (loss, accuracy) in enumerate(scores):
        val = run.epochs[epoch].val_edp
        print(f"epoch {epoch}: NNx test loss {val.loss:.6f}, accuracy {val.accuracy:.4f}; "
              f"plain PyTorch {loss:.6f}, {accuracy:.4f}")
        assert abs(val.loss - loss) <= 1e-5 * abs(loss) and val.accuracy == accuracy, (val, loss, accuracy)
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(model.net.state_dict()[name], value, rtol=0, atol=0)
    print("final weights are bit-identical to the plain PyTorch loop's")
    print(f"run folder: {run.path}")
    return run


if __name__ == "__main__":
    main()
