"""The monitoring ordo ships: alert rules (checked and unit-tested by ``promtool``), the Grafana dashboard, and the
metric families each process exports (counters are counters, no pre-computed rates).

``promtool`` comes with Debian's ``prometheus`` package, which ``make prometheus`` installs (``make test`` runs it).
The metric families are read from each process's own exposition: the arbiter's and the compactor's registries and
the consumer's ``/metrics`` renderer over a real (empty) catalog.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ordo.arbiter.metrics import ArbiterMetrics
from ordo.arbiter.prom import ArbiterPrometheus
from ordo.consumer.catalog import Catalog
from ordo.consumer.changetopic import PublisherStatus, publisher_registry
from ordo.consumer.http import render_metrics
from ordo.consumer.materializer import ConsumerStatus
from ordo.consumer.store import CatalogWriter
from ordo.services.compactor import Metrics as CompactorMetrics

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERT_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
SCRAPE_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "ordo-dashboard.json"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}
METRIC = re.compile(r"\b(ordo_[a-z_]+|up)\b(?!\s*\()")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool not found: run `make prometheus` (installs Debian's prometheus package)")
    return found


def expositions(tmp_path: Path) -> dict[str, str]:
    """Each process's ``/metrics`` text, by process."""
    CatalogWriter(str(tmp_path / "c.db"), "ordo").close()
    catalog = Catalog(str(tmp_path / "c.db"))
    try:
        consumer = render_metrics(catalog, ConsumerStatus()).decode()
    finally:
        catalog.close()
    return {
        "arbiter": generate_latest(ArbiterPrometheus(ArbiterMetrics(), set).registry).decode(),
        "consumer": consumer,
        "compactor": generate_latest(CompactorMetrics().registry).decode(),
        "cdc": generate_latest(publisher_registry(PublisherStatus())).decode(),
    }


def families(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """Every family exported: name -> (type, process)."""
    found: dict[str, tuple[str, str]] = {}
    for process, text in expositions(tmp_path).items():
        for family in text_string_to_metric_families(text):
            if family.name.endswith("_created"):
                continue
            found.setdefault(family.name, (family.type, process))
    return found


def exported(tmp_path: Path) -> set[str]:
    """Every series name a query may use."""
    names = {"up"}
    for name, (kind, _process) in families(tmp_path).items():
        names |= {name + suffix for suffix in SUFFIXES.get(kind, ("",))}
    return names


def expressions_of_rules() -> list[str]:
    rules = yaml.safe_load(ALERTS.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def test_alert_rules_are_valid() -> None:
    done = subprocess.run([promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_alert_rules_fire_on_their_series_and_stay_quiet_otherwise() -> None:
    """``promtool test rules``: arbiter down, intent lag growing, internal errors, unsigned records, stopped tables,
    the change-topic publisher down, holding a table back, or stuck behind the catalog."""
    done = subprocess.run(
        [promtool(), "test", "rules", ALERT_TESTS.name],
        cwd=ALERT_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tested = set(re.findall(r"alertname: (\w+)", ALERT_TESTS.read_text()))
    for must in ("OrdoArbiterDown", "OrdoIntentLagGrowing", "OrdoInternalErrors", "OrdoUnsignedDecisionsRefused"):
        assert must in tested
    assert "OrdoTableStopped" in tested
    assert {"OrdoCdcDown", "OrdoCdcTableHeld", "OrdoCdcStuck"} <= tested
    assert "OrdoCompactionBacklogGrowing" in tested


def test_the_example_scrape_config_is_valid_and_names_the_jobs_the_rules_use() -> None:
    done = subprocess.run(
        [promtool(), "check", "config", SCRAPE_CONFIG.name], cwd=SCRAPE_CONFIG.parent, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = {job["job_name"] for job in yaml.safe_load(SCRAPE_CONFIG.read_text())["scrape_configs"]}
    used = {job for expr in expressions_of_rules() for job in re.findall(r'job="([^"]+)"', expr)}
    assert used <= jobs == {"ordo-arbiter", "ordo-consumer", "ordo-compactor", "ordo-cdc"}


def test_alert_rules_use_only_exported_metrics(tmp_path: Path) -> None:
    names = exported(tmp_path)
    for expr in expressions_of_rules():
        unknown = set(METRIC.findall(expr)) - names
        assert not unknown, f"{expr}: {sorted(unknown)} exported by no process"


def test_every_dashboard_panel_queries_exported_metrics(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    names = exported(tmp_path)
    panels = dashboard["panels"]
    assert panels and len({p["id"] for p in panels}) == len(panels)
    used: set[str] = set()
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            metrics = set(METRIC.findall(target["expr"]))
            assert metrics, f"{panel['title']}: {target['expr']} names no metric"
            assert metrics <= names, f"{panel['title']}: {sorted(metrics - names)} exported by no process"
            used |= metrics
    for must in ("ordo_arbiter_intents_lag", "ordo_consumer_lag_records", "ordo_build_info"):
        assert must in used
    assert {"ordo_cdc_records_total", "ordo_cdc_published_version", "ordo_cdc_tables_held"} <= used


def test_each_process_exports_build_info_and_counters_are_counters(tmp_path: Path) -> None:
    texts = expositions(tmp_path)
    for process, text in texts.items():
        assert re.search(rf'ordo_build_info\{{process="{process}",version="[^"]+"\}} 1\.0', text), process
    found = families(tmp_path)
    for name, (kind, process) in found.items():
        assert not re.search(r"rate|per_second", name), f"{process} exports a pre-computed rate: {name}"
        assert kind in ("counter", "gauge", "histogram"), (name, kind)
    problems = {
        "ordo_arbiter_internal_errors": "counter",
        "ordo_arbiter_refused_unsigned": "counter",
        "ordo_arbiter_intent_rereads": "counter",
        "ordo_arbiter_intent_unresolved_gaps": "counter",
        "ordo_arbiter_table_stopped": "gauge",
        "ordo_arbiter_intents_lag": "gauge",
        "ordo_consumer_decisions_refused": "counter",
        "ordo_consumer_log_unresolved_gaps": "counter",
        "ordo_consumer_tables_stopped": "gauge",
        "ordo_consumer_lag_records": "gauge",
        "ordo_consumer_errors": "counter",
        "ordo_compactor_errors": "counter",
        "ordo_cdc_records": "counter",
        "ordo_cdc_tables_held": "gauge",
        "ordo_cdc_published_version": "gauge",
        "ordo_compactor_backlog_files": "gauge",
        "ordo_compactor_live_files": "gauge",
    }
    assert {name: found.get(name, ("missing",))[0] for name in problems} == problems


def test_compose_checks_and_scrapes_every_long_running_process() -> None:
    """Each arbiter, consumer, compactor and change-topic publisher of docker-compose.yml: healthcheck on /healthz
    and /readyz of the port it serves (the default port of its kind unless its command names one), and a target of
    the example scrape config."""
    from ordo.cli import main
    from ordo.consumer.changetopic import DEFAULT_METRICS_PORT as DEFAULT_CDC_METRICS_PORT
    from ordo.kernel.settings import DEFAULT_ARBITER_METRICS_PORT, DEFAULT_COMPACTOR_METRICS_PORT, DEFAULT_HTTP_PORT

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    scrape = yaml.safe_load(SCRAPE_CONFIG.read_text())
    targets = {
        job["job_name"]: {t for c in job["static_configs"] for t in c["targets"]} for job in scrape["scrape_configs"]
    }
    compose_file = (ROOT / "docker-compose.yml").read_text()
    assert "./deploy/prometheus:/etc/prometheus" in compose_file
    defaults = {"arbiter": DEFAULT_ARBITER_METRICS_PORT, "consumer": DEFAULT_HTTP_PORT}
    defaults["compactor"] = DEFAULT_COMPACTOR_METRICS_PORT
    defaults["cdc"] = DEFAULT_CDC_METRICS_PORT
    assert len(set(defaults.values())) == 4, "each kind of process has its own default port"
    seen = set()
    for name, service in compose["services"].items():
        command = service.get("command") or []
        if service.get("image") != "ordo:latest" or not command or command[0] not in defaults:
            continue
        kind = command[0]
        params = main.commands[kind].make_context(kind, list(command[1:])).params
        port = params.get("http_port" if kind == "consumer" else "metrics_port") or defaults[kind]
        host = params.get("http_host" if kind == "consumer" else "metrics_host")
        assert host == "0.0.0.0", f"{name} must listen beyond the container's loopback"
        check = " ".join(service["healthcheck"]["test"])
        assert f"127.0.0.1:{port}/healthz" in check and f"127.0.0.1:{port}/readyz" in check, name
        assert f"{name}:{port}" in targets[f"ordo-{kind}"], f"{name} is not scraped"
        seen.add(kind)
    assert seen == set(defaults)
