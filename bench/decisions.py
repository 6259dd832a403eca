"""Cost of ``FixedHeadProvider.decide`` against a bare ``predict_proba`` on the same rows.

    .venv/bin/python bench/decisions.py            # the real nnx_api.NNModel (skips if absent)
    .venv/bin/python bench/decisions.py --fake     # a minimal stand-in model with the same contract

Both calls run on the same model and rows, interleaved, and the medians are compared; the target
is ``decide / predict_proba <= 1.2`` on 10,000 rows. More lines, for context: ``decide`` plus
reading every result's ``top`` (results fill their fields on first read); the allocation of the
10,000 result objects alone (the floor of any ``decide`` that returns them); and, with the real
``NNModel``, the bare inference pass (``NNModel.predict``: logits + argmax, no softmax) and
``decide`` through ``predict_proba`` (the model behind a plain wrapper, as any model other than a
plain ``NNModel`` is asked). One torch thread by default, as in every script of ``bench/``
(``--threads 0`` leaves torch's own choice). Timings are printed, never asserted; the script
always exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import torch

from nnx_core.decisions import deferred_results
from nnx_api.decisions import Choice, ChoiceResult, FixedHeadProvider
from nnx_api.model import Head, PredictionResult  # the real NNModel types the fakes return

LABELS = tuple(str(digit) for digit in range(10))


class StandInModel:
    """The least a ``predict_proba`` must do: keep module flags, one no-grad forward, softmax,
    argmax and sample ids. A real model does at least this much, so the ratio here is an upper
    bound on decide's relative overhead for the same network."""

    def __init__(self, net: torch.nn.Module) -> None:
        self.net = net
        self.head = Head("categorical", 10, LABELS)

    def predict_proba(self, X: Any) -> PredictionResult:
        flags = [(module, module.training) for module in self.net.modules()]
        self.net.eval()
        try:
            with torch.no_grad():
                logits = self.net(torch.as_tensor(X, dtype=torch.float32))
                return PredictionResult(logits, torch.softmax(logits, -1), logits.argmax(-1),
                                        list(range(len(logits))))
        finally:
            for module, training in flags:
                module.training = training


class ThroughPredictProba:
    """A real model seen only through ``net``, ``head`` and ``predict_proba``, so that
    ``FixedHeadProvider`` cannot use ``NNModel``'s inference pass directly."""

    def __init__(self, model: Any) -> None:
        self.net, self.head, self.predict_proba = model.net, model.head, model.predict_proba


def digits_mlp() -> torch.nn.Module:
    """The network of examples/decision_fixed_head.py: 64 → 64 → 10."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def real_model() -> Any | None:
    """An (untrained) ``nnx_api.NNModel`` of the same shape, or None while it does not exist."""
    try:
        import nnx_api as nnx

        return nnx.NNModel(
            nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=(64,), dropout_prob=0.0),
            nnx.NNModelParams(task=nnx.TaskSpec.categorical()),  # predict_proba without a spec needs a TaskSpec
        )
    except (ImportError, AttributeError):
        return None


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fake", action="store_true", help="use the stand-in model")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (default 1, like every bench here; 0: torch's own choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    model = StandInModel(digits_mlp()) if args.fake else real_model()
    if model is None:
        print("bench/decisions.py: nnx_api.NNModel is not available yet; skipped "
              "(run with --fake to measure against the stand-in model)")
        return 0
    labels = getattr(model.head, "labels", None) or LABELS
    provider = FixedHeadProvider(model, labels=labels)
    question = Choice("Which digit?", [(label, f"the digit {label}") for label in labels])
    X = torch.randn(args.rows, 64, generator=torch.Generator().manual_seed(0))

    def bare() -> None:
        model.predict_proba(X)

    def decide() -> None:
        provider.decide(question, X)

    def decide_and_read() -> None:
        for result in provider.decide(question, X):
            result.top  # noqa: B018 — reading one field fills the deferred result

    def results_only() -> None:  # the floor: the 10,000 result objects decide returns, nothing else
        deferred_results(ChoiceResult, None, args.rows)

    calls = {"predict_proba": bare, "decide": decide, "decide + read top": decide_and_read,
             "results only": results_only}
    if not args.fake:
        wrapped = FixedHeadProvider(ThroughPredictProba(model), labels=labels)
        calls["predict (no softmax)"] = lambda: model.predict(X)
        calls["decide via p_proba"] = lambda: wrapped.decide(question, X)
    timings: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(3):  # warm up
        for call in calls.values():
            call()
    for _ in range(args.repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            timings[name].append(time.perf_counter() - start)

    base = median_ms(timings["predict_proba"])
    print(f"model: {'stand-in' if args.fake else 'nnx_api.NNModel'}, rows: {args.rows}, "
          f"repeats: {args.repeats}, torch threads: {torch.get_num_threads()}")
    print(f"{'call':<22}{'median ms':>12}{'x predict_proba':>18}")
    for name, samples in timings.items():
        print(f"{name:<22}{median_ms(samples):>12.2f}{median_ms(samples) / base:>18.2f}")
    ratio = median_ms(timings["decide"]) / base
    paired = statistics.median(d / b for d, b in zip(timings["decide"], timings["predict_proba"], strict=True))
    print(f"decide / predict_proba = {ratio:.2f} (target <= 1.2); "
          f"median of the per-round ratios = {paired:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
