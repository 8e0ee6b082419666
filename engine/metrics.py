"""Prometheus metrics of the controller (served on ``--metrics-port`` when given).

Each controller owns its registry, so several controllers in one process (tests) do not clash.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

logger = logging.getLogger(__name__)

__all__ = ["Metrics"]

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    def __init__(self, port: int | None = None):
        r = self.registry = CollectorRegistry()
        self.incidents = Counter("recover_incidents_total", "Incidents closed, by fault class and decision",
                                 ["fault_class", "decision"], registry=r)
        self.latency = Histogram("recover_detection_latency_seconds", "From reading a fault line to its incident being committed",
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.lines = Counter("recover_lines_total", "Log lines read", registry=r)
        self.facts = Counter("recover_facts_total", "Facts taken by the engine", registry=r)
        self.sources = Gauge("recover_sources", "Sources followed", ["kind"], registry=r)
        self.source_health = Gauge("recover_source_healthy", "1 when the source answered at its last read", ["source"], registry=r)
        self.reloads = Counter("recover_rulebook_reloads_total", "Rulebook reloads", ["result"], registry=r)
        self.store_errors = Counter("recover_store_errors_total", "Failed writes to the incident store", registry=r)
        self.spool_garbage = Gauge("recover_spool_garbage_lines", "Spool lines that were not facts", registry=r)
        self.actions = Counter("recover_actions_total", "Actions by name and outcome", ["action", "status"], registry=r)
        self._server = None
        if port:
            from prometheus_client import start_http_server

            self._server, self._thread = start_http_server(port, addr="127.0.0.1", registry=r)
            logger.warning("metrics on http://127.0.0.1:%d/metrics", port)

    def text(self) -> str:
        return generate_latest(self.registry).decode()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None
