"""The arbiter's Kafka loop: the thin adapter around the pure core (``arbiter.core``).

Exactly once, per table: every intent record gets one decision, written to the
table's decisions topic inside a Kafka transaction. The decisions log is also
the progress marker: the arbiter resumes each table's intents at the offset
after the last decided intent, so no consumer-group offsets are needed and a
crash can neither lose nor repeat a decision.

Start-up order matters (numbered in ``ArbiterService.start``): the
transactional producer is initialised first, which fences any older arbiter
with the same transactional id and ends its open transaction; only then is
state rebuilt from the decisions log, so the rebuild sees everything the older
arbiter will ever have written.

Tansu (the embedded broker) does not hide aborted records from read_committed
readers. That is safe here: the arbiter rebuilds from exactly what every reader
sees, so a decision that landed in an aborted transaction is, on Tansu, simply
part of the history (and on Kafka it is hidden and the intent decided again).
See docs/tansu.md.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from arbiter.core import TableState, apply, evaluate_record, new_state, reject_malformed
from ordo.broker import DECISIONS_CONFIG, create_topics, existing_topics
from ordo.errors import ArbiterFencedError, BrokerUnavailableError, OrdoError
from ordo.settings import Settings
from schemas import CommitDecision, Outcome, decisions_topic, decode, encode, intents_pattern, parse_topic

log = logging.getLogger("ordo.arbiter")
kafka_log = logging.getLogger("ordo.kafka")  # librdkafka's own log lines

DEFAULT_BATCH_CAP = 5000
KAFKA_TIMEOUT = 30.0
READY_MESSAGE = "arbiter ready"


class ArbiterStateError(OrdoError):
    """Raised when a table's decisions log cannot be folded into state (corrupt or foreign records)."""


def shard_of(table: str, shards: int) -> int:
    """The shard that owns ``table``: ``crc32(table) % shards`` (stable across processes and versions)."""
    return zlib.crc32(table.encode()) % shards


def parse_shard(text: str) -> tuple[int, int]:
    """Parse ``I/N`` (0 <= I < N) into ``(I, N)``."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise ValueError(f"shard must look like I/N (e.g. 0/1), got {text!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard {text!r}: need 0 <= I < N")
    return index, count


def transactional_id(prefix: str, shard: tuple[int, int]) -> str:
    """The arbiter's Kafka transactional id; two arbiters with the same id fence each other."""
    return f"{prefix}.arbiter.{shard[0]}-of-{shard[1]}"


@dataclass
class ArbiterMetrics:
    """Counters of one arbiter process (``ArbiterService.metrics``)."""

    decided: int = 0
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    batches: int = 0
    batched_records: int = 0
    max_batch: int = 0
    aborts: int = 0
    internal_errors: int = 0
    skipped_duplicates: int = 0
    chain_breaks: int = 0
    tables: int = 0
    lag: dict[str, int] = field(default_factory=dict)

    @property
    def mean_batch(self) -> float:
        """Mean number of decisions per Kafka transaction."""
        return self.batched_records / self.batches if self.batches else 0.0

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        return {
            "decided": self.decided,
            "accepted": self.accepted,
            "rejected": dict(self.rejected),
            "batches": self.batches,
            "mean_batch": round(self.mean_batch, 1),
            "max_batch": self.max_batch,
            "aborts": self.aborts,
            "internal_errors": self.internal_errors,
            "skipped_duplicates": self.skipped_duplicates,
            "chain_breaks": self.chain_breaks,
            "tables": self.tables,
            "lag": dict(self.lag),
        }


@dataclass(slots=True)
class _Table:
    name: str
    intents: str
    decisions: str
    state: TableState


class _Rebuild(Exception):
    """Internal: the open transaction must be aborted and state rebuilt."""


class _Stopped(Exception):
    """Internal: ``stop()`` was called while a table's state was being rebuilt."""


def _warm_metadata(consumer: Any) -> None:
    """Fetch metadata of all topics (never one by name: that creates it on Tansu) into ``consumer``'s cache."""
    from confluent_kafka import KafkaException

    try:
        consumer.list_topics(timeout=KAFKA_TIMEOUT)
    except KafkaException as exc:
        log.warning("metadata request failed: %s", exc)


def _is_fenced(error: Any) -> bool:
    from confluent_kafka import KafkaError

    # _FATAL: what produce() raises once the producer hit a fatal error (fencing is the usual one).
    return error.fatal() or error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError._FATAL,
    )


class ArbiterService:
    """Decides the intents of every table of one shard, one sequential fold per table.

    ``run()`` blocks until ``stop()`` (safe to call from a signal handler or
    another thread). It raises ``ArbiterFencedError`` when a newer arbiter with
    the same transactional id took over; it never re-initialises then, which
    would fence the newer one back.
    """

    def __init__(
        self,
        settings: Settings,
        shard: tuple[int, int] = (0, 1),
        *,
        batch_cap: int = DEFAULT_BATCH_CAP,
        discovery_interval: float = 0.5,
        metrics_interval: float = 10.0,
        poll_timeout: float = 0.05,
        commit_timeout: float = KAFKA_TIMEOUT,
    ) -> None:
        if not 0 <= shard[0] < shard[1]:
            raise ValueError(f"invalid shard {shard}: need 0 <= index < count")
        self.settings = settings
        self.prefix = settings.topic_prefix
        self.shard = shard
        self.batch_cap = batch_cap
        self.discovery_interval = discovery_interval
        self.metrics_interval = metrics_interval
        self.poll_timeout = poll_timeout
        self.commit_timeout = commit_timeout
        self.metrics = ArbiterMetrics()
        self._pattern = re.compile(intents_pattern(self.prefix))
        self._stop = threading.Event()
        self._tables: dict[str, _Table] = {}  # by intents topic
        self._broken: set[str] = set()  # tables whose decisions log could not be folded
        self._poisoned: set[tuple[str, int]] = set()  # intent records whose decision crashed ``apply``
        self._producer: Any = None
        self._consumer: Any = None
        self._reader: Any = None
        self._admin: Any = None
        self._in_txn = False
        self._txn_tables: set[str] = set()
        self._txn_records = 0

    @property
    def transactional_id(self) -> str:
        """This arbiter's Kafka transactional id."""
        return transactional_id(self.prefix, self.shard)

    @property
    def tables(self) -> dict[str, TableState]:
        """The state of every table this arbiter owns, by table name (read-only use)."""
        return {t.name: t.state for t in self._tables.values()}

    def stop(self) -> None:
        """Ask ``run()`` to commit what it decided and return."""
        self._stop.set()

    # ------------------------------------------------------------------ lifecycle

    def run(self) -> None:
        """Start, then decide intents until stopped."""
        try:
            self.start()
            self._loop()
            self._guard(self._commit)
        except _Stopped:
            log.info("stopped while rebuilding state; nothing more decided")
        finally:
            self.close()

    def start(self) -> None:
        """Fence older arbiters, discover tables and rebuild their state."""
        from confluent_kafka import Consumer, KafkaException, Producer
        from confluent_kafka.admin import AdminClient

        config = self.settings.kafka_config
        self._admin = AdminClient(config(logger=kafka_log))
        # 1. The transactional producer first: init_transactions() fences any older
        #    arbiter with this id and ends its open transaction, so what we rebuild
        #    from below is final.
        self._producer = Producer(
            config(
                **{
                    "transactional.id": self.transactional_id,
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 2,
                    "allow.auto.create.topics": False,
                    "error_cb": self._on_kafka_error,
                    "logger": kafka_log,
                }
            )
        )
        while True:
            try:
                self._producer.init_transactions(KAFKA_TIMEOUT)
                break
            except KafkaException as exc:
                error = exc.args[0]
                if _is_fenced(error):
                    raise ArbiterFencedError(f"arbiter {self.transactional_id} cannot initialise: {error}") from exc
                if not error.retriable() or self._stop.is_set():
                    raise BrokerUnavailableError(f"cannot initialise transactions: {error}") from exc
                log.warning("init_transactions failed (%s); retrying", error)
        self._consumer = Consumer(self._consumer_config())
        self._reader = Consumer({**self._consumer_config(), "enable.partition.eof": True})
        # 2.-4. Tables: discover, rebuild, assign.
        self._discover()
        log.info(
            "%s: shard %d/%d, transactional id %s, prefix %r, %d table(s)",
            READY_MESSAGE,
            self.shard[0],
            self.shard[1],
            self.transactional_id,
            self.prefix,
            len(self._tables),
        )

    def close(self) -> None:
        """Close the Kafka clients (an open transaction is left for the broker to abort)."""
        for client in (self._consumer, self._reader):
            if client is not None:
                try:
                    client.close()
                except Exception:  # closing is best effort
                    log.debug("closing consumer failed", exc_info=True)
        self._consumer = self._reader = self._admin = None
        if self._producer is not None:
            try:
                self._producer.flush(1.0)
            except Exception:  # a fenced producer refuses even that; nothing of ours is lost
                log.debug("flushing the producer failed", exc_info=True)
            self._producer = None

    def _on_kafka_error(self, error: Any) -> None:
        from confluent_kafka import KafkaError

        if error.fatal():
            log.error("fatal Kafka error: %s", error)
        elif error.code() == KafkaError._ALL_BROKERS_DOWN:
            log.warning("Kafka: %s (retrying)", error.str())
        else:
            log.debug("Kafka error: %s", error)

    # ------------------------------------------------------------------ tables

    def _owns(self, table: str) -> bool:
        return shard_of(table, self.shard[1]) == self.shard[0]

    def _discover(self) -> list[str]:
        """Pick up intents topics of this shard that appeared since the last look."""
        from confluent_kafka import TopicPartition

        topics = existing_topics(self._admin, timeout=KAFKA_TIMEOUT)
        new: list[tuple[str, str]] = []
        for topic in sorted(topics):
            if topic in self._tables or not self._pattern.match(topic):
                continue
            parsed = parse_topic(self.prefix, topic)
            if parsed is None or parsed[1] != "intents" or parsed[0] in self._broken or not self._owns(parsed[0]):
                continue
            new.append((parsed[0], topic))
        if not new:
            return []
        missing = {decisions_topic(self.prefix, name): DECISIONS_CONFIG for name, _ in new}
        missing = {name: cfg for name, cfg in missing.items() if name not in topics}
        if missing:
            create_topics(self._admin, missing, timeout=KAFKA_TIMEOUT)
        # A consumer assigned a topic it has no metadata for waits ~1 s for
        # librdkafka's leader query; a full metadata request fills the cache now.
        for consumer in (self._reader, self._consumer):
            _warm_metadata(consumer)
        for name, topic in new:
            table = _Table(name, topic, decisions_topic(self.prefix, name), new_state(name))
            try:
                table.state = self._load_state(table)
            except ArbiterStateError as exc:
                log.error("table %s left undecided until restart: %s", name, exc)
                self._broken.add(name)
                continue
            except _Stopped:
                break
            # One table at a time: a failure on the next one leaves this one assigned.
            self._tables[topic] = table
            self._consumer.incremental_assign([TopicPartition(topic, 0, table.state.next_offset)])
            log.info(
                "table %s: rebuilt %d decision(s), head version %d, resuming intents at offset %d",
                name,
                table.state.decisions,
                table.state.head_version,
                table.state.next_offset,
            )
        self.metrics.tables = len(self._tables)
        return [name for name, _ in new]

    def _load_state(self, table: _Table) -> TableState:
        """Fold the table's decisions log (read_committed, up to its end) into a fresh state."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

        state = new_state(table.name)
        reader = self._reader
        reader.assign([TopicPartition(table.decisions, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + KAFKA_TIMEOUT
        try:
            while True:
                first = reader.poll(0.5)
                messages = [] if first is None else [first, *reader.consume(num_messages=10_000, timeout=0)]
                for message in messages:
                    if message.topic() != table.decisions:
                        continue
                    error = message.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            return state
                        if error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                            continue  # just created; metadata still propagating
                        log.warning("reading %s: %s", table.decisions, error)
                        continue
                    self._fold(state, message.value(), message.offset())
                    deadline = time.monotonic() + KAFKA_TIMEOUT
                if self._stop.is_set():
                    raise _Stopped()  # never hand out a partial state
                if time.monotonic() > deadline:
                    raise BrokerUnavailableError(f"no end of {table.decisions} within {KAFKA_TIMEOUT:.0f} s")
        finally:
            reader.unassign()

    def _fold(self, state: TableState, data: bytes | None, offset: int) -> None:
        try:
            decision = decode(data)  # type: ignore[arg-type]
        except Exception as exc:
            raise ArbiterStateError(f"record at offset {offset} of the decisions log is not a decision: {exc}") from exc
        if not isinstance(decision, CommitDecision):
            raise ArbiterStateError(f"record at offset {offset} of the decisions log is a {type(decision).__name__}")
        if decision.intent_offset <= state.last_intent_offset:
            # A second decision for an intent already decided: never written by a
            # fenced arbiter on Kafka; kept out of the state whatever the broker.
            self.metrics.skipped_duplicates += 1
            log.warning(
                "table %s: skipping decision at offset %d for intent offset %d (already decided)",
                state.table,
                offset,
                decision.intent_offset,
            )
            return
        if decision.prev_hash is not None and decision.prev_hash != state.chain:
            self.metrics.chain_breaks += 1
            log.error("table %s: decision at offset %d does not chain to the previous one", state.table, offset)
        apply(state, decision, data)

    # ------------------------------------------------------------------ loop

    def _loop(self) -> None:
        now = time.monotonic()
        next_discovery = now + self.discovery_interval
        next_metrics = now + self.metrics_interval
        consumer = self._consumer
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_discovery:
                try:
                    self._guard(self._discover)
                except BrokerUnavailableError as exc:
                    log.warning("table discovery failed: %s; retrying", exc)
                consumer = self._consumer
                next_discovery = time.monotonic() + self.discovery_interval
                if self._stop.is_set():
                    break
            if now >= next_metrics:
                self._log_metrics()
                next_metrics = now + self.metrics_interval
            messages = self._next_messages(consumer, self.batch_cap - self._txn_records)
            if messages:
                self._guard(self._process, messages)
                consumer = self._consumer
            if self._in_txn and (not messages or self._txn_records >= self.batch_cap):
                self._guard(self._commit)
                consumer = self._consumer

    def _next_messages(self, consumer: Any, room: int) -> list[Any]:
        """What is fetched already, up to ``room``; when idle, wait up to ``poll_timeout`` for the first record.

        ``consume(n, timeout)`` waits until it has ``n`` records or the timeout
        passed, which would add the whole timeout to every decision at low load;
        ``poll`` returns with the first record.
        """
        if self._in_txn:
            return consumer.consume(num_messages=room, timeout=0)
        first = consumer.poll(self.poll_timeout)
        if first is None:
            return []
        return [first, *consumer.consume(num_messages=room - 1, timeout=0)] if room > 1 else [first]

    def _guard(self, step: Any, *args: Any) -> None:
        """Run one loop step; on an abortable failure abort, rebuild and re-seek; on fencing raise."""
        from confluent_kafka import KafkaException

        try:
            step(*args)
        except KafkaException as exc:
            error = exc.args[0]
            if _is_fenced(error):
                raise self._fenced(error) from exc
            if not (error.txn_requires_abort() or self._in_txn):
                raise
            log.warning("transaction failed (%s); aborting and rebuilding", error)
            self._abort_and_rebuild()
        except _Rebuild:
            self._abort_and_rebuild()

    def _fenced(self, error: Any) -> ArbiterFencedError:
        return ArbiterFencedError(
            f"arbiter {self.transactional_id} was fenced by a newer arbiter with the same id ({error.str()}); "
            "exiting without deciding anything more"
        )

    def _process(self, messages: list[Any]) -> None:
        from confluent_kafka import KafkaError

        producer = self._producer
        tables = self._tables
        metrics = self.metrics
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("intents consumer: %s", error)
                continue
            table = tables.get(message.topic())
            if table is None:
                continue
            state = table.state
            offset = message.offset()
            if offset < state.next_offset:
                continue  # already decided (a re-fetch after a seek)
            if not self._in_txn:
                producer.begin_transaction()
                self._in_txn = True
            decision, data = self._decide(table, message, offset)
            try:
                apply(state, decision, data)
            except Exception:
                log.exception("table %s: applying the decision for intent offset %d failed (a bug)", table.name, offset)
                metrics.internal_errors += 1
                self._poisoned.add((table.intents, offset))
                self._txn_tables.add(table.name)
                raise _Rebuild() from None
            self._txn_tables.add(table.name)
            key = decision.txn_id.encode() if decision.txn_id else None
            while True:
                try:
                    producer.produce(table.decisions, data, key)
                    break
                except BufferError:
                    producer.poll(0.05)
            self._txn_records += 1
            metrics.decided += 1
            if decision.outcome is Outcome.ACCEPTED:
                metrics.accepted += 1
            else:
                metrics.rejected[decision.reason or "UNKNOWN"] += 1
                log.info(
                    json.dumps(
                        {
                            "event": "rejected",
                            "txn_id": decision.txn_id,
                            "table": table.name,
                            "reason": decision.reason,
                            "message": decision.message,
                            "offset": offset,
                        }
                    )
                )

    def _decide(self, table: _Table, message: Any, offset: int) -> tuple[CommitDecision, bytes]:
        state = table.state
        if not self._poisoned or (table.intents, offset) not in self._poisoned:
            try:
                decision = evaluate_record(state, message.value(), message.timestamp()[1], offset)
                return decision, encode(decision)
            except Exception as exc:
                log.exception("table %s: deciding intent offset %d raised (a bug)", table.name, offset)
                self.metrics.internal_errors += 1
                error = f"internal error while deciding: {type(exc).__name__}: {exc}"
        else:
            error = "internal error while applying the decision for this intent"
        decision = reject_malformed(state, offset, error)
        return decision, encode(decision)

    def _commit(self) -> None:
        """Commit the open transaction (retrying what librdkafka says is retriable)."""

        if not self._in_txn:
            return
        self._end_transaction(commit=True)
        records = self._txn_records
        self.metrics.batches += 1
        self.metrics.batched_records += records
        self.metrics.max_batch = max(self.metrics.max_batch, records)
        self._in_txn = False
        self._txn_tables.clear()
        self._txn_records = 0

    def _end_transaction(self, commit: bool) -> None:
        """Commit or abort, retrying what librdkafka calls retriable for at most ``commit_timeout`` seconds.

        On Kafka a fenced producer's EndTxn fails at once with PRODUCER_FENCED.
        Tansu instead drops the connection, so the call only ever times out: a
        transaction that cannot be ended within the budget is taken as fenced
        (or the broker as gone) and the arbiter exits rather than guess.
        """
        from confluent_kafka import KafkaException

        end = self._producer.commit_transaction if commit else self._producer.abort_transaction
        verb = "commit" if commit else "abort"
        deadline = time.monotonic() + self.commit_timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                end(max(0.1, min(5.0, remaining)))
                return
            except KafkaException as exc:
                error = exc.args[0]
                if _is_fenced(error):
                    raise self._fenced(error) from exc
                if commit and error.txn_requires_abort():
                    raise
                if not error.retriable():
                    raise
                if time.monotonic() >= deadline:
                    raise ArbiterFencedError(
                        f"arbiter {self.transactional_id} could not {verb} its transaction within "
                        f"{self.commit_timeout:g} s ({error.str()}): most likely fenced by a newer arbiter with the "
                        "same id (Tansu drops the connection instead of answering PRODUCER_FENCED), or the broker "
                        "is unreachable; exiting without deciding anything more"
                    ) from exc
                log.warning("%s_transaction: %s; retrying", verb, error)

    def _abort_and_rebuild(self) -> None:
        """Abort the open transaction, rebuild the tables it touched and re-seek every table's intents."""
        from confluent_kafka import Consumer, TopicPartition

        self.metrics.aborts += 1
        if self._in_txn:
            self._end_transaction(commit=False)
        touched = set(self._txn_tables)
        self._in_txn = False
        self._txn_tables.clear()
        self._txn_records = 0
        for table in self._tables.values():
            if table.name in touched:
                table.state = self._load_state(table)
        # The intents consumer may hold prefetched records past the rebuilt
        # positions; a fresh one assigned at each table's resume offset is simplest.
        old = self._consumer
        self._consumer = Consumer(self._consumer_config())
        _warm_metadata(self._consumer)
        self._consumer.incremental_assign(
            [TopicPartition(t.intents, 0, t.state.next_offset) for t in self._tables.values()]
        )
        old.close()
        log.info("rebuilt %d table(s) after an aborted transaction", len(touched))

    def _consumer_config(self) -> dict[str, Any]:
        return self.settings.kafka_config(
            **{
                "group.id": f"{self.prefix}.arbiter",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 20,
                "error_cb": self._on_kafka_error,
                "logger": kafka_log,
            }
        )

    # ------------------------------------------------------------------ metrics

    def _log_metrics(self) -> None:
        from confluent_kafka import TopicPartition

        lag: dict[str, int] = {}
        for table in self._tables.values():
            try:
                _, high = self._consumer.get_watermark_offsets(TopicPartition(table.intents, 0), cached=True)
            except Exception:
                continue
            if high is not None and high >= 0:
                lag[table.name] = max(0, high - table.state.next_offset)
        self.metrics.lag = lag
        log.info(json.dumps({"event": "metrics", **self.metrics.snapshot()}))


def run_arbiter(settings: Settings, shard: tuple[int, int] = (0, 1), commit_timeout: float = KAFKA_TIMEOUT) -> int:
    """Run an arbiter in the foreground until SIGINT/SIGTERM (``ordo arbiter``); returns the exit code."""
    import signal

    service = ArbiterService(settings, shard, commit_timeout=commit_timeout)

    def _on_signal(signum: int, frame: object) -> None:
        service.stop()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        service.run()
    except ArbiterFencedError as exc:
        log.error("%s", exc)
        return 3
    except BrokerUnavailableError as exc:
        log.error("broker unavailable: %s", exc)
        return 2
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info("arbiter stopped: %s", json.dumps(service.metrics.snapshot()))
    return 0


__all__ = [
    "ArbiterMetrics",
    "ArbiterService",
    "ArbiterStateError",
    "parse_shard",
    "run_arbiter",
    "shard_of",
    "transactional_id",
]
