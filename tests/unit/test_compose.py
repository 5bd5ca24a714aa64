"""The production compose stack, checked without a Docker engine: structure, settings, and CLI commands.

Every ``ordo ...`` command the file runs is parsed by the real click CLI
(``ordo.cli.main``), so a renamed command or flag fails here, not at deploy time.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from ordo.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def env(service: dict[str, Any]) -> dict[str, str]:
    values = service.get("environment") or {}
    if isinstance(values, list):
        values = dict(item.split("=", 1) for item in values)
    return {str(k): str(v) for k, v in values.items()}


def parse_ordo(args: list[str]) -> click.Context:
    """Parse ``ordo <args>`` with the subcommand's own parser (options checked, nothing run)."""
    name, *rest = args
    command = main.commands.get(name)
    if command is None:
        raise click.UsageError(f"ordo {name} does not exist; commands: {', '.join(sorted(main.commands))}")
    return command.make_context(name, rest)


def test_services_and_images(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) >= {"kafka", "arbiter", "consumer"}
    assert re.fullmatch(r"apache/kafka:\d+\.\d+\.\d+", services["kafka"]["image"]), "pin an official apache/kafka tag"
    for name in ("arbiter", "consumer"):
        build = services[name]["build"]
        context = build if isinstance(build, str) else build["context"]
        assert (ROOT / context / "Dockerfile").exists()


def test_kafka_is_single_node_kraft_with_a_durable_volume(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    settings = env(kafka)
    assert set(settings["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node = settings["KAFKA_NODE_ID"]
    assert settings["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{node}@kafka:")
    assert "CONTROLLER" in settings["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert "CLUSTER_ID" in settings
    log_dirs = settings["KAFKA_LOG_DIRS"]
    mounts = {m.split(":", 1)[1]: m.split(":", 1)[0] for m in kafka["volumes"]}
    assert log_dirs in mounts, "Kafka's log dir must be on a volume"
    assert mounts[log_dirs] in (compose.get("volumes") or {}), "a named volume, declared at the top level"
    # the clients inside the network use the advertised PLAINTEXT listener
    assert "PLAINTEXT://kafka:9092" in settings["KAFKA_ADVERTISED_LISTENERS"]


def test_retention_and_replication_settings(compose: dict[str, Any]) -> None:
    settings = env(compose["services"]["kafka"])
    assert settings["KAFKA_LOG_RETENTION_MS"] == "-1" and settings["KAFKA_LOG_RETENTION_BYTES"] == "-1"
    assert settings["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    for key in (
        "KAFKA_DEFAULT_REPLICATION_FACTOR",
        "KAFKA_MIN_INSYNC_REPLICAS",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ):
        assert settings[key] == "1", f"{key}: a single node cannot hold more replicas"
    header = (ROOT / "docker-compose.yml").read_text()
    assert "KAFKA_DEFAULT_REPLICATION_FACTOR=3" in header and "KAFKA_MIN_INSYNC_REPLICAS=2" in header


def test_ordo_topic_configs_keep_logs_forever() -> None:
    from ordo.broker import DECISIONS_CONFIG, INTENTS_CONFIG

    for config in (DECISIONS_CONFIG, INTENTS_CONFIG):
        assert config["retention.ms"] == "-1" and config["retention.bytes"] == "-1"


def test_healthchecks(compose: dict[str, Any]) -> None:
    services = compose["services"]
    kafka_check = " ".join(services["kafka"]["healthcheck"]["test"])
    assert "kafka-broker-api-versions.sh" in kafka_check and "localhost:9092" in kafka_check
    consumer = services["consumer"]
    check = " ".join(consumer["healthcheck"]["test"])
    port = parse_ordo(consumer["command"]).params["http_port"]
    assert f"127.0.0.1:{port}/readyz" in check
    assert f"{port}:{port}" in consumer["ports"]


def test_consumer_serves_readyz() -> None:
    from consumer import Catalog
    from consumer.http import create_app

    paths = {route.path for route in create_app(Catalog("unused.db")).routes}
    assert {"/readyz", "/healthz", "/metrics"} <= paths


def test_services_wait_for_a_healthy_kafka_and_reach_it(compose: dict[str, Any]) -> None:
    for name in ("arbiter", "consumer"):
        service = compose["services"][name]
        assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
        settings = env(service)
        assert settings["ORDO_BOOTSTRAP_SERVERS"] == "kafka:9092"
        assert settings["ORDO_TOPIC_PREFIX"]
        assert service.get("restart") == "unless-stopped"


def test_every_ordo_command_exists(compose: dict[str, Any], dockerfile: str) -> None:
    entrypoint = re.search(r"^ENTRYPOINT\s+(\[.*\])", dockerfile, re.M)
    assert entrypoint is not None and yaml.safe_load(entrypoint.group(1)) == ["ordo"]
    commands = [s["command"] for s in compose["services"].values() if "command" in s]
    assert len(commands) >= 2
    for command in commands:
        args = shlex.split(command) if isinstance(command, str) else list(command)
        parse_ordo(args)  # raises on an unknown command or option
    consumer = parse_ordo(compose["services"]["consumer"]["command"])
    catalog = consumer.params["catalog"]
    if catalog.startswith("postgresql://"):
        host = catalog.split("@", 1)[1].split(":", 1)[0].split("/", 1)[0]
        assert host in compose["services"], "the catalog database is a service of the stack"
        assert compose["services"]["consumer"]["depends_on"][host]["condition"] == "service_healthy"
        volumes = [m.split(":", 1)[0] for m in compose["services"][host]["volumes"]]
        assert any(v in (compose.get("volumes") or {}) for v in volumes), "the database must be on a volume"
    else:
        mounts = [m.split(":", 1)[1] for m in compose["services"]["consumer"]["volumes"]]
        assert any(catalog.startswith(m.rstrip("/") + "/") for m in mounts), "the catalog must be on a volume"
    assert consumer.params["http_host"] == "0.0.0.0"
    assert env(compose["services"]["consumer"])["ORDO_CATALOG"] == catalog, "`exec consumer ordo tables` reads it"


def test_the_stack_runs_an_arbiter_fleet_and_consumers_sharing_one_catalog(compose: dict[str, Any]) -> None:
    services = compose["services"]
    arbiters = [s for s in services.values() if s.get("command", [None])[0] == "arbiter"]
    consumers = [s for s in services.values() if s.get("command", [None])[0] == "consumer"]
    assert len(arbiters) >= 2 and len(consumers) >= 2
    for service in arbiters:
        assert parse_ordo(service["command"]).params["fleet"], "arbiters share tables through the group"
        assert env(service)["ORDO_ARBITER_GROUP"] == env(arbiters[0])["ORDO_ARBITER_GROUP"]
    parsed = [parse_ordo(s["command"]).params for s in consumers]
    assert len({p["catalog"] for p in parsed}) == 1, "one catalog database for every consumer"
    assert all(p["group"] is not None and p["shard"] is None for p in parsed), "the consumers share tables by group"
    assert len({env(s).get("ORDO_CONSUMER_GROUP") for s in consumers}) == 1, "one consumer group"


def test_a_wrong_command_would_be_caught() -> None:
    """The check above can fail."""
    with pytest.raises(click.UsageError):
        parse_ordo(["consumer", "--no-such-flag"])
    with pytest.raises(click.UsageError, match="does not exist"):
        parse_ordo(["arbitrate"])


def test_dockerfile(dockerfile: str) -> None:
    base = re.search(r"^FROM\s+(\S+)", dockerfile, re.M)
    assert base is not None and base.group(1).startswith("python:3.11-slim")
    assert "openjdk-17-jre-headless" in dockerfile
    assert re.search(r"^USER\s+(?!root)\S+", dockerfile, re.M), "run as a non-root user"
    copied = set(re.findall(r"^COPY\s+(\S+)", dockerfile, re.M))
    for package in ("schemas", "arbiter", "producer", "consumer", "ordo", "pyproject.toml"):
        assert package in copied
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_the_stack_makes_and_trusts_its_signing_key(compose: dict[str, Any]) -> None:
    keys = compose["services"]["keys"]
    args = parse_ordo(keys["command"])
    assert args.params["keep"] and args.params["path"] == "/keys/arbiter.key"
    arbiter = compose["services"]["arbiter"]
    assert env(arbiter)["ORDO_ARBITER_KEY"] == args.params["path"]
    for name in ("arbiter", "consumer"):
        service = compose["services"][name]
        assert env(service)["ORDO_TRUSTED_KEYS"] == f"{args.params['path']}.pub"
        assert service["depends_on"]["keys"]["condition"] == "service_completed_successfully"
        assert any(volume.startswith("keys:") for volume in service["volumes"])


def test_the_stack_runs_the_table_service(compose: dict[str, Any]) -> None:
    """The compactor follows the consumer's catalog over HTTP, sees the warehouse, and exposes its metrics."""
    service = compose["services"]["compactor"]
    args = parse_ordo(service["command"]).params
    assert args["metrics_port"] and f"{args['metrics_port']}:{args['metrics_port']}" in service["ports"]
    settings = env(service)
    consumer_port = parse_ordo(compose["services"]["consumer"]["command"]).params["http_port"]
    assert settings["ORDO_CATALOG"] == f"http://consumer:{consumer_port}"
    assert any(v.endswith(":" + settings["ORDO_WAREHOUSE"]) for v in service["volumes"])
    assert service["depends_on"]["consumer"]["condition"] == "service_healthy"
