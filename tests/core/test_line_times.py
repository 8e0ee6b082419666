"""PyTorch's C++ (glog-style) log times date their lines, in replay as anywhere a line is dated."""

from __future__ import annotations

import calendar

import pytest

from engine.core.linetime import parse_line_time
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


def _iso_reference(line: str) -> float | None:
    """An ISO time of the head read without any memo: what parse_line_time must say for it."""
    import re

    m = re.search(
        r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?", line[:96]
    )
    if m is None:
        return None
    y, mo, d, h, mi, s, frac, tz = m.groups()
    if not (1 <= int(mo) <= 12 and 1 <= int(d) <= 31 and int(h) < 24 and int(mi) < 60 and int(s) < 61):
        return None
    try:
        t = float(calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(s), 0, 0, 0)))
    except (ValueError, OverflowError):
        return None
    if frac:
        t += int(frac) / 10 ** len(frac)
    if tz and tz != "Z":
        digits = tz[1:].replace(":", "")
        t -= (1 if tz[0] == "+" else -1) * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)
    return t


def test_iso_times_memoised_per_second_read_as_without_memo():
    """parse_line_time memoises the whole seconds of an ISO time by its text: lines that share a
    second but not a separator, zone or fraction, repeats in any order, times near the 96th
    character, and non-ASCII digits all read as a fresh reading would."""
    import random

    rng = random.Random(5)
    seconds = ["2026-11-29 17:00:00", "2026-11-29T17:00:00", "2026-11-29 17:00:01", "2026-13-29 17:00:00"]
    seconds.append("\u0662\u0660\u0662\u0666-11-29 17:00:00")  # Arabic-Indic digits: \d matches them
    zones = ["", "Z", "+02:00", "-0530", "+0000"]
    lines = []
    for _ in range(3000):
        pad = " " * rng.choice([0, 1, 40, 70, 76, 77, 78, 90])
        frac = rng.choice(["", ",058", ".5", ".123456789", ".1234567891"])
        lines.append(f"{pad}[{rng.choice(seconds)}{frac}{rng.choice(zones)}] iteration {rng.randrange(10**6)}")
    for line in lines:
        assert parse_line_time(line) == _iso_reference(line), line


def test_a_bracketed_glog_watchdog_is_dated_by_its_own_stamp_and_joins_the_xid(tmp_path):
    """PyTorch's current form, ``[rank0]:[E1201 10:25:02.113452871 ...]``: the watchdog is dated
    10:25:02, five minutes after the Xid 79, so it is the Xid's victim and one failure is one
    incident. Read by the ISO line two hours before it, it came first and was an incident of its
    own (``restart``) before the Xid's (``isolate_and_restart``)."""
    from engine.core.replay import replay_inputs, file_input

    kern = tmp_path / "kern-n3.log"
    kern.write_text(
        "2026-12-01T10:20:01.000211+00:00 n3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=70011, "
        "name=pt_main_thread, GPU has fallen off the bus.\n"
    )
    job = tmp_path / "slurm-4302.out"
    job.write_text(
        "2026-12-01 08:25:00,440 - train - INFO - step 1200 loss 2.0012\n"
        "[rank0]:[E1201 10:25:02.113452871 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=4412, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600083 "
        "milliseconds before timing out.\n"
    )
    seen = []
    result = replay_inputs(
        [file_input(str(kern)), file_input(str(job))],
        require_rulebook(),
        Store(str(tmp_path / "r.db")),
        job="4302",
        attempt=0,
        nodes=["n1", "n2", "n3", "n4"],
        on_fact=seen.append,
    )
    watchdog = [f for f in seen if f.kind == "log" and "Watchdog" in str(f.get("text"))]
    assert [f.at for f in watchdog] == [pytest.approx(calendar.timegm((2026, 12, 1, 10, 25, 2, 0, 0, 0)) + 0.113452871)]
    verdicts = [(i.decision.fault_class, i.decision.decision, tuple(i.decision.nodes)) for i in result.incidents]
    assert verdicts == [("gpu_fell_off_bus", "isolate_and_restart", ("n3",))]
