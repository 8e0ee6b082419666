"""Round 6's peer tables (engine.core.peer_table): dicts under a title (NVRx's performance
scores), a line naming the fastest and the slowest unit (Megatron's StragglerDetector), and
figures of units that do not name themselves, grouped by step. Figures are constructed in the
layouts of the sources quoted in rules/96-tests-families-r6strag.yaml."""

from __future__ import annotations

from engine.core.peer_table import MIN_EXCESS_S, STEP_GROUPS, PeerTables
from engine.facts import Fact


def part(line: int, path: str = "slurm-1.out", **attrs: object) -> Fact:
    return Fact.make("progress", {"job": "1", "attempt": 0, "matcher": "m", **attrs}, 0.0, f"{path}:{line}")


def read(facts: list[Fact], factor: float = 1.5, min_peers: int = 3, step_peers: int = 2) -> list[Fact]:
    t = PeerTables(factor, min_peers, step_peers)
    return [c for f in facts for c in t.observe("1", 0, f)]


SLOW = "0: 0.961, 1: 0.919, 2: 0.941, 3: 0.999, 4: 1.0, 5: 0.847, 6: 0.591, 7: 0.788"
EVEN = "0: 0.994, 1: 0.949, 2: 0.994, 3: 0.998, 4: 1.0, 5: 0.947, 6: 0.991, 7: 0.988"


def test_a_score_dict_under_its_title_names_the_slow_rank_once():
    facts = [
        part(1, table="dicttitle", metric="Relative section performance scores"),
        part(3, table="dictrow", peers=SLOW),
        part(4, table="dictrow", peers=SLOW),
    ]
    (slow,) = read(facts)
    assert (slow.get("peer"), slow.get("scope"), slow.get("node")) == ("6", "job", None)
    assert slow.get("ratio") >= 1.5


def test_even_scores_rows_without_a_title_or_far_below_it_say_nothing():
    assert (
        read(
            [part(1, table="dicttitle", metric="Relative GPU performance scores"), part(3, table="dictrow", peers=EVEN)]
        )
        == []
    )
    assert read([part(3, table="dictrow", peers=SLOW)]) == []
    assert read([part(1, table="dicttitle", metric="scores"), part(9, table="dictrow", peers=SLOW)]) == []


def minmax(lo: str, lo_peer: str, hi: str, hi_peer: str, unit: str) -> Fact:
    return part(1, table="minmax", min=lo, min_peer=lo_peer, max=hi, max_peer=hi_peer, unit=unit)


def test_minmax_a_round_trip_or_a_throughput_far_apart_names_the_slow_rank():
    (slow,) = read([minmax("3453.08", "8", "6011.20", "5", "ms")])
    assert slow.get("peer") == "5" and slow.get("node") is None
    (slow,) = read([minmax("150.10", "12", "297.32", "8", "TF/s")])
    assert slow.get("peer") == "12"  # the lowest throughput


def test_minmax_close_figures_and_milliseconds_say_nothing():
    assert read([minmax("1446.49", "13", "1570.32", "30", "ms")]) == []  # x1.09
    assert read([minmax("1.22", "15", "1.22" if False else str(1.22 + 1000 * MIN_EXCESS_S / 2), "23", "ms")]) == []
    assert read([minmax("296.02", "0", "297.32", "8", "TF/s")]) == []


def steps(rows: dict[str, list[float]], unit: str = "samples/sec") -> list[Fact]:
    out, line = [], 1
    for step, values in rows.items():
        for v in values:
            out.append(part(line, table="step", step_key=step, value=str(v), unit=unit))
            line += 1
    return out


def test_one_unnamed_unit_slow_at_every_step_is_a_straggler():
    (slow,) = read(steps({"0/100": [1326.7, 1323.7, 889.5], "0/200": [1317.2, 1318.0, 816.1]}))
    assert slow.get("peer") == "unnamed" and slow.get("scope") == "job" and slow.get("node") is None


def test_warmup_on_every_unit_one_slow_step_and_two_printers_say_nothing():
    alike = {"0/10": [20.0, 21.0, 20.5, 20.2], "0/20": [100.0, 101.0, 99.0, 100.5], "0/30": [100.1, 99.2, 100.3, 100.0]}
    assert read(steps(alike)) == []
    once = {"0/10": [100.0, 101.0, 40.0], "0/20": [100.0, 99.0, 100.5], "0/30": [100.1, 99.2, 100.3]}
    assert read(steps(once)) == []
    two = {"0/10": [100.0, 40.0], "0/20": [100.0, 41.0], "0/30": [100.1, 39.0]}  # a restart printing steps again
    assert read(steps(two)) == []
    assert STEP_GROUPS >= 2


def test_unnamed_step_times_need_the_excess_too():
    tiny = {"1": [0.001, 0.001, 0.01], "2": [0.001, 0.001, 0.01]}
    assert read(steps(tiny, unit="s")) == []
    big = {"1": [1.0, 1.1, 2.5], "2": [1.0, 1.05, 2.4]}
    (slow,) = read(steps(big, unit="s"))
    assert slow.get("ratio") > 2


def score_rows(scores: list[tuple[str, float]], title_line: int = 1) -> list[Fact]:
    out = [part(title_line, table="dicttitle", metric="GPU relative performance")]
    line = title_line + 2
    for i, (rank, score) in enumerate(scores):
        if i == len(scores) // 2:
            line += 1  # the "Best performing" line between the worst and the best ranks
        out.append(part(line, table="scorerow", peer=rank, score=str(score)))
        line += 1
    return out


def test_score_rows_one_rank_far_below_the_listed_others_is_named():
    rows = [("76", 0.41), ("13", 0.94), ("45", 0.94), ("432", 0.99), ("376", 0.98), ("487", 0.98)]
    (slow,) = read(score_rows(rows))
    assert slow.get("peer") == "76" and slow.get("node") is None


def test_score_rows_close_together_or_without_a_title_say_nothing():
    rows = [("76", 0.94), ("13", 0.94), ("45", 0.94), ("432", 0.99), ("376", 0.98), ("487", 0.98)]
    assert read(score_rows(rows)) == []
    slow = [("76", 0.41), ("13", 0.94), ("45", 0.94), ("432", 0.99), ("376", 0.98)]
    assert read(score_rows(slow)[1:]) == []


def burn(lines: list[list[float]]) -> list[Fact]:
    return [
        part(i + 1, table="line", figures=" - ".join(f"{100 * (i + 1)} ({v:.0f} Gflop/s)" for v in row))
        for i, row in enumerate(lines)
    ]


def test_a_gpu_burn_gpu_slow_line_after_line_is_named_by_its_position():
    rows = [[6400.0, 6450.0, 3100.0, 6420.0, 6390.0]] * 6
    (slow,) = read(burn(rows))
    assert slow.get("peer") == "gpu2" and slow.get("node") is None


def test_gpu_burn_warmup_one_slow_line_zeros_and_few_gpus_say_nothing():
    warm = [[6400.0, 6450.0, 1000.0, 6420.0]] * 3 + [[6400.0, 6450.0, 6300.0, 6420.0]] * 5
    assert read(burn(warm)) == []
    once = (
        [[6400.0, 6450.0, 6300.0, 6420.0]] * 4
        + [[6400.0, 6450.0, 2000.0, 6420.0]]
        + [[6400.0, 6450.0, 6300.0, 6420.0]] * 3
    )
    assert read(burn(once)) == []
    zeros = [[0.0, 1038.0, 0.0, 0.0, 0.0]] * 8  # GPUs not running: no figure
    assert read(burn(zeros)) == []
    two = [[7100.0, 2500.0]] * 8
    assert read(burn(two)) == []
