"""Fine-tuning: pretrain a small backbone, then train it on a new task under a new head.

    python examples/finetune_digits.py [--root runs] [--epochs 30] [--pretrain-epochs 5] [--patience 3]

The data are scikit-learn's bundled 8×8 digits (``load_digits``), split once into 1437 training
and 360 validation images. A backbone (64 → 64 → 32, ReLU) is **pretrained** to tell the digits
0–4 apart (a 5-way head). Its weights then go under a **new 10-way head**, and the whole net is
**fine-tuned** on all ten digits with the usual fine-tuning loop:

* AdamW, the backbone at a tenth of the head's learning rate (``NNParamGroupSpec("backbone.*",
  lr_multiplier=0.1)``);
* a learning rate that warms up linearly over the first epoch's updates, then decays along a
  cosine to ``min_lr`` at the last update: ``NNSchedulerParams(kind="warmup_cosine",
  warmup_steps=..., total_steps=..., min_lr=..., clock="optimizer_update")`` — one tick per
  optimizer update, not per batch;
* gradient accumulation over 2 batches (``accumulate_grad_batches=2``: the window's summed loss
  divided by its rows, an epoch's last window being a single batch) and clipping of the
  gradients' global norm to 1 (``grad_clip_norm=1.0``);
* early stopping on the validation macro-F1: ``metrics=(MetricSpec("f1", config={"average":
  "macro"}),)``, ``monitor=MonitorSpec("f1", mode="max")`` — the run's one decision, which also
  selects the BEST checkpoint — and ``EarlyStopping(patience=...)``, which follows it.

The script checks itself against ``plain_torch``, both phases as hand-written loops. Pretraining
(Adam, one update per batch, mean cross-entropy) ends in **bit-identical** weights: the same
kernels in the same order. Fine-tuning agrees **within float32 rounding**, not to the bit: NNx
back-propagates each batch's *summed* loss and divides the window's gradients by its rows once,
where the loop back-propagates each batch's sum already divided by the window's rows — the same
gradient, rounded in another order. So the weights are compared with a tolerance, the validation
macro-F1 of every epoch (scikit-learn's ``f1_score``, on the twin's side) within 1e-6, the
learning rate of every update within 1e-12 (relative: NNx scales the base rate by a factor, the
loop writes the formula out), and the epoch early stopping ends on exactly.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.metrics import f1_score
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx

BATCH, ACCUMULATE, CLIP = 32, 2, 1.0
PRETRAIN_LR, LR, BACKBONE_SHARE, WEIGHT_DECAY, MIN_LR = 1e-3, 2e-2, 0.1, 1e-2, 1e-5
SEED, SHUFFLE_SEED = 0, 1


class Backbone(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class Classifier(nn.Module):
    """A backbone under a linear head of ``classes`` outputs (parameter names ``backbone.*``, ``head.*``)."""

    def __init__(self, backbone: Backbone, classes: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def digits() -> tuple[TensorDataset, TensorDataset]:
    """Training (1437 images) and validation (360) sets; pixels scaled to [0, 1]."""
    x, y = load_digits(return_X_y=True)
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(SEED))
    return TensorDataset(x[order[:1437]], y[order[:1437]]), TensorDataset(x[order[1437:]], y[order[1437:]])


def first_five(data: TensorDataset) -> TensorDataset:
    """The pretraining task: the images of the digits 0–4 only."""
    x, y = data.tensors
    keep = y < 5
    return TensorDataset(x[keep], y[keep])


def loader(data: TensorDataset) -> DataLoader:
    """Shuffled batches from a generator of their own: the same order in NNx and the twin."""
    return DataLoader(data, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(SHUFFLE_SEED))


def val_batches(data: TensorDataset) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = data.tensors
    return list(zip(x.split(120), y.split(120), strict=True))


def updates_per_epoch(batches: int) -> int:
    """Optimizer updates an epoch makes: one per window of ACCUMULATE batches, the last one shorter."""
    return math.ceil(batches / ACCUMULATE)


def schedule(batches: int, epochs: int) -> tuple[int, int]:
    """(warmup_steps, total_steps) in optimizer updates: warm up over the first epoch, end with the last."""
    per_epoch = updates_per_epoch(batches)
    return per_epoch, per_epoch * epochs


def pretrained_model(train: TensorDataset, epochs: int, root: str | None) -> tuple[nnx.NNModel, nnx.NNRun]:
    """Pretrain ``Classifier(Backbone(), 5)`` on the digits 0–4 (Adam, a constant learning rate)."""
    torch.manual_seed(SEED)
    model = nnx.NNModel(module=Classifier(Backbone(), 5), params=nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY))
    params = nnx.NNTrainParams(
        n_epochs=epochs, optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=PRETRAIN_LR),
        scheduler=nnx.NNSchedulerParams(factor=1.0), seed=SEED, data_id="digits-0-4",
        train_loader=loader(first_five(train)), resume="auto",
    )
    return model, model.train(params, root=root)


def fine_tune_net(backbone_state: dict[str, torch.Tensor]) -> Classifier:
    """The pretrained backbone under a fresh 10-way head (its initial weights drawn after SEED)."""
    torch.manual_seed(SEED)
    backbone = Backbone()
    backbone.load_state_dict(backbone_state)
    return Classifier(backbone, 10)


class LRs(nnx.Callback):
    """The head's learning rate each committed update used (before its update-clock tick)."""

    def __init__(self) -> None:
        self.used: list[float] = []

    def on_optimizer_update(self, ctx: nnx.CallbackContext, event: nnx.UpdateEvent) -> None:
        self.used.append(ctx.optimizer.param_groups[-1]["lr"])


def hand_lr(base: float, update: int, warmup: int, total: int) -> float:
    """Linear warm-up, then a cosine from ``base`` down to MIN_LR at ``total`` (the twin's own formula)."""
    if update < warmup:
        return base * (update + 1) / warmup
    done = min(1.0, (update - warmup) / (total - warmup))
    return MIN_LR + (base - MIN_LR) * (1 + math.cos(math.pi * done)) / 2


def plain_torch(train: TensorDataset, val: TensorDataset, pretrain_epochs: int, epochs: int, patience: int):
    """Both phases as hand-written loops: the pretrained net, the fine-tuned net, each epoch's
    validation macro-F1, the learning rate of each update, and the epoch training stopped at."""
    torch.manual_seed(SEED)
    net = Classifier(Backbone(), 5)
    torch.manual_seed(SEED)  # NNTrainParams(seed=0) before the first epoch
    optimizer = torch.optim.Adam(net.parameters(), lr=PRETRAIN_LR)
    pretrain_batches = loader(first_five(train))
    for _ in range(pretrain_epochs):
        for x, y in pretrain_batches:
            optimizer.zero_grad()
            F.cross_entropy(net(x), y).backward()
            optimizer.step()
    pretrained = {k: v.clone() for k, v in net.state_dict().items()}

    net = fine_tune_net({k.removeprefix("backbone."): v for k, v in pretrained.items() if k.startswith("backbone.")})
    torch.manual_seed(SEED)
    optimizer = torch.optim.AdamW([
        {"params": list(net.backbone.parameters()), "lr": LR * BACKBONE_SHARE},
        {"params": list(net.head.parameters())},
    ], lr=LR, weight_decay=WEIGHT_DECAY)
    bases = [group["lr"] for group in optimizer.param_groups]
    batches = loader(train)
    warmup, total = schedule(len(batches), epochs)
    sizes = [min(BATCH, len(train) - i) for i in range(0, len(train), BATCH)]  # rows of each batch
    f1s, lrs, best, wait, update, stopped = [], [], -math.inf, 0, 0, epochs - 1
    for epoch in range(epochs):
        net.train()
        for batch_idx, (x, y) in enumerate(batches):
            start = batch_idx - batch_idx % ACCUMULATE
            rows = sum(sizes[start:start + ACCUMULATE])
            (F.cross_entropy(net(x), y, reduction="sum") / rows).backward()
            if batch_idx % ACCUMULATE == ACCUMULATE - 1 or batch_idx == len(sizes) - 1:
                for group, base in zip(optimizer.param_groups, bases, strict=True):
                    group["lr"] = hand_lr(base, update, warmup, total)
                lrs.append(optimizer.param_groups[-1]["lr"])
                nn.utils.clip_grad_norm_(net.parameters(), CLIP)
                optimizer.step()
                optimizer.zero_grad()
                update += 1
        net.eval()
        with torch.no_grad():
            predicted = torch.cat([net(x).argmax(1) for x, _ in val_batches(val)])
        f1s.append(f1_score(val.tensors[1].numpy(), predicted.numpy(), average="macro"))
        best, wait = (f1s[-1], 0) if f1s[-1] > best else (best, wait + 1)
        if wait >= patience:
            stopped = epoch
            break
    return pretrained, net, f1s, lrs, stopped


def main(argv: list[str] | None = None) -> nnx.NNRun:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="runs root (default ./runs)")
    parser.add_argument("--epochs", type=int, default=30, help="fine-tuning epochs at most (early stopping may end sooner)")
    parser.add_argument("--pretrain-epochs", type=int, default=5)
    parser.add_argument("--patience", type=int, default=3, help="epochs without a better validation macro-F1")
    args = parser.parse_args(argv)
    train, val = digits()

    pretrained, pre_run = pretrained_model(train, args.pretrain_epochs, args.root)
    print(f"pretrained on the digits 0-4: {pre_run.path}")
    backbone = {k.removeprefix("backbone."): v for k, v in pretrained.net.state_dict().items() if k.startswith("backbone.")}

    model = nnx.NNModel(module=fine_tune_net(backbone), params=nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY))
    batches = loader(train)
    warmup, total = schedule(len(batches), args.epochs)
    macro_f1 = nnx.MetricSpec("f1", config={"average": "macro"})
    params = nnx.NNTrainParams(
        n_epochs=args.epochs,
        optim=nnx.NNOptimParams(
            name=nnx.Optims.ADAMW, max_lr=LR, weight_decay=WEIGHT_DECAY,
            accumulate_grad_batches=ACCUMULATE, grad_clip_norm=CLIP,
            param_groups=[nnx.NNParamGroupSpec("backbone.*", lr_multiplier=BACKBONE_SHARE)],
        ),
        scheduler=nnx.NNSchedulerParams(
            kind=nnx.Schedulers.WARMUP_COSINE, warmup_steps=warmup, total_steps=total, min_lr=MIN_LR,
            clock="optimizer_update",
        ),
        metrics=(macro_f1,), monitor=nnx.MonitorSpec("f1", mode="max"),
        seed=SEED, data_id="digits-finetune", train_loader=batches, val_loader=val_batches(val), resume="auto",
    )
    lrs, stop = LRs(), nnx.EarlyStopping(patience=args.patience)
    run = model.train(params, callbacks=[lrs, stop], root=args.root)
    f1s = [run.epochs[e].val_edp.metrics["f1"] for e in sorted(run.epochs)]
    best = run.best()
    print(f"fine-tuned: {len(f1s)} epochs, validation macro-F1 {' '.join(f'{f:.3f}' for f in f1s)}; "
          f"BEST epoch {best.epoch_idx} ({best.selection.value:.4f})")

    twin_pre, twin_net, twin_f1s, twin_lrs, twin_stop = plain_torch(train, val, args.pretrain_epochs, args.epochs,
                                                                    args.patience)
    for name, value in twin_pre.items():
        torch.testing.assert_close(pretrained.net.state_dict()[name], value, rtol=0, atol=0)
    print("pretraining: weights bit-identical to the plain PyTorch loop's")
    assert max(run.epochs) == twin_stop, (max(run.epochs), twin_stop)
    assert len(f1s) == len(twin_f1s) and all(abs(a - b) <= 1e-6 for a, b in zip(f1s, twin_f1s, strict=True)), (f1s, twin_f1s)
    if lrs.used:  # empty when resume="auto" returned a finished run
        assert len(lrs.used) == len(twin_lrs), (len(lrs.used), len(twin_lrs))
        assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(lrs.used, twin_lrs, strict=True)), (lrs.used, twin_lrs)
    for name, value in twin_net.state_dict().items():
        torch.testing.assert_close(model.net.state_dict()[name], value, rtol=1e-4, atol=1e-5)
    print(f"fine-tuning: stopped at epoch {twin_stop} as the plain PyTorch loop; macro-F1 per epoch, the learning "
          "rate of every update and the final weights agree within float32 rounding")
    print(f"run folder: {run.path}")
    return run


if __name__ == "__main__":
    main()
