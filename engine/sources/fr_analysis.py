"""Which ranks the flight-recorder dumps of one job attempt point at (``RankSignal`` values).

A collective needs every rank of its process group: when it hangs, the ranks that joined it
wait, and their dumps show it pending; the rank that caused it shows something else. Per process
group (its name and its ranks, as each rank's ``pg_config`` says) and per collective sequence
number, this names:

* ``fr_not_joined``: the group's ranks wait on collective S, and this rank never issued S (its
  last enqueued is before S) and is not itself waiting elsewhere; for a p2p operation, the peer
  that posted no matching send or recv and waits on nothing;
* ``fr_no_pending``: this rank issued S (or completed it) and has no pending work at all, while
  its peers wait on S;
* ``fr_mismatch``: this rank waits at S on another operation (or sizes) than a strict majority of
  the group's ranks;
* ``fr_no_dump``: a member of a stuck group wrote no dump (a stopped or dead rank writes none),
  named only where at most half of the group's members lack one (otherwise the dumps given are
  incomplete, which says nothing about a rank).

A rank that waits in another group or on a p2p peer is a victim of that wait, never named for the
collective it did not reach: the group it waits in names the cause. Suspects, not verdicts:
attribution weighs these with the other evidence.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

from engine.core.rank_signals import RankSignal, rank_signal_fact
from engine.facts import Fact, clean_text
from engine.sources.flight_recorder import Dump, Entry

__all__ = ["analyze", "dumps_time", "signal_facts", "format_ranks", "NOT_JOINED", "NO_PENDING", "MISMATCH", "NO_DUMP"]

NOT_JOINED = "fr_not_joined"
NO_PENDING = "fr_no_pending"
MISMATCH = "fr_mismatch"
NO_DUMP = "fr_no_dump"

Key = tuple[str, tuple[int, ...]]  # a process group: its name and its global ranks


def format_ranks(ranks: Iterable[int], limit: int = 8) -> str:
    """ "rank 7", "ranks 0-6", "ranks 0-3,5,8-9"; past ``limit`` runs, "... (N ranks)"."""
    rs = sorted(set(ranks))
    runs: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        runs.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    text = ",".join(runs[:limit]) + (f",... ({len(rs)} ranks)" if len(runs) > limit else "")
    return ("rank " if len(rs) == 1 else "ranks ") + text


@dataclass
class _View:
    """One rank's part in one process group."""

    dump: Dump
    coll: list[Entry] = field(default_factory=list)
    p2p: list[Entry] = field(default_factory=list)
    enqueued: int = 0
    completed: int = 0

    def pending_seqs(self) -> list[int]:
        return sorted({e.seq for e in self.coll if e.pending})

    def at(self, seq: int) -> list[Entry]:
        return sorted((e for e in self.coll if e.seq == seq), key=lambda e: (e.op_id, e.record_id))


def _op_key(entries: Sequence[Entry]) -> tuple:
    """What a rank did at one sequence number, compared across ranks: the operations, and their
    sizes where every rank's must agree (not the *_v collectives, which take per-rank sizes)."""
    return tuple((e.op, () if e.op.endswith("_v") or "all_to_all" in e.op else e.sizes) for e in entries)


def _describe_op(key: tuple) -> str:
    return "+".join(op + (f" {list(map(list, sizes))}" if sizes else "") for op, sizes in key)[:160]


class _Job:
    def __init__(self, dumps: Sequence[Dump]) -> None:
        self.dumps = {d.rank: d for d in dumps}
        self.views: dict[Key, dict[int, _View]] = defaultdict(dict)
        self.desc: dict[Key, str] = {}
        #: per rank, the groups it has pending work in (collective or p2p)
        self.pending_in: dict[int, set[Key]] = defaultdict(set)
        for d in dumps:
            self._add(d)
        for key, views in self.views.items():
            for r in key[1]:
                other = self.dumps.get(r)
                # a member whose dump lists no group of that name never used it: nothing issued
                # there (PyTorch records a group when the rank first makes its communicator); one
                # that lists the name with other ranks sees another group, and is not judged here
                if other is not None and r not in views and key[0] not in other.groups:
                    views[r] = _View(other)

    def _add(self, d: Dump) -> None:
        keys: dict[str, Key] = {}
        for name, g in d.groups.items():
            if d.rank in g.ranks:  # a group this rank is no member of holds no work of its
                keys[name] = (name, g.ranks)
                self.desc.setdefault(keys[name], g.desc)
                self.views[keys[name]][d.rank] = _View(d)
        ids: dict[str, set[int]] = defaultdict(set)
        for e in d.entries:
            key = keys.get(e.group)
            if key is None:
                continue  # a group the dump's pg_config does not describe: no members to weigh
            ids[e.group].add(e.pg_id)
            view = self.views[key][d.rank]
            (view.p2p if e.p2p else view.coll).append(e)
            if e.pending:
                self.pending_in[d.rank].add(key)
        for name, key in keys.items():
            view = self.views[key][d.rank]
            view.enqueued = max((e.seq for e in view.coll), default=0)
            view.completed = max((e.seq for e in view.coll if not e.pending), default=0)
            # pg_status covers entries the ring buffer dropped; it is keyed by the group's id,
            # which the entries name (else the id is the name, as for groups made in order)
            pg_ids = ids.get(name) or ({int(name)} if name.isdigit() else set())
            for pg in pg_ids:
                if pg in d.status:
                    enq, _, comp = d.status[pg]
                    if not view.p2p:  # p2p work may count in these too: then they say nothing
                        view.enqueued = max(view.enqueued, enq)
                    view.completed = max(view.completed, comp)

    def busy_elsewhere(self, rank: int, key: Key) -> bool:
        return bool(self.pending_in.get(rank, set()) - {key})

    def waits(self, rank: int) -> bool:
        return bool(self.pending_in.get(rank))


class _Signals:
    def __init__(self) -> None:
        self.out: list[RankSignal] = []
        self.seen: set[tuple[int, str, str]] = set()

    def add(self, rank: int, signal: str, detail: str, origin: str, group: str, seq: int | None) -> None:
        if (rank, signal, group) in self.seen:
            return
        self.seen.add((rank, signal, group))
        self.out.append(RankSignal(rank, signal, clean_text(detail), origin, group=group, seq=seq))


def _label(key: Key, desc: str) -> str:
    return f"pg {key[0]}" + (f" ({desc})" if desc and desc != "undefined" else "")


def _target(views: dict[int, _View]) -> int | None:
    """The collective the group waits on: the first pending sequence number most of its waiting
    ranks share (a tie: the later one, since a rank can only be past a collective that all did)."""
    firsts = Counter(p[0] for v in views.values() if (p := v.pending_seqs()))
    if not firsts:
        return None
    return max(firsts, key=lambda s: (firsts[s], s))


def _collectives(job: _Job, key: Key, views: dict[int, _View], sig: _Signals) -> str | None:
    """Signals of one group's stuck collective; what the group waits on, if it waits."""
    target = _target(views)
    if target is None:
        return None
    label = _label(key, job.desc.get(key, ""))
    waiting = {r for r, v in views.items() if target in v.pending_seqs()}
    joined = {r for r, v in views.items() if v.enqueued >= target}
    keys = {r: _op_key(at) for r, v in views.items() if r in joined and (at := v.at(target))}
    common = Counter(keys.values()).most_common(1)
    op_key = common[0][0] if common else ()
    op = _describe_op(op_key) if op_key else "collective"
    states = {e.state for r in waiting for e in views[r].at(target) if e.pending}
    head = f"{label} seq {target} {op.split(' ')[0]}: {format_ranks(waiting)} " + (
        states.pop() if len(states) == 1 else "waiting"
    )
    for r, v in sorted(views.items()):
        origin = v.dump.path
        if r not in joined:
            behind = v.pending_seqs()
            if job.busy_elsewhere(r, key) and not behind:
                continue  # it waits in another group: that group's wait names the cause
            where = f"still on seq {behind[0]}" if behind else "no pending work"
            sig.add(
                r,
                NOT_JOINED,
                f"{head}, rank {r} last enqueued seq {v.enqueued}, last completed seq {v.completed} ({where})",
                origin,
                key[0],
                target,
            )
        elif not job.waits(r):
            sig.add(
                r,
                NO_PENDING,
                f"{head}, rank {r} issued seq {target} and has no pending work (last completed seq {v.completed})",
                origin,
                key[0],
                target,
            )
    if len(keys) >= 3 and common and common[0][1] * 2 > len(keys):
        agree = {r for r, k in keys.items() if k == op_key}
        for r, k in sorted(keys.items()):
            if k != op_key:
                sig.add(
                    r,
                    MISMATCH,
                    f"{label} seq {target}: {format_ranks(agree)} {op}, rank {r} {_describe_op(k)}",
                    views[r].dump.path,
                    key[0],
                    target,
                )
    return head


def _p2p(job: _Job, key: Key, views: dict[int, _View], sig: _Signals) -> set[int]:
    """Signals of one group's pending sends and receives; returns the peers waited on that wrote
    no dump."""
    ranks = key[1]
    label = _label(key, job.desc.get(key, ""))
    missing: set[int] = set()
    for r, v in sorted(views.items()):
        for e in sorted((e for e in v.p2p if e.pending), key=lambda e: e.p2p_seq):
            if e.src is None or e.dst is None or max(e.src, e.dst) >= len(ranks):
                continue
            src, dst = ranks[e.src], ranks[e.dst]
            peer = dst if e.op == "send" else src
            if peer == r:
                continue
            arrow = f"{e.op} {e.src}->{e.dst}" if e.op == "send" else f"{e.op} {e.dst}<-{e.src}"
            if peer not in views:
                if peer not in job.dumps:
                    missing.add(peer)
                continue
            want = "recv" if e.op == "send" else "send"
            matched = any(
                p.pending and p.op == want and (ranks[p.src], ranks[p.dst]) == (src, dst)
                for p in views[peer].p2p
                if p.src is not None and p.dst is not None and max(p.src, p.dst) < len(ranks)
            )
            if matched or job.waits(peer):
                continue  # both wait on each other (the link), or the peer waits on someone else
            detail = (
                f"{label} p2p seq {e.p2p_seq} {arrow}: rank {r} {e.state}, rank {peer} posted no matching "
                f"{want} and has no pending work"
            )
            sig.add(peer, NOT_JOINED, detail, views[peer].dump.path, key[0], e.p2p_seq)
    return missing


def analyze(dumps: Sequence[Dump], unread: Iterable[int] = ()) -> list[RankSignal]:
    """The rank signals of one attempt's dumps (one per rank, as ``read_dumps`` gives them).
    ``unread``: ranks whose file was there but refused (``DumpRefused.rank``): never named for
    writing no dump, since they did."""
    job = _Job(dumps)
    unread = set(unread)
    sig = _Signals()
    for key, views in sorted(job.views.items()):
        stuck = _collectives(job, key, views, sig)
        peers = _p2p(job, key, views, sig)
        absent = [r for r in key[1] if r not in job.dumps]
        if not (stuck or peers) or not absent or len(absent) * 2 > len(key[1]):
            continue
        absent = [r for r in absent if r not in unread]
        if not absent:
            continue
        present = sorted(views)
        origin = views[present[0]].dump.path
        head = stuck or f"{_label(key, job.desc.get(key, ''))} p2p: {format_ranks(present)} wrote dumps"
        for r in absent:
            if stuck or r in peers:
                sig.add(r, NO_DUMP, f"{head}, rank {r} wrote no dump", origin, key[0], _target(views))
    return sorted(sig.out, key=lambda s: (s.rank, s.signal, s.group or ""))


#: a dump's file time is taken as when it was written only this long after its last entry (a
#: dump is written when the watchdog times out); a later one is a copy's time
_MTIME_SLACK_S = 3 * 3600


def dumps_time(dumps: Sequence[Dump]) -> float | None:
    """When the dumps were written, on the job's clock: the files' time where it is within a few
    hours after the last operation they recorded (a copy has a later one), else that operation's
    creation time; None for no dumps."""
    times = []
    for d in dumps:
        last = max((e.created_ns for e in d.entries), default=0) / 1e9
        try:
            mtime = os.stat(d.path).st_mtime
        except OSError:
            mtime = None
        if mtime is not None and (not last or last <= mtime <= last + _MTIME_SLACK_S):
            times.append(mtime)
        elif last:
            times.append(last)
    return max(times) if times else None


def signal_facts(signals: Iterable[RankSignal], job: str, attempt: int, at: float) -> list[Fact]:
    """The ``rank_signal`` facts of one attempt's signals (``rank_signal_fact``); a sequence
    number past what a fact holds is left out of its fact, never the signal."""
    out = []
    for sig in signals:
        if sig.seq is not None and not 0 <= sig.seq < 1 << 53:
            sig = replace(sig, seq=None)
        out.append(rank_signal_fact(sig, job, attempt, at))
    return out
