"""Replay runs on the logs' own time, never the wall clock: a silence set today does not change
the verdict on a month-old log, and one that was active when the old log was written does."""

from __future__ import annotations

import calendar
import time

import pytest

from engine.core.replay import replay
from engine.rulebook import load_rulebook
from engine.store import Store
from tests.helpers import HOST_ZONES, host_zone


@pytest.fixture(params=HOST_ZONES)
def host_tz(request):
    yield from host_zone(request)


XID_AT = "2026-10-29T17:04:00.000000+00:00"
XID = f"{XID_AT} n3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n"
# the stamp's instant, whatever the host's zone (mktime and time.timezone read it as local time)
T = calendar.timegm((2026, 10, 29, 17, 4, 0, 0, 0, 0))


def _decide(tmp_path, silence_from: float | None, silence_until: float):
    compiled = load_rulebook().compiled
    kern = tmp_path / "kern.log"
    kern.write_text(XID)
    store = Store(str(tmp_path / "r.db"))
    store.add_silence("n3", silence_until, "maintenance", "ops", start=silence_from)
    result = replay([str(kern)], compiled, store)
    assert len(result.incidents) == 1
    return result.incidents[0].decision


def test_a_silence_set_today_does_not_apply_to_an_old_log(tmp_path):
    d = _decide(tmp_path, None, time.time() + 3600)  # active now, for the next hour
    assert d.fault_class == "gpu_fell_off_bus" and d.decision == "isolate_and_restart"
    assert not any(g["guard"] == "silence" for g in d.guards)


def test_a_silence_active_when_the_log_was_written_applies(tmp_path, host_tz):
    d = _decide(tmp_path, T - 3600, T + 3600)
    assert d.decision == "observe" and any(g["guard"] == "silence" for g in d.guards)
