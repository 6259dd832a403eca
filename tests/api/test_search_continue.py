"""A search continued by the same call: stored studies, preempted trials resumed from LAST,
the per-trial seeded default sampler, and the refusals made before any trial.

The multi-process cases (SIGKILL, several workers, PostgreSQL) are in
``tests/integration/test_search_workers.py``; these run in one process."""

from __future__ import annotations

import os
import signal

import optuna
import pytest
import torch

import nnx_api as nnx
from nnx_api.experiments.plans import PlanError
from nnx_api.experiments.search import FloatParam, IntParam, SearchBudget, SearchSpace, search
from nnx_api.experiments.search_workers import StudyStorageError

from tests.api.test_plans_search import NLL, digits_plan

SPACE = SearchSpace(FloatParam("train.optim.max_lr", 1e-3, 5e-2, log=True))
MONITOR = nnx.MonitorSpec(metric="nll")


class Preempt(nnx.Callback):
    """SIGTERM this process after its ``after``-th update, over every trial, once: ``train()``
    commits at that update boundary and raises ``TrainingPreempted``, as under a scheduler."""

    seen = 0
    fired = False

    def __init__(self, after: int) -> None:
        self.after = after

    def on_train_begin(self, ctx: nnx.CallbackContext) -> None:
        ctx.update_listeners.append(self._after_update)

    def _after_update(self, ctx: nnx.CallbackContext) -> None:
        Preempt.seen += 1
        if Preempt.seen == self.after and not Preempt.fired:
            Preempt.fired = True
            os.kill(os.getpid(), signal.SIGTERM)


def run_search(root, trials, *, after=None, name="s1", storage=None):
    plan = digits_plan(root, epochs=3, metrics=(NLL,))
    if after is not None:
        plan = plan.with_callback_factories(lambda: Preempt(after))
    storage = storage or f"sqlite:///{root}.db"
    return search(plan, SPACE, budget=SearchBudget(trials=trials), monitor=MONITOR, study_name=name, storage=storage,
                  pruner=optuna.pruners.NopPruner())


def facts(result):
    """What each trial found (its run id is not here: each study names its attempts by its own id)."""
    return [(o.number, dict(o.params), o.state, o.value, o.best_epoch, o.epochs, o.updates, o.observations)
            for o in result.outcomes]


def weights(root, run_id, tag):
    return nnx.NNModel.from_checkpoint(run_id, tag, root=root).net.state_dict()


def test_a_preempted_trial_is_resumed_from_last_by_the_same_call(tmp_path):
    reference = run_search(tmp_path / "ref", 3)
    Preempt.seen, Preempt.fired = 0, False
    with pytest.raises(nnx.TrainingPreempted):
        run_search(tmp_path / "cut", 3, after=6 * 3 + 8)  # trial 1, inside its second epoch
    study = optuna.load_study(study_name="s1", storage=f"sqlite:///{tmp_path / 'cut'}.db")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "RUNNING"]  # left running, not failed
    assert "worker" in study.trials[1].user_attrs

    continued = run_search(tmp_path / "cut", 3, after=6 * 3 + 8)
    assert continued.resumed == (1,) and continued.asked == 1 and sorted(continued.trial_runs) == [1, 2]
    assert facts(continued) == facts(reference)
    assert sorted(p.name for p in (tmp_path / "cut").iterdir() if p.name != ".leases") == sorted(
        o.run_id for o in continued.outcomes)  # one run per trial: the preempted trial's was continued, not redone
    for ref, cut in zip(reference.outcomes, continued.outcomes, strict=True):  # bit-identical to uninterrupted runs
        for tag in ("last", "best"):
            mine, theirs = weights(tmp_path / "cut", cut.run_id, tag), weights(tmp_path / "ref", ref.run_id, tag)
            assert all(torch.equal(mine[k], theirs[k]) for k in theirs) and mine.keys() == theirs.keys()


def test_a_continued_search_asks_what_an_uninterrupted_one_asks(tmp_path):
    once = run_search(tmp_path / "once", 4)
    run_search(tmp_path / "twice", 2)
    again = run_search(tmp_path / "twice", 4)  # the budget counts the study's trials: 2 more
    assert again.asked == 2 and [o.number for o in again.outcomes] == [0, 1, 2, 3]
    assert [dict(o.params) for o in again.outcomes] == [dict(o.params) for o in once.outcomes]
    assert run_search(tmp_path / "twice", 4).asked == 0  # spent: nothing is rerun


def test_an_unreachable_storage_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(StudyStorageError, match="(?s)study 's1'.*cannot be opened.*create the folder") as err:
        run_search(tmp_path / "r", 2, storage=f"sqlite:///{tmp_path}/missing/folder/study.db")
    assert isinstance(err.value, RuntimeError) and not (tmp_path / "r").exists()
    with pytest.raises(StudyStorageError, match=r"(?s)postgresql://user:\*\*\*@.*server is up") as err:
        run_search(tmp_path / "r", 2, storage="postgresql://user:secret@127.0.0.1:1/none")
    assert "secret" not in str(err.value)


def test_a_stored_study_of_another_direction_or_space_is_refused(tmp_path):
    storage = f"sqlite:///{tmp_path}/study.db"
    optuna.create_study(study_name="up", storage=storage, direction="maximize")
    with pytest.raises(nnx.ParamsError, match="study 'up' is stored to maximize.*another study_name"):
        run_search(tmp_path, 2, name="up", storage=storage)
    run_search(tmp_path, 1, name="s1", storage=storage)
    plan = digits_plan(tmp_path, epochs=3, metrics=(NLL,))
    with pytest.raises(nnx.ParamsError, match="study 's1' belongs to a different search \\(space differ"):
        search(plan, SearchSpace(IntParam("seed", 0, 3)), budget=SearchBudget(trials=2), monitor=MONITOR,
               study_name="s1", storage=storage)
    assert not list((tmp_path / "runs").glob("*/*"))[1:]  # only the first search's one run


def test_fit_continues_a_named_attempt_only_when_asked(tmp_path):
    plan = digits_plan(tmp_path, epochs=2)
    first = plan.fit("a1")
    with pytest.raises(FileExistsError, match="resume='auto'"):
        plan.fit("a1")
    again = plan.fit("a1", resume="auto")  # a finished attempt is returned as it is
    assert again.run.id == first.run.id and sorted(again.run.epochs) == [0, 1]
    with pytest.raises(PlanError, match="resume"):
        plan.fit(resume="auto")  # which attempt? refused
    with pytest.raises(PlanError, match="resume"):
        plan.fit("a2", resume="yes")


def test_workers_racing_to_create_the_study_try_again(tmp_path, monkeypatch):
    create, calls = optuna.create_study, []

    class IntegrityError(Exception):  # what SQLAlchemy raises to the worker that loses the race
        pass

    def racing(**kwargs):
        calls.append(kwargs["study_name"])
        if len(calls) == 1:
            raise IntegrityError("UNIQUE constraint failed: alembic_version.version_num")
        return create(**kwargs)

    monkeypatch.setattr(optuna, "create_study", racing)
    assert run_search(tmp_path / "r", 1).counts()["completed"] == 1 and calls == ["s1", "s1"]

    def always(**kwargs):
        raise IntegrityError("UNIQUE constraint failed: studies.study_name")

    monkeypatch.setattr(optuna, "create_study", always)
    with pytest.raises(StudyStorageError, match="UNIQUE constraint"):  # a race that never ends is an error too
        run_search(tmp_path / "r2", 1)


def test_a_trial_asked_but_never_named_is_adopted_only_once_its_asker_is_gone(tmp_path):
    from nnx_adapters.storage.fs import flock_lease
    from nnx_api.experiments import search_workers as workers

    root, storage = tmp_path / "r", f"sqlite:///{tmp_path}/r.db"
    run_search(root, 1, storage=storage)
    study = optuna.load_study(study_name="s1", storage=storage)
    with flock_lease(str(root), "worker-dead"):  # a worker that took its lease, asked a trial, and died
        dead = workers.ask(study, "dead").number
    with flock_lease(str(root), "worker-alive"):  # a worker still between asking and naming itself
        alive = workers.ask(study, "alive").number
        result = run_search(root, 3, storage=storage)
        assert result.resumed == (dead,) and result.asked == 0
        states = {o.number: o.state for o in result.outcomes}
        assert states == {0: "completed", dead: "completed", alive: "running"}  # the live one's is left to it
