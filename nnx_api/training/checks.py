"""The checks a training entry point makes before anything is written.

Every refusal here is a typed ``NNxError`` naming the field or the fix: the data (a loader, not
empty), the update owner (exactly one: a step function or an objective, each of the right kind),
the precision a step supports, trainable parameters, metrics and monitor (a monitor must name a
value the run computes), ``EarlyStopping`` (one comparator per run), an objective's own ``check_run``, and the callbacks
as given (``check_callbacks``: a list of instances, never a class). ``NNModel.train``,
``Trainer.train`` and ``DDP()`` runs make the same checks.

The first batches' checks are ``nnx_api.training.batch_checks``.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import warnings
from collections.abc import Sequence
from typing import Any

from nnx_core.errors import ParamsError, PrecisionUnsupportedError, TrainingInputError, UpdateOwnerError
from nnx_adapters.pytorch.metrics import resolve
from nnx_api.callbacks import Callback, EarlyStopping
from nnx_api.config.metrics import monitor_problems
from nnx_api.training.builtin_step import default_train_step
from nnx_api.training.code import OWN
from nnx_api.training.objectives import Objective
from nnx_api.training.steps import finalize_step


def check_run(
    model: Any,
    params: Any,
    callbacks: Sequence[Any],
    *,
    params_type: type,
    optimizers: Sequence[str],
    step_fn: Any,
    step_name: str,
    objective: Any,
    needs_owner: bool = False,
) -> None:
    """Refuse a run that cannot train (see the module docstring); nothing has been written."""
    name = params_type.__name__
    if not isinstance(params, params_type):
        raise ParamsError("params", f"must be {name}, got {type(params).__name__}")
    check_update_owner(step_fn, objective, step_name=step_name)
    if needs_owner and step_fn is None and objective is None:
        raise UpdateOwnerError(
            f"Trainer.train needs an update owner: {step_name}=<fn(ctx) -> EvaluationDataPoint> or "
            "objective=<fn(ctx) -> ObjectiveResult>; there is no default trainer step"
        )
    if step_fn is not None and not callable(step_fn):
        raise UpdateOwnerError(f"{step_name} must be callable, got {type(step_fn).__name__}")
    if getattr(step_fn, "nnx_full_precision_only", False) and model.precision != "fp32":
        raise PrecisionUnsupportedError(
            f"{getattr(step_fn, '__name__', 'this step')} is full-precision only, but the run resolves to "
            f"{model.precision}; use PrecisionPolicy('fp32')"
        )
    if params.train_loader is None:
        raise TrainingInputError(f"{name}.train_loader is missing; pass train_loader=<DataLoader of (x, y)>")
    for where in ("train_loader", "val_loader"):
        with contextlib.suppress(TypeError):  # no len(): the first batch tells (check_first_batches)
            if getattr(params, where) is not None and len(getattr(params, where)) == 0:
                raise TrainingInputError(f"{where} is empty; give it at least one batch")
    check_task(model)
    if not any(p.requires_grad for p in model.net.parameters()):
        raise ParamsError("model", "no parameter requires grad; did you freeze('*')? Unfreeze the layers to train")
    kind = model.params.resolved_task.kind
    problems = resolve(params.metrics, kind, model.head.width)
    if problems:
        raise ParamsError(f"{name}.metrics", "; ".join(problems))
    problems = monitor_problems(params.monitor, params.metrics, kind, params.val_loader is not None)
    default_step = step_fn is None and objective is None and not needs_owner
    if params.monitor is not None and (problem := params.monitor.step_problem(default_step=default_step)):
        problems.append(problem)
    if problems:
        raise ParamsError(f"{name}.monitor", "; ".join(problems))
    for cb in callbacks:
        if isinstance(cb, EarlyStopping):
            cb.check_run(params.monitor)
    if objective is not None:
        accumulate = {n: o.accumulate_grad_batches for n, o in getattr(params, "optims", {}).items()}
        if len(set(accumulate.values())) > 1:
            raise ParamsError(
                f"{name}.optims",
                f"an objective commits every optimizer once per window, so accumulate_grad_batches must agree: {accumulate}",
            )
        check = getattr(objective, "check_run", None)
        if check is not None:
            check(model, optimizers=tuple(optimizers), callbacks=tuple(callbacks))


def check_callbacks(callbacks: Any) -> Sequence[Any]:
    """``callbacks`` as a list of instances (or plain functions ``fn(idps)``): a single callback,
    a class instead of an instance, and other non-callbacks are refused with what to write."""
    if callbacks is None:
        return ()
    if isinstance(callbacks, (Callback, type)) or not isinstance(callbacks, (list, tuple)):
        one = callbacks if not isinstance(callbacks, type) else None
        hint = f"[{type(one).__name__}(...)]" if isinstance(one, Callback) else "[EarlyStopping(...), ...]"
        raise ParamsError("callbacks", f"must be a list of callbacks, e.g. callbacks={hint}; got {_kind(callbacks)}")
    for i, cb in enumerate(callbacks):
        if isinstance(cb, type):
            raise ParamsError(
                f"callbacks[{i}]", f"is the class {cb.__name__}, not an instance; write {cb.__name__}(...) (with its arguments)"
            )
        if not isinstance(cb, Callback) and not callable(cb):
            hooks = [h for h in HOOKS if hasattr(cb, h)]
            fix = f"; it has {', '.join(hooks)}: derive its class from nnx.Callback" if hooks else ""
            raise ParamsError(f"callbacks[{i}]", f"{cb!r} is neither a Callback instance nor a function fn(idps){fix}")
        if isinstance(cb, Callback):
            check_hooks(cb, f"callbacks[{i}]")
    return callbacks


HOOKS = {"on_train_begin": ("ctx",), "on_epoch_begin": ("ctx",), "on_optimizer_update": ("ctx", "event"),
         "on_epoch_end": ("ctx",), "on_train_end": ("ctx",)}  # what NNx calls, with what
OTHERS = {  # other frameworks' hook names (Lightning, Keras, skorch, HF) → NNx's
    "on_train_epoch_end": "on_epoch_end", "on_validation_epoch_end": "on_epoch_end", "on_train_epoch_start": "on_epoch_begin",
    "on_epoch_start": "on_epoch_begin", "on_fit_start": "on_train_begin", "on_train_start": "on_train_begin",
    "on_fit_end": "on_train_end", "on_batch_end": "on_optimizer_update", "on_train_batch_end": "on_optimizer_update",
    "on_step_end": "on_optimizer_update", "on_before_optimizer_step": "on_optimizer_update",
    "on_after_optimizer_step": "on_optimizer_update", "on_batch_begin": "on_optimizer_update",
    "on_train_batch_start": "on_optimizer_update", "on_validation_end": "on_epoch_end",
}
FOREIGN_FIRST = {"epoch": "Keras's", "logs": "Keras's", "net": "skorch's", "trainer": "Lightning's", "args": "HF's"}


def check_hooks(callback: Any, where: str) -> None:
    """A callback's hooks as NNx calls them: a hook NNx calls with arguments it cannot take (or
    with another framework's signature) is refused; a method named like a hook that NNx never
    calls (a typo, another framework's name) is warned of, naming NNx's hook."""
    for klass in type(callback).__mro__:
        if klass is object or klass.__module__.split(".")[0] in OWN:
            continue
        for name, member in vars(klass).items():
            if not name.startswith("on_") or not callable(member):
                continue
            if name in HOOKS:
                _check_signature(getattr(callback, name), name, f"{where}.{name}")
                continue
            close = OTHERS.get(name) or next(iter(difflib.get_close_matches(name, HOOKS, n=1)), None)
            warnings.warn(
                f"{where}: {type(callback).__name__}.{name} is not an NNx hook and is never called"
                + (f"; did you mean {close}({_args(close)})?" if close else "")
                + f" NNx's hooks: {'; '.join(f'{h}({_args(h)})' for h in HOOKS)}",
                UserWarning, stacklevel=5,
            )


def _args(hook: str) -> str:
    return ", ".join(HOOKS[hook])


def _check_signature(method: Any, name: str, where: str) -> None:
    expected = HOOKS[name]
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):
        return
    written = f"def {name}(self, {', '.join(expected)}): ..."
    try:
        signature.bind(*expected)
    except TypeError:
        raise ParamsError(where, f"takes ({', '.join(['self', *signature.parameters])}) but NNx calls it as {name}"
                                 f"({', '.join(expected)}); write {written}") from None
    first = next(iter(signature.parameters), None)
    if first in FOREIGN_FIRST:
        raise ParamsError(where, f"has {FOREIGN_FIRST[first]} signature ({', '.join(signature.parameters)}), but NNx "
                                 f"calls it as {name}({', '.join(expected)}): the epoch, the model and the records are "
                                 f"ctx.epoch, ctx.model and ctx.idps; write {written}")


def _kind(value: Any) -> str:
    return f"the class {value.__name__}" if isinstance(value, type) else type(value).__name__


def check_task(model: Any) -> None:
    """The task agrees with the net: ``TaskSpec(n=)`` and ``labels`` with the output width."""
    task, net = model.params.task, model.net_params
    if task is None:
        return
    if task.n is not None and net is not None and task.n != net.output_dim:
        raise ParamsError(
            "NNModelParams.task.n", f"is {task.n} but NNParams.output_dim is {net.output_dim}; make them equal (or leave n unset)"
        )
    width = model.head.width
    if task.labels is not None and len(task.labels) != width and not (task.kind == "multilabel" and width == 1):
        raise ParamsError("NNModelParams.task.labels", f"has {len(task.labels)} labels for {width} outputs; give one per output")


def check_not_a_class(value: Any, where: str) -> None:
    """A class given where NNx calls a function or an instance (a step, an objective, an evaluation
    step): NNx would call the class itself, building an object instead of running a step."""
    if isinstance(value, type):
        raise ParamsError(where, f"is the class {value.__name__}, not an instance or a function; write "
                                 f"{where}={value.__name__}(...) (with its arguments), or pass a function fn(ctx)")


def check_components(components: Any) -> None:
    """``components=[...]``: checkpointed objects, each with ``component_spec()``; a class or an
    object without the protocol (it would be silently never saved) is refused."""
    for i, component in enumerate(components or ()):
        if isinstance(component, type):
            raise ParamsError(f"components[{i}]", f"is the class {component.__name__}, not an instance; write "
                                                  f"{component.__name__}(...)")
        if not hasattr(component, "component_spec"):
            raise ParamsError(f"components[{i}]", f"{component!r} has no component_spec(), so nothing of it would be "
                                                  "saved or restored; give it the component protocol (component_spec, "
                                                  "component_state, load_component_state), or pass it as a callback")


def _is_step_function(fn: Any) -> bool:
    return fn is default_train_step or fn is finalize_step


def check_update_owner(train_step_fn: Any, objective: Any, *, step_name: str = "train_step_fn") -> None:
    """Exactly one update owner, of the right kind: refused before anything is written."""
    if train_step_fn is not None and objective is not None:
        raise UpdateOwnerError(f"give either {step_name} or objective (one update owner per run), not both")
    for where, given in ((step_name, train_step_fn), ("objective", objective)):
        check_not_a_class(given, where)
    if isinstance(train_step_fn, Objective):
        raise UpdateOwnerError(f"{type(train_step_fn).__name__} is an objective: pass it as objective=, not {step_name}=")
    if objective is not None:
        if not callable(objective):
            raise UpdateOwnerError(f"objective must be callable (ctx -> ObjectiveResult), got {type(objective).__name__}")
        if _is_step_function(objective):
            raise UpdateOwnerError(f"{getattr(objective, '__name__', objective)!r} is a step function: pass it as {step_name}=")
