"""Callbacks in a data-parallel run: where each one runs (seed §3, "One writer").

"all" callbacks run on every rank and must not write; "writer" callbacks run on the writer only
and may not carry checkpointed state; ``writer_only(factory)`` builds a callback (a TensorBoard or
W&B tracker writes when it is built) on the writer alone. A callback that declares nothing is
refused before training, on every rank.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from nnx_core import agreement
from nnx_core.errors import ParamsError
from nnx_api.callbacks import Callback, LegacyCallback


class WriterOnly(Callback):
    """``writer_only(factory)``: the callback ``factory()`` builds, on the writer rank only.

    In a distributed run only the writer calls the factory (a TensorBoard or W&B callback writes
    when it is built). In a single-process run it is built at train begin and forwards every hook.
    """

    distributed = "writer"

    def __init__(self, factory: Callable[[], Any]) -> None:
        if not callable(factory):
            raise ParamsError("writer_only", f"needs a zero-argument factory, got {type(factory).__name__}")
        self.factory = factory
        self.inner: Callback | None = None

    def build(self) -> Callback:
        """Call the factory (on the writer rank only) and check it returned a Callback."""
        built = self.factory()
        if isinstance(built, Callback):
            return built
        if callable(built):
            return LegacyCallback(built)
        raise ParamsError("writer_only", f"the factory must return a Callback, got {type(built).__name__}")

    def on_train_begin(self, ctx: Any) -> None:
        if self.inner is None:
            self.inner = self.build()
        self.inner.on_train_begin(ctx)

    def on_epoch_begin(self, ctx: Any) -> None:
        if self.inner is not None:
            self.inner.on_epoch_begin(ctx)

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        if self.inner is not None:
            self.inner.on_optimizer_update(ctx, event)

    def on_epoch_end(self, ctx: Any) -> None:
        if self.inner is not None:
            self.inner.on_epoch_end(ctx)

    def on_train_end(self, ctx: Any) -> None:
        if self.inner is not None:
            self.inner.on_train_end(ctx)


def writer_only(factory: Callable[[], Any]) -> WriterOnly:
    """A callback built by ``factory()`` on the writer rank alone, e.g.
    ``writer_only(lambda: nnx.TensorBoardCallback())``."""
    return WriterOnly(factory)


def describe_callbacks(callbacks: Any) -> str:
    """The callbacks as the ranks compare them before training (``nnx_api.distributed.process_group.
    agree_given``): each one's class (a plain function: its name) and declared rank behaviour, in
    order, e.g. ``[EarlyStopping(all), WriterOnly(writer)]``. Never raises: what the checks refuse
    is described too, so every rank takes part in the comparison."""
    if callbacks is None:
        return "[]"
    if not isinstance(callbacks, (list, tuple)):
        return f"<{type(callbacks).__name__}>"
    return "[" + ", ".join(_declared(cb) for cb in callbacks) + "]"


def _declared(cb: Any) -> str:
    if isinstance(cb, type):
        return f"<the class {cb.__qualname__}>"
    if isinstance(cb, Callback):
        behaviour = getattr(cb, "distributed", None)
        return f"{type(cb).__qualname__}({behaviour if isinstance(behaviour, str) else 'undeclared'})"
    if callable(cb):  # a plain function: wrapped as a LegacyCallback, which runs on the writer
        return f"{getattr(cb, '__qualname__', type(cb).__qualname__)}({LegacyCallback.distributed})"
    return f"<{type(cb).__name__}>"


def _is_tracker(cb: Any) -> bool:
    return type(cb).__module__ == "nnx_api.callbacks.trackers" and type(cb).__name__ in ("TensorBoardCallback", "WandbCallback")


def resolve_callbacks(cbs: Sequence[Callback], is_writer: bool) -> tuple[list[Callback], list[Callback]]:
    """(every declared callback, the ones that run on this rank — writer_only ones built here).
    A callback that declares no rank behaviour, a borrowed tracker or a stateful writer-only
    callback is refused, on every rank, before training."""
    declarations = [
        agreement.CallbackDeclaration(
            name=type(cb).__name__,
            distributed=getattr(cb, "distributed", None),
            stateful=hasattr(cb, "component_spec"),
            borrowed_tracker=_is_tracker(cb),
        )
        for cb in cbs
    ]
    problems = agreement.callback_problems(declarations)
    if problems:
        raise ParamsError("callbacks", "; ".join(problems))
    here: list[Callback] = []
    for cb in cbs:
        if not agreement.runs_here(cb.distributed, is_writer):  # type: ignore[arg-type]
            continue
        built = cb.build() if isinstance(cb, WriterOnly) else cb
        if built is not cb and hasattr(built, "component_spec"):  # agreed: every rank raises it before training
            raise ParamsError(
                "callbacks",
                f"writer_only built a {type(built).__name__} on the writer rank, which carries checkpointed "
                "component state; a writer-only callback may not (the other ranks would not keep it); pass it "
                "without writer_only, with distributed = 'all'",
            )
        here.append(built)
    return cbs, here


__all__ = ["WriterOnly", "describe_callbacks", "resolve_callbacks", "writer_only"]
