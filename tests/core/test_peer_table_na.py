"""Cells printed N/A in a table of peers (engine.core.peer_table): nvbandwidth prints N/A on a
matrix's diagonal; such a cell is no link and no figure, and the rest of the table is read."""

from __future__ import annotations

from engine.core.peer_table import PeerTables
from engine.facts import Fact


def part(line: int, **attrs: object) -> Fact:
    return Fact.make("progress", {"job": "1", "attempt": 0, "matcher": "m", **attrs}, 0.0, f"slurm-1.out:{line}")


def read(facts: list[Fact]) -> list[Fact]:
    t = PeerTables(1.5, 3)
    return [c for f in facts for c in t.observe("1", 0, f)]


def na_matrix(link) -> list[Fact]:
    n = 6
    out = [part(1, table="matrix", unit="GB/s")]
    for i in range(n):
        cells = "  ".join("N/A" if i == j else f"{link(i, j):.2f}" for j in range(n))
        out.append(part(3 + i, table="row", peer=str(i), cells=cells))
    return out


def test_a_matrix_with_na_on_its_diagonal_names_the_device_whose_links_are_low():
    (slow,) = read(na_matrix(lambda i, j: 2.2 if 4 in (i, j) else 24.0))
    assert (slow.get("peer"), slow.get("node"), slow.get("peers")) == ("4", None, 6)
    assert slow.get("ratio") > 5


def test_a_healthy_matrix_with_na_on_its_diagonal_says_nothing():
    # two groups of three GPUs: within a group ~26 GB/s, across ~22 GB/s
    assert read(na_matrix(lambda i, j: 26.3 if (i < 3) == (j < 3) else 22.0)) == []


def test_a_row_of_na_only_gives_no_figure_and_no_verdict():
    facts = [part(1, table="matrix", unit="GB/s")]
    facts += [part(3 + i, table="row", peer=str(i), cells="  ".join(["N/A"] * 4)) for i in range(4)]
    assert read(facts) == []


def test_a_per_unit_column_skips_a_unit_printed_na():
    facts = [part(10, table="header", cols="step_time data_time")]
    rows = [("0", "1.00  0.01"), ("1", "1.02  N/A"), ("2", "0.98  0.02"), ("3", "3.10  0.01"), ("4", "1.01  0.02")]
    facts += [part(11 + i, table="row", peer=p, cells=c) for i, (p, c) in enumerate(rows)]
    (slow,) = read(facts)
    assert slow.get("peer") == "3"
