"""``ordo.broker.kafka.KafkaCluster``: a real Apache Kafka on loopback, its data on disk, nodes killed and restarted."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from ordo.broker import create_topics, metadata_ready
from ordo.broker.kafka import KafkaCluster, KafkaSetupError
from ordo.errors import BrokerUnavailableError
from ordo.kernel.admin import TopicPolicy, lossy_findings, topic_policy
from ordo.settings import Settings

pytestmark = pytest.mark.timeout(240)


def _admin(servers: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": servers, "log_level": 0})


def _produce(servers: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "acks": "all", "enable.idempotence": True, "log_level": 0})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


def _read(servers: str, topic: str, count: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": "launcher-test", "log_level": 0})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_a_single_node_keeps_topics_and_records_across_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "kafka"
    with KafkaCluster(1, data) as cluster:
        assert cluster.running and cluster.pid is not None
        first = cluster.bootstrap_servers
        create_topics(_admin(first), {"kept": {}})
        _produce(first, "kept", [b"a", b"b", b"c"])
        cluster_id = cluster.cluster_id
    assert not cluster.running and cluster.pid is None
    assert not metadata_ready(first, timeout=1.0)  # stopped for real
    assert (data / "node-1" / "data" / "meta.properties").is_file()  # the data stays
    with KafkaCluster(1, data) as again:
        assert again.cluster_id == cluster_id == json.loads((data / "cluster.json").read_text())["cluster_id"]
        assert _read(again.bootstrap_servers, "kept", 3) == [b"a", b"b", b"c"]
    assert "Kafka Server started" in (data / "node-1" / "server.log").read_text()


def test_a_temporary_cluster_removes_its_data_and_a_wrong_node_count_is_refused(tmp_path: Path) -> None:
    cluster = KafkaCluster(1).start()
    directory = cluster.data_dir
    assert directory is not None and directory.is_dir()
    cluster.stop()
    assert not directory.exists()
    KafkaCluster(1, tmp_path).start().stop()
    with pytest.raises(KafkaSetupError, match="holds a cluster of 1 node"):
        KafkaCluster(3, tmp_path).start()
    with pytest.raises(KafkaSetupError, match="1 or 3 nodes"):
        KafkaCluster(2)


def test_a_node_that_cannot_start_is_reported_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(KafkaSetupError, match=r"formatting Kafka node 1 .*Invalid value not-a-number"):
        KafkaCluster(1, tmp_path / "a", broker_config={"num.io.threads": "not-a-number"}).start()
    KafkaCluster(1, tmp_path / "b").start().stop()  # formatted: the next start skips the format
    broken = KafkaCluster(1, tmp_path / "b", broker_config={"num.io.threads": "not-a-number"}, start_timeout=60)
    with pytest.raises(
        BrokerUnavailableError, match=r"(?s)Kafka node 1 exited with code \d+ while starting.*not-a-number"
    ):
        broken.start()
    assert not broken.running


def _topic_config(admin: Any, topic: str, deadline: float) -> Any:
    """``topic``'s configs, asked again while the node asked does not know the topic yet (until ``deadline``)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource("topic", topic)
    while True:
        try:
            return admin.describe_configs([resource])[resource].result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def test_three_nodes_survive_the_partition_leader_killed_and_restarted(tmp_path: Path) -> None:
    with KafkaCluster(3, tmp_path / "kafka") as cluster:
        servers = cluster.bootstrap_servers
        assert servers.count(",") == 2
        admin = _admin(servers)
        policy = topic_policy(admin, Settings(bootstrap_servers=servers))
        assert (policy.replication_factor, policy.min_insync_replicas) == (3, 2)  # min(3, brokers), RF - 1
        create_topics(admin, {"replicated": {}}, policy=policy)
        deadline = time.monotonic() + 30
        while "replicated" not in (metadata := admin.list_topics(timeout=10)).topics:  # every broker learns it
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert len(metadata.topics["replicated"].partitions[0].replicas) == 3
        config = _topic_config(admin, "replicated", deadline)
        assert config["unclean.leader.election.enable"].value == "false"
        assert config["min.insync.replicas"].value == "2"
        assert lossy_findings(admin, ["replicated"], policy) == []
        create_topics(admin, {"thin": {}}, policy=TopicPolicy(replication_factor=1))
        # each node learns a new topic on its own: the findings come from whichever node is asked
        while not any("replication factor 1 is below 3" in f for f in lossy_findings(admin, ["thin"], policy)):
            assert time.monotonic() < deadline, lossy_findings(admin, ["thin"], policy)
            time.sleep(0.2)
        _produce(servers, "replicated", [b"before"])
        leader = cluster.leader_of("replicated")
        cluster.kill_node(leader)
        deadline = time.monotonic() + 60
        while True:
            try:
                moved = cluster.leader_of("replicated")
            except Exception:
                moved = -1
            if moved not in (-1, leader):
                break
            assert time.monotonic() < deadline, "no new leader within 60 s"
            time.sleep(0.5)
        _produce(servers, "replicated", [b"during"])  # acks=all with 2 of 3 in sync
        cluster.start_node(leader)
        assert cluster.running
        _produce(servers, "replicated", [b"after"])
        assert _read(servers, "replicated", 3) == [b"before", b"during", b"after"]
        cluster.pause_node(leader)
        cluster.resume_node(leader)


def test_nodes_left_running_die_with_the_interpreter() -> None:
    """A process that exits without ``stop()`` (an interrupted test run) leaves no broker behind."""
    import subprocess
    import sys

    script = "from ordo.broker.kafka import KafkaCluster\nprint(KafkaCluster(1).start().pid, flush=True)\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    pid = int(done.stdout.split()[-1])
    deadline = time.monotonic() + 10
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state in ("Z", "X"):  # dead, waiting for a reaper that may never come (init in a container)
            break
        assert time.monotonic() < deadline, f"Kafka node {pid} outlived the process that started it ({state})"
        time.sleep(0.2)
