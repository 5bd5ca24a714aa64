"""Read models the catalog returns: tables, snapshots, files, commits, decisions.

Frozen slotted dataclasses rather than pydantic models: a snapshot of a large
table holds 100k+ files, and building plain dataclasses is several times
cheaper. Each model has ``to_dict`` (JSON-ready, used by the HTTP service) and
``from_dict`` (used by the HTTP client), so both catalog backends return the
same objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas import Operation, Outcome, Rebase, TableMetadata

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ms_to_datetime(millis: int | None) -> datetime | None:
    """UTC datetime of epoch milliseconds (None stays None)."""
    return None if millis is None else EPOCH + timedelta(milliseconds=millis)


def datetime_to_ms(value: datetime) -> int:
    """Epoch milliseconds of ``value`` (naive datetimes are taken as UTC); sub-millisecond parts are dropped."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - EPOCH) // timedelta(milliseconds=1)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _parse_iso(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def metadata_to_dict(metadata: TableMetadata) -> dict[str, Any]:
    """JSON-ready form of table metadata (tuples become lists)."""
    return {
        "location": metadata.location,
        "schema": metadata.schema,
        "primary_key": list(metadata.primary_key),
        "partition_columns": list(metadata.partition_columns),
        "properties": dict(metadata.properties),
    }


@dataclass(frozen=True, slots=True)
class FileEntry:
    """A data file in a snapshot or commit.

    ``seq`` is the sequence number of the file's records that carry no
    ``_ordo_seq`` of their own: the ID version of the commit that added it.
    ``operation`` is that commit's operation (compaction outputs are
    ``MINOR_COMPACT``/``MAJOR_COMPACT``/``CLUSTER`` with ``data_change`` false).
    The ``partition`` mapping is shared between entries of one snapshot: do not
    mutate it.
    """

    path: str
    absolute_path: str
    partition: Mapping[str, str]
    record_count: int
    size_bytes: int
    min_key: str | None
    max_key: str | None
    added_version: int
    data_change: bool
    operation: str
    bucket: int = 0  # DataFile.bucket: of the primary-key hash (0 for unbucketed tables)

    @property
    def seq(self) -> int:
        """The file's sequence number (= ``added_version``)."""
        return self.added_version

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "path": self.path,
            "absolute_path": self.absolute_path,
            "partition": dict(self.partition),
            "record_count": self.record_count,
            "size_bytes": self.size_bytes,
            "min_key": self.min_key,
            "max_key": self.max_key,
            "added_version": self.added_version,
            "seq": self.added_version,
            "data_change": self.data_change,
            "operation": self.operation,
            "bucket": self.bucket,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FileEntry:
        """Inverse of ``to_dict``."""
        return cls(
            path=data["path"],
            absolute_path=data["absolute_path"],
            partition=dict(data["partition"]),
            record_count=data["record_count"],
            size_bytes=data["size_bytes"],
            min_key=data.get("min_key"),
            max_key=data.get("max_key"),
            added_version=data["added_version"],
            data_change=data["data_change"],
            operation=data["operation"],
            bucket=data.get("bucket", 0),  # absent from a consumer older than the bucket field
        )


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A table the catalog knows: its metadata, head and materialization state.

    ``head_time_version`` is the time version of the latest logical commit
    (compactions do not move it). ``error`` is set when the consumer stopped
    applying the table's decision log (hash-chain break or an inconsistent
    decision) at log offset ``error_offset``; the table then stays at ``head_version``.
    """

    name: str
    metadata: TableMetadata
    head_version: int
    head_time_version: datetime
    created_time: datetime
    decisions: int
    log_offset: int
    error: str | None = None
    error_offset: int | None = None

    @property
    def location(self) -> str:
        """The table location (root of its data files)."""
        return self.metadata.location

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "name": self.name,
            "metadata": metadata_to_dict(self.metadata),
            "head_version": self.head_version,
            "head_time_version": _iso(self.head_time_version),
            "created_time": _iso(self.created_time),
            "decisions": self.decisions,
            "log_offset": self.log_offset,
            "error": self.error,
            "error_offset": self.error_offset,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableInfo:
        """Inverse of ``to_dict``."""
        return cls(
            name=data["name"],
            metadata=TableMetadata.model_validate(data["metadata"]),
            head_version=data["head_version"],
            head_time_version=_parse_iso(data["head_time_version"]),  # type: ignore[arg-type]
            created_time=_parse_iso(data["created_time"]),  # type: ignore[arg-type]
            decisions=data["decisions"],
            log_offset=data["log_offset"],
            error=data.get("error"),
            error_offset=data.get("error_offset"),
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The live files of a table at one ID version.

    ``time_version`` is the snapshot's time: the time version of the commit at
    ``id_version``, or for a compaction/clustering the one it inherits from the
    latest logical commit before it.
    """

    table: str
    id_version: int
    time_version: datetime
    metadata: TableMetadata
    files: tuple[FileEntry, ...]

    @property
    def location(self) -> str:
        """The table location."""
        return self.metadata.location

    @property
    def record_count(self) -> int:
        """Records in the live files (upserts and deletes not yet merged away)."""
        return sum(f.record_count for f in self.files)

    @property
    def size_bytes(self) -> int:
        """Bytes of the live files."""
        return sum(f.size_bytes for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "table": self.table,
            "id_version": self.id_version,
            "time_version": _iso(self.time_version),
            "metadata": metadata_to_dict(self.metadata),
            "files": [f.to_dict() for f in self.files],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Snapshot:
        """Inverse of ``to_dict``."""
        return cls(
            table=data["table"],
            id_version=data["id_version"],
            time_version=_parse_iso(data["time_version"]),  # type: ignore[arg-type]
            metadata=TableMetadata.model_validate(data["metadata"]),
            files=tuple(FileEntry.from_dict(f) for f in data["files"]),
        )


@dataclass(frozen=True, slots=True)
class Commit:
    """An accepted commit (one ID version) with the file actions it applied.

    ``time_version`` is the commit's own time version (None for compaction and
    clustering); ``timestamp`` is the time a reader "as of time" sees it at:
    its own time version or the one it inherits.
    """

    table: str
    id_version: int
    time_version: datetime | None
    timestamp: datetime
    operation: Operation
    data_change: bool
    txn_id: str
    read_version: int | None
    rebase: Rebase
    partitions: tuple[Mapping[str, str], ...] | None
    writer: str | None
    app_id: str | None
    batch_id: int | None
    intent_offset: int
    log_offset: int
    added_files: tuple[FileEntry, ...]
    removed_files: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "table": self.table,
            "id_version": self.id_version,
            "time_version": _iso(self.time_version),
            "timestamp": _iso(self.timestamp),
            "operation": self.operation.value,
            "data_change": self.data_change,
            "txn_id": self.txn_id,
            "read_version": self.read_version,
            "rebase": self.rebase.value,
            "partitions": None if self.partitions is None else [dict(p) for p in self.partitions],
            "writer": self.writer,
            "app_id": self.app_id,
            "batch_id": self.batch_id,
            "intent_offset": self.intent_offset,
            "log_offset": self.log_offset,
            "added_files": [f.to_dict() for f in self.added_files],
            "removed_files": list(self.removed_files),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Commit:
        """Inverse of ``to_dict``."""
        partitions = data.get("partitions")
        return cls(
            table=data["table"],
            id_version=data["id_version"],
            time_version=_parse_iso(data.get("time_version")),
            timestamp=_parse_iso(data["timestamp"]),  # type: ignore[arg-type]
            operation=Operation(data["operation"]),
            data_change=data["data_change"],
            txn_id=data["txn_id"],
            read_version=data.get("read_version"),
            rebase=Rebase(data.get("rebase", "NONE")),
            partitions=None if partitions is None else tuple(dict(p) for p in partitions),
            writer=data.get("writer"),
            app_id=data.get("app_id"),
            batch_id=data.get("batch_id"),
            intent_offset=data["intent_offset"],
            log_offset=data["log_offset"],
            added_files=tuple(FileEntry.from_dict(f) for f in data.get("added_files", ())),
            removed_files=tuple(data.get("removed_files", ())),
        )


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One decision of a table's log, accepted or rejected (a row of ``history``).

    ``log_offset`` is its offset in the decisions topic. ``duplicate_of`` is set
    when it answers a repeated txn id (it then changed nothing). File counts are
    those the decision applied (zero for rejections and duplicates).
    """

    table: str
    log_offset: int
    log_timestamp: datetime | None
    txn_id: str
    outcome: Outcome
    operation: Operation | None
    read_version: int | None
    intent_offset: int
    id_version: int | None
    time_version: datetime | None
    timestamp: datetime | None
    rebase: Rebase
    reason: str | None
    message: str | None
    conflicting_txn_id: str | None
    conflicting_version: int | None
    writer: str | None
    app_id: str | None
    batch_id: int | None
    duplicate_of: int | None
    partitions: tuple[Mapping[str, str], ...] | None
    files_added: int
    files_removed: int
    records_added: int
    bytes_added: int
    prev_hash: str | None
    hash: str

    @property
    def accepted(self) -> bool:
        """True for an accepted decision (a duplicate answer of an accepted txn included)."""
        return self.outcome is Outcome.ACCEPTED

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "table": self.table,
            "log_offset": self.log_offset,
            "log_timestamp": _iso(self.log_timestamp),
            "txn_id": self.txn_id,
            "outcome": self.outcome.value,
            "operation": None if self.operation is None else self.operation.value,
            "read_version": self.read_version,
            "intent_offset": self.intent_offset,
            "id_version": self.id_version,
            "time_version": _iso(self.time_version),
            "timestamp": _iso(self.timestamp),
            "rebase": self.rebase.value,
            "reason": self.reason,
            "message": self.message,
            "conflicting_txn_id": self.conflicting_txn_id,
            "conflicting_version": self.conflicting_version,
            "writer": self.writer,
            "app_id": self.app_id,
            "batch_id": self.batch_id,
            "duplicate_of": self.duplicate_of,
            "partitions": None if self.partitions is None else [dict(p) for p in self.partitions],
            "files_added": self.files_added,
            "files_removed": self.files_removed,
            "records_added": self.records_added,
            "bytes_added": self.bytes_added,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DecisionRecord:
        """Inverse of ``to_dict``."""
        operation = data.get("operation")
        partitions = data.get("partitions")
        return cls(
            table=data["table"],
            log_offset=data["log_offset"],
            log_timestamp=_parse_iso(data.get("log_timestamp")),
            txn_id=data["txn_id"],
            outcome=Outcome(data["outcome"]),
            operation=None if operation is None else Operation(operation),
            read_version=data.get("read_version"),
            intent_offset=data["intent_offset"],
            id_version=data.get("id_version"),
            time_version=_parse_iso(data.get("time_version")),
            timestamp=_parse_iso(data.get("timestamp")),
            rebase=Rebase(data.get("rebase", "NONE")),
            reason=data.get("reason"),
            message=data.get("message"),
            conflicting_txn_id=data.get("conflicting_txn_id"),
            conflicting_version=data.get("conflicting_version"),
            writer=data.get("writer"),
            app_id=data.get("app_id"),
            batch_id=data.get("batch_id"),
            duplicate_of=data.get("duplicate_of"),
            partitions=None if partitions is None else tuple(dict(p) for p in partitions),
            files_added=data.get("files_added", 0),
            files_removed=data.get("files_removed", 0),
            records_added=data.get("records_added", 0),
            bytes_added=data.get("bytes_added", 0),
            prev_hash=data.get("prev_hash"),
            hash=data["hash"],
        )


__all__ = [
    "Commit",
    "DecisionRecord",
    "FileEntry",
    "Snapshot",
    "TableInfo",
    "datetime_to_ms",
    "metadata_to_dict",
    "ms_to_datetime",
]
