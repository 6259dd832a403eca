"""``train(compile=CompileSpec(...))``: the refusals, then the wrap, before anything is written.

Compilation covers the built-in FP32 default step's forward (``"train_forward"``) and the built-in
in-fit validation's forward (``"val_forward"``, when there is a ``val_loader`` and no
``eval_step_fn``) of a built-in net, in one process. Everything else is refused with a
``ParamsError`` naming ``compile`` and the fix: a ``Trainer`` run, a custom ``train_step_fn``, an
objective, a requested precision other than fp32, a ``module=`` / ``ModelSpec`` net, ``DDP()``,
and a callback that changes the net's topology (one that declares ``checkpoint_transforms``);
a backend ``torch.compile`` does not know is refused the same way (``compile.backend``), under
either ``on_failure``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from nnx_core.errors import ParamsError
from nnx_adapters.pytorch.compilation import CompiledForward, known_backends
from nnx_api.callbacks import Callback
from nnx_api.config.compilation import CompileSpec

LEAVE_OUT = "leave compile out (or call torch.compile inside your own step)"


def prepare(entry: Any, callbacks: Sequence[Any]) -> CompiledForward | None:
    """The run's compiled forward (None without ``compile=``), after the refusals (module docstring)."""
    spec = entry.compile
    if spec is None:
        return None
    problem = _refusal(entry, spec, callbacks)
    if problem is not None:
        raise ParamsError("compile", problem)
    backends = known_backends()
    if spec.backend not in backends:  # a misspelt name is the configuration's error, whatever on_failure says
        raise ParamsError("compile.backend", f"{spec.backend!r} is not a torch.compile backend here; available: "
                                             f"{sorted(backends)} (torch._dynamo.list_backends(exclude_tags=()))")
    builtin_val = entry.train.val_loader is not None and entry.eval_step_fn is None
    return CompiledForward.wrap(
        entry.model.net, backend=spec.backend, mode=spec.mode, fullgraph=spec.fullgraph, dynamic=spec.dynamic,
        on_failure=spec.on_failure, capture=("train_forward", "val_forward") if builtin_val else ("train_forward",),
    )


def _refusal(entry: Any, spec: Any, callbacks: Sequence[Any]) -> str | None:
    if not isinstance(spec, CompileSpec):
        return f"must be CompileSpec(...) (e.g. CompileSpec(backend='inductor')), got {type(spec).__name__} {spec!r}"
    if entry.kind.owner_required:
        return ("a Trainer run's forwards are in its trainer_step_fn or objective, which compile= does not wrap; "
                "it compiles NNModel.train's built-in default step: " + LEAVE_OUT)
    if entry.distributed is not None:
        return "compiling under distributed=DDP() is not supported; leave compile or distributed out"
    if entry.step_fn is not None:
        return "it compiles the built-in train step's forward, and a custom train_step_fn runs its own: " + LEAVE_OUT
    if entry.objective is not None:
        return "it compiles the built-in train step's forward, and an objective runs its own: " + LEAVE_OUT
    requested = entry.model.resolved_precision.requested
    if requested != "fp32":
        return (f"it compiles FP32 runs only, and this model asks for {requested} (NNModelParams.precision / "
                "mixed_precision); use PrecisionPolicy('fp32') or leave compile out")
    if entry.model.net_params is None:
        return ("it compiles the built-in non-graph nets (Nets.FEED_FWD, Nets.CONV built from NNParams) only, not a module= or "
                "ModelSpec net; " + LEAVE_OUT)
    for i, cb in enumerate(callbacks):
        if type(cb).checkpoint_transforms is not Callback.checkpoint_transforms:
            return (f"callbacks[{i}] ({type(cb).__name__}) changes the net's topology (it declares checkpoint_transforms), "
                    "which a compiled forward cannot follow; leave that callback or compile out")
    return None


def noted(run: Any, attempt: Any, compiled: CompiledForward | None) -> Any:
    """``run`` and ``attempt`` (``attempt.json``'s record) with the compiled forward's record as it
    is now; both unchanged without ``compile=``."""
    if compiled is None:
        return run
    attempt.compile = compiled.record.state()
    return attrs.evolve(run, compile=compiled.record)
