"""Figures measured between pairs of hosts (engine.core.peer_table, kind ``pair``): the host
every one of whose pairs is slow against the pairs it is not in is named, as printed, with no
node; one slow pair, equal pairs, or too few other pairs name nobody."""

from __future__ import annotations

from engine.core.peer_table import PeerTables
from engine.facts import Fact


def pair(line: int, a: str, b: str, value: float, unit: str = "") -> Fact:
    attrs = {"job": "1", "attempt": 0, "matcher": "peers_pair_row", "table": "pair"}
    attrs.update({"host_a": a, "host_b": b, "value": str(value), "unit": unit})
    return Fact.make("progress", attrs, 0.0, f"slurm-1.out:{line}")


def read(rows: list[tuple[str, str, float]], unit: str = "", first: int = 1) -> list[Fact]:
    t = PeerTables(1.5, 3)
    return [c for i, (a, b, v) in enumerate(rows) for c in t.observe("1", 0, pair(first + i, a, b, v, unit))]


def test_the_host_shared_by_every_slow_pair_is_named_with_no_node():
    # the shape of nccl-tests#106: two pairs of gn644 slow, one other pair slow across a switch
    rows = [("gn644", "gn699", 49.36), ("gn632", "gn641", 88.36), ("gn284", "gn678", 49.28)]
    rows += [("gn641", "gn644", 49.30), ("gn404", "gn699", 86.81)]
    (slow,) = read(rows)
    assert (slow.get("peer"), slow.get("node"), slow.get("scope")) == ("gn644", None, "job")
    assert slow.get("ratio") > 1.5


def test_pairs_at_equal_bandwidth_name_nobody():
    rows = [("h1", "h2", 23.5), ("h1", "h3", 23.4), ("h2", "h3", 23.6), ("h3", "h4", 23.5), ("h2", "h4", 23.5)]
    assert read(rows, "GB/s") == []


def test_one_slow_pair_names_nobody():
    rows = [("h1", "h2", 88.4), ("h3", "h4", 87.9), ("h5", "h6", 48.1), ("h7", "h8", 88.1), ("h1", "h3", 88.0)]
    assert read(rows) == []


def test_a_time_is_a_cost_so_the_host_of_the_high_figures_is_slow():
    rows = [("c1", "c2", 12.1), ("c3", "c4", 12.0), ("c5", "c6", 12.3), ("c7", "c2", 30.8), ("c7", "c4", 31.9)]
    (slow,) = read(rows, "s")
    assert slow.get("peer") == "c7"
    # the same figures as a bandwidth: the high ones are the fast pairs, nobody is slow
    assert read(rows, "GB/s") == []


def test_too_few_other_pairs_name_nobody():
    # gn644's two pairs are slow, but only two pairs do not hold it (table_min_peers is 3)
    rows = [("gn644", "gn699", 49.3), ("gn632", "gn641", 88.3), ("gn641", "gn644", 49.3), ("gn404", "gn699", 86.8)]
    assert read(rows) == []


def test_rows_far_apart_are_two_tables():
    rows = [("gn644", "gn699", 49.36), ("gn632", "gn641", 88.36), ("gn284", "gn678", 88.28)]
    later = [("gn641", "gn644", 49.30), ("gn404", "gn699", 86.81)]
    t = PeerTables(1.5, 3)
    out = [c for i, (a, b, v) in enumerate(rows) for c in t.observe("1", 0, pair(1 + i, a, b, v))]
    out += [c for i, (a, b, v) in enumerate(later) for c in t.observe("1", 0, pair(50 + i, a, b, v))]
    assert out == []


def _by_hand(rows: list[tuple[str, str, float]], factor: float, min_peers: int) -> str | None:
    """The slow host of a pair table of rates, from its definition: every pair a host is in at
    ``factor`` x the median cost of the pairs it is not in (the last figure of a pair counts)."""
    table = {f"{a}\t{b}": 1.0 / v for a, b, v in rows}
    best: tuple[str, float] | None = None
    for host in dict.fromkeys(h for k in table for h in k.split("\t")):  # a tie goes to the first seen
        mine = [c for k, c in table.items() if host in k.split("\t")]
        rest = sorted(c for k, c in table.items() if host not in k.split("\t"))
        if len(mine) < 2 or len(rest) < min_peers:
            continue
        typical = rest[len(rest) // 2] if len(rest) % 2 else (rest[len(rest) // 2 - 1] + rest[len(rest) // 2]) / 2
        if min(mine) >= factor * typical and (best is None or min(mine) / typical > best[1]):
            best = (host, min(mine) / typical)
    return best[0] if best else None


def test_the_verdict_kept_as_rows_come_is_the_verdict_from_the_whole_table():
    # random tables (a fixed seed), some with one slow host, some with pairs printed twice: the
    # table judged row by row names the host the definition names on the rows up to that point
    import random

    rng = random.Random(20)
    named = 0
    for _ in range(300):
        hosts = [f"h{i}" for i in range(rng.randint(3, 9))]
        slow = rng.choice(hosts) if rng.random() < 0.6 else None
        rows: list[tuple[str, str, float]] = []
        t = PeerTables(1.5, 3)
        got: str | None = None
        for i in range(rng.randint(3, 30)):
            a, b = rng.sample(hosts, 2)
            v = rng.uniform(80.0, 90.0) / (rng.uniform(2.0, 3.0) if slow in (a, b) else 1.0)
            rows.append((a, b, v))
            out = t.observe("1", 0, pair(1 + i, a, b, v))
            if out and got is None:
                got = str(out[0].get("peer"))
                assert got == _by_hand(rows, 1.5, 3), rows
            elif got is None:
                assert _by_hand(rows, 1.5, 3) is None, rows
        named += got is not None
    assert named > 50  # the random tables do name hosts, so the comparison is not all None
