"""The arbiter's intents reader: every owned table's intents log, in order, with skipped records re-read.

One read_committed consumer, ``assign()``-ed at each table's resume offset (the
offset after its last decided intent: the decisions log is the progress
marker). Every record a fetch skipped is re-read and put back in place
(``kernel.logread``; Tansu skips some under concurrent appends, docs/tansu.md).

Idle (no intent for ``idle_after`` seconds, no open transaction), the consumer
is unassigned and a *doorbell* consumer with the long fetch wait watches the
logs instead: Tansu answers an empty fetch only after the full
``fetch.wait.max.ms``, so the short wait that keeps decisions fast would cost the
broker a fetch per millisecond per idle consumer. The doorbell's records are
never decided; the first one wakes the intents consumer, assigned again where it
was (``assign()`` fetches within a millisecond; librdkafka's ``resume()`` can
take a second), which reads it with gaps checked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from ordo.arbiter.metrics import ArbiterMetrics
from ordo.arbiter.prom import ArbiterPrometheus
from ordo.arbiter.sink import KAFKA_TIMEOUT, on_kafka_error
from ordo.kernel.admin import fetch_waits
from ordo.kernel.logread import GapChecker, warm_metadata
from ordo.kernel.settings import Settings

log = logging.getLogger("ordo.arbiter")
kafka_log = logging.getLogger("ordo.kafka")  # librdkafka's own log lines

IDLE_AFTER = 1.0  # seconds without an intent before the intents consumer unassigns and the doorbell watches

Positions = Callable[[], Iterable[tuple[str, int]]]  # (intents topic, resume offset) of every owned table


def consumer_config(settings: Settings, role: str, wait_ms: int | None = None) -> dict[str, Any]:
    """An arbiter consumer of ``role`` (its ``client.id``), fetching with the short wait unless ``wait_ms`` says."""
    prefix = settings.topic_prefix
    return settings.kafka_config(
        **{
            "group.id": f"{prefix}.arbiter",
            "client.id": f"{prefix}.arbiter.{role}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": fetch_waits(settings).busy if wait_ms is None else wait_ms,
            "enable.partition.eof": True,  # an end beyond the last record read is a gap (kernel.logread)
            "error_cb": on_kafka_error,
            "logger": kafka_log,
        }
    )


class IntentReader:
    """Fetches the next intents of the owned tables; sleeps on a doorbell when idle."""

    def __init__(
        self,
        settings: Settings,
        positions: Positions,
        metrics: ArbiterMetrics,
        prom: ArbiterPrometheus,
        *,
        poll_timeout: float = 0.05,
        idle_after: float = IDLE_AFTER,
    ) -> None:
        self.settings = settings
        self.poll_timeout = poll_timeout
        self.idle_after = idle_after
        self.idle = False
        self.consumer: Any = None
        self._positions = positions
        self._metrics = metrics
        self._prom = prom
        self._doorbell: Any = None  # while idle: the only fetcher of the intents logs, with the long wait
        self._gaps: Any = None
        self._last_work = time.monotonic()

    def open(self) -> None:
        """Create the consumers (nothing assigned yet)."""
        from confluent_kafka import Consumer

        self.consumer = Consumer(consumer_config(self.settings, "intents"))
        self._doorbell = Consumer(consumer_config(self.settings, "doorbell", fetch_waits(self.settings).idle))
        self._gaps = GapChecker(
            consumer_config(self.settings, "intents-reread"),
            transactional=False,
            consumer=self.consumer,
            name="arbiter intents",
            keep_eof=False,
            stats=self._metrics.intent_gaps,
        )

    def warm(self) -> None:
        """Fill the consumers' metadata caches (a consumer assigned a topic it has no metadata for waits ~1 s)."""
        for consumer in (self.consumer, self._doorbell):
            warm_metadata(consumer, KAFKA_TIMEOUT)

    def follow(self, topic: str, offset: int) -> None:
        """Read ``topic`` from ``offset`` on."""
        from confluent_kafka import TopicPartition

        self.consumer.incremental_assign([TopicPartition(topic, 0, offset)])
        self._gaps.expect(topic, offset)
        if self.idle:
            self.wake()  # a new table: fetch everything with the short wait again

    def forget(self, topic: str) -> None:
        """Stop reading ``topic``."""
        from confluent_kafka import TopicPartition

        self._gaps.forget(topic)
        try:
            self.consumer.incremental_unassign([TopicPartition(topic, 0)])
        except Exception:  # not assigned
            log.debug("unassign %s failed", topic, exc_info=True)

    def fetch(self, room: int, in_txn: bool) -> list[Any]:
        """Up to ``room`` records fetched already; when none is waiting and no transaction is open, wait a little.

        ``consume(n, timeout)`` waits until it has ``n`` records or the timeout
        passed, which would add the whole timeout to every decision at low load;
        ``poll`` returns with the first record. Idle for ``idle_after`` seconds
        outside a transaction, the doorbell takes over.
        """
        messages = self._next(room, in_txn)
        now = time.monotonic()
        if messages:
            self._last_work = now
        elif not in_txn and not self.idle and now - self._last_work >= self.idle_after:
            self._sleep()
        return messages

    def _next(self, room: int, in_txn: bool) -> list[Any]:
        consumer = self.consumer
        if in_txn:
            return self._gaps.check(consumer.consume(num_messages=room, timeout=0))  # type: ignore[no-any-return]
        if self.idle:
            ring = self._doorbell.poll(self.poll_timeout)
            if ring is None or ring.error() is not None:
                return []
            self.wake()
        first = consumer.poll(self.poll_timeout)
        if first is None:
            return []
        batch = [first, *consumer.consume(num_messages=room - 1, timeout=0)] if room > 1 else [first]
        return self._gaps.check(batch)  # type: ignore[no-any-return]

    def _resume_at(self) -> list[Any]:
        from confluent_kafka import TopicPartition

        start = []
        for topic, offset in self._positions():
            expected = self._gaps.expected(topic)
            start.append(TopicPartition(topic, 0, offset if expected is None else expected))
        return start

    def _sleep(self) -> None:
        """Idle: unassign the intents consumer and let the doorbell (long fetch wait) watch the logs from there."""
        start = self._resume_at()
        if not start:
            return
        self.consumer.unassign()
        self._doorbell.assign(start)
        self.idle = True
        self._metrics.sleeps += 1
        self._prom.sleeps.inc()

    def wake(self) -> None:
        """Work arrived (or a table): stop the doorbell, assign the intents consumer again where it stopped."""
        self._doorbell.unassign()
        self.consumer.assign(self._resume_at())
        self.idle = False
        self._last_work = time.monotonic()

    def restart(self) -> None:
        """After an aborted transaction: a fresh consumer at every table's resume offset.

        The old one may hold prefetched records past the rebuilt positions.
        """
        from confluent_kafka import Consumer, TopicPartition

        if self.idle:
            self._doorbell.unassign()
            self.idle = False
        old = self.consumer
        self.consumer = Consumer(consumer_config(self.settings, "intents"))
        warm_metadata(self.consumer, KAFKA_TIMEOUT)
        positions = list(self._positions())
        self.consumer.incremental_assign([TopicPartition(topic, 0, offset) for topic, offset in positions])
        self._gaps.attach(self.consumer)
        for topic, offset in positions:
            self._gaps.expect(topic, offset)
        old.close()

    def lag(self, tables: Iterable[tuple[str, str, int]]) -> dict[str, int]:
        """Intents lag of each ``(table, intents topic, resume offset)`` from cached high watermarks (no round trip)."""
        from confluent_kafka import TopicPartition

        lag: dict[str, int] = {}
        for name, topic, offset in tables:
            try:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, 0), cached=True)
            except Exception:
                continue
            if high is not None and high >= 0:
                lag[name] = max(0, high - offset)
        return lag

    def close(self) -> None:
        """Close the consumers."""
        for client in (self.consumer, self._doorbell):
            if client is not None:
                try:
                    client.close()
                except Exception:  # closing is best effort
                    log.debug("closing consumer failed", exc_info=True)
        if self._gaps is not None:
            self._gaps.close()
        self.consumer = self._doorbell = None


__all__ = ["IDLE_AFTER", "IntentReader", "consumer_config"]
