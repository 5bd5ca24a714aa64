"""What an applied decision writes to the catalog: its decision row, and per operation its commit and file rows.

``CatalogWriter`` (``consumer.store``) checks each record against the log's
invariants and calls ``apply_decision`` inside its transaction; what an
accepted decision writes is its operation's handler in ``CATALOG``
(``schemas.dispatch``): a table's first commit, a new metadata version, new
data, rewritten files, restored files. Each handler is made of the steps of
``CommitRows`` (the commit row, a metadata version, the files removed, the files
added), so a new operation registers a handler, or inherits the one of the
operation it ``extends``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from ordo.consumer.models import datetime_to_ms, metadata_to_dict
from ordo.consumer.stores import Connection
from ordo.schemas import CommitDecision, Operation, Outcome, TableMetadata
from ordo.schemas.decisionlog import already_live, not_live
from ordo.schemas.dispatch import OperationTable
from ordo.schemas.operations import REGISTRY

if TYPE_CHECKING:
    from ordo.consumer.store import LogRecord, StreamState


class Applied(NamedTuple):
    """What applying one decision wrote, and the stream-state fields to set once it is all written."""

    files_added: int
    files_removed: int
    records_added: int
    bytes_added: int
    committed: bool
    effective_ms: int | None
    updates: dict[str, Any]


NOTHING = Applied(0, 0, 0, 0, False, None, {})


def partition_json(columns: tuple[str, ...], spec: Mapping[str, str]) -> str:
    """Canonical JSON of a partition spec, in partition-column order; ``ValueError`` if it names other columns."""
    if set(spec) != set(columns):
        raise ValueError(f"partition {dict(spec)} does not match partition columns {list(columns)}")
    return json.dumps({c: spec[c] for c in columns}, separators=(",", ":"), ensure_ascii=False)


def metadata_json(metadata: TableMetadata) -> str:
    """A table's metadata as the catalog stores it (``tables.metadata``, ``table_metadata.metadata``)."""
    return json.dumps(metadata_to_dict(metadata), separators=(",", ":"), ensure_ascii=False)


def _ms(value: datetime | None) -> int | None:
    return None if value is None else datetime_to_ms(value)


def _metrics_json(metrics: Mapping[str, int]) -> str | None:
    """A decision's operation metrics as the catalog stores them: a JSON object in name order, NULL for none."""
    return json.dumps(dict(sorted(metrics.items())), ensure_ascii=False) if metrics else None


@dataclass(slots=True)
class CommitRows:
    """One accepted decision being written: where, what, and the steps its operation's handler is made of.

    ``decision`` passed ``schemas.decisionlog.check`` on ``state.head`` (versions, time versions, metadata and
    partitions are in order); what only the catalog knows is checked here: every removed file is live
    (``NOT_LIVE``), no added one is (``ALREADY_LIVE``, the database's unique index on live paths).
    ``state`` is only read: the writer applies ``Applied.updates`` once every row is written.
    """

    conn: Connection
    integrity_errors: tuple[type[BaseException], ...]
    state: StreamState
    decision: CommitDecision
    record: LogRecord
    operation: Operation
    version: int

    def commit_row(self, own_ms: int | None, effective_ms: int, data_change: bool) -> None:
        """The ``commits`` row of the version, with its own time version (if any) and the one readers see."""
        self.conn.execute(
            "INSERT INTO commits VALUES (?,?,?,?,?,?,?)",
            (
                self.state.table_id,
                self.version,
                self.record.offset,
                own_ms,
                effective_ms,
                self.operation.value,
                1 if data_change else 0,
            ),
        )

    def metadata_version(self) -> dict[str, Any]:
        """The decision's metadata holds from its version on (older versions keep theirs, readable)."""
        decision, state = self.decision, self.state
        assert decision.metadata is not None and state.metadata is not None  # decisionlog.check: NO_METADATA
        new_json = metadata_json(decision.metadata)
        self.conn.execute(
            "INSERT INTO table_metadata VALUES (?,?,?) ON CONFLICT (table_id, id_version) DO NOTHING",
            (state.table_id, 0, state.metadata_json or metadata_json(state.metadata)),
        )
        self.conn.execute("INSERT INTO table_metadata VALUES (?,?,?)", (state.table_id, self.version, new_json))
        return {"metadata_json": new_json}

    def remove_files(self) -> None:
        """The removed files' ``removed_version``: each must be live (``NOT_LIVE``)."""
        removed = self.decision.removed_files
        if not removed:
            return
        table_id, version = self.state.table_id, self.version
        cursor = self.conn.executemany(
            "UPDATE files SET removed_version = ? WHERE table_id = ? AND path = ? AND removed_version IS NULL",
            [(version, table_id, path) for path in removed],
        )
        if cursor.rowcount != len(removed):
            raise not_live(self.decision, cursor.rowcount, self.record.offset)

    def add_files(self, file_change: bool, origins: Mapping[str, tuple[int, str]]) -> None:
        """A ``files`` row per added file (``ALREADY_LIVE`` if one is live). ``file_change``: the change feed reads
        its records as this commit's changes. ``origins``: per re-added path, the sequence number and operation
        of the records it holds (default: this version's, this operation)."""
        added = self.decision.added_files
        if not added:
            return
        state = self.state
        assert state.metadata is not None
        columns = state.metadata.partition_columns
        rows = []
        cache: dict[tuple[tuple[str, str], ...], str] = {}
        table_id, version, operation = state.table_id, self.version, self.operation.value
        change = 1 if file_change else 0
        for f in added:
            spec_key = tuple(f.partition.items())
            part = cache.get(spec_key)
            if part is None:
                part = cache[spec_key] = partition_json(columns, f.partition)  # decisionlog.check: PARTITION
            origin = origins.get(f.path)
            rows.append(
                (
                    table_id,
                    f.path,
                    part,
                    f.record_count,
                    f.size_bytes,
                    f.min_key,
                    f.max_key,
                    version,
                    change,
                    operation if origin is None else origin[1],
                    f.bucket,
                    None if origin is None else origin[0],
                )
            )
        try:
            self.conn.executemany(
                "INSERT INTO files (table_id, path, partition, record_count, size_bytes, min_key, max_key,"
                " added_version, data_change, operation, bucket, seq_version) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                rows,
            )
        except self.integrity_errors as exc:  # the unique index on live paths
            raise already_live(self.decision, str(exc), self.record.offset) from None

    def first_rows_of(self, paths: set[str]) -> dict[str, tuple[int, str]]:
        """Per path of ``paths`` removed before, what its first row says of its records: their sequence number
        and the operation that wrote them."""
        origins: dict[str, tuple[int, str]] = {}
        for path, seq, origin in self.conn.execute(
            "SELECT path, COALESCE(seq_version, added_version), operation FROM files"
            " WHERE table_id = ? AND removed_version IS NOT NULL",
            (self.state.table_id,),
        ):
            if path in paths and (path not in origins or seq < origins[path][0]):
                origins[path] = (seq, origin)
        return origins


Handler = Callable[[CommitRows], Applied]
# What an accepted decision of each operation writes (``apply_decision`` dispatches; readers may inherit).
CATALOG: OperationTable[Handler] = OperationTable("the catalog writer", "ordo.consumer.commits")


def apply_decision(
    conn: Connection,
    integrity_errors: tuple[type[BaseException], ...],
    state: StreamState,
    decision: CommitDecision,
    record: LogRecord,
) -> Applied:
    """Write an accepted, non-duplicate decision's rows (its operation's ``CATALOG`` handler); ``NOTHING`` for
    a rejection or a repeat."""
    if decision.outcome is not Outcome.ACCEPTED or decision.duplicate_of is not None:
        return NOTHING
    operation, version = decision.operation, decision.id_version
    assert operation is not None and version is not None  # decisionlog.check: INCOMPLETE
    return CATALOG[operation](CommitRows(conn, integrity_errors, state, decision, record, operation, version))


@CATALOG.register(Operation.CREATE_TABLE)
def first_commit(rows: CommitRows) -> Applied:
    """Version 0, at the table's creation time, and the table's metadata."""
    decision = rows.decision
    assert decision.metadata is not None and decision.time_version is not None  # decisionlog.check
    millis = datetime_to_ms(decision.time_version)
    rows.commit_row(millis, millis, True)
    created: dict[str, Any] = {"metadata_json": metadata_json(decision.metadata), "created_time_ms": millis}
    return Applied(0, 0, 0, 0, True, millis, created)


@CATALOG.register(Operation.ALTER_TABLE)
def new_metadata_version(rows: CommitRows) -> Applied:
    """A new metadata version and no file."""
    assert rows.decision.metadata is not None  # decisionlog.check: NO_METADATA
    return commit(rows, file_change=False)


@CATALOG.register(
    Operation.INSERT_INTO, Operation.INSERT_OVERWRITE, Operation.TRUNCATE, Operation.UPDATE, Operation.DELETE
)
def new_data(rows: CommitRows) -> Applied:
    """Files whose records are the commit's changes (the change feed reads them); an overwrite's removed files."""
    return commit(rows, file_change=True)


@CATALOG.register(Operation.MINOR_COMPACT, Operation.MAJOR_COMPACT, Operation.CLUSTER)
def rewritten_files(rows: CommitRows) -> Applied:
    """Files that replace others, data unchanged: no change rows of their own."""
    return commit(rows, file_change=False)


@CATALOG.register(Operation.RESTORE)
def restored_files(rows: CommitRows) -> Applied:
    """Files re-added as they were: each keeps the sequence number its records had and the operation that wrote
    them (merge-on-read then orders them against the files that stayed exactly as at the version restored, and
    readers decide from the operation whether a file's keys are unique). Its change rows are a difference of
    snapshots, not its files' records."""
    added = rows.decision.added_files
    origins = rows.first_rows_of({f.path for f in added}) if added else {}
    return commit(rows, file_change=False, origins=origins)


def commit(rows: CommitRows, *, file_change: bool, origins: Mapping[str, tuple[int, str]] | None = None) -> Applied:
    """Every commit after the first: its times, a metadata version if it carries one, its removed files, its added
    files, its commit row."""
    decision, state = rows.decision, rows.state
    assert state.metadata is not None and state.head_time_ms is not None  # decisionlog.check: NO_CREATE
    data_change = REGISTRY[rows.operation].data_change
    if data_change:
        assert decision.time_version is not None  # decisionlog.check: TIME_VERSION
        own_ms: int | None = datetime_to_ms(decision.time_version)
        effective_ms = own_ms
    else:
        own_ms = None
        effective_ms = state.head_time_ms
    # ALTER_TABLE, or a write that changed the schema with its data (since 0.5: mergeSchema, overwriteSchema)
    updates = rows.metadata_version() if decision.metadata is not None else {}
    rows.remove_files()
    rows.add_files(file_change, origins or {})
    assert effective_ms is not None
    rows.commit_row(own_ms, effective_ms, data_change)
    added = decision.added_files
    return Applied(
        len(added),
        len(decision.removed_files),
        sum(f.record_count for f in added),
        sum(f.size_bytes for f in added),
        True,
        effective_ms,
        updates,
    )


def insert_decision(
    conn: Connection,
    state: StreamState,
    decision: CommitDecision,
    record: LogRecord,
    record_hash: bytes,
    applied: Applied,
) -> None:
    """The ``decisions`` row of any decision record applied (accepted or not), with what it wrote."""
    partitions = decision.partitions
    conn.execute(
        "INSERT INTO decisions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            state.table_id,
            record.offset,
            record.timestamp_ms,
            decision.txn_id,
            decision.outcome.value,
            None if decision.operation is None else decision.operation.value,
            decision.read_version,
            decision.intent_offset,
            decision.id_version,
            _ms(decision.time_version),
            applied.effective_ms,
            decision.rebase.value,
            decision.reason,
            decision.message,
            decision.conflicting_txn_id,
            decision.conflicting_version,
            decision.writer,
            decision.app_id,
            decision.batch_id,
            decision.duplicate_of,
            None if partitions is None else json.dumps([dict(p) for p in partitions], ensure_ascii=False),
            applied.files_added,
            applied.files_removed,
            applied.records_added,
            applied.bytes_added,
            decision.prev_hash,
            record_hash,
            decision.restore_version,
            _metrics_json(decision.operation_metrics),
        ),
    )


__all__ = [
    "CATALOG",
    "NOTHING",
    "Applied",
    "CommitRows",
    "apply_decision",
    "commit",
    "insert_decision",
    "metadata_json",
    "partition_json",
]
