"""What a context says about an attribute it does not have.

Every context NNx hands to user code (``CallbackContext``, the step functions' and the objective's
contexts) answers an unknown attribute, read or set, with ``ContextAttributeError`` (also an
``AttributeError``: ``hasattr`` and ``getattr(ctx, name, default)`` keep working) naming the
nearest attribute, every attribute the context has, and NNx's name for another framework's or
another entry point's (``ELSEWHERE``). Reading costs nothing until a lookup fails (``__getattr__``);
the frozen step contexts refuse every assignment anyway.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import Any

import attrs

from nnx_core.errors import ContextAttributeError

ELSEWHERE: Mapping[str, Mapping[str, str]] = {  # context class → {another framework's name: NNx's, with the fix}
    "CallbackContext": {
        "stop_training": "ctx.should_stop = True (Keras's model.stop_training): training stops after this epoch commits",
        "should_training_stop": "ctx.should_stop = True (the Hugging Face control flag)",
        "current_epoch": "ctx.epoch", "global_step": "ctx.update_count", "logs": "ctx.idp (the epoch's record)",
        "metrics": "ctx.idp (the epoch's record)", "history": "ctx.idps", "net": "ctx.model.net",
        "pl_module": "ctx.model",
        "lr_scheduler": "ctx.optimizer.param_groups[0]['lr'] (NNx steps the schedules; ctx.update_lrs traces an update-clock one)",
    },
    "TrainStepContext": {
        "optimizers": "ctx.optimizer (an NNModel step has one optimizer; Trainer steps have ctx.optimizers[name])",
        "schedulers": "ctx.scheduler", "lr_scheduler": "ctx.scheduler (read it; NNx steps it)",
        "epoch": "ctx.epoch_idx", "current_epoch": "ctx.epoch_idx", "global_step": "ctx.batch_idx",
        "net": "ctx.model.net", "device": "ctx.model.device", "log": "the returned EvaluationDataPoint",
        "should_stop": "a callback's ctx.should_stop (step contexts cannot stop a run)",
    },
    "TrainerStepContext": {
        "optimizer": "ctx.optimizers[name] (a Trainer step steps its named optimizers)",
        "scheduler": "ctx.schedulers[name]", "lr_scheduler": "ctx.schedulers[name] (read it; NNx steps it)",
        "scaler": "ctx.precision (finalize_step scales nothing: Trainer steps run in full precision)",
        "grad_clip_norm": "ctx.grad_clip_norms[name]", "epoch": "ctx.epoch_idx", "current_epoch": "ctx.epoch_idx",
        "net": "ctx.model.net", "device": "ctx.model.device",
        "should_stop": "a callback's ctx.should_stop (step contexts cannot stop a run)",
    },
    "EvalStepContext": {
        "loader": "ctx.val_loader", "dataloader": "ctx.val_loader", "batch": "ctx.val_loader (the step owns the whole loader)",
        "optimizer": "nothing: validation never steps an optimizer", "epoch": "ctx.epoch_idx",
        "current_epoch": "ctx.epoch_idx", "net": "ctx.model.net",
    },
    "ObjectiveContext": {
        "optimizer": "nothing: an objective returns its loss terms and NNx owns backward and the optimizers",
        "optimizers": "nothing: an objective returns its loss terms and NNx owns backward and the optimizers",
        "report_update": "nothing: NNx reports an objective's updates itself", "epoch": "ctx.epoch_idx",
        "current_epoch": "ctx.epoch_idx", "net": "ctx.model.net", "device": "ctx.model.device",
    },
}


def attributes_of(ctx: Any) -> list[str]:
    """The public attributes a context has: its fields, then its properties and methods."""
    cls = type(ctx)
    if attrs.has(cls):
        fields = [f.name for f in attrs.fields(cls)]
    elif dataclasses.is_dataclass(cls):
        fields = [f.name for f in dataclasses.fields(cls)]
    else:
        fields = []
    return fields + sorted(n for n in dir(cls) if not n.startswith("_") and n not in fields)


def unknown_attribute(ctx: Any, name: str, *, setting: bool = False) -> AttributeError:
    """The error for reading (or, ``setting``, assigning) ``name`` on ``ctx``, which lacks it."""
    kind = type(ctx).__name__
    if name.startswith("_"):  # protocol probes (copy, pickle): the plain error, at no cost
        return AttributeError(f"{kind!r} object has no attribute {name!r}")
    known = attributes_of(ctx)
    other = ELSEWHERE.get(kind, {}).get(name)
    if other is not None:
        hint = f"use {other}"
    else:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean ctx.{close[0]}?" if close else "no attribute of it is close"
    verb = "cannot set" if setting else "has no attribute"
    return ContextAttributeError(f"{kind} {verb} {name!r}: {hint}. Its attributes: {', '.join(known)}")


def context_getattr(self: Any, name: str) -> Any:
    """``__getattr__`` of NNx's contexts: called only when a lookup failed."""
    raise unknown_attribute(self, name)


def guard_frozen(cls: type) -> type:
    """Class decorator (after ``@dataclass(frozen=True)``): unknown attributes, read or assigned,
    raise ``ContextAttributeError``; a field assigned still raises ``FrozenInstanceError``."""
    frozen_setattr = cls.__setattr__
    names = frozenset(f.name for f in dataclasses.fields(cls))

    def __setattr__(self: Any, name: str, value: Any) -> None:  # noqa: N807 - the protocol's name
        if name not in names and not hasattr(type(self), name):
            raise unknown_attribute(self, name, setting=True)
        frozen_setattr(self, name, value)

    cls.__setattr__ = __setattr__  # type: ignore[assignment]
    cls.__getattr__ = context_getattr  # type: ignore[attr-defined]
    return cls
