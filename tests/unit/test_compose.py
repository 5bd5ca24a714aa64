"""The production compose stack, checked without a Docker engine: structure, settings, and CLI commands.

Every ``ordo ...`` command the file runs is parsed by the real click CLI
(``ordo.cli.main``), so a renamed command or flag fails here, not at deploy time.
"""

from __future__ import annotations

import re
import shlex
import tomllib
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


def kafka_nodes(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in compose["services"].items() if name.startswith("kafka")}


def test_services_and_images(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) >= {"kafka-1", "kafka-2", "kafka-3", "arbiter", "consumer"}
    for node in kafka_nodes(compose).values():
        assert re.fullmatch(r"apache/kafka:\d+\.\d+\.\d+", node["image"]), "pin an official apache/kafka tag"
    for name in ("arbiter", "consumer"):
        build = services[name]["build"]
        context = build if isinstance(build, str) else build["context"]
        assert (ROOT / context / "Dockerfile").exists()


def test_kafka_is_a_three_node_kraft_quorum_with_durable_volumes(compose: dict[str, Any]) -> None:
    nodes = kafka_nodes(compose)
    assert len(nodes) == 3, "three nodes: one may fail without losing or stopping anything"
    voters = {env(n)["KAFKA_CONTROLLER_QUORUM_VOTERS"] for n in nodes.values()}
    assert len(voters) == 1, "one quorum"
    members = {v.split("@")[0]: v.split("@")[1].split(":")[0] for v in voters.pop().split(",")}
    assert len({env(n)["CLUSTER_ID"] for n in nodes.values()}) == 1
    data_volumes = set()
    for name, kafka in nodes.items():
        settings = env(kafka)
        assert set(settings["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
        assert members[settings["KAFKA_NODE_ID"]] == kafka["hostname"] == name
        assert "CONTROLLER" in settings["KAFKA_CONTROLLER_LISTENER_NAMES"]
        log_dirs = settings["KAFKA_LOG_DIRS"]
        mounts = {m.split(":", 1)[1]: m.split(":", 1)[0] for m in kafka["volumes"]}
        assert log_dirs in mounts, "Kafka's log dir must be on a volume"
        assert mounts[log_dirs] in (compose.get("volumes") or {}), "a named volume, declared at the top level"
        data_volumes.add(mounts[log_dirs])
        # the clients inside the network use the advertised PLAINTEXT listener
        assert f"PLAINTEXT://{name}:9092" in settings["KAFKA_ADVERTISED_LISTENERS"]
    assert len(data_volumes) == 3, "each node its own volume"
    assert len({p for n in nodes.values() for p in n["ports"]}) == 3, "each node its own host port"


def test_retention_and_replication_settings(compose: dict[str, Any]) -> None:
    for node in kafka_nodes(compose).values():
        settings = env(node)
        assert settings["KAFKA_LOG_RETENTION_MS"] == "-1" and settings["KAFKA_LOG_RETENTION_BYTES"] == "-1"
        assert settings["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
        assert settings["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"
        for key in (
            "KAFKA_DEFAULT_REPLICATION_FACTOR",
            "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
            "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        ):
            assert settings[key] == "3", f"{key}: on every node"
        for key in ("KAFKA_MIN_INSYNC_REPLICAS", "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"):
            assert settings[key] == "2", f"{key}: two in sync before a write is acknowledged"


def test_ordo_topic_configs_keep_logs_forever() -> None:
    from ordo.broker import DECISIONS_CONFIG, INTENTS_CONFIG

    for config in (DECISIONS_CONFIG, INTENTS_CONFIG):
        assert config["retention.ms"] == "-1" and config["retention.bytes"] == "-1"


def test_healthchecks(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for node in kafka_nodes(compose).values():
        kafka_check = " ".join(node["healthcheck"]["test"])
        assert "kafka-broker-api-versions.sh" in kafka_check and "localhost:9092" in kafka_check
    consumer = services["consumer"]
    check = " ".join(consumer["healthcheck"]["test"])
    port = parse_ordo(consumer["command"]).params["http_port"]
    assert f"127.0.0.1:{port}/readyz" in check
    assert f"{port}:{port}" in consumer["ports"]


def test_consumer_serves_readyz() -> None:
    from ordo.consumer import Catalog
    from ordo.consumer.http import create_app

    paths = {route.path for route in create_app(Catalog("unused.db")).routes}
    assert {"/readyz", "/healthz", "/metrics"} <= paths


def test_services_wait_for_a_healthy_kafka_and_reach_it(compose: dict[str, Any]) -> None:
    for name in ("arbiter", "consumer"):
        service = compose["services"][name]
        nodes = kafka_nodes(compose)
        assert all(service["depends_on"][n]["condition"] == "service_healthy" for n in nodes)
        settings = env(service)
        assert sorted(settings["ORDO_BOOTSTRAP_SERVERS"].split(",")) == [f"{n}:9092" for n in sorted(nodes)]
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
    copied = {source for line in re.findall(r"^COPY\s+(.+)$", dockerfile, re.M) for source in line.split()[:-1]}
    assert "pyproject.toml" in copied
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = {pattern.split(".")[0].rstrip("*") for pattern in declared["include"]}
    assert packages == {"ordo"}, "ordo installs one package"
    assert not any(path.is_symlink() for path in (ROOT / "ordo").rglob("*")), "one name per module: no links"
    assert all((ROOT / p / "__init__.py").exists() for p in packages)
    missing = sorted(packages - copied)
    assert not missing, f"the image installs pyproject's packages: COPY {missing}"
    # the directories the image's volumes are mounted at are its user's (a new named volume copies that)
    made = re.search(r"mkdir -p ([^&\\]+)", dockerfile)
    owned = re.search(r"chown ordo ([^&\\]+)", dockerfile)
    assert made is not None and owned is not None
    for path in ("/keys", "/secret", "/warehouse", "/data"):
        assert path in made.group(1).split() and path in owned.group(1).split()
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_the_stack_makes_and_trusts_its_signing_key(compose: dict[str, Any]) -> None:
    services = compose["services"]
    keys = services["keys"]
    args = parse_ordo(keys["command"])
    assert args.params["keep"]
    private, public = args.params["path"], args.params["public_copy"]

    def volume_at(service: dict[str, Any], path: str) -> str | None:
        mounts = {m.split(":", 1)[1]: m.split(":", 1)[0] for m in service.get("volumes", [])}
        found = [v for at, v in mounts.items() if path.startswith(at.rstrip("/") + "/")]
        return found[0] if found else None

    secret = volume_at(keys, private)
    assert secret is not None and volume_at(keys, public) not in (None, secret), "the public key on another volume"
    arbiters = [n for n, s in services.items() if s.get("command", [None])[0] == "arbiter"]
    assert arbiters
    for name in arbiters:
        assert env(services[name])["ORDO_ARBITER_KEY"] == private
        assert volume_at(services[name], private) == secret
    holders = sorted(n for n, s in services.items() if any(m.split(":", 1)[0] == secret for m in s.get("volumes", [])))
    assert holders == sorted(["keys", *arbiters]), "only the arbiters (and the keys service) see the private key"
    for name in ("arbiter", "consumer", "consumer-2", "compactor"):
        service = services[name]
        assert env(service)["ORDO_TRUSTED_KEYS"] == public
        assert volume_at(service, public) == volume_at(keys, public)
        assert service["depends_on"]["keys"]["condition"] == "service_completed_successfully"


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
