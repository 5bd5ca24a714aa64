"""A commit client's view of the tables' topics: created or checked before a table's first intent, and the end
of a decisions log, where the answers to intents not yet published will be.

``CommitClient`` (``producer.client``) holds one ``TableTopics`` per broker connection; it remembers the topics
known to exist, so a table's topics are looked up once per client.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ordo.kernel.admin import (
    DECISIONS_CONFIG,
    INTENTS_CONFIG,
    TopicPolicy,
    create_table_topics,
    create_topics,
    existing_topics,
    topic_policy,
)
from ordo.kernel.errors import BrokerUnavailableError, TableNotFoundError
from ordo.kernel.settings import Settings
from ordo.schemas import CommitIntent, Operation, decisions_topic, intents_topic

log = logging.getLogger("ordo.producer")

ADMIN_TIMEOUT = 30.0


class TableTopics:
    """The intents and decisions topics of the tables one client publishes to, through its admin client."""

    def __init__(self, admin: Any, settings: Settings) -> None:
        self.admin = admin
        self.settings = settings
        self.prefix = settings.topic_prefix
        self._known: set[str] = set()
        self._policy: TopicPolicy | None = None

    def ensure(self, intent: CommitIntent) -> None:
        """Make sure the table's topics exist: created for CREATE_TABLE, else the intents topic must exist."""
        intents = intents_topic(self.prefix, intent.table)
        decisions = decisions_topic(self.prefix, intent.table)
        if intents in self._known:
            return
        if intent.operation is Operation.CREATE_TABLE:
            create_table_topics(self.admin, self.prefix, intent.table, ADMIN_TIMEOUT, self.policy())
        else:
            topics = existing_topics(self.admin, ADMIN_TIMEOUT)
            if intents not in topics:
                raise TableNotFoundError(
                    f"table {intent.table!r} has no intents topic {intents} (prefix {self.prefix!r}); "
                    "create the table first (a CREATE_TABLE intent)"
                )
            if decisions not in topics:
                create_topics(self.admin, {decisions: DECISIONS_CONFIG}, ADMIN_TIMEOUT, self.policy())
        self._known.add(intents)

    def ensure_intents(self, table: str) -> str:
        """The intents topic of ``table``, created if missing (for records that are not intents: tests, tools)."""
        topic = intents_topic(self.prefix, table)
        if topic not in self._known and topic not in existing_topics(self.admin, ADMIN_TIMEOUT):
            create_topics(self.admin, {topic: INTENTS_CONFIG}, ADMIN_TIMEOUT, self.policy())
        self._known.add(topic)
        return topic

    def exists(self, topic: str) -> bool:
        return topic in existing_topics(self.admin, ADMIN_TIMEOUT)

    def policy(self) -> TopicPolicy:
        """How this client creates topics (replication from the cluster's size), read once."""
        if self._policy is None:
            self._policy = topic_policy(self.admin, self.settings, ADMIN_TIMEOUT)
        return self._policy

    def end_offset(self, topic: str) -> int:
        """The current end of ``topic`` (read_uncommitted high watermark): decisions to come lie at or after it.

        Transient states are waited out within ``ADMIN_TIMEOUT``, with backoff: a topic just created whose
        leader is not elected or not yet known to the broker asked, a leader moving. librdkafka caches the
        partition's "no leader" answer and never asks again by itself ("Failed to query partition leaders:
        No leaders found" for good, seen on Apache Kafka); a metadata request for all topics refreshes it
        (never one naming the topic: that creates a missing topic on Tansu and on auto-creating clusters).
        """
        from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        partition = TopicPartition(topic, 0)
        deadline = time.monotonic() + ADMIN_TIMEOUT
        backoff = 0.05
        while True:
            futures = self.admin.list_offsets(
                {partition: OffsetSpec.latest()},
                isolation_level=IsolationLevel.READ_UNCOMMITTED,
                request_timeout=max(1.0, min(10.0, deadline - time.monotonic())),
            )
            try:
                return int(futures[partition].result().offset)
            except KafkaException as exc:
                error = exc.args[0]
            if time.monotonic() + backoff > deadline:
                raise BrokerUnavailableError(
                    f"cannot read the end offset of {topic} within {ADMIN_TIMEOUT:g} s "
                    f"(broker {self.settings.bootstrap_servers}): {error}"
                )
            log.debug("end offset of %s not readable yet (%s); retrying in %.2f s", topic, error, backoff)
            time.sleep(backoff)
            backoff = min(1.0, backoff * 2)
            try:
                self.admin.list_topics(timeout=max(0.5, min(5.0, deadline - time.monotonic())))
            except KafkaException:
                pass  # the broker is away: the next attempt says so, or the deadline does


__all__ = ["ADMIN_TIMEOUT", "TableTopics"]
