"""``consumer.models``: the JSON form of every read model is pinned, and ``from_dict`` inverts ``to_dict``.

The expected dicts are what the HTTP service has served since the models were
written (``consumer.http`` -> ``consumer.httpclient``): same keys in the same
order, enums as their values, datetimes as ``datetime.isoformat()``, metadata as
``metadata_to_dict``. Changing one breaks clients of an older or newer version.
(Since the converters are pydantic's, a file's ``"seq"`` is its last key rather
than the one after ``"added_version"``; nothing else moved.)
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from ordo.consumer.models import Commit, DecisionRecord, FileEntry, Snapshot, TableInfo, metadata_to_dict
from ordo.schemas import Operation, Outcome, Rebase, TableMetadata

META = TableMetadata(
    location="s3://b/t",
    schema="id BIGINT, p STRING",
    primary_key=("id",),
    partition_columns=("p",),
    properties={"ordo.buckets": "4"},
)
T0 = datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
T1 = datetime(2024, 1, 2, 3, 4, 6, tzinfo=UTC)
F1 = FileEntry("p=a/f1.parquet", "s3://b/t/p=a/f1.parquet", {"p": "a"}, 10, 1000, "k1", "k9", 3, True, "INSERT_INTO", 2)
F2 = FileEntry("p=b/f2.parquet", "s3://b/t/p=b/f2.parquet", {"p": "b"}, 0, 5, None, None, 4, False, "MINOR_COMPACT")
INFO = TableInfo("db.t", META, 4, T1, T0, 7, 12)
BROKEN = TableInfo("db.t", META, 4, T1, T0, 7, 12, error="chain broken", error_offset=13)
SNAP = Snapshot("db.t", 4, T1, META, (F1, F2))
COMMIT = Commit(
    "db.t", 3, T0, T0, Operation.INSERT_INTO, True, "txn-1", 2, Rebase.NEW_DATA_WRITTEN, ({"p": "a"},),
    "w", "app", 5, 30, 31, (F1,), ("p=a/old.parquet",),
)  # fmt: skip
REWRITE = Commit(
    "db.t", 4, None, T0, Operation.MINOR_COMPACT, False, "txn-2", None, Rebase.NONE, None,
    None, None, None, 32, 33, (F2,), (),
)  # fmt: skip
ACCEPTED = DecisionRecord(
    "db.t", 31, T1, "txn-1", Outcome.ACCEPTED, Operation.INSERT_INTO, 2, 30, 3, T0, T0, Rebase.NEW_DATA_WRITTEN,
    None, None, None, None, "w", "app", 5, None, ({"p": "a"},), 1, 1, 10, 1000, "ab" * 32, "cd" * 32,
)  # fmt: skip
REJECTED = DecisionRecord(
    "db.t", 40, None, "txn-3", Outcome.REJECTED, None, None, 39, None, None, None, Rebase.NONE,
    "CONFLICT", "boom", "txn-1", 3, None, None, None, None, None, 0, 0, 0, 0, None, "ef" * 32,
)  # fmt: skip

META_JSON = {
    "location": "s3://b/t",
    "schema": "id BIGINT, p STRING",
    "primary_key": ["id"],
    "partition_columns": ["p"],
    "properties": {"ordo.buckets": "4"},
}

F1_JSON = {
    "path": "p=a/f1.parquet",
    "absolute_path": "s3://b/t/p=a/f1.parquet",
    "partition": {"p": "a"},
    "record_count": 10,
    "size_bytes": 1000,
    "min_key": "k1",
    "max_key": "k9",
    "added_version": 3,
    "seq": 3,
    "data_change": True,
    "operation": "INSERT_INTO",
    "bucket": 2,
    "seq_version": None,
}

F2_JSON = {
    "path": "p=b/f2.parquet",
    "absolute_path": "s3://b/t/p=b/f2.parquet",
    "partition": {"p": "b"},
    "record_count": 0,
    "size_bytes": 5,
    "min_key": None,
    "max_key": None,
    "added_version": 4,
    "seq": 4,
    "data_change": False,
    "operation": "MINOR_COMPACT",
    "bucket": 0,
    "seq_version": None,
}

INFO_JSON = {
    "name": "db.t",
    "metadata": META_JSON,
    "head_version": 4,
    "head_time_version": "2024-01-02T03:04:06+00:00",
    "created_time": "2024-01-02T03:04:05.678000+00:00",
    "decisions": 7,
    "log_offset": 12,
    "error": None,
    "error_offset": None,
}

BROKEN_JSON = {
    "name": "db.t",
    "metadata": META_JSON,
    "head_version": 4,
    "head_time_version": "2024-01-02T03:04:06+00:00",
    "created_time": "2024-01-02T03:04:05.678000+00:00",
    "decisions": 7,
    "log_offset": 12,
    "error": "chain broken",
    "error_offset": 13,
}

ACCEPTED_JSON = {
    "table": "db.t",
    "log_offset": 31,
    "log_timestamp": "2024-01-02T03:04:06+00:00",
    "txn_id": "txn-1",
    "outcome": "ACCEPTED",
    "operation": "INSERT_INTO",
    "read_version": 2,
    "intent_offset": 30,
    "id_version": 3,
    "time_version": "2024-01-02T03:04:05.678000+00:00",
    "timestamp": "2024-01-02T03:04:05.678000+00:00",
    "rebase": "NEW_DATA_WRITTEN",
    "reason": None,
    "message": None,
    "conflicting_txn_id": None,
    "conflicting_version": None,
    "writer": "w",
    "app_id": "app",
    "batch_id": 5,
    "duplicate_of": None,
    "partitions": [{"p": "a"}],
    "files_added": 1,
    "files_removed": 1,
    "records_added": 10,
    "bytes_added": 1000,
    "prev_hash": "abababababababababababababababababababababababababababababababab",
    "hash": "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd",
    "restore_version": None,
    "operation_metrics": {},
}

REJECTED_JSON = {
    "table": "db.t",
    "log_offset": 40,
    "log_timestamp": None,
    "txn_id": "txn-3",
    "outcome": "REJECTED",
    "operation": None,
    "read_version": None,
    "intent_offset": 39,
    "id_version": None,
    "time_version": None,
    "timestamp": None,
    "rebase": "NONE",
    "reason": "CONFLICT",
    "message": "boom",
    "conflicting_txn_id": "txn-1",
    "conflicting_version": 3,
    "writer": None,
    "app_id": None,
    "batch_id": None,
    "duplicate_of": None,
    "partitions": None,
    "files_added": 0,
    "files_removed": 0,
    "records_added": 0,
    "bytes_added": 0,
    "prev_hash": None,
    "hash": "efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef",
    "restore_version": None,
    "operation_metrics": {},
}

SNAP_JSON = {
    "table": "db.t",
    "id_version": 4,
    "time_version": "2024-01-02T03:04:06+00:00",
    "metadata": META_JSON,
    "files": [F1_JSON, F2_JSON],
}

COMMIT_JSON = {
    "table": "db.t",
    "id_version": 3,
    "time_version": "2024-01-02T03:04:05.678000+00:00",
    "timestamp": "2024-01-02T03:04:05.678000+00:00",
    "operation": "INSERT_INTO",
    "data_change": True,
    "txn_id": "txn-1",
    "read_version": 2,
    "rebase": "NEW_DATA_WRITTEN",
    "partitions": [{"p": "a"}],
    "writer": "w",
    "app_id": "app",
    "batch_id": 5,
    "intent_offset": 30,
    "log_offset": 31,
    "added_files": [F1_JSON],
    "removed_files": ["p=a/old.parquet"],
}

REWRITE_JSON = {
    "table": "db.t",
    "id_version": 4,
    "time_version": None,
    "timestamp": "2024-01-02T03:04:05.678000+00:00",
    "operation": "MINOR_COMPACT",
    "data_change": False,
    "txn_id": "txn-2",
    "read_version": None,
    "rebase": "NONE",
    "partitions": None,
    "writer": None,
    "app_id": None,
    "batch_id": None,
    "intent_offset": 32,
    "log_offset": 33,
    "added_files": [F2_JSON],
    "removed_files": [],
}

CASES: list[tuple[Any, dict[str, Any]]] = [
    (F1, F1_JSON),
    (F2, F2_JSON),
    (INFO, INFO_JSON),
    (BROKEN, BROKEN_JSON),
    (SNAP, SNAP_JSON),
    (COMMIT, COMMIT_JSON),
    (REWRITE, REWRITE_JSON),
    (ACCEPTED, ACCEPTED_JSON),
    (REJECTED, REJECTED_JSON),
]
IDS = ["file", "file-compacted", "table", "table-broken", "snapshot", "commit", "rewrite", "accepted", "rejected"]


@pytest.mark.parametrize(("model", "expected"), CASES, ids=IDS)
def test_to_dict_is_the_pinned_json(model: Any, expected: dict[str, Any]) -> None:
    data = model.to_dict()
    assert data == expected
    assert json.loads(json.dumps(data)) == expected  # nothing but JSON types (a tuple is not equal to a list)
    # The keys keep their order, but for a file's "seq" (a computed field, now the last key; JSON objects are unordered).
    assert [k for k in data if k != "seq"] == [k for k in expected if k != "seq"]


@pytest.mark.parametrize(("model", "expected"), CASES, ids=IDS)
def test_from_dict_inverts_to_dict(model: Any, expected: dict[str, Any]) -> None:
    back = type(model).from_dict(json.loads(json.dumps(expected)))
    assert back == model
    assert back.to_dict() == expected


def test_metadata_json_is_metadata_to_dict() -> None:
    assert metadata_to_dict(META) == META_JSON
    assert TableInfo.from_dict(INFO_JSON).metadata == META


def test_a_file_of_a_consumer_older_than_buckets_is_in_bucket_0() -> None:
    old = {k: v for k, v in F1_JSON.items() if k != "bucket"}
    assert FileEntry.from_dict(old) == replace(F1, bucket=0)


def test_optional_keys_may_be_missing_from_older_payloads() -> None:
    optional = ("time_version", "read_version", "rebase", "partitions", "writer", "app_id", "batch_id")
    commit = {k: v for k, v in COMMIT_JSON.items() if k not in (*optional, "added_files", "removed_files")}
    assert Commit.from_dict(commit) == replace(
        COMMIT,
        time_version=None,
        read_version=None,
        rebase=Rebase.NONE,
        partitions=None,
        writer=None,
        app_id=None,
        batch_id=None,
        added_files=(),
        removed_files=(),
    )
    required = ("table", "log_offset", "txn_id", "outcome", "intent_offset", "hash")
    decision = {k: v for k, v in ACCEPTED_JSON.items() if k in required}
    defaults: dict[str, Any] = {k: None for k in ACCEPTED_JSON if k not in required}
    counts = {"files_added": 0, "files_removed": 0, "records_added": 0, "bytes_added": 0, "operation_metrics": {}}
    assert DecisionRecord.from_dict(decision) == replace(ACCEPTED, **{**defaults, "rebase": Rebase.NONE, **counts})
    table = {k: v for k, v in BROKEN_JSON.items() if k not in ("error", "error_offset")}
    assert TableInfo.from_dict(table) == INFO


def test_a_snapshots_json_bytes_are_its_dict() -> None:
    """The HTTP service writes a snapshot with ``to_json`` (one pass); it reads back as ``to_dict``."""
    assert json.loads(SNAP.to_json()) == SNAP_JSON
    assert Snapshot.from_dict(json.loads(SNAP.to_json())) == SNAP
