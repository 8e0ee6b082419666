"""One reader of line times (engine/core/linetime.py): every stamp form the corpus holds, one
time-zone rule that no host ``TZ`` changes, the year from the input (December into January), and
nothing in the deterministic core that reads the wall clock."""

from __future__ import annotations

import calendar
from pathlib import Path

import pytest

from engine.core.linetime import LineClock, check_zone, parse_line_time
from tests.helpers import HOST_ZONES, host_zone

ROOT = Path(__file__).resolve().parents[2]


def utc(*fields: int) -> float:
    return float(calendar.timegm((*fields, 0, 0, 0)))


@pytest.fixture(params=HOST_ZONES)
def host_tz(request):
    """The process's own time zone, set for one test and put back after it."""
    yield from host_zone(request)


#: (line, its instant) for every stamp form of tests/corpus and examples/; yearless stamps are read
#: in a stream last written on 2026-12-01 (``not_after``)
NOT_AFTER = utc(2026, 12, 1, 21, 0, 0)
FORMS = [
    ("2026-11-29T17:00:01.5+01:00 n3 kernel: NVRM: Xid", utc(2026, 11, 29, 16, 0, 1) + 0.5),
    ("2026-11-29T17:00:01Z n3 kernel: x", utc(2026, 11, 29, 17, 0, 1)),
    ("2026-11-29T17:00:01.118934 n3 kernel: naive ISO", utc(2026, 11, 29, 17, 0, 1) + 0.118934),
    ("2020-07-21 01:24:27,628 - mmcls - INFO - workflow", utc(2020, 7, 21, 1, 24, 27) + 0.628),
    ("[2026-04-29T23:36:37.809] error: *** STEP 52222788.0 CANCELLED", utc(2026, 4, 29, 23, 36, 37) + 0.809),
    (
        "192.168.11.119: kern: warning: [2026-04-22T21:26:20.599488292Z]: NVRM",
        utc(2026, 4, 22, 21, 26, 20) + 0.599488292,
    ),
    ("2024/01/24 02:50:32 - mmengine - INFO - Epoch(train)", utc(2024, 1, 24, 2, 50, 32)),
    ("  time      : 2024-01-16_18:04:01", utc(2024, 1, 16, 18, 4, 1)),
    ("Nov 29 17:00:01 n3 kernel: NVRM: Xid (PCI:0000:3b:00): 79", utc(2026, 11, 29, 17, 0, 1)),
    ("<6>Dec  2 11:49:53 worker4 kernel: [  885.242168] NVRM", utc(2026, 12, 2, 11, 49, 53)),
    ("Oct-26 09:59:40.085 [Thread-3] WARN nextflow", utc(2026, 10, 26, 9, 59, 40) + 0.085),
    ("E1129 17:21:30.123 1234 ProcessGroupNCCL.cpp:1234] [Rank 3] Watchdog", utc(2026, 11, 29, 17, 21, 30) + 0.123),
    (
        "[rank0]:[E1201 10:25:02.113452871 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog",
        utc(2026, 12, 1, 10, 25, 2) + 0.113452871,
    ),
    ("[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1]", utc(2026, 6, 26, 6, 24, 44) + 0.903881913),
    ("[W426 16:56:01.831041000 TCPStore.cpp:347] [c10d] TCP client failed", utc(2026, 4, 26, 16, 56, 1) + 0.831041),
    (
        "0: [rank6]:[E120 06:04:54.543461202 ProcessGroupNCCL.cpp:607] [Rank 6]",
        utc(2026, 1, 20, 6, 4, 54) + 0.543461202,
    ),
    (
        "[default0]:[rank12]:[E817 17:40:34.227531918 ProcessGroupNCCL.cpp:1515]",
        utc(2026, 8, 17, 17, 40, 34) + 0.227531918,
    ),
    ("[trainer85612|12]:W0701 13:41:43.421574  4776 TCPStore.cpp:182] [c10d]", utc(2026, 7, 1, 13, 41, 43) + 0.421574),
    ("I20260601 23:40:43 140540389619392 iris.cluster.controller", utc(2026, 6, 1, 23, 40, 43)),
    ("[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13", utc(2024, 8, 30, 11, 43, 9)),
    ("[Mon Mar  6 21:36:46 2023] NVRM: Xid (PCI:0000:61:00): 119", utc(2023, 3, 6, 21, 36, 46)),
    ("Tue Jul 30 21:43:38: Starting (Pid 31647);", utc(2026, 7, 30, 21, 43, 38)),
    ("Mon, 27 Jul 2026 11:04:56 CEST(+0200):INFO:RetryJob", utc(2026, 7, 27, 9, 4, 56)),
    ("ERROR 04-15 00:31:11 worker_base.py:574]   File", utc(2026, 4, 15, 0, 31, 11)),
    ("# (bert-qa pid=920210) I 05-04 00:52:46 controller.py:100] preempted", utc(2026, 5, 4, 0, 52, 46)),
    ("04/18/2016 22:55:25;0008;PBS_Server.12149;Job;7082041", utc(2016, 4, 18, 22, 55, 25)),
    ("[02/05/2026-06:58:48] [TRT-LLM] [E] Encountered an error", utc(2026, 2, 5, 6, 58, 48)),
    ("07/27/11 19:42:50 Event: ULOG_IMAGE_SIZE for Condor Node", utc(2011, 7, 27, 19, 42, 50)),
    ("[11/01 11:20:11 d2.utils.events]: eta: 8:29:46  iter: 19", utc(2026, 11, 1, 11, 20, 11)),
    # the leftmost stamp is the line's time
    ("18:11:06.680 [rank4]:[E205 18:11:06.375750231 ProcessGroupNCCL.cpp:1870]", utc(2026, 2, 5, 18, 11, 6) + 0.37575),
    # no wall time: seconds since an unknown boot, an impossible date, no stamp
    ("[ 388.565288] NVRM: Xid (PCI:0000:01:00): 119, pid=6211", None),
    ("[  +0.000316] pcieport 0000:00:03.0: AER: Corrected error", None),
    ("[155044.078590] NVRM: Xid 2026-11-29T17:00:01Z later on the line", None),
    ("I1301 10:00:00.1 month 13 is not a date", None),
    ("gpu-001:70100:70800 [0] transport/net_ib.cc:2453 NCCL WARN NET/IB", None),
    ("[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation timeout", None),
]


@pytest.mark.parametrize("line,at", FORMS, ids=[f[0][:32] for f in FORMS])
def test_every_stamp_form_reads_the_same_instant_under_any_host_zone(line, at, host_tz):
    got = LineClock(not_after=NOT_AFTER).time(line)
    assert got == (pytest.approx(at, abs=1e-6) if at is not None else None)


def test_the_log_zone_reads_stamps_without_a_zone_and_leaves_the_others_alone(host_tz):
    berlin = LineClock(zone="Europe/Berlin", not_after=NOT_AFTER)
    # winter: CET is UTC+1; summer: CEST is UTC+2; a stamp with its own zone is not moved
    assert berlin.time("Nov 29 17:00:01 n3 kernel: x") == utc(2026, 11, 29, 16, 0, 1)
    assert berlin.time("2026-07-01 12:00:00,000 - train - INFO") == utc(2026, 7, 1, 10, 0, 0)
    assert berlin.time("2026-07-01T12:00:00Z step") == utc(2026, 7, 1, 12, 0, 0)
    assert berlin.time("[rank0]:[E1201 10:25:02.5 ProcessGroupNCCL.cpp:616]") == utc(2026, 12, 1, 9, 25, 2) + 0.5
    kolkata = LineClock(zone="Asia/Kolkata")
    assert kolkata.time("2026-11-29 17:00:00 x") == utc(2026, 11, 29, 11, 30, 0)
    # the night the clocks go back, 02:30 happens twice: the first (CEST) is taken
    assert berlin.time("2026-10-25 02:30:00 x") == utc(2026, 10, 25, 0, 30, 0)


def test_a_zone_must_exist():
    assert check_zone("Europe/Berlin") is None and check_zone("UTC") is None
    assert "unknown time zone" in (check_zone("Mars/Olympus") or "")
    assert check_zone("") and check_zone(3)


def test_a_yearless_stamp_takes_its_year_from_the_input():
    jan = utc(2027, 1, 2, 8, 0, 0)
    # nothing dated before it: the latest year not more than a day after the file was last written
    assert LineClock(not_after=jan).time("Dec 31 23:59:58 n3 kernel: x") == utc(2026, 12, 31, 23, 59, 58)
    assert LineClock(not_after=jan).time("Jan  3 07:00:00 n3 kernel: x") == utc(2027, 1, 3, 7, 0, 0)
    assert LineClock(not_after=jan).time("Jan  5 07:00:00 n3 kernel: x") == utc(2026, 1, 5, 7, 0, 0)
    # a caller's year, and no year at all: undated, never today's year
    assert LineClock(year=2019).time("Nov 29 17:00:01 n3 kernel: x") == utc(2019, 11, 29, 17, 0, 1)
    assert LineClock().time("Nov 29 17:00:01 n3 kernel: x") is None
    assert parse_line_time("E1129 17:21:30 x.cc:1] y") is None
    # Feb 29 waits for a leap year
    assert LineClock(not_after=utc(2027, 3, 1, 0, 0, 0)).time("Feb 29 10:00:00 h kernel: x") == utc(
        2024, 2, 29, 10, 0, 0
    )


def test_a_stream_that_runs_into_a_new_year_moves_with_it():
    dates = LineClock(year=2026)
    times = [
        dates.time(line)
        for line in (
            "Dec 31 23:59:58 n3 kernel: a",
            "Jan  1 00:00:02 n3 kernel: b",
            "Dec 31 23:59:59 n3 kernel: a little out of order",
            "[rank0]:[E101 00:00:05.0 ProcessGroupNCCL.cpp:1] glog in the new year",
            "2027-03-01T00:00:00Z an ISO line",
            "Mar  1 00:00:01 n3 kernel: c",
        )
    ]
    assert times == [
        utc(2026, 12, 31, 23, 59, 58),
        utc(2027, 1, 1, 0, 0, 2),
        utc(2026, 12, 31, 23, 59, 59),
        utc(2027, 1, 1, 0, 0, 5),
        utc(2027, 3, 1, 0, 0, 0),
        utc(2027, 3, 1, 0, 0, 1),
    ]


def test_a_time_of_day_alone_takes_the_date_of_the_line_before_it():
    dates = LineClock()
    assert dates.time("[17:36:51] src/operator: no date known yet") is None
    dates.time("2026-11-29T23:59:00Z start")
    assert dates.time("[00:00:30] past midnight") == utc(2026, 11, 30, 0, 0, 30)
