"""PyTorch's C++ (glog-style) log times date their lines, in replay as anywhere a line is dated."""

from __future__ import annotations

import calendar

import pytest

from engine.core.linefacts import parse_line_time
from engine.core.replay import replay
from engine.rulebook import require_rulebook
from engine.store import Store

T = calendar.timegm((2026, 11, 29, 17, 21, 30, 0, 0, 0))


@pytest.mark.parametrize(
    "line,at",
    [
        (
            "E1129 17:21:30.123 1234 ProcessGroupNCCL.cpp:1234] [Rank 3] Watchdog caught collective operation timeout",
            T + 0.123,
        ),
        ("[rank3]:E1129 17:21:30.123000 140 torch/distributed/elastic/x.py:1] failed", T + 0.123),
        ("W1129 17:21:30 140 x.cpp:1] no fraction", T),
        ("I1301 10:00:00.1 month 13 is not a date", None),
        ("E11 17:21:30 too short", None),
        ("Epoch 5 done", None),
    ],
)
def test_glog_times(line, at):
    got = parse_line_time(line, 2026)
    assert got == (pytest.approx(at) if at is not None else None)


def test_replay_dates_a_cpp_line_by_its_own_time(tmp_path):
    log = tmp_path / "slurm-4242.out"
    log.write_text(
        "2026-11-29T17:00:00Z job started\n"
        "[rank3]:E1129 17:21:30.123000 140 ProcessGroupNCCL.cpp:1234] [Rank 3] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 "
        "milliseconds before timing out.\n"
    )
    seen = []
    replay([str(log)], require_rulebook(), Store(str(tmp_path / "r.db")), on_fact=seen.append)
    assert seen, "the watchdog line is a fact"
    assert [f.at for f in seen if f.kind == "log"] == [pytest.approx(T + 0.123)]  # not the 17:00:00 line before it
