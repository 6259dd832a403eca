"""Agreement rules: how the ranks of one data-parallel run reach the same decision.

This module owns seed §3's promise that every rank takes the same branch. A branch taken by one
rank only hangs the others in their next collective, so every point where a rank could branch on
its own (a failure, a non-finite loss, a masked window, a refused resume) goes through one of the
rules below, over the ``Collective`` port only:

    a group of one            nothing to agree: an error is raised as it is (``LocalCollective``)
    agreed(where, fn)         run ``fn`` on every rank; any rank's failure is raised on every rank
    gathered(where, fn)       the same, and every rank gets every rank's result (one all-gather)
    share(where, fn)          the writer runs ``fn``; every rank gets its answer or its error
    agree(ok, reason)         phase 1: Σ failures, one number, every time;
                              phase 2, only when some rank failed: gather the failures, and the
                              first failing rank's error is raised on every rank (same type,
                              same message)
    agreed_sum(values, err)   a reduction that carries its own failure flag: the records' sufficient
                              statistics and "did this step fail here?" travel in one all-reduce
    agree_microbatch(...)     per microbatch, before backward: [valid count, non-finite, failed]
                              in one all-reduce: the finiteness and failure flags are agreed
                              before any rank enters DDP's backward (the first windows of a fit)
    WINDOW_SLOTS / agree_window
                              the fused form, once DDP's gradient buckets are known: the
                              window's [failed, non-finite, count] ride in its gradient
                              buckets' all-reduce; a rank that failed sends zeros of the same
                              buckets (fail_window), and the verdict comes after backward, before
                              any parameter changes: the first failure, or NonFiniteLossError,
                              on every rank; else W (0 skips the update on every rank)
    agree_same(value, what)   Σv and Σv² in one all-reduce: equal on every rank iff
                              world·Σv² == (Σv)² (e.g. the epoch's number of steps)
    writer_for(holdings)      where the run continues: every rank reports what its own runs root
                              holds (LAST's epoch and digest); the newest committed state wins,
                              and its holder writes (the configured writer when it holds it)
    resume_refusal(...)       which checkpoints a run of this world size and partition may
                              restore statefully (the writer decides, then broadcasts)
    callback_problems(...)    where each callback runs; undeclared, borrowed and stateful writer
                              callbacks are refused before training

Anything not routed through these rules that fails on one rank only ends through the process
group's timeout. No framework imports: numbers and plain objects in, decisions out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from nnx_core import errors
from nnx_core.errors import DivergedCopiesError, NNxError, NonFiniteLossError, ResumeMismatchError, TrainingInputError
from nnx_core.ports import Collective

_EPS = 2.0**-52  # float64's machine epsilon

RANK_BEHAVIOURS = ("all", "writer")
T = TypeVar("T")

# NNx errors rebuilt with the same type and message on every rank (their constructors differ,
# so they are rebuilt from the message: str(error) is identical on every rank).
KNOWN_ERRORS: dict[str, type[BaseException]] = {
    name: cls
    for name, cls in vars(errors).items()
    if isinstance(cls, type) and issubclass(cls, NNxError)
}


class AgreedError(NNxError, RuntimeError):
    """A step failed on one rank and the ranks agreed to stop: raised on every rank with the same
    message (the failing rank chains its original error as ``__cause__``)."""

    def __init__(self, where: str, failure: Failure) -> None:
        self.where = where
        self.failure = failure
        super().__init__(f"{where} failed on rank {failure.rank}: {failure.error_type}: {failure.message}")


@attrs.frozen
class Failure:
    """One rank's error as plain data (what travels between ranks)."""

    rank: int
    error_type: str
    message: str
    details: Mapping[str, Any] = attrs.field(factory=dict)
    where: str | None = None  # where the failing rank was, when the others learn of it later


def failure_of(error: BaseException, rank: int) -> Failure:
    """Describe ``error`` for the other ranks (typed NNx fields such as ``path`` travel too)."""
    details: dict[str, Any] = {}
    for field in ("path", "problems"):
        if hasattr(error, field):
            details[field] = getattr(error, field)
    return Failure(rank=rank, error_type=type(error).__name__, message=str(error), details=details)


def rebuild(failure: Failure, where: str) -> BaseException:
    """The error every rank raises for ``failure``: the same NNx type and message when it is one of
    NNx's typed errors, else an :class:`AgreedError` naming the failing rank."""
    cls = KNOWN_ERRORS.get(failure.error_type)
    if cls is None:
        return AgreedError(failure.where or where, failure)
    error = cls.__new__(cls)
    Exception.__init__(error, failure.message)
    for key, value in failure.details.items():
        setattr(error, key, value)
    return error


def first_failure(failures: Sequence[Failure | None]) -> Failure | None:
    """The failure of the lowest failing rank (gathered lists are in rank order)."""
    return next((f for f in failures if f is not None), None)


def raise_failure(failure: Failure | None, where: str, own: BaseException | None = None) -> None:
    """Raise the agreed error for ``failure`` (nothing when None); ``own``: this rank's original."""
    if failure is None:
        return
    raise rebuild(failure, where) from own


def _phase_two(collective: Collective, own: BaseException | None, where: str) -> None:
    """Some rank failed: gather every rank's failure and raise the first one everywhere (named
    where its rank was: the others may learn of it later, at the window's end)."""
    mine = None if own is None else attrs.evolve(failure_of(own, collective.rank), where=where)
    failure = first_failure(collective.all_gather(mine))
    if failure is None:  # pragma: no cover - the flag said otherwise
        raise AgreedError(where, Failure(rank=-1, error_type="RuntimeError", message="a rank reported a failure"))
    raise_failure(failure, where, own if failure.rank == collective.rank else None)


def gathered(collective: Collective, where: str, fn: Callable[[], T]) -> list[T]:
    """Run ``fn`` on every rank and give every rank every rank's result (one all-gather, the
    failures travelling with the results); when it fails on any rank, every rank raises the
    first failing rank's error. A group of one: ``[fn()]``."""
    own: BaseException | None = None
    try:
        mine: T | None = fn()
    except Exception as exc:  # a rank that failed still takes part in the gather
        mine, own = None, exc
    if collective.world_size == 1:
        if own is not None:
            raise own
        return [mine]  # type: ignore[list-item]
    pairs = collective.all_gather((mine, None if own is None else failure_of(own, collective.rank)))
    failure = first_failure([p[1] for p in pairs])
    raise_failure(failure, where, own if failure is not None and failure.rank == collective.rank else None)
    return [p[0] for p in pairs]


def agreed(collective: Collective, where: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` on every rank; when it fails on any rank, every rank raises the same error."""
    try:
        result, error = fn(), None
    except Exception as exc:
        result, error = None, exc
    raise_if_failed(collective, error, where)
    return result  # type: ignore[return-value]


def share(collective: Collective, writer_rank: int, where: str, fn: Callable[[], T]) -> T:
    """The writer runs ``fn`` (it alone reads, verifies or writes); every rank gets its answer,
    or raises its error (the writer its own, the others the same type and message)."""
    value: Any = None
    error: BaseException | None = None
    if collective.rank == writer_rank:
        try:
            value = fn()
        except Exception as exc:
            error, value = exc, failure_of(exc, collective.rank)
    if collective.world_size == 1:
        if error is not None:
            raise error
        return value  # type: ignore[no-any-return]
    value = collective.broadcast(value, src=writer_rank)
    if isinstance(value, Failure):
        raise_failure(value, where, error)
    return value  # type: ignore[no-any-return]


def agree(collective: Collective, ok: bool, reason: str = "") -> tuple[bool, str]:
    """The port's ``agree``: (every rank ok, the first failing rank's reason) on every rank.

    One all-reduce of one number; the reasons are gathered only when some rank failed.
    """
    failed = collective.all_reduce_sum([0.0 if ok else 1.0])[0]
    if not failed:
        return True, ""
    reasons = collective.all_gather(None if ok else reason)
    return False, next(r for r in reasons if r is not None)


def raise_if_failed(collective: Collective, error: BaseException | None, where: str) -> None:
    """An action's outcome, agreed: when it failed on any rank, every rank raises the same error."""
    agreed_sum(collective, (), error, where)


def agreed_sum(
    collective: Collective, values: Sequence[float], error: BaseException | None, where: str
) -> list[float]:
    """Element-wise Σ of ``values`` over the ranks, plus agreement on ``error``, in one all-reduce.

    A rank that failed still contributes (zeros of the same length), so the collective matches.
    """
    if collective.world_size == 1:  # a group of one: nothing to agree
        if error is not None:
            raise error
        return [float(v) for v in values]
    reduced = collective.all_reduce_sum([1.0 if error is not None else 0.0, *values])
    if reduced[0]:
        _phase_two(collective, error, where)
    return reduced[1:]


NONFINITE_MESSAGE = (
    "non-finite training loss: the loss is not finite on {n} of {world} ranks; no parameter was updated. Lower the learning rate, "
    "check the inputs for NaN/inf, or set grad_clip_norm"
)


def agree_microbatch(
    collective: Collective, count: float, finite: bool, error: BaseException | None, where: str
) -> float:
    """Agree on one microbatch before backward (one all-reduce): a failure on any rank (forward,
    target check) raises the first failing rank's error on every rank; a non-finite loss on any
    rank raises ``NonFiniteLossError`` on every rank. Otherwise the group's valid count."""
    total, nonfinite = agreed_sum(collective, [count, 0.0 if finite or error else 1.0], error, where)
    _refuse_nonfinite(nonfinite, collective.world_size)
    return total


WINDOW_SLOTS = ("failed", "nonfinite", "count")
"""What each rank adds to its window's last gradient all-reduce (the fused agreement): whether it
failed, whether its window's loss is finite (0 or 1) and its valid count."""
FAILED_WINDOW = (1.0, 0.0, 0.0)  # what a rank that failed adds instead (with zero gradients)


def agree_window(collective: Collective, reduced: Sequence[float], where: str) -> float:
    """The fused agreement's verdict after backward, on a rank that did not fail: ``reduced`` is
    the sum of every rank's ``WINDOW_SLOTS`` (or ``FAILED_WINDOW``). A failure anywhere raises
    the first failing rank's error (phase two); a non-finite loss ``NonFiniteLossError``; else W."""
    failed, nonfinite, count = reduced
    if failed:
        _phase_two(collective, None, where)
    _refuse_nonfinite(nonfinite, collective.world_size)
    return count


def fail_window(collective: Collective, error: BaseException, where: str) -> None:
    """A rank that failed, once its zero buckets are sent: raise the agreed error (phase two)."""
    _phase_two(collective, error, where)


def _refuse_nonfinite(ranks: float, world: int) -> None:
    if ranks:
        raise NonFiniteLossError(NONFINITE_MESSAGE.format(n=int(ranks), world=world))


def agree_same(
    collective: Collective, value: float, what: str, error: BaseException | None = None, *, where: str | None = None
) -> None:
    """Refuse on every rank when ``value`` differs between ranks; ``error`` (this rank's failure
    since the last agreement point, ``where`` it happened) is agreed in the same call.

    Σv and Σv² in one all-reduce (with the failure flag): all equal iff world·Σv² == (Σv)².
    The values themselves are gathered only on a mismatch, for the message.
    """
    total, squares = agreed_sum(collective, [float(value), float(value) ** 2], error, where or what)
    world = collective.world_size
    # world·Σv² − (Σv)² = Σ_{i<j} (v_i − v_j)²: 0 when every count is equal, at least 1 when two
    # differ. float64 holds both sides exactly for counts below ~3·10⁷, so half a step decides;
    # above that, the relative term keeps rounding from refusing equal counts
    if math.isclose(world * squares, total * total, rel_tol=4 * _EPS, abs_tol=0.5):
        return
    values = collective.all_gather(value)
    shown = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
    raise TrainingInputError(f"{what} differs between ranks ({shown}); every rank must take the same number of steps")


# ------------------------------------------------------------------------------- partitions
def partition_problems(partitions: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every rank's partition must be the same deal of the same data (only its rank differs)."""
    problems = []
    for rank, part in enumerate(partitions):
        if part.get("rank", rank) != rank:
            problems.append(f"rank {rank}'s train loader was built for rank {part.get('rank')}")
        if part.get("world_size", len(partitions)) != len(partitions):
            problems.append(f"rank {rank}'s train loader was built for {part.get('world_size')} ranks, not {len(partitions)}")
    shared = [{k: v for k, v in p.items() if k != "rank"} for p in partitions]
    for rank, part in enumerate(shared[1:], start=1):
        if part != shared[0]:
            problems.append(f"rank {rank}'s partition {part} differs from rank 0's {shared[0]}")
    return problems


# ------------------------------------------------------------------------------- where the run lives
@attrs.frozen
class Holding:
    """What one rank's own runs root holds of the run: LAST's epoch and the SHA-256 of LAST's
    manifest bytes (both None: no committed epoch there), ``unreadable`` when LAST is there but
    cannot be read, and ``place`` (host and root) to name it. ``updates``: the run's committed
    updates LAST names, which orders two LASTs of one epoch (a commit inside it, its end)."""

    place: str
    epoch: int | None = None
    digest: str | None = None
    unreadable: bool = False
    updates: int = 0


def writer_for(holdings: Sequence[Holding], preferred: int) -> int:
    """The rank that writes this run: the newest committed state wins, wherever it lies.

    No rank holds LAST: ``preferred`` (a fresh run). Otherwise the holders of the newest commit,
    the latest epoch and in it the most committed updates (a root whose LAST cannot be read counts
    as newest: its writer refuses or replaces it as one process would, and nothing starts over
    beside it); ``preferred`` when it is one of them, else the lowest such rank. Roots holding
    *different* LASTs of that commit are refused (``DivergedCopiesError``) naming the places. Shared storage (one root seen by every rank)
    reports the same LAST everywhere, so the configured writer keeps writing.
    """
    if not any(h.unreadable or h.epoch is not None for h in holdings):
        return preferred
    unreadable = [r for r, h in enumerate(holdings) if h.unreadable]
    if unreadable:
        newest = unreadable
    else:
        top, most = max((h.epoch, h.updates) for h in holdings if h.epoch is not None)
        newest = [r for r, h in enumerate(holdings) if (h.epoch, h.updates) == (top, most)]
        copies: dict[str | None, list[int]] = {}
        for r in newest:
            copies.setdefault(holdings[r].digest, []).append(r)
        if len(copies) > 1:
            shown = "; ".join(
                f"{holdings[rs[0]].place} (rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))})" for rs in copies.values()
            )
            raise DivergedCopiesError(
                f"the ranks' runs roots hold different copies of this run at epoch {top}: {shown}; keep the copy to "
                "continue, move the other run folder away, and start again"
            )
    return preferred if preferred in newest else newest[0]


# ------------------------------------------------------------------------------- resume
WORLD_KEYS = ("rank", "world_size", "batch_size")  # a partition's entries that follow the world size


def resume_refusal(
    saved: Mapping[str, Any] | None, *, stateful: bool, world_size: int, partitions: Sequence[Mapping[str, Any]],
    reshard: bool = False,
) -> str | None:
    """Why a distributed run may not restore a checkpoint statefully (None: it may).

    ``saved`` is the checkpoint's ``distributed`` section (None: written by one process). A
    weights-only resume starts fresh from the weights at any world size. Another world size is
    restored only with ``reshard`` (``resume_mode="reshard"``), and only when both deals fixed the
    same global batch with a world-size-independent tail (``train_loader(global_batch_size=G)``):
    the partitions must then agree on everything but the world size's own entries.
    """
    if not stateful:
        return None
    hint = "; use resume_mode='weights_only' to start fresh from its weights"
    if saved is None:
        return (
            "the checkpoint was written by one process; a distributed stateful resume needs a checkpoint of "
            f"the same world size ({world_size}) and partition" + hint
        )
    saved_world = int(saved.get("world_size", 0))
    saved_parts = [dict(p) for p in saved.get("partitions", ())]
    if saved_world == world_size:
        if saved_parts != [dict(p) for p in partitions]:
            return f"the checkpoint's partition {saved_parts} differs from this run's {list(partitions)}" + hint
        return None
    moved = f"the checkpoint was written by {saved_world} ranks, this run has {world_size}"
    if not reshard:
        return moved + "; resume_mode='reshard' continues it on this world size when its train_loader fixed global_batch_size" + hint
    fixed = [p for p in [*saved_parts[:1], *partitions[:1]] if p.get("global_batch_size") and p.get("tail") == "global"]
    if len(fixed) < 2:
        return (
            moved + ", and resume_mode='reshard' needs a run whose batches do not depend on the world size: its "
            "train_loader must fix the rows per step for the whole group, nnx.distributed.train_loader(dataset, "
            "global_batch_size=G), and so must this one" + hint
        )
    before, now = ({k: v for k, v in p.items() if k not in WORLD_KEYS} for p in (saved_parts[0], partitions[0]))
    if before != now:
        return f"{moved}, and its deal {before} differs from this run's {now} beyond the world size" + hint
    return None


def refuse_resume(reason: str | None) -> None:
    """Raise the resume refusal (the writer raises it; the broadcast raises it everywhere)."""
    if reason is not None:
        raise ResumeMismatchError(reason)


# ------------------------------------------------------------------------------- callbacks
@attrs.frozen
class CallbackDeclaration:
    """What the rules need to know about one callback."""

    name: str
    distributed: str | None
    stateful: bool = False  # it carries checkpointed component state
    borrowed_tracker: bool = False  # a TensorBoard/W&B instance built by the caller (it writes when built)


def callback_problems(declarations: Sequence[CallbackDeclaration]) -> list[str]:
    """Why these callbacks cannot run in a distributed run (checked on every rank, before training)."""
    problems = []
    for d in declarations:
        if d.borrowed_tracker:
            problems.append(
                f"{d.name} was built by the caller on every rank (it writes when built); pass "
                f"nnx.distributed.writer_only(lambda: {d.name}(...)) so only the writer builds one"
            )
        elif d.distributed not in RANK_BEHAVIOURS:
            problems.append(
                f"{d.name} declares no rank behaviour; set its class attribute distributed = 'all' (runs on every "
                "rank, must not write) or 'writer' (writer rank only)"
            )
        elif d.distributed == "writer" and d.stateful:
            problems.append(
                f"{d.name} runs on the writer only but carries checkpointed component state; make it "
                "distributed = 'all' so every rank keeps the same state"
            )
    return problems


def runs_here(distributed: str, is_writer: bool) -> bool:
    """Whether a callback of this rank behaviour runs on this rank."""
    return distributed == "all" or is_writer


__all__ = [
    "AgreedError",
    "CallbackDeclaration",
    "Failure",
    "FAILED_WINDOW",
    "WINDOW_SLOTS",
    "agree",
    "agree_microbatch",
    "agree_window",
    "agreed",
    "agree_same",
    "agreed_sum",
    "callback_problems",
    "fail_window",
    "failure_of",
    "first_failure",
    "partition_problems",
    "raise_failure",
    "raise_if_failed",
    "rebuild",
    "refuse_resume",
    "resume_refusal",
    "runs_here",
    "share",
]
