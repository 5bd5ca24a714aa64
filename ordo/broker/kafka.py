"""Apache Kafka on loopback: the pinned release, fetched once by Maven, and a KRaft cluster launcher.

The release is pinned in ``ordo/broker/kafka-pom.xml`` (``kafka.version``). ``fetch()``
has Maven copy ``org.apache.kafka:kafka_2.13`` with its runtime dependencies and
a log4j2 binding into a cache outside the repository
(``$ORDO_KAFKA_CACHE``, else ``$XDG_CACHE_HOME/ordo``, else ``~/.cache/ordo``;
one ``kafka-<version>/libs`` directory per version), once; ``make test`` runs
it (``python -m ordo.broker.kafka fetch``).

``KafkaCluster`` formats storage (``kafka.tools.StorageTool format``) and runs
1 or 3 combined broker+controller nodes (``kafka.Kafka``) on free loopback
ports with their data on disk, waits until every broker has registered and a
metadata request answers, and stops them cleanly (SIGTERM, then SIGKILL after
a timeout). It can also kill -9, stop, restart, pause and resume one node, for
the chaos tests. Its data directory survives ``stop()``: starting a cluster on
the same directory again finds its topics and records (``ordo up --broker
kafka --data DIR``). A cluster started without a directory uses a temporary one,
removed at ``stop()``.

It has the same surface as ``ordo.broker.EmbeddedBroker`` (``start``, ``stop``,
``bootstrap_servers``, ``running``, ``pause``, ``resume``, ``stderr_tail``, a
context manager), so tests and ``ordo up`` take either.
"""

from __future__ import annotations

import atexit
import base64
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from ordo.broker.maven import fetch_runtime, installed, pinned_version
from ordo.broker.netns import NodeNetwork
from ordo.kernel.errors import BrokerUnavailableError, OrdoError
from ordo.kernel.freeze import freeze

log = logging.getLogger(__name__)

KAFKA_POM = Path(__file__).with_name("kafka-pom.xml")
DEFAULT_START_TIMEOUT = 90.0
# Small heaps, the serial collector and C1 only: a node starts in ~2-3 s and a
# 3-node cluster fits beside Spark on a 2-core machine. ``jvm_options`` overrides.
DEFAULT_JVM_OPTIONS: tuple[str, ...] = (
    "-Xms64m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
LOG4J2_CONFIG = """\
# Written by ordo.broker.kafka: warnings and errors, plus the start/stop lines of the server.
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = OUT
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
"""
LAYOUT_FILE = "cluster.json"


class KafkaSetupError(OrdoError):
    """Raised when Apache Kafka cannot be fetched or run here (no Java, no Maven, a failed download, a bad data dir)."""


# --------------------------------------------------------------------------- the jars


def kafka_version(pom: Path = KAFKA_POM) -> str:
    """The pinned Kafka release (``kafka.version`` in ``ordo/broker/kafka-pom.xml``)."""
    return pinned_version(pom, "kafka.version", KafkaSetupError)


def cache_root() -> Path:
    """Where fetched Kafka releases live: ``$ORDO_KAFKA_CACHE``, ``$XDG_CACHE_HOME/ordo`` or ``~/.cache/ordo``."""
    explicit = os.environ.get("ORDO_KAFKA_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ordo"


def kafka_home(version: str | None = None) -> Path:
    """The cache directory of one release (``<cache>/kafka-<version>``, with ``libs/`` inside)."""
    return cache_root() / f"kafka-{version or kafka_version()}"


def installed_libs(version: str | None = None) -> Path | None:
    """The ``libs`` directory of a complete fetch of the release, else None."""
    return installed(kafka_home(version))


def java_command() -> str:
    """The ``java`` to run (``$JAVA_HOME/bin/java``, else the one on PATH); ``KafkaSetupError`` if none or < 17."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = str(Path(java_home, "bin", "java")) if java_home else None
    java = candidate if candidate and Path(candidate).exists() else shutil.which("java")
    if java is None:
        raise KafkaSetupError(
            "Java 17+ is required to run Apache Kafka: install it (Debian/Ubuntu: apt-get install "
            "openjdk-17-jre-headless; macOS: brew install openjdk@17) and put java on PATH or set JAVA_HOME."
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)', out.stderr + out.stdout)
    if match is None or int(match.group(1)) < 17:
        found = match.group(1) if match else "of unknown version"
        raise KafkaSetupError(f"Java {found} found at {java}; Apache Kafka 4 needs Java 17+.")
    return java


def maven_command() -> str:
    """The ``mvn`` on PATH; ``KafkaSetupError`` with how to install it if there is none."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaSetupError(
            "Maven is required once, to fetch Apache Kafka's jars: install it (Debian/Ubuntu: apt-get install "
            "maven; macOS: brew install maven) and put mvn on PATH, or set ORDO_KAFKA_CACHE to a directory "
            f"holding kafka-{kafka_version()}/libs from another machine."
        )
    return mvn


def fetch(echo: Callable[[str], None] | None = None, pom: Path = KAFKA_POM) -> Path:
    """Fetch the pinned release into the cache unless it is there; returns its ``libs`` directory."""
    version = kafka_version(pom)
    libs = installed_libs(version)
    if libs is not None:
        return libs
    java_command()
    what = f"Apache Kafka {version}"
    jar = f"kafka_2.13-{version}.jar"
    return fetch_runtime(maven_command(), pom, kafka_home(version), jar, what, KafkaSetupError, echo)


def random_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as ``StorageTool random-uuid``)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


# --------------------------------------------------------------------------- the cluster

_LIVE: set[KafkaCluster] = set()  # started and not stopped (strong: a dropped cluster's nodes still run)
_LIVE_LOCK = threading.Lock()


@atexit.register
def _kill_left_over() -> None:
    """Kill the nodes of every cluster still running at interpreter exit (an interrupted test run, a crash)."""
    with _LIVE_LOCK:
        clusters = list(_LIVE)
    for cluster in clusters:
        for node in cluster.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.kill()
        if cluster.network is not None:
            cluster.network.destroy()


def _free_port(host: str) -> int:
    from ordo.broker import free_port

    return free_port(host)


def _port_free(host: str, port: int) -> bool:
    from ordo.broker import port_free

    return port_free(host, port)


@dataclass
class KafkaNode:
    """One combined broker+controller process of a ``KafkaCluster``."""

    index: int
    node_id: int
    broker_port: int
    controller_port: int
    directory: Path
    host: str = "127.0.0.1"  # where it listens: loopback, or its own namespace's address (isolated clusters)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        """The node's output (log4j at WARN, plus start and stop lines)."""
        return self.directory / "server.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def plan_nodes(data_dir: Path, size: int, host: str) -> tuple[str, list[KafkaNode]]:
    """Read ``cluster.json`` (cluster id, ports) in ``data_dir`` or make a new one; keep ports still free."""
    path = data_dir / LAYOUT_FILE
    layout: dict[str, object] = {}
    if path.is_file():
        try:
            layout = json.loads(path.read_text())
        except ValueError as exc:
            raise KafkaSetupError(f"{path} is not valid JSON ({exc}): remove the directory to start afresh") from exc
        if layout.get("nodes") != size:
            raise KafkaSetupError(
                f"{data_dir} holds a cluster of {layout.get('nodes')} node(s), not {size}: "
                "use the same node count or another data directory"
            )
    cluster_id = str(layout.get("cluster_id") or random_cluster_id())
    ports = layout.get("ports")
    old: list[list[int]] = ports if isinstance(ports, list) else []
    taken: set[int] = set()
    nodes = []
    for index in range(size):
        pair = []
        for slot in range(2):
            port = old[index][slot] if index < len(old) else 0
            if not port or port in taken or not _port_free(host, port):
                port = _free_port(host)
                while port in taken:
                    port = _free_port(host)
            taken.add(port)
            pair.append(port)
        nodes.append(KafkaNode(index, index + 1, pair[0], pair[1], data_dir / f"node-{index + 1}", host))
    record = {
        "cluster_id": cluster_id,
        "nodes": size,
        "kafka_version": kafka_version(),
        "ports": [[n.broker_port, n.controller_port] for n in nodes],
    }
    path.write_text(json.dumps(record, indent=2) + "\n")
    return cluster_id, nodes


def server_properties(node: KafkaNode, nodes: Sequence[KafkaNode], overrides: Mapping[str, str]) -> str:
    """The ``server.properties`` of one combined node: durable replication defaults, tuned for a fast start."""
    replicas = min(3, len(nodes))
    min_isr = max(1, replicas - 1)
    voters = ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in nodes)
    config = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{node.host}:{node.broker_port},CONTROLLER://{node.host}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{node.host}:{node.broker_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(node.data_dir),
        # Durable defaults, as ordo's own topics get them (docs/operations.md).
        "num.partitions": "1",
        "default.replication.factor": str(replicas),
        "min.insync.replicas": str(min_isr),
        "unclean.leader.election.enable": "false",
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": str(replicas),
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(min_isr),
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        # Fast start and a small footprint on a laptop or a 2-core CI machine.
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "num.replica.fetchers": "1",
        "num.recovery.threads.per.data.dir": "1",
        "background.threads": "2",
        "log.cleaner.threads": "1",
    }
    config.update(overrides)
    lines = ["# Written by ordo.broker.kafka at each start; edit broker_config instead."]
    lines += [f"{key}={value}" for key, value in config.items()]
    return "\n".join(lines) + "\n"


class KafkaCluster:
    """A KRaft cluster of ``nodes`` (1 or 3) combined broker+controller processes on loopback; a context manager.

    ``data_dir`` keeps each node's configuration, log and data
    (``node-<i>/``) plus ``cluster.json`` (cluster id, ports); default: a
    temporary directory removed at ``stop()``. ``broker_config`` overrides or
    adds ``server.properties`` entries on every node. ``isolated=True`` (chaos
    tests; Linux, root) runs each node in a network namespace of its own on a
    bridge (``ordo.broker.netns``), so that ``cut_node`` can partition one off.
    """

    def __init__(
        self,
        nodes: int = 1,
        data_dir: str | Path | None = None,
        host: str = "127.0.0.1",
        *,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS,
        broker_config: Mapping[str, str] | None = None,
        echo: Callable[[str], None] | None = None,
        isolated: bool = False,
    ) -> None:
        if nodes not in (1, 3):
            raise KafkaSetupError(f"a KafkaCluster has 1 or 3 nodes, not {nodes!r}")
        self.size = nodes
        self.host = host
        self.start_timeout = start_timeout
        self.jvm_options = tuple(jvm_options)
        self.broker_config = dict(broker_config or {})
        self.echo = echo
        self._temporary = data_dir is None
        self.data_dir = Path(data_dir).absolute() if data_dir is not None else None
        self.nodes: list[KafkaNode] = []
        self.cluster_id: str | None = None
        self._libs: Path | None = None
        self.network: NodeNetwork | None = NodeNetwork(nodes) if isolated else None

    # ------------------------------------------------------------------ surface shared with EmbeddedBroker

    kind = "kafka"

    @property
    def bootstrap_servers(self) -> str:
        """Every node's ``host:port``, comma-separated (``bootstrap.servers``)."""
        if not self.nodes:
            raise RuntimeError("cluster not started")
        return ",".join(f"{node.host}:{node.broker_port}" for node in self.nodes)

    @property
    def pid(self) -> int | None:
        """The first node's process id (the only one of a single-node cluster)."""
        return self.nodes[0].pid if self.nodes else None

    @property
    def running(self) -> bool:
        """True while every node runs."""
        return bool(self.nodes) and all(node.running for node in self.nodes)

    def stderr_tail(self, lines: int = 20) -> str:
        """The last lines of each node's log (for error messages)."""
        parts = [f"node {n.node_id}: {n.tail(lines)}" for n in self.nodes if n.tail(lines)]
        return "\n".join(parts)

    # ------------------------------------------------------------------ start

    def start(self) -> KafkaCluster:
        """Format (first start only), start every node, and return once all brokers have registered."""
        if self.running:
            return self
        self._libs = fetch(echo=self.echo)
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="ordo-kafka-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.cluster_id, self.nodes = plan_nodes(self.data_dir, self.size, self.host)
            if self.network is not None:
                self.network.create()
                for node in self.nodes:
                    node.host = self.network.address(node.node_id)
            for node in self.nodes:
                node.directory.mkdir(parents=True, exist_ok=True)
                node.config_path.write_text(server_properties(node, self.nodes, self.broker_config))
                (node.directory / "log4j2.properties").write_text(LOG4J2_CONFIG)
            unformatted = [n for n in self.nodes if not (n.data_dir / "meta.properties").is_file()]
            if unformatted:
                with ThreadPoolExecutor(len(unformatted)) as pool:
                    list(pool.map(self._format, unformatted))
            for node in self.nodes:
                self._launch(node)
            self.wait_ready(timeout=self.start_timeout)
        except BaseException:
            self.stop(timeout=5.0)
            raise
        with _LIVE_LOCK:
            _LIVE.add(self)
        log.info("Apache Kafka (%d node(s)) ready at %s", self.size, self.bootstrap_servers)
        return self

    def _java(self, node: KafkaNode, main: str, *args: str) -> list[str]:
        assert self._libs is not None
        return [
            java_command(),
            *self.jvm_options,
            f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={node.directory}",
            "-cp",
            str(self._libs / "*"),
            main,
            *args,
        ]

    def _format(self, node: KafkaNode) -> None:
        assert self.cluster_id is not None
        command = self._java(
            node, "kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(node.config_path)
        )
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        if done.returncode != 0:
            raise KafkaSetupError(
                f"formatting Kafka node {node.node_id} in {node.data_dir} failed (exit code {done.returncode}): "
                f"{(done.stdout + done.stderr).strip()[-2000:]}"
            )

    def _launch(self, node: KafkaNode) -> None:
        with open(node.log_path, "ab") as out:
            out.write(f"\n---- ordo.broker.kafka: starting node {node.node_id} at {time.ctime()}\n".encode())
            out.flush()
            inside = self.network.exec_prefix(node.node_id) if self.network is not None else []
            node.process = subprocess.Popen(
                [*inside, *self._java(node, "kafka.Kafka", str(node.config_path))],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C meant for `ordo up` reaches the broker through stop() only
            )

    def wait_ready(self, timeout: float = DEFAULT_START_TIMEOUT, nodes: Sequence[KafkaNode] | None = None) -> None:
        """Wait until every running node's broker is registered and answers metadata; ``BrokerUnavailableError``."""
        wanted = list(nodes if nodes is not None else self.nodes)
        deadline = time.monotonic() + timeout
        while True:
            for node in wanted:
                if node.process is not None and node.process.poll() is not None:
                    code = node.process.returncode
                    raise BrokerUnavailableError(
                        f"Kafka node {node.node_id} exited with code {code} while starting "
                        f"(log {node.log_path}):\n{node.tail() or '(no output)'}"
                    )
            if self._registered(wanted):
                return
            if time.monotonic() > deadline:
                raise BrokerUnavailableError(
                    f"Kafka at {self.bootstrap_servers} did not register node(s) "
                    f"{[n.node_id for n in wanted]} within {timeout:.0f} s:\n{self.stderr_tail() or '(no output)'}"
                )
            time.sleep(0.2)

    def _registered(self, wanted: Sequence[KafkaNode]) -> bool:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        for node in wanted:
            admin = AdminClient(
                {
                    "bootstrap.servers": f"{node.host}:{node.broker_port}",
                    "socket.connection.setup.timeout.ms": 1000,
                    "client.id": "ordo.kafka-probe",
                    "log_level": 0,
                }
            )
            try:
                metadata = admin.list_topics(timeout=1.0)
            except KafkaException:
                return False
            if not {n.node_id for n in self.nodes if n.running} <= set(metadata.brokers):
                return False
        return True

    # ------------------------------------------------------------------ stop

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every node (SIGTERM, SIGKILL after ``timeout``); remove a temporary data directory."""
        with _LIVE_LOCK:
            _LIVE.discard(self)
        nodes = [n for n in self.nodes if n.process is not None]
        for node in nodes:
            self._signal(node, signal.SIGCONT)
            self._signal(node, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node in nodes:
            assert node.process is not None
            try:
                node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("Kafka node %s did not stop within %.0f s: killed", node.node_id, timeout)
                node.process.kill()
                node.process.wait(timeout=10)
            node.process = None
        if self.network is not None:
            self.network.destroy()
        if self._temporary and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    @staticmethod
    def _signal(node: KafkaNode, sig: int) -> None:
        if node.process is not None and node.process.poll() is None:
            try:
                node.process.send_signal(sig)
            except ProcessLookupError:
                pass

    @staticmethod
    def _freeze(node: KafkaNode) -> None:
        """SIGSTOP a running node, returning once the JVM's threads are all stopped (``kernel.freeze``)."""
        if node.process is not None and node.process.poll() is None:
            try:
                freeze(node.process.pid)
            except ProcessLookupError:
                pass

    # ------------------------------------------------------------------ faults (chaos tests)

    def node(self, node_id: int) -> KafkaNode:
        """The node with this ``node.id`` (1-based, as the broker ids clients see)."""
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no Kafka node {node_id} (nodes: {[n.node_id for n in self.nodes]})")

    def kill_node(self, node_id: int) -> None:
        """kill -9 one node (a crash: no controlled shutdown)."""
        node = self.node(node_id)
        if node.process is not None:
            self._signal(node, signal.SIGCONT)
            node.process.kill()
            node.process.wait(timeout=10)
            node.process = None

    def stop_node(self, node_id: int, timeout: float = 30.0) -> None:
        """A clean stop of one node (SIGTERM, SIGKILL after ``timeout``)."""
        node = self.node(node_id)
        if node.process is None:
            return
        self._signal(node, signal.SIGCONT)
        self._signal(node, signal.SIGTERM)
        try:
            node.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            node.process.kill()
            node.process.wait(timeout=10)
        node.process = None

    def start_node(self, node_id: int, timeout: float | None = None) -> None:
        """Start a stopped or killed node again on its data; returns once its broker has registered."""
        node = self.node(node_id)
        if node.running:
            return
        self._launch(node)
        self.wait_ready(timeout=timeout or self.start_timeout, nodes=[node])

    def pause_node(self, node_id: int) -> None:
        """Freeze one node (SIGSTOP): connections stay open, nothing answers."""
        self._freeze(self.node(node_id))

    def resume_node(self, node_id: int) -> None:
        """Thaw a paused node (SIGCONT)."""
        self._signal(self.node(node_id), signal.SIGCONT)

    def cut_node(self, node_id: int) -> None:
        """Partition one node off the network (an ``isolated`` cluster's): it runs on, alone."""
        if self.network is None:
            raise KafkaSetupError("cut_node needs KafkaCluster(..., isolated=True): a namespace per node")
        self.node(node_id)
        self.network.cut(node_id)

    def heal_node(self, node_id: int) -> None:
        """Join a cut-off node to the network again."""
        if self.network is None:
            raise KafkaSetupError("heal_node needs KafkaCluster(..., isolated=True)")
        self.node(node_id)
        self.network.heal(node_id)

    def pause(self) -> None:
        """Freeze every node."""
        for node in self.nodes:
            self._freeze(node)

    def resume(self) -> None:
        """Thaw every node."""
        for node in self.nodes:
            self._signal(node, signal.SIGCONT)

    def leader_of(self, topic: str, partition: int = 0, timeout: float = 10.0) -> int:
        """The node id leading ``topic``'s partition now (from a metadata request)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        metadata = admin.list_topics(timeout=timeout)
        described = metadata.topics.get(topic)
        if described is None or described.error is not None or partition not in described.partitions:
            raise KeyError(f"no partition {topic}[{partition}] on {self.bootstrap_servers}")
        return int(described.partitions[partition].leader)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"KafkaCluster({self.size} node(s), {state}, data={self.data_dir})"


def active_controller(cluster: KafkaCluster, timeout: float = 30.0) -> int:
    """The node id of the active KRaft controller (the metadata quorum's leader).

    Read from each running node's ``__cluster_metadata-0/quorum-state`` (the election state the raft
    layer persists at every change): the leader of the newest epoch that a majority of the voters
    names. Waits up to ``timeout`` while an election is under way.
    """
    deadline = time.monotonic() + timeout
    while True:
        votes: dict[tuple[int, int], int] = {}
        for node in cluster.nodes:
            if not node.running:
                continue
            try:
                state = json.loads((node.data_dir / "__cluster_metadata-0" / "quorum-state").read_text())
            except (OSError, ValueError):
                continue
            leader, epoch = int(state.get("leaderId", -1)), int(state.get("leaderEpoch", -1))
            if leader >= 0:
                votes[(epoch, leader)] = votes.get((epoch, leader), 0) + 1
        agreed = [key for key, count in votes.items() if count > len(cluster.nodes) // 2]
        if agreed:
            return max(agreed)[1]
        if time.monotonic() > deadline:
            raise BrokerUnavailableError(f"no KRaft controller agreed by a majority within {timeout:.0f} s: {votes}")
        time.sleep(0.2)


def wait_in_sync(cluster: KafkaCluster, timeout: float = 120.0) -> None:
    """Wait until every partition has all its replicas in sync (after a node restarted or thawed)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "log_level": 0})
    deadline = time.monotonic() + timeout
    lagging: list[str] = ["(no metadata yet)"]
    while time.monotonic() < deadline:
        try:
            metadata = admin.list_topics(timeout=5.0)
        except KafkaException:
            time.sleep(0.5)
            continue
        lagging = [
            f"{name}[{pid}]"
            for name, topic in metadata.topics.items()
            for pid, partition in topic.partitions.items()
            if set(partition.isrs) != set(partition.replicas) or partition.leader < 0
        ]
        if not lagging:
            return
        time.sleep(0.5)
    raise BrokerUnavailableError(f"partitions not in sync within {timeout:.0f} s: {lagging[:10]}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ordo.broker.kafka fetch`` (the jars, once) or ``python -m ordo.broker.kafka version``."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else "fetch"
    try:
        if command == "fetch":
            libs = fetch(echo=print)
            print(f"Apache Kafka {kafka_version()}: {libs}")
            return 0
        if command == "version":
            print(kafka_version())
            return 0
    except KafkaSetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"usage: python -m ordo.broker.kafka [fetch|version] (not {command!r})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "DEFAULT_JVM_OPTIONS",
    "KAFKA_POM",
    "KafkaCluster",
    "KafkaNode",
    "KafkaSetupError",
    "cache_root",
    "fetch",
    "installed_libs",
    "java_command",
    "kafka_home",
    "kafka_version",
    "maven_command",
    "random_cluster_id",
]
