"""engine.clock: the fake clock moves only when told and never hangs a test."""

from __future__ import annotations

import threading

import pytest

from engine.clock import SYSTEM, Clock, ClockError, ClockStalled, FakeClock
from engine.errors import RecoverError


def test_both_clocks_keep_the_protocol():
    assert isinstance(SYSTEM, Clock)
    assert isinstance(FakeClock(), Clock)


def test_a_fake_clock_moves_only_when_told():
    c = FakeClock(start=1000.0, mono=5.0)
    assert (c.wall(), c.monotonic()) == (1000.0, 5.0)
    c.advance(2.5)
    assert (c.wall(), c.monotonic(), c.boottime()) == (1002.5, 7.5, 7.5)
    with pytest.raises(ClockError):
        c.advance(-1)
    assert issubclass(ClockStalled, RecoverError)


def test_auto_sleep_and_wait_advance_the_clock_instead_of_blocking():
    c = FakeClock(start=0.0)
    c.sleep(30.0)
    assert c.wall() == 30.0
    ev = threading.Event()
    assert c.wait(ev, 5.0) is False and c.wall() == 35.0
    ev.set()
    assert c.wait(ev, 5.0) is True and c.wall() == 35.0  # set: no time passes
    with pytest.raises(ClockStalled):
        c.wait(threading.Event(), None)


def test_a_blocking_sleeper_wakes_when_another_thread_advances():
    c = FakeClock(start=0.0, auto=False)
    done = threading.Event()
    t = threading.Thread(target=lambda: (c.sleep(10.0), done.set()), daemon=True)
    t.start()
    c.advance(5.0)
    assert not done.wait(0.05)
    c.advance(5.0)
    assert done.wait(2.0)


def test_a_blocking_sleeper_nobody_advances_fails_instead_of_hanging():
    c = FakeClock(auto=False, stall_after=0.1)
    with pytest.raises(ClockStalled):
        c.sleep(1.0)
