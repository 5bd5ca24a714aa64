"""``--log-format json``: every line an ordo process writes is one JSON object, whoever wrote it.

Real ``ordo`` processes (``python -m ordo``), their stdout and stderr read
whole: the start-up broker check and a command whose Kafka client has no
``logger=`` (librdkafka's own ``%3|...|FAIL|`` lines), and ``ordo cdc`` on a
real broker (its ready line). ``ordo up`` with its children and the Spark JVM
is in ``test_cli_up.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ordo.broker import free_port
from ordo.services.stack import ProcessGroup
from ordo.settings import Settings

pytestmark = pytest.mark.timeout(180)


def records(text: str) -> list[dict[str, Any]]:
    """Every line of ``text`` as a JSON object (an assertion names the first line that is not one)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            entry = json.loads(line)
        except ValueError:
            raise AssertionError(f"line {number} is not JSON: {line!r}\n{text[-3000:]}") from None
        assert isinstance(entry, dict) and {"ts", "level", "logger", "message"} <= set(entry), line
        found.append(entry)
    return found


def run_ordo(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m ordo <args>`` with only the given ``ORDO_*`` variables; its output read whole."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ORDO_")}
    return subprocess.run(
        [sys.executable, "-m", "ordo", *args],
        capture_output=True,
        text=True,
        env={**clean, "PYTHONUNBUFFERED": "1", **env},
        timeout=120,
    )


def test_librdkafka_lines_of_a_client_without_logger_are_json(tmp_path: Path) -> None:
    """``ordo tables --check`` makes its admin client without ``logger=``: librdkafka prints ``%3|...|FAIL|...``
    for each refused connection. They are records of ``ordo.kafka`` at librdkafka's level, then the error."""
    done = run_ordo("tables", "--check", "--log-format", "json", ORDO_BOOTSTRAP_SERVERS=f"127.0.0.1:{free_port()}")
    assert done.returncode == 1 and done.stdout == "", done.stdout
    logged = records(done.stderr)
    kafka = [e for e in logged if e["logger"] == "ordo.kafka"]
    assert kafka and all(e["facility"] == "FAIL" and e["level"] == "error" for e in kafka), logged[:3]
    assert "Connection refused" in kafka[0]["message"] and kafka[0]["client"].startswith("ordo.check")
    # the error is ordo's last record; librdkafka's thread may still log a refused connection after it
    final = [e for e in logged if e["logger"] == "ordo"][-1]
    assert final["level"] == "error" and final["message"].startswith("error: cannot list the cluster's brokers")


@pytest.mark.parametrize("command", [["consumer", "--no-http"], ["cdc", "--no-metrics"]])
def test_the_start_up_broker_check_writes_json_only(tmp_path: Path, command: list[str]) -> None:
    """No raw librdkafka line while the broker does not answer, and the refusal is one JSON record."""
    servers = f"127.0.0.1:{free_port()}"
    done = run_ordo(
        *command,
        "--broker-timeout",
        "3",
        "--log-format",
        "json",
        ORDO_BOOTSTRAP_SERVERS=servers,
        ORDO_CATALOG=str(tmp_path / "c.db"),
    )
    assert done.returncode == 1
    logged = records(done.stdout) + records(done.stderr)
    assert logged[-1]["level"] == "error" and f"no Kafka broker reachable at {servers}" in logged[-1]["message"]
    assert "Traceback" not in done.stderr


def test_cdc_logs_its_ready_line_in_json(settings: Settings, processes: ProcessGroup, tmp_path: Path) -> None:
    """``ordo cdc`` is a service: at info by default, ``cdc ready`` once caught up; its stdout line is JSON too."""
    from ordo.consumer.store import CatalogWriter

    catalog = tmp_path / "catalog.db"
    CatalogWriter(str(catalog), settings.topic_prefix).close()
    json_settings = settings.with_overrides(catalog=str(catalog), log_format="json")
    cdc = processes.start_ordo(json_settings, "cdc", "--metrics-port", "0", name="cdc")
    cdc.wait_for_line(r'"message":"cdc ready"', timeout=60)
    assert cdc.terminate(timeout=30) == 0
    logged = records(cdc.log_text())
    messages = [e["message"] for e in logged]
    assert f"ORDO_CHANGES_TOPIC={settings.changes_topic}" in messages
    assert any(m.startswith("cdc metrics at http://") for m in messages)
    assert any(m.startswith("cdc stopped") for m in messages)
