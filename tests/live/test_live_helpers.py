"""The live tests' own helpers fail the way they say: at once when the process has exited, and
with their diagnostics when facts are missing."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.helpers import wait_for

from .conftest import Live


def _exited(tmp_path) -> Live:
    """A Live whose process has already exited, as a controller that crashed on a reload."""
    lv = Live(tmp_path)
    lv.log_path.write_text("===== run 1\nboom: the controller died\n")
    lv._mark = 0
    lv.proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    lv.proc.wait(30)
    return lv


def test_wait_reloaded_fails_at_once_when_the_controller_has_exited(tmp_path):
    lv = _exited(tmp_path)
    t0 = time.monotonic()
    with pytest.raises(pytest.fail.Exception) as err:
        lv.wait_reloaded(timeout=20)
    assert time.monotonic() - t0 < 10  # not the whole timeout
    assert "exited 3" in str(err.value) and "the controller died" in str(err.value)


def test_wait_evts_says_which_facts_are_missing(tmp_path):
    lv = _exited(tmp_path)
    with pytest.raises(AssertionError) as err:
        lv.wait_evts({1, 2}, timeout=0.2)
    assert "missing EVT facts: [1, 2]" in str(err.value) and "the controller died" in str(err.value)


def test_wait_evts_of_nothing_returns_at_once(tmp_path):
    assert Live(tmp_path).wait_evts(set(), timeout=5) == {}


def test_a_probe_that_asserts_is_polled_again_and_its_message_shown():
    calls = []

    def probe():
        calls.append(1)
        assert len(calls) >= 3, f"only {len(calls)} calls"
        return "done"

    assert wait_for(probe, 5, 0.01) == "done" and len(calls) == 3

    def never():
        raise AssertionError("not there yet")

    with pytest.raises(pytest.fail.Exception, match="not there yet"):
        wait_for(never, 0.1, 0.01)
