"""The code fingerprint: which user code trains a run, kept with the run.

The run id is the configuration's SHA-256; the code that turns it into updates — a
``train_step_fn`` / ``trainer_step_fn`` / ``eval_step_fn``, an objective of your own, the
``forward`` of your own module — is not in it. So ``resume="auto"`` would continue a run with a
changed step, or return a finished one whose ``forward`` is no longer the one it was trained
with. Each piece of user code is recorded at admission (metadata.yaml's ``code``) as its
qualified name and a SHA-256 (16 hex digits) of its source's syntax tree — comments, blank lines
and formatting do not count, a changed statement or constant does. A continuation or return
with other code is refused (``CodeChangedError``) naming what changed; code whose source cannot
be read (a lambda typed in a shell, a compiled extension) is recorded as unreadable and only
warned of.

An objective is fingerprinted whatever its kind: a function (or bound method) by its source, as
a step function; an instance by its class's source plus its configuration (``_config``: its
public attributes that are plain data, or its attrs/dataclass fields), so ``kd_objective(alpha=0.7)``
after ``alpha=0.5`` is a change. The configuration joins the fingerprint, never the run id (ids
must not drift for existing configurations).

NNx's own code (``nnx_api``, ``nnx_core``, ``nnx_adapters``: the built-in nets, steps and
objectives) is left out: a new version of the library is not a change of your experiment. A
built-in objective's configuration is recorded (``config``: True, the digest of its configuration
only).

What else decides a training is recorded beside the code, as roles of the same record, each
compared by ``resume="auto"`` like a piece of code:

* ``module.structure``: a module of your own, by its layers' classes and settings
  (``Dropout(p=0.25)`` against ``Dropout(p=0.1)``, ``Tanh`` against ``Hardtanh``), not only the
  parameter shapes the run id holds;
* ``<role> constant <name>``: each constant a step function or your module's ``forward`` reads (a
  global or closure variable holding plain data: ``real_label = 0.9``);
* ``batch adapter``: ``NNModel(batch_adapter=...)`` (which inputs the net sees, which output is
  the prediction: ``PositionalInputs(1, prediction=0)`` against ``prediction=1``), by its class
  and configuration (a record whose marker predates it does not compare it);
* ``callback <name>``: a callback whose state the run keeps (a component, such as
  ``EarlyStopping``), by its class and configuration (``patience=3`` against ``patience=5``:
  ``ComponentRestoreError``); one given only then or only now is not compared (NNx's optional
  components may come and go).

They are recorded since the ``settings`` marker was: a run recorded without it compares code only.
The initial weights are not recorded: an unseeded script builds other weights on every rerun, so
they cannot tell a changed experiment from a rerun (docs/concepts.md, "What a run id covers").

``trained`` describes, in words, what turned the configuration into updates: the net that ran
(NNx's built-in net, or your module's class), who owned the updates (the built-in step, a step
function, an objective) and the loss the built-in step computed. run.yaml keeps it next to the
configuration, outside the content address (``NNRun.trained``), so a ``module=`` run trained by an
objective is not described by the defaults its ``model`` section carries (``net: feed_fwd``,
``loss: cross_entropy``) and no run id moves.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import json
import textwrap
import types
from collections.abc import Mapping
from typing import Any

import attrs

from nnx_core.errors import CodeChangedError, ComponentRestoreError
from nnx_api.config.identity import class_path

OWN = ("nnx_api", "nnx_core", "nnx_adapters")
SETTINGS = "settings"  # the marker: the structure, constant and callback roles are recorded (module docstring)
ADAPTER = "batch adapter"  # a role, recorded since the marker's name says so


def code_fingerprint(entry: Any, callbacks: Any = ()) -> dict[str, dict[str, Any]]:
    """``{role: {"name", "sha256"}}`` of the user code ``entry`` trains with (``sha256`` None:
    the source cannot be read) and what else decides its training (``callbacks``: the declared
    ones; module docstring)."""
    found: dict[str, Any] = {
        entry.kind.step_name: entry.step_fn, "eval_step_fn": entry.eval_step_fn,
        "module.forward": type(entry.model.net).forward,
    }
    code = {role: {"name": _name(fn), "sha256": _digest(fn)} for role, fn in found.items() if fn is not None and _yours(fn)}
    objective = _objective(entry.objective) if entry.objective is not None else None
    if objective is not None:
        code["objective"] = objective
    code[SETTINGS] = {"name": f"module structure, constants, kept callbacks, {ADAPTER}"}
    adapter = getattr(entry.model, "batch_adapter", None)
    if adapter is not None:  # which inputs the net sees and which output is the prediction
        config = json.dumps([_digest(type(adapter)) if _yours(type(adapter)) else None, _config(adapter)], sort_keys=True)
        code[ADAPTER] = {"name": repr(adapter), "sha256": _hash(config)}
    if "module" in entry.config:
        net = entry.model.net
        code["module.structure"] = {"name": class_path(type(net)), "sha256": _hash(_structure(net))}
    functions = {**found, "objective": entry.objective if inspect.isfunction(entry.objective) or inspect.ismethod(entry.objective) else None}
    for role, fn in functions.items():
        for name, value in _constants(fn).items() if fn is not None and _yours(fn) else ():
            code[f"{role} constant {name}"] = {"name": name, "sha256": _hash(json.dumps(value))}
    for callback in callbacks:
        if hasattr(callback, "component_spec"):
            config = json.dumps([_digest(type(callback)) if _yours(type(callback)) else None, _config(callback)], sort_keys=True)
            code[f"callback {callback.component_spec()[0]}"] = {"name": class_path(type(callback)), "sha256": _hash(config)}
    return code


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _structure(net: Any) -> str:
    """Every submodule's class and settings (its ``extra_repr`` and its plain public attributes)."""
    lines = []
    for name, module in net.named_modules():
        settings = {k: _plain(v) for k, v in vars(module).items() if not k.startswith("_") and k != "training" and _is_plain(v)}
        lines.append(f"{name}:{class_path(type(module))}:{module.extra_repr()}:{json.dumps(settings, sort_keys=True)}")
    return "\n".join(lines)


def _constants(fn: Any) -> dict[str, Any]:
    """The plain-data globals and closure variables a function (and the functions it defines) reads."""
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names |= set(c.co_names)
        stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    scope = getattr(fn, "__globals__", {})
    found = {n: _plain(scope[n]) for n in names if n in scope and not n.startswith("__") and _is_plain(scope[n])}
    for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if _is_plain(value):
            found[name] = _plain(value)
    return found


def trained(entry: Any) -> dict[str, str]:
    """run.yaml's ``trained`` section for ``entry`` (module docstring): ``net``, ``update`` and
    ``loss``, each a line of words."""
    config, model = entry.config, entry.model
    net = f"module {config['module']['class']}" if "module" in config else f"built-in {config['model'].get('net')}"
    owner = entry.step_fn if entry.step_fn is not None else entry.objective
    task_loss = model.task_adapter.loss_name
    if owner is None:
        return {"net": net, "update": "built-in step", "loss": task_loss}
    role = "objective" if entry.objective is not None else entry.kind.step_name
    named = owner if inspect.isfunction(owner) or inspect.ismethod(owner) or isinstance(owner, type) else type(owner)
    loss = "the objective's loss terms" if role == "objective" else "computed by the step"
    if _name(named) == "SupervisedObjective" and not _yours(named):
        loss = task_loss
    return {"net": net, "update": f"{role} {class_path(named)}", "loss": loss}


def _objective(obj: Any) -> dict[str, Any] | None:
    """An objective's record: a function by its source; an instance by its class's source and its
    configuration; an NNx objective by its configuration only (``config``: True)."""
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        return {"name": _name(obj), "sha256": _digest(obj)} if _yours(obj) else None
    cls = type(obj)
    config = json.dumps(_config(obj), sort_keys=True, default=repr)
    if not _yours(cls):
        return {"name": _name(cls), "sha256": hashlib.sha256(config.encode()).hexdigest()[:16], "config": True}
    source = _digest(cls) or _methods_digest(cls)
    if source is None:
        return {"name": _name(cls), "sha256": None}
    return {"name": _name(cls), "sha256": hashlib.sha256(f"{source}:{config}".encode()).hexdigest()[:16]}


def _methods_digest(cls: type) -> str | None:
    """A class's code when its own source cannot be found (its module not importable, as in a
    notebook): the digests of the functions the user's classes of its MRO define (None: one of
    them cannot be read either)."""
    parts = []
    for klass in cls.__mro__:
        if not _yours(klass) or klass is object:
            continue
        for name, member in sorted(vars(klass).items()):
            fn = getattr(member, "__func__", member)  # staticmethod / classmethod: the function
            if inspect.isfunction(fn):
                digest = _digest(fn)
                if digest is None:
                    return None
                parts.append(f"{klass.__qualname__}.{name}:{digest}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16] if parts else None


def _config(obj: Any) -> dict[str, Any]:
    """An objective instance's configuration: its attrs/dataclass fields, else its public
    attributes, kept where they are plain data (numbers, strings, bools, None, tuples/lists of
    them); a module, a tensor or a model is not configuration."""
    if attrs.has(type(obj)):
        values = {f.name: getattr(obj, f.name, None) for f in attrs.fields(type(obj))}
    elif dataclasses.is_dataclass(obj):
        values = {f.name: getattr(obj, f.name, None) for f in dataclasses.fields(obj)}
    else:
        values = {k: v for k, v in vars(obj).items() if not k.startswith("_")} if hasattr(obj, "__dict__") else {}
    return {k: _plain(v) for k, v in values.items() if _is_plain(v)}


def _is_plain(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_is_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _plain(value: Any) -> Any:
    return [_plain(v) for v in value] if isinstance(value, (tuple, list)) else value


def _comparable(
    role: str, before: Mapping[str, Any] | None, now: Mapping[str, Any] | None, marked: bool, adapter_marked: bool = True
) -> bool:
    """Whether a recorded entry can be compared with this call's: the marker never is, nor are
    the settings roles against a record without the marker (``marked``), nor the batch adapter
    against one whose marker predates it (``adapter_marked``); an objective recorded
    before objectives were fingerprinted (``Class.__call__`` or ``function.__call__``) cannot; nor
    can an NNx objective's configuration against a run that predates its record (silently: as then)."""
    if role == SETTINGS or (not marked and (role == "module.structure" or " constant " in role or role.startswith("callback "))):
        return False
    if role == ADAPTER and not adapter_marked:  # a record from before adapters were: no adapter said nothing
        return False
    if role.startswith("callback ") and (before is None or now is None):  # a kept callback may come and go (NNx's
        return False  # optional components): only a changed one is another training
    if role != "objective":
        return True
    if before is not None and str(before.get("name", "")).endswith(".__call__"):
        return False
    return not (before is None and now is not None and now.get("config"))


def code_refusal(
    run_id: str, recorded: Mapping[str, Any] | None, current: Mapping[str, Any]
) -> CodeChangedError | ComponentRestoreError | None:
    """Why this call's code does not fit the code ``run_id`` recorded (None: it fits, or the run
    predates the record, or only unreadable code differs — ``unreadable`` says which). Only kept
    callbacks configured otherwise: ``ComponentRestoreError``, as for a component whose saved
    state does not fit."""
    if recorded is None:
        return None
    changes = []
    for role in sorted(set(recorded) | set(current)):
        before, now = recorded.get(role), current.get(role)
        if not _comparable(role, before, now, SETTINGS in recorded, ADAPTER in recorded.get(SETTINGS, {}).get("name", "")):
            continue
        if before is None or now is None:
            changes.append(f"{role} {'is given now, not then' if before is None else 'was given then, not now'}")
        elif before.get("sha256") and now.get("sha256") and before != now:
            renamed = f" (was {before.get('name')})" if before.get("name") != now.get("name") else ""
            changes.append(f"{role} {now.get('name')}{renamed} changed")
    if not changes:
        return None
    if all(change.startswith("callback ") for change in changes):
        return ComponentRestoreError([
            f"{change.removeprefix('callback ')} since run {run_id[:8]} was trained with it: configure it as then to "
            "continue the run, or start the new configuration as a distinct run with salt='...'" for change in changes])
    return CodeChangedError(
        f"run {run_id[:8]} was trained with other code or settings ({'; '.join(changes)}), so resume='auto' will not continue or "
        "return it. Put the code back; or keep the old run and start this code as a distinct run with salt='...'; or "
        f"continue from the old run's weights in a new run: resume_from_run_id='{run_id[:8]}'; or replace it: drop "
        "resume='auto' and pass overwrite_existing=True"
    )


def unreadable(recorded: Mapping[str, Any] | None, current: Mapping[str, Any]) -> list[str]:
    """The roles whose code could not be compared (its source unreadable then or now)."""
    if recorded is None:
        return []
    return sorted(
        r for r in set(recorded) & set(current) if r != SETTINGS
        if not (recorded[r].get("sha256") and current[r].get("sha256") and _comparable(r, recorded[r], current[r], True))
    )


def _yours(fn: Any) -> bool:
    module = getattr(fn, "__module__", None) or ""
    return module.split(".")[0] not in OWN and module != "torch" and not module.startswith("torch.")


def _name(fn: Any) -> str:
    return f"{getattr(fn, '__qualname__', type(fn).__name__)}"


def _digest(fn: Any) -> str | None:
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return None
    return hashlib.sha256(ast.dump(tree, annotate_fields=False).encode()).hexdigest()[:16]
