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

NNx's own code (``nnx_api``, ``nnx_core``, ``nnx_adapters``: the built-in nets, steps and
objectives) is left out: a new version of the library is not a change of your experiment.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import textwrap
from collections.abc import Mapping
from typing import Any

from nnx_core.errors import CodeChangedError

OWN = ("nnx_api", "nnx_core", "nnx_adapters")


def code_fingerprint(entry: Any) -> dict[str, dict[str, Any]]:
    """``{role: {"name", "sha256"}}`` of the user code ``entry`` trains with (``sha256`` None:
    the source cannot be read)."""
    found: dict[str, Any] = {
        entry.kind.step_name: entry.step_fn, "eval_step_fn": entry.eval_step_fn,
        "objective": type(entry.objective).__call__ if entry.objective is not None else None,
        "module.forward": type(entry.model.net).forward,
    }
    return {role: {"name": _name(fn), "sha256": _digest(fn)} for role, fn in found.items() if fn is not None and _yours(fn)}


def code_refusal(run_id: str, recorded: Mapping[str, Any] | None, current: Mapping[str, Any]) -> CodeChangedError | None:
    """Why this call's code does not fit the code ``run_id`` recorded (None: it fits, or the run
    predates the record, or only unreadable code differs — ``unreadable`` says which)."""
    if recorded is None:
        return None
    changes = []
    for role in sorted(set(recorded) | set(current)):
        before, now = recorded.get(role), current.get(role)
        if before is None or now is None:
            changes.append(f"{role} {'is given now, not then' if before is None else 'was given then, not now'}")
        elif before.get("sha256") and now.get("sha256") and before != now:
            renamed = f" (was {before.get('name')})" if before.get("name") != now.get("name") else ""
            changes.append(f"{role} {now.get('name')}{renamed} changed")
    if not changes:
        return None
    return CodeChangedError(
        f"run {run_id[:8]} was trained with other code ({'; '.join(changes)}), so resume='auto' will not continue or "
        "return it. Put the code back; or keep the old run and start this code as a distinct run with salt='...'; or "
        f"continue from the old run's weights in a new run: resume_from_run_id='{run_id[:8]}'; or replace it: drop "
        "resume='auto' and pass overwrite_existing=True"
    )


def unreadable(recorded: Mapping[str, Any] | None, current: Mapping[str, Any]) -> list[str]:
    """The roles whose code could not be compared (its source unreadable then or now)."""
    if recorded is None:
        return []
    return sorted(r for r in set(recorded) & set(current) if not (recorded[r].get("sha256") and current[r].get("sha256")))


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
