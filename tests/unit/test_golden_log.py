"""Logs written by every released version stay readable: replay verifies them and the catalog rebuilds the same.

The golden logs under ``tests/golden/log-<release>/`` were written by that
release's own stack (``tests/golden/make_golden_log.py``); see docs/upgrading.md.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ordo.schemas import CodecError, CommitDecision, CommitIntent, Operation, Outcome, Rebase, decode

from .golden_log import (
    RELEASES,
    all_records,
    dump_catalog,
    expected_catalog,
    manifest,
    rebuild_catalog,
    tables,
    verify_table,
)

CASES = [(release, table) for release in RELEASES for table in tables(release)]


@pytest.mark.parametrize(("release", "table"), CASES, ids=[f"{r}-{t}" for r, t in CASES])
def test_replay_verify_passes_on_the_golden_log(release: str, table: str) -> None:
    result = verify_table(release, table)
    assert result.ok, [(p.kind, p.decision_offset, p.message) for p in result.problems]
    assert result.verified_log
    assert result.report.intents == result.report.decisions == result.report.matched > 0
    assert result.report.pending == 0


@pytest.mark.parametrize("release", RELEASES)
def test_the_catalog_rebuilt_from_the_golden_log_equals_the_one_that_release_built(
    release: str, tmp_path: Path
) -> None:
    rebuilt = rebuild_catalog(release, tmp_path / "catalog.db")
    expected = expected_catalog(release)
    assert sorted(rebuilt) == sorted(expected)
    for table in expected:
        for part in ("metadata", "head_version", "head_time_version", "created_time", "decisions", "log_offset"):
            assert rebuilt[table][part] == expected[table][part], (table, part)
        assert rebuilt[table]["versions"] == expected[table]["versions"], table
        assert rebuilt[table]["history"] == expected[table]["history"], table
    assert rebuilt == expected
    from ordo.consumer import Catalog

    with Catalog(tmp_path / "catalog.db") as catalog:  # 0.1 had no buckets: every file reads as bucket 0
        assert all(f.bucket == 0 for t in expected for f in catalog.snapshot(t).files)


@pytest.mark.parametrize("release", RELEASES)
def test_every_golden_record_decodes_except_the_deliberately_malformed_one(release: str) -> None:
    undecodable = []
    for table, kind, record in all_records(release):
        try:
            event = decode(record.value) if record.value is not None else None
        except CodecError:
            undecodable.append((table, kind, record.offset))
            continue
        assert isinstance(event, CommitIntent if kind == "intents" else CommitDecision), (table, kind, record.offset)
        assert event.table == table
    assert undecodable == [("orders", "intents", 14)]


def test_every_current_schema_golden_record_encodes_back_to_its_very_bytes() -> None:
    """The writers (generated from the codec's field tables) write what the release wrote, byte for byte.

    Each record of the newest golden log, decoded by the fast path and by the reference path (plain tuples, so
    nothing copies an intent's own bytes), encodes back to the same value: fast writer and fastavro alike."""
    import io

    import fastavro

    from ordo.schemas.codec import DEFAULT_CODEC, _to_record

    release = RELEASES[-1]
    checked = 0
    for _table, _kind, record in all_records(release):
        if not DEFAULT_CODEC.is_current(record.value):
            continue
        try:
            fast = decode(record.value)
        except CodecError:
            continue  # the deliberately malformed intent
        model, plain = DEFAULT_CODEC.decode_dict(record.value)
        reference = model.model_validate(plain)
        by_fastavro = io.BytesIO()
        by_fastavro.write(DEFAULT_CODEC.header_of(model))
        fastavro.schemaless_writer(by_fastavro, DEFAULT_CODEC.schema_of(model), _to_record(reference))
        assert DEFAULT_CODEC.encode(fast) == DEFAULT_CODEC.encode(reference) == by_fastavro.getvalue() == record.value
        checked += 1
    assert checked > 50, checked


def _operations_of(release: str) -> set[str]:
    """The Operation symbols of ``release``'s decision schema (ALTER_TABLE came in 0.3)."""
    import json

    from ordo.schemas.history import HISTORY_DIR

    schema = json.loads((HISTORY_DIR / f"CommitDecision.{release}.avsc").read_text())
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if node.get("type") == "enum" and node.get("name", "").endswith("Operation"):
                found.update(node["symbols"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return found


@pytest.mark.parametrize("release", RELEASES)
def test_the_golden_log_covers_every_operation_rebase_and_rejection(release: str) -> None:
    accepted: set[Operation] = set()
    rebases: set[Rebase] = set()
    reasons: set[str] = set()
    duplicates = 0
    partition_columns = set()
    for _, kind, record in all_records(release):
        if kind != "decisions":
            continue
        decision = decode(record.value)  # type: ignore[arg-type]
        assert isinstance(decision, CommitDecision)
        if decision.duplicate_of is not None:
            duplicates += 1
        elif decision.outcome is Outcome.ACCEPTED:
            assert decision.operation is not None
            accepted.add(decision.operation)
            rebases.add(decision.rebase)
            if decision.metadata is not None:
                partition_columns.add(len(decision.metadata.partition_columns))
        else:
            reasons.add(decision.reason or "")
    assert {op.value for op in accepted} == _operations_of(release)
    assert rebases == set(Rebase)
    assert {"CONFLICT_LATER_FAILS", "MALFORMED_INTENT", "BATCH_ALREADY_COMMITTED", "TABLE_EXISTS"} <= reasons
    assert duplicates >= 2
    assert {0, 2} <= partition_columns
    assert len(manifest(release)["tables"]) >= 3


def test_a_catalog_written_before_the_bucket_column_is_read_and_then_migrated(tmp_path: Path) -> None:
    """A version-1 catalog (no ``files.bucket``): readers see bucket 0; the upgraded consumer migrates it in place."""
    import sqlite3

    from ordo.consumer import Catalog
    from ordo.consumer.store import SCHEMA_VERSION, CatalogWriter

    path = tmp_path / "catalog.db"
    expected = rebuild_catalog("0.1", path)
    conn = sqlite3.connect(path)
    conn.execute("DROP INDEX files_group")  # a version-1 catalog has neither the column nor its index
    conn.execute("ALTER TABLE files DROP COLUMN bucket")
    conn.execute("ALTER TABLE files DROP COLUMN seq_version")  # nor RESTORE's (0.4)
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with Catalog(path) as catalog:
        files = catalog.snapshot("orders").files
        assert files and all(f.bucket == 0 for f in files)
        partition = files[0].partition  # the per-group look-up reads a catalog with no bucket column as bucket 0
        assert sorted(map(str, catalog.snapshot("orders", groups=[(partition, 0)]).files)) == sorted(
            str(f) for f in files if f.partition == partition
        )
        assert catalog.snapshot("orders", groups=[(partition, 1)]).files == ()
    assert dump_catalog(path, tables("0.1")) == expected
    CatalogWriter(path, manifest("0.1")["topic_prefix"]).close()  # what a consumer does at start
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert {"bucket", "seq_version"} <= {row[1] for row in conn.execute("PRAGMA table_info(files)")}
    assert conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'files_group'").fetchone()
    conn.close()
    with Catalog(path) as catalog:  # the change feed's per-group look-up on the migrated catalog
        whole = catalog.snapshot("orders").files
        one = whole[0]
        group = catalog.snapshot("orders", groups=[(one.partition, one.bucket)]).files
        assert sorted(map(str, group)) == sorted(
            str(f) for f in whole if f.partition == one.partition and f.bucket == one.bucket
        )
    assert dump_catalog(path, tables("0.1")) == expected


def test_a_catalog_written_before_restore_is_read_and_then_migrated(tmp_path: Path) -> None:
    """A version-3 catalog (0.3: no ``files.seq_version``): readers see each file's own version as its sequence;
    the upgraded consumer adds the column in place and goes on with a 0.4 log."""
    import sqlite3

    from ordo.consumer import Catalog
    from ordo.consumer.store import SCHEMA_VERSION, CatalogWriter

    path = tmp_path / "catalog.db"
    expected = rebuild_catalog("0.3", path)
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE files DROP COLUMN seq_version")
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    with Catalog(path) as catalog:
        files = catalog.snapshot("events").files
        assert files and all(f.seq_version is None and f.seq == f.added_version for f in files)
    assert dump_catalog(path, tables("0.3")) == expected
    CatalogWriter(path, manifest("0.3")["topic_prefix"]).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    assert "seq_version" in {row[1] for row in conn.execute("PRAGMA table_info(files)")}
    conn.close()
    assert dump_catalog(path, tables("0.3")) == expected


def test_a_catalog_written_before_operation_metrics_is_read_and_then_migrated(
    catalog_at: Callable[[str], str],
) -> None:
    """A version-4 catalog (0.4: no ``decisions.operation_metrics``), SQLite or PostgreSQL: readers see no
    metrics; the upgraded consumer adds the column in place, and a 0.5 decision's metrics are then kept."""
    from ordo.consumer import Catalog
    from ordo.consumer.store import SCHEMA_VERSION, CatalogWriter, _has_column
    from ordo.consumer.stores import open_store

    location = catalog_at("catalog.db")
    expected = rebuild_catalog("0.4", location)
    store = open_store(location)

    def columns_and_version() -> tuple[bool, int]:
        conn = store.connect()
        try:
            return _has_column(conn, "decisions", "operation_metrics"), store.schema_version(conn)
        finally:
            conn.close()

    conn = store.connect()
    try:
        store.begin_write(conn)
        conn.execute("ALTER TABLE decisions DROP COLUMN operation_metrics")
        store.set_schema_version(conn, 4)
        conn.execute("COMMIT")
    finally:
        conn.close()
    assert columns_and_version() == (False, 4)
    with Catalog(location) as catalog:
        history = catalog.history("customers")
        assert history and all(d.operation_metrics == {} for d in history)
    assert dump_catalog(location, tables("0.4")) == expected
    CatalogWriter(location, manifest("0.4")["topic_prefix"]).close()  # what a 0.5 consumer does at start
    assert columns_and_version() == (True, SCHEMA_VERSION) == (True, 5)
    assert dump_catalog(location, tables("0.4")) == expected


def test_a_merges_metrics_are_in_the_0_5_catalog_and_hostile_claims_are_rejected(tmp_path: Path) -> None:
    """The 0.5 log: the MERGE's metrics reach the catalog as its writer counted them; claims the arbiter
    refused (more rows than records, a metric an UPDATE or DELETE may not claim) are INVALID_METRICS."""
    from ordo.consumer import Catalog

    rebuild_catalog("0.5", tmp_path / "catalog.db")
    with Catalog(tmp_path / "catalog.db") as catalog:
        by_txn = {d.txn_id: d for d in catalog.history("customers")}
    merge = by_txn["c-merge"]
    assert (merge.id_version, merge.records_added) == (8, 21)
    assert merge.operation_metrics == {"numTargetRowsInserted": 3, "numTargetRowsUpdated": 2, "numTargetRowsDeleted": 1}
    for txn in ("c-merge-lies", "c-upd-claims", "c-del-negative"):
        assert (by_txn[txn].reason, by_txn[txn].operation_metrics) == ("INVALID_METRICS", {}), txn
    assert "100 changed rows" in (by_txn["c-merge-lies"].message or "")
    assert by_txn["c-del2"].accepted and by_txn["c-del2"].operation_metrics == {}


def test_a_restored_file_keeps_its_first_sequence_in_the_0_4_catalog(tmp_path: Path) -> None:
    """The 0.4 log restores events to version 2 and then to 7: each re-added file reads with the sequence of
    the commit that first wrote it, and its operation."""
    from ordo.consumer import Catalog

    path = tmp_path / "catalog.db"
    rebuild_catalog("0.4", path)
    with Catalog(path) as catalog:
        at_8 = {f.path: (f.added_version, f.seq, f.operation) for f in catalog.snapshot("events", 8).files}
        assert at_8 == {
            "dt=2024-01-01/e-ins1-0.parquet": (8, 1, "INSERT_INTO"),
            "dt=2024-01-02/e-ins2-0.parquet": (8, 2, "INSERT_INTO"),
        }
        at_9 = {f.path: (f.added_version, f.seq, f.operation) for f in catalog.snapshot("events", 9).files}
        assert at_9 == {
            "dt=2024-01-02/e-ovw-all2-0.parquet": (9, 3, "INSERT_OVERWRITE"),
            "dt=2024-01-01/e-ins3-0.parquet": (9, 5, "INSERT_INTO"),
            "dt=2024-01-02/e-ins4-0.parquet": (9, 7, "INSERT_INTO"),
        }
        restores = {d.txn_id: (d.id_version, d.restore_version) for d in catalog.history("events") if d.restore_version}
        assert restores == {
            "e-restore2": (8, 2),
            "e-restore7": (9, 7),
            "e-restore-smuggle": (None, 2),
            "e-restore-ahead": (None, 9),
        }


def _continued_by_this_release() -> tuple[list, list]:  # type: ignore[type-arg]
    """The 0.1 ``orders`` log continued by this release's arbiter: what a rolling upgrade leaves in the topics."""
    from ordo.arbiter.core import apply, evaluate_record, rebuild
    from ordo.arbiter.replay import DecisionRecord, IntentRecord
    from ordo.schemas import DataFile, encode

    from .golden_log import decision_records, intent_records

    intents = intent_records("0.1", "orders")
    decisions = decision_records("0.1", "orders")
    state = rebuild("orders", [d.value for d in decisions if d.value is not None])
    spec = {"region": "eu", "dt": "2024-01-03"}
    offset, log_offset = intents[-1].offset + 1, decisions[-1].offset + 2
    timestamp = intents[-1].timestamp + 1_000
    for n in range(3):
        intent = CommitIntent(
            txn_id=f"o-02-{n}",
            table="orders",
            operation=Operation.INSERT_INTO,
            read_version=state.head_version,
            partitions=(spec,),
            added_files=(
                DataFile(
                    path=f"region=eu/dt=2024-01-03/o-02-{n}-0.parquet",
                    partition=spec,
                    record_count=5,
                    size_bytes=500,
                    bucket=0,  # a 0.1 table has no ordo.buckets: one bucket (INVALID_BUCKET otherwise)
                ),
            ),
        )
        record = IntentRecord(offset + n, timestamp + n, encode(intent))
        decision = evaluate_record(state, record.value, record.timestamp, record.offset)
        data = encode(decision)
        apply(state, decision, data)
        intents.append(record)
        decisions.append(DecisionRecord(log_offset + 2 * n, data))
    return intents, decisions


def test_a_0_1_log_continued_by_this_release_verifies_and_materializes(tmp_path: Path) -> None:
    """Rolling upgrade: the new arbiter appends to an old log; replay and the consumer take both schemas in one log."""
    from ordo.consumer import Catalog
    from ordo.consumer.store import CatalogWriter, LogRecord
    from ordo.services.audit import audit

    intents, decisions = _continued_by_this_release()
    result = audit("orders", intents, decisions, verify=True)
    assert result.ok, [(p.kind, p.decision_offset, p.message) for p in result.problems]
    assert result.report.matched == len(intents) == 19
    writer = CatalogWriter(tmp_path / "c.db", "golden")
    applied = writer.apply([LogRecord("orders", d.offset, None, d.value) for d in decisions])
    writer.close()
    assert not applied.broken and applied.applied == 19
    with Catalog(tmp_path / "c.db") as catalog:
        buckets = {f.path: f.bucket for f in catalog.snapshot("orders").files}
    assert buckets["region=eu/dt=2024-01-03/o-02-2-0.parquet"] == 0
    assert buckets["region=us/dt=2024-01-01/o-ovw-us-0.parquet"] == 0


def test_an_edited_0_1_decision_is_still_caught(tmp_path: Path) -> None:
    """Matching older-schema records by content does not let an edit through, in either schema."""
    import io

    import fastavro

    from ordo.arbiter.replay import DecisionRecord
    from ordo.schemas import encode
    from ordo.schemas.history import HISTORY_DIR
    from ordo.services.audit import audit

    intents, decisions = _continued_by_this_release()
    target = 4  # a 0.1 decision in the middle of the log
    original = decode(decisions[target].value)  # type: ignore[arg-type]
    assert isinstance(original, CommitDecision)
    writer = fastavro.parse_schema(
        __import__("json").loads((HISTORY_DIR / "CommitDecision.0.1.avsc").read_text()), named_schemas={}
    )
    record = original.model_dump(mode="python")
    record["added_files"] = [{k: v for k, v in f.items() if k != "bucket"} for f in record["added_files"]]
    record["partitions"] = None if record["partitions"] is None else ("array", list(record["partitions"]))
    record["message"] = "forged"
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, writer, record)
    forged_old = decisions[target].value[:10] + buffer.getvalue()  # type: ignore[index]
    for forged in (forged_old, encode(original.model_copy(update={"message": "forged"}))):
        tampered = [*decisions[:target], DecisionRecord(decisions[target].offset, forged), *decisions[target + 1 :]]
        result = audit("orders", intents, tampered, verify=True)
        assert not result.ok
        assert {p.kind for p in result.problems} >= {"edited", "chain"}, result.problems
    # the same content re-encoded in the current schema: that record matches, but the next one's prev_hash
    # names the bytes that were logged, so the log no longer verifies from there
    same = encode(original)
    assert same != decisions[target].value
    result = audit(
        "orders",
        intents,
        [*decisions[:target], DecisionRecord(decisions[target].offset, same), *decisions[target + 1 :]],
    )
    assert {p.kind for p in result.problems} == {"chain", "edited"}
    assert {p.decision_offset for p in result.problems} == {decisions[target + 1].offset}


def test_an_older_schema_decision_is_compared_on_the_fields_it_has() -> None:
    """A decision field added later (here: an older schema without ``prev_hash``) is not held against an old record."""
    import copy
    import io
    import json

    import fastavro

    from ordo.arbiter.replay import _same_in_older_schema
    from ordo.schemas.codec import DEFAULT_CODEC, MAGIC
    from ordo.schemas.history import HISTORY_DIR

    from .golden_log import decision_records

    logged = decode(decision_records("0.1", "orders")[3].value)  # type: ignore[arg-type]
    assert isinstance(logged, CommitDecision) and logged.prev_hash is not None
    older = copy.deepcopy(json.loads((HISTORY_DIR / "CommitDecision.0.1.avsc").read_text()))
    assert older["fields"][-1]["name"] == "prev_hash"
    del older["fields"][-1]
    fp = DEFAULT_CODEC.register_writer_schema(older, CommitDecision)
    try:
        record = logged.model_dump(mode="python")
        record["added_files"] = [{k: v for k, v in f.items() if k != "bucket"} for f in record["added_files"]]
        record["partitions"] = None if record["partitions"] is None else ("array", list(record["partitions"]))
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, fastavro.parse_schema(older, named_schemas={}), record)
        data = MAGIC + fp + buffer.getvalue()
        assert decode(data).prev_hash is None  # type: ignore[union-attr]
        assert DEFAULT_CODEC.writer_fields(data) == frozenset(CommitDecision.model_fields) - {
            "prev_hash",
            "restore_version",
            "operation_metrics",
        }
        assert _same_in_older_schema(data, logged)
        assert not _same_in_older_schema(data, logged.model_copy(update={"message": "other"}))
        assert not _same_in_older_schema(encode_current(logged), logged.model_copy(update={"prev_hash": None}))
    finally:
        del DEFAULT_CODEC._by_fingerprint[fp]


def encode_current(decision: CommitDecision) -> bytes:
    """``decision`` in the current schema (only identical bytes match there)."""
    from ordo.schemas import encode

    return encode(decision)
