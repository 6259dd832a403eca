"""``torch.compile`` of a net's forward for ``train(compile=...)``: wrap, call, fall back.

``CompiledForward.wrap(net, ...)`` calls ``torch.compile(net, ...)`` (lazy: the compiler runs at the
first call, and again when a guard fails — eval mode, another batch shape). The wrapper lives
here and is called in place of ``net`` by the forwards it captures; it is never assigned to the
model, so ``net.state_dict()`` keeps its eager keys (no ``_orig_mod.`` prefix). It shares
``net``'s parameters and buffers, so optimizer steps and restored weights are what it computes with.

A failure of ``torch.compile`` itself, or a compiler error (``torch._dynamo``'s exceptions) at a
call, ends compilation: with ``on_failure="error"`` as a ``CompileError`` (record status
``failed``), with ``"eager"`` by warning (``RuntimeWarning``) and running ``net`` eagerly from
then on (status ``eager``; the failed call is run again eagerly). Any other exception of a call
is the forward's own and passes through unchanged. ``torch._dynamo`` (two seconds to import) is
loaded only when a run asks for compilation.

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

from nnx_core.compilation import COMPILED, EAGER, FAILED, PENDING, CompileRecord
from nnx_core.errors import CompileError


class CompiledForward:
    """``net``'s forward through ``torch.compile``, with its ``record`` (a ``CompileRecord``)."""

    def __init__(self, net: torch.nn.Module, record: CompileRecord, on_failure: str) -> None:
        self.net = net
        self.record = record
        self.on_failure = on_failure
        self._compiled: Any = None
        self._dynamo: Any = None

    @classmethod
    def wrap(
        cls, net: torch.nn.Module, *, backend: str, mode: str | None, fullgraph: bool, dynamic: bool | None,
        on_failure: str, capture: Sequence[str],
    ) -> CompiledForward:
        """Wrap ``net`` (status ``pending``); a ``torch.compile`` that raises is a failure at once."""
        made = cls(net, CompileRecord(PENDING, backend, tuple(capture), 0, mode, fullgraph, dynamic), on_failure)
        try:
            made._dynamo = importlib.import_module("torch._dynamo")
            made._dynamo.reset_code(type(net).forward.__code__)  # this run compiles afresh (see the module docstring)
            made._compiled = torch.compile(net, backend=backend, mode=mode, fullgraph=fullgraph, dynamic=dynamic)
        except Exception as exc:  # an unknown backend, options it refuses, no compiler support here
            made._fail(exc, f"torch.compile(backend={backend!r}) raised")
        return made

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The compiled forward (the eager one after a fallback)."""
        if self._compiled is None:
            return self.net(*args, **kwargs)
        before = self._graph_breaks()
        try:
            out = self._compiled(*args, **kwargs)
        except self._dynamo.exc.TorchDynamoException as exc:  # the compiler's error, not the forward's
            self._fail(exc, "compiling the forward failed")
            return self.net(*args, **kwargs)
        breaks = self._graph_breaks() - before
        if self.record.status != COMPILED or breaks:
            self.record = attrs.evolve(self.record, status=COMPILED, graph_breaks=self.record.graph_breaks + breaks)
        return out

    def _graph_breaks(self) -> int:
        return sum(self._dynamo.utils.counters["graph_break"].values())

    def _fail(self, exc: BaseException, what: str) -> None:
        reason = f"{what}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        self._compiled = None
        if self.on_failure == "eager":
            self.record = attrs.evolve(self.record, status=EAGER, reason=reason)
            warnings.warn(f"compile: {reason}; training continues with the eager forward (on_failure='eager')",
                          RuntimeWarning, stacklevel=3)
            return
        self.record = attrs.evolve(self.record, status=FAILED, reason=reason)
        raise CompileError(
            f"compile: {reason}. Choose another CompileSpec.backend (e.g. 'aot_eager' or 'eager'; "
            "torch._dynamo.list_backends() lists them) or options, or pass CompileSpec(on_failure='eager') to train "
            "with the eager forward instead", self.record,
        ) from exc
