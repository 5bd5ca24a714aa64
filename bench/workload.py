"""Workloads shared by the benchmarks: intents as the arbiter sees them, and the decisions it writes."""

from __future__ import annotations

from dataclasses import dataclass

from ordo.arbiter.core import TableState, apply, evaluate_record, new_state
from ordo.schemas import CommitDecision, CommitIntent, DataFile, Operation, TableMetadata, encode

TABLE = "bench"
BASE_TS = 1_700_000_000_000


def create_intent(table: str = TABLE, partitioned: bool = True) -> CommitIntent:
    """CREATE_TABLE of a table partitioned by ``p``."""
    return CommitIntent(
        txn_id=f"create-{table}",
        table=table,
        operation=Operation.CREATE_TABLE,
        read_version=0,
        metadata=TableMetadata(
            location=f"/warehouse/{table}",
            schema="id BIGINT, v STRING, p STRING",
            primary_key=("id",),
            partition_columns=("p",) if partitioned else (),
        ),
        writer="bench",
    )


def insert_intent(
    i: int,
    files: int = 4,
    *,
    table: str = TABLE,
    partition: str | None = None,
    read_version: int = 0,
    operation: Operation = Operation.INSERT_INTO,
    txn_prefix: str = "txn",
) -> CommitIntent:
    """A metadata-only commit of ``files`` files into partition ``partition`` (default: its own, ``i``)."""
    value = partition if partition is not None else f"{i:07d}"
    spec = {"p": value}
    return CommitIntent(
        txn_id=f"{txn_prefix}-{i}",
        table=table,
        operation=operation,
        read_version=read_version,
        partitions=(spec,),
        added_files=tuple(
            DataFile(
                path=f"p={value}/{txn_prefix}-{i}-{j}.parquet",
                partition=spec,
                record_count=1000,
                size_bytes=65536,
                min_key=str(i * 1000),
                max_key=str(i * 1000 + 999),
            )
            for j in range(files)
        ),
        writer="bench",
    )


def insert_records(n: int, files: int = 4) -> list[tuple[bytes, bytes]]:
    """``(key, value)`` of CREATE_TABLE then ``n`` non-conflicting INSERT_INTOs, each into its own partition."""
    intents = [create_intent(), *(insert_intent(i, files) for i in range(n))]
    return [(intent.txn_id.encode(), encode(intent)) for intent in intents]


@dataclass
class Folded:
    """The pure core run over a list of intent records."""

    state: TableState
    decisions: list[CommitDecision]
    encoded: list[bytes]


def fold(values: list[bytes], table: str = TABLE, keep: bool = True) -> Folded:
    """Decide ``values`` (intent record bytes, offsets 0..) with the pure core, as the arbiter would."""
    state = new_state(table)
    decisions: list[CommitDecision] = []
    encoded: list[bytes] = []
    for offset, value in enumerate(values):
        decision = evaluate_record(state, value, BASE_TS + offset, offset)
        data = encode(decision)
        apply(state, decision, data)
        if keep:
            decisions.append(decision)
            encoded.append(data)
    return Folded(state, decisions, encoded)
