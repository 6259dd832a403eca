"""Typed public errors. Each one says what went wrong and what to do next."""

from __future__ import annotations

import functools
from typing import Any


class NNxError(Exception):
    """Base class of every NNx error."""


class ParamsError(NNxError, ValueError, TypeError):
    """A parameter is out of its domain or of the wrong type. ``path`` names the field
    (``NNTrainParams.optim``). It is both a ``ValueError`` and a ``TypeError``, so code that
    catches either for a bad configuration keeps working."""

    def __init__(self, path: str, message: str) -> None:
        self.path, self.detail = path, message
        super().__init__(f"{path}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        # the default (cls, self.args) would call __init__ with the joined message alone
        return type(self), (self.path, self.detail), self.__dict__


class InvalidRunIdError(NNxError, ValueError):
    """A run id or tag that could leave the runs root (separators, ``..``, globs, NUL)."""


class RunExistsError(NNxError, FileExistsError):
    """A run with this configuration already exists."""


class RunNotFoundError(NNxError, FileNotFoundError, ValueError):
    """No run (or no committed checkpoint) with this id under the runs root. A
    ``FileNotFoundError`` (as loading a missing run is) and a ``ValueError`` (as a resume point that
    names a missing run or tag is)."""


class RunLeaseError(NNxError, RuntimeError):
    """Another process holds this run's lease (it is training or overwriting it), or a read-only
    runs root has no lease file to lock for it."""


class CorruptRunError(NNxError, ValueError):
    """Committed state on disk is unreadable, torn or inconsistent; nothing was erased."""


class StaleCheckpointError(NNxError, RuntimeError):
    """A read of a run's committed state met files the run keeps no more. A checkpoint read earlier
    names a payload that, after the tag was read, a later commit released (every tag that named it
    moved on: training went on) or the run's replacement removed; or a history streamed lazily
    (``iter_history``) lost its files to the run's replacement or removal. Nothing is corrupt;
    read it again (``NNRun.load(...).checkpoint(tag)``, ``iter_history(...)``)."""


class ResumeMismatchError(NNxError, ValueError):
    """A resume point does not fit the run being resumed (optimizer, topology, world size...)."""


class DivergedCopiesError(ResumeMismatchError):
    """Two runs roots of one data-parallel group hold different copies of one run at the same
    epoch; nothing was written. Keep the copy to continue and move the other away."""


class DataChangedError(ResumeMismatchError):
    """``resume="auto"`` found this configuration's run, but it was trained on other data (its
    recorded data fingerprint differs); pass ``data_id=`` for a distinct run."""


class CodeChangedError(ResumeMismatchError):
    """``resume="auto"`` met a run trained with other user code (a step function, an objective,
    a module's ``forward``): refused rather than continued or returned as if it were the same."""


class ResumePointError(CorruptRunError):
    """A resume point that cannot be trusted — torn, mixed or corrupted (a file whose SHA-256
    differs from its manifest's, a payload the safe loader refuses); raised before anything is
    restored, naming which file and why. Resume from another checkpoint tag."""


class ComponentRestoreError(ResumeMismatchError):
    """Saved and registered checkpointed components disagree; ``problems`` lists each one."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("cannot restore components:\n  - " + "\n  - ".join(self.problems))

    def __reduce__(self) -> tuple[Any, ...]:
        # the default (cls, self.args) would read the joined message as the list of problems
        return type(self), (self.problems,), self.__dict__


class TrainingPreempted(NNxError, RuntimeError):
    """``train()`` stopped at a commit point because a preemption signal arrived
    (``NNTrainParams.preempt_signals``, SIGTERM by default): the orderly end of a job the cluster
    is taking back. Not a ``KeyboardInterrupt`` (Ctrl-C keeps that meaning: interrupted, nothing new
    committed) but a ``RuntimeError``, so a script that lets it propagate exits non-zero and the
    scheduler sees the job did not finish.

    ``committed`` True: epoch ``epoch`` is committed up to run update ``update`` (LAST), and the
    same call with ``resume='auto'`` continues from exactly there. ``committed`` False: the
    train loader could not be positioned inside an epoch, so nothing new was committed; ``epoch``
    is then the last committed epoch (None: none yet), ``update`` None, and ``resume='auto'``
    continues from that epoch's end. ``signal_name`` is the signal obeyed (``"SIGTERM"``)."""

    def __init__(
        self, run_id: str, epoch: int | None, update: int | None, signal_name: str, *, committed: bool = True
    ) -> None:
        self.run_id, self.epoch, self.update, self.signal_name = run_id, epoch, update, signal_name
        self.committed = committed
        head = f"run {run_id[:8]} preempted by {signal_name}"
        if committed:
            message = (f"{head}: epoch {epoch} is committed up to update {update} (LAST); run the same command "
                       "with resume='auto' to continue from there")
        elif epoch is None:
            message = (f"{head}: the epoch in progress was not committed (its train_loader cannot be positioned "
                       "inside an epoch) and no epoch was committed before it; run the same command with "
                       "resume='auto' to start it again")
        else:
            message = (f"{head}: the epoch in progress was not committed (its train_loader cannot be positioned "
                       f"inside an epoch); run the same command with resume='auto' to continue from the last "
                       f"committed epoch, {epoch}")
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        # the default (cls, self.args) would call __init__ with the message alone: rebuild from the fields
        rebuild = functools.partial(type(self), committed=self.committed)
        return rebuild, (self.run_id, self.epoch, self.update, self.signal_name), self.__dict__


class TrainingInputError(NNxError, ValueError):
    """The data given to ``train`` / ``evaluate`` cannot be used (no loader, empty, bad target)."""


class PredictionInputError(TrainingInputError, RuntimeError):
    """Inputs ``predict`` / ``predict_proba`` / ``evaluate`` cannot take: a Python list, rows of
    another width than ``NNParams.input_dim``, another dtype than the parameters', an empty input
    to predict. A ``RuntimeError`` too, as NNx raises there (torch's own error), and a
    ``ValueError``, as REFERENCE documents."""


class InputWidthError(TrainingInputError, RuntimeError):
    """A batch whose feature width is not the built-in net's ``input_dim``, refused before training
    starts. A ``RuntimeError`` too, as the forward itself raises there (torch's ``mat1 and mat2
    shapes cannot be multiplied``), and a ``ValueError`` as every ``TrainingInputError``."""


class TaskValidationError(TrainingInputError):
    """A batch the model's task refuses (target shape, dtype, range or width), raised before
    backward, or a ``TaskSpec`` whose width differs from the net's ``output_dim``, raised when
    the ``NNModel`` is built; the message names what the task expected."""


class NonFiniteLossError(NNxError, FloatingPointError):
    """A loss was NaN or infinite; no parameter was changed by it."""


class HistoryCorruptionError(CorruptRunError):
    """A history journal's chunk, index or manifest does not verify."""


class MonitorUnavailableError(NNxError, ValueError, RuntimeError):
    """The monitored value was missing or non-finite and its policy is ``"error"``, or an epoch's
    records lack a declared or monitored value that no step put there. A
    ``ValueError`` as NNx raises it (and still a ``RuntimeError``, as it was here before)."""


class UpdateOwnerError(NNxError, ValueError):
    """A run must have exactly one update owner: a step function or an objective."""


class PrecisionUnsupportedError(NNxError, ValueError):
    """The requested precision is not available on this device and no fallback was allowed."""


class ScheduleBudgetError(NNxError, ValueError):
    """An update-clock schedule's horizon is too small for the run, or was exceeded."""


class ScheduleResumeError(ComponentRestoreError, ScheduleBudgetError):
    """A stateful resume whose planned updates would run an update-clock schedule past its
    budget: a ``ComponentRestoreError`` (the saved clock cannot go on) and a ``ScheduleBudgetError``."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        ValueError.__init__(self, "; ".join(self.problems))  # the budget's own words, as a fresh run's refusal


class OutOfScopeError(NNxError, NotImplementedError):
    """A feature NNx documents that this implementation leaves out of its scope (graph nets,
    transformers and language-model helpers, LoRA / quantisation / GGUF, NLI and Jev decision
    providers); the message names the scope and ``docs/nnx-compat.md`` lists them."""


class CompileError(NNxError, RuntimeError):
    """``train(compile=CompileSpec(...))`` could not compile the forward and its ``on_failure`` is
    ``"error"``; ``record`` is the run's ``CompileRecord`` (status ``"failed"``, the reason).
    Fix the backend or its options, or pass ``on_failure="eager"`` to fall back to the eager forward."""

    def __init__(self, message: str, record: object = None) -> None:
        self.record = record
        super().__init__(message)


class BatchTypeError(TrainingInputError, TypeError):
    """A batch (or an input given to ``predict``) of a type the net or its batch adapter cannot
    take: ``KeywordInputs`` given a non-mapping batch, an element that is no tensor or array. A
    ``TypeError`` as NNx raises it, and a ``TrainingInputError``."""


class BatchKeyError(TrainingInputError, KeyError):
    """A mapping batch lacks an input key its ``KeywordInputs`` names. A ``KeyError`` as NNx
    raises it, and a ``TrainingInputError``."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class NetOutputError(NNxError, TypeError):
    """The net returned something other than a tensor (a dict, a tuple...) where logits were
    expected; a batch adapter naming the prediction (``prediction=``) fixes it. A
    ``TypeError`` as NNx raises it."""


class ExtraMetricError(NNxError, ValueError):
    """An ``extra_metrics`` function raised when NNx called it as ``fn(y_true, y_pred)`` (NumPy
    arrays): on the first batch before anything is written, or on a whole pass. The message names
    the metric; the function's own error is the cause (``__cause__``). A ``ValueError`` as NNx
    raises it."""


class ContextAttributeError(NNxError, AttributeError):
    """An attribute a context (a callback's, a step function's or an objective's ``ctx``) does not
    have was read or set: the message names the nearest attribute, the context's attributes, and
    NNx's name for another framework's (``stop_training`` → ``should_stop``). An
    ``AttributeError``, so ``hasattr`` and ``getattr(ctx, name, default)`` keep working."""
