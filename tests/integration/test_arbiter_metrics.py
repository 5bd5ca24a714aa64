"""The arbiter's Prometheus endpoint, its idle doorbell, the commit client's idle pause, and ``client.id`` per role."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Callable
from dataclasses import replace

import pytest

from ordo.arbiter.service import ArbiterService
from ordo.broker import free_port
from ordo.producer import CommitClient
from ordo.producer.client import PAUSE_AFTER
from ordo.schemas import Outcome
from ordo.services.stack import ManagedProcess
from ordo.settings import Settings, load_settings
from tests.integration.test_arbiter_service import create_intent, insert_intent

pytestmark = pytest.mark.timeout(120)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def sample(text: str, name: str, **labels: str) -> float:
    """The value of the sample ``name{labels}`` (labels in any order); 0.0 when absent."""
    for line in text.splitlines():
        match = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})? (\S+)$", line)
        if match is None or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if found == labels:
            return float(match.group(3))
    return 0.0


def test_metrics_endpoint_counts_decisions_and_the_arbiter_wakes_from_idle(
    settings: Settings, arbiter: Callable[..., ManagedProcess], commit_client: CommitClient
) -> None:
    port = free_port()
    arbiter(settings=replace(settings, arbiter_metrics_port=port))
    assert commit_client.commit(create_intent("pm"), timeout=30).accepted
    for n in range(3):
        assert commit_client.commit(insert_intent("pm", f"i{n}", "a", read_version=n), timeout=30).accepted
    stale = commit_client.commit(insert_intent("pm", "stale", "a", read_version=99), timeout=30)
    assert stale.outcome is Outcome.REJECTED
    text = scrape(port)
    assert sample(text, "ordo_arbiter_decisions_total", table="pm", outcome="ACCEPTED", reason="") == 4.0
    assert sample(text, "ordo_arbiter_decisions_total", table="pm", outcome="REJECTED", reason=str(stale.reason)) == 1.0
    assert sample(text, "ordo_arbiter_decide_seconds_count") == 5.0
    assert sample(text, "ordo_arbiter_batch_seconds_count") >= 1.0
    assert sample(text, "ordo_arbiter_batch_decisions_sum") == 5.0
    assert sample(text, "ordo_arbiter_tables") == 1.0
    assert 'ordo_arbiter_rebuild_seconds{table="pm"}' in text
    assert "# TYPE ordo_arbiter_intent_rereads_total counter" in text  # a counter (it was a gauge), never a rate
    assert sample(text, "ordo_arbiter_internal_errors_total") == 0.0 and "ordo_arbiter_internal_errors_total" in text
    assert "ordo_arbiter_refused_unsigned_total" in text and "ordo_arbiter_intent_unresolved_gaps_total" in text
    assert sample(text, "ordo_arbiter_tables_stopped") == 0.0 and "ordo_arbiter_tables_stopped" in text
    assert re.search(r'ordo_build_info\{process="arbiter",version="[^"]+"\} 1.0', text), text
    for path, status, body in (("/healthz", 200, '"status": "ok"'), ("/readyz", 200, '"ready": true')):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            assert response.status == status and body in response.read().decode()
    # Idle for longer than the arbiter's idle delay: its intents consumer pauses, the doorbell watches.
    deadline = time.monotonic() + 20
    while sample(scrape(port), "ordo_arbiter_idle_sleeps_total") < 1.0:
        assert time.monotonic() < deadline, "the arbiter never went idle"
        time.sleep(0.2)
    started = time.monotonic()
    assert commit_client.commit(insert_intent("pm", "after-idle", "a", read_version=3), timeout=30).accepted
    assert time.monotonic() - started < 5.0
    text = scrape(port)
    assert sample(text, "ordo_arbiter_decisions_total", table="pm", outcome="ACCEPTED", reason="") == 5.0
    deadline = time.monotonic() + 10  # the lag gauges are refreshed every second
    while 'ordo_arbiter_intents_lag{table="pm"} 0.0' not in text:
        assert time.monotonic() < deadline, "no intents-lag gauge of 0 for table pm"
        time.sleep(0.2)
        text = scrape(port)


def test_an_idle_commit_client_pauses_its_reader_and_resumes_on_the_next_commit(
    settings: Settings, arbiter: Callable[..., ManagedProcess], commit_client: CommitClient
) -> None:
    arbiter()
    assert commit_client.commit(create_intent("pc"), timeout=30).accepted
    reader = commit_client._readers["pc"]
    deadline = time.monotonic() + PAUSE_AFTER + 10
    while reader.pauses < 1:
        assert time.monotonic() < deadline, "the idle decision reader never paused"
        time.sleep(0.05)
    for n in range(3):  # each answered although the reader was paused when it was submitted
        assert commit_client.commit(insert_intent("pc", f"i{n}", "a", read_version=n), timeout=30).accepted
        time.sleep(PAUSE_AFTER + 0.3)
    assert reader.pauses >= 3


def test_every_kafka_client_names_its_role(settings: Settings, broker_kind: str) -> None:
    from ordo.kernel.admin import broker_kind as detected_kind
    from ordo.kernel.settings import BROKER_FETCH_WAITS

    assert detected_kind(settings) == broker_kind  # the fetch waits default per broker: which one this is
    waits = BROKER_FETCH_WAITS[broker_kind]
    service = ArbiterService(settings)
    ids = {
        role: service._consumer_config(role)["client.id"]
        for role in ("intents", "rebuild", "doorbell", "intents-reread")
    }
    ids["membership"] = service.ownership.membership_config()["client.id"]
    assert ids["intents"] == f"{settings.topic_prefix}.arbiter.intents"
    assert ids["membership"] == f"{settings.topic_prefix}.arbiter.membership"
    assert len(set(ids.values())) == len(ids)
    assert service._consumer_config("doorbell", 250)["fetch.wait.max.ms"] == 250
    assert service._consumer_config("intents")["fetch.wait.max.ms"] == waits.busy
    producer = service._producer_config("p.arbiter.table.t")
    assert producer["client.id"] == "p.arbiter.table.t.producer"
    client = CommitClient(settings=settings)
    try:
        from ordo.producer.client import _DecisionReader

        config = _DecisionReader(client, "t", 0).config()
        assert config["client.id"] == f"{settings.topic_prefix}.commit-client.decisions"
        assert config["fetch.wait.max.ms"] == waits.client
    finally:
        client.close()
    named = CommitClient(settings=replace(settings, client_id="nightly-etl"))  # a Spark job names its clients
    try:
        from ordo.producer.client import _DecisionReader

        assert _DecisionReader(named, "t", 0).config()["client.id"] == "nightly-etl.decisions"
        assert named.settings.client_name("producer") == "nightly-etl.producer"
    finally:
        named.close()


def test_fetch_wait_settings_are_validated() -> None:
    loaded = load_settings({"ORDO_FETCH_WAIT_BUSY_MS": "2", "ORDO_FETCH_WAIT_IDLE_MS": "300"})
    assert (loaded.fetch_wait_busy_ms, loaded.fetch_wait_idle_ms) == (2, 300)
    with pytest.raises(ValueError, match="ORDO_FETCH_WAIT_BUSY_MS='0'"):
        load_settings({"ORDO_FETCH_WAIT_BUSY_MS": "0"})
    with pytest.raises(ValueError, match="fetch waits"):
        load_settings({"ORDO_FETCH_WAIT_BUSY_MS": "50", "ORDO_FETCH_WAIT_IDLE_MS": "10"})
    assert load_settings({"ORDO_ARBITER_METRICS_PORT": "9464"}).arbiter_metrics_port == 9464
    assert load_settings({"ORDO_CLIENT_FETCH_WAIT_MS": "3"}).client_fetch_wait_ms == 3
    with pytest.raises(ValueError, match="ORDO_CLIENT_FETCH_WAIT_MS='0'"):
        load_settings({"ORDO_CLIENT_FETCH_WAIT_MS": "0"})
    # Unset waits take the broker's default; a set one wins on either broker; idle never below busy.
    from ordo.kernel.settings import BROKER_FETCH_WAITS, resolve_waits

    assert load_settings({}).fetch_wait_busy_ms is None
    assert resolve_waits(load_settings({}), "tansu") == BROKER_FETCH_WAITS["tansu"]
    assert resolve_waits(load_settings({}), "kafka") == BROKER_FETCH_WAITS["kafka"]
    assert resolve_waits(load_settings({"ORDO_CLIENT_FETCH_WAIT_MS": "3"}), "kafka").client == 3
    assert resolve_waits(load_settings({"ORDO_FETCH_WAIT_BUSY_MS": "300"}), "tansu").idle == 300
    assert load_settings({"ORDO_BROKER_KIND": "Tansu"}).broker_kind == "tansu"
    with pytest.raises(ValueError, match="ORDO_BROKER_KIND"):
        load_settings({"ORDO_BROKER_KIND": "redpanda"})
