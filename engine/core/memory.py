"""Working memory: the facts the Rete holds, and for how long.

Every fact that reached a rule is remembered here (``Live``: the fact, its incident, how often it
was seen) until it is retracted: its incident's cascade window ran out, its time-to-live did, or a
newer state of the same job, node or GPU signal replaced it. A repeat of a log line or Xid (equal
but for its text) is counted on the fact already held, never asserted again.

A job's printed lines are the job's own data, and a job may print endless distinct errors (every
data-loader worker naming its own file, or a hostile program): one job attempt (or, without a job,
one file) holds at most ``SCOPE_MATCHER_MAX`` log facts of one matcher in the Rete (the policy's
``distinct_lines``). A further
distinct line of that matcher and scope is counted on the last one held, as a repeat is, and the
engine says so once. Without it, 100,000 distinct exception lines of one job took 46 s and 2.5 GB
to replay (durable_rules' joins grow with the facts held), and in a controller they would have
slowed every other job's detection.

    memory = WorkingMemory(network.session(), stats)
    firings = memory.assert_fact(fact)  # None: refused, or no rule can ever use it
    memory.retract(fact.id)
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from engine.core.rete import ReteSession
from engine.facts import Fact
from engine.rulebook.compile import CompiledRule

logger = logging.getLogger(__name__)

__all__ = ["Live", "WorkingMemory", "state_key"]

_STATE_KEYS = {"job": ("job",), "node": ("node",), "gpu_state": ("node", "gpu", "signal")}
#: log facts of one matcher that one job attempt (or one file) may hold in the Rete at once
SCOPE_MATCHER_MAX = 256


@dataclass
class Live:
    fact: Fact
    incident: int | None = None
    count: int = 1
    asserted: bool = False
    flood: Any = None  # linefacts.Flood of its repeats, when a flood was collapsed into it
    scope: tuple | None = None  # (scope, matcher) of a log fact held, see SCOPE_MATCHER_MAX


def scope_of(fact: Fact) -> tuple:
    """Whose data a log fact is: its job attempt, else the file it was read from."""
    job = fact.get("job")
    if job is not None:
        return ("job", str(job), fact.get("attempt"), fact.get("matcher"))
    return ("file", fact.origin.rsplit(":", 1)[0], fact.get("matcher"))


def state_key(fact: Fact) -> tuple | None:
    """Facts of these kinds are states: a newer one of the same key replaces the older."""
    names = _STATE_KEYS.get(fact.kind)
    if not names:
        return None
    if fact.kind == "gpu_state":  # the agent names the signal `state`; rules may say `signal`
        return (fact.kind, fact.get("node"), fact.get("gpu"), fact.get("signal") or fact.get("state"))
    return (fact.kind,) + tuple(fact.get(n) for n in names)


class WorkingMemory:
    def __init__(self, session: ReteSession, stats: dict[str, int], distinct_lines: int = SCOPE_MATCHER_MAX):
        self.session = session
        self.stats = stats
        self.distinct_lines = distinct_lines
        self.live: dict[str, Live] = {}
        self.order: deque[tuple[float, str]] = deque()  # (at, fact id) in assertion order, for the TTL
        self.flood: dict[tuple, str] = {}  # a log line or Xid's shape -> the fact that stands for it
        self.state_of: dict[tuple, str] = {}  # state key -> the fact that holds it now
        self.on_retract: Callable[[str], None] | None = None
        self.scoped: dict[tuple, int] = {}  # (scope, matcher) -> log facts held
        self.last_of: dict[tuple, str] = {}  # (scope, matcher) -> the last one asserted
        self.overflowing: set[tuple] = set()  # said in the log already

    def repeat_of(self, fact: Fact) -> Live | None:
        """The fact already held that this log line or Xid repeats (equal but for its text), or
        that takes the count of a log line past its scope's bound (``SCOPE_MATCHER_MAX``)."""
        if fact.kind not in ("log", "xid"):
            return None
        fkey = (fact.kind, tuple(sorted((k, v) for k, v in fact.attrs.items() if k != "text")))
        known = self.flood.get(fkey)
        if known is not None and known in self.live:
            return self.live[known]
        if fact.kind == "log":
            skey = scope_of(fact)
            if self.scoped.get(skey, 0) >= self.distinct_lines:
                last = self.live.get(self.last_of.get(skey, ""))
                if last is not None:
                    self.stats["overflowed"] = self.stats.get("overflowed", 0) + 1
                    if skey not in self.overflowing:
                        self.overflowing.add(skey)
                        logger.warning(
                            "%s: more than %d distinct lines of matcher %s held; further ones are counted "
                            "on the last, not asserted",
                            f"job {skey[1]} attempt {skey[2]}" if skey[0] == "job" else f"file {skey[1]}",
                            self.distinct_lines,
                            skey[-1],
                        )
                    return last
        self.flood[fkey] = fact.id
        return None

    def replace_state(self, fact: Fact) -> None:
        """A state fact retracts the one it replaces (the job's, the node's, the GPU signal's)."""
        skey = state_key(fact)
        if skey is not None:
            old = self.state_of.get(skey)
            self.state_of[skey] = fact.id
            if old is not None:
                self.retract(old)

    def assert_fact(self, f: Fact) -> list[tuple[CompiledRule, dict]] | None:
        """Assert ``f`` (once) and return what fired; None when it was not asserted or is not kept."""
        live = self.live.get(f.id)
        if live is not None and live.asserted:
            return None
        if live is None:
            live = self.live[f.id] = Live(f)
        live.asserted = True
        self.order.append((f.at, f.id))
        try:
            firings = self.session.assert_fact(f)
        except Exception as exc:  # a broken fact or action must not stop the service
            self.stats["rete_errors"] += 1
            logger.error("rule engine refused fact %s (%s): %s", f.id, f.kind, exc)
            return None
        if not self.session.handled and live.incident is None:
            # no rule can ever use it: nothing to remember (the Rete did not keep it either)
            del self.live[f.id]
            self.order.pop()
            self.stats["unused"] += 1
            return None
        if f.kind == "log" and live.scope is None:
            live.scope = skey = scope_of(f)
            self.scoped[skey] = self.scoped.get(skey, 0) + 1
            self.last_of[skey] = f.id
        return firings

    def retract(self, fact_id: str) -> None:
        live = self.live.pop(fact_id, None)
        if live is None:
            return
        if live.scope is not None:
            left = self.scoped.get(live.scope, 1) - 1
            if left > 0:
                self.scoped[live.scope] = left
            else:
                self.scoped.pop(live.scope, None)
                self.last_of.pop(live.scope, None)
                self.overflowing.discard(live.scope)
        try:
            self.session.retract_fact(fact_id)
        except Exception as exc:
            self.stats["rete_errors"] += 1
            logger.error("could not retract fact %s: %s", fact_id, exc)
        if self.on_retract is not None:
            self.on_retract(fact_id)

    def expire(self, before: float, keep: Callable[[Live], bool]) -> None:
        """Retract facts asserted before ``before`` unless ``keep`` says their incident is open."""
        while self.order and self.order[0][0] < before:
            _, fid = self.order.popleft()
            live = self.live.get(fid)
            if live is not None and not keep(live):
                self.retract(fid)
        if len(self.flood) > 4 * len(self.live) + 1024:
            self.flood = {k: v for k, v in self.flood.items() if v in self.live}
