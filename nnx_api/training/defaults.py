"""NNx's defaults are a supervised model's: the one monitor decision (BEST, the plateau schedule,
``EarlyStopping``) follows validation error or loss, else the training loss the step returns, and
every optimizer without a declared schedule follows reduce-on-plateau on that decision. For one
net and one loss that fits, an objective's summed terms included. For several named optimizers a
step function trains against each other (a GAN's pair) or on separate losses, the loss its
records carry is at best a sum of theirs, which measures no progress: ``defaults_problem`` says which defaults such a run would take silently and what to
declare instead. It reads the entry's parameters only (nothing per batch)."""

from __future__ import annotations

from typing import Any


def defaults_problem(entry: Any) -> str | None:
    """What a run of several named optimizers updated by a step function of the user's leaves to
    the supervised defaults (see the module docstring), as one message; None when each optimizer's
    schedule and the monitor are declared, when the run has one optimizer, or when an objective
    (one loss of summed terms, which the defaults fit) owns the updates."""
    optims = list(entry.optims)
    if len(optims) < 2 or entry.step_fn is None:  # an objective's terms sum to one loss: the defaults fit
        return None
    train = entry.train
    undeclared = [name for name in optims if name not in getattr(entry.params, "schedulers", {})]  # as given
    if train.monitor is not None and not undeclared:
        return None
    taken = []
    if train.monitor is None:
        signal = "the validation error or loss" if train.val_loader is not None else "the loss the step's records carry"
        taken.append(f"BEST and EarlyStopping follow {signal}")
    if undeclared:
        taken.append(f"{', '.join(repr(n) for n in undeclared)} follow{'s' if len(undeclared) == 1 else ''} the default "
                     "reduce-on-plateau schedule on that value (the learning rate × 0.95 after 8 epochs without improvement)")
    example = undeclared[0] if undeclared else optims[0]
    return (
        f"{len(optims)} optimizers ({', '.join(repr(n) for n in optims)}) train under NNx's defaults for one supervised "
        f"net: {'; '.join(taken)}. For adversarial or multi-objective training (a GAN's pair) that value measures no "
        f"progress. Declare what fits: schedulers={{{example!r}: NNSchedulerParams(factor=1.0)}} keeps an optimizer's "
        "learning rate constant (or name a kind) for each optimizer, and monitor=MonitorSpec(...) says what BEST "
        "follows (MonitorSpec('loss', split='train') keeps the sum)"
    )
