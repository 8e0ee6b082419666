"""Every command reads an operator's instant the same way (engine.ops.report.parse_since), so
``--since 7d`` or ``2026-11-01T08:00Z`` means one thing in goodput, report, rules diff and
incidents (review M10: the CLI's own parser took no ``Z`` on Python 3.10 and bolted days on)."""

from __future__ import annotations

import calendar

import pytest
import typer

from engine.cli.common import _since
from engine.ops.report import parse_since
from engine.ops.review import ReviewError

NOW = 1_800_000_000.0
T = float(calendar.timegm((2026, 11, 1, 8, 0, 0, 0, 0, 0)))


@pytest.mark.parametrize(
    "text,expected",
    [
        ("2026-11-01T08:00Z", T),
        ("2026-11-01T08:00:00+00:00", T),
        ("2026-11-01T09:00+01:00", T),
        ("2026-11-01T08:00", T),  # no zone: UTC, whatever the host's
        ("1800000000", NOW),
        ("30m", NOW - 1800),
        ("7d", NOW - 7 * 86400),
        ("2w", NOW - 14 * 86400),
        ("1h30m", NOW - 5400),
        ("90s", NOW - 90),
    ],
)
def test_one_reading_of_an_operator_s_time(text, expected):
    assert parse_since(text, now=NOW) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["yesterday", "7 days", "-5m", "2026-13-01", "1e9x"])
def test_what_is_no_time_is_refused_with_what_would_be(text):
    with pytest.raises(ReviewError, match="give a date"):
        parse_since(text, now=NOW)


def test_the_cli_reads_times_with_the_same_parser_and_refuses_as_a_usage_error(capsys):
    assert _since("2026-11-01T08:00Z") == T  # 'Z' works on every supported Python
    assert _since(None) is None
    with pytest.raises(typer.Exit) as exc:
        _since("yesterday")
    assert exc.value.exit_code == 2
    assert "give a date" in capsys.readouterr().err
