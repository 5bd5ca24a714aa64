"""The consumer's Kafka loop: follow every ``<prefix>.*.decisions`` topic and fold it into the catalog.

The adapter around ``consumer.store.CatalogWriter``, in named parts as the
arbiter's service is: ``Materializer`` (here) owns the Kafka consumer, the
consumer group and the loop (poll, verify signatures, apply a batch);
``consumer.following.Following`` which topics are followed from which offset,
stopped tables, readiness and lag; ``consumer.repair.RepairDesk`` the repairs
run while every other table is served. The only modules of the consumer that
import ``confluent_kafka`` are these.

* ``assign()``-based: no consumer group (a group join costs ~3-23 s on Tansu and
  buys nothing, since the catalog stores its own offsets). Topics are
  rediscovered with a metadata request every ``discovery_interval`` seconds, so
  a new table is followed within about a second of its first decision.
* ``read_committed``: decisions of an aborted arbiter transaction are never
  applied on Kafka. (Tansu shows them anyway; the arbiter chains on what it
  sees, so the hash chain stays whole. See docs/tansu.md.)
* Each batch of records is applied in one SQLite transaction together with
  each table's next offset: a kill -9 at any moment resumes exactly there.
* Only signed history is applied (``schemas.signing``): a record is held until a
  trusted arbiter signature vouches for it; a forged, unsigned or unknown-key
  record is refused (logged with its offset, counted in ``refused_total``) and
  never reaches the catalog.
* A table whose log cannot be applied (hash-chain break, undecodable record,
  inconsistent decision, log shorter than the catalog) is unassigned and
  reported; every other table keeps being served.
* Scale-out (a PostgreSQL catalog): ``ORDO_CONSUMER_SHARD=I/N`` follows only
  the tables with ``crc32(name) % N == I``, so N consumers on any hosts share
  one catalog. Correctness does not rest on the split: ``CatalogWriter.apply``
  re-reads (and locks) each table's row in its transaction, so two consumers
  following one table (overlapping settings, a rolling change of N) take turns
  and never apply a record twice. A repaired table is followed again at the
  next discovery.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import uuid
import zlib
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ordo.consumer.following import KAFKA_TIMEOUT, READY_MESSAGE, Following
from ordo.consumer.repair import RepairDesk
from ordo.consumer.store import ApplyResult, CatalogWriter, LogRecord
from ordo.kernel.admin import fetch_waits
from ordo.kernel.errors import BrokerUnavailableError
from ordo.kernel.keys import reader_trust
from ordo.kernel.logread import GapChecker, GapStats, decisions_follow
from ordo.kernel.membership import GroupMembership
from ordo.kernel.settings import Settings
from ordo.kernel.validation import parse_shard
from ordo.schemas import decisions_pattern, decisions_topic, parse_topic
from ordo.schemas.signing import signature_of

log = logging.getLogger("ordo.consumer")


@dataclass
class ConsumerStatus:
    """Live counters of one materializer, shared with the HTTP service (thread-safe)."""

    started_at: float = field(default_factory=time.time)
    ready: bool = False
    kafka_ok: bool = False
    applied_total: int = 0
    refused_total: int = 0  # decision records no trusted signature vouched for (never applied)
    errors_total: int = 0  # Kafka and discovery errors the loop hit (``last_error`` is the newest)
    commits_total: int = 0
    batches_total: int = 0
    lag: dict[str, int] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)
    last_error: str | None = None
    gaps: GapStats = field(default_factory=GapStats)  # re-reads of skipped offsets (kernel.logread)
    _rate_window: collections.deque[tuple[float, int]] = field(default_factory=lambda: collections.deque(maxlen=120))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, result: ApplyResult) -> None:
        """Count one applied batch."""
        with self._lock:
            self.applied_total += result.applied
            self.commits_total += result.commits
            self.batches_total += 1
            for table, _offset, error in result.broken:
                self.broken[table] = error

    def tick(self) -> None:
        """Sample the applied counter (about once a second) for ``rate``."""
        with self._lock:
            self._rate_window.append((time.monotonic(), self.applied_total))

    def rate(self, window: float = 10.0) -> float:
        """Decisions applied per second over the last ``window`` seconds."""
        with self._lock:
            samples = list(self._rate_window)
            total = self.applied_total
        now = time.monotonic()
        recent = [s for s in samples if now - s[0] <= window]
        if not recent:
            return 0.0
        elapsed = now - recent[0][0]
        return (total - recent[0][1]) / elapsed if elapsed > 0 else 0.0

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        with self._lock:
            data = {
                "ready": self.ready,
                "kafka_ok": self.kafka_ok,
                "uptime_s": round(time.time() - self.started_at, 3),
                "applied_total": self.applied_total,
                "refused_total": self.refused_total,
                "errors_total": self.errors_total,
                "commits_total": self.commits_total,
                "batches_total": self.batches_total,
                "lag": dict(self.lag),
                "broken": dict(self.broken),
                "last_error": self.last_error,
                "gaps": self.gaps.snapshot(),
            }
        data["rate"] = round(self.rate(), 3)
        return data


class Materializer:
    """Folds every decisions topic under ``settings.topic_prefix`` into the catalog at ``settings.catalog``.

    ``run()`` blocks until ``stop()`` (callable from a signal handler or another thread).
    """

    def __init__(
        self,
        settings: Settings,
        writer: CatalogWriter | None = None,
        status: ConsumerStatus | None = None,
        *,
        batch_size: int = 5000,
        discovery_interval: float = 1.0,
        poll_timeout: float = 0.1,
    ) -> None:
        self.settings = settings
        self.prefix = settings.topic_prefix
        self.writer = writer if writer is not None else CatalogWriter(settings.catalog, settings.topic_prefix)
        self.status = status if status is not None else ConsumerStatus()
        self.batch_size = batch_size
        self.discovery_interval = discovery_interval
        self.poll_timeout = poll_timeout
        self._shard = parse_shard(settings.consumer_shard)
        # With a consumer group the group's assignment, not the shard, says which tables this consumer follows.
        self.group = settings.consumer_group or None
        if self.group is not None and self._shard != (0, 1):
            raise ValueError("a consumer shard and a consumer group exclude each other")
        self._membership: GroupMembership | None = None
        self._trust = reader_trust(settings)  # fails closed on a missing ORDO_TRUSTED_KEYS
        self._stop = threading.Event()
        self._consumer: Any = None
        self._gaps: Any = None  # GapChecker of the consumer
        self._following: Following | None = None  # the parts that need the Kafka consumer, made by ``run``
        self._repairs: RepairDesk | None = None

    def stop(self) -> None:
        """Ask ``run()`` to return after the current batch."""
        self._stop.set()

    # ------------------------------------------------------------------ lifecycle

    def run(self) -> None:
        """Follow the decisions topics until stopped."""
        from confluent_kafka import Consumer

        self._consumer = Consumer(self._consumer_config())
        self._gaps = GapChecker(
            self._consumer_config(),
            transactional=True,  # decisions logs: the arbiter's transactional producer only
            consumer=self._consumer,
            name="consumer",
            stats=self.status.gaps,
            follows=decisions_follow,  # a decision skipped inside a transaction breaks the hash chain: re-read
        )
        self._following = Following(
            self.settings, self.writer, self.status, self._trust, self._consumer, self._gaps, self._owns
        )
        self._repairs = RepairDesk(self.settings, self.writer, self._following, self.status)
        try:
            if self.group is not None:
                self._join_group()
            self._loop(self._following, self._repairs)
        finally:
            if self._membership is not None:
                self._membership.close()  # leaves the group: the others take its tables at once
                self._membership = None
            self._gaps.close()
            try:
                self._consumer.close()
            except Exception:  # closing is best effort
                log.debug("closing consumer failed", exc_info=True)
            self._consumer = None

    def request_repair(self, table: str) -> Future[Any]:
        """Re-materialize ``table`` from its decisions log (``consumer.repair``); a future of its ``RepairResult``.

        The log is read into a scratch catalog on a thread of its own; the loop
        then swaps the table's rows in one transaction and follows it again.
        Every other table is materialized and served meanwhile. Only while
        ``run()`` runs.
        """
        if self._repairs is None:
            raise RuntimeError("the materializer is not running")
        return self._repairs.request(table)

    def _owns(self, table: str) -> bool:
        """True when this consumer serves ``table``: its group assigned it, or it is in this consumer's shard."""
        if self._membership is not None:
            return self._membership.holds(table)
        return zlib.crc32(table.encode()) % self._shard[1] == self._shard[0]

    def _consumer_config(self) -> dict[str, Any]:
        return self.settings.kafka_config(
            **{
                # Never joins (assign() only) nor commits: the catalog holds the offsets.
                "group.id": f"{self.prefix}.consumer.{uuid.uuid4().hex[:12]}",
                "client.id": f"{self.prefix}.consumer",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                # A stored offset beyond the log end means the log lost records
                # (in-memory broker restarted): report it, never silently re-read.
                "auto.offset.reset": "error",
                "enable.partition.eof": True,
                # Tansu answers an empty fetch only after the full wait: the bound on commit-to-readable
                # latency when idle, traded against idle CPU (bench/readable.py measures both).
                "fetch.wait.max.ms": fetch_waits(self.settings).consumer,
                "allow.auto.create.topics": False,
                "error_cb": self._on_kafka_error,
            }
        )

    def _join_group(self) -> None:
        """Join the consumer group; when decisions topics exist, wait for the first assignment (Tansu: seconds)."""
        from confluent_kafka import KafkaException

        assert self.group is not None
        if not self.writer.store.shared:
            raise ValueError(
                f"consumer group {self.group!r} needs a catalog all members share (ORDO_CATALOG=postgresql://...); "
                f"{self.writer.path} is a file one consumer writes"
            )

        def table_of(topic: str) -> str | None:
            parsed = parse_topic(self.prefix, topic)
            return parsed[0] if parsed is not None and parsed[1] == "decisions" else None

        passthrough = self.settings.kafka  # ORDO_KAFKA__SESSION_TIMEOUT_MS etc. tune the handover
        config = self.settings.kafka_config(
            **{
                "client.id": f"{self.prefix}.consumer.membership",
                **{k: passthrough[k] for k in ("session.timeout.ms", "heartbeat.interval.ms") if k in passthrough},
            }
        )
        self._membership = GroupMembership(config, self.group, decisions_pattern(self.prefix), table_of)
        try:
            topics = self._consumer.list_topics(timeout=KAFKA_TIMEOUT).topics
        except KafkaException as exc:
            raise BrokerUnavailableError(f"cannot list topics: {exc.args[0]}") from exc
        # librdkafka joins only once the pattern matches a topic: with none yet there is nothing to wait for.
        assert self._following is not None
        self._membership.join(wait=self._following.matches(topics), stop=self._stop)
        log.info("consumer group %s: following table(s) %s", self.group, ", ".join(sorted(self._membership.owned)))

    def _serve_group(self) -> bool:
        """Serve the group; stop following what it revoked or lost; True when it assigned something new."""
        if self._membership is None:
            return False
        assert self._following is not None
        changes = self._membership.poll()
        for table in sorted(changes.revoked | changes.lost):
            self._following.release(decisions_topic(self.prefix, table))
        return bool(changes.assigned)

    def _on_kafka_error(self, error: Any) -> None:
        self.status.kafka_ok = False
        self.status.last_error = str(error)
        self.status.errors_total += 1
        log.warning("Kafka: %s", error)

    # ------------------------------------------------------------------ loop

    def _loop(self, following: Following, repairs: RepairDesk) -> None:
        next_discovery = 0.0
        while not self._stop.is_set():
            if repairs.pending:
                repairs.swap()
            if self._serve_group():
                next_discovery = 0.0  # follow the newly assigned tables now
            now = time.monotonic()
            if now >= next_discovery:
                try:
                    following.discover()
                    following.update_lag()
                except BrokerUnavailableError as exc:
                    self.status.kafka_ok = False
                    self.status.last_error = str(exc)
                    self.status.errors_total += 1
                    log.warning("topic discovery failed: %s; retrying", exc)
                self.status.tick()
                repairs.take_requests()
                next_discovery = time.monotonic() + self.discovery_interval
            messages = self._next_messages()
            if messages:
                self._process(following, messages)

    def _next_messages(self) -> list[Any]:
        first = self._consumer.poll(self.poll_timeout)
        if first is None:
            return []
        return self._gaps.check([first, *self._consumer.consume(num_messages=self.batch_size - 1, timeout=0)])

    def _process(self, following: Following, messages: list[Any]) -> None:
        from confluent_kafka import KafkaError

        records: list[LogRecord] = []
        ends: list[str] = []
        applied: dict[str, int] = {}  # per topic, the last offset its verifier released to apply
        for message in messages:
            topic = message.topic()
            error = message.error()
            if error is not None:
                code = error.code()
                if code == KafkaError._PARTITION_EOF:
                    ends.append(topic)
                elif code == KafkaError._AUTO_OFFSET_RESET and topic in following.topics:
                    following.fail(topic, f"the decisions log has no record at the catalog's offset ({error.str()})")
                elif code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                    continue
                else:
                    log.warning("reading %s: %s", topic, error)
                continue
            table = following.topics.get(topic)
            verifier = following.verifiers.get(topic)
            if table is None or verifier is None:
                continue
            _, timestamp = message.timestamp()
            offset, value = message.offset(), message.value()
            record = LogRecord(table, offset, timestamp if timestamp >= 0 else None, value)
            released, refused = verifier.push(offset, value, signature_of(message.headers()), record)
            records.extend(released)
            if released:
                applied[topic] = released[-1].offset
            for refusal in refused:
                self.status.refused_total += 1
                log.error(
                    "table %s: decision at offset %d refused: %s",
                    table,
                    refusal.offset,
                    refusal.reason,
                    extra={"event": "refused", "table": table, "offset": refusal.offset},
                )
        if records:
            result = self.writer.apply(records)
            self.status.record(result)
            for table, offset, error in result.broken:
                following.unfollow(decisions_topic(self.prefix, table))
                log.error(
                    "table %s: not materialized beyond offset %d: %s",
                    table,
                    offset,
                    error,
                    extra={"event": "table_stopped", "table": table, "offset": offset},
                )
        for topic in ends:
            following.reached_end(topic)
        for topic, offset in applied.items():
            following.read_through(topic, offset)
        if records or ends:
            following.update_lag()


__all__ = ["READY_MESSAGE", "ConsumerStatus", "Materializer"]
