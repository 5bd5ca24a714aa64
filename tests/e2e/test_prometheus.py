"""A real Prometheus server scrapes a real arbiter, consumer, table service and change-topic publisher, and
evaluates ordo's alert rules.

The processes are ``ordo arbiter``, ``ordo consumer``, ``ordo compactor`` (Spark in local mode) and ``ordo
cdc`` on a real broker; Prometheus is Debian's package (``make prometheus``). What is checked: each process is a healthy
target and reports ``ordo_build_info``; ``/healthz`` and ``/readyz`` of each answer; every rule of
``deploy/prometheus/alerts.yml`` evaluates without error; a forged decision record makes
``OrdoUnsignedDecisionsRefused`` fire; stopping the arbiter makes ``OrdoArbiterDown`` pending; every query of
the Grafana dashboard evaluates on the real server.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from ordo.broker import free_port
from ordo.producer import CommitClient
from ordo.schemas import decisions_topic, encode
from ordo.schemas.signing import SIGNATURE_HEADER, Signer
from ordo.services.stack import ARBITER_METRICS, ProcessGroup, start_compactor, start_consumer
from ordo.settings import Settings
from tests.integration.test_arbiter_service import create_intent, insert_intent
from tests.integration.test_signed_decisions import produce_raw

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "ordo-dashboard.json"


def get(url: str, timeout: float = 10.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


class Prometheus:
    """The HTTP API of a running Prometheus server."""

    def __init__(self, url: str) -> None:
        self.url = url

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        status, body = get(f"{self.url}/api/v1/{path}{query}")
        assert status == 200, body
        data = json.loads(body)
        assert data["status"] == "success", data
        return data["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.api("query", query=expr)["result"])

    def alerts(self, name: str) -> list[dict[str, Any]]:
        return [a for a in self.api("alerts")["alerts"] if a["labels"]["alertname"] == name]


def start_prometheus(processes: ProcessGroup, tmp_path: Path, targets: dict[str, str]) -> Prometheus:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus not found: run `make prometheus` (installs Debian's prometheus package)")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [target]}]} for job, target in sorted(targets.items())
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    processes.start(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        name="prometheus",
    )
    server = Prometheus(f"http://127.0.0.1:{port}")
    wait_until(lambda: get(f"{server.url}/-/ready", 2)[0] == 200 if _listening(port) else False, 60, "Prometheus")
    return server


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON log lines of a process's output (other output, such as librdkafka's own lines, skipped)."""
    found = []
    for line in text.splitlines():
        if line.startswith("{"):
            found.append(json.loads(line))
    return found


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_prometheus_scrapes_every_process_and_evaluates_the_alert_rules(
    settings: Settings, processes: ProcessGroup, tmp_path: Path
) -> None:
    settings = settings.with_overrides(http_port=0, log_format="json")  # every process logs JSON lines
    arbiter = processes.start_arbiter(settings, args=["--log-level", "debug"])
    arbiter_url = arbiter.wait_for_line(ARBITER_METRICS, timeout=10).group(1)
    _consumer, consumer_url = start_consumer(settings, group=processes)
    assert consumer_url is not None
    compactor, compactor_url = start_compactor(settings, args=["--master", "local[1]", "--interval", "1"])
    processes.add(compactor)
    compactor_url = compactor_url.removesuffix("/metrics")
    cdc = processes.start_ordo(settings, "cdc", "--metrics-port", "0", name="cdc")
    cdc_url = cdc.wait_for_line(r"cdc metrics at ([^\s\"]+)/metrics", timeout=60).group(1)
    hosts = {
        "ordo-arbiter": arbiter_url,
        "ordo-consumer": consumer_url,
        "ordo-compactor": compactor_url,
        "ordo-cdc": cdc_url,
    }
    table = "watched"
    with CommitClient(settings=settings) as client:
        assert client.commit(create_intent(table), timeout=30).accepted
        assert client.commit(insert_intent(table, "w1", "a", read_version=0), timeout=30).accepted

    prometheus = start_prometheus(processes, tmp_path, {job: url.split("//", 1)[1] for job, url in hosts.items()})

    # 1. Every process is a healthy target, reports its build, and answers /healthz and /readyz.
    def all_up() -> bool:
        active = prometheus.api("targets")["activeTargets"]
        return len(active) == 4 and all(t["health"] == "up" for t in active)

    wait_until(all_up, 60, "four healthy targets")
    builds = wait_until(lambda: len(prometheus.query("ordo_build_info")) == 4, 30, "ordo_build_info of each")
    builds = prometheus.query("ordo_build_info")
    assert {b["metric"]["process"] for b in builds} == {"arbiter", "consumer", "compactor", "cdc"}
    assert {b["metric"]["job"] for b in builds} == set(hosts)
    compactor.wait_for_line("compactor ready", timeout=120)
    for job, url in hosts.items():
        assert get(f"{url}/healthz")[0] == 200, job
        wait_until(lambda url=url: get(f"{url}/readyz")[0] == 200, 60, f"{job} ready")
    decided = wait_until(
        lambda: prometheus.query(f'sum(ordo_arbiter_decisions_total{{table="{table}"}})'), 30, "decisions counted"
    )
    assert float(decided[0]["value"][1]) == 2.0
    # The change-topic publisher follows the table, whose commits name files that were never written (the intents
    # above): it holds the table back, says why in one JSON line, and OrdoCdcTableHeld is pending.
    held = wait_until(lambda: prometheus.query(f'ordo_cdc_tables_held{{table="{table}"}} == 1'), 60, "held")
    assert held[0]["metric"]["job"] == "ordo-cdc"
    pending = wait_until(lambda: prometheus.alerts("OrdoCdcTableHeld"), 30, "OrdoCdcTableHeld pending")
    assert pending[0]["labels"]["table"] == table and pending[0]["state"] == "pending"
    logged = json_lines(cdc.log_text())
    assert any(e["message"] == "cdc ready" for e in logged), cdc.tail()
    assert any(e["level"] == "error" and e["message"].startswith(f"{table}: cannot publish") for e in logged)

    # 2. Every rule evaluates without error.
    def evaluated() -> list[dict[str, Any]]:
        rules = [rule for group in prometheus.api("rules")["groups"] for rule in group["rules"]]
        return rules if rules and all(r.get("lastEvaluation", "").startswith("20") for r in rules) else []

    rules = wait_until(evaluated, 30, "the rules evaluated")
    assert {r["name"] for r in rules} >= {"OrdoArbiterDown", "OrdoUnsignedDecisionsRefused", "OrdoTableStopped"}
    assert {r["name"] for r in rules} >= {"OrdoCdcDown", "OrdoCdcTableHeld", "OrdoCdcStuck"}
    assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    assert prometheus.alerts("OrdoUnsignedDecisionsRefused") == [] and prometheus.alerts("OrdoArbiterDown") == []

    # 3. A record signed by a key nobody trusts, on the table's decisions topic: refused, and the alert fires.
    forged = encode(create_intent(table).model_copy(update={"txn_id": "mallory"}))
    produce_raw(
        settings,
        decisions_topic(settings.topic_prefix, table),
        forged,
        [(SIGNATURE_HEADER, Signer.generate().header(table, forged))],
    )
    with CommitClient(settings=settings) as client:  # a signed decision after it: the forgery cannot be vouched for
        assert client.commit(insert_intent(table, "w2", "a", read_version=1), timeout=30).accepted

    def refused_alert() -> list[dict[str, Any]]:
        return [a for a in prometheus.alerts("OrdoUnsignedDecisionsRefused") if a["state"] == "firing"]

    firing = wait_until(refused_alert, 60, "OrdoUnsignedDecisionsRefused firing")
    assert firing[0]["labels"]["job"] == "ordo-consumer"
    # ... and the consumer logged the problem as one JSON line naming the table and the offset.
    refusals = [e for e in json_lines(_consumer.log_text()) if e.get("event") == "refused"]
    assert refusals and refusals[0]["table"] == table and isinstance(refusals[0]["offset"], int), refusals
    assert refusals[0]["level"] == "error" and f"offset {refusals[0]['offset']} refused" in refusals[0]["message"]
    # The arbiter at debug: one line per committed batch, with the intent offsets it decided per table.
    batches = [e for e in json_lines(arbiter.log_text()) if e.get("event") == "batch"]
    assert batches and all(e["level"] == "debug" for e in batches)
    decided = sorted(o for e in batches for span in [e["tables"].get(table)] if span for o in span.values())
    assert decided[0] == 0 and decided[-1] == 2 and sum(e["decisions"] for e in batches) == 3

    # 4. The arbiter stops: its target goes down and OrdoArbiterDown becomes pending (it fires after 1 minute).
    assert arbiter.terminate(timeout=30) == 0
    pending = wait_until(lambda: prometheus.alerts("OrdoArbiterDown"), 60, "OrdoArbiterDown")
    assert pending[0]["state"] in ("pending", "firing") and pending[0]["labels"]["job"] == "ordo-arbiter"

    # 5. Every query of the Grafana dashboard evaluates on the real server.
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            prometheus.api("query", query=target["expr"])
