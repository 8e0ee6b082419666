"""Progress, hangs and stragglers: what high-rate progress lines say, aggregated in Python so the
Rete only ever sees the conclusions (a ``stall`` fact, a ``slow_node`` fact).

Hang: a running job attempt whose last progress is older than its bound. The bound is
``policy.hang.bound`` when set, else learned: ``factor`` x the longest interval between progress
points seen so far in this attempt (never below ``min_bound``), once ``min_samples`` intervals
were seen. With ``require_running`` (default) only attempts the scheduler reports RUNNING are
watched, so a finished job's silent log is not a hang.

Straggler: progress facts that carry a per-node (or per-rank) ``step_time``: a node whose recent
step time stays above the median of its peers by ``factor`` for ``duration`` is slow.

Job-level straggler: where a job prints one iteration time (or throughput) for all its ranks, the
job is compared with its OWN recent baseline. Per progress matcher (one way of printing), the
first ``warmup`` points are skipped (compilation, cold caches); the baseline is the median of the
last ``window`` normal points once ``baseline`` of them were seen; ``slow_points`` consecutive
points at ``factor`` x the baseline or more are a slowdown that stays: one ``slow_node`` fact with
``scope: job`` and no node, for the rules to call a straggler. Throughput (samples/s, it/s) is
turned into a cost (1/rate) so that slower is always larger; getting faster is never slow.
"""

from __future__ import annotations

import heapq
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterator

from engine.core.peer_table import MIN_EXCESS_S, PeerTables, unit_cost
from engine.facts import Fact
from engine.rulebook.policy_model import Hang, Policy, Straggler

__all__ = ["ProgressTracker"]

#: what a progress fact may carry about speed -> how to turn it into seconds per step (or a cost)
_SPEED = (
    ("step_time", 1.0),
    ("step_time_ms", 1e-3),
    ("s_per_it", 1.0),
    ("it_per_s", -1.0),
    ("samples_per_s", -1.0),
    ("iter_s", 1.0),
    ("gflops", -1.0),
    ("gb_per_s", -1.0),
)


@dataclass
class _Attempt:
    first_at: float
    last_at: float
    step: int | None = None
    checkpoint: int | None = None
    max_gap: float = 0.0
    gaps: int = 0
    stalled_at: float | None = None  # the last progress time a stall was reported for
    times: dict[str, deque] = field(default_factory=dict)  # node -> recent step times
    slow_since: dict[str, float] = field(default_factory=dict)
    reported_slow: set[str] = field(default_factory=set)
    points: dict[str, int] = field(default_factory=dict)  # peer unit -> points seen
    slow_run: dict[str, int] = field(default_factory=dict)  # peer unit -> consecutive slow points
    own: dict[str, "_Series"] = field(default_factory=dict)  # progress matcher -> the job's own speed
    seq: int = 0  # the order attempts became known in (stalls due together are reported in it)
    queued: bool = False  # has an entry in the tracker's deadlines


@dataclass
class _Series:
    """One way a job prints its speed: points seen, recent normal ones, the current slow run."""

    seen: int = 0
    normal: deque = field(default_factory=lambda: deque(maxlen=8))
    slow: list = field(default_factory=list)
    reported: bool = False


class ProgressTracker:
    def __init__(self, policy: Policy):
        # policy.hang and policy.straggler: every value from the rulebook, durations in seconds
        self.hang: Hang = policy.hang
        self.straggler: Straggler = policy.straggler
        self.attempts: dict[tuple[str, int], _Attempt] = {}
        self.running: dict[str, tuple[int, bool]] = {}  # job -> (attempt, running)
        self.tables = PeerTables(
            self.straggler.table_factor,
            self.straggler.table_min_peers,
            self.straggler.min_peers,
            self.straggler.warmup,
            self.straggler.slow_points,
        )
        self._out: list[Fact] = []
        #: (deadline, seq, key, attempt): at most one entry per attempt, its deadline never later
        #: than the attempt's true one (progress and a learned bound only push it later), so
        #: due() looks at the attempts whose silence may be over, not at every attempt
        self._deadlines: list[tuple[float, int, tuple[str, int], _Attempt]] = []
        self._seq = 0

    def get(self, job: str, attempt: int) -> dict[str, Any] | None:
        a = self.attempts.get((job, attempt))
        if a is None:
            return None
        return {
            "step": a.step,
            "checkpoint": a.checkpoint,
            "last_at": a.last_at,
            "first_at": a.first_at,
            "max_gap": a.max_gap,
        }

    def job_state(self, job: str, attempt: int, state: str, at: float) -> None:
        self.running[job] = (attempt, state == "RUNNING")
        if state == "RUNNING":
            a = self.attempts.get((job, attempt))
            if a is None:
                # the clock of a hang starts when the attempt starts running, even before any output
                a = self.attempts[(job, attempt)] = self._new(at)
            self._queue((job, attempt), a)

    def _new(self, at: float) -> _Attempt:
        self._seq += 1
        return _Attempt(at, at, seq=self._seq)

    def _queue(self, key: tuple[str, int], a: _Attempt) -> None:
        if a.queued:
            return
        bound, _ = self.bound_for(a)
        if bound is not None:
            a.queued = True
            heapq.heappush(self._deadlines, (a.last_at + bound, a.seq, key, a))

    def activity(self, job: str, attempt: int, at: float) -> None:
        """Any output at all counts as progress when ``hang.any_output`` is set."""
        if self.hang.any_output:
            self._touch(job, attempt, at)

    def _touch(self, job: str, attempt: int, at: float) -> _Attempt:
        a = self.attempts.get((job, attempt))
        if a is None:
            a = self.attempts[(job, attempt)] = self._new(at)
        elif at > a.last_at:
            gap = at - a.last_at
            if gap > a.max_gap:
                a.max_gap = gap
            a.gaps += 1
            a.last_at = at
        if not a.queued:
            self._queue((job, attempt), a)
        return a

    def observe(self, fact: Fact) -> list[Fact]:
        """Take one progress fact; return any conclusion (slow_node facts)."""
        job = fact.get("job")
        if job is None:
            return []
        attempt = int(fact.get("attempt") or 0)
        if fact.get("table") is not None:
            # a part of a table of peers (engine.core.peer_table): no training step, no clock
            return self.tables.observe(str(job), attempt, fact)
        a = self._touch(str(job), attempt, fact.at)
        for name in ("step", "checkpoint"):
            v = fact.get(name)
            if isinstance(v, int) and (getattr(a, name) is None or v > getattr(a, name)):
                setattr(a, name, v)
        peer = fact.get("peer")
        if peer is not None:
            # one of several like units (a GPU, a worker) printing its own speed: compared with
            # the others, not with the job's own past
            cost = _cost(fact)
            if cost is not None:
                return self._peers(str(job), attempt, a, str(peer), cost, fact)
        st = fact.get("step_time")
        who = fact.get("node") or (f"rank{fact.get('rank')}" if fact.get("rank") is not None else None)
        if isinstance(st, (int, float)) and who is not None:
            out = self._straggler(str(job), attempt, a, str(who), float(st), fact)
            if out or len(a.times) > 1:
                return out
        # one series for the whole job (or a job on one node): compared with its own past
        cost = _cost(fact)
        if cost is not None:
            return self._own_baseline(str(job), attempt, a, cost, fact.at, str(fact.get("matcher") or "-"), fact.origin)
        return []

    def due_by(self, at: float) -> bool:
        """Whether some attempt's silence may be over by ``at`` (``due`` would look at it)."""
        return bool(self._deadlines) and self._deadlines[0][0] <= at

    def touch(self, job: str, attempt: int, at: float, step: int | None, speed: Any, key: str) -> bool:
        """A progress line that is no fact (live, ``engine.core.linefacts``): what ``observe``
        would do with a fact of the job's own speed (``speed``: the line's speed figures by name,
        no node, rank, peer, table or checkpoint) and this ``step``, in a few microseconds. False,
        and nothing changed, where the point would end a slow run against the job's own baseline
        (``slow_points`` of them, not reported yet): the caller makes it a fact, so that the
        slowdown is reported by ``observe``, as a fact of its own line."""
        cost = _cost(speed) if speed else None
        a = self.attempts.get((job, attempt))
        if cost is not None and a is not None:
            cfg, s = self.straggler, a.own.get(key)
            if (
                s is not None
                and not s.reported
                and len(s.slow) + 1 >= max(1, cfg.slow_points)
                and s.seen >= cfg.warmup
                and len(s.normal) >= max(1, cfg.baseline)
            ):
                base = statistics.median(s.normal)
                if base > 0 and cost >= cfg.factor * base:
                    return False
        a = self._touch(job, attempt, at)
        if step is not None and (a.step is None or step > a.step):
            a.step = step
        if cost is not None:
            self._own_baseline(job, attempt, a, cost, at, key, "")  # ends no slow run: no conclusion
        return True

    def _own_baseline(
        self, job: str, attempt: int, a: _Attempt, cost: float, at: float, key: str, origin: str
    ) -> list[Fact]:
        cfg = self.straggler
        s = a.own.get(key)
        if s is None:
            s = a.own[key] = _Series(normal=deque(maxlen=max(1, cfg.window)))
        s.seen += 1
        if s.seen <= cfg.warmup:
            return []
        if len(s.normal) >= max(1, cfg.baseline):
            base = statistics.median(s.normal)
            if base > 0 and cost >= cfg.factor * base:
                s.slow.append((at, cost))
                if len(s.slow) < max(1, cfg.slow_points) or s.reported:
                    return []
                s.reported = True
                recent = statistics.median(c for _, c in s.slow)
                attrs = {
                    "job": job,
                    "attempt": attempt,
                    "scope": "job",
                    "ratio": round(recent / base, 3),
                    "step_time": round(recent, 6),
                    "baseline_step_time": round(base, 6),
                    "points": len(s.slow),
                    "slow_for_s": round(at - s.slow[0][0], 3),
                    "matcher": key,
                    "evidence": f"{key}: {len(s.slow)} points at x{recent / base:.2f} the job's own baseline",
                }
                return [Fact.make("slow_node", attrs, at, origin)]
        s.slow.clear()  # back to normal (or still learning): a later slowdown is reported again
        s.reported = False
        s.normal.append(cost)
        return []

    def _straggler(self, job: str, attempt: int, a: _Attempt, who: str, st: float, fact: Fact) -> list[Fact]:
        cfg = self.straggler
        window = cfg.window
        a.times.setdefault(who, deque(maxlen=window)).append(st)
        unit = who.startswith("peer:")
        if unit:
            a.points[who] = a.points.get(who, 0) + 1
        group = _group(who)
        mates = [v for k, v in a.times.items() if v and _group(k) == group]
        if len(mates) < cfg.min_peers + 1:
            return []
        mine = statistics.median(a.times[who])
        peers = [statistics.median(v) for k, v in a.times.items() if k != who and v and _group(k) == group]
        if not peers:
            return []
        typical = statistics.median(peers)
        if typical <= 0:
            return []
        ratio = mine / typical
        small = unit and _is_time(fact) and mine - typical < MIN_EXCESS_S  # milliseconds of noise
        if ratio < cfg.factor or small or (unit and a.points[who] <= cfg.warmup):
            # a unit's first points (compilation, cold caches, a slow first iteration) never count
            a.slow_since.pop(who, None)
            a.slow_run.pop(who, None)
            return []
        since = a.slow_since.setdefault(who, fact.at)
        # a run counts the unit's own points that are slow, not just a median still slow from before
        run = a.slow_run[who] = a.slow_run.get(who, 0) + 1 if st >= cfg.factor * typical else 0
        if who in a.reported_slow:
            return []
        # slow for ``duration``, or (a unit the job printed) for ``slow_points`` of its points in a row
        if fact.at - since < cfg.duration and not (unit and run >= max(1, cfg.slow_points)):
            return []
        a.reported_slow.add(who)
        attrs = {
            "job": job,
            "attempt": attempt,
            "ratio": round(ratio, 3),
            "step_time": round(mine, 6),
            "peer_step_time": round(typical, 6),
            "slow_for_s": round(fact.at - since, 3),
        }
        if who.startswith("peer:"):
            # a unit the job's own text named: the job is slow, no node is taken from its words
            attrs.update(
                scope="job",
                peer=who.rsplit(":", 1)[1],
                evidence=f"{fact.get('matcher') or 'progress'}: unit {who.rsplit(':', 1)[1]} at x{ratio:.2f} its peers for {run} points, {fact.at - since:.0f}s",
            )
        elif fact.get("node"):
            attrs["node"] = fact.get("node")
        else:
            attrs["rank"] = fact.get("rank")
        return [Fact.make("slow_node", attrs, fact.at, "straggler-tracker")]

    def _peers(self, job: str, attempt: int, a: _Attempt, peer: str, cost: float, fact: Fact) -> list[Fact]:
        """A unit that prints its own speed (``peer``: a GPU index, a worker) against the others.

        A ``final`` point is a measurement's result (a benchmark's one figure per GPU): once
        ``min_peers`` + 1 units reported, the one ``factor`` x slower than the median of the rest
        is slow at once. Other points are running speeds: like a node's step time, the unit must
        stay slow for ``duration`` (``_straggler``'s rule)."""
        cfg = self.straggler
        # one group per way of printing: the matcher, what the figure is (its words) and its unit
        metric = "".join(ch for ch in str(fact.get("metric") or "").lower() if ch.isalpha())[:40]
        key = f"peer:{fact.get('matcher') or '-'}/{metric}/{str(fact.get('unit') or '').lower()}:{peer}"
        if not fact.get("final"):
            return self._straggler(job, attempt, a, key, cost, fact)
        a.times.setdefault(key, deque(maxlen=cfg.window)).append(cost)
        mine = {k: statistics.median(v) for k, v in a.times.items() if k.startswith(key.rsplit(":", 1)[0] + ":") and v}
        if len(mine) < cfg.min_peers + 1:
            return []
        for k, c in mine.items():
            rest = [v for kk, v in mine.items() if kk != k]
            typical = statistics.median(rest)
            if typical <= 0 or k in a.reported_slow or c < cfg.factor * typical:
                continue
            a.reported_slow.add(k)
            who = k.rsplit(":", 1)[1]
            attrs = {
                "job": job,
                "attempt": attempt,
                "scope": "job",
                "peer": who,
                "ratio": round(c / typical, 3),
                "step_time": round(c, 6),
                "peer_step_time": round(typical, 6),
                "peers": len(mine),
                "evidence": f"{fact.get('matcher') or 'progress'}: unit {who} at x{c / typical:.2f} the cost of its {len(rest)} peers",
            }
            return [Fact.make("slow_node", attrs, fact.at, "straggler-tracker")]
        return []

    def bound_for(self, a: _Attempt) -> tuple[float | None, bool]:
        if self.hang.bound:
            return self.hang.bound, False
        if a.gaps >= self.hang.min_samples:
            return max(self.hang.min_bound, self.hang.factor * a.max_gap), True
        return None, False

    def due(self, now: float) -> Iterator[Fact]:
        """Stall facts for attempts silent past their bound (once per silence), in the order the
        attempts became known. Only attempts whose deadline has come are looked at: one that
        is not running (``require_running``) or already reported is dropped from the deadlines
        until the scheduler says it runs or it makes progress again."""
        heap, ready, later = self._deadlines, [], []
        while heap and heap[0][0] <= now:
            _, _, key, a = heapq.heappop(heap)
            a.queued = False
            if self.attempts.get(key) is not a:
                continue  # forgotten (or a new attempt under the same key, queued on its own)
            if self.hang.require_running and self.running.get(key[0]) != (key[1], True):
                continue
            bound, learned = self.bound_for(a)
            if bound is None:
                continue
            if now - a.last_at > bound:
                if a.stalled_at != a.last_at:
                    ready.append((a.seq, key, a, bound, learned))
            else:
                later.append((key, a))  # its deadline moved on since it was queued
        for key, a in later:
            self._queue(key, a)
        for _, (job, attempt), a, bound, learned in sorted(ready, key=lambda r: r[0]):
            idle = now - a.last_at
            a.stalled_at = a.last_at
            yield Fact.make(
                "stall",
                {
                    "job": job,
                    "attempt": attempt,
                    "idle_s": round(idle, 3),
                    "bound_s": round(bound, 3),
                    "learned": learned,
                    "last_step": a.step,
                    "last_checkpoint": a.checkpoint,
                },
                now,
                "hang-tracker",
            )

    def forget(self, job: str, attempt: int) -> None:
        self.attempts.pop((job, attempt), None)
        self.tables.forget(job, attempt)


def _is_time(fact: Fact) -> bool:
    """Whether a printed unit's figure is a time (rather than a rate)."""
    unit = fact.get("unit")
    return isinstance(unit, str) and "/" not in unit and "flop" not in unit.lower()


def _group(key: str) -> str:
    """Which units a unit is compared with: a printed unit with the others of its way of
    printing; nodes and ranks with each other."""
    return key.rsplit(":", 1)[0] if key.startswith("peer:") else ""


def _cost(fact: Any) -> float | None:
    """Seconds per step (or, from a throughput, its inverse): larger is slower; None if absent.
    ``fact``: a Fact, or a mapping of the same names (a touch's speed figures)."""
    value, unit = fact.get("value"), fact.get("unit")
    if isinstance(value, (int, float)) and isinstance(unit, str):
        return unit_cost(float(value), unit)
    for name, scale in _SPEED:
        v = fact.get(name)
        if isinstance(v, (int, float)) and v > 0:
            return float(v) * scale if scale > 0 else 1.0 / float(v)
    return None
