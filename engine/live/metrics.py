"""Prometheus metrics of the controller (served on ``--metrics-port`` when given), the gauges it
refreshes every second, and the limiter that keeps one recurring problem from flooding its log.

Each controller owns its registry, so several controllers in one process (tests) do not clash.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from engine.clock import SYSTEM, Clock

logger = logging.getLogger(__name__)

__all__ = ["Gauges", "LogLimiter", "Metrics", "update_ha"]

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
#: errors of the same kind are logged at most this often
LOG_EVERY_S = 30.0
#: the follower's counters of file problems -> the reason label of recover_source_errors_total
_FILE_ERRORS = (
    ("unreadable", "unreadable"),
    ("vanished", "vanished"),
    ("read_errors", "read_error"),
    ("rotations", "rotated"),
    ("truncations", "truncated"),
)


class Metrics:
    def __init__(self, port: int | None = None):
        r = self.registry = CollectorRegistry()
        self.incidents = Counter(
            "recover_incidents_total",
            "Incidents closed, by fault class and decision",
            ["fault_class", "decision"],
            registry=r,
        )
        self.latency = Histogram(
            "recover_detection_latency_seconds",
            "From the last write of a followed file (its mtime, or the read when earlier) to the "
            "commit of the incident its new lines opened",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.lines = Counter("recover_lines_total", "Log lines read", registry=r)
        self.facts = Counter("recover_facts_total", "Facts taken by the engine", registry=r)
        self.lines_rate = Gauge(
            "recover_lines_per_second", "Log lines read per second (over the last few seconds)", registry=r
        )
        self.facts_rate = Gauge(
            "recover_facts_per_second", "Facts taken per second (over the last few seconds)", registry=r
        )
        self.sources = Gauge("recover_sources", "Sources followed", ["kind"], registry=r)
        self.sources_healthy = Gauge(
            "recover_sources_healthy", "Sources that could be read at their last try", ["kind"], registry=r
        )
        self.sources_unhealthy = Gauge(
            "recover_sources_unhealthy",
            "Sources that could not be read at their last try (unreadable, vanished, failing)",
            ["kind"],
            registry=r,
        )
        self.source_health = Gauge(
            "recover_source_healthy", "1 when the source answered at its last read", ["source"], registry=r
        )
        self.source_errors = Counter(
            "recover_source_errors_total",
            "Problems met reading sources (unreadable, vanished, read_error, rotated, truncated, long_line, garbage)",
            ["kind", "reason"],
            registry=r,
        )
        self.reloads = Counter("recover_rulebook_reloads_total", "Rulebook reloads", ["result"], registry=r)
        self.store_errors = Counter("recover_store_errors_total", "Failed writes to the incident store", registry=r)
        self.store_healthy = Gauge("recover_store_healthy", "1 while the incident store accepts writes", registry=r)
        self.spool_garbage = Gauge("recover_spool_garbage_lines", "Spool lines that were not facts", registry=r)
        self.quarantined = Counter(
            "recover_quarantined_total",
            "Inputs (lines, spool facts) whose handling failed: kept aside in the store's quarantine, the rest goes on",
            ["kind"],
            registry=r,
        )
        self.refused = Counter(
            "recover_refused_total",
            "Claims refused at a trust boundary (a job log naming another "
            "job or node, a spool fact for another node or of a scheduler kind, a file that is not regular)",
            ["reason"],
            registry=r,
        )
        self.errors = Counter(
            "recover_internal_errors_total", "Unexpected errors survived by the controller loop", registry=r
        )
        self.actions = Counter("recover_actions_total", "Actions by name and outcome", ["action", "status"], registry=r)
        # one leader among the controllers sharing the store (engine/live/leader.py)
        self.leader = Gauge("recover_leader", "1 while this controller holds the leader lease and may act", registry=r)
        self.leader_term = Gauge(
            "recover_leader_term", "The lease term this controller leads under (0: follows)", registry=r
        )
        self.lease_age = Gauge(
            "recover_lease_age_seconds", "Seconds since the current leader took the lease (database clock)", registry=r
        )
        self.controllers = Gauge(
            "recover_controllers",
            "Controllers sharing this store, by role (from their heartbeats)",
            ["role"],
            registry=r,
        )
        self.takeovers = Counter("recover_leader_takeovers_total", "Times this controller took the lease", registry=r)
        self.follower_behind = Gauge(
            "recover_follower_behind_bytes",
            "A follower: bytes of its followed files the leader has committed and it has not read yet (0 leading)",
            registry=r,
        )
        self.scheduler_healthy = Gauge(
            "recover_scheduler_healthy", "1 when the scheduler answered this controller's last poll", registry=r
        )
        self.backlog = Gauge(
            "recover_actions_backlog", "Acted actions journaled but not finished (planned, started, ...)", registry=r
        )
        self.store_healthy.set(1)
        for reason in ("unreadable", "vanished", "read_error", "rotated", "truncated", "long_line"):
            self.source_errors.labels(kind="file", reason=reason)
        self.source_errors.labels(kind="spool", reason="garbage")
        self.source_errors.labels(kind="spool", reason="unreadable")
        self.reloads.labels(result="ok")
        self.reloads.labels(result="rejected")
        self._server = None
        if port:
            from prometheus_client import start_http_server

            self._server, self._thread = start_http_server(port, addr="127.0.0.1", registry=r)
            logger.info("metrics on http://127.0.0.1:%d/metrics", port)

    def text(self) -> str:
        return generate_latest(self.registry).decode()

    def stop(self) -> None:
        """Stop serving. Does not wait for the server loop (it polls every 0.5 s): the process
        is about to end and the server thread is a daemon."""
        server, self._server = self._server, None
        if server is not None:
            import threading

            def close() -> None:
                server.shutdown()
                server.server_close()

            threading.Thread(target=close, name="metrics-stop", daemon=True).start()


class LogLimiter:
    """The same kind of problem is logged at most once per ``every`` seconds::

    if limiter.ok("spool"):
        logger.warning("spool %s: read failed: %s", path, exc)
    """

    def __init__(self, every: float = LOG_EVERY_S, clock: Clock = SYSTEM):
        self.every = every
        self.clock = clock
        self._last: dict[str, float] = {}

    def ok(self, key: str) -> bool:
        now = self.clock.monotonic()
        if now - self._last.get(key, -self.every) >= self.every:
            self._last[key] = now
            return True
        return False


class Gauges:
    """What the controller's loop refreshes every second: line and fact rates, source health, and
    the follower's problem counters turned into increments of ``recover_source_errors_total``."""

    def __init__(self, metrics: Metrics, clock: Clock = SYSTEM):
        self.metrics = metrics
        self.clock = clock
        self._rate_mark = (clock.monotonic(), 0, 0)
        self._file_errors: dict[str, int] = {}

    def update(
        self,
        *,
        lines: int,
        facts: int,
        files: tuple[int, int],
        file_stats: Mapping[str, int],
        spool_ok: bool | None,
        scheduler: bool,
    ) -> None:
        """``lines``/``facts``: committed since start; ``files``: (healthy, unhealthy) followed files;
        ``spool_ok``: None without a spool; ``scheduler``: whether one is polled."""
        m = self.metrics
        now = self.clock.monotonic()
        t0, l0, f0 = self._rate_mark
        if now - t0 >= 1.0:
            m.lines_rate.set((lines - l0) / (now - t0))
            m.facts_rate.set((facts - f0) / (now - t0))
            self._rate_mark = (now, lines, facts)
        healthy, unhealthy = files
        m.sources.labels(kind="file").set(healthy + unhealthy)
        m.sources_healthy.labels(kind="file").set(healthy)
        m.sources_unhealthy.labels(kind="file").set(unhealthy)
        if spool_ok is not None:
            m.sources.labels(kind="spool").set(1)
            m.sources_healthy.labels(kind="spool").set(1 if spool_ok else 0)
            m.sources_unhealthy.labels(kind="spool").set(0 if spool_ok else 1)
        if scheduler:
            m.sources.labels(kind="scheduler").set(1)
        for key, reason in _FILE_ERRORS:
            v = file_stats.get(key, 0)
            d = v - self._file_errors.get(key, 0)
            if d > 0:
                m.source_errors.labels(kind="file", reason=reason).inc(d)
                self._file_errors[key] = v

    def of_controller(self, ctl: Any, store_errors: tuple[type[BaseException], ...]) -> None:
        """Every gauge of a running controller (``live.controller``), its HA ones included (a
        store error, ``store_errors``, leaves those for the next time)."""
        self.update(
            lines=ctl.batch.lines_total,
            facts=ctl.batch.facts_total,
            files=ctl.follower.health(),
            file_stats=ctl.follower.stats,
            spool_ok=ctl.spool_in.healthy() if ctl.spool_in is not None else None,
            scheduler=ctl.adapter is not None,
        )
        try:
            update_ha(self.metrics, ctl.leader, ctl.store, ctl.sched.ok if ctl.sched is not None else None)
        except store_errors as exc:
            logger.debug("HA gauges: %s", exc)


def update_ha(m: Metrics, leader, store, scheduler_ok: bool | None) -> None:
    """The leader, follower and backlog gauges, from the lease and the store (every second)."""
    m.leader.set(1 if leader.acting() else 0)
    m.leader_term.set(leader.term or 0)
    if scheduler_ok is not None:
        m.scheduler_healthy.set(1 if scheduler_ok else 0)
    lease = store.lease()
    m.lease_age.set(max(0.0, lease.now - lease.acquired_at) if lease is not None and lease.live else 0)
    roles = {"leader": 0, "follower": 0}
    for c in store.controllers():
        if c["age_s"] <= 3 * leader.ttl:  # a heartbeat older than that is a controller gone
            roles[c["role"]] = roles.get(c["role"], 0) + 1
    for role, n in roles.items():
        m.controllers.labels(role=role).set(n)
    m.backlog.set(sum(store.backlog().values()))
