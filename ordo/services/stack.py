"""Process helpers: run ordo components as subprocesses and supervise them.

Used by the tests, ``ordo up``, the demo and the chaos tests. Every process is
``[sys.executable, "-m", "ordo", ...]`` with its settings passed as ``ORDO_*``
environment variables, its output captured to a log file (the tail is shown
when something fails), and it is registered so that whatever is still running
when the interpreter exits is killed.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ordo.kernel.errors import OrdoError
from ordo.kernel.freeze import freeze
from ordo.kernel.ready import ARBITER_READY, CONSUMER_READY
from ordo.kernel.settings import DEFAULT_ARBITER_METRICS_PORT, Settings

_LIVE: set[ManagedProcess] = set()
_LIVE_LOCK = threading.Lock()


class ProcessError(OrdoError, RuntimeError):
    """Raised when a managed process exits early or does not reach a state in time (message has its log tail)."""


def settings_env(settings: Settings) -> dict[str, str]:
    """The ``ORDO_*`` environment variables that reproduce ``settings`` in a child process."""
    env = {
        "ORDO_TOPIC_PREFIX": settings.topic_prefix,
        "ORDO_WAREHOUSE": settings.warehouse,
        "ORDO_CATALOG": settings.catalog,
        "ORDO_HTTP_HOST": settings.http_host,
        "ORDO_HTTP_PORT": str(settings.http_port),
        "ORDO_STATE_DIR": settings.state_dir,
        "ORDO_ARBITER_KEY": settings.arbiter_key,
        "ORDO_TRUSTED_KEYS": settings.trusted_keys,
        "ORDO_REQUIRE_SIGNATURES": "true" if settings.require_signatures else "false",
        "ORDO_RESUBMIT_AFTER": str(settings.resubmit_after),
        "ORDO_BROKER_KIND": settings.broker_kind,
        "ORDO_ARBITER_METRICS_PORT": "off"
        if settings.arbiter_metrics_port is None
        else str(settings.arbiter_metrics_port),
        "ORDO_ARBITER_METRICS_HOST": settings.arbiter_metrics_host,
        "ORDO_ARBITER_GROUP": settings.arbiter_group,
        "ORDO_CONSUMER_SHARD": settings.consumer_shard,
        "ORDO_LOG_FORMAT": settings.log_format,
        "ORDO_CLIENT_ID": settings.client_id,
        "ORDO_TOPIC_REPLICATION_FACTOR": str(settings.topic_replication_factor),
        "ORDO_TOPIC_MIN_INSYNC_REPLICAS": str(settings.topic_min_insync_replicas),
        "ORDO_ALLOW_LOSSY_LOGS": "true" if settings.allow_lossy_logs else "false",
        "ORDO_DECISIONS_TRANSACTIONS": "true" if settings.decisions_transactions else "false",
        "ORDO_CHANGES_FORMAT": settings.changes_format,
        "ORDO_CHANGES_TOMBSTONES": "true" if settings.changes_tombstones else "false",
    }
    for key, wait in (
        ("ORDO_FETCH_WAIT_BUSY_MS", settings.fetch_wait_busy_ms),
        ("ORDO_FETCH_WAIT_IDLE_MS", settings.fetch_wait_idle_ms),
        ("ORDO_CLIENT_FETCH_WAIT_MS", settings.client_fetch_wait_ms),
        ("ORDO_CONSUMER_FETCH_WAIT_MS", settings.consumer_fetch_wait_ms),
    ):
        if wait is not None:
            env[key] = str(wait)
    if settings.log_level:
        env["ORDO_LOG_LEVEL"] = settings.log_level
    if settings.bootstrap_servers:
        env["ORDO_BOOTSTRAP_SERVERS"] = settings.bootstrap_servers
    for key, value in settings.kafka.items():
        env["ORDO_KAFKA__" + key.replace(".", "_").upper()] = str(value)
    for key, value in settings.topic_config.items():
        env["ORDO_TOPIC__" + key.replace(".", "_").upper()] = str(value)
    return env


class ManagedProcess:
    """A child process with its output in a log file.

    ``kill()`` is SIGKILL (a crash), ``terminate()`` a clean stop (SIGTERM,
    then SIGKILL after a grace period).
    """

    def __init__(self, name: str, args: Sequence[str], popen: subprocess.Popen[bytes], log_path: Path) -> None:
        self.name = name
        self.args = list(args)
        self.popen = popen
        self.log_path = log_path

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit code, or None while it runs."""
        return self.popen.poll()

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self.popen.poll() is None

    def log_text(self) -> str:
        """Everything the process wrote so far (stdout and stderr interleaved)."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the log."""
        return "\n".join(self.log_text().splitlines()[-lines:])

    def _describe(self, what: str) -> str:
        return f"{self.name} (pid {self.pid}) {what}; log {self.log_path}, last lines:\n{self.tail()}"

    def wait(self, timeout: float | None = None) -> int:
        """Wait for exit and return the exit code; ``ProcessError`` (with the log tail) on timeout."""
        try:
            code = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ProcessError(self._describe(f"still running after {timeout} s")) from None
        _unregister(self)
        return code

    def wait_for_line(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        """Wait until a log line matches the regex ``pattern``; ``ProcessError`` if it exits or times out first."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        position = 0
        while True:
            text = self.log_text()
            end = text.rfind("\n") + 1  # only complete lines
            for line in text[position:end].splitlines():
                match = regex.search(line)
                if match:
                    return match
            position = max(position, end)
            if not self.running:
                raise ProcessError(self._describe(f"exited with code {self.returncode} before logging {pattern!r}"))
            if time.monotonic() > deadline:
                raise ProcessError(self._describe(f"did not log {pattern!r} within {timeout} s"))
            time.sleep(0.05)

    def kill(self) -> int:
        """SIGKILL, as a crash would; returns the exit code."""
        if self.running:
            self.popen.kill()
        code = self.popen.wait()
        _unregister(self)
        return code

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM and wait up to ``timeout`` for a clean exit, then SIGKILL; returns the exit code."""
        if self.running:
            try:
                self.popen.send_signal(signal.SIGCONT)  # a paused process cannot act on SIGTERM
                self.popen.terminate()
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
        code = self.popen.wait()
        _unregister(self)
        return code

    def pause(self) -> None:
        """SIGSTOP (freeze without dying), for chaos tests; returns once every thread of it is stopped."""
        if self.popen.poll() is None:
            freeze(self.popen.pid)

    def resume(self) -> None:
        """SIGCONT."""
        self.popen.send_signal(signal.SIGCONT)

    def __repr__(self) -> str:
        return f"ManagedProcess({self.name!r}, pid={self.pid}, returncode={self.returncode})"


def _unregister(process: ManagedProcess) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(process)


@atexit.register
def kill_all() -> None:
    """Kill every managed process still running (called at interpreter exit and by test teardown)."""
    with _LIVE_LOCK:
        processes = list(_LIVE)
    for process in processes:
        process.kill()


def start_process(
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    name: str | None = None,
    log_dir: str | os.PathLike[str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    inherit_env: bool = True,
) -> ManagedProcess:
    """Start ``args`` with ``env`` added to this process's environment (to nothing but ``env`` without
    ``inherit_env``); output goes to a log file."""
    name = name or Path(args[0]).name
    directory = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="ordo-logs-"))
    directory.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    log_path = directory / f"{safe}-{time.time_ns()}.log"
    full_env = dict(os.environ) if inherit_env else {}
    full_env["PYTHONUNBUFFERED"] = "1"
    if env:
        full_env.update(env)
    with log_path.open("wb") as log_file:
        popen = subprocess.Popen(
            list(args), stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, env=full_env, cwd=cwd
        )
    process = ManagedProcess(name, args, popen, log_path)
    with _LIVE_LOCK:
        _LIVE.add(process)
    return process


def ordo_args(*args: str) -> list[str]:
    """The command line of ``ordo <args>`` run by this interpreter."""
    return [sys.executable, "-m", "ordo", *args]


def start_ordo(
    settings: Settings,
    *args: str,
    name: str | None = None,
    log_dir: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> ManagedProcess:
    """Start ``ordo <args>`` with ``settings`` passed as ``ORDO_*`` variables."""
    child_env = settings_env(settings)
    if env:
        child_env.update(env)
    return start_process(
        ordo_args(*args), child_env, name=name or f"ordo-{args[0] if args else 'main'}", log_dir=log_dir
    )


class ProcessGroup:
    """Processes started together and stopped together (a test, ``ordo up``); a context manager.

    ``stop()`` terminates everything still running in reverse start order;
    ``kill()`` SIGKILLs it. Either is safe to call twice.
    """

    def __init__(self, log_dir: str | os.PathLike[str] | None = None) -> None:
        self.log_dir = log_dir
        self.processes: list[ManagedProcess] = []

    def add(self, process: ManagedProcess) -> ManagedProcess:
        """Track a process started elsewhere."""
        self.processes.append(process)
        return process

    def start(
        self, args: Sequence[str], env: Mapping[str, str] | None = None, *, name: str | None = None
    ) -> ManagedProcess:
        """``start_process`` into this group."""
        return self.add(start_process(args, env, name=name, log_dir=self.log_dir))

    def start_ordo(self, settings: Settings, *args: str, name: str | None = None) -> ManagedProcess:
        """``start_ordo`` into this group."""
        return self.add(start_ordo(settings, *args, name=name, log_dir=self.log_dir))

    def start_arbiter(
        self,
        settings: Settings,
        shard: tuple[int, int] | None = None,
        *,
        wait_ready: bool = True,
        timeout: float = 30.0,
        args: Sequence[str] = (),
    ) -> ManagedProcess:
        """``start_arbiter`` into this group."""
        process = start_arbiter(settings, shard, wait_ready=False, log_dir=self.log_dir, args=args)
        self.add(process)
        if wait_ready:
            wait_arbiter_ready(process, timeout)
        return process

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate every process still running, newest first."""
        for process in reversed(self.processes):
            process.terminate(timeout)

    def kill(self) -> None:
        """SIGKILL every process still running."""
        for process in reversed(self.processes):
            process.kill()

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


ARBITER_METRICS = r"arbiter metrics at ([^\s\"]+)/metrics"


def owned_tables(process: ManagedProcess) -> set[str]:
    """The tables a fleet arbiter owned when it stopped (or now), from its log: taken once ``rebuilt``, given up
    when ``dropped``."""
    tables: set[str] = set()
    for line in process.log_text().splitlines():
        taken = re.search(r"table (\w+): rebuilt", line)
        if taken:
            tables.add(taken.group(1))
        dropped = re.search(r"table (\w+) dropped", line)
        if dropped:
            tables.discard(dropped.group(1))
    return tables


def wait_arbiter_ready(process: ManagedProcess, timeout: float = 30.0) -> None:
    """Wait until an arbiter logged that it is ready (fenced older arbiters, rebuilt its tables)."""
    process.wait_for_line(ARBITER_READY, timeout=timeout)


def start_arbiter(
    settings: Settings,
    shard: tuple[int, int] | None = None,
    *,
    wait_ready: bool = True,
    timeout: float = 30.0,
    log_dir: str | os.PathLike[str] | None = None,
    args: Sequence[str] = (),
) -> ManagedProcess:
    """Start ``ordo arbiter [args]`` for ``settings``; with ``wait_ready`` return once it logged that it is ready.

    Its ``/metrics`` port is a free one unless ``settings`` or ``args`` name one (``ARBITER_METRICS`` finds it).
    """
    args = ["arbiter", *args]
    if settings.arbiter_metrics_port == DEFAULT_ARBITER_METRICS_PORT and "--metrics-port" not in args:
        args += ["--metrics-port", "0"]  # several arbiters on one host: each on a free port (it logs which)
    if shard is not None:
        args += ["--shard", f"{shard[0]}/{shard[1]}"]
    process = start_ordo(settings, *args, name=f"arbiter-{settings.topic_prefix}", log_dir=log_dir)
    if wait_ready:
        try:
            wait_arbiter_ready(process, timeout)
        except ProcessError:
            process.kill()
            raise
    return process


CONSUMER_URL = r"ORDO_CATALOG_URL=([^\s\"]+)"  # a plain line, or the message of a JSON one


def start_consumer(
    settings: Settings,
    *,
    http: bool = True,
    wait_ready: bool = True,
    timeout: float = 60.0,
    log_dir: str | os.PathLike[str] | None = None,
    group: ProcessGroup | None = None,
) -> tuple[ManagedProcess, str | None]:
    """Start ``ordo consumer`` for ``settings``; returns the process and its HTTP URL (None without HTTP).

    The catalog is ``settings.catalog``; with ``http`` the service listens on
    ``settings.http_host:settings.http_port`` (port 0 = any free port; the URL
    is read from the consumer's output). With ``wait_ready`` it returns once
    the consumer caught up with every decisions log that existed at its start.
    """
    args = ["consumer", "--catalog", str(Path(settings.catalog).absolute())]
    if not http:
        args.append("--no-http")
    name = f"consumer-{settings.topic_prefix}"
    if group is not None:
        process = group.add(start_ordo(settings, *args, name=name, log_dir=log_dir or group.log_dir))
    else:
        process = start_ordo(settings, *args, name=name, log_dir=log_dir)
    try:
        url = process.wait_for_line(CONSUMER_URL, timeout=timeout).group(1) if http else None
        if wait_ready:
            process.wait_for_line(CONSUMER_READY, timeout=timeout)
    except ProcessError:
        process.kill()
        raise
    return process, url


COMPACTOR_METRICS = r"compactor metrics at ([^\s\"]+)"


def start_compactor(
    settings: Settings,
    *,
    timeout: float = 60.0,
    log_dir: str | os.PathLike[str] | None = None,
    args: Sequence[str] = (),
) -> tuple[ManagedProcess, str]:
    """Start ``ordo compactor --metrics-port 0 [args]``; returns the process and its metrics URL.

    Returns once the metrics server listens (before Spark has started: the
    service logs ``compactor ready`` when its session is up).
    """
    process = start_ordo(
        settings, "compactor", "--metrics-port", "0", *args, name=f"compactor-{settings.topic_prefix}", log_dir=log_dir
    )
    try:
        url = process.wait_for_line(COMPACTOR_METRICS, timeout=timeout).group(1)
    except ProcessError:
        process.kill()
        raise
    return process, url


__all__ = [
    "ARBITER_METRICS",
    "ARBITER_READY",
    "COMPACTOR_METRICS",
    "CONSUMER_READY",
    "ManagedProcess",
    "ProcessError",
    "ProcessGroup",
    "kill_all",
    "ordo_args",
    "settings_env",
    "start_arbiter",
    "start_compactor",
    "start_consumer",
    "start_ordo",
    "start_process",
    "wait_arbiter_ready",
]
