"""Flight-recorder attribution on jobs with known injected faults (issue 21's done-when figure):
every faulty rank is found and no healthy rank is named, across the scenarios below, each
written both as pickles and as JSON (and a mix)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from engine.sources.flight_recorder import read_dumps
from engine.sources.fr_analysis import MISMATCH, NO_DUMP, NO_PENDING, NOT_JOINED, analyze, format_ranks
from tests.attribution.fr_dumps import FakeJob

# a scenario: (job, ranks whose dumps are left out, the faulty ranks)
Scenario = tuple[FakeJob, set[int], set[int]]


def _steps(job: FakeJob, n: int, pg: str = "0") -> None:
    for _ in range(n):
        job.collective(pg)


def hang_before_collective() -> Scenario:
    job = FakeJob(8)
    _steps(job, 41)
    job.collective(state="scheduled", skip={7})
    return job, set(), {7}


def two_ranks_hang() -> Scenario:
    job = FakeJob(8)
    _steps(job, 10)
    job.collective(state="started", skip={2, 5})
    return job, set(), {2, 5}


def one_rank_other_collective() -> Scenario:
    job = FakeJob(8)
    _steps(job, 6)
    job.collective(state="started", other={3: ("all_gather", [[24, 4]])})
    return job, set(), {3}


def one_rank_other_sizes() -> Scenario:
    job = FakeJob(4)
    _steps(job, 3)
    job.collective(state="scheduled", other={1: ("all_reduce", [[4, 5]])})
    return job, set(), {1}


def dump_missing() -> Scenario:
    job = FakeJob(8)  # rank 4 was stopped (SIGSTOP): it issued nothing and wrote no dump
    _steps(job, 20)
    job.collective(state="started", skip={4})
    return job, {4}, {4}


def two_dumps_missing_16_ranks_mixed_versions() -> Scenario:
    job = FakeJob(16)
    for r in range(0, 16, 3):
        job.versions[r] = "2.2"  # no pg_status in these
    _steps(job, 11)
    job.collective(state="scheduled", skip={9, 13})
    return job, {9, 13}, {9, 13}


def p2p_peer_never_posts() -> Scenario:
    job = FakeJob(4)
    job.group("1", "pp", [0, 1])
    _steps(job, 5)
    job.send("1", 0, 1)
    job.send("1", 0, 1, state="started", recv_state=None)  # rank 1 never posts its recv
    job.collective(state="scheduled", only={2, 3})  # the others go on and wait for rank 0 and 1
    return job, set(), {1}


def p2p_chain() -> Scenario:
    job = FakeJob(4)  # a pipeline 0 -> 1 -> 2 -> 3 where stage 2 hangs
    job.group("1", "pp", [0, 1, 2, 3])
    _steps(job, 3)
    job.send("1", 0, 1, state="started", recv_state=None)  # rank 1 is busy sending to 2
    job.send("1", 1, 2, state="started", recv_state=None)
    job.ranks[3].entries.append(job._entry(3, "1", "recv 3<-2", "scheduled", [[5]], True))
    return job, set(), {2}


def completed_while_peers_wait() -> Scenario:
    job = FakeJob(8)
    _steps(job, 30)
    job.collective(state={r: ("completed" if r == 6 else "started") for r in range(8)})
    return job, set(), {6}


def stuck_inside_earlier_collective() -> Scenario:
    job = FakeJob(8)
    _steps(job, 4)
    job.collective(state={2: "started"})  # seq 5 completes everywhere but on rank 2
    job.collective(state="scheduled", skip={2})
    return job, set(), {2}


def one_of_three_groups_stuck() -> Scenario:
    job = FakeJob(8)
    job.group("1", "tp", range(4))
    job.group("2", "tp", range(4, 8))
    for _ in range(3):
        job.collective("0")
        job.collective("1")
        job.collective("2")
    job.collective("1")  # the first TP group finishes its step ...
    job.collective("2", state="started", skip={5})  # ... rank 5 hangs before the second's
    job.collective("0", state="scheduled", only=range(4))  # ranks 0-3 wait in the world group
    return job, set(), {5}


def ring_buffer_kept_pending_only() -> Scenario:
    job = FakeJob(8)
    _steps(job, 41)
    job.collective(state="scheduled", skip={7})
    job.ranks[7].status_override["0"] = (41, -1, 41)
    return job, set(), {7}


SCENARIOS: list[Callable[[], Scenario]] = [
    hang_before_collective,
    two_ranks_hang,
    one_rank_other_collective,
    one_rank_other_sizes,
    dump_missing,
    two_dumps_missing_16_ranks_mixed_versions,
    p2p_peer_never_posts,
    p2p_chain,
    completed_while_peers_wait,
    stuck_inside_earlier_collective,
    one_of_three_groups_stuck,
    ring_buffer_kept_pending_only,
]


def _named(
    tmp_path: Path, make: Callable[[], Scenario], form, keep_last: int | None = None
) -> tuple[set[int], set[int]]:
    job, omit, faulty = make()
    folder = tmp_path / f"{make.__name__}-{form if isinstance(form, str) else 'mixed'}"
    if make is ring_buffer_kept_pending_only:
        keep_last = 1  # only the last entry of each rank survives: rank 7's says seq 41 completed
    job.write(folder, form=form, omit=omit, keep_last=keep_last)
    dumps, refused = read_dumps([str(folder)])
    assert not refused
    assert len(dumps) == job.world - len(omit)
    return {s.rank for s in analyze(dumps)}, faulty


@pytest.mark.parametrize("form", ["pickle", "json", "mixed"])
def test_every_faulty_rank_found_and_no_healthy_rank_named(tmp_path: Path, form: str) -> None:
    found = faulty_total = false_named = 0
    misses = []
    for make in SCENARIOS:
        the_form = {r: ("json" if r % 2 else "pickle") for r in range(64)} if form == "mixed" else form
        named, faulty = _named(tmp_path, make, the_form)
        faulty_total += len(faulty)
        found += len(named & faulty)
        false_named += len(named - faulty)
        if named != faulty:
            misses.append(f"{make.__name__}: named {sorted(named)}, faulty {sorted(faulty)}")
    print(
        f"\nflight recorder ({form}): {found}/{faulty_total} faulty ranks found, {false_named} healthy ranks named, {len(SCENARIOS)} scenarios"
    )
    assert len(SCENARIOS) >= 8
    assert misses == []
    assert found == faulty_total and false_named == 0


def test_healthy_job_names_nobody(tmp_path: Path) -> None:
    job = FakeJob(8)
    job.group("1", "dp", range(0, 8, 2))
    for _ in range(10):
        job.collective()
        job.collective("1")
    job.write(tmp_path)
    dumps, _ = read_dumps([str(tmp_path)])
    assert len(dumps) == 8 and analyze(dumps) == []


def test_two_ranks_disagreeing_name_neither(tmp_path: Path) -> None:
    """A mismatch between two ranks has no majority: naming one would name a healthy rank half
    the time."""
    job = FakeJob(2)
    _steps(job, 2)
    job.collective(state="scheduled", other={0: ("all_reduce", [[4, 5]])})
    job.write(tmp_path)
    dumps, _ = read_dumps([str(tmp_path)])
    assert analyze(dumps) == []


def test_most_dumps_missing_names_no_missing_rank(tmp_path: Path) -> None:
    """Dumps of one node out of four given: the other nodes' ranks are not suspects for that."""
    job = FakeJob(8)
    _steps(job, 3)
    job.collective(state="scheduled", skip={1})
    job.write(tmp_path, omit=range(2, 8))
    dumps, _ = read_dumps([str(tmp_path)])
    assert {(s.rank, s.signal) for s in analyze(dumps)} == {(1, NOT_JOINED)}


def test_signals_say_what_the_dumps_show(tmp_path: Path) -> None:
    job, omit, _ = hang_before_collective()
    job.write(tmp_path)
    dumps, _ = read_dumps([str(tmp_path)])
    [sig] = analyze(dumps)
    assert (sig.rank, sig.signal, sig.group, sig.seq) == (7, NOT_JOINED, "0", 42)
    assert sig.detail.startswith("pg 0 (default_pg) seq 42 all_reduce: ranks 0-6 scheduled, rank 7 last")
    assert "last completed seq 41" in sig.detail and sig.origin.endswith("nccl_trace_rank_7")

    kinds = {}
    for make in (one_rank_other_collective, dump_missing, completed_while_peers_wait):
        job, omit, _ = make()
        folder = tmp_path / make.__name__
        job.write(folder, omit=omit)
        kinds[make.__name__] = {(s.rank, s.signal) for s in analyze(read_dumps([str(folder)])[0])}
    assert kinds == {
        "one_rank_other_collective": {(3, MISMATCH)},
        "dump_missing": {(4, NO_DUMP)},
        "completed_while_peers_wait": {(6, NO_PENDING)},
    }


def test_format_ranks() -> None:
    assert format_ranks([7]) == "rank 7"
    assert format_ranks([0, 1, 2, 3, 5, 8, 9]) == "ranks 0-3,5,8-9"
    assert format_ranks(range(0, 40, 2)).endswith(",... (20 ranks)")
