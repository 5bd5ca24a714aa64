"""The arbiter's Prometheus metrics, served on ``/metrics`` when ``ORDO_ARBITER_METRICS_PORT`` is set.

A private registry (never the process-global one): decisions by table,
outcome and reason; the time to decide one intent and to commit one batch
(histograms); the size of batches; intents lag per table; the time the last
rebuild of each table took; aborts and gap re-reads. The serving thread only
reads; the decide loop updates.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("ordo.arbiter")

DECIDE_BUCKETS = (0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05)
BATCH_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
SIZE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)


class ArbiterPrometheus:
    """The arbiter's metric families in their own registry; ``serve()`` starts the HTTP endpoint."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.decisions = Counter(
            "ordo_arbiter_decisions",
            "Decisions written, by table, outcome and reason",
            ["table", "outcome", "reason"],
            registry=r,
        )
        self.decide_seconds = Histogram(
            "ordo_arbiter_decide_seconds",
            "Time to decide one intent (decode, decide, encode)",
            buckets=DECIDE_BUCKETS,
            registry=r,
        )
        self.batch_seconds = Histogram(
            "ordo_arbiter_batch_seconds",
            "Time from a batch's first decision to its transactions committed",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "ordo_arbiter_batch_decisions",
            "Decisions per batch (one transaction per table)",
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.lag = Gauge(
            "ordo_arbiter_intents_lag", "Intents published but not yet decided, by table", ["table"], registry=r
        )
        self.rebuild_seconds = Gauge(
            "ordo_arbiter_rebuild_seconds", "Duration of the last rebuild of a table's state", ["table"], registry=r
        )
        self.aborts = Counter("ordo_arbiter_aborts", "Transactions aborted (state rebuilt)", registry=r)
        self.sleeps = Counter(
            "ordo_arbiter_idle_sleeps", "Times the intents consumer paused for want of work (doorbell on)", registry=r
        )
        self.tables = Gauge("ordo_arbiter_tables", "Tables this arbiter owns", registry=r)
        self.intent_rereads = Gauge(
            "ordo_arbiter_intent_rereads",
            "Ranges of the intents logs re-read because the fetch skipped them",
            registry=r,
        )
        self._children: dict[tuple[str, str, str], Any] = {}
        self.server: Any = None

    def decided(self, table: str, outcome: str, reason: str) -> None:
        """Count one decision (label children cached: this is on the hot path)."""
        key = (table, outcome, reason)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.decisions.labels(table, outcome, reason)
        child.inc()

    def serve(self, port: int, host: str) -> int:
        """Serve ``/metrics`` on ``host:port`` (port 0: any free one) from a daemon thread; returns the port."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self.server = server
        bound = int(server.server_address[1])
        log.info("arbiter metrics on http://%s:%d/metrics", host, bound)
        return bound

    def close(self) -> None:
        """Stop serving."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


__all__ = ["ArbiterPrometheus"]
