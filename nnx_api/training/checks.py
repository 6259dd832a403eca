"""The checks a training entry point makes before anything is written.

Every refusal here is a typed ``NNxError`` naming the field or the fix: the data (a loader, not
empty), the update owner (exactly one: a step function or an objective, each of the right kind),
the precision a step supports, trainable parameters, metrics and monitor (a monitor must name a
value the run computes), ``EarlyStopping`` (one comparator per run), an objective's own ``check_run``, and the callbacks
as given (``check_callbacks``: a list of instances, never a class, never one object twice, hooks
defined on a class). Every step and objective is checked against the call NNx makes,
``fn(ctx)`` (``check_callable``; ``extra_metrics`` functions are tried on the first batch,
``nnx_api.training.batch_checks``), NNx's own step functions and factories are refused in a slot
that is not theirs (``check_role``), and an ``eval_step_fn`` needs a ``val_loader``
(``check_eval_step``). ``NNModel.train``, ``Trainer.train`` and ``DDP()`` runs make the same checks.

The first batches' checks are ``nnx_api.training.batch_checks``.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from nnx_core.errors import (
    ParamsError,
    PrecisionUnsupportedError,
    ScheduleBudgetError,
    TaskValidationError,
    TrainingInputError,
    UpdateOwnerError,
)
from nnx_core.monitor_spec import MonitorSpec
from nnx_core.schedules import BUDGETED
from nnx_adapters.pytorch.metrics import resolve
from nnx_api.callbacks import Callback, EarlyStopping
from nnx_api.config.metrics import monitor_problems
from nnx_api.training.builtin_step import default_train_step
from nnx_api.training.code import OWN
from nnx_api.training.objectives import Objective, kd_objective, supervised_objective
from nnx_api.training.paradigms import kd_train_step_factory
from nnx_api.training.steps import finalize_step, streaming_eval_step


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
            f"Trainer.train needs an update owner ({step_name} is required (or pass an objective)): "
            f"{step_name}=<fn(ctx) -> EvaluationDataPoint> or "
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
        raise TrainingInputError(f"{name}.train_loader is missing (a train_loader is required); "
                                 "pass train_loader=<DataLoader of (x, y)>")
    for where in ("train_loader", "val_loader"):
        loader = getattr(params, where)
        with contextlib.suppress(TypeError):  # no len(): the first batch tells (check_first_batches)
            # a rank's shard (nnx.distributed.validation_loader) may hold none of the rows
            if loader is not None and not getattr(loader, "rank_shard", False) and len(loader) == 0:
                raise TrainingInputError(f"{where} is empty ({where} yielded no batches); give it at least one batch")
    check_resume_horizon(params)
    check_task(model)
    if not any(p.requires_grad for p in model.net.parameters()):
        raise ParamsError("model", "no parameter requires grad (no trainable parameters); did you freeze('*')? "
                          "Unfreeze the layers to train")
    kind = model.params.resolved_task.kind
    problems = resolve(params.metrics, kind, model.head.width) if params.metrics else []  # no width asked of a net nobody scores
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
            if isinstance(cb.monitor, MonitorSpec):  # what the run can compute first, then one decision per run
                problems = monitor_problems(cb.monitor, params.metrics, kind, params.val_loader is not None)
                if problems:
                    key, said = cb.monitor.key, f"EarlyStopping monitor {cb.monitor.key!r} names an undeclared metric,"
                    raise ParamsError("EarlyStopping.monitor", "; ".join(
                        p.replace(f"monitor {key} names", said, 1) for p in problems))
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
    _refuse_twice(callbacks, "callbacks", "its hooks would run twice for every event")
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
    calls (a typo, another framework's name) is warned of, naming NNx's hook. A hook assigned on
    the instance (``cb.on_epoch_end = fn``) is refused: NNx calls the hooks a class defines."""
    for name, member in getattr(callback, "__dict__", {}).items():
        if callable(member) and (name in HOOKS or name in OTHERS):
            hook = OTHERS.get(name, name)
            raise ParamsError(
                f"{where}.{name}", f"is set on the instance, and NNx calls only the hooks a class defines, so it would "
                f"never run; define it on a subclass: class MyCallback(nnx.Callback): def {hook}(self, {_args(hook)}): ..."
            )
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
    """The task agrees with the net: ``TaskSpec(n=)`` and ``labels`` with the output width, and a
    regression task's assigned ``loss_fn`` is not a classification loss."""
    task, net = model.params.task, model.net_params
    if task is None:
        return
    if task.n is not None and net is not None and task.n != net.output_dim:
        raise ParamsError(
            "NNModelParams.task.n", f"is {task.n} but NNParams.output_dim is {net.output_dim}; make them equal (or leave n unset)"
        )
    classification = (torch.nn.CrossEntropyLoss, torch.nn.NLLLoss, torch.nn.BCEWithLogitsLoss, torch.nn.BCELoss)
    if task.kind == "regression" and getattr(model, "loss_assigned", False) and isinstance(model.loss_fn, classification):
        raise TaskValidationError(f"a regression task needs a regression loss (MSELoss, L1Loss, HuberLoss, ...), but "
                                  f"the model's loss_fn is {type(model.loss_fn).__name__}; assign one or declare "
                                  "another TaskSpec")
    width = model.head.width
    if task.labels is not None and len(task.labels) != width and not (task.kind == "multilabel" and width == 1):
        raise ParamsError("NNModelParams.task.labels", f"has {len(task.labels)} labels for {width} outputs; give one per output")


def check_not_a_class(value: Any, where: str) -> None:
    """A class given where NNx calls a function or an instance (a step, an objective, an evaluation
    step): NNx would call the class itself, building an object instead of running a step."""
    if isinstance(value, type):
        raise ParamsError(where, f"is the class {value.__name__}, not an instance or a function; write "
                                 f"{where}={value.__name__}(...) (with its arguments), or pass a function fn(ctx)")


def _refuse_twice(objects: Sequence[Any], where: str, why: str) -> None:
    """The same object twice in one list (by identity) is refused, naming both places."""
    first: dict[int, int] = {}
    for i, obj in enumerate(objects):
        j = first.setdefault(id(obj), i)
        if j != i:
            raise ParamsError(f"{where}[{i}]", f"is the same object as {where}[{j}] ({_kind(obj)}), given more than "
                                               f"once: {why}; give each one once")


def check_components(components: Any) -> None:
    """``components=[...]``: checkpointed objects, each with ``component_spec()``; a class, one
    object given twice or an object without the protocol (it would be silently never saved) is
    refused."""
    _refuse_twice(list(components or ()), "components", "it is saved and restored once")
    for i, component in enumerate(components or ()):
        if isinstance(component, type):
            raise ParamsError(f"components[{i}]", f"is the class {component.__name__}, not an instance; write "
                                                  f"{component.__name__}(...)")
        if not hasattr(component, "component_spec"):
            raise ParamsError(f"components[{i}]", f"{component!r} has no component_spec(), so nothing of it would be "
                                                  "saved or restored; give it the component protocol (component_spec, "
                                                  "component_state, load_component_state), or pass it as a callback")


ROLES: dict[Any, tuple[str, str]] = {  # NNx's own functions → (the slot they fill, or "factory": the call)
    default_train_step: ("train_step_fn", "NNModel's built-in training step function"),
    finalize_step: ("", "the step function tail your own step calls: finalize_step(loss, ctx, paradigm=...)"),
    streaming_eval_step: ("eval_step_fn", "a validation step function"),
    supervised_objective: ("factory", "objective=supervised_objective()"),
    kd_objective: ("factory", "objective=kd_objective(teacher, ...)"),
    kd_train_step_factory: ("factory", "train_step_fn=kd_train_step_factory(teacher, ...)"),
}
SLOTS = {"train_step_fn": "a training step fn(ctx)", "trainer_step_fn": "a Trainer step fn(ctx) over named optimizers",
         "eval_step_fn": "a validation step fn(ctx) over the whole val_loader", "objective": "an objective fn(ctx) -> ObjectiveResult"}


CONTEXT_FIELDS = ("model", "batch", "optimizer", "optimizers", "val_loader", "extra_metrics", "epoch_idx", "batch_idx")


def check_role(value: Any, slot: str) -> None:
    """One of NNx's own step functions or factories given in a slot that is not its own is refused
    by name: a factory not called, a training step as ``eval_step_fn``, a step as the objective."""
    try:
        role = ROLES.get(value)
    except TypeError:  # unhashable: none of NNx's
        return
    if role is None or role[0] == slot:
        return
    name = getattr(value, "__name__", repr(value))
    if role[0] == "factory":
        raise ParamsError(slot, f"is the factory {name} itself, which builds what NNx calls; call it: {role[1]}")
    home = f"; pass it as {role[0]}=" if role[0] else ""
    raise UpdateOwnerError(f"{slot}={name}: {name} is {role[1]}{home}, but {slot} takes {SLOTS.get(slot, slot)}")


def check_callable(fn: Any, where: str, args: tuple[str, ...] = ("ctx",)) -> None:
    """``fn`` can be called as NNx calls it, ``fn(*args)`` positionally (checked on its signature,
    before anything is written); a function NNx cannot inspect passes."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*args)
    except TypeError:
        pass
    else:
        return
    name = getattr(fn, "__name__", type(fn).__name__).replace("<lambda>", "fn")
    takes = ", ".join(str(p) for p in signature.parameters.values())
    call = f"{name}({', '.join(args)})"
    positional = [p for p in signature.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not positional and not any(p.kind is p.VAR_POSITIONAL for p in signature.parameters.values()):
        raise ParamsError(where, f"{name}({takes}) takes no positional argument, but NNx calls it as {call}; if it builds "
                                 f"the function, call it: {where.split('.')[-1].split('[')[0]}={name}()")
    if args == ("ctx",):
        fields = ", ".join(f"ctx.{p.name}" for p in positional if p.name in CONTEXT_FIELDS)
        raise ParamsError(where, f"{name}({takes}) cannot be called as NNx calls it, {call}: one context, whose "
                                 f"fields hold what you need ({fields or 'ctx.model, ctx.batch'}); write def {name}(ctx): ...")
    raise ParamsError(where, f"{name}({takes}) cannot be called as NNx calls it, {call}; write def {name}({', '.join(args)}): ...")


def check_resume_horizon(params: Any) -> None:
    """A stateful resume of a budgeted schedule (one-cycle, warm-up decay) needs one explicit
    ``total_steps`` covering the source run's ticks and this run's: its default horizon is this
    call's length only, which the ticks already made always exceed. Refused before the source run
    is read (NNx's order); a weights-only resume starts a fresh schedule and needs none."""
    if getattr(params, "resume_from_run_id", None) is None or getattr(params, "resume_mode", None) == "weights_only":
        return
    named = getattr(params, "schedulers", None)
    schedules = dict(named) if named is not None else {None: params.scheduler}
    for name, sched in schedules.items():
        kind = str(getattr(sched.kind, "value", sched.kind))
        if kind in BUDGETED and sched.total_steps is None:
            owner = f" for {name!r}" if name is not None else ""
            raise ScheduleBudgetError(
                f"resuming {kind}{owner} requires scheduler.total_steps to be set explicitly: one horizon covering "
                "the source run's steps and this run's; set NNSchedulerParams(total_steps=...), or pass "
                "resume_mode='weights_only' to start a fresh schedule"
            )


def check_update_owner(train_step_fn: Any, objective: Any, *, step_name: str = "train_step_fn") -> None:
    """Exactly one update owner, of the right kind, callable as ``fn(ctx)``: refused before anything is written."""
    if train_step_fn is not None and objective is not None:
        raise UpdateOwnerError(f"give {step_name} or objective, not both: a run has one update owner")
    for where, given in ((step_name, train_step_fn), ("objective", objective)):
        check_not_a_class(given, where)
        if given is not None:
            check_role(given, where)
    if isinstance(train_step_fn, Objective):
        raise UpdateOwnerError(f"{type(train_step_fn).__name__} is an objective: pass it as objective=, not {step_name}=")
    if objective is not None:
        if not callable(objective):
            raise UpdateOwnerError(f"objective must be callable (ctx -> ObjectiveResult), got {type(objective).__name__}")
        check_callable(objective, "objective")
    if train_step_fn is not None and callable(train_step_fn):
        check_callable(train_step_fn, step_name)


def check_eval_step(eval_step_fn: Any, val_loader: Any) -> None:
    """``eval_step_fn``: no class, none of NNx's training steps, callable as ``fn(ctx)``, and a
    ``val_loader`` to validate (without one it would never be called)."""
    if eval_step_fn is None:
        return
    check_not_a_class(eval_step_fn, "eval_step_fn")
    check_role(eval_step_fn, "eval_step_fn")
    if not callable(eval_step_fn):
        raise ParamsError("eval_step_fn", f"must be a function fn(ctx) -> EvaluationDataPoint, got {type(eval_step_fn).__name__}")
    check_callable(eval_step_fn, "eval_step_fn")
    if val_loader is None:
        raise ParamsError("eval_step_fn", "is given but the run has no val_loader, so it would never be called; pass "
                                          "val_loader=<DataLoader> in the params, or leave eval_step_fn out")
