"""engine.live.outage alone, on fake clocks: when input pauses, when the store is probed again,
how the wait grows while unexpected errors repeat, and what the log says when it resumes."""

from __future__ import annotations

import logging
import sqlite3

import pytest

from engine.live.metrics import LogLimiter, Metrics
from engine.live.outage import STORE_RETRY_S, StoreOutage, describe


@pytest.fixture
def outage(clock):
    metrics = Metrics()
    return StoreOutage("/var/lib/recover.db", metrics, LogLimiter(clock=clock), clock=clock)


def sample(outage: StoreOutage, name: str) -> float | None:
    return outage.metrics.registry.get_sample_value(name)


def test_a_refused_write_pauses_input_and_the_store_is_probed_every_second(outage, clock, caplog):
    assert not outage.down and outage.due()
    with caplog.at_level(logging.ERROR, logger="engine.live.outage"):
        outage.failed(sqlite3.OperationalError("database or disk is full"))
    assert outage.down and not outage.due()
    assert sample(outage, "recover_store_healthy") == 0 and sample(outage, "recover_store_errors_total") == 1
    assert "refused a write (database or disk is full): input paused" in caplog.text
    clock.advance(STORE_RETRY_S - 0.01)
    assert not outage.due() and outage.wait_s(0.2) == pytest.approx(0.01)
    clock.advance(0.01)
    assert outage.due()
    assert outage.wait_s(0.2) == 0.2  # due: the loop sleeps a tick at most


def test_still_refusing_keeps_the_start_of_the_outage_and_says_so_rarely(outage, clock, caplog):
    outage.failed(OSError("full"))
    began = outage.down_since
    with caplog.at_level(logging.ERROR, logger="engine.live.outage"):
        for _ in range(10):
            clock.advance(1.0)
            outage.failed(OSError("full"))
    assert outage.down_since == began
    assert caplog.text.count("still refuses writes") == 1  # once per LOG_EVERY_S
    assert sample(outage, "recover_store_errors_total") == 11
    why = outage.recovered()
    assert why == "incident store /var/lib/recover.db accepts writes again after 10.0 s"
    assert not outage.down and sample(outage, "recover_store_healthy") == 1


@pytest.mark.parametrize("failures, wait", [(1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (6, 30.0), (20, 30.0)])
def test_unexpected_errors_in_a_row_back_off_up_to_30_s(outage, clock, failures, wait):
    for _ in range(failures):
        outage.bug()
    assert outage.failures == failures and outage.down
    clock.advance(wait - 0.01)
    assert not outage.due()
    clock.advance(0.01)
    assert outage.due()
    assert outage.recovered() == "after an unexpected error"
    outage.succeeded()
    assert outage.failures == 0


def test_a_store_outage_after_an_error_is_reported_as_the_outage(outage, clock):
    outage.bug()
    outage.failed(OSError("disk I/O error"))
    clock.advance(3.0)
    assert outage.recovered().startswith("incident store /var/lib/recover.db accepts writes again after 3.0 s")


def test_describe_names_the_cause_behind_a_failed_rollback():
    try:
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.Error as cause:
            raise sqlite3.OperationalError("cannot rollback - no transaction is active") from cause
    except sqlite3.Error as exc:
        assert describe(exc) == "cannot rollback - no transaction is active; after: database or disk is full"
