"""Read models the catalog returns: tables, snapshots, files, commits, decisions.

Frozen slotted dataclasses rather than pydantic models: a snapshot of a large
table holds 100k+ files, and building plain dataclasses is several times
cheaper. Each model has ``to_dict`` (JSON-ready, used by the HTTP service) and
``from_dict`` (used by the HTTP client), so both catalog backends return the
same objects.

The converters are pydantic's, over the dataclasses as they are: one
``pydantic.TypeAdapter`` per model; ``to_dict`` is its ``dump_python(...,
mode="json")`` and ``from_dict`` its ``validate_python``. The JSON form is
fixed by the field annotations: enums as their values, datetimes as
``datetime.isoformat()`` (``IsoDatetime``), metadata as ``metadata_to_dict``
(``JsonMetadata``), ``FileEntry.seq`` as a computed field; fields an older
payload may lack have a ``Field(default=...)`` for ``from_dict`` only (the
dataclass constructors still require them). ``tests/unit/test_models.py`` pins
the JSON of every model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, PlainSerializer, TypeAdapter, computed_field

from ordo.schemas import Operation, Outcome, Rebase, TableMetadata
from ordo.schemas.models import datetime_to_millis, millis_to_datetime


def ms_to_datetime(millis: int | None) -> datetime | None:
    """UTC datetime of epoch milliseconds (None stays None)."""
    return None if millis is None else millis_to_datetime(millis)


datetime_to_ms = datetime_to_millis  # epoch milliseconds of a datetime (naive: UTC); sub-millisecond parts dropped


def metadata_to_dict(metadata: TableMetadata) -> dict[str, Any]:
    """JSON-ready form of table metadata (tuples become lists)."""
    return {
        "location": metadata.location,
        "schema": metadata.schema,
        "primary_key": list(metadata.primary_key),
        "partition_columns": list(metadata.partition_columns),
        "properties": dict(metadata.properties),
    }


def _parse_iso(value: Any) -> Any:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


# A datetime as ``isoformat()`` ("+00:00", where pydantic alone writes "Z"), read back by ``fromisoformat``.
IsoDatetime = Annotated[
    datetime, BeforeValidator(_parse_iso), PlainSerializer(datetime.isoformat, return_type=str, when_used="json")
]
# Table metadata as ``metadata_to_dict``.
JsonMetadata = Annotated[TableMetadata, PlainSerializer(metadata_to_dict, when_used="json")]
Partitions = tuple[Mapping[str, str], ...] | None


def _default(value: Any) -> Any:
    """A default for ``from_dict`` of a payload without the field (the dataclass itself has none)."""
    return Field(default=value)


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
    min_key: Annotated[str | None, _default(None)]
    max_key: Annotated[str | None, _default(None)]
    added_version: int
    data_change: bool
    operation: str
    bucket: int = 0  # DataFile.bucket: of the primary-key hash (0 for unbucketed tables, and in older payloads)
    seq_version: int | None = None  # a file a RESTORE re-added: the sequence its records had (None: added_version)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def seq(self) -> int:
        """The file's sequence number: ``added_version``, or for a file a RESTORE re-added the one it had."""
        return self.added_version if self.seq_version is None else self.seq_version

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _FILE_ENTRY.dump_python(self, mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FileEntry:
        """Inverse of ``to_dict``."""
        return _FILE_ENTRY.validate_python(data)


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A table the catalog knows: its metadata, head and materialization state.

    ``head_time_version`` is the time version of the latest logical commit
    (compactions do not move it). ``error`` is set when the consumer stopped
    applying the table's decision log (hash-chain break or an inconsistent
    decision) at log offset ``error_offset``; the table then stays at ``head_version``.
    """

    name: str
    metadata: JsonMetadata
    head_version: int
    head_time_version: IsoDatetime
    created_time: IsoDatetime
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
        return _TABLE_INFO.dump_python(self, mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableInfo:
        """Inverse of ``to_dict``."""
        return _TABLE_INFO.validate_python(data)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The live files of a table at one ID version.

    ``time_version`` is the snapshot's time: the time version of the commit at
    ``id_version``, or for a compaction/clustering the one it inherits from the
    latest logical commit before it.
    """

    table: str
    id_version: int
    time_version: IsoDatetime
    metadata: JsonMetadata
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
        return _SNAPSHOT.dump_python(self, mode="json")

    def to_json(self) -> bytes:
        """``to_dict`` as JSON bytes, written by pydantic in one pass (the HTTP service's snapshot body)."""
        return _SNAPSHOT.dump_json(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Snapshot:
        """Inverse of ``to_dict``."""
        return _SNAPSHOT.validate_python(data)


@dataclass(frozen=True, slots=True)
class Commit:
    """An accepted commit (one ID version) with the file actions it applied.

    ``time_version`` is the commit's own time version (None for compaction and
    clustering); ``timestamp`` is the time a reader "as of time" sees it at:
    its own time version or the one it inherits.
    """

    table: str
    id_version: int
    time_version: Annotated[IsoDatetime | None, _default(None)]
    timestamp: IsoDatetime
    operation: Operation
    data_change: bool
    txn_id: str
    read_version: Annotated[int | None, _default(None)]
    rebase: Annotated[Rebase, _default(Rebase.NONE)]
    partitions: Annotated[Partitions, _default(None)]
    writer: Annotated[str | None, _default(None)]
    app_id: Annotated[str | None, _default(None)]
    batch_id: Annotated[int | None, _default(None)]
    intent_offset: int
    log_offset: int
    added_files: Annotated[tuple[FileEntry, ...], _default(())]
    removed_files: Annotated[tuple[str, ...], _default(())]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _COMMIT.dump_python(self, mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Commit:
        """Inverse of ``to_dict``."""
        return _COMMIT.validate_python(data)


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One decision of a table's log, accepted or rejected (a row of ``history``).

    ``log_offset`` is its offset in the decisions topic. ``duplicate_of`` is set
    when it answers a repeated txn id (it then changed nothing). File counts are
    those the decision applied (zero for rejections and duplicates).
    """

    table: str
    log_offset: int
    log_timestamp: Annotated[IsoDatetime | None, _default(None)]
    txn_id: str
    outcome: Outcome
    operation: Annotated[Operation | None, _default(None)]
    read_version: Annotated[int | None, _default(None)]
    intent_offset: int
    id_version: Annotated[int | None, _default(None)]
    time_version: Annotated[IsoDatetime | None, _default(None)]
    timestamp: Annotated[IsoDatetime | None, _default(None)]
    rebase: Annotated[Rebase, _default(Rebase.NONE)]
    reason: Annotated[str | None, _default(None)]
    message: Annotated[str | None, _default(None)]
    conflicting_txn_id: Annotated[str | None, _default(None)]
    conflicting_version: Annotated[int | None, _default(None)]
    writer: Annotated[str | None, _default(None)]
    app_id: Annotated[str | None, _default(None)]
    batch_id: Annotated[int | None, _default(None)]
    duplicate_of: Annotated[int | None, _default(None)]
    partitions: Annotated[Partitions, _default(None)]
    files_added: Annotated[int, _default(0)]
    files_removed: Annotated[int, _default(0)]
    records_added: Annotated[int, _default(0)]
    bytes_added: Annotated[int, _default(0)]
    prev_hash: Annotated[str | None, _default(None)]
    hash: str
    restore_version: Annotated[int | None, _default(None)] = None  # RESTORE (since 0.4): the version restored to
    # (since 0.5) the operation metrics an accepted commit's writer counted and the arbiter checked (MERGE's,
    # UPDATE's, DELETE's rows, by Delta's names); empty before 0.5 and for every other commit
    operation_metrics: Annotated[Mapping[str, int], Field(default_factory=dict)] = field(default_factory=dict)

    @property
    def accepted(self) -> bool:
        """True for an accepted decision (a duplicate answer of an accepted txn included)."""
        return self.outcome is Outcome.ACCEPTED

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _DECISION_RECORD.dump_python(self, mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DecisionRecord:
        """Inverse of ``to_dict``."""
        return _DECISION_RECORD.validate_python(data)


_FILE_ENTRY = TypeAdapter(FileEntry)
_TABLE_INFO = TypeAdapter(TableInfo)
_SNAPSHOT = TypeAdapter(Snapshot)
_COMMIT = TypeAdapter(Commit)
_DECISION_RECORD = TypeAdapter(DecisionRecord)


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
