"""A Spark standalone cluster on one machine, and executors whose Python has ordo installed as a node would.

``SparkStandalone`` starts a master and workers as separate processes with
PySpark's own launcher (``spark-class org.apache.spark.deploy.master.Master``
and ``...deploy.worker.Worker``), bound to loopback, each worker small (cores
and memory given). Drivers connect in client mode (``ordo.spark.cluster_spark_session``).
The workers get the environment a node would (``node_environment``: the AWS
variables, no ``PYTHONPATH``, no ``ORDO_*``); their executors inherit it.

``executor_python`` makes the executors' Python the way production does with
"pip on every node": a virtual environment of its own holding ordo from the
built wheel (not the checkout) and ordo's dependencies, PySpark aside (the
executors' Python workers import Spark's own, ``pyspark.zip``). The
dependencies are installed once per machine into a cache directory the
environment links (a ``.pth`` file); ordo itself is installed fresh each time.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ordo.broker import free_port
from ordo.kernel.errors import OrdoError
from ordo.services.stack import ManagedProcess, ProcessError, start_process

log = logging.getLogger(__name__)

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
MASTER_READY = r"I have been elected leader|Starting Spark master at"
WORKER_READY = r"Successfully registered with master"
DEFAULT_TIMEOUT = 180.0
DAEMON_MEMORY = "256m"  # the master's and each worker's own JVM (executors get the worker's memory)


class ClusterError(OrdoError, RuntimeError):
    """Raised when the Spark cluster or the executors' Python cannot be set up (the message says what failed)."""


def spark_home() -> Path:
    """PySpark's installation: Spark's jars, ``bin/spark-class`` and ``python/lib/pyspark.zip``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def node_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a cluster node's processes: this one's without ``PYTHONPATH`` and ``ORDO_*`` (a node has
    no checkout and no ordo settings of the driver's), bound to loopback, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith(("ORDO_", "PYSPARK_"))}
    env |= {"SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": DAEMON_MEMORY}
    env |= dict(extra or {})
    return env


@dataclass
class SparkStandalone:
    """A master and ``workers`` workers (``cores`` cores, ``memory`` each), as separate processes on loopback."""

    work_dir: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT
    master: ManagedProcess | None = None
    nodes: list[ManagedProcess] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        """``spark://127.0.0.1:<port>``: the master drivers connect to."""
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, main: str, name: str, *args: str) -> ManagedProcess:
        command = [str(spark_home() / "bin" / "spark-class"), main, *args]
        env = node_environment(self.env)
        return start_process(command, env, name=name, log_dir=self.work_dir / "logs", inherit_env=False)

    def start(self) -> SparkStandalone:
        """Start the master, then the workers; returns once every worker has registered."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        try:
            self.master = self._start(
                MASTER_CLASS, "spark-master", "--host", "127.0.0.1", "--port", str(self.port),
                "--webui-port", str(free_port()),
            )  # fmt: skip
            self.master.wait_for_line(MASTER_READY, timeout=self.timeout)
            for index in range(self.workers):
                self.start_worker(index)
        except BaseException:
            self.stop()
            raise
        log.info("Spark standalone cluster at %s: %d worker(s)", self.url, self.workers)
        return self

    def start_worker(self, index: int) -> ManagedProcess:
        """Start worker ``index`` (again, after a kill) and wait until it registered with the master."""
        directory = self.work_dir / f"worker-{index}"
        directory.mkdir(parents=True, exist_ok=True)
        worker = self._start(
            WORKER_CLASS, f"spark-worker-{index}", "--host", "127.0.0.1", "--cores", str(self.cores),
            "--memory", self.memory, "--webui-port", str(free_port()), "--work-dir", str(directory), self.url,
        )  # fmt: skip
        if index < len(self.nodes):
            self.nodes[index] = worker
        else:
            self.nodes.append(worker)
        worker.wait_for_line(WORKER_READY, timeout=self.timeout)
        return worker

    def executor_pids(self) -> list[int]:
        """Process ids of the executors running now (``CoarseGrainedExecutorBackend`` JVMs of this cluster)."""
        found = []
        for pid in _children_of({w.pid for w in self.nodes if w.running}):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "CoarseGrainedExecutorBackend" in command:
                found.append(pid)
        return sorted(found)

    def stop(self) -> None:
        """Stop the workers (their executors end with them), then the master."""
        for worker in reversed(self.nodes):
            worker.terminate(timeout=15.0)
        for pid in self.executor_pids():  # an executor the worker could not end
            _kill(pid)
        if self.master is not None:
            self.master.terminate(timeout=15.0)

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _children_of(parents: set[int]) -> list[int]:
    """Every descendant of ``parents`` (from /proc)."""
    by_parent: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        by_parent.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(parents)
    while todo:
        for child in by_parent.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def driver_config(
    classpath_settings: Mapping[str, str],
    hadoop: Mapping[str, str] | None = None,
    *,
    executor_memory: str = "768m",
    cores_max: int = 1,
) -> dict[str, str]:
    """Spark settings of a driver on a ``SparkStandalone``: S3A's classpath, ``hadoop`` (``fs.s3a.*``), one core per
    executor and at most ``cores_max`` per application (several drivers share the cluster), a loopback driver."""
    return {
        **classpath_settings,
        **{f"spark.hadoop.{k}": v for k, v in (hadoop or {}).items()},
        "spark.executor.memory": executor_memory,
        "spark.executor.cores": "1",
        "spark.cores.max": str(cores_max),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": "1g",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "4",
        "spark.sql.session.timeZone": "UTC",
        "spark.task.maxFailures": "4",
    }


def write_spark_defaults(directory: Path, config: Mapping[str, str]) -> Path:
    """``directory/spark-defaults.conf`` holding ``config``: what ``SPARK_CONF_DIR=directory`` gives every driver."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in config.items()))
    return directory


# --------------------------------------------------------------------------- the executors' Python


def build_wheel(source: Path, out_dir: Path) -> Path:
    """Build ordo's wheel from ``source`` (a checkout) into ``out_dir``; its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check", "-w", str(out_dir),
         str(source)],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    wheels = sorted(out_dir.glob("ordo-*.whl"))
    if done.returncode != 0 or not wheels:
        raise ClusterError(f"building ordo's wheel from {source} failed: {(done.stdout + done.stderr)[-2000:]}")
    return wheels[-1]


def wheel_requirements(wheel: Path) -> list[str]:
    """The wheel's ``Requires-Dist`` entries without extras markers (what ``pip install ordo`` installs)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    return [
        line.split(":", 1)[1].strip()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]


def executor_python(wheel: Path, directory: Path, cache: Path) -> Path:
    """A virtual environment in ``directory`` with ordo from ``wheel`` and its dependencies; its ``python``.

    PySpark is left out (Spark's workers put their own on the Python workers'
    path); the other dependencies are installed once into ``cache`` (keyed by
    the requirement list and this Python) and linked into the environment.
    """
    wanted = sorted(r for r in wheel_requirements(wheel) if not re.match(r"pyspark\b", r))
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    key = hashlib.sha256("\n".join([version, *wanted]).encode()).hexdigest()[:16]
    deps = cache / f"executor-deps-{version}-{key}"
    if not (deps / ".complete").is_file():
        staging = Path(tempfile.mkdtemp(prefix=f".{deps.name}.", dir=cache))
        _pip("install", "-q", "--target", str(staging), *wanted)
        (staging / ".complete").write_text("\n".join(wanted) + "\n")
        try:
            staging.rename(deps)
        except OSError:
            if not (deps / ".complete").is_file():
                raise
    base = getattr(sys, "_base_executable", sys.executable)
    done = subprocess.run([base, "-m", "venv", "--without-pip", str(directory)], capture_output=True, text=True)
    if done.returncode != 0:
        raise ClusterError(f"python -m venv {directory} failed: {done.stderr[-2000:]}")
    site = directory / "lib" / f"python{version}" / "site-packages"
    (site / "ordo-executor-deps.pth").write_text(f"{deps}\n")
    _pip("install", "-q", "--no-deps", "--target", str(site), str(wheel))
    return directory / "bin" / "python"


def _pip(*args: str) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip
    if done.returncode != 0:
        raise ClusterError(f"pip {' '.join(args[:3])} ... failed: {(done.stdout + done.stderr)[-2000:]}")
    log.info("pip %s took %.1f s", args[0], time.monotonic() - started)


__all__ = [
    "ClusterError",
    "ProcessError",
    "SparkStandalone",
    "build_wheel",
    "driver_config",
    "executor_python",
    "node_environment",
    "spark_home",
    "wheel_requirements",
    "write_spark_defaults",
]
