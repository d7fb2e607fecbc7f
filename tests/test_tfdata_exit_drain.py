"""The reader's exit drain: in-flight calls finish, new ones fail, the wait is bounded."""

import threading

import pytest

from transforms.tfdata.columnar import exit_drain


@pytest.fixture
def exit_state(monkeypatch):
    # drain() marks the interpreter as exiting; undone afterwards so later tests still read.
    monkeypatch.setattr(exit_drain, "_exiting", False)
    monkeypatch.setattr(exit_drain, "_in_flight", 0)


def _call_in_flight(release: threading.Event, finished: list) -> threading.Thread:
    entered = threading.Event()

    def call():
        with exit_drain.reader_call():
            entered.set()
            release.wait(10)
            finished.append(True)

    thread = threading.Thread(target=call)
    thread.start()
    assert entered.wait(10)
    return thread


def test_drain_waits_for_the_call_in_flight_then_refuses_new_ones(exit_state):
    release, finished = threading.Event(), []
    thread = _call_in_flight(release, finished)
    threading.Timer(0.3, release.set).start()
    assert exit_drain.drain(quiet_s=0.05, limit_s=10)
    assert finished == [True]
    with pytest.raises(exit_drain.ExitingError, match="exiting"):
        with exit_drain.reader_call():
            pass
    thread.join()


def test_drain_gives_up_after_its_limit(exit_state):
    release, finished = threading.Event(), []
    thread = _call_in_flight(release, finished)
    assert not exit_drain.drain(quiet_s=0.05, limit_s=0.3)
    assert finished == []
    release.set()
    thread.join()
