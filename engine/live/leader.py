"""One leader among the controllers that share a store: who may act, and when it must stop.

A controller calls ``tick()`` at the top of every step. A follower tries to take the lease; the
leader renews it every third of its time to live and believes it holds it only until a deadline
on its own monotonic clock: the lease's time to live from the moment it *asked* for the last
renewal, less a margin. So a leader that cannot renew (the store locked or away) stops acting
before the lease expires for the others, and one that was paused (SIGSTOP, a VM freeze) finds its
deadline passed when it runs again and steps down before it does anything. Whatever it still
tries is refused by the database: its term is no longer the lease's (``Fenced``).

    leader = Leadership(store, ttl=15.0)
    change = leader.tick()        # "took", "lost" or None
    if leader.acting(): ...
"""

from __future__ import annotations

import json
import logging
import os
import socket
from typing import Callable

from engine.clock import SYSTEM, Clock
from engine.store import Store, StoreError

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_LEASE_S", "Leadership", "holder_id"]

#: the lease's time to live; a follower takes over within about this after a leader dies
DEFAULT_LEASE_S = 15.0


def holder_id(clock: Clock = SYSTEM) -> str:
    """host:pid:start, so that a restarted process (same pid, later start) is another holder."""
    return f"{socket.gethostname()}:{os.getpid()}:{clock.wall():.6f}"


def _gone(holder: str) -> bool:
    """Whether ``holder`` (host:pid:start) names a process of this host that no longer exists. A
    pid that exists is never taken for gone (it may be another process that got the number: then
    the lease is waited out); another host's holder is never judged from here."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists (another user's): not gone
        return False
    return False


class Leadership:
    def __init__(
        self,
        store: Store,
        ttl: float = DEFAULT_LEASE_S,
        *,
        holder: str | None = None,
        mode: str = "act",
        clock: Clock = SYSTEM,
        info: Callable[[], dict] | None = None,
    ):
        if ttl <= 0:
            raise ValueError("the lease's time to live must be positive")
        self.store = store
        self.ttl = float(ttl)
        self.holder = holder or holder_id(clock)
        self.mode = mode
        self.clock = clock
        #: what this controller sees, written with its heartbeat (``recover status``)
        self.info = info
        self.started_at = clock.wall()
        self.term: int | None = None
        #: monotonic time until which this process may act (leader only)
        self.deadline = 0.0
        self._next_renew = 0.0
        self._next_beat = 0.0
        #: the holder that had it at the last look, when not us (said once per change)
        self.other: str | None = None
        self.takeovers = 0
        self.acquired_mono = 0.0

    @property
    def margin(self) -> float:
        """Stop acting this long before the lease would expire for the others."""
        return min(2.0, self.ttl / 5)

    def acting(self) -> bool:
        """Whether this process may act now (leader, and its own deadline not passed)."""
        return self.term is not None and self.clock.monotonic() < self.deadline

    def tick(self) -> str | None:
        """One look at the lease: "took" when this process became the leader, "lost" when it
        stopped being it, None when nothing changed."""
        now = self.clock.monotonic()
        change = None
        if self.term is not None and now >= self.deadline:
            change = self.step_down("could not renew the lease before it ran out (paused, or the store away)")
        elif self.term is not None and now >= self._next_renew:
            asked = now
            try:
                ok = self.store.renew(self.holder, self.term, self.ttl)
            except StoreError as exc:
                logger.warning("leader lease: renewal failed (%s); acting stops in %.1f s", exc, self.deadline - now)
            else:
                if ok:
                    self.deadline = asked + self.ttl - self.margin
                    self._next_renew = asked + self.ttl / 3
                else:
                    change = self.step_down("the lease was taken over, or ran out")
        if self.term is None and now >= self._next_renew:
            change = self._try_take(now) or change
        if now >= self._next_beat:
            self._next_beat = now + self.ttl / 3
            try:
                seen = json.dumps(self.info()) if self.info is not None else None
                self.store.heartbeat(
                    self.holder,
                    "leader" if self.term is not None else "follower",
                    self.term,
                    self.mode,
                    self.started_at,
                    seen,
                    forget_after=10 * self.ttl,  # a controller not heard of for that long is gone
                )
            except StoreError as exc:
                logger.debug("heartbeat: %s", exc)
        return change

    def _try_take(self, asked: float) -> str | None:
        self._next_renew = asked + min(1.0, self.ttl / 5)  # a follower looks often: takeover is fast
        try:
            view = self.store.acquire(self.holder, self.ttl)
            if not view.ours and _gone(view.holder):
                # the holder was a process of this host that has exited (a kill -9, then a restart by
                # systemd): its lease is taken now rather than when it runs out
                logger.warning("leader lease: its holder %s has exited; taking it over", view.holder)
                view = self.store.acquire(self.holder, self.ttl, dead=view.holder)
        except StoreError as exc:
            logger.warning("leader lease: could not look at it (%s)", exc)
            return None
        if not view.ours:
            if view.holder != self.other:
                self.other = view.holder
                logger.warning(
                    "another controller leads this store: %s (term %d, lease %.1f s left); "
                    "this one follows and does not act until that lease runs out",
                    view.holder,
                    view.term,
                    view.left_s,
                )
            return None
        self.term = view.term
        self.store.term = view.term
        self.deadline = asked + self.ttl - self.margin
        self._next_renew = asked + self.ttl / 3
        self.acquired_mono = asked
        self.takeovers += 1
        logger.info("leader lease taken: %s, term %d", self.holder, view.term)
        self.other = None
        return "took"

    def step_down(self, why: str) -> str:
        term, self.term = self.term, None
        self.store.term = None  # whatever this process writes now carries no term: refused if acted
        logger.error("leader lease lost (term %s): %s; acting stops, this controller follows", term, why)
        if term is not None:
            try:
                self.store.release(self.holder, term)
            except StoreError:
                pass
        self._next_renew = 0.0
        return "lost"

    def release(self) -> None:
        """A clean stop: the lease is given up so that a follower takes over at once."""
        term, self.term = self.term, None
        self.store.term = None
        try:
            if term is not None:
                self.store.release(self.holder, term)
            self.store.forget_controller(self.holder)
        except StoreError as exc:
            logger.warning("leader lease: could not give it up (%s); it runs out in %.0f s", exc, self.ttl)

    def lease_age(self) -> float | None:
        """Seconds since this process took the lease (None when it does not hold it)."""
        return None if self.term is None else self.clock.monotonic() - self.acquired_mono
