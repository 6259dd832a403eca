"""``NNTrainParams.commit_every`` and ``preempt_signals``: checked at construction, normalised, and
runtime-only — they decide when LAST is written, never what is trained, so neither enters
``state()`` or changes a run id.

Oracles: the pinned run ids of ``tests/api/test_run_id_pins.py`` (computed by the code that first
shipped those configurations); the documented domain of each field.
"""

from __future__ import annotations

import signal
from datetime import timedelta

import numpy as np
import pytest

from nnx_core.identity import run_id
import nnx_api as nnx

from tests.api.test_run_id_pins import PINNED_IDS, _pinned_config

NET = nnx.NNParams(input_dim=8, output_dim=3, hidden_dims=(32, 16), dropout_prob=0.1)
ADAM = nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=0.01, weight_decay=5e-5)
PLATEAU = nnx.NNSchedulerParams(min_lr=1e-7, factor=0.5, patience=3, cooldown=1, threshold=1e-3)
RUNTIME_ONLY = {
    "commit_every=500": {"commit_every": 500},
    "commit_every=1": {"commit_every": 1},
    "commit_every=timedelta": {"commit_every": timedelta(minutes=10)},
    "preempt_signals=()": {"preempt_signals": ()},
    "preempt_signals=SIGTERM+SIGUSR1": {"preempt_signals": (signal.SIGTERM, signal.SIGUSR1)},
    "both": {"commit_every": timedelta(seconds=30), "preempt_signals": [signal.SIGUSR1]},
}


def _vector(**changes):
    """The documented vector's configuration (``PINNED_IDS["vector"]``), with ``changes``."""
    params = nnx.NNTrainParams(n_epochs=10, optim=ADAM, scheduler=PLATEAU, **changes)
    return nnx.NNModel(NET, nnx.NNModelParams()).run_config(params, None)


def test_the_vector_config_is_still_the_pinned_one():
    assert run_id(_vector()) == PINNED_IDS["vector"] == run_id(_pinned_config("vector"))


@pytest.mark.parametrize("changes", list(RUNTIME_ONLY.values()), ids=list(RUNTIME_ONLY))
def test_commit_every_and_preempt_signals_never_change_the_run_id(changes):
    assert run_id(_vector(**changes)) == PINNED_IDS["vector"]
    assert _vector(**changes) == _vector()  # the whole configuration, not only its hash


@pytest.mark.parametrize("changes", list(RUNTIME_ONLY.values()), ids=list(RUNTIME_ONLY))
def test_nor_a_trainers_run_id(changes):
    from nnx_api.trainer import NNTrainerParams, Trainer

    params = NNTrainerParams(n_epochs=4, optims={"default": ADAM}, **changes)
    assert run_id(Trainer(nnx.NNModel(NET, nnx.NNModelParams())).run_config(params, None)) == PINNED_IDS["trainer_one_optimizer"]
    shown = params.representative()  # the run's train section carries them to the session
    assert (shown.commit_every, shown.preempt_signals) == (params.commit_every, params.preempt_signals)


def test_they_are_never_in_the_state_and_a_saved_state_naming_them_is_refused():
    params = nnx.NNTrainParams(n_epochs=2, commit_every=7, preempt_signals=(signal.SIGUSR1,))
    assert "commit_every" not in params.state() and "preempt_signals" not in params.state()
    assert params.state() == nnx.NNTrainParams(n_epochs=2).state()
    for name, value in (("commit_every", 7), ("preempt_signals", [10])):
        with pytest.raises(nnx.ParamsError, match=f"unknown field '{name}'"):
            nnx.NNTrainParams.from_state({**params.state(), name: value})


# -- the domain -------------------------------------------------------------------------------------
def test_the_defaults_commit_at_epoch_ends_and_preempt_on_sigterm():
    params = nnx.NNTrainParams(n_epochs=1)
    assert params.commit_every is None
    assert params.preempt_signals == (signal.SIGTERM,) and type(params.preempt_signals[0]) is signal.Signals


@pytest.mark.parametrize(("value", "stored"), [
    (1, 1), (500, 500), (np.int64(20), 20), (timedelta(minutes=10), timedelta(minutes=10)),
    (timedelta(microseconds=1), timedelta(microseconds=1)),
])
def test_commit_every_takes_a_count_or_a_duration(value, stored):
    params = nnx.NNTrainParams(n_epochs=1, commit_every=value)
    assert params.commit_every == stored and type(params.commit_every) is type(stored)


@pytest.mark.parametrize(("value", "stored"), [
    ((), ()),
    ([signal.SIGUSR1], (signal.SIGUSR1,)),
    ((int(signal.SIGTERM), np.int32(signal.SIGUSR1)), (signal.SIGTERM, signal.SIGUSR1)),
    ((signal.SIGTERM, signal.SIGUSR1, signal.SIGTERM), (signal.SIGTERM, signal.SIGUSR1)),  # a repeat dropped
])
def test_preempt_signals_become_a_tuple_of_signals(value, stored):
    params = nnx.NNTrainParams(n_epochs=1, preempt_signals=value)
    assert params.preempt_signals == stored and type(params.preempt_signals) is tuple
    assert all(type(s) is signal.Signals for s in params.preempt_signals)


REFUSED = {  # beyond the bad-input catalogue's cases: value -> what the message must say
    "commit_every True": ({"commit_every": True}, r"NNTrainParams\.commit_every: .*got bool True"),
    "commit_every a negative timedelta": ({"commit_every": timedelta(seconds=-1)}, r"commit_every: must be a positive timedelta"),
    "commit_every a list": ({"commit_every": [5]}, r"commit_every: .*timedelta\(minutes=10\)"),
    "commit_every a word": ({"commit_every": "often"}, r"commit_every: .*got str 'often'"),
    "SIGSTOP": ({"preempt_signals": (signal.SIGSTOP,)}, r"preempt_signals\[0\]: SIGSTOP cannot be caught"),
    "SIGINT": ({"preempt_signals": [signal.SIGTERM, signal.SIGINT]}, r"preempt_signals\[1\]: SIGINT is Ctrl-C.*nothing new is committed"),
    "SIGINT by number": ({"preempt_signals": (2,)}, r"preempt_signals\[0\]: SIGINT is Ctrl-C"),
    "SIGKILL by number": ({"preempt_signals": (9,)}, r"preempt_signals\[0\]: SIGKILL cannot be caught"),
    "SIGSEGV": ({"preempt_signals": (signal.SIGSEGV,)}, r"preempt_signals\[0\]: SIGSEGV is raised by a fault"),
    "SIGCHLD": ({"preempt_signals": (signal.SIGCHLD,)}, r"preempt_signals\[0\]: SIGCHLD is sent whenever a child"),
    "an unknown number": ({"preempt_signals": (999,)}, r"preempt_signals\[0\]: 999 is not a signal number"),
    "a float": ({"preempt_signals": (15.0,)}, r"preempt_signals\[0\]: must be a signal, got float"),
    "a bool": ({"preempt_signals": (True,)}, r"preempt_signals\[0\]: must be a signal, got bool"),
    "a full name": ({"preempt_signals": ("SIGUSR1",)}, r"preempt_signals\[0\]: .*write signal\.SIGUSR1"),
    "one signal, not a tuple": ({"preempt_signals": signal.SIGUSR1}, r"preempt_signals: must be a tuple.*\(signal\.SIGUSR1,\)"),
    "a string": ({"preempt_signals": "SIGTERM"}, r"preempt_signals: must be a tuple"),
    "None": ({"preempt_signals": None}, r"preempt_signals: must be a tuple.*\(\) to turn preemption off"),
}


@pytest.mark.parametrize(("changes", "pattern"), list(REFUSED.values()), ids=list(REFUSED))
def test_a_value_out_of_the_domain_is_refused_at_construction(changes, pattern):
    with pytest.raises(nnx.ParamsError, match=pattern):
        nnx.NNTrainParams(n_epochs=1, **changes)
    with pytest.raises(nnx.ParamsError, match=pattern.replace("NNTrainParams", "NNTrainerParams")):
        nnx.NNTrainerParams(n_epochs=1, optims={"main": nnx.NNOptimParams()}, **changes)
    with pytest.raises(nnx.ParamsError, match=pattern):  # a copy is checked again
        nnx.NNTrainParams(n_epochs=1).replace(**changes)
