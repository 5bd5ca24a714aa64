"""The arbiter's intents reader: every owned table's intents log, in order, with skipped records re-read.

One read_committed consumer, ``assign()``-ed at each table's resume offset (the
offset after its last decided intent: the decisions log is the progress
marker). Every record a fetch skipped is re-read and put back in place
(``kernel.logread``; Tansu skips some under concurrent appends, docs/tansu.md).

Idle (every intents log read to its end, then no intent for ``idle_after``
seconds outside a transaction), the consumer is unassigned and a *doorbell*
consumer with the long fetch wait watches the logs instead: Tansu answers an
empty fetch only after the full ``fetch.wait.max.ms``, so the short wait that
keeps decisions fast would cost the broker a fetch per millisecond per idle
consumer. The doorbell's records are never decided; the first one wakes the
intents consumer, assigned again where it was (``assign()`` fetches within a
millisecond on a quiet machine; librdkafka's ``resume()`` can take a second),
which reads it with gaps checked.

"Read to its end" is the consumer's end-of-partition event, not a quiet
spell: on a loaded machine the first records after an ``assign()`` took up to
1.1 s, and an arbiter that slept again after ``idle_after`` seconds without a
record slept before reading what woke it, was woken at once by the doorbell,
and so on, deciding nothing for minutes while every writer timed out (issue
32). Time in a transaction does not count as idle either: a commit slower than
``idle_after`` put the arbiter to sleep between two batches of a busy table.
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
        self._last_work = time.monotonic()  # the last record, wake-up or transaction: the idle clock starts there
        self._unread: set[str] = set()  # assigned intents logs not read to their end since a record or assignment

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
            stats=self._metrics.intent_gaps,  # end-of-partition events kept: they say a log is read to its end
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
        self._unread.add(topic)
        if self.idle:
            self.wake()  # a new table: fetch everything with the short wait again

    def forget(self, topic: str) -> None:
        """Stop reading ``topic``."""
        from confluent_kafka import TopicPartition

        self._gaps.forget(topic)
        self._unread.discard(topic)
        try:
            self.consumer.incremental_unassign([TopicPartition(topic, 0)])
        except Exception:  # not assigned
            log.debug("unassign %s failed", topic, exc_info=True)

    def fetch(self, room: int, in_txn: bool) -> list[Any]:
        """Up to ``room`` records fetched already; when none is waiting and no transaction is open, wait a little.

        ``consume(n, timeout)`` waits until it has ``n`` records or the timeout
        passed, which would add the whole timeout to every decision at low load;
        ``poll`` returns with the first record. Once every intents log is read
        to its end and ``idle_after`` seconds passed outside a transaction
        without a record, the doorbell takes over.
        """
        messages = self._next(room, in_txn)
        now = time.monotonic()
        if messages or in_txn:
            self._last_work = now  # a transaction's end, not its start, begins the idle clock
        elif not self.idle and not self._unread and now - self._last_work >= self.idle_after:
            self._sleep()
        return messages

    def _next(self, room: int, in_txn: bool) -> list[Any]:
        consumer = self.consumer
        if in_txn:
            return self._records(consumer.consume(num_messages=room, timeout=0))
        if self.idle:
            ring = self._doorbell.poll(self.poll_timeout)
            if ring is None or ring.error() is not None:
                return []
            self.wake()
        first = consumer.poll(self.poll_timeout)
        if first is None:
            return []
        return self._records([first, *consumer.consume(num_messages=room - 1, timeout=0)] if room > 1 else [first])

    def _records(self, batch: list[Any]) -> list[Any]:
        """``batch`` gap-checked, without its end-of-partition events: each marks its log read to the end."""
        from confluent_kafka import KafkaError

        out = []
        for message in self._gaps.check(batch):
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                self._unread.discard(message.topic())
                continue
            if error is None:
                self._unread.add(message.topic())
            out.append(message)
        return out

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
        start = self._resume_at()
        self.consumer.assign(start)
        self._unread = {tp.topic for tp in start}  # not idle again before the consumer read each to its end
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
        self._unread = {topic for topic, _ in positions}
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
