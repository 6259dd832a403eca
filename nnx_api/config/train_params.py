"""The training params: ``NNTrainParams`` (how ``NNModel.train`` trains: epochs, one optimizer
and its schedule, seed, metrics and monitor, loaders, resume, mid-epoch commits and preemption) and
``NNTrainerParams`` (a ``Trainer``'s named optimizers and their schedules), both built on what they
share (``_Training``).

Loaders, extra metrics, the resume settings, ``commit_every`` and ``preempt_signals`` are
runtime-only: never part of the run id (they change when and why LAST is written, never what is
trained). The params conventions (state, ``OMIT``, checks at construction) are those of
``nnx_api.config.params``; the optimizer and schedule params they hold live in
``nnx_api.config.optim_params``.
"""

from __future__ import annotations

import dataclasses
import inspect
import numbers
import os
import signal
import warnings
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import PurePath
from typing import Any

from nnx_core.convert import OMIT, RUNTIME
from nnx_core.errors import InvalidRunIdError, ParamsError
from nnx_core.identity import validate_tag
from nnx_core.monitor_spec import BUILTIN_MODES, MonitorSpec
from nnx_adapters.pytorch.metrics import REGISTRY as METRIC_REGISTRY
from nnx_api.config.base import (
    TORCH_NAMES,
    FrozenDict,
    Params,
    count,
    flag,
    instance,
    items,
    one_of,
    optional,
    param,
    params_class,
    text,
)
from nnx_api.config.builders import NNTrainerParamsBuilder
from nnx_api.config.metrics import MetricSpec, undeclared_monitor
from nnx_api.config.optim_params import AnyOptimParams, NNOptimFactoryParams, NNOptimParams, NNSchedulerParams

RESUME_MODES = ("auto", "stateful", "weights_only", "reshard")  # reshard: a DDP run on another world size
RESUME_EPOCHS = ("additional", "planned")  # n_epochs more, or up to the source run's own plan (NNx's resume_epochs)


def _loader(path: str, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ParamsError(path, f"must be a re-iterable of batches, got {type(value).__name__}")
    arrays = isinstance(value, tuple) and 2 <= len(value) <= 3 and all(hasattr(v, "shape") and len(v.shape) for v in value)
    if arrays and len({v.shape[0] for v in value}) == 1:  # Keras's fit(x, y): whole arrays, not batches
        names = ", ".join("XYW"[:len(value)])
        raise ParamsError(path, (
            f"is a tuple of {len(value)} whole arrays ({', '.join(type(v).__name__ for v in value)} of "
            f"{value[0].shape[0]} rows), not batches; wrap it: DataLoader(TensorDataset({names}), batch_size=32) "
            "(from torch.utils.data)"))
    _no_batch(path, value)
    # only an iterator (it has __next__) can be one-shot: iter() on a DataLoader would start an epoch and draw
    # its base seed from the global torch stream (or its generator), moving the first epoch's shuffle
    if hasattr(value, "__next__") and iter(value) is value:
        raise ParamsError(
            path, "is a one-shot iterator; pass something that can be iterated every epoch (a DataLoader or a list)"
        )
    return value


def _no_batch(path: str, loader: Any) -> None:
    """Refuse a DataLoader that can yield no batch: an empty dataset, or ``drop_last=True`` with a
    ``batch_size`` larger than the dataset (the one partial batch is dropped)."""
    dataset, size = getattr(loader, "dataset", None), getattr(loader, "batch_size", None)
    if not isinstance(getattr(loader, "drop_last", None), bool):
        return
    try:
        rows = len(dataset)  # type: ignore[arg-type]
    except TypeError:  # an IterableDataset
        return
    if rows == 0:
        raise ParamsError(path, "yields no batch: its dataset is empty (0 rows); check how the dataset was built")
    if loader.drop_last and isinstance(size, int) and size > rows:
        raise ParamsError(path, (
            f"yields no batch: drop_last=True drops the only, partial batch (batch_size={size} > {rows} rows in the "
            f"dataset), so every epoch yielded no batches; set drop_last=False or batch_size at most {rows}"))


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (a run or a loader prints pages)."""
    text_ = repr(value)
    return text_ if len(text_) <= limit else f"{text_[:limit - 3]}..."


def _handle(path: str, value: Any, want: str) -> None:
    """Refuse NNx's own handles where an id or tag string is expected, with the attribute to pass."""
    run, tag = getattr(value, "run", None), getattr(value, "tag", None)
    if isinstance(tag, str) and isinstance(getattr(run, "id", None), str):  # a checkpoint handle
        fix = (f"resume_from_checkpoint=checkpoint.tag ({tag!r})" if want == "tag" else
               f"resume_from_run_id=checkpoint.run.id ({run.id!r}) and resume_from_checkpoint=checkpoint.tag ({tag!r})")
        raise ParamsError(path, f"takes {'a tag name' if want == 'tag' else 'a run id'} (a string), got the checkpoint "
                                f"handle {type(value).__name__} {tag!r} of run {run.id[:8]}; pass the tag: {fix}")
    rid = getattr(value, "id", None)
    if isinstance(rid, str) and hasattr(value, "config"):  # a run handle
        fix = f"resume_from_run_id=run.id ({rid!r})" if want == "id" else "a tag such as 'last' or 'best'"
        raise ParamsError(path, f"takes a string, got the run handle {type(value).__name__} of run {rid[:8]}; pass {fix}")


def _run_id(path: str, value: Any) -> str | None:
    """``resume_from_run_id``: a run id; a run or checkpoint handle, or a run's folder, is refused
    with the id to pass."""
    if value is None:
        return None
    _handle(path, value, "id")
    folder = PurePath(os.fspath(value)) if isinstance(value, (str, os.PathLike)) else None
    if folder is not None and len(folder.parts) > 1 and ".." not in folder.parts:  # "../x" is an unsafe id, said later
        raise ParamsError(path, (
            f"takes a run id, not a path ({_short(str(value))}); if that is run {folder.name[:8]}'s folder, pass "
            f"resume_from_run_id={folder.name!r} (and root={_short(str(folder.parent), 60)!r}, the folder that "
            "holds the runs, if it is not this call's root)"))
    if not isinstance(value, str):
        raise ParamsError(path, f"must be a run id (a string, run.id), got {type(value).__name__} {_short(value)}")
    return text()(path, value)


def _checkpoint_tag(path: str, value: Any) -> str:
    """``resume_from_checkpoint``: a tag name; a checkpoint handle is refused with its ``.tag``."""
    _handle(path, value, "tag")
    if not isinstance(value, str):
        raise ParamsError(path, f"must be a tag name such as 'last' or 'best', got {type(value).__name__} {_short(value)}")
    return text()(path, value)


def check_extra_metrics(path: str, value: Any) -> Mapping[str, Callable[[Any, Any], float]] | None:
    """``extra_metrics`` as a read-only ``{name: fn(y_true, y_pred) -> float}`` (None stays None)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ParamsError(path, f"must be a mapping {{name: fn(y_true, y_pred) -> float}}, got {type(value).__name__}")
    for name, fn in value.items():
        text()(f"{path} key", name)
        if isinstance(fn, (MetricSpec, MonitorSpec)):
            right = (f"metrics=(MetricSpec({fn.id!r}),)" if isinstance(fn, MetricSpec) else f"monitor={fn}")
            raise ParamsError(f"{path}[{name!r}]", (
                f"is a {type(fn).__name__}, which goes in {right}, not in extra_metrics (which maps a name to a "
                "function fn(y_true, y_pred) -> float)"))
        if name in BUILTIN_MODES:  # warned, not refused: the two stay apart (record.accuracy, record.extra['accuracy'])
            warnings.warn(
                f"{path}[{name!r}] has a built-in value's name ({', '.join(BUILTIN_MODES)}): a classification run's "
                f"records hold both the built-in {name} and extra[{name!r}], easily read for each other (a monitor or "
                f"a table naming {name!r} reads the built-in); give the extra metric another name, e.g. 'my_{name}'",
                UserWarning, stacklevel=2,
            )
        if not callable(fn):
            raise ParamsError(f"{path}[{name!r}]", f"must be a function fn(y_true, y_pred) -> float, got {fn!r}")
    return FrozenDict(value)


_EVERY_FIX = ("write commit_every=500 (committed updates) or commit_every=timedelta(minutes=10) (wall-clock time), "
              "or leave it None (the default) to commit at epoch ends only")


def check_commit_every(path: str, value: Any) -> int | timedelta | None:
    """``commit_every``: None, a positive number of committed optimizer updates (an ``int``; bools
    refused, NumPy integers become ``int``) or a positive ``datetime.timedelta``."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        if value <= timedelta(0):
            raise ParamsError(path, f"must be a positive timedelta, got {value!r}; {_EVERY_FIX}")
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if value < 1:
            raise ParamsError(path, f"must be at least 1 committed optimizer update, got {int(value)}; {_EVERY_FIX}")
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        raise ParamsError(path, f"must be an int or a timedelta, got str {value!r}; write commit_every={int(value)}")
    if isinstance(value, float):
        raise ParamsError(path, f"got float {value!r}: neither a count of updates (an int) nor a duration (a timedelta); "
                                f"write commit_every={max(1, int(value))} (updates) or "
                                f"commit_every=timedelta(seconds={value!r}) (wall-clock time)")
    raise ParamsError(path, f"must be an int (committed updates) or a datetime.timedelta (wall-clock time), "
                            f"got {type(value).__name__} {value!r}; {_EVERY_FIX}")


_SLURM = "SLURM: add signal.SIGUSR1 and #SBATCH --signal=B:USR1@120"
_REFUSED_SIGNALS: dict[str, str] = {
    "SIGKILL": "cannot be caught: the kernel ends the process without telling it, so nothing can be committed; "
               f"have the scheduler send SIGTERM (or SIGUSR1) before it kills ({_SLURM})",
    "SIGSTOP": "cannot be caught: the kernel pauses the process without telling it; "
               f"have the scheduler send SIGTERM (or SIGUSR1) instead ({_SLURM})",
    "SIGINT": "is Ctrl-C, which keeps its meaning: training is interrupted (KeyboardInterrupt) and nothing new is "
              "committed; list SIGTERM or SIGUSR1 to preempt",
    **{name: "is raised by a fault in the process itself (a crash), not a request to stop: training cannot go on to "
             "a commit point after it; list SIGTERM or SIGUSR1" for name in ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL")},
    "SIGCHLD": "is sent whenever a child process (a DataLoader worker) ends, not a request to stop; list SIGTERM or SIGUSR1",
}


def _signal_hint(value: Any) -> str:
    name = value.strip().upper() if isinstance(value, str) else ""
    name = name if name.startswith("SIG") else f"SIG{name}"
    if name in signal.Signals.__members__:
        return f"write signal.{name} (import signal)"
    return "write a signal.Signals member such as signal.SIGTERM or signal.SIGUSR1 (import signal)"


def _one_signal(path: str, value: Any) -> signal.Signals:
    if isinstance(value, signal.Signals):
        sig = value
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        try:
            sig = signal.Signals(int(value))
        except ValueError:
            raise ParamsError(path, f"{int(value)} is not a signal number on this system; "
                                    f"{_signal_hint(None)}") from None
    else:
        raise ParamsError(path, f"must be a signal, got {type(value).__name__} {value!r}; {_signal_hint(value)}")
    if sig.name in _REFUSED_SIGNALS:
        raise ParamsError(path, f"{sig.name} {_REFUSED_SIGNALS[sig.name]}")
    return sig


def check_preempt_signals(path: str, value: Any) -> tuple[signal.Signals, ...]:
    """``preempt_signals`` as a tuple of ``signal.Signals`` (numbers become members, repeats are
    dropped, the order kept); ``()`` turns preemption off. Signals that cannot be caught (SIGKILL,
    SIGSTOP), Ctrl-C (SIGINT), fault signals and SIGCHLD are refused, each saying why."""
    if not isinstance(value, (tuple, list)):
        single = isinstance(value, signal.Signals) or (isinstance(value, numbers.Integral) and not isinstance(value, bool))
        fix = f"write preempt_signals=(signal.{_one_signal(path, value).name},)" if single else (
            "write e.g. preempt_signals=(signal.SIGTERM, signal.SIGUSR1), or () to turn preemption off")
        raise ParamsError(path, f"must be a tuple of signals, got {type(value).__name__} {value!r}; {fix}")
    return tuple(dict.fromkeys(_one_signal(f"{path}[{i}]", item) for i, item in enumerate(value)))


def _monitor_hint(value: Any) -> str:
    split, _, metric = str(value).rpartition(".")
    if split in ("val", "train"):  # the "val.loss" spelling of EarlyStopping(monitor=...)
        return f"monitor=MonitorSpec({metric!r}, split={split!r})"
    return f"monitor=MonitorSpec({value!r})"


_METRIC_ITEMS = items(instance(MetricSpec, lambda v: f"metrics=(MetricSpec({v!r}),) — one MetricSpec per metric"))


def _unique_metrics(path: str, value: Any) -> tuple[MetricSpec, ...]:
    """MetricSpecs whose labels (``name`` or ``id``) are unique: records key their values by label."""
    specs = _METRIC_ITEMS(path, value)
    labels = [spec.label for spec in specs]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise ParamsError(path, f"metric names must be unique; {twice[0]!r} is declared twice (give one of them "
                                "name=...)")
    return specs
_MONITOR = optional(instance(MonitorSpec, _monitor_hint))


def _optim_hint(value: Any) -> str:
    return f"NNOptimParams(name={value!r}, max_lr=...)" if isinstance(value, str) else "NNOptimParams(...)"


def _optim(path: str, value: Any) -> AnyOptimParams:
    """An ``NNOptimParams`` or ``NNOptimFactoryParams``; a saved state is read back as the one its
    keys name (a ``factory`` entry marks a registered optimizer)."""
    if isinstance(value, (NNOptimParams, NNOptimFactoryParams)):
        return value
    if isinstance(value, Mapping):
        return (NNOptimFactoryParams if "factory" in value else NNOptimParams).from_state(value)
    raise ParamsError(
        path, f"expects NNOptimParams or NNOptimFactoryParams, got {type(value).__name__} {value!r}; write {_optim_hint(value)}"
    )


def _scheduler_hint(value: Any) -> str:
    return f"NNSchedulerParams(kind={value!r}, ...)" if isinstance(value, str) else "NNSchedulerParams(...)"


@params_class
class _Training(Params):
    """What ``NNTrainParams`` and ``NNTrainerParams`` share: epochs, seed, data id, metrics,
    monitor, lineage, and the runtime-only loaders, extra metrics, resume settings, mid-epoch
    commits (``commit_every``) and preemption signals (``preempt_signals``)."""

    n_epochs: int = param(check=count(1, rule="n_epochs >= 1"))
    seed: int | None = param(None, check=optional(count(0)), state=OMIT)
    data_id: str | None = param(None, check=optional(text()), state=OMIT)
    save_phase_checkpoints: bool = param(True, check=flag(), state=OMIT)
    metrics: tuple[MetricSpec, ...] = param((), check=_unique_metrics, state=OMIT)
    monitor: MonitorSpec | None = param(None, check=_MONITOR, state=OMIT)
    parent_run_id: str | None = param(None, check=optional(text()), state=OMIT)
    parent_checkpoint: str | None = param(None, check=optional(text()), state=OMIT)
    # runtime-only below: never part of the run id
    train_loader: Any = param(None, check=_loader, state=RUNTIME, compare=False)
    val_loader: Any = param(None, check=_loader, state=RUNTIME, compare=False)
    extra_metrics: Mapping[str, Callable[[Any, Any], float]] | None = param(
        None, check=check_extra_metrics, state=RUNTIME, compare=False
    )
    resume_from_run_id: str | None = param(None, check=_run_id, state=RUNTIME)
    resume_from_checkpoint: str = param("last", check=_checkpoint_tag, state=RUNTIME)
    resume_mode: str = param("auto", check=one_of(*RESUME_MODES), state=RUNTIME)
    resume: str | None = param(None, check=optional(one_of("auto")), state=RUNTIME)
    overwrite_existing: bool = param(False, check=flag(), state=RUNTIME)
    progress: bool | None = param(None, check=optional(flag()), state=RUNTIME)
    commit_every: int | timedelta | None = param(None, check=check_commit_every, state=RUNTIME)
    preempt_signals: tuple[signal.Signals, ...] = param((signal.SIGTERM,), check=check_preempt_signals, state=RUNTIME)
    async_commits: bool = param(True, check=flag(), state=RUNTIME)

    def _check(self) -> None:
        if self.resume_from_run_id is not None and self.parent_run_id is None:
            # lineage is part of the configuration, so a resumed run always gets a new id
            object.__setattr__(self, "parent_run_id", self.resume_from_run_id)
            object.__setattr__(self, "parent_checkpoint", self.resume_from_checkpoint)
        owner = type(self).__name__
        clash = sorted(set(self.extra_metrics or ()) & {s.label for s in self.metrics})
        if clash:
            raise ParamsError(f"{owner}.extra_metrics", (
                f"{clash[0]!r} is already a declared metric (metrics=): each record would hold two {clash[0]!r} values, "
                "read for each other; give the extra metric another name, or drop one of the two"))
        if self.monitor is not None:  # a name no run computes is refused here, before any loader is read
            problem = undeclared_monitor(self.monitor, self.metrics, self.extra_metrics, {k for k, _ in METRIC_REGISTRY})
            if problem:
                raise ParamsError(f"{owner}.monitor", problem)
            self.monitor.check_names(self.metrics, f"{owner}.monitor")
        if self.resume is not None and self.resume_from_run_id is not None:
            raise ParamsError(
                f"{type(self).__name__}.resume", "give either resume='auto' or resume_from_run_id, not both"
            )

    def with_train_loader(self, loader: Any) -> Any:
        """A copy with ``train_loader`` set."""
        return dataclasses.replace(self, train_loader=loader)

    def with_val_loader(self, loader: Any) -> Any:
        """A copy with ``val_loader`` set."""
        return dataclasses.replace(self, val_loader=loader)


@params_class
class NNTrainParams(_Training):
    """How to train: epochs, optimizer, scheduler, seed, metrics/monitor, loaders and resume.

    ``train_loader`` / ``val_loader`` are any re-iterable of ``(inputs, targets)`` batches and,
    like ``extra_metrics`` (``{name: fn(y_true, y_pred) -> float}``), are not part of the run id.
    ``resume_from_run_id`` starts a new run (its lineage is in the id) from a checkpoint of
    another; ``resume="auto"`` continues this configuration's own newest commit.

    Mid-epoch commits and preemption. Neither changes the run id nor what is trained: they decide
    when LAST (the resume point) is written, not what the run computes.

    ``commit_every`` — how often LAST is also committed *inside* an epoch:

    - ``None`` (default): at epoch ends only. A crash or a kill loses the epoch in progress.
    - an ``int`` N ≥ 1: after every N committed optimizer updates (an update is one closed
      gradient-accumulation window that stepped the optimizer; a skipped window does not count).
    - a ``datetime.timedelta`` > 0: at the first update once that much wall-clock time has passed
      since the last commit (``timedelta(minutes=10)``).

    What it buys: a crash or kill loses at most that much work (twice that with asynchronous
    commits, when the commit in flight is lost too) and a preemption none, instead of up to a
    whole epoch, and ``resume="auto"`` continues from inside the epoch with the same batches, in
    the same order, that the uninterrupted run would have drawn. What it costs: every commit
    waits for the device (one host sync) and writes the weights, optimizer state and RNG streams,
    so on a small model a commit every few updates can take longer than the training itself; choose
    a count or a time that keeps the writes a small share of the run (minutes, not seconds). A
    commit is made only between update windows (never inside gradient accumulation), and only
    with a ``train_loader`` NNx can position inside an epoch (a ``DataLoader`` over an indexed
    dataset); another loader still commits at epoch ends only.

    ``preempt_signals`` — the signals that mean "the cluster is taking this job back; stop
    cleanly" (default ``(signal.SIGTERM,)``; ``()`` turns preemption off and leaves every signal
    handler as it is). While ``train()`` runs, such a signal only sets a flag; at the next update
    boundary NNx commits LAST (as ``commit_every`` would) and raises ``TrainingPreempted``, which
    names the epoch and the update committed (with a loader NNx cannot position nothing new is
    committed, and it says so). Run the same command with ``resume="auto"`` to continue from
    there. A second signal changes nothing; a scheduler that escalates to SIGKILL after its grace
    period still ends the process, and what was committed stays. Give
    ``signal.Signals`` members or their numbers. Refused: SIGKILL and SIGSTOP (they cannot be
    caught), SIGINT (Ctrl-C keeps its meaning: interrupted, nothing new committed), the fault
    signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL) and SIGCHLD. SLURM sends SIGTERM only at the
    time limit, with little grace; ask it for a warning first and list it too::

        #SBATCH --signal=B:USR1@120        # SIGUSR1 to the batch shell 120 s before the limit
        NNTrainParams(..., preempt_signals=(signal.SIGTERM, signal.SIGUSR1), commit_every=timedelta(minutes=15))

    (``B:`` signals the batch shell: start training with ``exec python train.py`` so Python is the
    process that receives it.) Handlers are installed only around ``train()`` on the main thread
    of a single-process run; off the main thread, or in a ``DDP()`` run, preemption is off.

    ``async_commits`` — whether commits are written in the background (default ``True``). At a
    commit point training stops only while the state is copied (a snapshot of the weights,
    optimizer, schedules, RNG streams and components, into host buffers reused from commit to
    commit); the writing, hashing and fsyncs happen while training goes on, in the same order as
    ever, and LAST is published only once everything it names is durable. At most one commit is in
    flight: a commit point that comes before the previous commit is durable waits for it. A failed
    background write (a full disk, an I/O error) stops training at the next update boundary with
    the error a synchronous commit raises, the previous LAST intact. ``train()`` returns only when
    the last commit is durable; an exception, a preemption or Ctrl-C waits for the commit in flight
    (Ctrl-C again is raised once it is durable; killing the process abandons it, resumable).
    ``False`` writes each commit before training goes on (no staging copy: less memory). The run
    folder, its id and every reader are the same either way.
    """

    optim: AnyOptimParams = param(factory=NNOptimParams, check=_optim)
    scheduler: NNSchedulerParams = param(factory=NNSchedulerParams, check=instance(NNSchedulerParams, _scheduler_hint))
    # with resume_from_run_id: "additional" trains n_epochs more; "planned" continues the source run's plan up to
    # its n_epochs in all (nnx_api.training.resume.check_plan); in the run id only when "planned"
    resume_epochs: str = param("additional", check=one_of(*RESUME_EPOCHS), state=OMIT)

    def _check(self) -> None:
        self.scheduler.check_read_by_kind("NNTrainParams.scheduler")  # the run uses the params' own kind
        _Training._check(self)


LOOP_NAMES = {  # the data and length arguments of Lightning's fit() / Keras's fit() → NNTrainParams' field
    **TORCH_NAMES, "train_dataloaders": "train_loader", "train_dataloader": "train_loader", "dataloaders": "train_loader",
    "val_dataloaders": "val_loader", "val_dataloader": "val_loader", "validation_data": "val_loader",
}


def refuse_train_keywords(owner: str, params_type: type, method: Any, given: Mapping[str, Any]) -> None:
    """``train(**given)``'s keywords that ``train()`` does not take: a field of the params (or
    Lightning's / Keras's name for one) is refused with where it goes; anything else with the
    arguments ``train()`` takes (a ``ParamsError``, a ``TypeError``)."""
    if not given:
        return
    name = next(iter(given))
    fields = [f.name for f in dataclasses.fields(params_type) if f.init]
    field = name if name in fields else LOOP_NAMES.get(name)
    kind = params_type.__name__
    if field in fields:
        alias = "" if field == name else f" ({name} is {field} in NNx)"
        raise ParamsError(f"{owner}({name}=...)", (
            f"train() takes no {name}{alias}: {field} is a field of {kind}; put {field}= in {kind}(...): "
            f"{'model' if owner.startswith('NNModel') else 'trainer'}.train({kind}("
            f"{'n_epochs=...' if field == 'n_epochs' else f'n_epochs=..., {field}=...'}))"))
    takes = [p for p in inspect.signature(method).parameters if p not in ("self", "misplaced")]
    raise ParamsError(f"{owner}({name}=...)", f"train() has no argument {name!r}; it takes {', '.join(takes)}")


def _optimizer_name(path: str, name: Any) -> str:
    try:
        return validate_tag(name)
    except InvalidRunIdError as exc:
        raise ParamsError(path, f"optimizer name {name!r} must be a slug (letters, digits, '.', '_', '-')") from exc


def _named(what: str, check: Callable[[str, Any], Any]) -> Any:
    """A read-only ``{slug name: value}`` sorted by name, each value ``check``ed (``what`` names it)."""

    def run(path: str, value: Any) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise ParamsError(path, f"must be a mapping name → {what}, got {type(value).__name__}")
        named = {_optimizer_name(path, name): check(f"{path}[{name!r}]", v) for name, v in value.items()}
        return FrozenDict(sorted(named.items()))

    return run


def _no_schedulers() -> Mapping[str, NNSchedulerParams]:
    return FrozenDict()


@params_class
class NNTrainerParams(_Training):
    """How a ``Trainer`` trains: epochs, named optimizers and their schedulers, seed, metrics,
    monitor, loaders and resume. ``schedulers`` keys must be optimizer names; an optimizer without
    one gets the default (reduce-on-plateau) schedule. ``auto_step_schedulers=False`` leaves every
    schedule to the step function. Loaders, extra metrics, resume settings, ``commit_every``,
    ``preempt_signals`` and ``async_commits`` (see ``NNTrainParams``) are not part of the run id."""

    optims: Mapping[str, AnyOptimParams] = param(check=_named("NNOptimParams", _optim))
    schedulers: Mapping[str, NNSchedulerParams] = param(
        factory=_no_schedulers, check=_named("NNSchedulerParams", instance(NNSchedulerParams, _scheduler_hint)), state=OMIT
    )
    auto_step_schedulers: bool = param(True, check=flag(), state=OMIT)

    def _check(self) -> None:
        if not self.optims:
            raise ParamsError("NNTrainerParams.optims", (
                "needs at least one named optimizer (optims must have at least one entry), e.g. "
                "optims={'main': NNOptimParams(max_lr=1e-3)}"))
        unknown = sorted(set(self.schedulers) - set(self.optims))
        if unknown:
            raise ParamsError(
                "NNTrainerParams.schedulers",
                f"{unknown} name no optimizer (keys not present in optims: {sorted(self.optims)}); name the schedule "
                "after the optimizer it drives",
            )
        for name, sched in self.schedulers.items():  # each runs as its own kind
            sched.check_read_by_kind(f"NNTrainerParams.schedulers[{name!r}]")
        _Training._check(self)

    @classmethod
    def builder(cls) -> NNTrainerParamsBuilder:
        """A fluent builder: ``NNTrainerParams.builder().n_epochs(5).optimizer("main", optim).build()``."""
        return NNTrainerParamsBuilder(cls)

    @property
    def primary(self) -> str:
        """The sorted-first optimizer name: its LR is the records' ``lr`` and ``ctx.optimizer``."""
        return next(iter(self.optims))

    def scheduler_for(self, name: str) -> NNSchedulerParams:
        """The schedule of optimizer ``name`` (the default plateau schedule when none is given)."""
        return self.schedulers.get(name) or NNSchedulerParams()

    def representative(self) -> NNTrainParams:
        """The primary optimizer's view as ``NNTrainParams`` (the run's ``train`` section)."""
        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(_Training)}
        primary = self.primary
        return NNTrainParams(**shared, optim=self.optims[primary], scheduler=self.scheduler_for(primary))
