"""The pieces an ``ExperimentPlan`` is built from and checked with: ``Diagnostic``,
``PlanError``, ``PlanValidation``, ``PlanData``, ``Resume``, the ``KEEP`` / ``INHERIT`` markers,
what makes a value a source of batches or a factory, the single-process refusal and the scope
that keeps a probe from changing global state. ``nnx_api.experiments.plans`` re-exports them."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import torch

from nnx_core.errors import NNxError, ParamsError
from nnx_core.identity import validate_run_id, validate_tag
from nnx_api.callbacks import Callback
from nnx_api.config.train_params import RESUME_EPOCHS, RESUME_MODES, NNTrainParams


@attrs.frozen
class Diagnostic:
    """One problem of a plan: the field path (``train.monitor``, ``data.train``) and why."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class PlanError(NNxError, ValueError, TypeError):
    """A plan that cannot be fitted; ``diagnostics`` lists every problem with its field path. It is
    a ``ValueError`` and a ``TypeError``, the two errors the params classes raise."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = tuple(diagnostics)
        super().__init__("the plan is not valid:\n  - " + "\n  - ".join(str(d) for d in self.diagnostics))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.diagnostics,))


class PlanValidation(tuple[Diagnostic, ...]):
    """What ``validate()`` found: the diagnostics in field order (a tuple of them), with ``ok``,
    ``paths`` and ``raise_for_errors()``."""

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        """Every problem found."""
        return tuple(self)

    @property
    def ok(self) -> bool:
        """True when the plan can be fitted."""
        return not self

    @property
    def paths(self) -> tuple[str, ...]:
        """The field path of each problem."""
        return tuple(d.path for d in self)

    def raise_for_errors(self) -> None:
        """Raise :class:`PlanError` listing every diagnostic, if there is any."""
        if self:
            raise PlanError(self)


class _Marker:
    """A named marker (``KEEP``: leave the field as it is; ``INHERIT``: the training params' own)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> str:
        return self.name  # copies and pickles are the marker itself


KEEP: Any = _Marker("KEEP")
INHERIT: Any = _Marker("INHERIT")


class SingleProcessError(NNxError, RuntimeError):
    """A single-process entry point (a plan's ``fit``, a search) called inside a ``torch.distributed``
    process group of several ranks, where every rank would run its own copy."""


def refuse_multi_rank(entry: str) -> None:
    """Raise :class:`SingleProcessError` inside an initialized process group of more than one rank."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        raise SingleProcessError(
            f"{entry} trains in a single process, but this process belongs to a torch.distributed process group of "
            f"world size {dist.get_world_size()} (torchrun?), where every rank would run its own copy; run it outside "
            "torchrun, or train one model on every rank with model.train(..., distributed=nnx.distributed.DDP())"
        )


def _binds(value: Any, n_args: int) -> bool:
    """Whether ``value`` can be called with ``n_args`` positional arguments (True when unknown)."""
    try:
        inspect.signature(value).bind(*range(n_args))
    except TypeError:
        return False
    except ValueError:  # no signature (a builtin)
        return True
    return True


def _is_factory(value: Any) -> bool:
    """A zero-argument factory, as opposed to a loader (which is iterable)."""
    return callable(value) and not hasattr(value, "__iter__") and not hasattr(value, "__getitem__")


def _materialize(value: Any) -> Any:
    return value() if _is_factory(value) else value


def _source_problem(value: Any, made: bool = False) -> str | None:
    """Why ``value`` is not a re-iterable source of ``(inputs, targets)`` batches (None when it is)."""
    what = type(value).__name__
    if isinstance(value, torch.Tensor) or type(value).__name__ == "ndarray":
        return f"is a {what} of single rows, not batches: wrap it in a DataLoader(TensorDataset(x, y), batch_size=...)"
    if isinstance(value, torch.utils.data.Dataset) and not isinstance(value, torch.utils.data.IterableDataset):
        return f"is a {what} of samples, not batches: wrap it in a DataLoader({what}, batch_size=...)"
    if isinstance(value, Mapping):
        return f"is a {what}, which iterates its keys, not batches: give a loader of (inputs, targets) batches"
    if isinstance(value, (str, bytes)) or not (hasattr(value, "__iter__") or hasattr(value, "__getitem__")):
        factory = "" if made else " or a zero-argument factory"
        return f"must be a re-iterable loader{factory}, got {what}"
    if hasattr(value, "__next__") and iter(value) is value:  # iter() on a DataLoader would draw a seed
        return "is a one-shot iterator (a generator): give a loader (re-iterable) or a factory returning one"
    return None


@attrs.frozen(kw_only=True)
class PlanData:
    """Training and validation data: each a re-iterable loader of ``(inputs, targets)`` batches, or
    a zero-argument factory returning one (called once per fit). ``train=None``: the training
    params' ``train_loader``; ``val`` left out (``INHERIT``): their ``val_loader``; ``val=None``:
    no validation. ``ExperimentPlan(data=PlanData(...))`` sets the plan's ``train_data`` and
    ``val_data``."""

    train: Any = None
    val: Any = INHERIT

    def sources(self, params: NNTrainParams | None = None) -> tuple[Any, Any]:
        """``(train, val)`` before any factory is called (``params``: where inherited ones come from)."""
        train = self.train if self.train is not None else getattr(params, "train_loader", None)
        return train, getattr(params, "val_loader", None) if self.val is INHERIT else self.val

    def loaders(self, params: NNTrainParams | None = None) -> tuple[Any, Any]:
        """``(train_loader, val_loader)``, calling factories."""
        train, val = self.sources(params)
        return _materialize(train), _materialize(val)


@attrs.frozen(kw_only=True)
class Resume:
    """``resuming(...)``: warm-start every fit from run ``run_id``'s ``checkpoint``."""

    run_id: str
    checkpoint: str = "last"
    mode: str | None = None
    epochs: str | None = None


def _frozen(value: Any) -> Any:
    """A collection given to the constructor as a tuple, read once (a generator too); anything
    else is kept for ``validate()`` to name."""
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping, Callback)):
        return tuple(value)
    return () if value is None else value



def resume_problems(resume: Resume | None) -> Iterator[tuple[str, str]]:
    """What is wrong with a plan's resume point, by field path."""
    if resume is None:
        return
    for path, check, value in (("resume.run_id", validate_run_id, resume.run_id),
                               ("resume.checkpoint", validate_tag, resume.checkpoint)):
        try:
            check(value)
        except (NNxError, TypeError) as exc:
            yield path, str(exc)
    checkpoint = resume.checkpoint
    if isinstance(checkpoint, str) and checkpoint != checkpoint.lower() and checkpoint.lower() in ("last", "best"):
        yield "resume.checkpoint", f"tags are lower case: checkpoint={checkpoint.lower()!r} (or Checkpoints.{checkpoint.upper()})"
    if not _is_choice(resume.mode, RESUME_MODES + (None,)):
        yield "resume.mode", f"resume_mode must be one of {', '.join(map(repr, RESUME_MODES))} or None, got {resume.mode!r}"
    if not _is_choice(resume.epochs, (None, *RESUME_EPOCHS)):
        yield "resume.epochs", f"resume_epochs must be one of 'additional', 'planned' or None, got {resume.epochs!r}"


def horizon_problems(resume: Resume | None, train: NNTrainParams) -> Iterator[tuple[str, str]]:
    """``resume_epochs='planned'`` (the plan's or the training params'): it continues a run's
    plan, so it needs a run to resume and its training state (not ``weights_only``)."""
    epochs = resume.epochs if resume is not None and resume.epochs is not None else train.resume_epochs
    if not (isinstance(epochs, str) and epochs == "planned"):
        return
    if resume is None and train.resume_from_run_id is None:
        yield "train.resume_epochs", "'planned' continues the plan of the run it resumes, and this plan resumes none: " \
            "add .resuming(run_id) or use resume_epochs='additional'"
        return
    mode = resume.mode if resume is not None and resume.mode is not None else train.resume_mode
    if isinstance(mode, str) and mode == "weights_only":
        path = "resume.epochs" if resume is not None and resume.epochs is not None else (
            "resume.mode" if resume is not None and resume.mode is not None else "train.resume_epochs")
        yield path, "resume_epochs='planned' continues the source's plan from its training state, which " \
            "resume_mode='weights_only' drops: use resume_mode='stateful' or 'auto', or resume_epochs='additional'"


HELD_FIELDS = ("optim", "scheduler", "extra_metrics")
"""The training params' fields whose refused change a plan holds, as a diagnostic, until
``validate()`` reports it with every other problem (as NNx's plans do); a refused change to any
other field (the epoch count, metrics, monitor, resume settings) is a :class:`PlanError` at once."""


def edit_train(
    current: NNTrainParams, changes: Mapping[str, Any], held: tuple[Diagnostic, ...]
) -> tuple[NNTrainParams, tuple[Diagnostic, ...]]:
    """``current`` with ``changes``, and the diagnostics the plan holds after the edit: an accepted
    change drops what was held for its field; a refused change to a :data:`HELD_FIELDS` field is
    held (``current`` keeps that field), any other refused change raises :class:`PlanError`
    naming ``train.<field>``."""
    changes = dict(changes)
    held = tuple(d for d in held if d.path.removeprefix("train.") not in changes)
    while True:
        try:
            return current.replace(**changes), held
        except (ValueError, TypeError) as exc:
            where = str(getattr(exc, "path", "") or "")
            named = where.split(".", 1)[1].split("[")[0] if where.startswith("NNTrainParams.") else None
            if named in changes:
                path = f"train.{named}"
            else:
                path = f"train.{next(iter(changes))}" if len(changes) == 1 and not named else "train"
            if named not in changes or named not in HELD_FIELDS:
                raise PlanError([Diagnostic(path, str(exc))]) from exc
            held = (*held, Diagnostic(path, getattr(exc, "detail", None) or str(exc)))
            del changes[named]


def _items(value: Any) -> tuple[Any, ...]:
    """A collection field's items (none when it is not a tuple: ``validate()`` names that)."""
    return value if isinstance(value, tuple) else ()


def _is_choice(value: Any, choices: Sequence[Any]) -> bool:
    return (value is None or isinstance(value, str)) and value in choices


def _changed(value: Any, changes: Mapping[str, Any], path: str) -> Any:
    if not changes:
        return value
    if value is None or not dataclasses.is_dataclass(value):
        raise ParamsError(path, "there is nothing to change; give a whole value")
    return dataclasses.replace(value, **changes)


def _live_cuda() -> bool:
    """Whether CUDA has been started in this process (an idle context is never read nor seeded)."""
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def _seed_live_streams(seed: int) -> None:
    """Seed Python, NumPy, torch's CPU generator and, when already started, CUDA: the streams
    :func:`_preserved_global_state` restores (a queued CUDA seed would outlive the probe)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.default_generator.manual_seed(seed)
    if _live_cuda():
        torch.cuda.manual_seed_all(seed)


@contextlib.contextmanager
def _preserved_global_state() -> Iterator[None]:
    """Python, NumPy, torch CPU and (when started) CUDA streams, the cuDNN and determinism flags
    and ``os.environ``, put back on leaving, whatever happened inside."""
    streams = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    cuda = torch.cuda.get_rng_state_all() if _live_cuda() else None
    cudnn = (torch.backends.cudnn.enabled, torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    env = dict(os.environ)
    try:
        yield
    finally:
        torch.backends.cudnn.enabled, torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = cudnn
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        for key in set(os.environ) - set(env):
            del os.environ[key]
        os.environ.update({k: v for k, v in env.items() if os.environ.get(k) != v})
        random.setstate(streams[0])
        np.random.set_state(streams[1])
        torch.set_rng_state(streams[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


__all__ = [
    "HELD_FIELDS", "INHERIT", "KEEP", "Diagnostic", "PlanData", "PlanError", "PlanValidation", "Resume", "SingleProcessError",
    "edit_train", "horizon_problems", "refuse_multi_rank", "resume_problems",
]
