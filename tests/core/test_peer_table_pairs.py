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
