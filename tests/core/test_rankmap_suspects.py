"""Rank -> node maps and suspects from the ranks' own lines (issue 21), pure and fast.

Wordings are PyTorch's and NCCL's as printed in public reports:
https://github.com/OpenRLHF/OpenRLHF/issues/1126 (dump signal from rank N, last enqueued/completed),
https://github.com/NVIDIA/nccl/issues/1814 (NCCL INFO comm ... rank R nranks N ... Init COMPLETE)."""

from __future__ import annotations

import pytest

from engine.core.rank_signals import RankSignal
from engine.core.rankmap import build_rank_map, parse_tasks_per_node
from engine.core.suspects import RankEvidence, suspect_nodes, suspects
from engine.facts import Fact


@pytest.mark.parametrize(
    "text,want",
    [
        ("2(x3),1", (2, 2, 2, 1)),
        ("4", (4,)),
        (" 1,2 ", (1, 2)),
        ("", None),
        ("x", None),
        ("2(x99999999)", None),
        ("0", None),
        ("9999999(x9999)", None),
    ],
)
def test_tasks_per_node(text, want):
    assert parse_tasks_per_node(text) == want


def test_block_layout_from_the_scheduler():
    m = build_rank_map(("n1", "n2", "n3"), "2(x2),1")
    assert [m.node_of(r) for r in range(6)] == ["n1", "n1", "n2", "n2", "n3", None]


def test_even_split_when_the_world_size_is_known_and_divides():
    m = build_rank_map(("n1", "n2"), world=4)
    assert [m.node_of(r) for r in range(4)] == ["n1", "n1", "n2", "n2"]
    assert not build_rank_map(("n1", "n2"), world=3).trusted  # no layout, no printed hosts


def test_printed_map_agreeing_with_the_scheduler_is_kept():
    m = build_rank_map(("n1", "n2"), "2(x2)", printed={0: "n1", 3: "n2"})
    assert m.trusted and m.node_of(3) == "n2"


def test_printed_map_that_disagrees_names_no_node():
    m = build_rank_map(("n1", "n2"), "2(x2)", printed={3: "n1"})
    assert not m.trusted and m.node_of(3) is None and "rank 3" in m.why


def test_printed_host_outside_the_allocation_names_no_node():
    m = build_rank_map(("n1", "n2"), printed={0: "n1", 1: "n9"})
    assert not m.trusted and m.node_of(0) is None and "n9" in m.why


def test_no_allocation_names_no_node():
    assert build_rank_map((), "2", printed={0: "n1"}).node_of(0) is None


def _log(rank, kind, job="7", attempt=0, **attrs):
    return Fact.make(
        "log",
        {"rank_evidence": kind, "job": job, "attempt": attempt, "rank": rank, **attrs},
        100.0,
        f"slurm-7.out:{rank}",
    )


def _world(ev, hosts):
    for r, h in enumerate(hosts):
        ev.observe(_log(r, "comm", node=h, nranks=len(hosts)))


def test_a_silent_rank_among_reporting_peers_is_the_suspect_with_its_node():
    ev = RankEvidence()
    ev.allocation("7", 0, ("n1", "n2"))
    _world(ev, ["n1", "n1", "n2", "n2"])
    for r in (0, 1, 2):
        ev.observe(_log(r, "timeout", seq=20011))
    found, m = suspects(ev.get("7", 0))
    assert m.trusted
    assert [(s["rank"], s["node"], [g["signal"] for g in s["signals"]]) for s in found] == [
        (3, "n2", ["never_reported"])
    ]
    assert suspect_nodes(found) == ("n2",)


def test_the_rank_behind_its_peers_is_named():
    ev = RankEvidence()
    ev.allocation("7", 0, ("n1", "n2"))
    _world(ev, ["n1", "n1", "n2", "n2"])
    for r in range(4):
        ev.observe(_log(r, "dump", last_enqueued=1259 if r == 1 else 1261, last_completed=1259))
    found, _ = suspects(ev.get("7", 0))
    assert [(s["rank"], s["node"]) for s in found] == [(1, "n1")]
    assert found[0]["signals"][0]["signal"] == "watchdog_behind"


def test_all_ranks_alike_names_nobody():
    ev = RankEvidence()
    _world(ev, ["n1", "n1", "n2", "n2"])
    for r in range(4):
        ev.observe(_log(r, "timeout", seq=5))
    assert suspects(ev.get("7", 0))[0] == []


def test_many_silent_ranks_are_no_suspects():
    ev = RankEvidence()
    _world(ev, ["n1"] * 8)
    ev.observe(_log(0, "timeout", seq=5))
    assert suspects(ev.get("7", 0), max_silent=0.25)[0] == []


def test_a_printed_map_disagreeing_with_the_scheduler_keeps_the_suspect_without_a_node():
    ev = RankEvidence()
    ev.allocation("7", 0, ("n1", "n2"), "2(x2)")
    _world(ev, ["n2", "n2", "n1", "n1"])  # the printed hosts contradict the block layout
    for r in (0, 1, 2):
        ev.observe(_log(r, "timeout", seq=3))
    found, m = suspects(ev.get("7", 0))
    assert [(s["rank"], s["node"]) for s in found] == [(3, None)] and not m.trusted


def test_rank_signals_of_other_sources_are_suspects_of_their_own():
    found, _ = suspects(None, [RankSignal(5, "fr_not_joined", "pg 0 seq 9", "/fr/rank_5")])
    assert found == [
        {
            "rank": 5,
            "node": None,
            "signals": [{"signal": "fr_not_joined", "detail": "pg 0 seq 9", "origin": "/fr/rank_5"}],
        }
    ]


def test_hostile_numbers_are_ignored():
    ev = RankEvidence()
    ev.observe(_log(10**12, "timeout"))
    ev.observe(_log(1, "comm", node="n1", nranks=10**12))
    a = ev.get("7", 0)
    assert a is None or (not a.reports and a.world is None)


class _Peers:
    """The engine's way in for transport errors: RankEvidence.peer."""

    def __init__(self, ev):
        self.ev = ev

    def observe(self, fact):
        self.ev.peer("7", 0, fact.get("node"), fact.get("peer"), fact.origin)


def _peer(host, peer, job="7"):
    return Fact.make("log", {"job": job, "attempt": 0, "node": host, "peer": peer}, 100.0, f"slurm-7.out:{host}")


def _addr(host, addr):
    return Fact.make(
        "log",
        {"rank_evidence": "addr", "job": "7", "attempt": 0, "node": host, "addr": addr},
        99.0,
        f"slurm-7.out:b{host}",
    )


def test_the_node_common_to_the_failing_pairs_is_a_suspect():
    ev = RankEvidence()
    ev.allocation("7", 0, ("n1", "n2", "n3"))
    for h, a in (("n1", "10.0.0.1"), ("n2", "10.0.0.2"), ("n3", "10.0.0.3")):
        ev.observe(_addr(h, a))
    _Peers(ev).observe(_peer("n1", "10.0.0.2<33092>"))
    _Peers(ev).observe(_peer("n3", "10.0.0.2<41000>"))
    _Peers(ev).observe(_peer("n2", "10.0.0.1<5000>"))  # the bad node names some peer of its own
    found, _ = suspects(ev.get("7", 0))
    assert [(s["rank"], s["node"], s["signals"][0]["signal"]) for s in found] == [(None, "n2", "peer_common")]


@pytest.mark.parametrize(
    "addrs",
    [
        (("n1", "10.0.0.1"), ("n3", "10.0.0.3")),  # nobody's bootstrap names the address
        (("n2", "10.0.0.2"), ("n9", "10.0.0.2")),  # two hosts claim it
        (("n9", "10.0.0.2"),),  # a host outside the allocation claims it
    ],
)
def test_a_peer_address_no_single_node_of_the_allocation_owns_names_no_node(addrs):
    ev = RankEvidence()
    ev.allocation("7", 0, ("n1", "n2", "n3"))
    for h, a in addrs:
        ev.observe(_addr(h, a))
    _Peers(ev).observe(_peer("n1", "10.0.0.2<1>"))
    _Peers(ev).observe(_peer("n3", "10.0.0.2<2>"))
    assert suspects(ev.get("7", 0))[0] == []


def test_one_reporter_is_not_enough():
    ev = RankEvidence()
    ev.allocation("7", 0, ("n1", "n2"))
    ev.observe(_addr("n2", "10.0.0.2"))
    _Peers(ev).observe(_peer("n1", "10.0.0.2<1>"))
    assert suspects(ev.get("7", 0))[0] == []
