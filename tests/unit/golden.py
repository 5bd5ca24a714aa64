"""The events pinned by the golden files in tests/golden (regenerate: python -m tests.unit.golden)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from schemas import CommitDecision, CommitIntent, DataFile, Operation, Outcome, Rebase, TableMetadata, encode

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
EVENTS: dict[str, CommitIntent | CommitDecision] = {
    "intent_create_v1": CommitIntent(
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
    "intent_insert_v1": CommitIntent(
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
    "decision_accepted_v1": CommitDecision(
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
    "decision_rejected_v1": CommitDecision(
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
}

if __name__ == "__main__":
    for name, event in EVENTS.items():
        (GOLDEN / f"{name}.bin").write_bytes(encode(event))
        print("wrote", name)
