"""Which decisions topics the consumer follows, from which offset, and when it stops following one.

The materializer's second part (``consumer.materializer`` holds the loop):
``Following`` discovers decisions topics, assigns each at the offset its
catalog rows stored, keeps one signature verifier per topic, stops a table
whose log no longer holds what the catalog applied, tells when every table
has caught up once (readiness), and measures the lag.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from ordo.consumer.store import CatalogWriter, LogRecord
from ordo.kernel.admin import TopicPolicy
from ordo.kernel.errors import BrokerUnavailableError
from ordo.kernel.logread import GapChecker
from ordo.kernel.ready import CONSUMER_READY
from ordo.kernel.settings import Settings
from ordo.schemas import chain_hash, decisions_pattern, parse_topic
from ordo.schemas.decisionlog import BrokenLogError, LogProblem
from ordo.schemas.signing import ChainVerifier, Trust

log = logging.getLogger("ordo.consumer")

READY_MESSAGE = CONSUMER_READY  # kernel.ready: the line ordo.services.stack waits for
KAFKA_TIMEOUT = 10.0


class Following:
    """The followed topics of one consumer (``topics``: topic -> table) and the stopped ones (``skipped``).

    ``owns(table)`` says whether this consumer serves a table at all (its shard
    or its consumer group's assignment).
    """

    def __init__(
        self,
        settings: Settings,
        writer: CatalogWriter,
        status: Any,
        trust: Trust,
        consumer: Any,
        gaps: GapChecker,
        owns: Callable[[str], bool],
    ) -> None:
        self.settings = settings
        self.prefix = settings.topic_prefix
        self.writer = writer
        self.status = status
        self.consumer = consumer
        self.gaps = gaps
        self._trust = trust
        self._owns = owns
        self._pattern = re.compile(decisions_pattern(self.prefix))
        self.topics: dict[str, str] = {}  # assigned topic -> table
        self.skipped: set[str] = set()  # topics not followed (broken table)
        self.verifiers: dict[str, ChainVerifier[LogRecord]] = {}  # by topic
        self._awaiting_eof: set[str] | None = None  # topics to reach the end of before ready
        self._ends_at_start: dict[str, int] = {}  # each awaited topic's end offset when it was first followed
        self._admin: Any = None  # for the durability check of new topics (``_lossy``)
        self._policy: TopicPolicy | None = None

    def matches(self, topics: Any) -> bool:
        """True when any of ``topics`` is a decisions topic of this prefix."""
        return any(self._pattern.match(topic) for topic in topics)

    def discover(self) -> None:
        """Assign decisions topics that appeared since the last look, each at its stored offset."""
        from confluent_kafka import KafkaException, TopicPartition

        try:
            metadata = self.consumer.list_topics(timeout=KAFKA_TIMEOUT)
        except KafkaException as exc:
            raise BrokerUnavailableError(f"cannot list topics: {exc.args[0]}") from exc
        self.status.kafka_ok = True
        if self.writer.store.shared:
            self._retry_repaired()
        found = sorted(
            name
            for name, topic in metadata.topics.items()
            if topic.error is None and self._pattern.match(name) and name not in self.topics
        )
        assign: list[Any] = []
        ends: dict[str, int] = {}
        lossy = self._lossy([t for t in found if t not in self.skipped])
        for topic in found:
            parsed = parse_topic(self.prefix, topic)
            if parsed is None or topic in self.skipped or not self._owns(parsed[0]):
                continue  # another consumer's table, or a stopped one
            table = parsed[0]
            if topic in lossy:
                self.skipped.add(topic)
                self.status.broken[table] = lossy[topic]
                log.error("table %s: not followed until restart: %s", table, lossy[topic])
                continue
            state = self.writer.ensure_stream(table, topic)
            if state.error is not None:
                self.skipped.add(topic)
                self.status.broken[table] = state.error
                log.error(
                    "table %s: not followed, its log stopped applying at offset %s: %s",
                    table,
                    state.error_offset,
                    state.error,
                )
                continue
            try:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=KAFKA_TIMEOUT)
            except KafkaException as exc:
                log.warning("table %s: no watermarks yet (%s); retrying", table, exc.args[0])
                continue
            if high < state.next_offset and not self._log_still_holds(topic, state.next_offset, state.last_hash):
                self.topics[topic] = table
                self.fail(
                    topic,
                    f"the decisions log ends at offset {high} but the catalog applied it up to {state.next_offset}: "
                    "the broker lost records or the topic was recreated",
                )
                continue
            self.topics[topic] = table
            self.verifiers[topic] = ChainVerifier(table, self._trust, anchor=state.last_hash)
            assign.append(TopicPartition(topic, 0, state.next_offset))
            ends[topic] = high
            log.info("table %s: following %s from offset %d", table, topic, state.next_offset)
        if assign:
            self.consumer.incremental_assign(assign)
            for tp in assign:
                self.gaps.expect(tp.topic, tp.offset, after_record=True)  # the catalog applied the one before
        if self._awaiting_eof is None:
            self._awaiting_eof = {tp.topic for tp in assign}
            self._ends_at_start = {tp.topic: ends[tp.topic] for tp in assign}
            self._check_ready()

    def _lossy(self, topics: list[str]) -> dict[str, str]:
        """Why each of ``topics`` that can lose history is not followed (docs/operations.md); one request for all."""
        from confluent_kafka.admin import AdminClient

        from ordo.kernel.admin import lossy_topics, topic_policy

        if not topics:
            return {}
        if self._admin is None:
            self._admin = AdminClient(self.settings.kafka_config(**{"client.id": f"{self.prefix}.consumer.admin"}))
        if self._policy is None:  # asked again after a broker that did not answer (the loop retries discover)
            self._policy = topic_policy(self._admin, self.settings, KAFKA_TIMEOUT)
        return lossy_topics(self._admin, topics, self._policy, KAFKA_TIMEOUT)

    def _retry_repaired(self) -> None:
        """Follow again the stopped tables whose rows a repair (run on another host) replaced."""
        for topic in sorted(self.skipped):
            parsed = parse_topic(self.prefix, topic)
            if parsed is None:
                continue
            state = self.writer.refresh(parsed[0])
            if state is not None and state.error is None:
                log.info(
                    "table %s: repaired elsewhere; following it again from offset %d", parsed[0], state.next_offset
                )
                self.skipped.discard(topic)
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

    def fail(self, topic: str, message: str) -> None:
        """Stop ``topic``'s table: its log no longer holds what the catalog applied (``LogProblem.LOST``)."""
        table = self.topics.get(topic) or topic
        error = BrokenLogError(LogProblem.LOST, message)
        self.writer.mark_broken(table, error)
        self.status.broken[table] = str(error)
        log.error("table %s: %s", table, error)
        self.unfollow(topic)

    def unfollow(self, topic: str, *, skip: bool = True) -> None:
        """Stop reading ``topic``; with ``skip`` it is not followed again (a stopped table)."""
        from confluent_kafka import TopicPartition

        self.verifiers.pop(topic, None)
        if topic in self.topics:
            del self.topics[topic]
            if skip:
                self.skipped.add(topic)
            self.gaps.forget(topic)
            try:
                self.consumer.incremental_unassign([TopicPartition(topic, 0)])
            except Exception:  # not assigned yet
                log.debug("unassign %s failed", topic, exc_info=True)
        self.reached_end(topic)

    def release(self, topic: str) -> None:
        """Stop following ``topic`` (another consumer of the group has it now); its catalog rows stay as they are."""
        self.skipped.discard(topic)  # a stopped table is the new owner's to report
        self.unfollow(topic, skip=False)

    def forget(self, topic: str) -> None:
        """Forget ``topic`` entirely (its table was re-materialized): the next ``discover`` follows it anew."""
        self.skipped.discard(topic)
        self.topics.pop(topic, None)

    def reached_end(self, topic: str) -> None:
        """``topic`` was read to its end (or is no longer followed): maybe every table has caught up now."""
        if self._awaiting_eof is not None and topic in self._awaiting_eof:
            self._awaiting_eof.discard(topic)
            self._check_ready()

    def read_through(self, topic: str, offset: int) -> None:
        """A record at ``offset`` of ``topic`` was read: at or past the end the log had when it was first followed,
        the table has caught up. A log that never pauses may never give an end-of-partition event (Kafka answers
        a fetch as soon as a record is there), so readiness cannot wait for one."""
        end = self._ends_at_start.get(topic)
        if end is not None and offset + 1 >= end:
            del self._ends_at_start[topic]
            self.reached_end(topic)

    def _check_ready(self) -> None:
        if not self.status.ready and self._awaiting_eof is not None and not self._awaiting_eof:
            self.status.ready = True
            log.info(
                "%s: prefix %r, catalog %s, %d table(s) caught up",
                READY_MESSAGE,
                self.prefix,
                self.writer.path,
                len(self.topics),
            )

    def update_lag(self) -> None:
        """Records between each table's applied offset and its log end (transaction markers included)."""
        from confluent_kafka import TopicPartition

        lag: dict[str, int] = {}
        streams = self.writer.streams()
        for topic, table in list(self.topics.items()):
            try:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, 0), cached=True)
            except Exception:
                continue
            state = streams.get(table)
            if high is None or high < 0 or state is None:
                continue
            position = state.next_offset
            try:
                reported = self.consumer.position([TopicPartition(topic, 0)])[0].offset
                if reported is not None and reported > position:
                    position = reported  # past transaction markers the catalog never sees
            except Exception:
                pass
            lag[table] = max(0, high - position)
        self.status.lag = lag
