"""Preemption (``nnx_api.training.preemption.Preemption``) and its error (``TrainingPreempted``).

``Preemption`` around one ``train()`` call: while entered, each listed signal only records that it
arrived (the first one; a second changes nothing) and never ends the process; on exit the handlers
that were there before are back, whatever they were and however the body ended; off the main
thread nothing is installed. ``TrainingPreempted`` names the run, the epoch and update committed
and the signal, crosses process boundaries (pickle) and ends a script that lets it propagate with
a non-zero status.

Oracles: ``signal.getsignal`` before, inside and after; ``signal.raise_signal`` delivering a real
signal to this process (a handler left at SIG_DFL would end the test run).
"""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from nnx_core.errors import NNxError, TrainingPreempted
from nnx_api.training.preemption import Preemption

SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
RUN = "1a2b3c4d" + "0" * 24


@pytest.fixture(autouse=True)
def handlers() -> Iterator[None]:
    """Every test starts with the signals it uses at SIG_DFL and leaves them as they were."""
    saved = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _theirs(signum, frame):  # a user's own Python handler
    _theirs.calls.append(signum)


_theirs.calls = []


# -- handlers: installed while entered, the previous ones back on exit -----------------------------
def test_a_handler_is_installed_while_entered_and_sig_dfl_is_back_after():
    preemption = Preemption([signal.SIGTERM])
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL and not preemption.active
    with preemption as entered:
        assert entered is preemption and preemption.active
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None)
        assert not preemption.requested and preemption.signal is None and preemption.name is None
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL and not preemption.active


@pytest.mark.parametrize("previous", [_theirs, signal.SIG_IGN], ids=["a Python handler", "SIG_IGN"])
def test_the_previous_handler_is_restored_exactly(previous):
    signal.signal(signal.SIGTERM, previous)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    with Preemption([signal.SIGTERM, signal.SIGUSR1]):
        assert signal.getsignal(signal.SIGTERM) is not previous
        assert signal.getsignal(signal.SIGUSR1) != signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is previous
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN


def test_a_handler_installed_from_c_is_left_at_sig_dfl(monkeypatch):
    """``signal.getsignal`` gives None for a handler installed from C; ``signal.signal`` cannot
    reinstall None, so the signal is left at SIG_DFL (documented)."""
    signal.signal(signal.SIGUSR2, _theirs)  # what Preemption must not leave behind either
    real = signal.getsignal
    monkeypatch.setattr(signal, "getsignal", lambda sig: None if sig == signal.SIGUSR2 else real(sig))
    with Preemption([signal.SIGUSR2]) as preemption:
        assert preemption.active
    monkeypatch.undo()
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL


def test_the_handlers_are_restored_when_the_body_raises():
    signal.signal(signal.SIGUSR1, _theirs)
    preemption = Preemption([signal.SIGTERM, signal.SIGUSR1])
    with pytest.raises(ZeroDivisionError), preemption:
        assert preemption.active
        1 / 0  # noqa: B018
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGUSR1) is _theirs and not preemption.active
    with pytest.raises(TrainingPreempted), Preemption([signal.SIGTERM]) as again:
        signal.raise_signal(signal.SIGTERM)
        raise TrainingPreempted(RUN, 0, 4, again.name)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_no_signals_change_no_handler():
    signal.signal(signal.SIGTERM, _theirs)
    with Preemption(()) as preemption:
        assert signal.getsignal(signal.SIGTERM) is _theirs and not preemption.active
    assert signal.getsignal(signal.SIGTERM) is _theirs


# -- a signal only sets the flag -----------------------------------------------------------------
def test_sigterm_inside_sets_the_flag_and_does_not_end_the_process():
    with Preemption([signal.SIGTERM]) as preemption:
        signal.raise_signal(signal.SIGTERM)  # at SIG_DFL this would end the test run
        assert preemption.requested
        assert preemption.signal is signal.SIGTERM and preemption.name == "SIGTERM"
    assert preemption.requested and preemption.name == "SIGTERM"  # read after the call too


def test_a_second_signal_changes_nothing():
    with Preemption([signal.SIGTERM, signal.SIGUSR1]) as preemption:
        signal.raise_signal(signal.SIGUSR1)
        signal.raise_signal(signal.SIGTERM)  # another listed signal
        assert preemption.signal is signal.SIGUSR1 and preemption.name == "SIGUSR1"
    with Preemption([signal.SIGTERM]) as preemption:
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)  # the same one again: still one request, the process alive
        assert preemption.signal is signal.SIGTERM


def test_sigusr1_preempts_when_listed_and_an_unlisted_signal_keeps_its_handler():
    signal.signal(signal.SIGUSR2, _theirs)
    _theirs.calls.clear()
    with Preemption([signal.SIGTERM, signal.SIGUSR1]) as preemption:
        signal.raise_signal(signal.SIGUSR2)  # not listed: the user's handler runs, no preemption
        assert not preemption.requested and _theirs.calls == [signal.SIGUSR2]
        signal.raise_signal(signal.SIGUSR1)
        assert preemption.requested and preemption.name == "SIGUSR1"


def test_entering_again_clears_the_flag_and_an_entered_preemption_refuses_a_second_enter():
    preemption = Preemption([signal.SIGTERM])
    with preemption:
        signal.raise_signal(signal.SIGTERM)
        with pytest.raises(RuntimeError, match="already entered"):
            preemption.__enter__()
    assert preemption.requested
    with preemption:
        assert not preemption.requested
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


# -- off the main thread: nothing is installed --------------------------------------------------
def test_nothing_is_installed_off_the_main_thread():
    signal.signal(signal.SIGTERM, _theirs)
    seen: dict[str, object] = {}

    def body():
        try:
            with Preemption([signal.SIGTERM, signal.SIGUSR1]) as preemption:
                seen["active"] = preemption.active
                seen["inside"] = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGUSR1))
            seen["after"] = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGUSR1))
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            seen["error"] = exc

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert "error" not in seen, seen.get("error")
    assert seen["active"] is False
    assert seen["inside"] == seen["after"] == (_theirs, signal.SIG_DFL)


# -- TrainingPreempted -----------------------------------------------------------------------------
def test_training_preempted_names_the_run_epoch_update_and_signal():
    err = TrainingPreempted(RUN, 3, 812, "SIGTERM")
    assert str(err) == ("run 1a2b3c4d preempted by SIGTERM: epoch 3 is committed up to update 812 (LAST); "
                        "run the same command with resume='auto' to continue from there")
    assert (err.run_id, err.epoch, err.update, err.signal_name, err.committed) == (RUN, 3, 812, "SIGTERM", True)


def test_training_preempted_without_a_commit_says_nothing_new_was_committed():
    err = TrainingPreempted(RUN, 2, None, "SIGUSR1", committed=False)
    assert err.committed is False and err.epoch == 2
    assert "the epoch in progress was not committed" in str(err)
    assert "resume='auto' to continue from the last committed epoch, 2" in str(err)
    assert "committed up to update" not in str(err)
    first = TrainingPreempted(RUN, None, None, "SIGTERM", committed=False)
    assert "no epoch was committed" in str(first) and "resume='auto'" in str(first)


def test_training_preempted_is_an_nnx_error_and_a_runtime_error_never_a_keyboard_interrupt():
    err = TrainingPreempted(RUN, 0, 1, "SIGTERM")
    assert isinstance(err, NNxError) and isinstance(err, RuntimeError) and isinstance(err, Exception)
    assert not isinstance(err, KeyboardInterrupt)
    import nnx_api as nnx

    assert nnx.TrainingPreempted is TrainingPreempted and "TrainingPreempted" in nnx.__all__


@pytest.mark.parametrize("err", [TrainingPreempted(RUN, 3, 812, "SIGTERM"),
                                 TrainingPreempted(RUN, 1, None, "SIGUSR1", committed=False),
                                 TrainingPreempted(RUN, None, None, "SIGTERM", committed=False)],
                         ids=["committed", "not committed", "nothing committed yet"])
def test_training_preempted_survives_pickle(err):
    """Errors cross process boundaries (a spawned worker, a launcher): every field and the
    message come back, and so do notes added on the way."""
    err.add_note("raised in the training process")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is TrainingPreempted and str(back) == str(err) and back.args == err.args
    assert (back.run_id, back.epoch, back.update, back.signal_name, back.committed) == (
        err.run_id, err.epoch, err.update, err.signal_name, err.committed)
    assert back.__notes__ == ["raised in the training process"]


def test_a_script_that_lets_it_propagate_exits_non_zero():
    script = f"from nnx_core.errors import TrainingPreempted\nraise TrainingPreempted({RUN!r}, 3, 812, 'SIGTERM')\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "TrainingPreempted: run 1a2b3c4d preempted by SIGTERM" in done.stderr
