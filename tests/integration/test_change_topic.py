"""The change topic on a real broker: ``ordo arbiter``, ``ordo consumer`` and ``ordo cdc`` processes.

Commits with real Parquet files go through the arbiter (``changes_model.TableWriter``);
the topic read back with read_committed must be the model's row changes, each
exactly once, in version order, and its fold the table's live rows. The crash
test kills ``ordo cdc`` with SIGKILL mid-stream (small transactions, so most
kills land inside one) and checks the same.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from ordo.consumer.changetopic import ChangePublisher, TablePublisher, topic_name
from ordo.kernel.observe import ordo_version
from ordo.producer import CommitClient
from ordo.schemas import Operation
from ordo.services.stack import ManagedProcess, ProcessGroup
from ordo.settings import Settings

from ..fencing import take_over
from .changes_model import TOMBSTONE, TableWriter, check_tombstones, check_topic, fold, read_change_topic
from .conftest import ConsumerProcess

pytestmark = pytest.mark.timeout(300)


def start_cdc(processes: ProcessGroup, settings: Settings, *args: str) -> ManagedProcess:
    process = processes.start_ordo(settings, "cdc", "--metrics-port", "0", *args, name="cdc")
    process.wait_for_line(r"cdc ready", timeout=60)
    return process


def scrape(process: ManagedProcess) -> tuple[dict[str, float], int, int]:
    """``ordo cdc``'s metrics (name{labels} -> value), and the status codes of its /healthz and /readyz."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    url = process.wait_for_line(r"cdc metrics at (\S+)/metrics", timeout=30).group(1)
    samples = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return (
        samples,
        httpx.get(f"{url}/healthz", timeout=10).status_code,
        httpx.get(f"{url}/readyz", timeout=10).status_code,
    )


def published_all(records: list[Any], writer: TableWriter) -> bool:
    """The topic holds every row change of the writer's last version with rows."""
    last = max((v for v, changes in writer.expected.items() if changes), default=0)
    done = [r for r in records if r[1]["source"]["id_version"] == last]
    return last == 0 or len(done) == len(writer.expected[last])


def wait_published(settings: Settings, topic: str, writer: TableWriter, timeout: float = 60.0) -> list[Any]:
    """The topic's records once its last one is of the writer's last version with rows (or the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        records = read_change_topic(settings.kafka_config(), topic)
        if published_all(records, writer):
            return records
        assert time.monotonic() < deadline, f"the last version was not published within {timeout} s"
        time.sleep(0.3)


def test_topic_is_the_row_changes_of_every_commit_exactly_once(
    settings: Settings, arbiter: Callable[..., Any], consumer: Callable[..., ConsumerProcess], processes: ProcessGroup
) -> None:
    arbiter()
    handle = consumer()
    rng = random.Random(23)
    with CommitClient(settings=settings) as client, handle.catalog() as catalog:
        writer = TableWriter(client, "events", f"{settings.warehouse}/events")
        assert handle.url is not None
        cdc = start_cdc(processes, settings, "--catalog", handle.url)  # the consumer's HTTP service; from version 1
        writer.upsert([writer.row(i, "a", rng) for i in range(5)] + [writer.row(i, "b", rng) for i in range(3)])
        writer.upsert(
            [writer.row(1, "a", rng), writer.row(7, "a", rng)],
        )
        merged = writer.upsert([writer.row(4, "a", rng), writer.row(8, "a", rng)], merge=True)
        updated = writer.upsert([writer.row(0, "b", rng)], Operation.UPDATE)
        writer.delete("a", [2, 3, 99])
        writer.compact(catalog, "a")  # a rewrite: no records
        writer.overwrite("b", [writer.row(0, "b", rng), writer.row(9, "b", rng)])
        writer.delete("b", [42])  # deletes nothing: no records
        for _ in range(25):
            writer.random_step(rng, catalog)
        writer.overwrite(None, [])  # TRUNCATE: a delete per live row
        writer.upsert([writer.row(i, "c", rng) for i in range(4)])
        writer.wait(catalog)
        head = catalog.head("events")
    topic = topic_name("{prefix}.{table}.changes", settings.topic_prefix, "events")
    records = wait_published(settings, topic, writer)
    metrics, healthz, readyz = scrape(cdc)
    assert (healthz, readyz) == (200, 200)
    assert metrics["ordo_cdc_records_total{}"] == len(records), metrics
    published = metrics.get("ordo_cdc_published_version{table=events}")
    assert published is not None and published >= max(v for v, c in writer.expected.items() if c), metrics
    assert metrics["ordo_build_info{process=cdc,version=" + ordo_version() + "}"] == 1
    assert cdc.terminate() == 0, cdc.tail()  # SIGTERM: a clean stop
    counts = check_topic(records, writer)
    assert counts["c"] and counts["u"] and counts["d"], counts
    assert fold(records) == writer.live
    assert head == writer.head
    operations = {r[1]["source"]["id_version"]: r[1]["source"]["operation"] for r in records}
    assert (operations[merged], operations[updated]) == ("MERGE", "UPDATE")  # as DESCRIBE HISTORY names them
    with_tombstones = read_change_topic(settings.kafka_config(), topic, tombstones=True)
    assert check_tombstones(with_tombstones) == counts["d"]  # Debezium's default: one after each delete
    first = records[0][1]
    assert first["op"] == "c" and first["before"] is None and first["source"]["id_version"] == 1
    assert set(first) == {"before", "after", "source", "op", "ts_ms", "transaction"}
    assert set(first["after"]) == {"id", "v", "n", "dt"}


def test_connect_json_wraps_every_key_and_value_and_no_tombstones_is_a_setting(
    settings: Settings, arbiter: Callable[..., Any], consumer: Callable[..., ConsumerProcess], processes: ProcessGroup
) -> None:
    """``--format connect-json`` (Kafka Connect's schema/payload form) with ``ORDO_CHANGES_TOMBSTONES=false``:
    every record is ``{"schema", "payload"}``, the payloads are the same row changes exactly once, no tombstone.
    (Kafka Connect's own JsonConverter reads them in tests/e2e/test_change_topic_connect.py.)"""
    arbiter()
    handle = consumer(http=False)
    rng = random.Random(31)
    cdc_settings = settings.with_overrides(changes_tombstones=False)
    with CommitClient(settings=settings) as client, handle.catalog() as catalog:
        writer = TableWriter(client, "events", f"{settings.warehouse}/events")
        start_cdc(processes, cdc_settings, "--format", "connect-json", "--max-records", "3")
        for _ in range(12):
            writer.random_step(rng, catalog)
        writer.delete("a", sorted(k for dt, k in writer.live if dt == "a")[:2])
        writer.wait(catalog)
    topic = topic_name("{prefix}.{table}.changes", settings.topic_prefix, "events")
    deadline = time.monotonic() + 60
    while True:
        wrapped = read_change_topic(settings.kafka_config(), topic, tombstones=True)
        unwrapped = [
            (json.dumps(json.loads(k or b"")["payload"]).encode(), TOMBSTONE if v is TOMBSTONE else v["payload"])
            for k, v in wrapped
        ]
        records = [r for r in unwrapped if r[1] is not TOMBSTONE]
        if published_all(records, writer) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert records and all(set(json.loads(k or b"")) == set(v) == {"schema", "payload"} for k, v in wrapped)
    assert {v["schema"]["name"] for _, v in wrapped} == {f"{settings.topic_prefix}.events.Envelope"}
    counts = check_topic(records, writer)
    assert counts["d"] > 0 and not any(v is TOMBSTONE for _, v in unwrapped)  # deletes, and no tombstone
    assert fold(records) == writer.live


def test_kill_9_of_the_publisher_mid_stream_loses_and_repeats_no_row(
    settings: Settings, arbiter: Callable[..., Any], consumer: Callable[..., ConsumerProcess], processes: ProcessGroup
) -> None:
    """Each round commits a backlog while no publisher runs, starts ``ordo cdc`` (2 records per transaction)
    and kills it with SIGKILL as soon as it has published something new; the last one finishes. Restarts must resume inside a commit
    at least once (the kills land mid-stream), and the topic must still hold every row change exactly once."""
    arbiter()
    handle = consumer(http=False)
    rng = random.Random(9)
    topic = topic_name("{prefix}.{table}.changes", settings.topic_prefix, "events")
    resumed: list[tuple[int, int]] = []
    mid_stream = 0
    with CommitClient(settings=settings) as client, handle.catalog() as catalog:
        writer = TableWriter(client, "events", f"{settings.warehouse}/events")
        for round_ in range(8):
            for _ in range(6):
                writer.random_step(rng, catalog)
            writer.upsert([writer.row(i, "a", rng) for i in range(60)])  # 60 rows: 30 transactions of 2
            writer.wait(catalog)
            cdc = processes.start_ordo(settings, "cdc", "--metrics-port", "0", "--max-records", "2", name="cdc")
            match = cdc.wait_for_line(r"publishing from version (\d+) row (\d+)", timeout=60)
            resumed.append((int(match.group(1)), int(match.group(2))))
            before = len(read_change_topic(settings.kafka_config(), topic))
            deadline = time.monotonic() + 30
            while True:  # killed once it publishes (or, when reading the topic was slower, once it caught up)
                now = read_change_topic(settings.kafka_config(), topic)
                if len(now) > before or published_all(now, writer):
                    break
                assert time.monotonic() < deadline, "the publisher published nothing in 30 s"
            time.sleep(rng.uniform(0.0, 0.05))
            if round_ % 3 == 2:  # every third stop is a SIGTERM mid-stream: it publishes what it computed, then exits
                assert cdc.terminate() == 0, cdc.tail()
            else:
                cdc.kill()
            published = read_change_topic(settings.kafka_config(), topic)
            last = published[-1][1]["source"]["id_version"] if published else 0
            mid_stream += last < writer.head  # killed before it caught up
        start_cdc(processes, settings, "--max-records", "2")
        writer.wait(catalog)
    records = wait_published(settings, topic, writer, timeout=120)
    counts = check_topic(records, writer)
    assert fold(records) == writer.live
    assert check_tombstones(read_change_topic(settings.kafka_config(), topic, tombstones=True)) == counts["d"]
    print(f"resumed at {resumed}; {mid_stream} of 8 kills before catching up; {len(records)} records {counts}")
    assert any(row > 0 for _, row in resumed), resumed  # at least one restart went on inside a commit
    assert mid_stream >= 2, mid_stream


def test_a_newer_publisher_fences_the_older_which_exits_and_no_row_is_repeated(
    settings: Settings, arbiter: Callable[..., Any], consumer: Callable[..., ConsumerProcess], processes: ProcessGroup
) -> None:
    """Two publishers of one table: the newer takes the transactional id; the elder, frozen meanwhile (a zombie
    paused mid-work, tests/fencing.py says why on Tansu), wakes up fenced, exits with code 3 and leaves no record."""
    arbiter()
    handle = consumer(http=False)
    rng = random.Random(3)
    topic = topic_name("{prefix}.{table}.changes", settings.topic_prefix, "events")
    with CommitClient(settings=settings) as client, handle.catalog() as catalog:
        writer = TableWriter(client, "events", f"{settings.warehouse}/events")
        writer.upsert([writer.row(i, "a", rng) for i in range(10)])
        elder = start_cdc(processes, settings, "--max-records", "2")
        # the elder must hold the table's transactional id before it is frozen: a publisher that meets the table
        # only after the newer one would fence the newer (rightly), not be fenced
        elder.wait_for_line(r"events\.changes: publishing from version", timeout=60)
        newer = take_over(elder, lambda: start_cdc(processes, settings, "--max-records", "2"))
        for _ in range(10):
            writer.random_step(rng, catalog)
        writer.upsert([writer.row(i, "b", rng) for i in range(20)])
        writer.wait(catalog)
        assert elder.wait(timeout=60) == 3, elder.tail()
        assert newer.running
    records = wait_published(settings, topic, writer)
    check_topic(records, writer)
    assert fold(records) == writer.live


def test_a_delete_left_without_its_tombstone_gets_it_first_when_the_publisher_resumes(
    settings: Settings, arbiter: Callable[..., Any], consumer: Callable[..., ConsumerProcess]
) -> None:
    """The topic ends with a ``d`` and no tombstone (a run with tombstones off here; on Tansu, a transaction cut
    short between the two): a publisher with tombstones on writes that tombstone before anything else."""
    arbiter()
    handle = consumer(http=False)
    rng = random.Random(41)
    topic = topic_name("{prefix}.{table}.changes", settings.topic_prefix, "events")

    def publish_all(tombstones: bool) -> None:
        publisher = ChangePublisher(settings.with_overrides(changes_tombstones=tombstones), retry_interval=0.0)
        while publisher.round(catalog) or publisher.status.errors:
            assert not publisher.status.errors, publisher.status.errors
        publisher.close()

    with CommitClient(settings=settings) as client, handle.catalog() as catalog:
        writer = TableWriter(client, "events", f"{settings.warehouse}/events")
        writer.upsert([writer.row(i, "a", rng) for i in range(6)])
        writer.delete("a", [1, 2])
        writer.wait(catalog)
        publish_all(tombstones=False)
        assert not any(v is TOMBSTONE for _, v in read_change_topic(settings.kafka_config(), topic, tombstones=True))
        publish_all(tombstones=True)
        resumed = read_change_topic(settings.kafka_config(), topic, tombstones=True)
        assert [v["op"] if v is not TOMBSTONE else None for _, v in resumed][-3:] == ["d", "d", None]
        assert resumed[-1][0] == resumed[-2][0]  # the last delete's key: only the topic's last record was due
        writer.delete("a", [3])
        writer.wait(catalog)
        publish_all(tombstones=True)
    records = read_change_topic(settings.kafka_config(), topic, tombstones=True)
    assert [v["op"] if v is not TOMBSTONE else None for _, v in records][-5:] == ["d", "d", None, "d", None]
    changes = [r for r in records if r[1] is not TOMBSTONE]
    check_topic(changes, writer)
    assert fold(changes) == writer.live


class FailingCommit:
    """A real producer whose ``commit_transaction`` fails once, after the records were produced (fault injection)."""

    def __init__(self, producer: Any) -> None:
        self.producer = producer
        self.failed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.producer, name)

    def commit_transaction(self, *args: Any) -> None:
        if not self.failed:
            self.failed = True
            self.producer.flush(10)  # the records are in the log, inside the open transaction
            raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, "injected", retriable=False))
        self.producer.commit_transaction(*args)


def test_a_failed_transaction_is_aborted_and_published_again_from_the_topic(
    settings: Settings, arbiter: Callable[..., Any], consumer: Callable[..., ConsumerProcess]
) -> None:
    """A transaction that fails to commit is aborted, the table's publisher starts again and reads where to go on
    from the topic: on Kafka the aborted records are hidden and published again; on Tansu they are visible
    (docs/tansu.md) and the publisher goes on after them. Either way a read_committed reader sees each row once."""
    arbiter()
    handle = consumer(http=False)
    rng = random.Random(17)
    topic = topic_name("{prefix}.{table}.changes", settings.topic_prefix, "events")
    with CommitClient(settings=settings) as client, handle.catalog() as catalog:
        writer = TableWriter(client, "events", f"{settings.warehouse}/events")
        writer.upsert([writer.row(i, "a", rng) for i in range(12)])
        writer.wait(catalog)
        publisher = ChangePublisher(settings, max_records=5, retry_interval=0.0)
        table = TablePublisher(publisher, "events")
        table.start()
        injected = FailingCommit(table.producer)
        table.producer = injected
        publisher.publishers["events"] = table
        assert publisher.round(catalog) == 0  # the first transaction failed: nothing counted as published
        assert (
            injected.failed and "events" not in publisher.publishers and "injected" in publisher.status.errors["events"]
        )
        for _ in range(6):
            writer.random_step(rng, catalog)
        writer.wait(catalog)
        while publisher.round(catalog):
            pass
        publisher.close()
        injected.producer = None
    records = wait_published(settings, topic, writer)
    check_topic(records, writer)
    assert fold(records) == writer.live
