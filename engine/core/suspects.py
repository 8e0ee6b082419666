"""Attribution: which ranks of a job attempt a collective timeout points at (suspects, not verdicts).

Every rank prints that a collective timed out; what tells them apart is where each one stopped.
``RankEvidence`` keeps, per job attempt and outside the Rete (a 1,000-rank job prints 1,000
such lines), what each rank said: the collective it timed out on, how far it got ("last
enqueued / last completed NCCL work"), a stuck watchdog, the host of its NCCL init line and the
communicator's size. When the attempt's incident closes, ``suspects`` reads that with the rank
signals of other sources (``rank_signal`` facts: flight-recorder dumps) and names:

- ``watchdog_behind``: a rank whose last enqueued work (or timed-out sequence) is behind its
  peers' in the same process group, when such ranks are the minority;
- ``never_reported``: a rank of the world that said nothing while its peers reported the
  timeout (a stopped or dead process says least), when at most ``max_silent`` of the world is
  silent (more is a log that holds only some ranks' output, not a culprit);
- ``watchdog_stuck``: a rank whose watchdog hung in a CUDA/NCCL call, when the minority;
- ``peer_common``: the node whose address (its NCCL bootstrap line) the transport errors of at
  least two other hosts of the job name as their peer (a node, with no one rank);
- any rank signal a source gave.

Each suspect carries its own signals, and a node only where the attempt's rank map (confirmed by
the scheduler's allocation: ``core.rankmap``) says so.

    ev = RankEvidence(); ev.observe(fact, alloc=("n1", "n2"))
    found = suspects(ev.get("42", 0), [signal_of(f) for f in rank_signal_facts], max_silent=0.25)
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from engine.core.rank_signals import MAX_RANK, RankSignal
from engine.core.rankmap import RankMap, build_rank_map
from engine.facts import NODE_RE, Fact, clean_text

__all__ = ["RankEvidence", "AttemptRanks", "suspects", "suspect_nodes", "MAX_SUSPECTS"]

#: ranks remembered per attempt, attempts remembered, suspects named per incident
MAX_RANKS_KEPT = 4096
MAX_ATTEMPTS = 256
MAX_SUSPECTS = 16
#: the largest world whose silent ranks are enumerated
MAX_WORLD_SCANNED = 1 << 16


@dataclass
class _Report:
    rank: int
    kinds: set[str] = field(default_factory=set)
    seq: int | None = None  # the work it timed out on
    last_enqueued: int | None = None
    last_completed: int | None = None
    pg: str = "0"
    origin: str = ""
    text: str = ""


@dataclass
class AttemptRanks:
    """What the ranks of one attempt said (see the module doc)."""

    reports: dict[int, _Report] = field(default_factory=dict)
    printed: dict[int, str] = field(default_factory=dict)  # rank -> host its NCCL init line named
    world: int | None = None
    alloc: tuple[str, ...] = ()
    tasks_per_node: str | None = None
    dropped: int = 0  # ranks past MAX_RANKS_KEPT
    #: transport errors: peer address -> the hosts that reported an error with it (and a line)
    peers: dict[str, dict[str, str]] = field(default_factory=dict)
    addrs: dict[str, set[str]] = field(default_factory=dict)  # address -> the hosts whose bootstrap named it


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1 << 53 else None


class RankEvidence:
    """Per job attempt, what the ranks' own lines say; bounded (attempts and ranks)."""

    def __init__(self) -> None:
        self.attempts: OrderedDict[tuple[str, int], AttemptRanks] = OrderedDict()

    def _of(self, job: str, attempt: int) -> AttemptRanks:
        key = (job, attempt)
        a = self.attempts.get(key)
        if a is None:
            a = self.attempts[key] = AttemptRanks()
            while len(self.attempts) > MAX_ATTEMPTS:
                self.attempts.popitem(last=False)
        else:
            self.attempts.move_to_end(key)
        return a

    def allocation(self, job: str, attempt: int, nodes: Sequence[str], tasks_per_node: str | None = None) -> None:
        """The scheduler's allocation of an attempt, in its order (and its task layout, if known)."""
        if nodes:
            a = self._of(job, attempt)
            a.alloc = tuple(n for n in nodes if NODE_RE.match(str(n)))
            if tasks_per_node:
                a.tasks_per_node = tasks_per_node

    def get(self, job: str, attempt: int) -> AttemptRanks | None:
        return self.attempts.get((job, attempt))

    def observe(self, fact: Fact, alloc: Iterable[str] = ()) -> None:
        """A log fact whose matcher marks it ``rank_evidence``; ``alloc``: the nodes the cluster
        says the attempt holds now (kept when the scheduler's ordered list is not known)."""
        kind, job, rank = fact.get("rank_evidence"), fact.get("job"), _int(fact.get("rank"))
        if kind is None or job is None:
            return
        a = self._of(str(job), int(fact.get("attempt") or 0))
        if not a.alloc:
            known = sorted(alloc, key=_natural)
            if known:
                a.alloc = tuple(known)
        if kind == "addr":  # the address a host's bootstrap line names (the host prefix: ``node``)
            self._transport(a, "addr", fact.get("node"), fact.get("addr"), fact.origin)
            return
        if rank is None or rank > MAX_RANK:
            return
        if kind == "comm":
            nranks = _int(fact.get("nranks"))
            if nranks is None or nranks > MAX_RANK or rank >= nranks:
                return
            if a.world is None or nranks > a.world:
                a.world = nranks
                a.printed = {r: h for r, h in a.printed.items() if r < nranks}
            host = fact.get("node")
            if nranks == a.world and isinstance(host, str) and len(a.printed) < MAX_RANKS_KEPT:
                if a.printed.get(rank, host) != host:
                    a.printed[rank] = "?"  # one rank, two hosts: no host the map can agree with
                else:
                    a.printed[rank] = host
            return
        rep = a.reports.get(rank)
        if rep is None:
            if len(a.reports) >= MAX_RANKS_KEPT:
                a.dropped += 1
                return
            rep = a.reports[rank] = _Report(rank, origin=fact.origin, text=str(fact.get("text") or "")[:200])
        rep.kinds.add(str(kind))
        if fact.get("pg") is not None:
            rep.pg = str(fact.get("pg"))[:16]
        for name in ("seq", "last_enqueued", "last_completed"):
            v = _int(fact.get(name))
            if v is not None:
                setattr(rep, name, v)
        sender = _int(fact.get("from_rank"))
        if kind == "dump" and sender is not None and sender <= MAX_RANK and sender not in a.reports:
            if len(a.reports) < MAX_RANKS_KEPT:  # the rank that sent the dump signal timed out
                a.reports[sender] = _Report(sender, {"timeout"}, origin=fact.origin, pg=rep.pg)

    def peer(self, job: str, attempt: int, host: str, peer: str, origin: str, alloc: Iterable[str] = ()) -> None:
        """A transport error that ``host`` (a node of the job, as the line converter allowed it)
        got from ``peer`` (an address, as printed); repeats of one line come here from its flood."""
        a = self._of(job, attempt)
        if not a.alloc:
            a.alloc = tuple(sorted(alloc, key=_natural))
        self._transport(a, "peer", host, peer, origin)

    @staticmethod
    def _transport(a: AttemptRanks, kind: str, host: Any, raw: Any, origin: str) -> None:
        if not isinstance(host, str) or not isinstance(raw, str):
            return
        addr = raw.split("<", 1)[0].strip()[:64]
        if not addr:
            return
        if not _IP.fullmatch(addr):  # a host name (n2.cluster): its short name, as node names are
            addr = addr.split(".", 1)[0]
        if kind == "addr":
            if addr in a.addrs or len(a.addrs) < MAX_RANKS_KEPT:
                a.addrs.setdefault(addr, set()).add(host)
        elif addr in a.peers or len(a.peers) < MAX_RANKS_KEPT:
            reporters = a.peers.setdefault(addr, {})
            if len(reporters) < 64:
                reporters.setdefault(host, origin)


def _common_peer(ranks: AttemptRanks) -> tuple[str, str, dict[str, str]] | None:
    """(node, address, reporters) of the one peer that transport errors from at least two other
    hosts of the job name, where its address is a node's of the allocation by its bootstrap line."""
    named = {addr: dict(rep.items()) for addr, rep in ranks.peers.items()}
    best = sorted(((len(rep), addr) for addr, rep in named.items()), reverse=True)
    if not best or best[0][0] < 2 or (len(best) > 1 and best[1][0] == best[0][0]):
        return None
    addr = best[0][1]
    # an address is a node's where the job's bootstrap line of that node says so; a name is the
    # node of the allocation it names (the job's own text may name only its own nodes)
    hosts = ranks.addrs.get(addr) or ({addr} if not _IP.fullmatch(addr) else set())
    if len(hosts) != 1:
        return None  # no host, or several hosts, say they use it
    node = next(iter(hosts))
    if node not in ranks.alloc:
        return None
    reporters = {h: o for h, o in named[addr].items() if h != node}
    return (node, addr, reporters) if len(reporters) >= 2 else None


#: an IPv4 or IPv6 address, as NCCL prints one (a host name is anything else)
_IP = re.compile(r"[0-9.]+|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*")


def _natural(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _behind(reports: Sequence[_Report]) -> list[tuple[_Report, str]]:
    """Ranks behind their peers of the same process group, where they are the minority."""
    out: list[tuple[_Report, str]] = []
    groups: dict[str, list[_Report]] = {}
    for r in reports:
        groups.setdefault(r.pg, []).append(r)
    for pg, members in groups.items():
        for measure, words in (("last_enqueued", "last enqueued NCCL work"), ("seq", "timed out on work")):
            have = [(r, getattr(r, measure)) for r in members if getattr(r, measure) is not None]
            if len(have) < 2:
                continue
            top = max(v for _, v in have)
            late = [(r, v) for r, v in have if v < top]
            if late and len(late) * 2 < len(have):
                for r, v in late:
                    out.append((r, f"pg {pg}: {words} {v}, {len(have) - len(late)} peers at {top}"))
    return out


def suspects(
    ranks: AttemptRanks | None,
    signals: Iterable[RankSignal] = (),
    *,
    max_silent: float = 0.25,
    rank_map: RankMap | None = None,
) -> tuple[list[dict[str, Any]], RankMap]:
    """The suspects of one attempt: ``[{rank, node, signals: [{signal, detail, origin}]}]``, at
    most MAX_SUSPECTS, lowest rank first (a node the transport errors point at has rank None);
    and the rank map their nodes came from."""
    ranks = ranks or AttemptRanks()
    found: dict[int, list[dict[str, str]]] = {}

    def add(rank: int, signal: str, detail: str, origin: str) -> None:
        sigs = found.setdefault(rank, [])
        if len(sigs) < 8 and not any(s["signal"] == signal and s["origin"] == origin for s in sigs):
            sigs.append({"signal": signal, "detail": clean_text(detail, 240), "origin": clean_text(origin, 240)})

    reports = list(ranks.reports.values())
    for r, why in _behind(reports):
        add(r.rank, "watchdog_behind", why, r.origin)
    stuck = [r for r in reports if "stuck" in r.kinds]
    if stuck and (len(stuck) * 2 < len(reports) or len(stuck) == 1):
        for r in stuck:
            add(r.rank, "watchdog_stuck", "its NCCL watchdog hung in a CUDA/NCCL call", r.origin)
    world = ranks.world
    reported = {r.rank for r in reports if r.kinds & {"timeout", "dump", "stuck"}}
    if world is not None and reported and world <= MAX_WORLD_SCANNED:
        silent = [n for n in range(world) if n not in reported]
        if silent and len(silent) <= max(1, int(max_silent * world)) and len(silent) < world:
            first = min(reports, key=lambda rep: rep.rank)
            for n in silent:
                add(
                    n,
                    "never_reported",
                    f"{len(reported)} of {world} ranks reported the timeout; rank {n} said nothing",
                    first.origin,
                )
    for sig in signals:
        add(sig.rank, sig.signal, sig.detail, sig.origin)
    if rank_map is None:
        printed = {r: h for r, h in ranks.printed.items() if h != "?"}
        rank_map = build_rank_map(ranks.alloc, ranks.tasks_per_node, world, printed)
        if any(h == "?" for h in ranks.printed.values()) and rank_map.trusted:
            rank_map = RankMap(rank_map.alloc, why="a rank's lines name two hosts: the map names no node")
    out: list[dict[str, Any]] = []
    for rank in sorted(found)[:MAX_SUSPECTS]:
        out.append({"rank": rank, "node": rank_map.node_of(rank), "signals": found[rank]})
    common = _common_peer(ranks)
    if common is not None and len(out) < MAX_SUSPECTS:
        node, addr, reporters = common
        # a node, not a rank: the transport errors of its peers name its address
        out.append(
            {
                "rank": None,
                "node": node,
                "signals": [
                    {
                        "signal": "peer_common",
                        "detail": clean_text(
                            f"{len(reporters)} hosts ({', '.join(sorted(reporters)[:4])}) got transport errors "
                            f"from peer {addr}, "
                            + (f"the address {node}'s bootstrap line names" if addr != node else "a node of the job"),
                            240,
                        ),
                        "origin": clean_text(next(iter(reporters.values())), 240),
                    }
                ],
            }
        )
    return out, rank_map


def suspect_nodes(found: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The nodes of a list of suspects (those the rank map named), sorted, each once."""
    return tuple(sorted({str(s["node"]) for s in found if s.get("node") and NODE_RE.match(str(s["node"]))}))
