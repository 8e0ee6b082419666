"""The one clock: every part of Recover that needs the time or has to wait asks a ``Clock``.

Time decides things here: an action's verify timeout and retry backoff, when a drain escalates,
when a file counts as gone, when the store is probed again, what a silence covers. Reading the
machine's clock in each of those places made them untestable without zeroed timeouts and real
sleeps, so the controller's and the agent's configuration carry one ``Clock`` and hand it to each
part they build. ``tests/test_clock_ban.py`` keeps it that way: outside this module nothing in
``engine/`` or ``scheduler_adapters/`` reads ``time.time``, ``time.monotonic``, ``datetime.now``
and friends, nor calls ``time.sleep``.

Two clocks, one protocol:

* ``SYSTEM`` (a ``SystemClock``) is the machine's: what production runs on.
* ``FakeClock`` moves only when told (``advance``), deterministically. Its ``sleep`` and ``wait``
  never block for want of an ``advance``: by default the sleeper moves the clock itself (the
  single-threaded code under test keeps going, and a test sees exactly the time it slept). With
  ``auto=False`` a sleeper blocks until another thread advances the clock past its deadline, and
  if nobody does for ``stall_after`` real seconds it raises ``ClockStalled`` instead of hanging the
  test run (the one way threaded code on a fake clock could otherwise deadlock).

The deterministic core takes no clock at all: time arrives there with the facts.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

from engine.errors import RecoverError

__all__ = ["Clock", "SystemClock", "FakeClock", "ClockError", "ClockStalled", "SYSTEM"]


@runtime_checkable
class Clock(Protocol):
    def wall(self) -> float:
        """Seconds since the epoch: what is stored and shown, and compared with stored stamps."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes back: intervals, deadlines, rates."""
        ...

    def boottime(self) -> float:
        """Seconds since the machine booted, suspend included (what the kernel stamps records with)."""
        ...

    def sleep(self, seconds: float) -> None: ...

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Wait until ``event`` is set or ``timeout`` seconds passed; True when it is set."""
        ...


class SystemClock:
    """The machine's clock."""

    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def boottime(self) -> float:
        try:
            return time.clock_gettime(time.CLOCK_BOOTTIME)
        except (AttributeError, OSError):  # not Linux: no suspend to count
            return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(None if timeout is None else max(0.0, timeout))

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM: Clock = SystemClock()


class ClockError(RecoverError):
    """A fake clock used in a way no clock allows (moved backwards)."""


class ClockStalled(ClockError):
    """A sleeper on a ``FakeClock(auto=False)`` waited ``stall_after`` real seconds and nobody
    advanced the clock: a test that would otherwise hang fails with this."""


class FakeClock:
    """A clock that moves only when told. ``wall()`` starts at ``start`` (epoch seconds),
    ``monotonic()`` and ``boottime()`` at ``mono``; ``advance(s)`` moves all three together.

    ``auto=True`` (the default): ``sleep(s)`` advances the clock by ``s`` and returns at once;
    ``wait(event, t)`` returns True at once when the event is set, else advances by ``t`` and
    returns whether it is set now. Single-threaded code under test runs without real waiting.

    ``auto=False``: ``sleep`` and ``wait`` block (the clock's lock released) until another thread
    ``advance``\\ s past the deadline or, for ``wait``, the event is set; ``ClockStalled`` after
    ``stall_after`` real seconds with no advance.
    """

    def __init__(
        self,
        start: float = 1_700_000_000.0,
        *,
        mono: float = 1000.0,
        auto: bool = True,
        stall_after: float = 10.0,
    ):
        self._wall0 = float(start)
        self._mono0 = float(mono)
        self._elapsed = 0.0
        self.auto = auto
        self.stall_after = stall_after
        self._cond = threading.Condition()
        #: how many sleeps and waits have run or are blocked: a test can wait for a thread to park
        self.sleeps = 0

    def wall(self) -> float:
        with self._cond:
            return self._wall0 + self._elapsed

    def monotonic(self) -> float:
        with self._cond:
            return self._mono0 + self._elapsed

    def boottime(self) -> float:
        return self.monotonic()

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ClockError("a clock does not go back")
        with self._cond:
            self._elapsed += seconds
            self._cond.notify_all()

    def set_wall(self, epoch: float) -> None:
        """Move to this wall time (forward only): ``monotonic()`` moves by as much."""
        self.advance(max(0.0, epoch - self.wall()))

    def sleep(self, seconds: float) -> None:
        self._block(max(0.0, seconds), None)

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        if event.is_set():
            return True
        if timeout is None and self.auto:
            # nothing would ever advance a single-threaded clock to an endless wait's end
            raise ClockStalled("an endless wait on a FakeClock(auto=True) whose event is not set")
        self._block(None if timeout is None else max(0.0, timeout), event)
        return event.is_set()

    def _block(self, seconds: float | None, event: threading.Event | None) -> None:
        with self._cond:
            self.sleeps += 1
            if self.auto:
                self._elapsed += seconds or 0.0
                self._cond.notify_all()
                return
            deadline = None if seconds is None else self._elapsed + seconds
            seen, idle_since = self._elapsed, time.monotonic()  # real time: only to detect a stall
            while deadline is None or self._elapsed < deadline:
                if event is not None and event.is_set():
                    return
                # an Event cannot notify our condition: look at it every few milliseconds
                self._cond.wait(0.005 if event is not None else 0.05)
                if self._elapsed != seen:
                    seen, idle_since = self._elapsed, time.monotonic()
                elif time.monotonic() - idle_since > self.stall_after:
                    raise ClockStalled(f"nobody advanced the fake clock for {self.stall_after:.0f} s")

    def __repr__(self) -> str:
        return f"FakeClock(wall={self.wall():.3f}, monotonic={self.monotonic():.3f})"
