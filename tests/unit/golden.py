"""The events pinned by the golden files in tests/golden (write the current release's: python -m tests.unit.golden).

``<event>_<suffix>.bin`` is the event encoded by the release ``BINS[suffix]``.
Files of released versions are never rewritten: each must keep decoding to
the same event; the current release's must also be what ``encode`` writes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ordo.schemas import CommitDecision, CommitIntent, DataFile, Operation, Outcome, Rebase, TableMetadata, encode

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

FILES = (
    DataFile(
        path="dt=2024-01-01/t1-0.parquet",
        partition={"dt": "2024-01-01"},
        record_count=3,
        size_bytes=1200,
        min_key="1",
        max_key="3",
    ),
)
# The sales table's metadata once a CHECK constraint is added (since 0.6).
CONSTRAINED = TableMetadata(
    location="/warehouse/sales",
    schema="id BIGINT, amount DOUBLE, dt STRING, `note` string",
    primary_key=("id",),
    partition_columns=("dt",),
    properties={"owner": "team-b", "delta.constraints.positive_amount": "amount > 0"},
)
EVENTS: dict[str, CommitIntent | CommitDecision] = {
    "intent_create": CommitIntent(
        txn_id="create-sales",
        table="sales",
        operation=Operation.CREATE_TABLE,
        read_version=0,
        metadata=TableMetadata(
            location="/warehouse/sales",
            schema="id BIGINT, amount DOUBLE, dt STRING",
            primary_key=("id",),
            partition_columns=("dt",),
            properties={"owner": "team-a"},
        ),
        writer="spark-app-1",
    ),
    "intent_insert": CommitIntent(
        txn_id="t1",
        table="sales",
        operation=Operation.INSERT_INTO,
        read_version=0,
        partitions=({"dt": "2024-01-01"},),
        added_files=FILES,
        app_id="query-7",
        batch_id=42,
        writer="stream-1",
    ),
    "decision_accepted": CommitDecision(
        txn_id="t1",
        table="sales",
        intent_offset=1,
        outcome=Outcome.ACCEPTED,
        id_version=1,
        time_version=datetime(2024, 1, 1, 12, 0, 0, 123000, tzinfo=UTC),
        operation=Operation.INSERT_INTO,
        read_version=0,
        partitions=({"dt": "2024-01-01"},),
        added_files=FILES,
        rebase=Rebase.NEW_DATA_WRITTEN,
        writer="stream-1",
        app_id="query-7",
        batch_id=42,
        prev_hash=bytes(range(32)),
    ),
    "decision_rejected": CommitDecision(
        txn_id="t2",
        table="sales",
        intent_offset=2,
        outcome=Outcome.REJECTED,
        operation=Operation.INSERT_INTO,
        read_version=0,
        reason="CONFLICT_LATER_FAILS",
        message="conflicts with t1",
        conflicting_txn_id="t1",
        conflicting_version=1,
        prev_hash=bytes(32),
    ),
    "intent_alter": CommitIntent(
        txn_id="alter-sales",
        table="sales",
        operation=Operation.ALTER_TABLE,
        read_version=1,
        metadata=TableMetadata(
            location="/warehouse/sales",
            schema="id BIGINT, amount DOUBLE, dt STRING, `note` string",
            primary_key=("id",),
            partition_columns=("dt",),
            properties={"owner": "team-b"},
        ),
        writer="spark-app-1",
    ),
    "decision_alter": CommitDecision(
        txn_id="alter-sales",
        table="sales",
        intent_offset=3,
        outcome=Outcome.ACCEPTED,
        id_version=2,
        time_version=datetime(2024, 1, 1, 12, 5, 0, tzinfo=UTC),
        operation=Operation.ALTER_TABLE,
        read_version=1,
        metadata=TableMetadata(
            location="/warehouse/sales",
            schema="id BIGINT, amount DOUBLE, dt STRING, `note` string",
            primary_key=("id",),
            partition_columns=("dt",),
            properties={"owner": "team-b"},
        ),
        writer="spark-app-1",
        prev_hash=bytes(range(32, 64)),
    ),
    "intent_restore": CommitIntent(
        txn_id="restore-sales",
        table="sales",
        operation=Operation.RESTORE,
        read_version=3,
        added_files=(
            DataFile(path="dt=2024-01-01/t1-0.parquet", partition={"dt": "2024-01-01"}, record_count=2, size_bytes=7),
        ),
        writer="spark-app-1",
        restore_version=1,
    ),
    "decision_restore": CommitDecision(
        txn_id="restore-sales",
        table="sales",
        intent_offset=5,
        outcome=Outcome.ACCEPTED,
        id_version=4,
        time_version=datetime(2024, 1, 1, 12, 9, 0, tzinfo=UTC),
        operation=Operation.RESTORE,
        read_version=3,
        added_files=(
            DataFile(path="dt=2024-01-01/t1-0.parquet", partition={"dt": "2024-01-01"}, record_count=2, size_bytes=7),
        ),
        removed_files=("dt=2024-01-01/t3-0.parquet",),
        rebase=Rebase.NONE,
        writer="spark-app-1",
        prev_hash=bytes(range(64, 96)),
        restore_version=1,
    ),
    "intent_merge": CommitIntent(
        txn_id="merge-sales",
        table="sales",
        operation=Operation.UPDATE,
        read_version=4,
        added_files=FILES,
        writer="spark-app-1",
        operation_metrics={"numTargetRowsInserted": 1, "numTargetRowsUpdated": 2, "numTargetRowsDeleted": 0},
    ),
    "decision_merge": CommitDecision(
        txn_id="merge-sales",
        table="sales",
        intent_offset=6,
        outcome=Outcome.ACCEPTED,
        id_version=5,
        time_version=datetime(2024, 1, 1, 12, 10, 0, tzinfo=UTC),
        operation=Operation.UPDATE,
        read_version=4,
        added_files=FILES,
        writer="spark-app-1",
        prev_hash=bytes(range(96, 128)),
        operation_metrics={"numTargetRowsInserted": 1, "numTargetRowsUpdated": 2, "numTargetRowsDeleted": 0},
    ),
    "intent_constraint": CommitIntent(
        txn_id="constraint-sales",
        table="sales",
        operation=Operation.ADD_CONSTRAINT,
        read_version=5,
        metadata=CONSTRAINED,
        writer="spark-app-1",
    ),
    "decision_constraint": CommitDecision(
        txn_id="constraint-sales",
        table="sales",
        intent_offset=7,
        outcome=Outcome.ACCEPTED,
        id_version=6,
        time_version=datetime(2024, 1, 1, 12, 11, 0, tzinfo=UTC),
        operation=Operation.ADD_CONSTRAINT,
        read_version=5,
        metadata=CONSTRAINED,
        writer="spark-app-1",
        prev_hash=bytes(range(128, 160)),
    ),
}

BINS = {"v1": "0.1", "v2": "0.2", "v3": "0.3", "v4": "0.4", "v5": "0.5", "v6": "0.6"}  # suffix -> the release
CURRENT = "v6"
# Events a release could not write before (ALTER_TABLE: 0.3, RESTORE: 0.4, operation metrics: 0.5, constraints: 0.6).
SINCE = {
    "intent_alter": "v3",
    "decision_alter": "v3",
    "intent_restore": "v4",
    "decision_restore": "v4",
    "intent_merge": "v5",
    "decision_merge": "v5",
    "intent_constraint": "v6",
    "decision_constraint": "v6",
}
GOLDEN_BINS = [(name, suffix) for name in sorted(EVENTS) for suffix in sorted(BINS) if suffix >= SINCE.get(name, "v1")]

if __name__ == "__main__":
    for name, event in EVENTS.items():
        path = GOLDEN / f"{name}_{CURRENT}.bin"
        if path.exists() and path.read_bytes() != encode(event):
            raise SystemExit(f"{path} was written by a released version and differs: add a new suffix to BINS")
        path.write_bytes(encode(event))
        print("wrote", path.name)
