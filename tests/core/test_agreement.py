"""The agreement rules (nnx_core.agreement) over the threaded Collective: N simulated ranks in one
process. Every rule must give every rank the same answer, and a failure on one rank must become
the same error on every rank."""

from __future__ import annotations

import pytest

from nnx_core import agreement
from nnx_core.agreement import AgreedError, CallbackDeclaration
from nnx_core.errors import (
    ComponentRestoreError,
    CorruptRunError,
    NonFiniteLossError,
    ParamsError,
    ResumeMismatchError,
    TrainingInputError,
)
from nnx_core.ports import Collective
from nnx_adapters.collective.local import LocalCollective
from nnx_adapters.collective.threads import ThreadHub, run_ranks


def outcomes(results):
    """(type name, message) of every rank's result or error."""
    return [(type(r).__name__, str(r)) if isinstance(r, BaseException) else ("ok", r) for r in results]


def test_the_threaded_collective_is_a_collective_port():
    hub = ThreadHub(2)
    assert isinstance(hub.collective(0), Collective)
    results = run_ranks(3, lambda c: (c.all_reduce_sum([c.rank, 1.0]), c.all_gather(c.rank * 10), c.broadcast(c.rank, 2)))
    assert results == [([3.0, 3.0], [0, 10, 20], 2)] * 3


def test_agree_gives_every_rank_the_first_failing_ranks_reason():
    results = run_ranks(3, lambda c: agreement.agree(c, c.rank == 0, f"rank {c.rank} disagrees"))
    assert results == [(False, "rank 1 disagrees")] * 3
    assert run_ranks(2, lambda c: agreement.agree(c, True)) == [(True, "")] * 2


def test_a_known_nnx_error_on_one_rank_is_raised_with_its_type_and_message_on_every_rank():
    def body(c):
        error = CorruptRunError("blob abc does not match its SHA-256") if c.rank == 1 else None
        agreement.raise_if_failed(c, error, "resume")

    results = run_ranks(2, body)
    assert outcomes(results) == [("CorruptRunError", "blob abc does not match its SHA-256")] * 2
    assert results[1].__cause__ is not None and results[0].__cause__ is None  # the failing rank chains its own


def test_gathered_gives_every_rank_every_result_or_every_rank_the_first_failure():
    assert run_ranks(3, lambda c: agreement.gathered(c, "setup", lambda: c.rank * 10)) == [[0, 10, 20]] * 3

    def body(c):
        def fn():
            if c.rank >= 1:
                raise CorruptRunError(f"rank {c.rank}'s root is unreadable")
            return c.rank
        return agreement.gathered(c, "setup", fn)

    results = run_ranks(3, body)
    assert outcomes(results) == [("CorruptRunError", "rank 1's root is unreadable")] * 3  # the first failing rank's
    with pytest.raises(CorruptRunError):  # a group of one raises its own error as it is
        agreement.gathered(LocalCollective(), "setup", lambda: (_ for _ in ()).throw(CorruptRunError("x")))
    assert agreement.gathered(LocalCollective(), "setup", lambda: 7) == [7]


def test_typed_fields_travel_with_the_error():
    def body(c):
        agreement.raise_if_failed(c, ParamsError("train.optim.max_lr", "must be > 0") if c.rank == 0 else None, "setup")

    results = run_ranks(2, body)
    assert all(isinstance(r, ParamsError) and r.path == "train.optim.max_lr" for r in results)
    assert str(results[0]) == str(results[1]) == "train.optim.max_lr: must be > 0"


def test_any_other_error_becomes_the_same_agreed_error_naming_the_rank():
    def body(c):
        agreement.raise_if_failed(c, OSError(28, "no space left") if c.is_writer else None, "commit of epoch 3")

    results = run_ranks(2, body)
    assert all(isinstance(r, AgreedError) for r in results)
    assert str(results[0]) == str(results[1]) == "commit of epoch 3 failed on rank 0: OSError: [Errno 28] no space left"


def test_the_lowest_failing_rank_wins():
    results = run_ranks(3, lambda c: agreement.raise_if_failed(c, ValueError(f"r{c.rank}") if c.rank else None, "x"))
    assert outcomes(results) == [("AgreedError", "x failed on rank 1: ValueError: r1")] * 3


def test_agreed_sum_reduces_and_carries_the_failure_flag_in_one_call():
    def body(c):
        out = agreement.agreed_sum(c, [c.rank, 2.0], None, "records")
        return out, c.traffic.calls

    assert run_ranks(2, body) == [([1.0, 4.0], {"all_reduce": 1})] * 2


def test_a_microbatch_count_is_summed_and_its_finiteness_agreed_before_backward():
    def body(c):
        return agreement.agree_microbatch(c, 3.0 + c.rank, True, None, "batch 0")

    assert run_ranks(2, body) == [7.0] * 2

    def nonfinite(c):
        return agreement.agree_microbatch(c, 1.0, c.rank != 2, None, "batch 0")

    results = run_ranks(3, nonfinite)
    assert all(isinstance(r, NonFiniteLossError) for r in results)
    assert len({str(r) for r in results}) == 1 and "1 of 3 ranks" in str(results[0])


def test_a_failed_forward_on_one_rank_wins_over_a_nonfinite_loss():
    def body(c):
        error = TrainingInputError("targets must be long") if c.rank == 1 else None
        return agreement.agree_microbatch(c, 1.0, False, error, "batch 0")

    assert outcomes(run_ranks(2, body)) == [("TrainingInputError", "targets must be long")] * 2


def test_the_window_verdict_is_w_or_the_agreed_failure_or_the_nonfinite_count():
    """The fused agreement: the summed [failed, non-finite, count] decide after backward."""
    def healthy(c):
        return agreement.agree_window(c, [0.0, 0.0, 9.0], "epoch 0 batch 3")

    assert run_ranks(2, healthy) == [9.0, 9.0]
    assert run_ranks(2, lambda c: agreement.agree_window(c, [0.0, 0.0, 0.0], "b")) == [0.0, 0.0]  # masked: skipped

    def nonfinite(c):
        return agreement.agree_window(c, [0.0, 2.0, 9.0], "b")

    results = run_ranks(3, nonfinite)
    assert all(isinstance(r, NonFiniteLossError) and "2 of 3 ranks" in str(r) for r in results)


def test_a_rank_that_failed_early_in_a_window_is_named_where_it_failed_on_every_rank():
    """Rank 1 failed at batch 2 and sent its zero buckets; rank 0 learns of it at the window's end
    (batch 3) and raises the same error, naming batch 2."""
    own = KeyError("no such input")

    def body(c):
        if c.rank == 1:
            agreement.fail_window(c, own, "epoch 0 batch 2")
        return agreement.agree_window(c, list(agreement.FAILED_WINDOW), "epoch 0 batch 3")

    results = run_ranks(2, body)
    assert [str(r) for r in results] == ["epoch 0 batch 2 failed on rank 1: KeyError: 'no such input'"] * 2
    assert results[1].__cause__ is own and results[0].__cause__ is None


def test_agree_same_refuses_unequal_step_counts_on_every_rank():
    results = run_ranks(3, lambda c: agreement.agree_same(c, 5 if c.rank != 1 else 4, "the number of train batches"))
    assert all(isinstance(r, TrainingInputError) for r in results)
    assert len({str(r) for r in results}) == 1 and "rank 1: 4" in str(results[0])
    assert run_ranks(2, lambda c: agreement.agree_same(c, 7, "steps")) == [None, None]


@pytest.mark.parametrize("counts", [(3, 4), (10**6, 10**6 + 1), (0, 1), (2_000_000, 2_000_000, 1_999_999)])
def test_agree_same_refuses_counts_that_differ_by_one_step_at_any_size(counts):
    """One step more on one rank is a mismatch whatever the epoch's length (a tolerance relative to
    the counts' size would wave 10⁶ against 10⁶ + 1 through)."""
    results = run_ranks(len(counts), lambda c: agreement.agree_same(c, counts[c.rank], "the number of train batches"))
    assert all(isinstance(r, TrainingInputError) for r in results)


@pytest.mark.parametrize("count", [0, 1, 10**6, 3 * 10**7, 10**9])
def test_agree_same_accepts_equal_counts_of_any_size(count):
    assert run_ranks(3, lambda c: agreement.agree_same(c, count, "steps")) == [None, None, None]


def test_a_missing_rank_makes_the_barrier_raise_instead_of_blocking():
    def body(c):
        if c.rank == 1:
            return "absent"
        c.barrier(timeout=0.2)

    results = run_ranks(2, body, timeout=1.0)
    assert isinstance(results[0], RuntimeError) and results[1] == "absent"


# ------------------------------------------------------------------------------- pure rules
PARTS = [{"rows": 10, "world_size": 2, "rank": r, "steps": 3} for r in range(2)]


def test_resume_refusals():
    assert agreement.resume_refusal(None, stateful=False, world_size=2, partitions=PARTS) is None  # weights only
    assert "one process" in agreement.resume_refusal(None, stateful=True, world_size=2, partitions=PARTS)
    saved = {"world_size": 2, "partitions": PARTS}
    assert agreement.resume_refusal(saved, stateful=True, world_size=2, partitions=PARTS) is None
    assert "written by 2 ranks, this run has 3" in agreement.resume_refusal(saved, stateful=True, world_size=3, partitions=PARTS)
    other = [dict(p, steps=4) for p in PARTS]
    assert "partition" in agreement.resume_refusal(saved, stateful=True, world_size=2, partitions=other)
    with pytest.raises(ResumeMismatchError, match="weights_only"):
        agreement.refuse_resume(agreement.resume_refusal(saved, stateful=True, world_size=1, partitions=PARTS[:1]))


def test_partition_problems():
    assert agreement.partition_problems(PARTS) == []
    assert agreement.partition_problems([PARTS[0], dict(PARTS[1], steps=2)])
    assert agreement.partition_problems([PARTS[0], PARTS[0]])  # two ranks built for rank 0


def test_callback_rules():
    ok = [CallbackDeclaration("EarlyStopping", "all", stateful=True), CallbackDeclaration("ModelCheckpoint", "writer")]
    assert agreement.callback_problems(ok) == []
    bad = [
        CallbackDeclaration("Mine", None),
        CallbackDeclaration("TensorBoardCallback", "writer", borrowed_tracker=True),
        CallbackDeclaration("Counter", "writer", stateful=True),
    ]
    problems = agreement.callback_problems(bad)
    assert len(problems) == 3 and "no rank behaviour" in problems[0] and "writer_only" in problems[1]
    assert agreement.runs_here("all", False) and not agreement.runs_here("writer", False)


# ------------------------------------------------------------------------------- partitions and resume
def deal(rank, world=2, **kw):
    return {"rank": rank, "world_size": world, "rows": 45, "seed": 11, "policy": "pad", **kw}


def test_partitions_must_be_one_deal_of_the_same_data():
    assert agreement.partition_problems([deal(0), deal(1)]) == []
    assert agreement.partition_problems([{}, {}]) == []  # nothing declared: nothing to disagree on
    assert agreement.partition_problems([deal(0), deal(0)]) == ["rank 1's train loader was built for rank 0"]
    assert agreement.partition_problems([deal(0, world=3), deal(1, world=3)]) == [
        "rank 0's train loader was built for 3 ranks, not 2", "rank 1's train loader was built for 3 ranks, not 2"]
    problems = agreement.partition_problems([deal(0), deal(1), deal(2, world=2, seed=12)])
    assert problems[-1].startswith("rank 2's partition") and "seed': 12" in problems[-1] and "seed': 11" in problems[-1]
    assert not any(p.startswith("rank 1's partition") for p in problems)  # rank 1 agrees with rank 0


def test_a_stateful_resume_needs_the_same_world_and_partition():
    parts = [deal(0), deal(1)]
    saved = {"world_size": 2, "partitions": parts}
    assert agreement.resume_refusal(saved, stateful=True, world_size=2, partitions=parts) is None
    assert agreement.resume_refusal(None, stateful=False, world_size=2, partitions=parts) is None  # weights only
    hint = "; use resume_mode='weights_only' to start fresh from its weights"
    single = agreement.resume_refusal(None, stateful=True, world_size=2, partitions=parts)
    assert single.startswith("the checkpoint was written by one process") and "(2)" in single and single.endswith(hint)
    assert agreement.resume_refusal(saved, stateful=True, world_size=3, partitions=parts) == (
        "the checkpoint was written by 2 ranks, this run has 3; resume_mode='reshard' continues it on this world size "
        "when its train_loader fixed global_batch_size" + hint)
    assert agreement.resume_refusal({}, stateful=True, world_size=1, partitions=[deal(0, world=1)]).startswith(
        "the checkpoint was written by 0 ranks")  # a section without a world size is nobody's
    other = agreement.resume_refusal(saved, stateful=True, world_size=2, partitions=[deal(0, seed=5), deal(1, seed=5)])
    assert other.startswith("the checkpoint's partition") and other.endswith(hint)
    assert agreement.resume_refusal({"world_size": 2}, stateful=True, world_size=2, partitions=parts).startswith(
        "the checkpoint's partition [] differs")
    with pytest.raises(ResumeMismatchError, match="2 ranks"):
        agreement.refuse_resume(agreement.resume_refusal(saved, stateful=True, world_size=3, partitions=parts))
    agreement.refuse_resume(None)


def test_every_rank_raises_the_lowest_failing_ranks_error_and_only_that_rank_chains_its_own():
    """Two ranks fail: every rank raises rank 0's error; rank 0 chains its original as ``__cause__``,
    rank 1 (whose own failure was not the one agreed) does not."""
    originals = {0: KeyError("rank 0's bad key"), 1: LookupError("rank 1's other failure")}

    def body(c):
        agreement.raise_if_failed(c, originals[c.rank], "epoch 3")

    results = run_ranks(2, body)
    assert all(isinstance(r, AgreedError) for r in results)
    assert {str(r) for r in results} == {"epoch 3 failed on rank 0: KeyError: \"rank 0's bad key\""}
    assert all((r.where, r.failure.rank, r.failure.error_type) == ("epoch 3", 0, "KeyError") for r in results)
    assert results[0].__cause__ is originals[0] and results[1].__cause__ is None


def test_a_typed_errors_problems_travel_to_every_rank():
    problems = ["nnx.monitor: another metric", "nnx.scheduler_clock: missing"]

    def body(c):
        agreement.raise_if_failed(c, ComponentRestoreError(problems) if c.rank == 1 else None, "restore")

    results = run_ranks(2, body)
    assert all(type(r) is ComponentRestoreError and r.problems == problems for r in results)
    assert str(results[0]) == str(results[1])


def test_no_failure_among_the_gathered_is_none():
    assert agreement.first_failure([None, None, None]) is None
    assert agreement.first_failure([]) is None


def test_a_group_of_one_sums_nothing_and_raises_its_own_failure():
    assert run_ranks(1, lambda c: agreement.agreed_sum(c, [2.5, 3.0], None, "batch 0")) == [[2.5, 3.0]]
    own = TrainingInputError("targets must be long")
    assert run_ranks(1, lambda c: agreement.agreed_sum(c, [1.0], own, "batch 0")) == [own]


# -- the exact words of what every rank is told ----------------------------------------------------


def test_a_failure_agreed_without_a_reason_gives_an_empty_reason():
    assert run_ranks(2, lambda c: agreement.agree(c, c.rank != 1)) == [(False, "")] * 2


def test_a_microbatch_failure_is_agreed_where_it_happened():
    def body(c):
        error = KeyError("no such input") if c.rank == 1 else None
        return agreement.agree_microbatch(c, 1.0, True, error, "epoch 2, batch 5")

    results = run_ranks(2, body)
    assert all(isinstance(r, AgreedError) and r.where == "epoch 2, batch 5" for r in results)
    assert str(results[0]) == "epoch 2, batch 5 failed on rank 1: KeyError: 'no such input'"


@pytest.mark.parametrize("where", [None, "the end of epoch 3"])
def test_agree_same_agrees_a_ranks_failure_where_it_happened_or_under_what_was_counted(where):
    def body(c):
        error = KeyError("lost a batch") if c.rank == 1 else None
        return agreement.agree_same(c, 5, "the number of train batches", error, where=where)

    results = run_ranks(2, body)
    expected = where or "the number of train batches"
    assert all(isinstance(r, AgreedError) and r.where == expected for r in results)
    assert str(results[0]) == f"{expected} failed on rank 1: KeyError: 'lost a batch'"


def test_agree_same_names_every_ranks_value():
    results = run_ranks(2, lambda c: agreement.agree_same(c, 3 + c.rank, "steps"))
    assert [str(r) for r in results] == [
        "steps differs between ranks (rank 0: 3, rank 1: 4); every rank must take the same number of steps"] * 2


def test_a_partition_that_differs_is_shown_against_rank_0s():
    problems = agreement.partition_problems([deal(0), deal(1, seed=12), deal(2, seed=13)])
    rank0 = {k: v for k, v in deal(0).items() if k != "rank"}
    assert problems[-1] == f"rank 2's partition {dict(rank0, seed=13)} differs from rank 0's {rank0}"


def test_the_callback_refusals_say_what_to_do():
    assert agreement.callback_problems([CallbackDeclaration("Mine", None)]) == [(
        "Mine declares no rank behaviour; set its class attribute distributed = 'all' (runs on every rank, "
        "must not write) or 'writer' (writer rank only)")]
    assert agreement.callback_problems([CallbackDeclaration("Counter", "writer", stateful=True)]) == [(
        "Counter runs on the writer only but carries checkpointed component state; make it distributed = 'all' "
        "so every rank keeps the same state")]
