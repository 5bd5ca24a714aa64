"""Topic administration: the topics a table needs, created with the configs ordo relies on.

Imports ``confluent_kafka`` (lazily) and nothing of ours above ``kernel``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ordo.kernel.errors import BrokerUnavailableError
from ordo.kernel.settings import FetchWaits, Settings, resolve_waits

log = logging.getLogger("ordo.broker")

# A table's log is its history: keep it forever, whatever the broker's defaults.
RETENTION_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1"}
# ... never compacted (compaction keeps one record per key), and never led by a replica that missed records.
DURABLE_CONFIG = {**RETENTION_CONFIG, "cleanup.policy": "delete", "unclean.leader.election.enable": "false"}
# The arbiter derives time versions from intent record timestamps; the broker's
# append time makes them independent of writers' clocks. Tansu ignores it
# (records keep the producer's timestamp; see docs/tansu.md).
INTENTS_CONFIG = {**RETENTION_CONFIG, "message.timestamp.type": "LogAppendTime"}
DECISIONS_CONFIG = dict(RETENTION_CONFIG)


@dataclass(frozen=True)
class TopicPolicy:
    """How ordo creates a table's topics and what it requires of existing ones.

    ``replication_factor`` and ``min_insync_replicas`` are what new topics get
    and the least an existing one may have; ``config`` is added to every topic
    ordo creates (``DURABLE_CONFIG``, ``min.insync.replicas``, then the
    ``ORDO_TOPIC__*`` overrides); ``allow_lossy`` turns refusals into warnings.
    """

    replication_factor: int = -1  # -1: the broker's default.replication.factor
    min_insync_replicas: int = 1
    config: Mapping[str, str] = field(default_factory=lambda: dict(DURABLE_CONFIG))
    allow_lossy: bool = False

    @classmethod
    def for_cluster(cls, settings: Settings, brokers: int) -> TopicPolicy:
        """The policy for a cluster of ``brokers``: RF min(3, brokers), min ISR max(1, RF - 1), unless set."""
        replicas = settings.topic_replication_factor or max(1, min(3, brokers))
        min_isr = settings.topic_min_insync_replicas or max(1, replicas - 1)
        config = {**DURABLE_CONFIG, "min.insync.replicas": str(min_isr), **settings.topic_config}
        return cls(replicas, min_isr, config, settings.allow_lossy_logs)


def topic_policy(admin: Any, settings: Settings, timeout: float = 10.0) -> TopicPolicy:
    """``TopicPolicy.for_cluster`` with the broker count of the cluster ``admin`` reaches."""
    from confluent_kafka import KafkaException

    try:
        brokers = len(admin.list_topics(timeout=timeout).brokers)
    except KafkaException as exc:
        raise BrokerUnavailableError(f"cannot list the cluster's brokers: {exc.args[0]}") from exc
    return TopicPolicy.for_cluster(settings, brokers)


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


def create_topics(
    admin: Any,
    topics: Mapping[str, Mapping[str, str]],
    timeout: float = 30.0,
    policy: TopicPolicy | None = None,
    *,
    attempts: int = 2,
) -> list[str]:
    """Create single-partition topics with the given configs; returns those newly created.

    Each topic gets the ``policy``'s replication factor and configs (under the
    topic's own); without one, the broker's default replication factor and
    ``DURABLE_CONFIG``. A topic that already exists is fine. A config the
    broker refuses (``message.timestamp.type`` on some managed clusters) is
    dropped with a warning and the topic created without it. A request that
    times out is made again, ``attempts`` times in all: a controller busy
    for longer than ``timeout`` may have created the topic meanwhile, which
    the next attempt finds existing.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    if not topics:
        return []
    policy = policy or TopicPolicy()
    replicas, base = policy.replication_factor, dict(policy.config)
    created: list[str] = []
    futures = admin.create_topics(
        [NewTopic(name, 1, replicas, config={**base, **config}) for name, config in topics.items()],
        request_timeout=timeout,
    )
    retry: dict[str, dict[str, str]] = {}
    again: dict[str, Mapping[str, str]] = {}
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
            if code == KafkaError._TIMED_OUT and attempts > 1:
                log.warning("creating topic %s timed out after %g s; asking again", name, timeout)
                again[name] = topics[name]
                continue
            if code in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN):
                raise BrokerUnavailableError(f"cannot create topic {name}: {error.str()}") from exc
            raise
    if retry:
        created += create_topics(admin, retry, timeout, policy, attempts=attempts)
    if again:
        created += create_topics(admin, again, timeout, policy, attempts=attempts - 1)
    return created


def create_table_topics(
    admin: Any, prefix: str, table: str, timeout: float = 30.0, policy: TopicPolicy | None = None
) -> list[str]:
    """Create ``<prefix>.<table>.intents`` and ``.decisions`` (1 partition, kept forever) if missing."""
    from ordo.schemas import decisions_topic, intents_topic

    return create_topics(
        admin,
        {intents_topic(prefix, table): INTENTS_CONFIG, decisions_topic(prefix, table): DECISIONS_CONFIG},
        timeout,
        policy,
    )


def lossy_findings(admin: Any, topics: Iterable[str], policy: TopicPolicy, timeout: float = 10.0) -> list[str]:
    """What makes any of ``topics`` able to lose history, one line each naming the setting that fixes it.

    Reads each topic's replica count (metadata) and its configs
    (``describe_configs``). A config the broker does not report (Tansu
    reports only those given at creation) cannot be judged: logged at INFO,
    not a finding.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ConfigResource

    names = sorted(set(topics))
    if not names:
        return []
    try:
        metadata = admin.list_topics(timeout=timeout)
        resources = [ConfigResource("topic", name) for name in names]
        described = admin.describe_configs(resources, request_timeout=timeout)
    except KafkaException as exc:
        raise BrokerUnavailableError(f"cannot read the configs of {', '.join(names)}: {exc.args[0]}") from exc
    configs: dict[str, dict[str, str | None]] = {}
    for resource, future in described.items():
        try:
            configs[resource.name] = {k: e.value for k, e in future.result().items()}
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
                log.warning(
                    "%s: not allowed to read its configs (%s): durability not checked; grant DescribeConfigs "
                    "on the topic (docs/reliability.md)",
                    resource.name,
                    error.str(),
                )
                configs[resource.name] = {}
                continue
            if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                configs[resource.name] = {}  # deleted meanwhile: nothing to judge
                continue
            raise BrokerUnavailableError(f"cannot read the configs of {resource.name}: {error}") from exc
    alter = "kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config {key}={value}"
    findings: list[str] = []
    for name in names:
        config = configs.get(name, {})
        described_topic = metadata.topics.get(name)
        if described_topic is not None and described_topic.error is None and 0 in described_topic.partitions:
            replicas = len(described_topic.partitions[0].replicas)
            if replicas < policy.replication_factor:
                findings.append(
                    f"{name}: replication factor {replicas} is below {policy.replication_factor} "
                    "(ORDO_TOPIC_REPLICATION_FACTOR; default min(3, brokers)): one lost disk can erase it; "
                    "add replicas with kafka-reassign-partitions.sh"
                )
        wanted = {
            "retention.ms": ("-1", "records older than that are deleted"),
            "retention.bytes": ("-1", "the oldest records are deleted past that size"),
        }
        for key, (value, why) in wanted.items():
            if config.get(key) is not None and config[key] != value:
                findings.append(
                    f"{name}: {key}={config[key]}: {why}; set {alter.format(topic=name, key=key, value=value)}"
                )
        if "compact" in (config.get("cleanup.policy") or ""):
            findings.append(
                f"{name}: cleanup.policy={config['cleanup.policy']}: compaction keeps one record per key and drops "
                f"the rest of the history; set {alter.format(topic=name, key='cleanup.policy', value='delete')}"
            )
        if config.get("unclean.leader.election.enable") == "true":
            findings.append(
                f"{name}: unclean.leader.election.enable=true: a replica that missed records can become leader; set "
                f"{alter.format(topic=name, key='unclean.leader.election.enable', value='false')}"
            )
        min_isr = config.get("min.insync.replicas")
        if min_isr is not None and min_isr.isdigit() and int(min_isr) < policy.min_insync_replicas:
            findings.append(
                f"{name}: min.insync.replicas={min_isr} is below {policy.min_insync_replicas} "
                "(ORDO_TOPIC_MIN_INSYNC_REPLICAS; default RF - 1): an acknowledged record may live on one disk only; "
                f"set {alter.format(topic=name, key='min.insync.replicas', value=policy.min_insync_replicas)}"
            )
        unknown = [k for k in (*wanted, "cleanup.policy", "min.insync.replicas") if config.get(k) is None]
        if unknown:
            log.info("%s: the broker does not report %s; not checked", name, ", ".join(unknown))
    return findings


def lossy_topics(admin: Any, topics: Iterable[str], policy: TopicPolicy, timeout: float = 10.0) -> dict[str, str]:
    """Each of ``topics`` that can lose history -> why, with the fixes (``lossy_findings``), for a refusal.

    With ``policy.allow_lossy`` (``ORDO_ALLOW_LOSSY_LOGS``) the findings are logged as warnings and the
    answer is empty: nothing is refused.
    """
    by_topic: dict[str, list[str]] = {}
    for finding in lossy_findings(admin, topics, policy, timeout):
        by_topic.setdefault(finding.split(":", 1)[0], []).append(finding)
    if policy.allow_lossy:
        for finding in (f for found in by_topic.values() for f in found):
            log.warning("lossy log allowed (ORDO_ALLOW_LOSSY_LOGS): %s", finding)
        return {}
    return {
        topic: "its log can lose history:\n  "
        + "\n  ".join(found)
        + "\nfix the topic, or set ORDO_ALLOW_LOSSY_LOGS=true to accept this (development only)"
        for topic, found in by_topic.items()
    }


__all__ = [
    "DECISIONS_CONFIG",
    "DURABLE_CONFIG",
    "INTENTS_CONFIG",
    "RETENTION_CONFIG",
    "TopicPolicy",
    "create_table_topics",
    "create_topics",
    "existing_topics",
    "lossy_findings",
    "lossy_topics",
    "topic_policy",
]


TANSU_CLUSTER_ID = "tansu_cluster"  # the cluster id a Tansu broker reports unless started with another
_KINDS: dict[str, str] = {}  # bootstrap servers -> the broker kind detected there (once per process)


def broker_kind(settings: Settings, timeout: float = 10.0) -> str:
    """``kafka`` or ``tansu``: ``ORDO_BROKER_KIND``, else detected once per process from the cluster id.

    Tansu reports the cluster id ``tansu_cluster`` unless started with another (then set
    ``ORDO_BROKER_KIND=tansu``); anything else counts as Apache Kafka. A broker that cannot be asked
    counts as Tansu for now (its short waits are fast on both) and is asked again next time.
    """
    if settings.broker_kind != "auto":
        return settings.broker_kind
    servers = settings.bootstrap_servers or ""
    if servers in _KINDS:
        return _KINDS[servers]
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(settings.kafka_config(**{"client.id": f"{settings.topic_prefix}.broker-kind", "log_level": 0}))
    try:
        cluster_id = admin.list_topics(timeout=timeout).cluster_id
    except KafkaException as exc:
        log.warning("could not ask %s which broker it is (%s): Tansu's fetch waits for now", servers, exc)
        return "tansu"
    kind = "tansu" if cluster_id == TANSU_CLUSTER_ID else "kafka"
    _KINDS[servers] = kind
    log.info("broker at %s: %s (cluster id %s)", servers, kind, cluster_id)
    return kind


def fetch_waits(settings: Settings) -> FetchWaits:
    """The fetch waits ordo's readers use: those set, else the default of the broker (``broker_kind``)."""
    if None not in (
        settings.fetch_wait_busy_ms,
        settings.fetch_wait_idle_ms,
        settings.client_fetch_wait_ms,
        settings.consumer_fetch_wait_ms,
    ):
        return resolve_waits(settings, "kafka")  # every one set: no need to ask the broker
    return resolve_waits(settings, broker_kind(settings))
