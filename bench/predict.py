"""``NNModel.predict`` / ``predict_proba`` against a plain ``torch.inference_mode`` loop.

    .venv/bin/python bench/predict.py [--quick]

Same model (the headline MLP 32 → 64 → 2, and the 1M-parameter one), same rows and the same
batches. The plain arms compute what the NNx call returns: ``predict`` = logits of every batch
concatenated + argmax; ``predict_proba`` = the same + softmax (+ row ids). Arms are interleaved
(the order rotates every repetition); the median seconds give a throughput ratio
``plain / nnx`` (1.0 = same throughput; target ≥ 0.95). Timings are printed, never asserted;
the script always exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C

C.setup_threads()

import nnx_api as nnx  # noqa: E402


def plain_logits(net: torch.nn.Module, batches: Any) -> torch.Tensor:
    was = net.training
    net.eval()
    with torch.inference_mode():
        outs = [net(x) for x, _ in batches] if isinstance(batches, list) else [net(batches)]
    net.train(was)
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def plain_predict(net: torch.nn.Module, batches: Any) -> Any:
    logits = plain_logits(net, batches)
    return logits, logits.argmax(-1)


def plain_predict_proba(net: torch.nn.Module, batches: Any) -> Any:
    logits = plain_logits(net, batches)
    return logits, torch.softmax(logits, -1), logits.argmax(-1), list(range(logits.shape[0]))


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(hidden: tuple[int, ...], batch: int | None, rows: int, reps: int) -> list[tuple[str, float, float]]:
    """``(call, plain median s, nnx median s)`` for predict and predict_proba on one case."""
    job = C.Job(batch=batch or rows, hidden=hidden, batches=1)
    x = torch.randn(rows, C.INPUTS, generator=torch.Generator().manual_seed(1))
    y = torch.zeros(rows, dtype=torch.long)
    data: Any = [(x[i : i + batch], y[i : i + batch]) for i in range(0, rows, batch)] if batch else x
    model = nnx.NNModel(
        nnx.NNParams(input_dim=C.INPUTS, output_dim=C.CLASSES, hidden_dims=hidden),
        nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY),
    )
    model.net.load_state_dict(job.initial_state)
    net = job.net()
    spec = nnx.ProbabilitySpec("categorical")  # the model has no TaskSpec: predict_proba needs the spec
    assert torch.equal(torch.from_numpy(model.predict(data).classes), plain_predict(net, data)[1])
    assert torch.allclose(torch.from_numpy(model.predict_proba(data, spec).probabilities), plain_predict_proba(net, data)[1])
    arms: dict[str, Callable[[], Any]] = {
        "plain predict": lambda: plain_predict(net, data),
        "nnx predict": lambda: model.predict(data),
        "plain predict_proba": lambda: plain_predict_proba(net, data),
        "nnx predict_proba": lambda: model.predict_proba(data, spec),
    }
    samples: dict[str, list[float]] = {name: [] for name in arms}
    names = list(arms)
    for rep in range(-5, reps):  # five untimed warm-up rounds (allocator and caches settle)
        shift = rep % len(names) if rep >= 0 else 0
        for name in names[shift:] + names[:shift]:
            seconds = timed(arms[name])
            if rep >= 0:
                samples[name].append(seconds)
    return [
        (call, statistics.median(samples[f"plain {call}"]), statistics.median(samples[f"nnx {call}"]))
        for call in ("predict", "predict_proba")
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args(argv)
    print(f"machine: {C.machine()}")
    print("median ms per call; throughput ratio = plain time / nnx time (≥ 0.95 is the target)\n")
    print("| model | input | rows | call | plain ms | nnx ms | **throughput ratio** |")
    print("|---|---|---:|---|---:|---:|---:|")
    cases = [  # label, hidden, input form, batch, rows, repetitions
        ("MLP 32-64-2", (64,), "list of (x, y) batches of 256", 256, 20_000, 61),
        ("MLP 32-64-2", (64,), "list of (x, y) batches of 64", 64, 20_000, 61),
        ("MLP 32-64-2", (64,), "one tensor", None, 20_000, 61),
        ("1M params", (1024, 1024), "list of (x, y) batches of 256", 256, 10_000, 15),
    ]
    for label, hidden, form, batch, rows, reps in cases:
        reps = min(reps, 7) if args.quick else reps
        for call, plain, ours in measure(hidden, batch, rows, reps):
            print(
                f"| {label} | {form} | {rows:,} | {call} | {plain * 1e3:.2f} | {ours * 1e3:.2f} "
                f"| **{plain / ours:.3f}** |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
