"""torchmetrics against NNx's hand-written accumulators (issue 15, Build 5): cost per batch and per epoch.

    .venv-peers/bin/python bench/metrics.py          # torchmetrics comes with Lightning there
    .venv-peers/bin/python bench/metrics.py --quick

torchmetrics is not a dependency of this project; under ``.venv`` (``make bench``) the script
says so and exits 0. Both sides score the same 64 batches of logits and integer targets (batch 64;
2 and 10 classes): accuracy and macro F1 / precision / recall.

* training path, per batch: what the default step adds per batch — NNx: ``BatchScores.add`` (the
  argmax kept on the device; every batch's scores come from one pass at the epoch's end);
  torchmetrics: ``MetricCollection.update`` of the four metrics (one compute group) — and, per
  epoch, NNx's ``BatchScores.table`` against torchmetrics' per-batch ``forward`` (what per-batch
  scores need there) or ``compute``
* validation / summary, whole-epoch scores: NNx's ``Confusion`` (``index_add_``) per batch plus
  ``scores`` once, against ``MetricCollection.update`` per batch plus ``compute`` once

Medians of interleaved repetitions of thread CPU time, one thread. Prints a table; exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _common as C

C.setup_threads()

import torch  # noqa: E402

from nnx_adapters.pytorch.metrics import BatchScores, Confusion  # noqa: E402

try:
    import torchmetrics
    from torchmetrics import MetricCollection
    from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score, MulticlassPrecision, MulticlassRecall
except ImportError:  # pragma: no cover — the project's own venv
    torchmetrics = None


BATCHES, BATCH = 64, 64


def collection(classes: int) -> MetricCollection:
    return MetricCollection({
        "accuracy": MulticlassAccuracy(classes, average="micro"),
        "f1": MulticlassF1Score(classes, average="macro"),
        "precision": MulticlassPrecision(classes, average="macro"),
        "recall": MulticlassRecall(classes, average="macro"),
    })


def timed(fn: Callable[[], object]) -> float:
    start = time.thread_time()
    fn()
    return time.thread_time() - start


def arms(classes: int) -> dict[str, Callable[[], dict[str, float]]]:
    gen = torch.Generator().manual_seed(classes)
    logits = [torch.randn(BATCH, classes, generator=gen) for _ in range(BATCHES)]
    targets = [torch.randint(0, classes, (BATCH,), generator=gen) for _ in range(BATCHES)]

    def ours_train() -> dict[str, float]:
        scores = BatchScores(classes, None)
        per_batch = timed(lambda: [scores.add(out.argmax(-1), t) for out, t in zip(logits, targets, strict=True)])
        epoch = timed(lambda: scores.table().tolist())
        return {"batch": per_batch / BATCHES, "epoch": epoch}

    def tm_train() -> dict[str, float]:
        metrics = collection(classes)
        rows: list[dict[str, torch.Tensor]] = []
        per_batch = timed(lambda: [rows.append(metrics(out, t)) for out, t in zip(logits, targets, strict=True)])  # per-batch values
        epoch = timed(lambda: [float(v) for r in rows for v in r.values()])
        return {"batch": per_batch / BATCHES, "epoch": epoch}

    def ours_epoch() -> dict[str, float]:
        confusion = Confusion(classes)
        per_batch = timed(lambda: [confusion.update(t, out.argmax(-1)) for out, t in zip(logits, targets, strict=True)])
        epoch = timed(confusion.scores)
        return {"batch": per_batch / BATCHES, "epoch": epoch}

    def tm_epoch() -> dict[str, float]:
        metrics = collection(classes)
        per_batch = timed(lambda: [metrics.update(out, t) for out, t in zip(logits, targets, strict=True)])
        epoch = timed(lambda: {k: float(v) for k, v in metrics.compute().items()})
        return {"batch": per_batch / BATCHES, "epoch": epoch}

    return {"nnx train": ours_train, "torchmetrics train": tm_train, "nnx epoch": ours_epoch, "torchmetrics epoch": tm_epoch}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if torchmetrics is None:
        print("bench/metrics.py: torchmetrics is not installed here (not a dependency); run it with .venv-peers/bin/python")
        return 0
    reps = 5 if args.quick else 31
    print(f"machine: {C.machine()}; torchmetrics {torchmetrics.__version__}; load average {os.getloadavg()[0]:.1f}\n")
    print("| classes | use | NNx µs/batch | torchmetrics µs/batch | NNx ms/epoch | torchmetrics ms/epoch |")
    print("|---:|---|---:|---:|---:|---:|")
    for classes in (2, 10):
        res = C.interleaved(arms(classes), reps)
        med = {arm: {k: statistics.median(v) for k, v in r.items()} for arm, r in res.items()}
        for use, ours, theirs in (("per-batch training scores", "nnx train", "torchmetrics train"),
                                  ("whole-epoch scores", "nnx epoch", "torchmetrics epoch")):
            print(f"| {classes} | {use} | {med[ours]['batch'] * 1e6:.1f} | {med[theirs]['batch'] * 1e6:.1f} "
                  f"| {med[ours]['epoch'] * 1e3:.2f} | {med[theirs]['epoch'] * 1e3:.2f} |")
    print(f"\n{BATCHES} batches of {BATCH} per epoch; thread CPU time, medians of {reps}; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
