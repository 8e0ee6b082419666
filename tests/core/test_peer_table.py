"""Tables of peers (engine.core.peer_table) and units' running figures (engine.core.progress):
one unit far slower than the others is a straggler named as printed; healthy tables say nothing."""

from __future__ import annotations

import pytest

from engine.core.peer_table import MIN_EXCESS_S, PeerTables, outlier, unit_cost
from engine.core.progress import ProgressTracker
from engine.facts import Fact
from engine.rulebook import require_rulebook


def part(line: int, **attrs: object) -> Fact:
    return Fact.make("progress", {"job": "1", "attempt": 0, "matcher": "m", **attrs}, 0.0, f"slurm-1.out:{line}")


def matrix(rows: list[list[float]], first: int = 3) -> list[Fact]:
    out = [part(1, table="matrix", unit="GB/s")]
    for i, cells in enumerate(rows):
        out.append(part(first + i, table="row", peer=str(i), cells="  ".join(f"{c:.2f}" for c in cells)))
    return out


def read(facts: list[Fact], factor: float = 1.5, min_peers: int = 3) -> list[Fact]:
    t = PeerTables(factor, min_peers)
    return [c for f in facts for c in t.observe("1", 0, f)]


def square(n: int, link, diag: float = 900.0) -> list[list[float]]:
    return [[diag if i == j else link(i, j) for j in range(n)] for i in range(n)]


def test_a_device_whose_every_link_is_low_is_named_once():
    rows = square(7, lambda i, j: 3.9 if 6 in (i, j) else 50.0)
    (slow,) = read(matrix(rows))
    assert (slow.get("peer"), slow.get("scope"), slow.get("node")) == ("6", "job", None)
    assert slow.get("ratio") > 10 and slow.get("peers") == 7


def test_a_two_socket_topology_lowers_every_row_alike():
    # GPUs 0-3 and 4-7 on two sockets: cross-socket links at a third of the bandwidth
    rows = square(8, lambda i, j: 36.0 if (i < 4) == (j < 4) else 12.0)
    assert read(matrix(rows)) == []


def test_a_matrix_is_judged_only_when_square_and_its_rows_consecutive():
    rows = square(7, lambda i, j: 3.9 if 6 in (i, j) else 50.0)
    assert read(matrix(rows)[:-1]) == []  # one row short
    facts = matrix(rows)
    facts[4] = part(40, table="row", peer="3", cells=facts[4].get("cells"))  # a gap: the table ended
    assert read(facts) == []
    assert read(matrix(rows, first=9)) == []  # rows too far below the title are no part of it


def header_table(cols: str, rows: list[tuple[str, str]]) -> list[Fact]:
    return [part(10, table="header", cols=cols)] + [
        part(11 + i, table="row", peer=p, cells=c) for i, (p, c) in enumerate(rows)
    ]


def test_a_per_rank_time_column_names_the_slow_rank():
    rows = [(str(r), f"{0.02 + r / 1000:.3f} {1.20:.3f}") for r in range(6)] + [("6", "4.100 1.210")]
    (slow,) = read(header_table("data_time step_time", rows))
    assert slow.get("peer") == "6" and "column 1" in slow.get("evidence")


def test_close_peers_sizes_and_milliseconds_of_noise_are_no_straggler():
    close = [(str(r), f"{1.0 + r / 50:.3f} {10.0 + r:.3f}") for r in range(8)]
    assert read(header_table("step_time tflops", close)) == []
    # a size column grows by design and is never compared; the time column agrees
    sizes = [(str(r), f"{2.0**r:.1f} {1.0:.3f}") for r in range(8)]
    assert read(header_table("size time", sizes)) == []
    # 4x of almost nothing: below MIN_EXCESS_S
    tiny = [(str(r), "0.001 1.000") for r in range(5)] + [("5", f"{0.001 + MIN_EXCESS_S / 2:.3f} 1.000")]
    assert read(header_table("data_time step_time", tiny)) == []
    # a row of another shape ends the table
    assert read(header_table("data_time", [("0", "1.0 2.0")])) == []


def test_a_dict_on_one_line_rates_and_times():
    times = part(5, table="dict", metric="time", peers="2: 20.18, 3: 18.72, 0: 181.80, 1: 143.06")
    (slow,) = read([times])
    assert slow.get("peer") == "0"
    rates = part(5, table="dict", metric="throughput", peers="'a1': 310.5, 'a2': 305.0, 'a3': 311.2, 'a4': 120.0")
    assert read([rates])[0].get("peer") == "a4"
    three = part(5, table="dict", metric="time", peers="0: 20.1, 1: 19.9, 2: 180.0")
    assert read([three]) == []  # table_min_peers 3: four units needed


@pytest.mark.parametrize(
    ("value", "unit", "cost"),
    [(2.0, "s", 2.0), (250.0, "ms", 0.25), (4.0, "samples/sec", 0.25), (500.0, "TFLOPS", 0.002), (1.0, "apples", None)],
)
def test_unit_cost(value, unit, cost):
    assert unit_cost(value, unit) == (pytest.approx(cost) if cost is not None else None)


def test_outlier_needs_enough_peers_and_the_factor():
    assert outlier({"a": 1.0, "b": 1.0, "c": 3.0}, 1.5, 3, None) is None
    assert outlier({"a": 1.0, "b": 1.1, "c": 0.9, "d": 1.4}, 1.5, 3, None) is None
    assert outlier({"a": 1.0, "b": 1.1, "c": 0.9, "d": 1.6}, 1.5, 3, None)[0] == "d"


def running(step: int, rank: int, value: float, metric: str = "time", unit: str = "s") -> Fact:
    attrs = {"job": "2", "attempt": 0, "matcher": "progress_peer_figure", "peer": str(rank)}
    attrs.update(value=value, unit=unit, metric=metric)
    return Fact.make("progress", attrs, float(step), f"slurm-2.out:{step * 4 + rank}")


def track(facts: list[Fact]) -> list[Fact]:
    t = ProgressTracker(require_rulebook().policy)
    return [c for f in facts for c in t.observe(f)]


def test_a_running_rank_slow_after_its_warmup_is_named():
    facts = [running(s, r, 2.6 if (r == 2 and s > 2) else 1.2) for s in range(1, 9) for r in range(4)]
    (slow,) = track(facts)
    assert (slow.get("peer"), slow.get("scope"), slow.get("node")) == ("2", "job", None)


def test_warmup_and_figures_of_another_kind_are_no_straggler():
    first = [running(s, r, 9.8 if (s == 1 and r == 0) else 1.2) for s in range(1, 9) for r in range(4)]
    assert track(first) == []
    # rank 0 also evaluates (another word, another speed): compared only with its own kind
    mixed = [running(s, r, 800.0, metric="speed", unit="samples/sec") for s in range(1, 9) for r in range(4)]
    mixed += [running(s, 0, 150.0, metric="eval_speed", unit="samples/sec") for s in range(1, 9)]
    assert track(mixed) == []


# -- through the shipped matchers and a replay -----------------------------------------------


def _replay(tmp_path, text: str) -> list[tuple]:
    from engine.core.replay import file_input, replay_inputs
    from engine.store import Store

    path = tmp_path / "slurm-4344.out"
    path.write_text(text)
    store = Store(":memory:")
    res = replay_inputs([file_input(str(path))], require_rulebook(), store)
    return [(c.decision.fault_class, c.decision.decision, c.decision.nodes) for c in res.incidents]


def test_a_long_table_is_read_whole_no_row_is_sampled_out(tmp_path):
    # 64 ranks, the slow one last: past the progress sampler's burst, which no table row is subject to
    rows = "\n".join(f"  {r:4d}  {0.020 + r / 10000:8.3f}  {1.250:8.3f}" for r in range(63))
    text = f"step 100\n  rank   data_time   step_time\n{rows}\n    63   41.500     1.250\n"
    assert _replay(tmp_path, text) == [("straggler", "observe", ())]
    healthy = text.replace("41.500", " 0.021")
    assert _replay(tmp_path, healthy) == []


def test_a_one_column_table_of_hosts(tmp_path):
    rows = "\n".join(f"gpu{n:02d}   {45.0 + n / 10:.1f}" for n in range(1, 8))
    text = f"node   throughput(GB/s)\n{rows}\ngpu08   21.3\n"
    assert _replay(tmp_path, text) == [("straggler", "observe", ())]
    assert _replay(tmp_path, text.replace("21.3", "44.8")) == []
    # the same lines with no header are no table
    assert _replay(tmp_path, text.split("\n", 1)[1]) == []
