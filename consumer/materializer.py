"""The consumer's Kafka loop: follow every ``<prefix>.*.decisions`` topic and fold it into the catalog.

The adapter around ``consumer.store.CatalogWriter``; the only module of the
consumer that imports ``confluent_kafka``.

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
import queue
import re
import threading
import time
import uuid
import zlib
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from consumer.store import ApplyResult, CatalogWriter, LogRecord
from kernel.errors import BrokerUnavailableError
from kernel.keys import reader_trust
from kernel.logread import GapChecker, GapStats
from kernel.membership import GroupMembership
from kernel.settings import Settings
from schemas import chain_hash, decisions_pattern, decisions_topic, parse_topic
from schemas.decisionlog import BrokenLogError, LogProblem
from schemas.signing import ChainVerifier, signature_of

log = logging.getLogger("ordo.consumer")

READY_MESSAGE = "consumer ready"
KAFKA_TIMEOUT = 10.0


@dataclass
class ConsumerStatus:
    """Live counters of one materializer, shared with the HTTP service (thread-safe)."""

    started_at: float = field(default_factory=time.time)
    ready: bool = False
    kafka_ok: bool = False
    applied_total: int = 0
    refused_total: int = 0  # decision records no trusted signature vouched for (never applied)
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
        self._pattern = re.compile(decisions_pattern(self.prefix))
        self._shard = _parse_shard(settings.consumer_shard)
        # With a consumer group the group's assignment, not the shard, says which tables this consumer follows.
        self.group = settings.consumer_group or None
        if self.group is not None and self._shard != (0, 1):
            raise ValueError("a consumer shard and a consumer group exclude each other")
        self._membership: GroupMembership | None = None
        self._trust = reader_trust(settings)  # fails closed on a missing ORDO_TRUSTED_KEYS
        self._verifiers: dict[str, ChainVerifier[LogRecord]] = {}  # by topic
        self._stop = threading.Event()
        self._consumer: Any = None
        self._topics: dict[str, str] = {}  # assigned topic -> table
        self._skipped: set[str] = set()  # topics not followed (broken table)
        self._awaiting_eof: set[str] | None = None  # topics to reach the end of before ready
        self._gaps: Any = None  # GapChecker of the consumer
        # Rebuilt tables waiting to be swapped in by the loop: (table, fresh catalog, scratch dir, future).
        self._rebuilt: queue.Queue[tuple[str, Path, Any, Future[Any]]] = queue.Queue()

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
        )
        try:
            if self.group is not None:
                self._join_group()
            self._loop()
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
                "fetch.wait.max.ms": self.settings.consumer_fetch_wait_ms,
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
        self._membership.join(wait=any(self._pattern.match(t) for t in topics), stop=self._stop)
        log.info("consumer group %s: following table(s) %s", self.group, ", ".join(sorted(self._membership.owned)))

    def _serve_group(self) -> bool:
        """Serve the group; stop following what it revoked or lost; True when it assigned something new."""
        if self._membership is None:
            return False
        changes = self._membership.poll()
        for table in sorted(changes.revoked | changes.lost):
            self._release(decisions_topic(self.prefix, table))
        return bool(changes.assigned)

    def _release(self, topic: str) -> None:
        """Stop following ``topic`` (another consumer of the group has it now); its catalog rows stay as they are."""
        self._skipped.discard(topic)  # a stopped table is the new owner's to report
        self._unfollow(topic, skip=False)

    def _on_kafka_error(self, error: Any) -> None:
        self.status.kafka_ok = False
        self.status.last_error = str(error)
        log.warning("Kafka: %s", error)

    # ------------------------------------------------------------------ loop

    def _loop(self) -> None:
        next_discovery = 0.0
        while not self._stop.is_set():
            if not self._rebuilt.empty():
                self._swap_rebuilt()
            if self._serve_group():
                next_discovery = 0.0  # follow the newly assigned tables now
            now = time.monotonic()
            if now >= next_discovery:
                try:
                    self._discover()
                    self._update_lag()
                except BrokerUnavailableError as exc:
                    self.status.kafka_ok = False
                    self.status.last_error = str(exc)
                    log.warning("topic discovery failed: %s; retrying", exc)
                self.status.tick()
                self._take_repair_requests()
                next_discovery = time.monotonic() + self.discovery_interval
            messages = self._next_messages()
            if messages:
                self._process(messages)

    def _next_messages(self) -> list[Any]:
        first = self._consumer.poll(self.poll_timeout)
        if first is None:
            return []
        return self._gaps.check([first, *self._consumer.consume(num_messages=self.batch_size - 1, timeout=0)])

    def _process(self, messages: list[Any]) -> None:
        from confluent_kafka import KafkaError

        records: list[LogRecord] = []
        ends: list[str] = []
        for message in messages:
            topic = message.topic()
            error = message.error()
            if error is not None:
                code = error.code()
                if code == KafkaError._PARTITION_EOF:
                    ends.append(topic)
                elif code == KafkaError._AUTO_OFFSET_RESET and topic in self._topics:
                    self._fail(topic, f"the decisions log has no record at the catalog's offset ({error.str()})")
                elif code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                    continue
                else:
                    log.warning("reading %s: %s", topic, error)
                continue
            table = self._topics.get(topic)
            verifier = self._verifiers.get(topic)
            if table is None or verifier is None:
                continue
            _, timestamp = message.timestamp()
            offset, value = message.offset(), message.value()
            record = LogRecord(table, offset, timestamp if timestamp >= 0 else None, value)
            released, refused = verifier.push(offset, value, signature_of(message.headers()), record)
            records.extend(released)
            for refusal in refused:
                self.status.refused_total += 1
                log.error("table %s: decision at offset %d refused: %s", table, refusal.offset, refusal.reason)
        if records:
            result = self.writer.apply(records)
            self.status.record(result)
            for table, offset, error in result.broken:
                self._unfollow(f"{self.prefix}.{table}.decisions")
                log.error("table %s: not materialized beyond offset %d: %s", table, offset, error)
        for topic in ends:
            self._reached_end(topic)
        if records or ends:
            self._update_lag()

    # ------------------------------------------------------------------ repair

    def request_repair(self, table: str) -> Future[Any]:
        """Re-materialize ``table`` from its decisions log (``consumer.repair``); a future of its ``RepairResult``.

        The log is read into a scratch catalog on a thread of its own; the loop
        then swaps the table's rows in one SQLite transaction and follows it
        again. Every other table is materialized and served meanwhile.
        """
        from consumer.repair import build_fresh, scratch_dir

        future: Future[Any] = Future()
        future.set_running_or_notify_cancel()

        def build() -> None:
            scratch = scratch_dir(self.writer.path)
            try:
                path = scratch.__enter__()
                build_fresh(self.settings, table, path / "table.db")
            except BaseException as exc:
                scratch.__exit__(None, None, None)
                future.set_exception(exc)
                return
            self._rebuilt.put((table, path / "table.db", scratch, future))

        threading.Thread(target=build, name=f"repair-{table}", daemon=True).start()
        return future

    def _take_repair_requests(self) -> None:
        """Start the repairs ``ordo repair`` asked for (request files next to the catalog); answer each in a file."""
        from consumer.repair import take_requests, write_result

        if self.writer.store.shared:  # ``ordo repair`` on a PostgreSQL catalog swaps the rows itself
            return
        try:
            requests = take_requests(self.writer.path)
        except OSError as exc:
            log.warning("cannot read repair requests: %s", exc)
            return
        for table, request_id in requests:
            log.info("table %s: repair requested (%s)", table, request_id)

            def answer(future: Future[Any], table: str = table, request_id: str = request_id) -> None:
                exc = future.exception()
                data = {"error_type": type(exc).__name__, "message": str(exc)} if exc else future.result().to_json()
                try:
                    write_result(self.writer.path, table, request_id, data)
                except OSError:
                    log.exception("table %s: cannot write the repair result", table)

            self.request_repair(table).add_done_callback(answer)

    def _swap_rebuilt(self) -> None:
        from consumer.repair import RepairResult

        while not self._rebuilt.empty():
            table, fresh, scratch, future = self._rebuilt.get()
            topic = decisions_topic(self.prefix, table)
            try:
                self._unfollow(topic)
                state = self.writer.replace_table(table, fresh)
                self._skipped.discard(topic)
                self._topics.pop(topic, None)
                self.status.broken.pop(table, None)
                self._discover()  # follows it again from the rebuilt offset, or reports it stopped again
            except BaseException as exc:
                future.set_exception(exc)
                continue
            finally:
                scratch.__exit__(None, None, None)
            log.info("table %s: re-materialized from its decisions log: %s", table, RepairResult.of(state))
            future.set_result(RepairResult.of(state))

    # ------------------------------------------------------------------ topics

    def _discover(self) -> None:
        """Assign decisions topics that appeared since the last look, each at its stored offset."""
        from confluent_kafka import KafkaException, TopicPartition

        try:
            metadata = self._consumer.list_topics(timeout=KAFKA_TIMEOUT)
        except KafkaException as exc:
            raise BrokerUnavailableError(f"cannot list topics: {exc.args[0]}") from exc
        self.status.kafka_ok = True
        if self.writer.store.shared:
            self._retry_repaired()
        found = sorted(
            name
            for name, topic in metadata.topics.items()
            if topic.error is None and self._pattern.match(name) and name not in self._topics
        )
        assign: list[Any] = []
        for topic in found:
            parsed = parse_topic(self.prefix, topic)
            if parsed is None or topic in self._skipped:
                continue
            table = parsed[0]
            if self._membership is not None:
                if table not in self._membership.owned:
                    continue  # another member's table
            elif zlib.crc32(table.encode()) % self._shard[1] != self._shard[0]:
                continue  # another consumer's table
            state = self.writer.ensure_stream(table, topic)
            if state.error is not None:
                self._skipped.add(topic)
                self.status.broken[table] = state.error
                log.error(
                    "table %s: not followed, its log stopped applying at offset %s: %s",
                    table,
                    state.error_offset,
                    state.error,
                )
                continue
            try:
                _, high = self._consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=KAFKA_TIMEOUT)
            except KafkaException as exc:
                log.warning("table %s: no watermarks yet (%s); retrying", table, exc.args[0])
                continue
            if high < state.next_offset and not self._log_still_holds(topic, state.next_offset, state.last_hash):
                self._topics[topic] = table
                self._fail(
                    topic,
                    f"the decisions log ends at offset {high} but the catalog applied it up to {state.next_offset}: "
                    "the broker lost records or the topic was recreated",
                )
                continue
            self._topics[topic] = table
            self._verifiers[topic] = ChainVerifier(table, self._trust, anchor=state.last_hash)
            assign.append(TopicPartition(topic, 0, state.next_offset))
            log.info("table %s: following %s from offset %d", table, topic, state.next_offset)
        if assign:
            self._consumer.incremental_assign(assign)
            for tp in assign:
                self._gaps.expect(tp.topic, tp.offset, after_record=True)  # the catalog applied the one before
        if self._awaiting_eof is None:
            self._awaiting_eof = {tp.topic for tp in assign}
            self._check_ready()

    def _retry_repaired(self) -> None:
        """Follow again the stopped tables whose rows a repair (run on another host) replaced."""
        for topic in sorted(self._skipped):
            parsed = parse_topic(self.prefix, topic)
            if parsed is None:
                continue
            state = self.writer.refresh(parsed[0])
            if state is not None and state.error is None:
                log.info(
                    "table %s: repaired elsewhere; following it again from offset %d", parsed[0], state.next_offset
                )
                self._skipped.discard(topic)
                self.status.broken.pop(parsed[0], None)

    def _log_still_holds(self, topic: str, next_offset: int, last_hash: bytes) -> bool:
        """True when the record the catalog applied last is still in the log, unchanged.

        A low watermark alone is not proof of lost records: on Tansu, ListOffsets
        under read_committed answers 0 while a transaction is open, and the latest
        offset can be a batch's base offset + 1 (docs/tansu.md). So before calling
        a log short, fetch the last applied record itself and compare its hash.
        """
        from confluent_kafka import Consumer, TopicPartition

        if next_offset == 0:
            return True
        probe = Consumer(
            self.settings.kafka_config(
                **{
                    "group.id": f"{self.prefix}.consumer-probe.{uuid.uuid4().hex[:12]}",
                    "client.id": f"{self.prefix}.consumer.probe",
                    "enable.auto.commit": False,
                    "isolation.level": "read_uncommitted",
                    "auto.offset.reset": "error",
                    "allow.auto.create.topics": False,
                }
            )
        )
        try:
            probe.assign([TopicPartition(topic, 0, next_offset - 1)])
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                message = probe.poll(0.2)
                if message is None:
                    continue
                if message.error() is not None:
                    return False
                if message.offset() != next_offset - 1:
                    return False
                return chain_hash(message.value() or b"") == last_hash
            return False
        finally:
            probe.close()

    def _fail(self, topic: str, message: str) -> None:
        """Stop ``topic``'s table: its log no longer holds what the catalog applied (``LogProblem.LOST``)."""
        table = self._topics.get(topic) or topic
        error = BrokenLogError(LogProblem.LOST, message)
        self.writer.mark_broken(table, error)
        self.status.broken[table] = str(error)
        log.error("table %s: %s", table, error)
        self._unfollow(topic)

    def _unfollow(self, topic: str, *, skip: bool = True) -> None:
        """Stop reading ``topic``; with ``skip`` it is not followed again (a stopped table)."""
        from confluent_kafka import TopicPartition

        self._verifiers.pop(topic, None)
        if topic in self._topics:
            del self._topics[topic]
            if skip:
                self._skipped.add(topic)
            self._gaps.forget(topic)
            try:
                self._consumer.incremental_unassign([TopicPartition(topic, 0)])
            except Exception:  # not assigned yet
                log.debug("unassign %s failed", topic, exc_info=True)
        self._reached_end(topic)

    def _reached_end(self, topic: str) -> None:
        if self._awaiting_eof is not None and topic in self._awaiting_eof:
            self._awaiting_eof.discard(topic)
            self._check_ready()

    def _check_ready(self) -> None:
        if not self.status.ready and self._awaiting_eof is not None and not self._awaiting_eof:
            self.status.ready = True
            log.info(
                "%s: prefix %r, catalog %s, %d table(s) caught up",
                READY_MESSAGE,
                self.prefix,
                self.writer.path,
                len(self._topics),
            )

    def _update_lag(self) -> None:
        """Records between each table's applied offset and its log end (transaction markers included)."""
        from confluent_kafka import TopicPartition

        lag: dict[str, int] = {}
        streams = self.writer.streams()
        for topic, table in list(self._topics.items()):
            try:
                _, high = self._consumer.get_watermark_offsets(TopicPartition(topic, 0), cached=True)
            except Exception:
                continue
            state = streams.get(table)
            if high is None or high < 0 or state is None:
                continue
            position = state.next_offset
            try:
                reported = self._consumer.position([TopicPartition(topic, 0)])[0].offset
                if reported is not None and reported > position:
                    position = reported  # past transaction markers the catalog never sees
            except Exception:
                pass
            lag[table] = max(0, high - position)
        self.status.lag = lag


__all__ = ["READY_MESSAGE", "ConsumerStatus", "Materializer"]


def _parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` as ``(I, N)`` with ``0 <= I < N``; ``ValueError`` otherwise."""
    index, sep, count = text.partition("/")
    try:
        shard = (int(index), int(count))
    except ValueError:
        shard = (-1, 0)
    if not sep or not 0 <= shard[0] < shard[1]:
        raise ValueError(f"consumer shard must look like I/N with 0 <= I < N (e.g. 0/2), got {text!r}")
    return shard
