"""Pydantic mirrors of the Avro schemas in ``ordo/schemas/avro``.

Models are frozen and collections are tuples, so an event cannot change after
it is built. Field constraints here are what the arbiter enforces on intents:
anything an intent can say that violates them is rejected as
``MALFORMED_INTENT`` (see ``arbiter.core``), never raised out of the loop.
"""

from __future__ import annotations

import enum
import re
import warnings
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ordo.schemas.operations import ROW_ID_COLUMN, TRAITS, Operation, is_keyless
from ordo.schemas.topics import validate_table_name

# Limits on what one intent may carry. They bound the arbiter's work per record;
# larger commits belong in a manifest file (see docs/architecture.md).
MAX_ID_LENGTH = 256
MAX_PATH_LENGTH = 4096
MAX_FILES_PER_INTENT = 10_000
MAX_PARTITIONS_PER_INTENT = 10_000
MAX_VERSION = 2**62
# Highest bucket number of a data file: a bucketed table has at most MAX_BUCKET + 1 buckets.
MAX_BUCKET = 65_535
# Most operation metrics one intent may carry (since 0.5; an operation may claim at most 4: schemas.operations).
MAX_METRICS = 64

# Time versions and Kafka timestamps are UTC milliseconds since the epoch.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def millis_to_datetime(millis: int) -> datetime:
    """Exact UTC datetime for a Kafka timestamp in milliseconds."""
    return EPOCH + timedelta(0, 0, 0, millis)


def datetime_to_millis(value: datetime) -> int:
    """Inverse of ``millis_to_datetime`` (naive datetimes are taken as UTC); sub-millisecond parts are dropped."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    delta = value - EPOCH  # normalized: only ``days`` can be negative, so this is floor division by 1 ms
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


Id = Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH)]
Version = Annotated[int, Field(ge=0, le=MAX_VERSION)]
PartitionSpec = Mapping[
    Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH)],
    Annotated[str, Field(max_length=MAX_PATH_LENGTH)],
]


class Outcome(str, enum.Enum):
    """Whether the arbiter accepted or rejected an intent."""

    ACCEPTED = "ACCEPTED"
    REJECTED = "REJECTED"


class Rebase(str, enum.Enum):
    """How an accepted commit was rebased on the head (docs/conflicts.md, "The three rebases")."""

    NONE = "NONE"
    LATER_OVERWRITES = "LATER_OVERWRITES"
    COMPACTION_COMPLETES = "COMPACTION_COMPLETES"
    NEW_DATA_WRITTEN = "NEW_DATA_WRITTEN"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)


class DataFile(_Frozen):
    """A data file added by a commit. ``path`` is relative to the table location."""

    path: Annotated[str, Field(min_length=1, max_length=MAX_PATH_LENGTH)]
    partition: PartitionSpec = Field(default_factory=dict)
    record_count: Version
    size_bytes: Version
    min_key: Annotated[str, Field(max_length=MAX_PATH_LENGTH)] | None = None
    max_key: Annotated[str, Field(max_length=MAX_PATH_LENGTH)] | None = None
    bucket: Annotated[int, Field(ge=0, le=MAX_BUCKET)] = 0  # of the primary-key hash; 0 for unbucketed tables


with warnings.catch_warnings():
    # ``schema`` is the contract's field name (docs/api.md); it shadows the
    # deprecated ``BaseModel.schema()`` classmethod, which nobody here calls.
    warnings.filterwarnings("ignore", message=".*shadows an attribute.*")

    class TableMetadata(_Frozen):
        """What CREATE_TABLE declares: location, Spark DDL schema, keys, properties."""

        location: Annotated[str, Field(min_length=1, max_length=MAX_PATH_LENGTH)]
        schema: Annotated[str, Field(min_length=1, max_length=1_000_000)]  # type: ignore[assignment]
        primary_key: Annotated[tuple[Id, ...], Field(min_length=1, max_length=64)]
        partition_columns: Annotated[tuple[Id, ...], Field(max_length=64)] = ()
        properties: Mapping[Id, Annotated[str, Field(max_length=MAX_PATH_LENGTH)]] = Field(default_factory=dict)

        @property
        def keyless(self) -> bool:
            """True for a keyless table: its key is the hidden row id column (``schemas.operations.ROW_ID_COLUMN``)."""
            return is_keyless(self.primary_key)

        @property
        def user_schema(self) -> str:
            """The schema as users see it: a keyless table's without the hidden row id column."""
            if not self.keyless:
                return self.schema
            parts = split_top_level(self.schema)
            kept = [p.strip() for p, c in zip(parts, parse_ddl(self.schema), strict=True) if c.name != ROW_ID_COLUMN]
            return ", ".join(kept)

        @property
        def user_key(self) -> tuple[str, ...]:
            """The primary key as users see it: empty for a keyless table."""
            return () if self.keyless else tuple(self.primary_key)


class DdlColumn(NamedTuple):
    """One column of a Spark DDL schema string: its name, type text (lower case) and nullability."""

    name: str
    type: str
    nullable: bool


_DDL_COLUMN = re.compile(
    r"\s*(?:`(?P<quoted>(?:[^`]|``)*)`|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))\s*:?\s+(?P<type>.*?)"
    r"(?P<not_null>\s+NOT\s+NULL)?\s*",
    re.S | re.I,
)


def split_top_level(text: str) -> list[str]:
    """``text`` split at its top-level commas: not inside ``<>``/``()`` nor a backquoted name (parts unstripped)."""
    parts: list[str] = []
    depth, quoted, start = 0, False, 0
    for i, char in enumerate(text):
        if char == "`":
            quoted = not quoted
        elif quoted:
            continue
        elif char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_ddl(ddl: str) -> tuple[DdlColumn, ...]:
    """The columns of a Spark DDL schema string, without Spark; ``ValueError`` naming a column it cannot read.

    Commas inside ``<>``/``()`` and backquoted names are respected; a doubled
    backquote inside a name is one backquote.
    """
    columns = []
    for part in split_top_level(ddl):
        match = _DDL_COLUMN.fullmatch(part)
        if match is None or not match["type"].strip():
            raise ValueError(f"cannot read the schema column {part.strip()[:200]!r}")
        name = match["bare"] if match["quoted"] is None else match["quoted"].replace("``", "`")
        columns.append(DdlColumn(name, " ".join(match["type"].split()).lower(), match["not_null"] is None))
    return tuple(columns)


def ddl_columns(ddl: str) -> list[tuple[str, str]]:
    """``[(name, type text)]`` of a Spark DDL schema string (``parse_ddl`` without nullability)."""
    return [(c.name, c.type) for c in parse_ddl(ddl)]


class CommitIntent(_Frozen):
    """A transaction asking to commit (docs/architecture.md, "Event flow")."""

    txn_id: Id
    table: str
    operation: Operation
    read_version: Version
    partitions: Annotated[tuple[PartitionSpec, ...], Field(max_length=MAX_PARTITIONS_PER_INTENT)] | None = None
    added_files: Annotated[tuple[DataFile, ...], Field(max_length=MAX_FILES_PER_INTENT)] = ()
    removed_files: Annotated[
        tuple[Annotated[str, Field(min_length=1, max_length=MAX_PATH_LENGTH)], ...],
        Field(max_length=MAX_FILES_PER_INTENT),
    ] = ()
    metadata: TableMetadata | None = None
    app_id: Id | None = None
    batch_id: Version | None = None
    writer: Annotated[str, Field(max_length=MAX_ID_LENGTH)] | None = None
    restore_version: Version | None = None  # RESTORE (since 0.4): the version whose live files it re-adds
    # (since 0.5) Delta's operationMetrics the writer counted (MERGE's, UPDATE's, DELETE's rows): a claim the
    # arbiter checks (INVALID_METRICS: arbiter.rules.check_metrics), not a model limit beyond names and count
    operation_metrics: Annotated[Mapping[Id, int], Field(max_length=MAX_METRICS)] = Field(default_factory=dict)

    @field_validator("table")
    @classmethod
    def _table_name(cls, value: str) -> str:
        return validate_table_name(value)


class CommitDecision(_Frozen):
    """The arbiter's answer to one intent record (docs/architecture.md, "Event flow")."""

    txn_id: str
    table: str
    intent_offset: int
    outcome: Outcome
    id_version: int | None = None
    time_version: datetime | None = None
    operation: Operation | None = None
    read_version: int | None = None
    partitions: tuple[Mapping[str, str], ...] | None = None
    added_files: tuple[DataFile, ...] = ()
    removed_files: tuple[str, ...] = ()
    metadata: TableMetadata | None = None
    rebase: Rebase = Rebase.NONE
    reason: str | None = None
    message: str | None = None
    conflicting_txn_id: str | None = None
    conflicting_version: int | None = None
    writer: str | None = None
    app_id: str | None = None
    batch_id: int | None = None
    duplicate_of: int | None = None
    prev_hash: bytes | None = None
    restore_version: int | None = None  # RESTORE (since 0.4): the version the table was restored to
    operation_metrics: Mapping[str, int] = Field(default_factory=dict)  # (since 0.5) an accepted commit's, checked

    @property
    def accepted(self) -> bool:
        """True when the intent committed (a repeat of an accepted txn included)."""
        return self.outcome is Outcome.ACCEPTED

    @property
    def data_change(self) -> bool:
        """True when this decision committed a logical change (it has a time version)."""
        return self.accepted and self.operation is not None and TRAITS[self.operation].data_change
