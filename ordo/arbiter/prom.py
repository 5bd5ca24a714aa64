"""The arbiter's Prometheus metrics, served on ``/metrics`` (``ORDO_ARBITER_METRICS_PORT``, default 8767).

A private registry (never the process-global one): decisions by table,
outcome and reason; the time to decide one intent and to commit one batch
(histograms); the size of batches; intents lag per table; the time the last
rebuild of each table took; aborts; and, read from ``ArbiterMetrics`` at
scrape time, the problems an operator alerts on (internal errors, refused
unsigned records, chain breaks, gap re-reads and unresolved gaps, stopped
tables, checkpoints). Counters are counters (``_total``), gauges hold a
current value, no rate is pre-computed. The serving thread only reads; the
decide loop updates.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ordo.arbiter.metrics import ArbiterMetrics
from ordo.kernel.observe import Health, ObservabilityServer, register_build_info

log = logging.getLogger("ordo.arbiter")

DECIDE_BUCKETS = (0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05)
BATCH_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
SIZE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)


class ArbiterPrometheus:
    """The arbiter's metric families in their own registry; ``serve()`` starts the HTTP endpoint."""

    def __init__(self, metrics: ArbiterMetrics | None = None, stopped: Callable[[], set[str]] = set) -> None:
        """``metrics``: the counters the service keeps (exported at scrape time); ``stopped``: the tables it left."""
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        register_build_info(r, "arbiter")
        self.health = Health("arbiter")
        if metrics is not None:
            r.register(_CountersCollector(metrics, stopped))  # type: ignore[arg-type]
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
        self.unserved = Gauge(
            "ordo_arbiter_tables_unserved",
            "Tables the fleet's group assigns this arbiter but it cannot serve (it reports not ready)",
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
        """Serve ``/metrics``, ``/healthz``, ``/readyz`` on ``host:port`` (0: any free one); returns the port."""
        self.server = ObservabilityServer(self.registry, self.health, host, port).start()
        log.info("arbiter metrics at %s/metrics (and /healthz, /readyz)", self.server.url)
        return int(self.server.port)

    def close(self) -> None:
        """Stop serving."""
        if self.server is not None:
            self.server.close()
            self.server = None


class _CountersCollector:
    """``ArbiterMetrics`` as Prometheus families, read at scrape time (the loop keeps plain ints)."""

    def __init__(self, metrics: ArbiterMetrics, stopped: Callable[[], set[str]]) -> None:
        self.metrics = metrics
        self.stopped = stopped

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        m = self.metrics
        for name, help_text, value in (
            (
                "ordo_arbiter_internal_errors",
                "Intents whose decision raised inside ordo (answered MALFORMED_INTENT)",
                m.internal_errors,
            ),
            (
                "ordo_arbiter_refused_unsigned",
                "Decisions-log records no trusted signature vouched for (never folded)",
                m.refused_unsigned,
            ),
            (
                "ordo_arbiter_chain_breaks",
                "Decisions logs whose hash chain broke while rebuilding (table left undecided)",
                m.chain_breaks,
            ),
            (
                "ordo_arbiter_skipped_duplicates",
                "Repeated or reordered decisions skipped while rebuilding",
                m.skipped_duplicates,
            ),
            ("ordo_arbiter_checkpoints_written", "Checkpoints written", m.checkpoints_written),
            ("ordo_arbiter_checkpoint_failures", "Checkpoints that failed to write", m.checkpoint_failures),
            (
                "ordo_arbiter_intent_rereads",
                "Ranges of the intents logs re-read because the fetch skipped them",
                m.intent_gaps.rereads,
            ),
            (
                "ordo_arbiter_intent_recovered",
                "Intent records a re-read found that the fetch had skipped",
                m.intent_gaps.recovered,
            ),
            (
                "ordo_arbiter_intent_unresolved_gaps",
                "Intents-log gaps still unexplained after the re-reads (held back)",
                m.intent_gaps.unresolved,
            ),
            (
                "ordo_arbiter_decision_rereads",
                "Ranges of decisions logs re-read while rebuilding",
                m.decision_gaps.rereads,
            ),
            (
                "ordo_arbiter_decision_unresolved_gaps",
                "Decisions-log gaps still unexplained while rebuilding",
                m.decision_gaps.unresolved,
            ),
        ):
            yield CounterMetricFamily(name, help_text, value=value)
        stopped = GaugeMetricFamily(
            "ordo_arbiter_table_stopped",
            "1 for a table this arbiter owns but leaves undecided until restart (its log could not be folded)",
            labels=["table"],
        )
        for table in sorted(self.stopped()):
            stopped.add_metric([table], 1)
        yield stopped
        yield GaugeMetricFamily(
            "ordo_arbiter_tables_stopped",
            "Tables this arbiter leaves undecided until restart",
            value=len(self.stopped()),
        )


__all__ = ["ArbiterPrometheus"]
