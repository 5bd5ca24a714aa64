"""Spark data-file writing for the writer API: schema enforcement, records, staging, file stats.

This is the Spark adapter of ``producer``: ``producer.table`` imports it lazily,
so importing ``producer`` never imports Spark.

Data file format (the contract with ``consumer``): Parquet at
``<partition path>/<txn id>-<n>.parquet`` under the table location, where the
partition path is Hive style (``dt=2024-01-01/region=eu``, escaped like Hive)
and empty for an unpartitioned table (``schemas.paths``, which the arbiter
checks; the txn id in the name is the write id and survives a metadata-level
retry). Each file holds every table column, the
partition columns included as ordinary columns, plus

* ``_ordo_op`` STRING: ``upsert`` or ``delete`` (a delete record carries the
  key and partition columns, the other columns are null);
* ``_ordo_seq`` BIGINT: null in files written by user commits (their records'
  sequence number is the ID version the commit gets, known only after the
  decision), and each record's original sequence number in compaction and
  cluster output. Effective sequence = ``coalesce(_ordo_seq, added version)``.

Readers keep, per partition and primary key, the record with the highest
effective sequence number; a winning delete hides the key.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from ordo.kernel.errors import OrdoError
from ordo.producer.smallwrites import BAD_PARTITION_COLUMN
from ordo.schemas import TableMetadata
from ordo.schemas.operations import (
    CONSTRAINT_PREFIX,
    OP_COLUMN,
    OP_DELETE,
    OP_UPSERT,
    RESERVED_COLUMNS,
    RESERVED_PREFIX,
    ROW_ID_COLUMN,
    SEQ_COLUMN,
    is_keyless,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyarrow.fs import FileSystem
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

BUCKET_COLUMN = "_ordo_b"  # hidden staging column: the record's bucket (producer.buckets)
# Column names a table may not use: ours in files, and the change feed's.
EXAMPLES = 5  # offending keys quoted in an error message
MAX_STAT_LENGTH = 4096  # DataFile.min_key/max_key limit (schemas.models.MAX_PATH_LENGTH)
MAX_RECORDS_PER_FILE_PROPERTY = "ordo.max_records_per_file"
DEFAULT_MAX_RECORDS_PER_FILE = 5_000_000
TARGET_FILE_BYTES_PROPERTY = "ordo.target_file_bytes"
DEFAULT_TARGET_FILE_BYTES = 128 * 1024 * 1024


# --------------------------------------------------------------------------- errors
# Defined here (this module imports no Spark at import time) and re-exported by producer.table.


class WriteRefusedError(OrdoError, ValueError):
    """Raised when a write is refused before any data file is written."""


class SchemaMismatchError(WriteRefusedError):
    """Raised when a DataFrame's columns or types do not match the table schema."""


class PrimaryKeyError(WriteRefusedError):
    """Raised when a write holds null or duplicate primary keys."""


class PartitionValueError(WriteRefusedError):
    """Raised when partition values are null, empty, or outside the static partition written."""


class InvalidOperationError(WriteRefusedError):
    """Raised when an operation's arguments are invalid for this table (unknown columns, key updates, modes)."""


class ConstraintViolationError(WriteRefusedError):
    """Raised when rows a write adds (or a RESTORE, or the table when a constraint is added) violate one of the
    table's CHECK constraints: its expression is false or null for them. Nothing is committed."""


class InvalidTableError(OrdoError, ValueError):
    """Raised by DeltaTable.create for a definition that cannot be a table (keys, reserved names, types)."""


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class Layout:
    """What the writer needs to know about a table, derived from its TableMetadata."""

    name: str
    location: str
    schema_ddl: str
    primary_key: tuple[str, ...]
    partition_columns: tuple[str, ...]
    properties: Mapping[str, str]

    @classmethod
    def of(cls, name: str, metadata: TableMetadata) -> Layout:
        return cls(
            name=name,
            location=metadata.location,
            schema_ddl=metadata.schema,
            primary_key=tuple(metadata.primary_key),
            partition_columns=tuple(metadata.partition_columns),
            properties=dict(metadata.properties),
        )

    @property
    def buckets(self) -> int:
        """Buckets per partition (``ordo.buckets``; 1 for a table without the property)."""
        from ordo.producer.buckets import table_buckets

        return table_buckets(self.properties)

    @property
    def keyless(self) -> bool:
        """True for a keyless table: its key is the hidden row id column every writer fills."""
        return is_keyless(self.primary_key)

    def user_schema(self) -> StructType:
        """The schema as users see it and write it: a keyless table's without the row id column."""
        schema = self.schema()
        if not self.keyless:
            return schema
        from pyspark.sql.types import StructType

        return StructType([f for f in schema.fields if f.name != ROW_ID_COLUMN])

    @property
    def identity(self) -> tuple[str, ...]:
        """Columns that identify a record: partition columns, then the primary key (dedup scope)."""
        return tuple(dict.fromkeys(self.partition_columns + self.primary_key))

    def schema(self) -> StructType:
        """The table schema as a StructType (parsed once per layout)."""
        cached = self.__dict__.get("_schema")
        if cached is None:
            cached = parse_schema(self.schema_ddl)
            object.__setattr__(self, "_schema", cached)
        return cached

    @property
    def constraints(self) -> dict[str, str]:
        """The table's CHECK constraints (since 0.6): name -> SQL expression, by name (``delta.constraints.*``)."""
        return table_constraints(self.properties)

    def int_property(self, key: str, default: int) -> int:
        try:
            value = int(self.properties.get(key, default))
        except ValueError:
            return default
        return value if value > 0 else default


def parse_schema(ddl: str) -> StructType:
    """Parse a Spark DDL schema string (needs an active SparkContext)."""
    from pyspark.sql.types import DataType, StructType

    schema = DataType.fromDDL(ddl)
    if not isinstance(schema, StructType):  # pragma: no cover - fromDDL of a column list is a struct
        raise InvalidTableError(f"schema {ddl!r} is not a column list")
    return schema


def schema_to_ddl(schema: StructType) -> str:
    """A Spark DDL string for ``schema`` (``\\`name\\` type [NOT NULL]`` per column)."""
    parts = []
    for f in schema.fields:
        name = "`" + f.name.replace("`", "``") + "`"
        parts.append(f"{name} {f.dataType.simpleString()}" + ("" if f.nullable else " NOT NULL"))
    return ", ".join(parts)


def evolved_metadata(
    current: TableMetadata, fields: Sequence[Any], *, merge: bool = False, replace: bool = False
) -> TableMetadata | None:
    """The metadata a write publishes with its files when it changes the schema, or None when it does not.

    ``fields`` are the DataFrame's ``StructField``s (no SparkSession needed).
    ``merge`` (Delta's ``mergeSchema``): columns the table lacks are appended,
    nullable, in the DataFrame's order. ``replace`` (``overwriteSchema``, a
    whole-table overwrite only): the schema becomes the DataFrame's, in its
    order; key and partition columns keep their table definition and must be
    in the DataFrame with the table's type (the arbiter refuses changing them).
    ``SchemaMismatchError`` names what cannot be.
    """
    from ordo.schemas.models import parse_ddl, split_top_level

    if not (merge or replace):
        return None  # a plain write: ``conform`` names every mismatch (a column differing in case included)
    parts = [p.strip() for p in split_top_level(current.schema)]
    columns = parse_ddl(current.schema)
    by_name = {c.name: (c, text) for c, text in zip(columns, parts, strict=True)}
    lowered = {c.name.lower(): c.name for c in columns if c.name != ROW_ID_COLUMN}
    for f in fields:
        other = lowered.get(f.name.lower())
        if other is not None and other != f.name:
            raise SchemaMismatchError(
                f"column {f.name!r} differs from the table's {other!r} only in case; rename it in the DataFrame"
            )
    if replace:
        names = [f.name for f in fields]
        fixed = dict.fromkeys(c for c in (*current.primary_key, *current.partition_columns) if c != ROW_ID_COLUMN)
        missing = [c for c in fixed if c not in names]
        wrong = [
            f"{f.name}: {f.dataType.simpleString()} (table: {by_name[f.name][0].type})"
            for f in fields
            if f.name in fixed and f.dataType.simpleString().lower() != by_name[f.name][0].type
        ]
        if missing or wrong:
            raise SchemaMismatchError(
                f"overwriteSchema keeps the key and partition columns {list(fixed)} as they are (files are bucketed "
                f"and placed by them): missing {missing}, other types {wrong}; create a new table to change them"
            )
        texts = [by_name[f.name][1] if f.name in fixed else _column_ddl(f.name, f.dataType) for f in fields]
        if current.keyless:
            texts.append(by_name[ROW_ID_COLUMN][1])
        schema = ", ".join(texts)
        if parse_ddl(schema) == columns:
            return None
    elif merge:
        added = [f for f in fields if f.name.lower() not in lowered]
        if not added:
            return None
        schema = ", ".join([*parts, *(_column_ddl(f.name, f.dataType) for f in added)])
    else:
        return None
    return current.model_copy(update={"schema": schema})


def _column_ddl(name: str, data_type: Any) -> str:
    """One nullable column's DDL: a column a write adds or replaces is nullable (older files hold no value)."""
    return "`" + name.replace("`", "``") + "` " + data_type.simpleString()


def _is_atomic(data_type: DataType) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StructType

    return not isinstance(data_type, ArrayType | MapType | StructType)


def check_definition(schema: StructType, primary_key: Sequence[str], partitioned_by: Sequence[str]) -> None:
    """Refuse table definitions the writer and readers cannot serve."""
    names = [f.name for f in schema.fields]
    if not names:
        raise InvalidTableError("a table needs at least one column")
    lowered = [n.lower() for n in names]
    if len(set(lowered)) != len(lowered):
        raise InvalidTableError(f"column names repeat (case-insensitively): {names}")
    reserved = [n for n in names if n.lower().startswith(RESERVED_PREFIX) or n.lower() in RESERVED_COLUMNS]
    if reserved:
        raise InvalidTableError(
            f"reserved column names {reserved}: names starting with {RESERVED_PREFIX!r} and "
            f"{sorted(RESERVED_COLUMNS)} are used by ordo's files and change feed"
        )
    for what, columns in (("primary key", primary_key), ("partition", partitioned_by)):
        unknown = [c for c in columns if c not in names]
        if unknown:
            raise InvalidTableError(f"{what} columns {unknown} are not in the schema {names}")
        if len(set(columns)) != len(columns):
            raise InvalidTableError(f"{what} columns repeat a name: {list(columns)}")
        for c in columns:
            if not _is_atomic(schema[c].dataType):
                raise InvalidTableError(f"{what} column {c!r} has a complex type {schema[c].dataType.simpleString()}")
    if set(partitioned_by) >= set(names):
        raise InvalidTableError("every column is a partition column; a table needs data columns")


# --------------------------------------------------------------------------- paths and storage


def join_location(location: str, relative: str) -> str:
    """Absolute path (or URI) of a file given relative to the table location."""
    return location.rstrip("/") + "/" + relative


class Storage:
    """Writes, deletes and inspects files under a table location (pyarrow.fs: local, S3, GCS, HDFS).

    Files are written once at their final path and never renamed: on an object
    store a rename is a copy and a delete, and it is not atomic. An object
    store has no directories, so none is made (``ensure_parent``).
    """

    def __init__(self, location: str) -> None:
        from ordo.kernel.objectstore import filesystem, is_object_store

        self.location = location
        fs, base = filesystem(location)
        self.fs: FileSystem = fs
        self.base = base.rstrip("/")
        self.object_store = is_object_store(fs)

    def path(self, relative: str) -> str:
        return f"{self.base}/{relative}"

    def list_files(self, relative_dir: str = "") -> list[tuple[str, int]]:
        """Files under ``relative_dir`` (recursive; the whole location by default) as (path relative to it, size)."""
        from pyarrow.fs import FileSelector, FileType

        root = self.path(relative_dir).rstrip("/")
        infos = self.fs.get_file_info(FileSelector(root, recursive=True, allow_not_found=True))
        found = []
        for info in infos:
            if info.type == FileType.File:
                found.append((info.path[len(root) + 1 :], int(info.size or 0)))
        return sorted(found)

    def ensure_parent(self, relative: str) -> None:
        """Make the directory a new file goes into (nothing to make on an object store)."""
        if not self.object_store:
            self.fs.create_dir(self.path(relative).rsplit("/", 1)[0], recursive=True)

    def delete_file(self, relative: str) -> bool:
        """Delete one file; False if it was not there."""
        try:
            self.fs.delete_file(self.path(relative))
        except FileNotFoundError:
            return False
        return True

    def exists(self, relative: str) -> bool:
        from pyarrow.fs import FileType

        return self.fs.get_file_info(self.path(relative)).type != FileType.NotFound

    def footer(self, relative: str) -> Any:
        import pyarrow.parquet as pq

        with self.fs.open_input_file(self.path(relative)) as handle:
            return pq.read_metadata(handle)


# --------------------------------------------------------------------------- schema enforcement


def _type_text(data_type: DataType) -> str:
    return data_type.simpleString()  # ignores nullability, which is checked for keys only


def with_row_ids(df: DataFrame, layout: Layout, prefix: str) -> DataFrame:
    """A keyless table's rows (user columns, conformed) with new row ids, in table order; others unchanged.

    A row id is ``<prefix><n>``: the prefix is unique per write (``Transaction.row_id_prefix``: the write id and
    a counter) and ``n`` is Spark's ``monotonically_increasing_id`` (unique within the DataFrame), so ids never
    repeat across writes and a re-run task writes the same ids again for the same input.
    """
    if not layout.keyless:
        return df
    from pyspark.sql import functions as F

    ids = F.concat(F.lit(prefix), F.monotonically_increasing_id().cast("string"))
    columns = [ids.alias(f.name) if f.name == ROW_ID_COLUMN else F.col(f"`{f.name}`") for f in layout.schema().fields]
    return df.select(*columns)


def conform(df: DataFrame, schema: StructType, *, fill: Collection[str] = ()) -> DataFrame:
    """``df`` with the table's columns in table order; ``SchemaMismatchError`` naming every mismatch.

    Columns are matched by exact name; types must be equal (nullability aside).
    No implicit casts: a silent cast can lose data, so the caller casts. A
    column of ``fill`` the DataFrame lacks is written as nulls (Delta's rule for
    a table column missing from an append); any other absent column is named.
    """
    have = {f.name: f.dataType for f in df.schema.fields}
    want = {f.name: f.dataType for f in schema.fields}
    problems = []
    absent = [c for c in want if c not in have]
    missing = [c for c in absent if c not in fill]
    extra = [c for c in have if c not in want]
    if missing:
        problems.append(f"missing columns {missing}")
    if ROW_ID_COLUMN in extra:
        problems.append(f"{ROW_ID_COLUMN} is a keyless table's hidden row id, which ordo writes: leave it out")
        extra.remove(ROW_ID_COLUMN)
    if extra:
        hints = []
        for c in extra:
            close = [m for m in absent if m.lower() == c.lower()]
            hints.append(f"{c} (did you mean {close[0]}?)" if close else c)
        problems.append(f"extra columns [{', '.join(hints)}]")
    differ = [
        f"{c}: table has {_type_text(want[c])}, DataFrame has {_type_text(have[c])}"
        for c in want
        if c in have and _type_text(want[c]) != _type_text(have[c])
    ]
    if differ:
        problems.append("type differences: " + "; ".join(differ))
    if problems:
        raise SchemaMismatchError(
            "DataFrame does not match the table schema: "
            + "; ".join(problems)
            + " (cast or select columns to match; nothing was written)"
        )
    from pyspark.sql import functions as F

    return df.select(*[F.col(f"`{c}`") if c in have else F.lit(None).cast(want[c]).alias(c) for c in want])


def fillable(layout: Layout) -> list[str]:
    """The columns a user's write may leave out (written as nulls: Delta's rule): nullable, neither key nor
    partition column (a row needs those), nor a keyless table's row id (ordo writes it). No Spark needed."""
    from ordo.schemas.models import parse_ddl

    fixed = {*layout.primary_key, *layout.partition_columns, ROW_ID_COLUMN}
    return [c.name for c in parse_ddl(layout.schema_ddl) if c.nullable and c.name not in fixed]


def canonical_partition(spark: SparkSession, layout: Layout, partition: Mapping[str, Any]) -> dict[str, str]:
    """A static partition spec in canonical string form (``CAST(value AS type) AS STRING``, as files are labelled)."""
    columns = layout.partition_columns
    if not columns:
        raise InvalidOperationError(f"table {layout.name!r} is not partitioned; do not pass partition=")
    if not isinstance(partition, Mapping) or set(partition) != set(columns):
        raise InvalidOperationError(
            f"partition {dict(partition) if isinstance(partition, Mapping) else partition!r} must name exactly "
            f"the partition columns {list(columns)}"
        )
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    schema = layout.schema()
    result: dict[str, str] = {}
    pending: list[Column] = []
    for c in columns:
        value = partition[c]
        if value is None or value == "":
            raise PartitionValueError(f"partition column {c!r} cannot be null or empty")
        if isinstance(schema[c].dataType, StringType) and isinstance(value, str):
            result[c] = value
        else:
            pending.append(F.lit(value).cast(schema[c].dataType).cast("string").alias(c))
    if pending:
        try:
            row = spark.range(1).select(*pending).first()
        except Exception as exc:
            raise PartitionValueError(
                f"partition {dict(partition)!r} does not cast to the column types: {exc}"
            ) from exc
        assert row is not None
        for c, value in row.asDict().items():
            if value is None:
                raise PartitionValueError(f"partition value {partition[c]!r} is not a valid {schema[c].dataType}")
            result[c] = value
    return {c: result[c] for c in columns}


def canonical_values(spark: SparkSession, layout: Layout, column: str, values: Iterable[Any]) -> dict[Any, str | None]:
    """Each value of partition ``column`` in canonical string form (as files are labelled; one Spark job for all
    when the column is not a string), None for a value that does not cast to the column's type."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    data_type = layout.schema()[column].dataType
    distinct = list(dict.fromkeys(values))
    if isinstance(data_type, StringType) or not distinct:
        return {v: None if v is None or v == "" else str(v) for v in distinct}
    casts = [F.lit(v).cast(data_type).cast("string").alias(f"v{i}") for i, v in enumerate(distinct)]
    try:
        row = spark.range(1).select(*casts).first()
    except Exception as exc:
        raise PartitionValueError(f"partition values {distinct!r} do not cast to {data_type}: {exc}") from exc
    assert row is not None
    return {v: row[f"v{i}"] for i, v in enumerate(distinct)}


def _partition_match(layout: Layout, partition: Mapping[str, str]) -> Column:
    from pyspark.sql import functions as F

    cond = F.lit(True)
    for c in layout.partition_columns:
        cond = cond & (F.col(f"`{c}`").cast("string") == F.lit(partition[c]))
    return cond


def _bad_partition(layout: Layout, static_partition: Mapping[str, str] | None) -> Any:
    """True for a row whose partition value is null or empty, or outside ``static_partition`` when given."""
    from pyspark.sql import functions as F

    bad = F.lit(False)
    for c in layout.partition_columns:
        text = F.col(f"`{c}`").cast("string")
        bad = bad | text.isNull() | (text == F.lit(""))
        if static_partition is not None:
            bad = bad | (text != F.lit(static_partition[c]))
    return bad


def _offending(df: DataFrame, layout: Layout, static_partition: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """The (partition, key) groups of ``df`` with two rows, a null key or a bad partition value (at most
    ``3 * EXAMPLES``): identity values, ``_ordo_n`` rows and ``_ordo_badp``. Grouped by a Spark job (a shuffle),
    or in Arrow on the driver when Spark estimates the rows small (``smallwrites``)."""
    from pyspark.sql import functions as F

    from ordo.producer.smallwrites import driver_side, offending_groups

    identity = layout.identity
    checked = df.select(
        *[F.col(f"`{c}`") for c in identity], _bad_partition(layout, static_partition).alias(BAD_PARTITION_COLUMN)
    )
    if driver_side(checked):
        found = offending_groups(checked, identity, layout.primary_key, 3 * EXAMPLES)
        if found is not None:
            return found
    null_key = F.lit(False)
    for c in layout.primary_key:
        null_key = null_key | F.col(f"`{c}`").isNull()
    grouped = checked.groupBy(*[F.col(f"`{c}`") for c in identity]).agg(
        F.count(F.lit(1)).alias("_ordo_n"), F.max(BAD_PARTITION_COLUMN).alias(BAD_PARTITION_COLUMN)
    )
    offending = grouped.where((F.col("_ordo_n") > 1) | F.col(BAD_PARTITION_COLUMN) | null_key).limit(3 * EXAMPLES)
    return [row.asDict() for row in offending.collect()]


def validate_records(
    df: DataFrame, layout: Layout, static_partition: Mapping[str, str] | None = None, *, keys: bool | None = None
) -> None:
    """Refuse null or duplicate keys and bad partition values, in one Spark job, before anything is written.

    Keys are unique per partition (the dedup scope of merge-on-read), so the
    check groups by partition columns and primary key. A keyless table's row
    ids are new and unique by construction: unless ``keys`` asks (MERGE: a
    target row matched twice), only partition values are checked, without the
    grouping (an append costs one scan, no shuffle). Rows Spark estimates small are grouped on the driver
    (``smallwrites.driver_side``), with the same checks and messages.
    """
    from pyspark.sql import functions as F

    if keys is None:
        keys = not layout.keyless
    if not keys:
        if not layout.partition_columns:
            return
        found = (
            df.where(_bad_partition(layout, static_partition))
            .select(*[F.col(f"`{c}`") for c in layout.partition_columns])
            .limit(EXAMPLES)
            .collect()
        )
        _refuse_partitions([row.asDict() for row in found], static_partition)
        return

    _refuse(_offending(df, layout, static_partition), layout, static_partition)


def _refuse_partitions(parts: list[dict[str, Any]], static_partition: Mapping[str, str] | None) -> None:
    """A keyless write's rows with bad partition values (``parts``, their values): refused."""
    if not parts:
        return
    where = "outside the partition being written, or " if static_partition is not None else ""
    raise PartitionValueError(f"rows {where}with null or empty partition values (e.g. {parts}); nothing was written")


def _refuse(offending: list[dict[str, Any]], layout: Layout, static_partition: Mapping[str, str] | None) -> None:
    """The groups ``_offending`` found, refused with the error naming what is wrong (none found: nothing)."""
    if not offending:
        return
    identity = layout.identity
    nulls, dups, parts = [], [], []
    for values in offending:
        key = {c: values[c] for c in identity}
        if any(values[c] is None for c in layout.primary_key):
            nulls.append(key)
        elif values["_ordo_n"] > 1:
            dups.append(f"{key} x{values['_ordo_n']}")
        if values[BAD_PARTITION_COLUMN]:
            parts.append({c: values[c] for c in layout.partition_columns})
    if dups and layout.keyless:
        raise InvalidOperationError(
            f"a target row matched several source rows (e.g. {len(dups)} rows); nothing was written: "
            "make the merge condition match each target row at most once"
        )
    if nulls or dups:
        problems = []
        if nulls:
            problems.append(f"null primary key values (e.g. {nulls[:EXAMPLES]})")
        if dups:
            problems.append(f"duplicate primary keys within the write (e.g. {dups[:EXAMPLES]})")
        raise PrimaryKeyError(
            f"primary key {list(layout.primary_key)} violated: " + "; ".join(problems) + "; nothing was written"
        )
    if static_partition is not None:
        raise PartitionValueError(
            f"rows outside the partition {dict(static_partition)} being written (e.g. partitions {parts[:EXAMPLES]}), "
            "or null/empty partition values; nothing was written"
        )
    raise PartitionValueError(
        f"null or empty partition values (e.g. {parts[:EXAMPLES]}); partition columns "
        f"{list(layout.partition_columns)} need a value; nothing was written"
    )


@dataclass(frozen=True)
class RecordCheck:
    """``validate_records``' check of a write's records, made where they are: by a Spark job before a job writes
    them, or on the rows a driver-side write collected (``smallwrites``), in the same collection."""

    layout: Layout
    static_partition: Mapping[str, str] | None = None
    keys: bool | None = None

    def column(self) -> Column:
        """The column the collection adds for ``on_collected``: whether a row's partition value is bad."""
        return _bad_partition(self.layout, self.static_partition).alias(BAD_PARTITION_COLUMN)

    def in_spark(self, records: DataFrame) -> None:
        validate_records(records, self.layout, self.static_partition, keys=self.keys)

    def on_collected(self, rows: pa.Table) -> bool:
        """Refuse ``rows`` (collected with ``column()``) as ``validate_records`` would; False when Arrow cannot
        group the key's types (a nested key): the caller checks with ``in_spark``."""
        import pyarrow.compute as pc

        from ordo.producer.smallwrites import offending_in

        layout = self.layout
        keys = not layout.keyless if self.keys is None else self.keys
        if not keys:
            if layout.partition_columns:
                bad = rows.filter(pc.fill_null(rows.column(BAD_PARTITION_COLUMN), False))
                parts = bad.select(list(layout.partition_columns)).slice(0, EXAMPLES).to_pylist()
                _refuse_partitions(parts, self.static_partition)
            return True
        found = offending_in(rows, layout.identity, layout.primary_key, 3 * EXAMPLES)
        if found is None:
            return False
        _refuse(found, layout, self.static_partition)
        return True


# --------------------------------------------------------------------------- CHECK constraints (since 0.6)

# Starts the message a write stopped by a constraint fails with (``enforce_constraints``, ``_violation``).
_VIOLATION_MARK = "ordo: CHECK constraint "
_CONSTRAINT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def table_constraints(properties: Mapping[str, str]) -> dict[str, str]:
    """The CHECK constraints among a table's properties: name -> SQL expression, by name."""
    return {k[len(CONSTRAINT_PREFIX) :]: v for k, v in sorted(properties.items()) if k.startswith(CONSTRAINT_PREFIX)}


def constraint_key(name: str) -> str:
    """The property a constraint named ``name`` is (Delta's: names are case-insensitive, kept lower-case)."""
    if not isinstance(name, str) or _CONSTRAINT_NAME.fullmatch(name) is None:
        raise InvalidOperationError(
            f"constraint name {str(name)[:200]!r}: letters, digits and '_', not starting with a digit, at most 128"
        )
    return CONSTRAINT_PREFIX + name.lower()


def _holds(expression: str) -> Column:
    """True where the constraint holds: its expression is true (false and null violate it, as in Delta)."""
    from pyspark.sql import functions as F

    return F.coalesce(F.expr(expression), F.lit(False))


def check_constraint(rows: DataFrame, name: str, expression: str) -> None:
    """``expression`` must be a boolean SQL expression of ``rows``' columns a filter takes (no aggregate, no window):
    ``InvalidOperationError`` saying why not."""
    try:
        _ = rows.where(_holds(expression)).schema  # analysed: its columns, its type, where it may stand
    except Exception as exc:  # Spark's ParseException, AnalysisException
        raise InvalidOperationError(
            f"CHECK constraint {name} ({expression}) is not a condition on the rows: {exc}"
        ) from None


def check_rows(rows: DataFrame, constraints: Mapping[str, str], what: str) -> None:
    """``ConstraintViolationError`` unless every row of ``rows`` satisfies every constraint: one Spark job."""
    from pyspark.sql import functions as F

    if not constraints:
        return
    counts = [
        F.sum(F.when(_holds(expression), 0).otherwise(1)).alias(f"c{i}")
        for i, expression in enumerate(constraints.values())
    ]
    found = rows.select(*counts).collect()[0]
    broken = [(name, expression, int(found[i] or 0)) for i, (name, expression) in enumerate(constraints.items())]
    broken = [b for b in broken if b[2]]
    if broken:
        shown = "; ".join(f"{n} rows violate CHECK constraint {name} ({expression})" for name, expression, n in broken)
        raise ConstraintViolationError(f"{what}: {shown}; nothing was committed")


def enforce_constraints(records: DataFrame, layout: Layout) -> DataFrame:
    """``records`` whose write stops at the first new row a CHECK constraint of the table does not hold for.

    Checked as the files are written (Spark's ``raise_error`` in a filter that
    keeps every row), so a write costs no scan more. A new row is an upsert
    record with no sequence number of its own: a delete record carries no row,
    and a rewrite's records keep theirs (they were checked when first written).
    ``FileWriter.write`` turns the failure into ``ConstraintViolationError``.
    """
    constraints = layout.constraints
    if not constraints:
        return records
    from pyspark.sql import functions as F

    new_row = (F.col(OP_COLUMN) == F.lit(OP_UPSERT)) & F.col(SEQ_COLUMN).isNull()
    shown = F.to_json(F.struct(*[F.col(f"`{f.name}`") for f in layout.user_schema().fields]))
    for name, expression in constraints.items():
        try:
            violated = F.when(new_row, ~_holds(expression)).otherwise(F.lit(False))  # evaluated on new rows only
            message = F.concat(F.lit(f"{_VIOLATION_MARK}{name} ({expression}) violated by row with values "), shown)
            records = records.where(F.when(violated, F.raise_error(message)).isNull())
        except Exception as exc:  # Spark's ParseException, AnalysisException
            raise WriteRefusedError(
                f"CHECK constraint {name} ({expression}) of table {layout.name} cannot be evaluated: {exc}"
            ) from None
    return records


def _violation(error: BaseException) -> ConstraintViolationError | None:
    """The constraint violation a failed write reports (``enforce_constraints``' message), if it is one."""
    text = str(error)
    start = text.find(_VIOLATION_MARK)
    if start < 0:
        return None
    line = text[start + len("ordo: ") :].splitlines()[0]
    line = re.sub(r"\s*SQLSTATE: \w+\s*$", "", line).rstrip(" .'\"")
    return ConstraintViolationError(f"{line}; nothing was written")


# --------------------------------------------------------------------------- records


def _typed_null(data_type: DataType) -> Column:
    from pyspark.sql import functions as F

    return F.lit(None).cast(data_type)


def upsert_records(df: DataFrame) -> DataFrame:
    """Table rows (already conformed) tagged as upserts with no sequence number (the commit's version)."""
    from pyspark.sql import functions as F

    return df.withColumns({OP_COLUMN: F.lit(OP_UPSERT), SEQ_COLUMN: F.lit(None).cast("bigint")})


def with_static_partition(df: DataFrame, layout: Layout, partition: Mapping[str, str]) -> DataFrame:
    """Add the static partition's columns when the DataFrame leaves them out (``INSERT ... PARTITION (...)``)."""
    from pyspark.sql import functions as F

    present = set(df.columns)
    missing = [c for c in layout.partition_columns if c not in present]
    if not missing:
        return df
    if len(missing) != len(layout.partition_columns):
        raise SchemaMismatchError(
            f"the DataFrame has some partition columns but not {missing}: give all or none of {list(layout.partition_columns)}"
        )
    schema = layout.schema()
    for c in missing:
        df = df.withColumn(c, F.lit(partition[c]).cast(schema[c].dataType))
    return df


def filtered(
    snapshot: DataFrame, layout: Layout, where: str | Column | None, partition: Mapping[str, str] | None
) -> DataFrame:
    """Live rows of the pinned snapshot that an UPDATE/DELETE affects."""
    from pyspark.sql import functions as F

    df = snapshot.select(*[F.col(f"`{f.name}`") for f in layout.schema().fields])
    if partition is not None:
        df = df.where(_partition_match(layout, partition))
    if where is not None:
        try:
            df = df.where(where)
        except Exception as exc:
            raise InvalidOperationError(f"invalid where condition {where!r}: {exc}") from exc
    return df


def update_records(rows: DataFrame, layout: Layout, assignments: Mapping[str, str | Column]) -> DataFrame:
    """Upsert records with the new values of the affected keys (merge-on-read: no file is rewritten)."""
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import functions as F

    schema = layout.schema()
    if not assignments:
        raise InvalidOperationError("update needs at least one column assignment in set=")
    visible = [f.name for f in layout.user_schema().fields]  # a keyless table's row id is not the user's
    unknown = [c for c in assignments if c not in visible]
    if unknown:
        raise InvalidOperationError(f"update sets unknown columns {unknown}; table columns are {visible}")
    frozen = [c for c in assignments if c in layout.primary_key or c in layout.partition_columns]
    if frozen:
        raise InvalidOperationError(
            f"update cannot change key or partition columns {frozen}: delete and insert the rows instead"
        )
    columns = []
    for f in schema.fields:
        if f.name in assignments:
            value = assignments[f.name]
            expression = value if isinstance(value, SparkColumn) else F.expr(value)
            columns.append(expression.cast(f.dataType).alias(f.name))
        else:
            columns.append(F.col(f"`{f.name}`"))
    try:
        result = rows.select(*columns)
    except Exception as exc:
        raise InvalidOperationError(f"invalid update expression in {dict(assignments)!r}: {exc}") from exc
    return upsert_records(result)


def delete_records(rows: DataFrame, layout: Layout) -> DataFrame:
    """Delete records for the affected keys: key and partition columns set, other columns null."""
    from pyspark.sql import functions as F

    keep = set(layout.identity)
    columns = [
        F.col(f"`{f.name}`") if f.name in keep else _typed_null(f.dataType).alias(f.name)
        for f in layout.schema().fields
    ]
    return (
        rows.select(*columns).withColumn(OP_COLUMN, F.lit(OP_DELETE)).withColumn(SEQ_COLUMN, F.lit(None).cast("bigint"))
    )


def file_schema(layout: Layout) -> StructType:
    """The schema of a data file: table columns, ``_ordo_op``, ``_ordo_seq``."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    return StructType(
        [
            *layout.schema().fields,
            StructField(OP_COLUMN, StringType(), False),
            StructField(SEQ_COLUMN, LongType(), True),
        ]
    )


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def read_files(spark: SparkSession, layout: Layout, files: Iterable[tuple[str, int]]) -> DataFrame:
    """Records of ``files`` ((absolute path, added ID version) pairs) with their effective sequence number.

    One scan of every file when their names are distinct and plain (what ordo's writers make: ``<txn id>-<n>``):
    each record's added version comes from its file's name (Spark's ``_metadata.file_name``, a broadcast join
    with the names), so a rewrite of many small files is one read, not one per version (each a file listing and
    a scan of its own). Otherwise, one scan per added version.
    """
    from pyspark.sql import functions as F

    from ordo.kernel.objectstore import spark_path

    files = [(spark_path(path), version) for path, version in files]
    schema = file_schema(layout)
    by_version: dict[int, list[str]] = {}
    for path, version in files:
        by_version.setdefault(version, []).append(path)
    names = [path.rsplit("/", 1)[-1] for path, _ in files]
    if len(by_version) > 1 and len(set(names)) == len(names) and all(_PLAIN_NAME.fullmatch(n) for n in names):
        versions = spark.createDataFrame(
            [(name, version) for name, (_, version) in zip(names, files, strict=True)],
            "_ordo_file STRING, _ordo_version BIGINT",
        )
        scan = spark.read.schema(schema).parquet(*[path for path, _ in files])
        joined = scan.withColumn("_ordo_file", F.col("_metadata.file_name")).join(
            F.broadcast(versions), "_ordo_file", "left"
        )
        unknown = F.raise_error(F.concat(F.lit("a record of an unknown file: "), F.col("_ordo_file")))
        sequence = F.coalesce(F.col(SEQ_COLUMN), F.col("_ordo_version"), unknown)  # never a record without one
        return joined.withColumn(SEQ_COLUMN, sequence).select(*[F.col(f"`{f.name}`") for f in schema.fields])
    frames = [
        spark.read.schema(schema)
        .parquet(*paths)
        .withColumn(SEQ_COLUMN, F.coalesce(F.col(SEQ_COLUMN), F.lit(version).cast("bigint")))
        for version, paths in sorted(by_version.items())
    ]
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def rewrite_records(records: DataFrame, layout: Layout, mode: str) -> DataFrame:
    """Compaction/cluster output: per key the newest record, its effective sequence kept in ``_ordo_seq``.

    ``minor`` keeps delete records (they may still hide a key in files outside
    this rewrite); ``major`` and ``cluster`` keep live rows only.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    window = Window.partitionBy(*[F.col(f"`{c}`") for c in layout.identity]).orderBy(
        # a tie (never made by this writer) goes to the upsert, as in consumer.spark.read_snapshot
        F.col(SEQ_COLUMN).desc(),
        F.col(OP_COLUMN).desc(),
    )
    newest = (
        records.withColumn("_ordo_rank", F.row_number().over(window)).where(F.col("_ordo_rank") == 1).drop("_ordo_rank")
    )
    if mode != "minor":
        newest = newest.where(F.col(OP_COLUMN) == F.lit(OP_UPSERT))
    return newest


# --------------------------------------------------------------------------- writing


def _stat_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def encode_key(values: Sequence[Any]) -> str:
    """The string form of a key in file stats: the value for one column, a JSON array for several."""
    if len(values) == 1:
        return _stat_text(values[0])
    return json.dumps([_stat_text(v) for v in values], separators=(",", ":"), ensure_ascii=False)


def key_stats(footer: Any, primary_key: Sequence[str]) -> tuple[str | None, str | None]:
    """Min/max of the key from a Parquet footer's column statistics (no data read).

    For a composite key these are the per-column minima and maxima: bounds of
    the file's keys, not necessarily keys present in it. None when a column
    has no statistics.
    """
    schema = footer.schema
    names = [schema.column(i).path for i in range(len(schema))]
    lows, highs = [], []
    for c in primary_key:
        if c not in names:
            return None, None
        index = names.index(c)
        low = high = None
        for g in range(footer.num_row_groups):
            stats = footer.row_group(g).column(index).statistics
            if stats is None or not stats.has_min_max:
                if footer.row_group(g).num_rows:
                    return None, None
                continue
            low = stats.min if low is None or stats.min < low else low
            high = stats.max if high is None or stats.max > high else high
        if low is None or high is None:
            return None, None
        lows.append(low)
        highs.append(high)
    low_text, high_text = encode_key(lows), encode_key(highs)
    if len(low_text) > MAX_STAT_LENGTH or len(high_text) > MAX_STAT_LENGTH:
        return None, None
    return low_text, high_text


def target_file_count(total_bytes: int, layout: Layout) -> int:
    """How many files a rewrite of ``total_bytes`` should produce (at least one)."""
    target = layout.int_property(TARGET_FILE_BYTES_PROPERTY, DEFAULT_TARGET_FILE_BYTES)
    return max(1, math.ceil(total_bytes / target))
