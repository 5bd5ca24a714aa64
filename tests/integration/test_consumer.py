"""The consumer on a real broker, with real ``ordo arbiter`` and ``ordo consumer`` processes.

A scripted random history (``IntentSource``: inserts, updates, overwrites,
truncates, compactions, clustering, stale read versions, retried intents) is
committed through the arbiter; ``LiveModel`` folds the decisions the writer
got back and is the oracle for every version, timestamp and range. Crash tests
kill -9 the consumer at random moments and compare with a catalog rebuilt
from scratch by a second consumer.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ordo.arbiter.core import datetime_to_millis
from ordo.consumer import Catalog, TableNotFoundError, VersionNotFoundError
from ordo.consumer.store import connect
from ordo.producer import CommitClient
from ordo.schemas import CommitDecision, encode
from ordo.services.stack import ProcessGroup
from ordo.settings import Settings

from ..unit.test_catalog import at
from ..unit.test_catalog_model import IntentSource, LiveModel, Script
from .conftest import ConsumerProcess

pytestmark = pytest.mark.timeout(240)


def commit_history(
    client: CommitClient,
    source: IntentSource,
    model: LiveModel,
    steps: int,
    location: str,
    decisions: list[CommitDecision] | None = None,
) -> list[CommitDecision]:
    """Commit ``steps`` random transactions in small concurrent bursts; fold the answers into ``model``."""
    answers = decisions if decisions is not None else []
    if model.head < 0:
        created = client.commit(source.create(location))
        answers.append(created)
        model.apply(created)
    done = 0
    while done < steps:
        burst = [source.next(model) for _ in range(min(source.rng.choice((1, 1, 2, 3)), steps - done))]
        futures = [client.submit(intent) for intent in burst]  # pinned to the same snapshot: concurrent
        for future in futures:
            decision = future.result(timeout=30)
            answers.append(decision)
            model.apply(decision)
        done += len(burst)
    return answers


# --------------------------------------------------------------------------- one scripted history per module


@dataclass
class History:
    settings: Settings
    model: LiveModel
    decisions: list[CommitDecision]
    consumer: ConsumerProcess


@pytest.fixture(scope="module")
def history(make_settings: Callable[..., Settings], tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    settings = make_settings()
    group = ProcessGroup(log_dir=tmp_path_factory.mktemp("consumer-logs"))
    try:
        group.start_arbiter(settings, timeout=60)
        process = group.start_ordo(settings, "consumer", "--http-port", "0", name="consumer-history")
        url = process.wait_for_line(r"ORDO_CATALOG_URL=(\S+)", timeout=60).group(1)
        handle = ConsumerProcess(process, settings, str(Path(settings.catalog).absolute()), url)
        handle.wait_ready(60)
        model = LiveModel()
        with CommitClient(settings=settings) as client:
            decisions = commit_history(client, IntentSource("t", seed=31), model, 120, f"{settings.warehouse}/t")
        handle.catalog().wait_for_version("t", model.head, timeout=30)
        yield History(settings, model, decisions, handle)
    finally:
        group.stop()


def test_history_has_rejections_rebases_duplicates_and_rewrites(history: History) -> None:
    kinds = {(d.accepted, d.duplicate_of is not None) for d in history.decisions}
    assert kinds >= {(True, False), (False, False), (True, True)}
    assert any(d.rebase.value != "NONE" for d in history.decisions)
    assert any(op.rewrites for op in history.model.operations)


@pytest.mark.parametrize("backend", ["sqlite", "http"])
def test_time_travel_at_every_version_equals_the_model(history: History, backend: str) -> None:
    catalog = history.consumer.catalog() if backend == "sqlite" else history.consumer.remote()
    model = history.model
    location = f"{history.settings.warehouse}/t"
    assert catalog.head("t") == model.head
    for version in range(model.head + 1):
        snapshot = catalog.snapshot("t", version)
        assert {f.path: f.seq for f in snapshot.files} == model.live(version), f"version {version}"
        assert snapshot.time_version == at(model.times[version])
        assert all(f.absolute_path == f"{location}/{f.path}" for f in snapshot.files)
    with pytest.raises(VersionNotFoundError, match=rf"table 't' has ID versions 0\.\.{model.head}"):
        catalog.snapshot("t", model.head + 1)
    with pytest.raises(TableNotFoundError):
        catalog.snapshot("nope")


def test_time_travel_by_timestamp_equals_the_model(history: History) -> None:
    catalog = history.consumer.catalog()
    model = history.model
    for millis in sorted({t + d for t in model.times for d in (-1, 0, 1)}):
        expected = model.version_at(millis)
        if expected is None:
            with pytest.raises(VersionNotFoundError, match="before table 't' was created"):
                catalog.snapshot("t", timestamp=at(millis))
        else:
            assert catalog.snapshot("t", timestamp=at(millis)).id_version == expected


def test_commits_by_id_and_by_time_leave_out_compactions(history: History) -> None:
    catalog = history.consumer.catalog()
    model = history.model
    accepted = {d.id_version: d for d in history.decisions if d.accepted and d.duplicate_of is None}
    rng = random.Random(5)
    for _ in range(15):
        low = rng.randrange(model.head + 1)
        high = rng.randrange(low, model.head + 1)
        commits = catalog.commits("t", low, high)
        assert [c.id_version for c in commits] == model.logical(low, high)
        for commit in commits:
            decision = accepted[commit.id_version]
            assert commit.txn_id == decision.txn_id and commit.operation is decision.operation
            assert [f.path for f in commit.added_files] == [f.path for f in decision.added_files]
            assert commit.removed_files == tuple(sorted(decision.removed_files))
        by_time = catalog.commits("t", at(model.times[low]), at(model.times[high]), by="time")
        assert [c.id_version for c in by_time] == [
            v
            for v in range(model.head + 1)
            if model.operations[v].data_change and model.times[low] <= model.times[v] <= model.times[high]
        ]
        assert all(not c.operation.rewrites for c in by_time)
        assert all(
            c.time_version is not None and datetime_to_millis(c.time_version) == model.times[c.id_version]
            for c in by_time
        )


def test_history_lists_every_decision_with_reasons(history: History) -> None:
    entries = list(reversed(history.consumer.catalog().history("t")))
    assert len(entries) == len(history.decisions)
    for entry, decision in zip(entries, history.decisions, strict=True):
        assert (entry.txn_id, entry.outcome, entry.reason, entry.id_version, entry.conflicting_txn_id) == (
            decision.txn_id,
            decision.outcome,
            decision.reason,
            decision.id_version,
            decision.conflicting_txn_id,
        )
        assert entry.intent_offset == decision.intent_offset and entry.duplicate_of == decision.duplicate_of
    assert history.consumer.remote().history("t") == history.consumer.catalog().history("t")


def test_sse_stream_of_commits_resumes_with_last_event_id(history: History) -> None:
    url = f"{history.consumer.url}/tables/t/changes/stream"
    logical = history.model.logical(0, history.model.head)

    def read(params: dict[str, object], headers: dict[str, str], count: int) -> list[tuple[int, dict[str, object]]]:
        events: list[tuple[int, dict[str, object]]] = []
        with httpx.Client(timeout=20) as client, client.stream("GET", url, params=params, headers=headers) as response:
            assert response.status_code == 200
            event_id = None
            for line in response.iter_lines():
                if line.startswith("id: "):
                    event_id = int(line[4:])
                elif line.startswith("data: "):
                    assert event_id is not None
                    events.append((event_id, json.loads(line[6:])))
                    if len(events) == count:
                        break
        return events

    first = read({"from_version": 0}, {}, 10)
    rest = read({}, {"Last-Event-ID": str(first[-1][0])}, len(logical) - 10)
    ids = [event_id for event_id, _ in first + rest]
    assert ids == logical
    assert all(body["id_version"] == event_id and body["data_change"] for event_id, body in first + rest)
    missing = httpx.get(f"{history.consumer.url}/tables/nope/changes/stream")
    assert missing.status_code == 404 and missing.json()["error"] == "TableNotFoundError"


def test_health_readiness_and_metrics(history: History) -> None:
    url = history.consumer.url
    assert httpx.get(f"{url}/healthz").json()["status"] == "ok"
    assert httpx.get(f"{url}/readyz").json() == {"ready": True}
    deadline = time.monotonic() + 5
    while True:  # lag is sampled from the broker's watermarks: 0 once the consumer read past the last marker
        metrics = httpx.get(f"{url}/metrics").text
        if 'ordo_consumer_lag_records{table="t"} 0.0' in metrics or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert 'ordo_consumer_lag_records{table="t"} 0.0' in metrics, metrics
    assert f'ordo_consumer_head_version{{table="t"}} {float(history.model.head)}' in metrics
    applied = next(line for line in metrics.splitlines() if line.startswith("ordo_consumer_decisions_applied_total"))
    assert float(applied.split()[1]) == len(history.decisions)


# --------------------------------------------------------------------------- crashes and new tables


def dump(path: str) -> dict[str, list[tuple[object, ...]]]:
    """The catalog's rows keyed by table name (ids may differ between catalogs, and so may their stores)."""
    conn = connect(path, readonly=True)
    try:
        return {
            "tables": conn.execute(
                "SELECT name, topic, next_offset, last_hash, decisions, metadata, created_time_ms, head_version,"
                " head_time_ms, error FROM tables ORDER BY name"
            ).fetchall(),
            "decisions": conn.execute(
                "SELECT t.name, d.* FROM decisions d JOIN tables t ON t.id = d.table_id ORDER BY t.name, d.log_offset"
            ).fetchall(),
            "commits": conn.execute(
                "SELECT t.name, c.* FROM commits c JOIN tables t ON t.id = c.table_id ORDER BY t.name, c.id_version"
            ).fetchall(),
            "files": conn.execute(
                "SELECT t.name, f.path, f.partition, f.record_count, f.size_bytes, f.added_version, f.removed_version,"
                " f.data_change, f.operation FROM files f JOIN tables t ON t.id = f.table_id"
                " ORDER BY t.name, f.path, f.added_version"
            ).fetchall(),
        }
    finally:
        conn.close()


def test_catalog_after_kill_9_restarts_equals_one_rebuilt_from_scratch(
    arbiter: Callable[..., object],
    consumer: Callable[..., ConsumerProcess],
    commit_client: CommitClient,
    settings: Settings,
    catalog_at: Callable[[str], str],
) -> None:
    arbiter()
    settings = settings.with_overrides(catalog=catalog_at("c.db"))
    first = consumer(http=False, settings=settings)
    tables = {name: (IntentSource(name, seed=40 + i, partitioned=i != 1), LiveModel()) for i, name in enumerate("tuv")}
    for name, (source, model) in tables.items():
        commit_history(commit_client, source, model, 0, f"{settings.warehouse}/{name}")
    errors: list[BaseException] = []
    done = threading.Event()

    def write() -> None:
        # Commits keep flowing until the three kills are done (bounded: 200 rounds), so
        # a fast machine cannot finish the history before the consumer is killed.
        try:
            for _ in range(200):
                if done.is_set():
                    break
                for name, (source, model) in tables.items():
                    commit_history(commit_client, source, model, 3, f"{settings.warehouse}/{name}")
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    rng = random.Random(7)
    current = first
    kills = 0
    try:
        while writer.is_alive() and kills < 3:
            time.sleep(rng.uniform(0.2, 0.8))
            assert current.kill() == -9
            kills += 1
            current = consumer(http=False, settings=settings)
    finally:
        done.set()
        writer.join(120)
    assert not errors, errors
    assert kills == 3, "the consumer must be killed while commits are flowing"
    catalog = current.catalog()
    for name, (_, model) in tables.items():
        catalog.wait_for_version(name, model.head, timeout=30)
    rebuilt = consumer(http=False, catalog=catalog_at("rebuilt.db"))
    for name, (_, model) in tables.items():
        rebuilt.catalog().wait_for_version(name, model.head, timeout=30)
        assert {f.path: f.seq for f in catalog.snapshot(name).files} == model.live(model.head)
    time.sleep(1.5)  # both have read the transaction markers after the last decisions
    assert dump(current.catalog_path) == dump(rebuilt.catalog_path)
    assert sum(model.head for _, model in tables.values()) > 30


def test_subscribe_has_no_gap_or_duplicate_across_a_consumer_kill_9(
    arbiter: Callable[..., object],
    consumer: Callable[..., ConsumerProcess],
    commit_client: CommitClient,
    settings: Settings,
) -> None:
    arbiter()
    current = consumer()
    port = current.port
    source, model = IntentSource("t", seed=50), LiveModel()
    commit_history(commit_client, source, model, 5, f"{settings.warehouse}/t")
    current.catalog().wait_for_version("t", model.head, timeout=20)
    local_seen: list[int] = []
    remote_seen: list[int] = []
    local_cursor = 0
    last = [-1]  # the final head, once every commit was written

    def done(version: int) -> bool:
        return version == last[0]

    def follow_local() -> None:
        nonlocal local_cursor
        catalog = Catalog(current.catalog_path)
        while True:  # a subscriber that stops and resumes from its cursor every 7 commits
            batch = 0
            for commit in catalog.subscribe(
                "t", local_cursor, poll_interval=0.05, include_rewrites=True, idle_timeout=20
            ):
                local_seen.append(commit.id_version)
                local_cursor = commit.id_version + 1
                if done(commit.id_version):
                    return
                batch += 1
                if batch == 7:
                    break
            else:
                return  # idle for 20 s: a commit was missed (the assertion below fails)

    def follow_remote() -> None:
        for commit in Catalog(current.url).subscribe("t", 0, include_rewrites=True, idle_timeout=20):
            remote_seen.append(commit.id_version)
            if done(commit.id_version):
                return

    readers = [threading.Thread(target=follow_local), threading.Thread(target=follow_remote)]
    for reader in readers:
        reader.start()
    commit_history(commit_client, source, model, 25, f"{settings.warehouse}/t")
    assert current.kill() == -9  # the SSE connection drops; the HTTP client reconnects with Last-Event-ID
    commit_history(commit_client, source, model, 25, f"{settings.warehouse}/t")
    time.sleep(0.5)
    current = consumer(port=port)  # same URL
    commit_history(commit_client, source, model, 25, f"{settings.warehouse}/t")
    last[0] = model.head
    for reader in readers:
        reader.join(60)
    expected = list(range(model.head + 1))
    assert local_seen == expected
    assert remote_seen == expected


def test_a_new_table_is_followed_within_seconds(
    arbiter: Callable[..., object],
    consumer: Callable[..., ConsumerProcess],
    commit_client: CommitClient,
    settings: Settings,
) -> None:
    arbiter()
    started = consumer()
    created = commit_client.commit(IntentSource("fresh").create(f"{settings.warehouse}/fresh"))
    assert created.accepted
    begin = time.monotonic()
    info = started.catalog().wait_for_version("fresh", 0, timeout=10)
    assert time.monotonic() - begin < 3.0
    assert info.created_time == created.time_version
    assert [t.name for t in started.remote().tables()] == ["fresh"]


def test_a_forged_decision_stops_only_its_table(
    arbiter: Callable[..., object],
    consumer: Callable[..., ConsumerProcess],
    commit_client: CommitClient,
    settings: Settings,
) -> None:
    """Fault injection: a decision that does not chain lands on a decisions topic (not written by the arbiter).

    The log is unsigned, so the consumer reads it in the upgrade mode (``ORDO_REQUIRE_SIGNATURES=false``,
    a log of a release without signing): the hash chain still stops it. (With signatures required the
    forgery is refused before the chain check: tests/integration/test_signed_decisions.py.)"""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from ordo.broker import DECISIONS_CONFIG, create_topics

    arbiter()
    legacy = settings.with_overrides(require_signatures=False)
    started = consumer(settings=legacy)
    # Table "forged": its log is written here from the pure core, with one record whose prev_hash is wrong.
    script = Script("forged", seed=60, location=f"{settings.warehouse}/forged").run(12)
    bad_index = 8
    decisions = script.decisions
    values = [r.value for r in script.records]
    values[bad_index] = encode(decisions[bad_index].model_copy(update={"prev_hash": b"\x01" * 32}))

    create_topics(AdminClient(settings.kafka_config()), {f"{settings.topic_prefix}.forged.decisions": DECISIONS_CONFIG})
    producer = Producer(settings.kafka_config())
    for value in values:
        producer.produce(f"{settings.topic_prefix}.forged.decisions", value)
    assert producer.flush(10) == 0
    # Table "healthy" goes through the arbiter and keeps being served.
    source, model = IntentSource("healthy", seed=61), LiveModel()
    commit_history(commit_client, source, model, 10, f"{settings.warehouse}/healthy")
    catalog = started.catalog()
    catalog.wait_for_version("healthy", model.head, timeout=20)
    deadline = time.monotonic() + 60

    def forged_error() -> str | None:
        try:
            return catalog.table("forged").error
        except TableNotFoundError:  # found, but its CREATE_TABLE not applied yet
            return None

    while forged_error() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    info = catalog.table("forged")
    assert info.error is not None and "hash chain broken" in info.error
    assert info.error_offset == bad_index
    assert info.head_version == max(d.id_version for d in decisions[:bad_index] if d.accepted)  # type: ignore[type-var]
    health = httpx.get(f"{started.url}/healthz").json()
    assert health["status"] == "degraded" and set(health["broken"]) == {"forged"}
    assert 'ordo_consumer_table_broken{table="forged"} 1.0' in httpx.get(f"{started.url}/metrics").text
    assert "hash chain broken" in started.process.log_text()
    commit_history(commit_client, source, model, 5, f"{settings.warehouse}/healthy")
    catalog.wait_for_version("healthy", model.head, timeout=20)
    # After a restart the table stays stopped at the same place; the other one is still followed.
    started.terminate()
    again = consumer(settings=legacy)
    assert again.catalog().table("forged").error_offset == bad_index
    commit_history(commit_client, source, model, 3, f"{settings.warehouse}/healthy")
    again.catalog().wait_for_version("healthy", model.head, timeout=20)


def test_a_log_shorter_than_the_catalog_stops_the_table(
    arbiter: Callable[..., object],
    consumer: Callable[..., ConsumerProcess],
    commit_client: CommitClient,
    settings: Settings,
) -> None:
    """Fault injection: the catalog claims more of the log than the broker has (an in-memory broker restarted)."""
    arbiter()
    started = consumer(http=False)
    source, model = IntentSource("t", seed=70), LiveModel()
    commit_history(commit_client, source, model, 4, f"{settings.warehouse}/t")
    started.catalog().wait_for_version("t", model.head, timeout=20)
    started.terminate()
    conn = sqlite3.connect(started.catalog_path)
    with conn:
        conn.execute("UPDATE tables SET next_offset = next_offset + 1000 WHERE name = 't'")
    conn.close()
    again = consumer(http=False)
    info = again.catalog().table("t")
    assert info.error is not None and "the broker lost records or the topic was recreated" in info.error
    assert info.head_version == model.head


def six_tables_on_postgresql(
    arbiter: Callable[..., object],
    commit_client: CommitClient,
    settings: Settings,
    postgres_server: object,
    stem: str,
    seed: int,
) -> tuple[str, Settings, dict[str, tuple[IntentSource, LiveModel]]]:
    """An arbiter, a fresh PostgreSQL database and six created tables: (its URL, settings on it, sources and models)."""
    from tests.conftest import create_database

    url = create_database(postgres_server)
    arbiter()
    names = [f"{stem}{i}" for i in range(6)]
    tables = {name: (IntentSource(name, seed=seed + i), LiveModel()) for i, name in enumerate(names)}
    for name, (source, model) in tables.items():
        commit_history(commit_client, source, model, 0, f"{settings.warehouse}/{name}")
    return url, settings.with_overrides(catalog=url), tables


def test_several_consumers_share_one_postgresql_catalog(
    arbiter: Callable[..., object],
    consumer: Callable[..., ConsumerProcess],
    commit_client: CommitClient,
    settings: Settings,
    postgres_server: object,
    tmp_path: Path,
) -> None:
    """Two consumers (shards 0/2 and 1/2) and a third following every table (0/1) write one PostgreSQL catalog.

    The third overlaps both: the row claim in each batch's transaction makes them take turns, so the
    shared catalog equals a SQLite catalog built by one consumer alone, row for row, and a second
    machine's reader (a plain ``Catalog`` on the URL) sees every table.
    """
    url, shared, tables = six_tables_on_postgresql(arbiter, commit_client, settings, postgres_server, "s", 60)
    served = consumer(settings=shared, extra=("--shard", "0/2"))  # its HTTP service reads the whole catalog
    consumer(http=False, settings=shared, extra=("--shard", "1/2"))
    overlapping = consumer(http=False, settings=shared, extra=("--shard", "0/1"))
    for _ in range(4):
        for name, (source, model) in tables.items():
            commit_history(commit_client, source, model, 4, f"{settings.warehouse}/{name}")
    overlapping.kill()  # a writer dying mid-batch leaves nothing half-applied for the others
    for name, (source, model) in tables.items():
        commit_history(commit_client, source, model, 3, f"{settings.warehouse}/{name}")
    catalog = Catalog(url)
    for name, (_, model) in tables.items():
        catalog.wait_for_version(name, model.head, timeout=60)
        assert {f.path: f.seq for f in catalog.snapshot(name).files} == model.live(model.head)
        assert served.remote().snapshot(name) == catalog.snapshot(name)  # tables of both shards over HTTP
    alone = consumer(http=False, catalog=tmp_path / "alone.db")
    for name, (_, model) in tables.items():
        alone.catalog().wait_for_version(name, model.head, timeout=60)
    time.sleep(1.5)  # every consumer has read the transaction markers after the last decisions
    assert dump(url) == dump(alone.catalog_path)


def test_a_consumer_group_shares_the_tables_and_moves_a_dead_members_to_the_others(
    arbiter: Callable[..., object],
    consumer: Callable[..., ConsumerProcess],
    commit_client: CommitClient,
    settings: Settings,
    postgres_server: object,
    tmp_path: Path,
) -> None:
    """Two ``ordo consumer --group`` on one PostgreSQL catalog split the tables; one is killed, the other takes its
    tables (after the group's session timeout) and the catalog equals one built by a single consumer, row for row."""
    url, shared, tables = six_tables_on_postgresql(arbiter, commit_client, settings, postgres_server, "g", 80)
    names = list(tables)
    first = consumer(http=False, settings=shared, extra=("--group",), timeout=120)
    second = consumer(http=False, settings=shared, extra=("--group",), timeout=120)
    catalog = Catalog(url)

    def owned(member: ConsumerProcess) -> set[str]:
        """The tables the group gave ``member`` and did not take back, from its log."""
        held: set[str] = set()
        for line in member.process.log_text().splitlines():
            for verb in ("assigned", "revoked", "lost"):
                marker = f" {verb} table(s) "
                if marker in line:
                    found = {t.strip() for t in line.split(marker, 1)[1].split("(")[0].split(",")}
                    held = held | found if verb == "assigned" else held - found
        return held

    def split() -> bool:
        a, b = owned(first), owned(second)
        return bool(a) and bool(b) and not (a & b) and a | b == set(names)

    deadline = time.monotonic() + 90
    while not split():
        assert time.monotonic() < deadline, (owned(first), owned(second))
        time.sleep(0.5)
    for _ in range(2):
        for name, (source, model) in tables.items():
            commit_history(commit_client, source, model, 4, f"{settings.warehouse}/{name}")
    for name, (_, model) in tables.items():
        catalog.wait_for_version(name, model.head, timeout=60)
    orphaned = owned(second)
    second.kill()
    for name, (source, model) in tables.items():
        commit_history(commit_client, source, model, 3, f"{settings.warehouse}/{name}")
    for name, (_, model) in tables.items():  # the dead member's tables move after the session timeout (6 s)
        catalog.wait_for_version(name, model.head, timeout=90)
        assert {f.path: f.seq for f in catalog.snapshot(name).files} == model.live(model.head)
    assert orphaned <= owned(first)
    alone = consumer(http=False, catalog=tmp_path / "alone.db")
    for name, (_, model) in tables.items():
        alone.catalog().wait_for_version(name, model.head, timeout=60)
    time.sleep(1.5)  # every consumer has read the transaction markers after the last decisions
    assert dump(url) == dump(alone.catalog_path)


def test_a_consumer_group_needs_a_shared_catalog(settings: Settings, processes: ProcessGroup, tmp_path: Path) -> None:
    process = processes.start_ordo(
        settings, "consumer", "--catalog", str(tmp_path / "c.db"), "--group", "--no-http", name="consumer-group"
    )
    assert process.wait(timeout=60) != 0
    assert "a consumer group shares one catalog among its members" in process.log_text()
