"""``ordo up`` as a user runs it: a foreground process that prints its settings and stops cleanly on Ctrl-C.

Everything is real: the broker ``ordo up`` starts (a local Apache Kafka, its
default, or the embedded Tansu with ``--broker tansu``), ``ordo arbiter`` and
``ordo consumer`` child processes, a commit published with ``CommitClient``
using the printed settings, and the read commands (``ordo tables``, ``ordo
tail``) run as separate processes against the printed ``ORDO_CATALOG``. With
``--log-format json`` every line it and its children write (the compactor's
Spark JVM included) is one JSON object.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ordo.schemas import CommitIntent, Operation, TableMetadata
from ordo.settings import load_settings

pytestmark = pytest.mark.timeout(180)

START_TIMEOUT = 90.0


class Up:
    """A running ``ordo up`` with its output lines collected."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ordo", "up", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.lines: list[str] = []

    def wait_for(self, pattern: str, timeout: float = START_TIMEOUT) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise AssertionError(f"ordo up exited ({self.process.poll()}) before {pattern!r}:\n{self.output}")
            self.lines.append(line.rstrip("\n"))
            match = regex.search(line)
            if match:
                return match
        raise AssertionError(f"ordo up did not print {pattern!r} within {timeout} s:\n{self.output}")

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def exports(self) -> dict[str, str]:
        return dict(re.findall(r"^export (ORDO_\w+)=(\S+)$", self.output, re.M))

    def interrupt(self, timeout: float = 60.0) -> int:
        self.process.send_signal(signal.SIGINT)
        rest, _ = self.process.communicate(timeout=timeout)
        self.lines.extend(rest.splitlines())
        return self.process.returncode

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=10)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORDO_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["COLUMNS"] = "200"
    env.update(extra)
    return env


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Any]:
    started: list[Up] = []

    def start(*args: str, **env: str) -> Up:
        # without --data, Kafka's stack would live in ~/.local/share/ordo/up-kafka: this test's own instead
        handle = Up(list(args), clean_env(XDG_DATA_HOME=str(tmp_path / "xdg"), **env))
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.kill()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_up_serves_a_client_and_stops_on_ctrl_c(up: Any, tmp_path: Path, broker_kind: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    if broker_kind == "tansu":
        # a stale catalog of an earlier run (its log died with the in-memory broker) is discarded
        (data / "catalog.db").write_bytes(b"stale")
    chosen = ["--broker", "tansu"] if broker_kind == "tansu" else []  # Apache Kafka is the default
    stack = up(*chosen, "--dir", str(data), "--http-port", "0", ORDO_BOOTSTRAP_SERVERS="127.0.0.1:1")
    stack.wait_for(r"^ordo is up")
    if broker_kind == "tansu":
        assert "discarded the catalog of an earlier run" in stack.output
        assert "in memory only" in stack.output.lower() or "memory only" in stack.output
    else:
        assert re.search(
            r"^broker    Apache Kafka 4\.\d+\.\d+ at 127\.0\.0\.1:\d+ \(pid \d+; data kept in ", stack.output, re.M
        )
        assert "memory only" not in stack.output
    exports = stack.exports()
    assert set(exports) == {
        "ORDO_BOOTSTRAP_SERVERS",
        "ORDO_TOPIC_PREFIX",
        "ORDO_WAREHOUSE",
        "ORDO_CATALOG",
        "ORDO_TRUSTED_KEYS",  # the stack's own signing key, made by `ordo up`
    }
    assert Path(exports["ORDO_TRUSTED_KEYS"]).is_file()
    assert exports["ORDO_BOOTSTRAP_SERVERS"] != "127.0.0.1:1", "ordo up must start its own broker"
    assert exports["ORDO_CATALOG"] == str(data / "catalog.db")
    # each service once (a log line, e.g. the broker's ready line, may name a pid again)
    pids = list(dict.fromkeys(int(p) for p in re.findall(r"pid (\d+)", stack.output)))
    assert len(pids) == 4, stack.output  # broker, arbiter, consumer, compactor (the table service)
    url = re.search(r"HTTP (http://\S+)", stack.output).group(1)  # type: ignore[union-attr]
    with urllib.request.urlopen(f"{url}/readyz", timeout=10) as response:
        assert response.status == 200
    metrics = re.search(r"compactor pid \d+, .* metrics (http://\S+)", stack.output).group(1)  # type: ignore[union-attr]
    with urllib.request.urlopen(metrics, timeout=10) as response:
        assert b"ordo_compactor_commits" in response.read()

    # a client with exactly the printed settings commits, and the catalog shows it
    from ordo.consumer import Catalog
    from ordo.producer import CommitClient

    metadata = TableMetadata(
        location=str(Path(exports["ORDO_WAREHOUSE"]) / "t"), schema="id BIGINT", primary_key=("id",)
    )
    with CommitClient(settings=load_settings(exports)) as client:
        decision = client.commit(
            CommitIntent(txn_id="c1", table="t", operation=Operation.CREATE_TABLE, read_version=0, metadata=metadata)
        )
    assert decision.accepted
    Catalog(exports["ORDO_CATALOG"]).wait_for_version("t", 0, timeout=30)
    Catalog(url).wait_for_version("t", 0, timeout=30)

    env = clean_env(**exports)
    tables = subprocess.run(
        [sys.executable, "-m", "ordo", "tables"], capture_output=True, text=True, env=env, timeout=60
    )
    assert tables.returncode == 0 and "│ t " in tables.stdout, tables.stdout + tables.stderr

    # ordo tail follows until Ctrl-C, then exits cleanly
    tail = subprocess.Popen(
        [sys.executable, "-m", "ordo", "tail", "t", "--from", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert tail.stdout is not None
        first = ""
        deadline = time.monotonic() + 60
        while not first.startswith("v0") and time.monotonic() < deadline:
            first = tail.stdout.readline()
        assert first.startswith("v0 ") and "CREATE_TABLE" in first
        tail.send_signal(signal.SIGINT)
        out, err = tail.communicate(timeout=30)
        assert tail.returncode == 0, err
        assert "Traceback" not in out + err and "stopped" in out
    finally:
        if tail.poll() is None:
            tail.kill()

    assert stack.interrupt() == 0, stack.output
    assert "Traceback" not in stack.output and stack.output.rstrip().endswith("stopped")
    deadline = time.monotonic() + 15
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(p) for p in pids), "a child of ordo up outlived it"
    assert (data / "logs").is_dir(), "--dir is kept"


def _commit_create(exports: dict[str, str], table: str) -> None:
    from ordo.producer import CommitClient

    metadata = TableMetadata(
        location=str(Path(exports["ORDO_WAREHOUSE"]) / table), schema="id BIGINT", primary_key=("id",)
    )
    intent = CommitIntent(
        txn_id=f"create-{table}", table=table, operation=Operation.CREATE_TABLE, read_version=0, metadata=metadata
    )
    with CommitClient(settings=load_settings(exports)) as client:
        assert client.commit(intent, timeout=60).accepted


def test_up_on_kafka_keeps_tables_across_a_restart(up: Any, tmp_path: Path) -> None:
    """``ordo up --broker kafka --data DIR`` twice: the second stack has the first one's tables."""
    from ordo.consumer import Catalog

    data = tmp_path / "stack"
    first = up("--broker", "kafka", "--data", str(data), "--http-port", "0", "--no-compactor")
    first.wait_for(r"^ordo is up")
    exports = first.exports()
    _commit_create(exports, "kept")
    Catalog(exports["ORDO_CATALOG"]).wait_for_version("kept", 0, timeout=30)
    assert first.interrupt() == 0, first.output
    assert (data / "kafka" / "node-1" / "data" / "meta.properties").is_file()

    second = up("--broker", "kafka", "--data", str(data), "--http-port", "0", "--no-compactor")
    second.wait_for(r"^ordo is up")
    assert "discarded the catalog" not in second.output
    again = second.exports()
    assert again["ORDO_TRUSTED_KEYS"] == exports["ORDO_TRUSTED_KEYS"]  # the same signing key
    _commit_create(again, "added")
    catalog = Catalog(again["ORDO_CATALOG"])
    catalog.wait_for_version("added", 0, timeout=30)
    tables = subprocess.run(
        [sys.executable, "-m", "ordo", "tables"], capture_output=True, text=True, env=clean_env(**again), timeout=60
    )
    assert tables.returncode == 0, tables.stdout + tables.stderr
    assert "│ kept " in tables.stdout and "│ added " in tables.stdout, tables.stdout
    assert second.interrupt() == 0, second.output


def test_up_refuses_two_brokers(up: Any) -> None:
    stack = up("--broker", "kafka", "--kafka", "127.0.0.1:1")
    rest, _ = stack.process.communicate(timeout=60)
    assert stack.process.returncode == 2
    assert "--broker kafka starts a local Apache Kafka; --kafka uses an existing one" in rest


def test_up_refuses_a_busy_http_port(up: Any) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        stack = up("--http-port", str(port))
        rest, _ = stack.process.communicate(timeout=60)
    assert stack.process.returncode == 1
    lines = [line for line in rest.splitlines() if line.strip()]
    assert (
        lines[-1]
        == f"error: port {port} on 127.0.0.1 is in use (another `ordo up`?): pass --http-port 0 for any free port"
    )


def json_records(text: str, where: str) -> list[dict[str, Any]]:
    """Every line of ``text`` as a JSON object with the log fields (the assertion names the first that is not)."""
    found = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            raise AssertionError(f"{where}: not a JSON line: {line!r}") from None
        assert isinstance(entry, dict) and {"ts", "level", "logger", "message"} <= set(entry), (where, line)
        found.append(entry)
    return found


def test_up_log_format_json_is_json_everywhere(up: Any, tmp_path: Path, broker_kind: str) -> None:
    """``ordo up --log-format json``: its own lines, its children's logs and the compactor's JVM are JSON lines."""
    data = tmp_path / "data"
    stack = up("--broker", broker_kind, "--dir", str(data), "--http-port", "0", "--log-format", "json")
    stack.wait_for(r'"message":"ordo is up')
    deadline = time.monotonic() + START_TIMEOUT
    while not any("compactor ready" in p.read_text() for p in (data / "logs").glob("compactor-*.log")):
        assert time.monotonic() < deadline, "the compactor's Spark did not start"
        time.sleep(0.5)
    assert stack.interrupt() == 0, stack.output
    own = json_records(stack.output, "ordo up")
    messages = [e["message"] for e in own]
    assert any(m.startswith("export ORDO_BOOTSTRAP_SERVERS=") for m in messages) and messages[-1] == "stopped"
    logs = {p.name.split("-", 1)[0]: json_records(p.read_text(), p.name) for p in (data / "logs").glob("*.log")}
    assert set(logs) == {"arbiter", "consumer", "compactor"}, sorted(logs)
    assert any(e["message"].startswith("arbiter ready") for e in logs["arbiter"])
    assert any(e["message"].startswith("ORDO_CATALOG_URL=http://") for e in logs["consumer"])
    jvm = [e for e in logs["compactor"] if e["logger"] == "ordo.jvm"]
    assert jvm, "the Spark JVM's lines (its banner, its log4j warnings) are records of ordo.jvm"
    assert any("log4j" in e["message"] or "Spark" in e["message"] for e in jvm), jvm
