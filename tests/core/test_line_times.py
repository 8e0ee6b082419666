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
