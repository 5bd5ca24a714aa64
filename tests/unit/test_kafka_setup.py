"""``ordo.broker.kafka`` without starting a broker: the pinned version, the cache, the errors naming what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from ordo.broker import kafka
from ordo.broker.kafka import KafkaNode, KafkaSetupError, plan_nodes, server_properties


def test_the_pinned_version_is_a_4x_release_read_from_the_pom() -> None:
    version = kafka.kafka_version()
    assert version.split(".")[0] == "4" and len(version.split(".")) == 3
    assert kafka.kafka_home().name == f"kafka-{version}"


def test_the_cache_lives_outside_the_repository(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ORDO_KAFKA_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kafka.cache_root() == tmp_path / "xdg" / "ordo"
    monkeypatch.setenv("ORDO_KAFKA_CACHE", str(tmp_path / "mine"))
    assert kafka.cache_root() == tmp_path / "mine"
    assert kafka.installed_libs() is None  # nothing fetched there


def test_missing_java_and_maven_are_named_with_how_to_install_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("ORDO_KAFKA_CACHE", str(tmp_path / "cache"))
    with pytest.raises(KafkaSetupError, match=r"Java 17\+ is required .*apt-get install openjdk-17"):
        kafka.java_command()
    with pytest.raises(KafkaSetupError, match=r"Maven is required once.*apt-get install maven"):
        kafka.maven_command()
    with pytest.raises(KafkaSetupError, match="Java 17"):
        kafka.fetch()
    assert kafka.main(["fetch"]) == 1
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_an_old_java_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    with pytest.raises(KafkaSetupError, match=r"Java 11 found .*needs Java 17\+"):
        kafka.java_command()


def test_a_cluster_id_is_22_url_safe_characters() -> None:
    ids = {kafka.random_cluster_id() for _ in range(50)}
    assert len(ids) == 50
    for text in ids:
        assert len(text) == 22 and not text.startswith("-")
        assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_node_layout_is_kept_and_a_node_count_change_refused(tmp_path: Path) -> None:
    cluster_id, nodes = plan_nodes(tmp_path, 3, "127.0.0.1")
    ports = [(n.broker_port, n.controller_port) for n in nodes]
    assert len({p for pair in ports for p in pair}) == 6
    again_id, again = plan_nodes(tmp_path, 3, "127.0.0.1")
    assert again_id == cluster_id and [(n.broker_port, n.controller_port) for n in again] == ports
    with pytest.raises(KafkaSetupError, match="holds a cluster of 3 node"):
        plan_nodes(tmp_path, 1, "127.0.0.1")
    (tmp_path / "cluster.json").write_text("{not json")
    with pytest.raises(KafkaSetupError, match="not valid JSON"):
        plan_nodes(tmp_path, 3, "127.0.0.1")


@pytest.mark.parametrize(("size", "replicas", "min_isr"), [(1, "1", "1"), (3, "3", "2")])
def test_server_properties_are_durable_for_the_cluster_size(size: int, replicas: str, min_isr: str) -> None:
    nodes = [KafkaNode(i, i + 1, 9000 + i, 9100 + i, Path(f"/d/node-{i + 1}")) for i in range(size)]
    text = server_properties(nodes[0], nodes, {"log.retention.hours": "1"})
    config = dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert config["default.replication.factor"] == replicas
    assert config["min.insync.replicas"] == min_isr
    assert config["offsets.topic.replication.factor"] == replicas
    assert config["transaction.state.log.replication.factor"] == replicas
    assert config["transaction.state.log.min.isr"] == min_isr
    assert config["unclean.leader.election.enable"] == "false"
    assert config["auto.create.topics.enable"] == "false"
    assert config["group.initial.rebalance.delay.ms"] == "0"
    assert config["controller.quorum.voters"].count("@127.0.0.1:") == size
    assert config["log.retention.hours"] == "1"  # overrides are added


def test_durability_settings_come_from_the_environment_and_reach_child_processes() -> None:
    from ordo.services.stack import settings_env
    from ordo.settings import load_settings

    loaded = load_settings(
        {
            "ORDO_TOPIC_REPLICATION_FACTOR": "2",
            "ORDO_TOPIC_MIN_INSYNC_REPLICAS": "1",
            "ORDO_ALLOW_LOSSY_LOGS": "true",
            "ORDO_TOPIC__RETENTION_MS": "86400000",
        }
    )
    assert (loaded.topic_replication_factor, loaded.topic_min_insync_replicas) == (2, 1)
    assert loaded.allow_lossy_logs is True
    assert dict(loaded.topic_config) == {"retention.ms": "86400000"}
    assert load_settings(settings_env(loaded)) == loaded  # a child process gets the same settings
    assert load_settings({}).allow_lossy_logs is False and load_settings({}).topic_replication_factor == 0
    with pytest.raises(
        ValueError, match="ORDO_TOPIC_REPLICATION_FACTOR='-1': Input should be greater than or equal to 0"
    ):
        load_settings({"ORDO_TOPIC_REPLICATION_FACTOR": "-1"})
