"""One search worker: a small digits plan searched over the learning rate and width.

    python search_worker.py ROOT STORAGE STUDY TRIALS [--epochs N] [--commit-every K]
                            [--kill-after UPDATES] [--out FILE] [--barrier DIR --barrier-count N]

``STORAGE`` is an Optuna storage URL (``sqlite:///...``, ``postgresql://...``) or
``journal:<path>`` for Optuna's ``JournalStorage`` on a file. The runs live under ``ROOT``.
``--kill-after U`` SIGKILLs this process right after its ``U``-th optimizer update, counted
over all the trials it runs (once: a marker file beside ROOT says it happened), so the same
command run again must resume the trial it was in from its LAST. ``--out`` writes the ``SearchResult`` as JSON: every outcome,
the trials this process ran and resumed. The worker's own log lines go to stdout.
``--barrier DIR --barrier-count N``: once its plan is built (imports done), the worker leaves a
file in ``DIR`` and waits until ``N`` workers have, so workers started together search together.
``--ask-together`` (with ``--barrier``): the storage makes this worker's first trial only once all
``N`` workers are about to ask theirs (a second barrier), so that all of them passed their budget
check before any trial exists: workers beyond the budget then ask past it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx
from nnx_api.experiments.plans import ExperimentPlan, PlanData
from nnx_api.experiments.search import FloatParam, SearchBudget, SearchSpace, search


def plan(root: str, epochs: int, commit_every: int | None, kill: int | None, marker: Path) -> ExperimentPlan:
    x, y = load_digits(return_X_y=True)
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    train = DataLoader(TensorDataset(x[:600], y[:600]), batch_size=100, shuffle=True)
    val = [(x[600:900], y[600:900])]
    factories = [] if kill is None else [lambda: Killer(kill, marker)]
    return ExperimentPlan(
        net=nnx.NNParams(input_dim=64, output_dim=10, hidden_dims=(16,)),
        train=nnx.NNTrainParams(n_epochs=epochs, metrics=(nnx.MetricSpec(id="nll"),),
                                monitor=nnx.MonitorSpec(metric="nll"), commit_every=commit_every),
        data=PlanData(train=train, val=val),
        seed=0,
        root=root,
        callback_factories=factories,
    )


class Killer(nnx.Callback):
    """SIGKILL this process after its ``after``-th update over all trials (the first time only)."""

    seen = 0  # updates this process made, over every trial

    def __init__(self, after: int, marker: Path) -> None:
        self.after, self.marker = after, marker

    def on_train_begin(self, ctx: nnx.CallbackContext) -> None:
        ctx.update_listeners.append(self._after_update)

    def _after_update(self, ctx: nnx.CallbackContext) -> None:
        Killer.seen += 1
        if Killer.seen == self.after and not self.marker.exists():
            self.marker.write_text(f"{ctx.update_count}\n")
            os.kill(os.getpid(), signal.SIGKILL)


def wait_for_others(folder: Path, count: int, limit: float = 120.0) -> None:
    """Check in at the barrier ``folder`` and wait until ``count`` workers have."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(os.getpid())).touch()
    deadline = time.monotonic() + limit
    while sum(1 for _ in folder.iterdir()) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"barrier {folder}: {count} workers never checked in")
        time.sleep(0.05)


def storage_of(text: str, before_first_ask=None):
    """The study storage; ``before_first_ask()`` runs in this process before the storage makes
    the first trial it asks for."""
    if not text.startswith("journal:") and before_first_ask is None:
        return text
    import optuna
    from optuna.storages.journal import JournalFileBackend

    if text.startswith("journal:"):
        kind, args = optuna.storages.JournalStorage, (JournalFileBackend(text.removeprefix("journal:")),)
    else:
        kind, args = optuna.storages.RDBStorage, (text,)
    if before_first_ask is None:
        return kind(*args)

    held = [before_first_ask]

    def hold() -> None:
        while held:
            held.pop()()

    class HeldAsk(kind):  # Optuna's cache over an RDBStorage makes trials through _create_new_trial
        def create_new_trial(self, study_id, template_trial=None):
            hold()
            return super().create_new_trial(study_id, template_trial)

        if hasattr(kind, "_create_new_trial"):
            def _create_new_trial(self, study_id, template_trial=None):
                hold()
                return super()._create_new_trial(study_id, template_trial)

    return HeldAsk(*args)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("storage")
    parser.add_argument("study")
    parser.add_argument("trials", type=int)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--commit-every", type=int, default=None)
    parser.add_argument("--kill-after", type=int, default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--barrier", default=None)
    parser.add_argument("--barrier-count", type=int, default=1)
    parser.add_argument("--ask-together", action="store_true")
    args = parser.parse_args()
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    marker = Path(args.root).parent / f"killed-{args.study}"
    space = SearchSpace(FloatParam("train.optim.max_lr", 1e-3, 5e-2, log=True))

    def apply(p: ExperimentPlan, values) -> ExperimentPlan:
        return p.with_optim(max_lr=values["train.optim.max_lr"])

    base = plan(args.root, args.epochs, args.commit_every, args.kill_after, marker)
    if args.barrier:
        wait_for_others(Path(args.barrier), args.barrier_count)
    held = None
    if args.ask_together:
        held = lambda: wait_for_others(Path(f"{args.barrier}-ask"), args.barrier_count)  # noqa: E731
    result = search(base, space, budget=SearchBudget(trials=args.trials), study_name=args.study,
                    storage=storage_of(args.storage, held), pruner=optuna.pruners.NopPruner(),
                    apply=apply)
    if args.out:
        Path(args.out).write_text(json.dumps({
            "outcomes": [{"number": o.number, "params": dict(o.params), "state": o.state, "value": o.value,
                          "run_id": o.run_id, "best_epoch": o.best_epoch, "epochs": o.epochs, "updates": o.updates,
                          "observations": [list(v) for v in o.observations], "worker": o.worker}
                         for o in result.outcomes],
            "ran": sorted(result.trial_runs), "resumed": list(result.resumed), "asked": result.asked,
            "stop_reason": result.stop_reason,
        }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
