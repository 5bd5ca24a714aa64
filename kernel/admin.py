"""Topic administration: the topics a table needs, created with the configs ordo relies on.

Imports ``confluent_kafka`` (lazily) and nothing of ours above ``kernel``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kernel.errors import BrokerUnavailableError

log = logging.getLogger("ordo.broker")

# A table's log is its history: keep it forever, whatever the broker's defaults.
RETENTION_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1"}
# The arbiter derives time versions from intent record timestamps; the broker's
# append time makes them independent of writers' clocks. Tansu ignores it
# (records keep the producer's timestamp; see docs/tansu.md).
INTENTS_CONFIG = {**RETENTION_CONFIG, "message.timestamp.type": "LogAppendTime"}
DECISIONS_CONFIG = dict(RETENTION_CONFIG)


def existing_topics(admin: Any, timeout: float = 10.0) -> set[str]:
    """Names of all topics on the cluster.

    Always lists every topic: a metadata request naming one topic makes Tansu
    (and Kafka with ``auto.create.topics.enable``) create it.
    """
    from confluent_kafka import KafkaException

    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise BrokerUnavailableError(f"cannot list topics: {exc.args[0]}") from exc
    return {name for name, topic in metadata.topics.items() if topic.error is None}


def create_topics(admin: Any, topics: Mapping[str, Mapping[str, str]], timeout: float = 30.0) -> list[str]:
    """Create single-partition topics with the given configs; returns those newly created.

    A topic that already exists is fine. A config the broker refuses
    (``message.timestamp.type`` on some managed clusters) is dropped with a
    warning and the topic created without it.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    if not topics:
        return []
    created: list[str] = []
    futures = admin.create_topics(
        [NewTopic(name, 1, config=dict(config)) for name, config in topics.items()], request_timeout=timeout
    )
    retry: dict[str, dict[str, str]] = {}
    for name, future in futures.items():
        try:
            future.result()
            created.append(name)
        except KafkaException as exc:
            error = exc.args[0]
            code = error.code()
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            config = dict(topics[name])
            if code in (KafkaError.INVALID_CONFIG, KafkaError.POLICY_VIOLATION) and "message.timestamp.type" in config:
                log.warning("broker refused message.timestamp.type for %s (%s); creating it without", name, error)
                del config["message.timestamp.type"]
                retry[name] = config
                continue
            if code in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN):
                raise BrokerUnavailableError(f"cannot create topic {name}: {error.str()}") from exc
            raise
    if retry:
        created += create_topics(admin, retry, timeout)
    return created


def create_table_topics(admin: Any, prefix: str, table: str, timeout: float = 30.0) -> list[str]:
    """Create ``<prefix>.<table>.intents`` and ``.decisions`` (1 partition, kept forever) if missing."""
    from schemas import decisions_topic, intents_topic

    return create_topics(
        admin,
        {intents_topic(prefix, table): INTENTS_CONFIG, decisions_topic(prefix, table): DECISIONS_CONFIG},
        timeout,
    )


__all__ = [
    "DECISIONS_CONFIG",
    "INTENTS_CONFIG",
    "RETENTION_CONFIG",
    "create_table_topics",
    "create_topics",
    "existing_topics",
]
