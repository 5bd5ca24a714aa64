"""Small builders for core tests: a table, intents, and a driver that numbers offsets and timestamps."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ordo.arbiter.core import TableState, decide, new_state
from ordo.arbiter.policy import OpClass
from ordo.schemas import CommitDecision, CommitIntent, DataFile, Operation, TableMetadata

# One representative operation per matrix class.
CLASS_OPERATION = {
    OpClass.OVERWRITE: Operation.INSERT_OVERWRITE,
    OpClass.INSERT: Operation.INSERT_INTO,
    OpClass.UPDATE: Operation.UPDATE,
    OpClass.MINOR_COMPACT: Operation.MINOR_COMPACT,
    OpClass.MAJOR_COMPACT: Operation.MAJOR_COMPACT,
    OpClass.CLUSTER: Operation.CLUSTER,
}
# ... and every class, ALTER (the schema change) included.
EVERY_CLASS_OPERATION = {**CLASS_OPERATION, OpClass.ALTER: Operation.ALTER_TABLE}


def metadata(partitioned: bool = True, properties: dict[str, str] | None = None) -> TableMetadata:
    return TableMetadata(
        location="/warehouse/t",
        schema="id BIGINT, v STRING, dt STRING",
        primary_key=("id",),
        partition_columns=("dt",) if partitioned else (),
        properties=properties or {},
    )


@dataclass
class Table:
    """Drives the pure core like the Kafka loop would: offsets 0.., timestamps 1000 ms apart."""

    partitioned: bool = True
    properties: dict[str, str] | None = None
    state: TableState = field(init=False)
    decisions: list[CommitDecision] = field(default_factory=list)
    _offsets: itertools.count = field(default_factory=itertools.count)
    _names: itertools.count = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.state = new_state("t")
        self.submit(
            CommitIntent(
                txn_id="create",
                table="t",
                operation=Operation.CREATE_TABLE,
                read_version=0,
                metadata=metadata(self.partitioned, self.properties),
            )
        )

    def submit(self, intent: CommitIntent, timestamp: int | None = None) -> CommitDecision:
        offset = next(self._offsets)
        decision, self.state = decide(
            self.state, intent, 1_000 * (offset + 1) if timestamp is None else timestamp, offset
        )
        self.decisions.append(decision)
        return decision

    def files(self, txn: str, dt: str | None, n: int = 1) -> tuple[DataFile, ...]:
        prefix = f"dt={dt}/" if dt is not None else ""
        partition = {"dt": dt} if dt is not None else {}
        return tuple(
            DataFile(path=f"{prefix}{txn}-{i}.parquet", partition=partition, record_count=10, size_bytes=100)
            for i in range(n)
        )

    def live(self, dt: str | None = None) -> set[str]:
        if dt is None:
            return set(self.state.files)
        part = self.state.partitions.get((dt,))
        return set(part.live) if part else set()

    def intent(
        self,
        operation: Operation,
        read_version: int,
        dt: str | None = "a",
        *,
        txn: str | None = None,
        removed: tuple[str, ...] | None = None,
        n: int = 1,
        **extra: object,
    ) -> CommitIntent:
        """An intent of ``operation`` on partition ``dt`` (None = whole table) read at ``read_version``.

        Compactions default to rewriting every file live in scope now (what the job would have read).
        """
        txn = txn or f"x{next(self._names)}"
        if operation is Operation.ALTER_TABLE:  # adds a column named after the txn; whole table, no files
            current = self.state.metadata
            assert current is not None
            new = current.model_copy(update={"schema": f"{current.schema}, `c_{txn}` string"})
            return CommitIntent(
                txn_id=txn, table="t", operation=operation, read_version=read_version, metadata=new, **extra
            )
        if removed is None:
            removed = tuple(sorted(self.live(dt))) if operation.rewrites else ()
        added = () if operation is Operation.TRUNCATE else self.files(txn, dt if self.partitioned else None, n)
        partitions = None if dt is None or not self.partitioned else ({"dt": dt},)
        return CommitIntent(
            txn_id=txn,
            table="t",
            operation=operation,
            read_version=read_version,
            partitions=partitions,
            added_files=added,
            removed_files=removed,
            **extra,
        )

    def commit(self, operation: Operation, dt: str | None = "a", **kw: object) -> CommitDecision:
        """Commit non-concurrently (read at the head)."""
        decision = self.submit(self.intent(operation, self.state.head_version, dt, **kw))
        assert decision.accepted, decision
        return decision
