"""Durable by default (issue 20, item 3): how ordo creates a table's topics, and what it refuses to use.

Runs on both brokers. Tansu reports only the configs a topic was created with
(docs/tansu.md); each refusal here is of a config set at creation, so both
brokers report it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from ordo.kernel.admin import (
    DURABLE_CONFIG,
    TopicPolicy,
    create_table_topics,
    create_topics,
    lossy_findings,
    topic_policy,
)
from ordo.producer import CommitClient
from ordo.schemas import CommitIntent, Operation, Outcome, TableMetadata, decisions_topic, intents_topic
from ordo.services.stack import ManagedProcess, settings_env
from ordo.settings import Settings

pytestmark = pytest.mark.timeout(180)


def _admin(settings: Settings) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(settings.kafka_config())


def _configs(admin: Any, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource("topic", topic)
    return {k: e.value for k, e in admin.describe_configs([resource])[resource].result().items()}


def _create(table: str) -> CommitIntent:
    return CommitIntent(
        txn_id=f"create-{table}",
        table=table,
        operation=Operation.CREATE_TABLE,
        read_version=0,
        metadata=TableMetadata(location=f"/w/{table}", schema="id BIGINT", primary_key=("id",)),
    )


def _check(settings: Settings, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {**settings_env(settings), "PYTHONUNBUFFERED": "1", **extra}
    return subprocess.run(
        [sys.executable, "-m", "ordo", "tables", "--check", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_the_policy_follows_the_cluster_size_and_the_settings() -> None:
    assert (
        TopicPolicy.for_cluster(Settings(), 1).replication_factor,
        TopicPolicy.for_cluster(Settings(), 1).min_insync_replicas,
    ) == (1, 1)
    three = TopicPolicy.for_cluster(Settings(), 5)
    assert (three.replication_factor, three.min_insync_replicas) == (3, 2)
    assert three.config["min.insync.replicas"] == "2" and three.config["unclean.leader.election.enable"] == "false"
    custom = TopicPolicy.for_cluster(
        Settings(topic_replication_factor=2, topic_config={"retention.ms": "86400000"}, allow_lossy_logs=True), 5
    )
    assert (custom.replication_factor, custom.min_insync_replicas, custom.allow_lossy) == (2, 1, True)
    assert custom.config["retention.ms"] == "86400000"  # an override wins over ordo's default


def test_a_new_table_gets_durable_topics(
    commit_client: CommitClient, settings: Settings, arbiter: Callable[..., ManagedProcess]
) -> None:
    arbiter()
    assert commit_client.commit(_create("kept"), timeout=60).outcome is Outcome.ACCEPTED
    admin = _admin(settings)
    metadata = admin.list_topics(timeout=10)
    policy = topic_policy(admin, settings)
    assert policy.replication_factor == 1 and policy.min_insync_replicas == 1  # one broker
    for topic in (intents_topic(settings.topic_prefix, "kept"), decisions_topic(settings.topic_prefix, "kept")):
        assert len(metadata.topics[topic].partitions[0].replicas) == 1
        config = _configs(admin, topic)
        for key, value in {**DURABLE_CONFIG, "min.insync.replicas": "1"}.items():
            assert config[key] == value, (topic, key)
    assert lossy_findings(admin, [intents_topic(settings.topic_prefix, "kept")], policy) == []
    check = _check(settings)
    assert check.returncode == 0, check.stdout + check.stderr
    assert json.loads(check.stdout)["tables"]["kept"] == {"durable": True, "findings": []}


@pytest.mark.timeout(240)
def test_a_log_that_can_lose_history_is_refused_by_name_unless_allowed(
    settings: Settings,
    arbiter: Callable[..., ManagedProcess],
    consumer: Callable[..., Any],
) -> None:
    admin = _admin(settings)
    prefix = settings.topic_prefix
    # A table made by hand with a week's retention and compaction: both are findings.
    create_topics(admin, {intents_topic(prefix, "leaky"): {"retention.ms": "604800000"}})
    create_topics(admin, {decisions_topic(prefix, "leaky"): {"cleanup.policy": "compact"}})
    create_table_topics(admin, prefix, "fine")

    check = _check(settings)
    assert check.returncode == 1, check.stdout + check.stderr
    report = json.loads(check.stdout)["tables"]
    assert report["fine"]["durable"] is True
    findings = " ".join(report["leaky"]["findings"])
    assert "retention.ms=604800000" in findings and "--add-config retention.ms=-1" in findings
    assert "cleanup.policy=compact" in findings and "--add-config cleanup.policy=delete" in findings

    refusing = arbiter()
    refusing.wait_for_line(r"table leaky left undecided until restart: its log can lose history", timeout=30)
    assert "ORDO_ALLOW_LOSSY_LOGS=true" in refusing.log_text()
    with CommitClient(settings=settings) as client:
        assert client.commit(_create("fine"), timeout=60).accepted  # the other tables go on
    follower = consumer()
    follower.process.wait_for_line(r"table leaky: not followed until restart: .*can lose history", timeout=30)
    assert "leaky.decisions: cleanup.policy=compact" in follower.process.log_text()
    refusing.terminate()
    follower.terminate()

    lenient = settings.with_overrides(allow_lossy_logs=True)
    assert _check(lenient).returncode == 0
    arbiter(settings=lenient)
    with CommitClient(settings=lenient) as client:
        assert client.commit(_create("leaky"), timeout=60).accepted  # decided: the log is accepted as it is
