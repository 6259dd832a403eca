"""The training lifecycle: the one place that owns the order of everything in a run.

This module is the seed's "Lifecycle order" as code. Read ``run_lifecycle`` top to bottom:

    on_train_begin (callback order)                    once per started run
    for each epoch:
        on_epoch_begin
        batches (steps, update windows, update-clock ticks)   ─ driver.train_epoch
          commit points inside it (commit_every, a preemption signal): records → LAST, nothing
          else; a preemption raises there (the failure rules below apply)
        validation → whole-epoch summary                      ─ driver.validate
        monitor decision (one object everybody obeys)         ─ driver.decide
        epoch-clock schedulers tick once                      ─ driver.tick_epoch_clocks
        on_epoch_end (callbacks may queue deferred writes)
        commit: history → LAST → phase/BEST → deferred        ─ driver.commit
        stop?  (ctx.should_stop, update-boundary stop, n_epochs; a preemption in the last window raises)
    driver.settle (every commit durable: one written in the background ends first, also on failure)
    on_train_end in reverse order, for every callback whose on_train_begin completed
    driver.finalize (refresh LAST from the final model; not after an update-boundary stop)

Failure rules: callbacks whose begin hook completed are still finalized; every cleanup hook is
attempted; a cleanup error never masks the training error (it becomes a warning); without a
training error the first cleanup error is raised and the rest are warned.

Agreement points: in a data-parallel run a callback hook may fail on one rank only. After each
group of callback hooks (``on_train_begin``, each epoch's ``on_epoch_begin`` and
``on_epoch_end``, ``on_train_end``) the outcome goes through ``agree(where, error)``: every rank
raises the first failing rank's error, so no rank waits in a collective its peers never reach.
With one process ``agree`` just raises the error it is given.

The driver (``nnx_api``) does the work; this module decides when. Callbacks receive only the hooks
they override (``dispatch_table``), so an idle callback costs nothing per epoch.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol

HOOKS = ("on_train_begin", "on_epoch_begin", "on_optimizer_update", "on_epoch_end", "on_train_end")


class CleanupWarning(RuntimeWarning):
    """A callback's cleanup hook failed while another error was already propagating."""


class LifecycleDriver(Protocol):
    """What the lifecycle needs from the composition root. Each call is one step of the order."""

    def epochs(self) -> range: ...

    def train_epoch(self, epoch: int) -> None: ...

    def validate(self, epoch: int) -> None: ...

    def decide(self, epoch: int) -> None: ...

    def tick_epoch_clocks(self, epoch: int) -> None: ...

    def commit(self, epoch: int) -> None: ...

    def should_stop(self) -> bool: ...

    def stopped_at_update(self) -> bool: ...

    def settle(self, error: BaseException | None) -> None:
        """Wait until every commit is durable (asynchronous commits). ``error`` None: a failed commit
        is raised as the training error; else training already failed with ``error`` and a
        failed commit is only warned of."""

    def finalize(self) -> None: ...


def overrides(callback: object, hook: str, base: type | None) -> bool:
    """Whether ``callback`` implements ``hook`` itself (not the base class' no-op)."""
    impl = getattr(type(callback), hook, None)
    if impl is None:
        return False
    return base is None or impl is not getattr(base, hook, None)


def dispatch_table(callbacks: Sequence[object], base: type | None) -> dict[str, list[Callable[..., Any]]]:
    """For each hook, the bound methods of the callbacks that override it, in callback order.

    A hook defined outside ``base``'s package (the user's own) is wrapped in ``ReturnChecked``: the
    lifecycle ignores what a hook returns, so a value other than None (``return True`` to stop,
    another framework's protocol) is warned of once. The library's own hooks are dispatched bare."""
    own = base.__module__.split(".")[0] if base is not None else None
    table: dict[str, list[Callable[..., Any]]] = {}
    for hook in HOOKS:
        bound = [getattr(cb, hook) for cb in callbacks if overrides(cb, hook, base)]
        table[hook] = [
            method if (getattr(getattr(type(method.__self__), hook, None), "__module__", None) or "").split(".")[0] == own
            else ReturnChecked(method, hook)
            for method in bound
        ]
    return table


class ReturnChecked:
    """A user's hook as dispatched: called as it is; its first return value other than None is
    warned of (``UserWarning``), naming ``ctx.should_stop``. ``__self__`` is the callback."""

    __slots__ = ("__self__", "hook", "method", "warned")

    def __init__(self, method: Any, hook: str) -> None:
        self.method, self.hook, self.warned = method, hook, False
        self.__self__ = getattr(method, "__self__", method)

    def __call__(self, *args: Any) -> Any:
        result = self.method(*args)
        if result is not None and not self.warned:
            self.warned = True
            warnings.warn(
                f"{type(self.__self__).__name__}.{self.hook} returned {result!r}, and NNx ignores a hook's return value: "
                "to stop training set ctx.should_stop = True (training stops after the epoch commits; "
                "ctx.stop_at_update = True stops at the next update), and return nothing",
                UserWarning, stacklevel=2,
            )
        return result


class CallbackFinalizer:
    """Tracks which callbacks began and finalizes exactly those, in reverse, attempting all."""

    def __init__(self, callbacks: Sequence[object], base: type | None) -> None:
        self._callbacks = list(callbacks)
        self._base = base
        self._begun: list[object] = []

    def begin(self, ctx: object) -> None:
        """``on_train_begin`` in callback order; each one that returns counts as begun."""
        for cb in self._callbacks:
            if overrides(cb, "on_train_begin", self._base):
                cb.on_train_begin(ctx)  # type: ignore[attr-defined]
            self._begun.append(cb)

    def end(self, ctx: object, training_error: BaseException | None) -> BaseException | None:
        """``on_train_end`` in reverse order for every begun callback; every one is attempted.

        Returns the cleanup error to raise when training itself succeeded (the first one; the
        others are warned), else None: with a training error every cleanup error is a warning.
        """
        errors: list[BaseException] = []
        for cb in reversed(self._begun):
            if not overrides(cb, "on_train_end", self._base):
                continue
            try:
                cb.on_train_end(ctx)  # type: ignore[attr-defined]
            except Exception as exc:  # every cleanup is attempted
                errors.append(exc)
        self._begun.clear()
        if training_error is not None:
            for error in errors:
                warnings.warn(
                    f"on_train_end failed while another error was propagating: {error!r}", CleanupWarning, stacklevel=2
                )
            return None
        for error in errors[1:]:
            warnings.warn(f"another on_train_end also failed: {error!r}", CleanupWarning, stacklevel=2)
        return errors[0] if errors else None


def alone(where: str, error: BaseException | None) -> None:
    """The agreement of a group of one: raise the error as it is."""
    if error is not None:
        raise error


def attempt(hooks: Sequence[Callable[[Any], None]], ctx: Any) -> BaseException | None:
    """Call each hook in order; return the first error instead of raising it (later hooks of the
    group are not called after a failure)."""
    try:
        for hook in hooks:
            hook(ctx)
    except Exception as exc:
        return exc
    return None


def run_lifecycle(
    driver: LifecycleDriver,
    callbacks: Sequence[object],
    ctx: Any,
    *,
    base: type | None = None,
    agree: Callable[[str, BaseException | None], None] = alone,
) -> None:
    """Run the whole training lifecycle in the seed's order (see the module docstring)."""
    table = dispatch_table(callbacks, base)
    finalizer = CallbackFinalizer(callbacks, base)
    error: BaseException | None = None
    try:
        agree("on_train_begin callbacks", attempt([finalizer.begin], ctx))
        for epoch in driver.epochs():
            ctx.epoch = epoch
            agree(f"epoch {epoch} on_epoch_begin callbacks", attempt(table["on_epoch_begin"], ctx))
            driver.train_epoch(epoch)
            if driver.stopped_at_update():
                break  # a mid-epoch stop keeps only fully committed epochs
            driver.validate(epoch)
            driver.decide(epoch)
            driver.tick_epoch_clocks(epoch)
            ctx.deferred_checkpoint_writes = []
            agree(f"epoch {epoch} on_epoch_end callbacks", attempt(table["on_epoch_end"], ctx))
            driver.commit(epoch)
            if driver.should_stop():
                break
        driver.settle(None)  # a deferred write of the last commit comes before on_train_end, as ever
    except BaseException as exc:
        error = exc
        driver.settle(exc)
        raise
    finally:
        cleanup = finalizer.end(ctx, error)
    agree("on_train_end callbacks", cleanup)
    if not driver.stopped_at_update():
        driver.finalize()
