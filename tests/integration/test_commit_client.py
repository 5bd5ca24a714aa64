"""``CommitClient`` against a real broker and a real arbiter process."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ordo.broker import existing_topics, free_port
from ordo.errors import BrokerUnavailableError, CommitTimeoutError, TableNotFoundError
from ordo.producer import ClientClosedError, CommitClient
from ordo.schemas import CommitIntent, DataFile, Operation, Outcome, TableMetadata, decisions_topic, intents_topic
from ordo.services.stack import ManagedProcess
from ordo.settings import Settings

pytestmark = pytest.mark.timeout(120)


def create_intent(table: str) -> CommitIntent:
    return CommitIntent(
        txn_id=f"create-{table}",
        table=table,
        operation=Operation.CREATE_TABLE,
        read_version=0,
        metadata=TableMetadata(location=f"/w/{table}", schema="id BIGINT, p STRING", primary_key=("id",)),
    )


def insert_intent(table: str, txn_id: str, read_version: int = 0) -> CommitIntent:
    return CommitIntent(
        txn_id=txn_id,
        table=table,
        operation=Operation.INSERT_INTO,
        read_version=read_version,
        added_files=(DataFile(path=f"{txn_id}-0.parquet", record_count=1, size_bytes=10),),
    )


def test_commit_without_arbiter_times_out_with_a_helpful_message(
    commit_client: CommitClient, settings: Settings
) -> None:
    start = time.monotonic()
    with pytest.raises(CommitTimeoutError) as info:
        commit_client.commit(create_intent("lonely"), timeout=1.5)
    assert 1.4 < time.monotonic() - start < 10
    message = str(info.value)
    assert "create-lonely" in message and "lonely" in message and settings.topic_prefix in message
    assert "arbiter" in message


def test_a_transaction_left_open_in_the_decisions_log_is_named_by_the_timeout(
    commit_client: CommitClient, settings: Settings
) -> None:
    # A record of a transaction nobody ends (a hanging transaction, docs/operations.md) hides everything after
    # it from read_committed readers; the writer waiting there is told so instead of "is an arbiter running?".
    from confluent_kafka import Producer

    table = "hanging"
    future = commit_client.submit(create_intent(table), timeout=3)  # creates the topics; its reader waits at 0
    hanging = Producer(settings.kafka_config(**{"transactional.id": f"{settings.topic_prefix}.hanging"}))
    hanging.init_transactions(30)
    hanging.begin_transaction()
    hanging.produce(decisions_topic(settings.topic_prefix, table), b"never committed")
    assert hanging.flush(30) == 0
    with pytest.raises(CommitTimeoutError) as info:
        future.result(timeout=30)
    message = str(info.value)
    assert "create-hanging" in message
    assert f"{decisions_topic(settings.topic_prefix, table)} holds records from offset 0 on" in message
    assert "a transaction is open there" in message and "docs/operations.md" in message
    hanging.abort_transaction(10)


def test_create_table_creates_both_topics_and_waits_for_version_0(
    arbiter: Callable[..., ManagedProcess], commit_client: CommitClient, settings: Settings
) -> None:
    arbiter()
    decision = commit_client.commit(create_intent("fresh"), timeout=30)
    assert decision.outcome is Outcome.ACCEPTED and decision.id_version == 0 and decision.intent_offset == 0
    assert decision.metadata is not None and decision.metadata.location == "/w/fresh"
    from confluent_kafka.admin import AdminClient

    topics = existing_topics(AdminClient({"bootstrap.servers": settings.bootstrap_servers}))
    assert {intents_topic(settings.topic_prefix, "fresh"), decisions_topic(settings.topic_prefix, "fresh")} <= topics


def test_duplicate_txn_id_is_answered_idempotently(
    arbiter: Callable[..., ManagedProcess], commit_client: CommitClient
) -> None:
    arbiter()
    commit_client.commit(create_intent("dupes"), timeout=30)
    first = commit_client.commit(insert_intent("dupes", "same"), timeout=30)
    again = commit_client.commit(insert_intent("dupes", "same"), timeout=30)
    assert first.outcome is Outcome.ACCEPTED and first.id_version == 1 and first.duplicate_of is None
    assert again.outcome is Outcome.ACCEPTED and again.id_version == 1
    assert again.duplicate_of == first.intent_offset and again.intent_offset == first.intent_offset + 1
    nxt = commit_client.commit(insert_intent("dupes", "next", read_version=1), timeout=30)
    assert nxt.id_version == 2  # the repeat consumed no version


def test_many_submits_in_flight_from_many_threads(
    arbiter: Callable[..., ManagedProcess], commit_client: CommitClient
) -> None:
    arbiter()
    commit_client.commit(create_intent("busy"), timeout=30)
    futures: dict[str, object] = {}
    lock = threading.Lock()

    def submit_many(worker: int) -> None:
        for n in range(250):
            txn = f"t{worker}-{n}"
            future = commit_client.submit(insert_intent("busy", txn), timeout=60)
            with lock:
                futures[txn] = future

    threads = [threading.Thread(target=submit_many, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    answers = {txn: f.result(timeout=60) for txn, f in futures.items()}  # type: ignore[attr-defined]
    assert len(answers) == 1000
    assert all(d.txn_id == txn for txn, d in answers.items())
    # Unpartitioned INSERT vs INSERT at read version 0 conflicts (later_fails): one wins, the rest are rejected.
    accepted = [d for d in answers.values() if d.outcome is Outcome.ACCEPTED]
    assert len(accepted) == 1 and accepted[0].id_version == 1
    assert {d.reason for d in answers.values() if d.outcome is Outcome.REJECTED} == {"CONFLICT_LATER_FAILS"}
    log = commit_client.decisions("busy")
    assert [d.intent_offset for d in log] == list(range(1001))
    by_offset = {d.intent_offset: d for d in log}
    assert all(by_offset[d.intent_offset] == d for d in answers.values())


def test_intent_for_a_missing_table_raises_table_not_found(commit_client: CommitClient, settings: Settings) -> None:
    with pytest.raises(TableNotFoundError, match="CREATE_TABLE"):
        commit_client.submit(insert_intent("nowhere", "x"))
    from confluent_kafka.admin import AdminClient

    topics = existing_topics(AdminClient({"bootstrap.servers": settings.bootstrap_servers}))
    assert intents_topic(settings.topic_prefix, "nowhere") not in topics  # nothing auto-created


def test_unreachable_broker_raises_broker_unavailable() -> None:
    port = free_port()  # nothing listens there
    client = CommitClient(f"127.0.0.1:{port}", "nobroker", settings=Settings(), connect_timeout=2.0)
    start = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match="cannot reach the Kafka broker"):
        client.commit(create_intent("x"), timeout=5)
    assert time.monotonic() - start < 10
    client.close()


def test_no_kafka_client_is_created_before_first_use(settings: Settings) -> None:
    client = CommitClient(settings=settings)
    assert client._producer is None and client._admin is None and not client._readers
    client.close()
    with pytest.raises(ClientClosedError):
        client.submit(create_intent("closed"))


def test_close_lets_go_of_every_kafka_client(arbiter: Callable[..., ManagedProcess], settings: Settings) -> None:
    # A Kafka client still referenced after close keeps reconnecting (and logging) once its broker is gone.
    arbiter()
    client = CommitClient(settings=settings)
    client.commit(create_intent("let_go"), timeout=30)
    assert client._producer is not None and client._admin is not None and client._topics is not None
    client.close()
    assert client._producer is None and client._admin is None and client._topics is None and not client._readers
    with pytest.raises(ClientClosedError):
        client.decisions("let_go")


def test_close_fails_futures_still_waiting(settings: Settings) -> None:
    client = CommitClient(settings=settings)
    future = client.submit(create_intent("abandoned"), timeout=60)
    client.close()
    with pytest.raises(ClientClosedError):
        future.result(timeout=10)


def test_publish_raw_and_decisions_read_the_raw_log(
    arbiter: Callable[..., ManagedProcess], commit_client: CommitClient
) -> None:
    arbiter()
    commit_client.commit(create_intent("rawlog"), timeout=30)
    offset = commit_client.publish_raw("rawlog", b"not avro")
    assert offset == 1
    deadline = time.monotonic() + 30
    while len(commit_client.decisions("rawlog")) < 2:
        assert time.monotonic() < deadline, "no decision for the raw record"
        time.sleep(0.05)
    log = commit_client.decisions("rawlog")
    assert [(d.intent_offset, d.reason) for d in log] == [(0, None), (1, "MALFORMED_INTENT")]
    assert commit_client.decisions("rawlog", start=1) == log[1:]
    assert commit_client.decisions("never_created") == []


def test_a_table_whose_leader_was_unknown_at_first_lookup_is_committed_to(
    commit_client: CommitClient, settings: Settings, arbiter: Callable[..., ManagedProcess]
) -> None:
    """A lookup of the decisions log before its leader is known (a topic being created, a leader moving).

    librdkafka caches that answer ("No leaders found") and never asks again by itself: on Apache Kafka
    ``submit`` used to fail with ``BrokerUnavailableError: cannot read the end offset`` after 30 s. The
    lookup here comes before the topic exists, the way a lookup racing the topic's creation does.
    """
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    arbiter()
    commit_client._connect()
    early = TopicPartition(decisions_topic(settings.topic_prefix, "late"), 0)
    with pytest.raises(KafkaException):
        commit_client._admin.list_offsets({early: OffsetSpec.latest()}, request_timeout=5)[early].result()
    started = time.monotonic()
    decision = commit_client.commit(create_intent("late"), timeout=60)
    assert decision.outcome is Outcome.ACCEPTED
    assert time.monotonic() - started < 20


@pytest.mark.timeout(300)
def test_twenty_new_tables_with_a_fleet_of_three_arbiters_take_commits_at_once(
    settings: Settings, arbiter: Callable[..., ManagedProcess], tmp_path: Path
) -> None:
    """Issue 20, item 7: 20 tables created at once with an arbiter fleet of 3, then commits to each."""
    tables = [f"many{i}" for i in range(20)]
    for i in range(3):
        arbiter(wait_ready=False, args=["--fleet", "--state-dir", str(tmp_path / f"state{i}")])
    failures: list[BaseException] = []
    accepted: list[str] = []

    def write(table: str, client: CommitClient) -> None:
        try:
            assert client.commit(create_intent(table), timeout=120).outcome is Outcome.ACCEPTED
            for n in range(3):
                assert client.commit(insert_intent(table, f"{table}-{n}", n), timeout=120).accepted
            accepted.append(table)
        except BaseException as exc:
            failures.append(exc)

    with CommitClient(settings=settings) as client:
        threads = [threading.Thread(target=write, args=(t, client)) for t in tables]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(240)
    assert not failures, failures[:3]
    assert sorted(accepted) == sorted(tables)
