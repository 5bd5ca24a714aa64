"""``ordo up``: the whole stack on one machine, in the foreground.

``EmbeddedStack`` starts, in this order, the broker (a local Apache Kafka, the
embedded Tansu, or an existing Kafka), an ``ordo arbiter`` process and an
``ordo consumer`` process (with its HTTP service), waiting for each to be ready
before the next, then, unless turned off, the table service ``ordo compactor``
(Spark in local mode). The demo uses it too.

``broker="kafka"`` (the default) runs a single-node Apache Kafka
(``ordo.broker.kafka.KafkaCluster``, KRaft) with its data under the stack's
directory (``kafka/``): tables, catalog, keys and checkpoints survive a restart
on the same directory. ``broker="tansu"`` runs Tansu, which needs no Java but
keeps everything in memory and differs from Kafka where ordo needs workarounds
(docs/tansu.md): when the stack stops every table's log is gone, so a catalog
left by an earlier run no longer matches any log and is discarded at start.

The children log in the stack's log format and level (``log_format``,
``log_level``): with ``json`` every line in ``logs/`` is one JSON object.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from ordo.kernel.errors import BrokerUnavailableError, OrdoError
from ordo.kernel.keys import embedded_keys
from ordo.kernel.settings import Settings, SettingsError, load_settings
from ordo.services.stack import ARBITER_METRICS

if TYPE_CHECKING:
    from ordo.broker.kafka import KafkaCluster
    from ordo.broker.tansu import EmbeddedBroker
    from ordo.services.stack import ManagedProcess

BROKERS = ("kafka", "tansu")
kafka_log = logging.getLogger("ordo.kafka")  # librdkafka's own log lines


def default_kafka_data() -> Path:
    """Where ``ordo up --broker kafka`` keeps its stack without ``--data``: ``$XDG_DATA_HOME/ordo/up-kafka``."""
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "share") / "ordo" / "up-kafka"


Echo = Callable[[str], None]


class StackError(OrdoError):
    """Raised when a part of the embedded stack fails to start or dies while running."""


def java_available() -> bool:
    """True when a ``java`` is on PATH or under ``JAVA_HOME`` (Spark, hence the compactor, needs one)."""
    java_home = os.environ.get("JAVA_HOME")
    return shutil.which("java") is not None or bool(java_home and Path(java_home, "bin", "java").exists())


def check_broker(settings: Settings, timeout: float = 10.0) -> None:
    """``BrokerUnavailableError`` unless the broker answers a metadata request within ``timeout`` seconds.

    Uses the full client configuration (``ORDO_KAFKA__*``), so SASL/SSL
    settings are exercised the same way the services will use them.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    if not settings.bootstrap_servers:
        raise BrokerUnavailableError(
            "no Kafka broker configured: set ORDO_BOOTSTRAP_SERVERS or pass --bootstrap-servers"
        )
    config = settings.kafka_config(
        **{
            "socket.connection.setup.timeout.ms": 2000,
            "client.id": f"{settings.topic_prefix}.up.admin",
            "logger": kafka_log,  # never raw on stderr: served only by a poll, which this check never makes
        }
    )
    try:
        admin = AdminClient(config)
    except KafkaException as exc:
        raise client_refusal(settings, str(exc.args[0].str())) from None
    deadline = time.monotonic() + timeout
    while True:
        try:
            if admin.list_topics(timeout=min(5.0, max(0.5, deadline - time.monotonic()))).brokers:
                return
        except KafkaException:
            pass  # librdkafka's own lines (each refused connection) stay queued: the error below says it once
        if time.monotonic() >= deadline:
            raise BrokerUnavailableError(
                f"no Kafka broker reachable at {settings.bootstrap_servers} within {timeout:g} s "
                "(is it running? check ORDO_BOOTSTRAP_SERVERS and the ORDO_KAFKA__* security settings)"
            )
        time.sleep(0.5)


def client_refusal(settings: Settings, message: str) -> SettingsError:
    """The error for Kafka client settings librdkafka takes one by one but refuses when it makes a client (a
    certificate it cannot read, ...): it names the variables librdkafka's message names (else all of them)."""
    named = [key for key in settings.kafka if key in message] or sorted(settings.kafka)
    variables = ", ".join("ORDO_KAFKA__" + key.replace(".", "_").upper() for key in named)
    return SettingsError(
        f"invalid setting {variables or 'ORDO_KAFKA__*'} (or ORDO_KAFKA_CONFIG): librdkafka cannot make a client "
        f"with them: {message} (accepted: settings librdkafka can use here: files it can read, mechanisms it "
        "was built with)"
    )


class EmbeddedStack:
    """Broker + arbiter + consumer for development and the demo; a context manager.

    ``directory`` holds the catalog (``catalog.db``), the warehouse and the
    process logs; default: a fresh temporary directory, removed at ``stop()``.
    ``broker`` is the broker the stack starts: ``"kafka"`` (Apache Kafka, data
    in ``directory/kafka``; give a directory to keep it) or ``"tansu"`` (in
    memory). ``bootstrap_servers`` uses that Kafka instead of starting one.
    ``http_port`` 0 picks a free port. ``compactor`` also starts the table
    service (``compactor_args`` are its extra command-line arguments).
    ``log_format`` and ``log_level`` are the children's (``--log-format``).
    """

    def __init__(
        self,
        directory: str | Path | None = None,
        *,
        topic_prefix: str | None = None,
        bootstrap_servers: str | None = None,
        broker_port: int | None = None,
        http_port: int = 0,
        http_host: str = "127.0.0.1",
        kafka: dict[str, str] | None = None,
        echo: Echo | None = None,
        compactor: bool = False,
        compactor_args: tuple[str, ...] = (),
        broker: str = "kafka",
        log_format: str = "text",
        log_level: str | None = None,
    ) -> None:
        if broker not in BROKERS:
            raise StackError(f"unknown broker {broker!r}: expected one of {', '.join(BROKERS)}")
        self.broker_kind = broker
        self._temporary = directory is None
        self.directory = Path(tempfile.mkdtemp(prefix="ordo-")) if directory is None else Path(directory).absolute()
        self.topic_prefix = topic_prefix or load_settings({}).topic_prefix
        self.external = bootstrap_servers
        self.broker_port = broker_port
        self.http_port = http_port
        self.http_host = http_host
        self.kafka = dict(kafka or {})
        self.echo = echo or (lambda line: None)
        self.broker: EmbeddedBroker | KafkaCluster | None = None
        self.arbiter: ManagedProcess | None = None
        self.consumer: ManagedProcess | None = None
        self.with_compactor = compactor
        self.compactor_args = compactor_args
        self.compactor: ManagedProcess | None = None
        self.compactor_metrics: str | None = None
        self.url: str | None = None
        self.settings: Settings | None = None
        self.log_format = log_format
        self.log_level = log_level

    @property
    def catalog_path(self) -> Path:
        """The consumer's SQLite catalog."""
        return self.directory / "catalog.db"

    @property
    def warehouse(self) -> Path:
        """Default root of new tables' locations."""
        return self.directory / "warehouse"

    @property
    def log_dir(self) -> Path:
        """Where the arbiter's and consumer's output goes."""
        return self.directory / "logs"

    @property
    def in_memory(self) -> bool:
        """True when the broker is the embedded Tansu (nothing survives a stop)."""
        return self.external is None and self.broker_kind == "tansu"

    def start(self) -> EmbeddedStack:
        """Start broker, then arbiter and consumer; returns once all are ready; ``StackError`` if one fails."""
        self.start_broker()
        self.start_services()
        return self

    def start_broker(self) -> Settings:
        """Start Tansu or Apache Kafka (or check the external Kafka) and fix the settings; returns them."""
        from ordo.broker.tansu import EmbeddedBroker, port_free

        if self.http_port and not port_free(self.http_host, self.http_port):
            raise StackError(
                f"port {self.http_port} on {self.http_host} is in use (another `ordo up`?): "
                "pass --http-port 0 for any free port"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        self.warehouse.mkdir(exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        try:
            if self.external is None and self.broker_kind == "kafka":
                from ordo.broker.kafka import KafkaCluster

                cluster = self.broker = KafkaCluster(1, self.directory / "kafka", echo=self.echo).start()
                bootstrap = cluster.bootstrap_servers
                kafka: dict[str, str] = {}
            elif self.external is None:
                self._discard_stale_catalog()
                broker = self.broker = EmbeddedBroker(port=self.broker_port).start()
                bootstrap = broker.bootstrap_servers
                kafka = {}
            else:
                bootstrap = self.external
                kafka = self.kafka
            self.settings = Settings(
                bootstrap_servers=bootstrap,
                topic_prefix=self.topic_prefix,
                warehouse=str(self.warehouse),
                catalog=str(self.catalog_path),
                http_host=self.http_host,
                http_port=self.http_port,
                kafka=kafka,
                state_dir=str(self.directory / "state"),
                log_format=self.log_format,  # type: ignore[arg-type]
                log_level=self.log_level,  # type: ignore[arg-type]
            )
            # Signed decisions with no setup: the stack's own key, trusted by its own readers.
            self.settings = embedded_keys(self.settings, self.directory / "keys")
            if self.external is not None:
                check_broker(self.settings)
        except BaseException:
            self.stop()
            raise
        return self.settings

    def start_services(self) -> None:
        """Start the arbiter and the consumer side by side, then the compactor; return once they are ready."""
        from ordo.services.stack import ProcessError, start_arbiter, start_compactor, start_consumer, wait_arbiter_ready

        assert self.settings is not None, "start_broker() first"
        try:
            arbiter = self.arbiter = start_arbiter(
                self.settings, wait_ready=False, log_dir=self.log_dir, args=["--state-dir", self.settings.state_dir]
            )
            self.consumer, self.url = start_consumer(self.settings, timeout=60.0, log_dir=self.log_dir)
            wait_arbiter_ready(arbiter, timeout=60.0)
            if self.with_compactor:
                self.compactor, self.compactor_metrics = start_compactor(
                    self.settings, log_dir=self.log_dir, args=self.compactor_args
                )
        except ProcessError as exc:
            self.stop()
            raise StackError(str(exc)) from exc
        except BaseException:
            self.stop()
            raise

    def _discard_stale_catalog(self) -> None:
        stale = [p for p in self.directory.glob("catalog.db*") if p.is_file()]
        if stale:
            for path in stale:
                path.unlink()
            self.echo(
                f"discarded the catalog of an earlier run in {self.directory}: its log died with the in-memory broker"
            )

    def dead(self) -> str | None:
        """A description of the first part that stopped unexpectedly, else None."""
        if self.broker is not None and not self.broker.running:
            name = "Tansu broker" if self.broker_kind == "tansu" else "Apache Kafka broker"
            return f"the {name} exited: {self.broker.stderr_tail() or '(no output)'}"
        for name, process in (("arbiter", self.arbiter), ("consumer", self.consumer), ("compactor", self.compactor)):
            if process is not None and not process.running:
                return f"the {name} exited with code {process.returncode}; last lines of {process.log_path}:\n{process.tail(20)}"
        return None

    def stop(self) -> None:
        """Stop compactor, consumer, arbiter, then broker (each waits for a clean exit); remove a temporary directory."""
        for process in (self.compactor, self.consumer, self.arbiter):
            if process is not None:
                process.terminate(timeout=10.0)
        if self.broker is not None:
            self.broker.stop()
        if self._temporary:
            shutil.rmtree(self.directory, ignore_errors=True)

    def exports(self) -> list[str]:
        """The ``export ORDO_*=...`` lines a client shell needs."""
        assert self.settings is not None
        lines = [
            f"export ORDO_BOOTSTRAP_SERVERS={self.settings.bootstrap_servers}",
            f"export ORDO_TOPIC_PREFIX={self.settings.topic_prefix}",
            f"export ORDO_WAREHOUSE={self.settings.warehouse}",
            f"export ORDO_CATALOG={self.settings.catalog}",
            f"export ORDO_TRUSTED_KEYS={self.settings.trusted_keys}",
        ]
        return lines

    def __enter__(self) -> EmbeddedStack:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def run_up(
    *,
    directory: str | None,
    topic_prefix: str | None,
    kafka_servers: str | None,
    kafka: dict[str, str],
    broker_port: int | None,
    http_port: int,
    http_host: str,
    echo: Echo = print,
    compactor: bool = True,
    broker: str | None = None,
    log_format: str = "text",
    log_level: str | None = None,
) -> int:
    """Run the stack until SIGINT/SIGTERM; returns the exit code (1 when a part died).

    ``broker`` None: Apache Kafka, unless ``kafka_servers`` names an existing one."""
    from ordo.broker.kafka import KafkaSetupError
    from ordo.broker.tansu import MEMORY_WARNING

    if broker is not None and kafka_servers is not None:
        name = "Apache Kafka" if broker == "kafka" else "Tansu"
        echo(f"error: --broker {broker} starts a local {name}; --kafka uses an existing one: pass one of them")
        return 2
    broker = broker or "kafka"
    if broker == "kafka" and kafka_servers is None and directory is None:
        directory = str(default_kafka_data())

    stop = threading.Event()

    def _on_signal(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    stack = EmbeddedStack(
        directory,
        topic_prefix=topic_prefix,
        bootstrap_servers=kafka_servers,
        broker_port=broker_port,
        http_port=http_port,
        http_host=http_host,
        kafka=kafka,
        echo=echo,
        compactor=compactor,
        broker=broker,
        log_format=log_format,
        log_level=log_level,
    )
    if compactor and not java_available():
        echo("compactor off: Spark needs Java 17+ and none was found (install it, or pass --no-compactor)")
        stack.with_compactor = False
    if kafka_servers is None:
        # The children inherit this environment: Kafka security settings meant for a real cluster
        # would make them fail against the plain-text loopback broker.
        dropped = sorted(k for k in os.environ if k.startswith("ORDO_KAFKA_"))
        for key in dropped:
            del os.environ[key]
        if dropped:
            echo(f"ignoring {', '.join(dropped)}: they are for --kafka, not the embedded broker")
    try:
        if kafka_servers is not None:
            echo(f"starting ordo on Kafka {kafka_servers} ...")
        elif broker == "kafka":
            echo(f"starting the local stack on Apache Kafka in {stack.directory} ...")
        else:
            echo("starting the embedded stack on Tansu ...")
        try:
            stack.start()
        except KafkaSetupError as exc:
            echo(f"error: {exc}")
            echo("(`ordo up --broker tansu` needs neither Java nor Maven: an in-memory broker, for a first look)")
            return 1
        assert stack.settings is not None and stack.arbiter is not None and stack.consumer is not None
        if stack.in_memory:
            assert stack.broker is not None
            echo(f"broker    Tansu at {stack.settings.bootstrap_servers} (pid {stack.broker.pid})")
            echo(f"          WARNING: {MEMORY_WARNING}")
        elif stack.broker is not None:
            from ordo.broker.kafka import kafka_version

            echo(
                f"broker    Apache Kafka {kafka_version()} at {stack.settings.bootstrap_servers} "
                f"(pid {stack.broker.pid}; data kept in {stack.directory / 'kafka'})"
            )
        else:
            echo(f"broker    Kafka at {stack.settings.bootstrap_servers}")
        metrics = re.search(ARBITER_METRICS, stack.arbiter.log_text())
        where = f", metrics {metrics.group(1)}/metrics" if metrics else ""
        echo(f"arbiter   pid {stack.arbiter.pid}, prefix {stack.settings.topic_prefix!r}{where}")
        echo(f"consumer  pid {stack.consumer.pid}, HTTP {stack.url} (API docs {stack.url}/docs)")
        if stack.compactor is not None:
            echo(f"compactor pid {stack.compactor.pid}, Spark local[2], metrics {stack.compactor_metrics}")
        else:
            echo("compactor off (--no-compactor): nothing compacts tables on its own")
        kept = "removed when the stack stops" if stack._temporary else "kept"
        echo(f"data      {stack.directory} (catalog.db, warehouse/, logs/; {kept})")
        echo("")
        echo("# a client needs these settings (ORDO_CATALOG may also be " + f"{stack.url}):")
        for line in stack.exports():
            echo(line)
        echo("")
        echo("ordo is up; Ctrl-C stops it.")
        while not stop.is_set():
            problem = stack.dead()
            if problem is not None:
                echo(f"error: {problem}")
                return 1
            stop.wait(0.5)
        echo("stopping ...")
        return 0
    finally:
        try:
            stack.stop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if stop.is_set():
            echo("stopped")


__all__ = ["EmbeddedStack", "StackError", "check_broker", "run_up"]
