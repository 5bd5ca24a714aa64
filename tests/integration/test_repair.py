"""``ordo repair TABLE`` on a real broker with real ``ordo arbiter`` and ``ordo consumer`` processes.

A table the consumer stopped is re-materialized from its decisions log: with
damaged catalog rows it is served again with exactly the snapshots and history
of a fresh catalog built from the log; with a bad record still in the log it
stops again at the same offset for the same reason. The message a user sees
(``ordo tables``, ``/healthz``) names the command.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from ordo.cli import main
from ordo.consumer import Catalog
from ordo.producer import CommitClient
from ordo.schemas import decisions_topic
from ordo.services.stack import ManagedProcess
from ordo.settings import Settings

from .conftest import ConsumerProcess
from .test_arbiter_service import create_intent, insert_intent

pytestmark = pytest.mark.timeout(240)


def cli(settings: Settings, catalog: str, *args: str) -> Any:
    env = {
        "ORDO_CATALOG": catalog,
        "ORDO_BOOTSTRAP_SERVERS": settings.bootstrap_servers or "",
        "ORDO_TOPIC_PREFIX": settings.topic_prefix,
        "ORDO_TRUSTED_KEYS": settings.trusted_keys,
        "ORDO_REQUIRE_SIGNATURES": "true" if settings.require_signatures else "false",
        "COLUMNS": "400",
    }
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def head(catalog: Catalog, table: str) -> int:
    try:
        return catalog.table(table).head_version
    except Exception:
        return -2


def populate(client: CommitClient, table: str, inserts: int) -> None:
    assert client.commit(create_intent(table), timeout=30).id_version == 0
    for i in range(inserts):
        decision = client.commit(insert_intent(table, f"{table}-{i}", str(i), read_version=i), timeout=30)
        assert decision.id_version == i + 1, decision


def view(catalog: Catalog, table: str) -> tuple[list[Any], list[list[str]]]:
    """The table's history and the live files of every version."""
    history = [d.to_dict() for d in catalog.history(table)]
    top = catalog.table(table).head_version
    snapshots = [sorted(f.path for f in catalog.snapshot(table, version=v).files) for v in range(top + 1)]
    return history, snapshots


def damage(path: str, table: str) -> None:
    """Corrupt the table's rows by hand: lose its newest commit's files and decision, and stop it."""
    conn = sqlite3.connect(path)
    with conn:
        (table_id,) = conn.execute("SELECT id FROM tables WHERE name = ?", (table,)).fetchone()
        (top,) = conn.execute("SELECT MAX(added_version) FROM files WHERE table_id = ?", (table_id,)).fetchone()
        conn.execute("DELETE FROM files WHERE table_id = ? AND added_version = ?", (table_id, top))
        conn.execute(
            "UPDATE tables SET error = 'rows damaged by hand', error_offset = next_offset WHERE id = ?", (table_id,)
        )
    conn.close()


def test_repair_through_the_running_consumer_serves_the_table_again(
    settings: Settings,
    tmp_path: Any,
    arbiter: Callable[..., ManagedProcess],
    consumer: Callable[..., ConsumerProcess],
    commit_client: CommitClient,
) -> None:
    arbiter()
    populate(commit_client, "hurt", 6)
    populate(commit_client, "fine", 2)
    path = str(tmp_path / "catalog.db")
    first = consumer(catalog=path, http=False)
    with Catalog(path) as catalog:
        wait_for(lambda: head(catalog, "hurt") == 6 and head(catalog, "fine") == 2, "the consumer to catch up")
    first.terminate()
    damage(path, "hurt")

    running = consumer(catalog=path)
    with Catalog(path) as catalog:
        assert catalog.table("hurt").error == "rows damaged by hand"
    # the HTTP API is read-only: a repair needs the catalog file
    assert running.url is not None
    refused = cli(settings, running.url, "repair", "hurt")
    assert refused.exit_code == 1 and "needs the catalog file" in refused.output, refused.output

    # the running consumer does it (asked through a request file next to the catalog)
    answer = cli(settings, path, "repair", "hurt", "--json")
    assert answer.exit_code == 0, answer.output
    result = json.loads(answer.stdout)
    assert result["served"] and result["head_version"] == 6 and result["error"] is None

    # served again: same history and snapshots as a catalog built from the log by a fresh consumer
    fresh = consumer(catalog=tmp_path / "fresh.db", http=False)
    with Catalog(path) as repaired, Catalog(fresh.catalog_path) as rebuilt:
        wait_for(lambda: head(rebuilt, "hurt") == 6, "the fresh consumer to catch up")
        assert repaired.table("hurt").error is None
        assert view(repaired, "hurt") == view(rebuilt, "hurt")
        # and followed again: new commits of both tables are materialized
        commit_client.commit(insert_intent("hurt", "hurt-after", "9", read_version=6), timeout=30)
        commit_client.commit(insert_intent("fine", "fine-after", "9", read_version=2), timeout=30)
        wait_for(lambda: head(repaired, "hurt") == 7 and head(repaired, "fine") == 3, "the repaired table to move")
        wait_for(lambda: head(rebuilt, "hurt") == 7, "the fresh consumer to follow")
        assert view(repaired, "hurt") == view(rebuilt, "hurt")


def test_a_bad_record_still_in_the_log_stops_the_table_again_and_the_message_names_the_repair(
    settings: Settings,
    tmp_path: Any,
    arbiter: Callable[..., ManagedProcess],
    consumer: Callable[..., ConsumerProcess],
    commit_client: CommitClient,
) -> None:
    from confluent_kafka import Producer

    arbiter()
    populate(commit_client, "bad", 3)
    populate(commit_client, "good", 1)
    # A record no arbiter wrote is refused when signatures are required (tests/integration/test_signed_decisions.py);
    # the upgrade mode, which reads unsigned logs of earlier releases, stops the table at it instead.
    settings = settings.with_overrides(require_signatures=False)
    running = consumer(catalog=tmp_path / "catalog.db", settings=settings)
    path = running.catalog_path
    raw = Producer(settings.kafka_config())
    delivered: list[int] = []
    raw.produce(
        decisions_topic(settings.topic_prefix, "bad"),
        b"\x00not a decision",
        on_delivery=lambda error, message: delivered.append(message.offset()),
    )
    assert raw.flush(30) == 0
    (bad_offset,) = delivered
    del raw
    with Catalog(path) as catalog:
        wait_for(lambda: catalog.table("bad").error is not None, "the consumer to stop the table")
        before = catalog.table("bad")
    assert before.error is not None and before.error_offset == bad_offset
    assert "undecodable decision record" in before.error and "ordo repair bad" in before.error

    assert running.url is not None
    health = httpx.get(running.url + "/healthz", timeout=10).json()
    assert health["status"] == "degraded" and "ordo repair bad" in health["broken"]["bad"]
    listing = cli(settings, running.url, "tables")
    assert listing.exit_code == 0 and "ordo repair bad" in listing.output, listing.output

    answer = cli(settings, path, "repair", "bad")
    assert answer.exit_code == 1
    assert (
        f"stopped again at log offset {bad_offset}" in answer.output and "undecodable decision record" in answer.output
    )
    with Catalog(path) as catalog:
        after = catalog.table("bad")
        assert (after.error, after.error_offset, after.head_version) == (before.error, bad_offset, 3)
        # the other table is served throughout
        commit_client.commit(insert_intent("good", "good-after", "9", read_version=1), timeout=30)
        wait_for(lambda: head(catalog, "good") == 2, "the other table to move on")

    # offline, on the file, the same: stopped again with the same reason
    running.terminate()
    offline = cli(settings, path, "repair", "bad", "--json")
    assert offline.exit_code == 1
    data = json.loads(offline.stdout)
    assert (data["error"], data["error_offset"]) == (before.error, bad_offset)


def test_repair_of_a_table_without_a_log_is_a_clear_error(settings: Settings, tmp_path: Any) -> None:
    path = tmp_path / "catalog.db"
    from ordo.consumer.store import CatalogWriter

    CatalogWriter(path, settings.topic_prefix).close()
    result = cli(settings, str(path), "repair", "nothing")
    assert result.exit_code == 1 and "has no decisions log" in result.output, result.output


def test_repair_of_a_postgresql_catalog_runs_where_it_is_called_and_the_consumer_follows_again(
    settings: Settings,
    tmp_path: Any,
    postgres_server: Any,
    arbiter: Callable[..., ManagedProcess],
    consumer: Callable[..., ConsumerProcess],
    commit_client: CommitClient,
) -> None:
    """No lock file and no request file on a shared catalog: the caller swaps the rows, the consumer takes them."""
    from ordo.consumer.store import connect
    from tests.conftest import create_database

    url = create_database(postgres_server)
    arbiter()
    populate(commit_client, "hurt", 5)
    populate(commit_client, "fine", 2)
    consumer(catalog=url, http=False)
    with Catalog(url) as catalog:
        wait_for(lambda: head(catalog, "hurt") == 5 and head(catalog, "fine") == 2, "the consumer to catch up")
    conn = connect(url)  # damage the rows by hand while the consumer runs
    conn.execute("BEGIN")
    (table_id,) = conn.execute("SELECT id FROM tables WHERE name = ?", ("hurt",)).fetchone()
    conn.execute("DELETE FROM files WHERE table_id = ? AND added_version = 5", (table_id,))
    conn.execute(
        "UPDATE tables SET error = 'rows damaged by hand', error_offset = next_offset WHERE id = ?", (table_id,)
    )
    conn.execute("COMMIT")
    conn.close()
    with Catalog(url) as catalog:
        assert catalog.table("hurt").error == "rows damaged by hand"
        assert len(catalog.snapshot("hurt").files) == 4
    answer = cli(settings, url, "repair", "hurt", "--json")
    assert answer.exit_code == 0, answer.output
    result = json.loads(answer.stdout)
    assert result["served"] and result["head_version"] == 5 and result["error"] is None
    fresh = consumer(catalog=tmp_path / "fresh.db", http=False)
    with Catalog(url) as repaired, Catalog(fresh.catalog_path) as rebuilt:
        wait_for(lambda: head(rebuilt, "hurt") == 5, "the fresh consumer to catch up")
        assert repaired.table("hurt").error is None
        assert view(repaired, "hurt") == view(rebuilt, "hurt")
        commit_client.commit(insert_intent("hurt", "hurt-after", "9", read_version=5), timeout=30)
        wait_for(lambda: head(repaired, "hurt") == 6, "the consumer to follow the repaired table again")
        wait_for(lambda: head(rebuilt, "hurt") == 6, "the fresh consumer to follow")
        assert view(repaired, "hurt") == view(rebuilt, "hurt")
