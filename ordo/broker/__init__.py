"""The brokers ordo runs on one machine: the embedded Tansu broker (``tansu``, ``ordo up --broker tansu`` and
the tests), a pinned Apache Kafka fetched by Maven with a KRaft cluster launcher (``kafka``), and network
namespaces that let a chaos test cut a Kafka node off (``netns``). The topic administration ordo needs lives in
``ordo.kernel.admin``; its names stay importable from here, as they were from 0.5's ``ordo.broker``."""

from ordo.broker.tansu import (
    DECISIONS_CONFIG,
    INTENTS_CONFIG,
    MEMORY_WARNING,
    RETENTION_CONFIG,
    EmbeddedBroker,
    broker_binary,
    create_table_topics,
    create_topics,
    existing_topics,
    free_port,
    metadata_ready,
    port_free,
    run_foreground,
)

__all__ = [
    "DECISIONS_CONFIG",
    "INTENTS_CONFIG",
    "MEMORY_WARNING",
    "RETENTION_CONFIG",
    "EmbeddedBroker",
    "broker_binary",
    "create_table_topics",
    "create_topics",
    "existing_topics",
    "free_port",
    "metadata_ready",
    "port_free",
    "run_foreground",
]
