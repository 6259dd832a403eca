"""``torch.compile`` of a net's forward for ``train(compile=...)``: wrap, call, restart or fail.

``CompiledForward.wrap(net, ...)`` calls ``torch.compile(net, ...)`` (lazy: the compiler runs at the
first call, and again when a guard fails — eval mode, another batch shape). The wrapper lives
here and is called in place of ``net`` by the forwards it captures; it is never assigned to the
model, so ``net.state_dict()`` keeps its eager keys (no ``_orig_mod.`` prefix). It shares
``net``'s parameters and buffers, so optimizer steps and restored weights are what it computes with.
The built-in step says where each training call is (:meth:`CompiledForward.at`); a call in eval
mode after them is the epoch's validation, counted from its batch 0: the record's ``restart`` names it.

A failure of ``torch.compile`` itself, or a compiler error (``torch._dynamo``'s exceptions) at a
call, ends compilation. Before a compiled call that dynamo may compile first — the first with its
mode and input shapes, dtypes and devices (later calls of a signature that ran compiled reuse its
code, so they copy nothing) — the global RNG streams and the net's buffers are saved; after a
compiler error they are put back and the call is run again eagerly, so the eager call draws and
mutates exactly what an uncompiled call would (a real error of the forward, which
dynamo also reports, then surfaces as itself; a failure at a signature that already ran compiled
is rerun from the state the failed call left). With ``on_failure="error"`` the state is put back
once more, as the failed call found it, and ``CompileError`` is raised from the compiler's error
(effective ``failed``); with ``"eager"`` a ``RuntimeWarning`` is given and the eager result is
used, and every later call runs ``net`` eagerly (effective ``eager``). Any other exception of a
call is the forward's own and passes through unchanged. ``torch._dynamo`` (two seconds to import)
is loaded only when a run asks for compilation.

Dynamo caches compiled code per code object for the whole process, up to a recompile limit (8)
past which it silently runs that code eagerly. ``wrap`` drops the cache of the net class's
``forward``, so every run compiles afresh: its record counts its own graph breaks, and many runs
in one process (a search) never exhaust the limit and run eagerly while recorded as compiled.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Sequence
from typing import Any

import attrs
import torch

from nnx_core.compilation import COMPILED, EAGER, FAILED, CompileRecord
from nnx_core.errors import CompileError
from nnx_adapters.pytorch.batches import saved_buffers
from nnx_adapters.pytorch.state import capture_rng, restore_rng


def known_backends() -> list[str]:
    """Every backend name ``torch.compile`` accepts in this process (registered ones included)."""
    return list(importlib.import_module("torch._dynamo").list_backends(exclude_tags=()))


def _cached(code: Any) -> bool:
    """Whether dynamo holds compiled entries for ``code`` (False when torch cannot say)."""
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        return bool(_debug_get_cache_entry_list(code))
    except Exception:  # a private helper of torch's: absent or changed in this release
        return False


def _signature(net: torch.nn.Module, args: Any, kwargs: Any) -> tuple[Any, ...]:
    """What dynamo's guards mostly key a compiled forward on: the net's mode and each input
    tensor's shape, dtype and device (other inputs by type)."""
    def key(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return tuple(value.shape), value.dtype, value.device
        return type(value)
    return net.training, tuple(key(a) for a in args), tuple((k, key(v)) for k, v in sorted(kwargs.items()))


class _Saved:
    """Every RNG stream and a net's buffers before a compiled call, to put back after a failure."""

    def __init__(self, net: torch.nn.Module) -> None:
        self.rng = capture_rng()
        self.buffers = saved_buffers(net)

    def put_back(self) -> None:
        restore_rng(self.rng)
        self.buffers()


class CompiledForward:
    """``net``'s forward through ``torch.compile``, with its ``record`` (a ``CompileRecord``)."""

    def __init__(self, net: torch.nn.Module, record: CompileRecord) -> None:
        self.net = net
        self.record = record
        self._compiled: Any = None
        self._dynamo: Any = None
        self._where: dict[str, Any] = {}
        self._fresh = True  # no earlier run of the net's class compiled in this process
        self._next_batch = 0
        self._ran: set[tuple[Any, ...]] = set()  # the call signatures (_signature) that ran compiled

    @classmethod
    def wrap(
        cls, net: torch.nn.Module, *, backend: str, mode: str | None, fullgraph: bool, dynamic: bool | None,
        on_failure: str, capture: Sequence[str],
    ) -> CompiledForward:
        """Wrap ``net`` (effective ``pending``); a ``torch.compile`` that raises is a failure at once."""
        record = CompileRecord(backend, {"mode": mode, "fullgraph": fullgraph, "dynamic": dynamic}, on_failure,
                               str(torch.__version__), forwards=tuple(capture))
        made = cls(net, record)
        try:
            made._dynamo = importlib.import_module("torch._dynamo")
            made._fresh = not _cached(type(net).forward.__code__)
            made._dynamo.reset_code(type(net).forward.__code__)  # this run compiles afresh (see the module docstring)
            made._compiled = torch.compile(net, backend=backend, mode=mode, fullgraph=fullgraph, dynamic=dynamic)
        except Exception as exc:  # options it refuses, no compiler support here
            made._fail(exc, {"stage": "wrap"}, f"torch.compile(backend={backend!r}) raised")
        return made

    def at(self, phase: str, epoch: int, batch: int = 0) -> None:
        """The next call is batch ``batch`` of ``phase`` (``"train"`` / ``"validation"``) in
        ``epoch``; each later call is the next batch."""
        self._where = {"phase": phase, "epoch": epoch}
        self._next_batch = batch

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The compiled forward (the eager one after a restart)."""
        if not self.net.training and self._where.get("phase") == "train":  # the epoch's validation follows
            self.at("validation", self._where["epoch"])
        where = {**self._where, "batch": self._next_batch} if self._where else {}
        self._next_batch += 1
        if self._compiled is None:
            return self.net(*args, **kwargs)
        signature = _signature(self.net, args, kwargs)
        saved = _Saved(self.net) if signature not in self._ran else None  # a call dynamo may compile first
        graphs, breaks = self._count("stats", "unique_graphs"), self._count("graph_break")
        try:
            out = self._compiled(*args, **kwargs)
        except self._failures() as exc:  # the compiler's error (or the forward's own, which the eager call shows)
            if saved is not None:
                saved.put_back()
            out = self.net(*args, **kwargs)
            self._fail(exc, {**where, "stage": "forward"}, "compiling the forward failed", saved)
            return out
        self._note(self._count("stats", "unique_graphs") - graphs, self._count("graph_break") - breaks)
        self._ran.add(signature)
        return out

    def _failures(self) -> tuple[type[BaseException], ...]:
        limit = getattr(self._dynamo.exc, "FailOnRecompileLimitHit", None)
        return (self._dynamo.exc.TorchDynamoException, *((limit,) if isinstance(limit, type) else ()))

    def _count(self, group: str, key: str | None = None) -> int:
        counters = self._dynamo.utils.counters[group]
        return int(counters[key]) if key is not None else sum(counters.values())

    def _note(self, graphs: int, breaks: int) -> None:
        """After a compiled call that made ``graphs`` new graphs and reported ``breaks``: a break
        shows as a counted break or as a further graph of one call. The count stays unknown (None)
        for the run when its first call compiled nothing (served from dynamo's cache), or when an
        earlier run of the net's class compiled in this process: dynamo then counts a break it
        has seen before for that code once, not again."""
        found = max(breaks, graphs - 1) if graphs else 0
        if self.record.effective != COMPILED:
            known = graphs and self._fresh
            self.record = attrs.evolve(self.record, effective=COMPILED, graph_breaks=found if known else None)
        elif found and self.record.graph_breaks is not None:
            self.record = attrs.evolve(self.record, graph_breaks=self.record.graph_breaks + found)

    def _fail(self, exc: BaseException, restart: dict[str, Any], what: str, saved: _Saved | None = None) -> None:
        message = " ".join(str(exc).split())[:300] or type(exc).__name__
        restart = {**restart, "error": type(exc).__name__, "message": message}
        reason = f"{what}: {type(exc).__name__}: {message}"
        self._compiled = None
        if self.record.on_failure == "eager":
            self.record = attrs.evolve(self.record, effective=EAGER, restart=restart)
            warnings.warn(f"compile: {reason}; training continues with the eager forward (on_failure='eager')",
                          RuntimeWarning, stacklevel=3)
            return
        if saved is not None:
            saved.put_back()  # the net's buffers and the RNG streams as the failed call found them
        self.record = attrs.evolve(self.record, effective=FAILED, restart=restart)
        raise CompileError(
            f"compile: {reason}. Choose another CompileSpec.backend (e.g. 'aot_eager' or 'eager'; "
            "torch._dynamo.list_backends() lists them) or options, or pass CompileSpec(on_failure='eager') to train "
            "with the eager forward instead", self.record,
        ) from exc


__all__ = ["CompiledForward", "known_backends"]
