"""The ``ordo`` Spark data source (``pyspark.sql.datasource``): batch and streaming reads and writes.

Registered by ``ordo.spark.register(spark)`` (and by ``local_spark_session()``
and every ``DeltaTable`` call)::

    spark.read.format("ordo").load("events")                        # merge-on-read snapshot
    spark.read.format("ordo").option("versionAsOf", 3).load("events")
    df.write.format("ordo").mode("append").save("events")           # one INSERT INTO
    df.write.format("ordo").mode("overwrite").option("replaceWhere", "dt = '2024-05-01'").save("events")
    df.writeStream.format("ordo").option("checkpointLocation", p).start("events")
    spark.readStream.format("ordo").option("readChangeFeed", "true").option("startingVersion", 5).load("events")

Where each part runs: Spark calls this module in its Python workers, never in
the driver's own Python process, so nothing here has a SparkSession. Reads and
writes of data files use pyarrow (``consumer.arrow``, ``producer.arrow``);
catalog look-ups use ``consumer.Catalog``; commits use the Spark-free
``CommitClient``. Planning (``reader``/``writer``/``partitions``) and the
writers' ``commit`` run in workers on the driver's machine; ``read`` and
``write`` run in the tasks.

1. A batch write's tasks write Parquet files under the transaction's id; the
   writer's ``commit`` (on the driver, with every task's files) checks keys
   across tasks and publishes ONE intent; a rejection deletes the files and
   fails the write with the arbiter's reason.
2. The streaming sink does the same per micro-batch with the idempotency pair
   (``app_id``, batch id): ``app_id`` is the ``appId`` option, else
   ``ordo-sink-<hash of the checkpoint location>-<query id>``, where the query
   id is Spark's, kept in the checkpoint's metadata (the same across restarts
   of one query, new when the checkpoint is deleted and its path reused). A
   replayed batch is refused with ``BATCH_ALREADY_COMMITTED`` and counts as done.
3. The change feed's offsets are ``{"version": v}``: the next ID version to
   read. A micro-batch reads the commits ``[start, end)``; each commit is one
   input partition whose change rows are a pure function of the catalog.

Settings (broker, prefix, catalog) come from ``ORDO_*`` in the workers'
environment, from defaults given to ``register(spark, settings)``, or from the
options ``ordo.bootstrapServers``, ``ordo.topicPrefix``, ``ordo.catalog``,
``ordo.warehouse``.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    In,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StringType, StructField, StructType

from ordo.consumer.arrow import CHANGE_COLUMNS
from ordo.kernel.errors import OrdoError
from ordo.kernel.settings import Settings, load_settings, parse_bool
from ordo.producer.connection import settings_options
from ordo.schemas.buckets import table_buckets
from ordo.schemas.models import ddl_columns as _ddl_columns
from ordo.schemas.operations import ROW_ID_COLUMN, Reason
from ordo.schemas.topics import table_identifier

NAME = "ordo"
SETTINGS_OPTIONS = {
    "ordo.bootstrapservers": "bootstrap_servers",
    "ordo.topicprefix": "topic_prefix",
    "ordo.catalog": "catalog",
    "ordo.warehouse": "warehouse",
    "ordo.trustedkeys": "trusted_keys",  # the readers' trusted arbiter keys (signed decisions)
    "ordo.requiresignatures": "require_signatures",
}
FORM_OPTION = "ordo.changefeedform"
DEFAULT_WAIT = 60.0
BATCH_ALREADY_COMMITTED = Reason.BATCH_ALREADY_COMMITTED
BATCH_ID_PROPERTY = "streaming.sql.batchId"  # the task-local property Spark sets in a micro-batch's tasks
SINK_APP_PREFIX = "ordo-sink-"


class DataSourceOptionError(OrdoError, ValueError):
    """Raised when a ``format("ordo")`` option is missing, unknown, not for this use, or malformed."""


# --------------------------------------------------------------------------- the options contract

READ, STREAM_READ, WRITE, STREAM_WRITE = "batch read", "stream read", "batch write", "stream write"
_ALL = frozenset({READ, STREAM_READ, WRITE, STREAM_WRITE})
_READS, _WRITES = frozenset({READ, STREAM_READ}), frozenset({WRITE, STREAM_WRITE})


@dataclass(frozen=True)
class Option:
    """One option ``format("ordo")`` honours: its documented name, the uses it applies to, what it does."""

    name: str
    uses: frozenset[str]
    meaning: str


# The contract: every option ordo honours, as docs/api.md lists them (tests/e2e/test_datasource.py checks the
# table against this one). Any other option fails the read or write with an error naming it.
OPTIONS: tuple[Option, ...] = (
    Option("path", _ALL, "the table's name: `load(name)`, `save(name)`, `start(name)`"),
    Option("table", _ALL, "the table's name, when not given to `load`/`save`/`start`"),
    Option("versionAsOf", frozenset({READ}), "time travel to an ID version"),
    Option("timestampAsOf", frozenset({READ}), "time travel to a time version"),
    Option("readChangeFeed", _READS, "`true`: the change feed (required for `readStream`)"),
    Option(
        "startingVersion",
        _READS,
        "where the change feed starts (inclusive; `n`, or `latest` for a stream); a stream without a starting "
        "option begins with the snapshot at the head (each live row an `insert`), then the changes after it",
    ),
    Option("startingTimestamp", _READS, "where the change feed starts, by time version (inclusive)"),
    Option("endingVersion", frozenset({READ}), "the batch change feed's inclusive upper bound (default: the head)"),
    Option("endingTimestamp", frozenset({READ}), "the batch change feed's inclusive upper bound, by time version"),
    Option(
        "maxVersionsPerTrigger",
        frozenset({STREAM_READ}),
        "at most this many ID versions per micro-batch (ignored by `Trigger.AvailableNow`)",
    ),
    Option(
        "maxFilesPerTrigger",
        frozenset({STREAM_READ}),
        "at most about this many data files per micro-batch, whole commits (at least one; ignored by "
        "`Trigger.AvailableNow`)",
    ),
    Option(
        "maxBytesPerTrigger",
        frozenset({STREAM_READ}),
        "at most about this many bytes of data files per micro-batch, whole commits (at least one; `1g`, `64m` or "
        "a number; ignored by `Trigger.AvailableNow`)",
    ),
    Option(
        "skipChangeCommits",
        frozenset({STREAM_READ}),
        "a stream of the table's rows (no `readChangeFeed`): `true` skips a commit that updates or deletes rows "
        "instead of failing the stream on it (Delta's rule)",
    ),
    Option("ordo.changeFeedForm", _READS, "`delta` (default) or `compact`"),
    Option(
        "partition",
        frozenset({WRITE}),
        "overwrite: the one partition an INSERT OVERWRITE replaces (`dt=2024-05-01/...` or a JSON object)",
    ),
    Option(
        "replaceWhere",
        frozenset({WRITE}),
        "overwrite: a condition on partition columns (comparisons, `IN`, `BETWEEN`, `LIKE`, `IS NULL`, "
        "`AND`/`OR`/`NOT`, some functions: docs/writer.md); the partitions it selects are replaced and every row "
        "must satisfy it",
    ),
    Option(
        "mergeSchema",
        _WRITES,
        "`true`: columns of the rows the table lacks are added (nullable) in the same commit as the rows (a "
        "stream's: its first micro-batch's); rows written before read them as null",
    ),
    Option(
        "overwriteSchema",
        frozenset({WRITE}),
        "`true` with `mode(\"overwrite\")` of the whole table: the rows' schema becomes the table's in the same "
        "commit (key and partition columns kept)",
    ),
    Option(
        "partitionOverwriteMode",
        frozenset({WRITE}),
        "overwrite: `static` (default: the whole table, or `partition`/`replaceWhere`'s) or `dynamic` (only the "
        "partitions the rows are in)",
    ),
    Option(
        "txnAppId",
        frozenset({WRITE}),
        "with `txnVersion`: an idempotent write; a version this app id "
        "committed already is skipped (Delta's idempotent writes)",
    ),
    Option("txnVersion", frozenset({WRITE}), "with `txnAppId`: the write's number (an integer >= 0)"),
    Option(
        "checkpointLocation",
        frozenset({STREAM_WRITE}),
        "the sink's exactly-once identity, with Spark's query id kept in it (docs/writer.md)",
    ),
    Option("appId", frozenset({STREAM_WRITE}), "the sink's exactly-once identity, instead of the checkpoint's"),
    Option("ordo.commitTimeout", _WRITES, "seconds to wait for the decision and for the catalog (default 60)"),
    Option(
        "ordo.primaryKey",
        _WRITES,
        "a write that creates the table (it did not exist): its primary key, comma-separated (default: keyless)",
    ),
    Option(
        "ordo.partitionBy",
        _WRITES,
        "a write that creates the table: its partition columns, comma-separated (Spark's `partitionBy` cannot "
        "reach a Python data source)",
    ),
    Option("ordo.bootstrapServers", _ALL, "settings, over the registered defaults and `ORDO_*`"),
    Option("ordo.topicPrefix", _ALL, "settings, over the registered defaults and `ORDO_*`"),
    Option("ordo.catalog", _ALL, "settings, over the registered defaults and `ORDO_*`"),
    Option("ordo.warehouse", _ALL, "settings, over the registered defaults and `ORDO_*`"),
    Option("ordo.trustedKeys", _ALL, "settings, over the registered defaults and `ORDO_*`"),
    Option("ordo.requireSignatures", _ALL, "settings, over the registered defaults and `ORDO_*`"),
)
_BY_KEY = {o.name.lower(): o for o in OPTIONS}
# Delta options ordo does not honour yet: refused with the reason instead of ignored
NOT_YET = {
    "ignorechanges": "ignoreChanges: not supported (deprecated in Delta); use skipChangeCommits, or the change feed "
    "(readChangeFeed)",
    "ignoredeletes": "ignoreDeletes: not supported (deprecated in Delta); use skipChangeCommits, or the change feed "
    "(readChangeFeed)",
}


def check_options(options: Mapping[str, Any], use: str) -> None:
    """Refuse any option ``format("ordo")`` does not honour for ``use``, naming it (a typo never passes)."""
    import difflib

    problems = []
    for key in sorted(options):
        lowered = str(key).lower()
        known = _BY_KEY.get(lowered)
        if known is not None and use in known.uses:
            continue
        if known is not None:
            problems.append(f"{known.name} applies to {' and '.join(sorted(known.uses))}, not to a {use}")
        elif lowered in NOT_YET:
            problems.append(NOT_YET[lowered])
        else:
            names = [o.name for o in OPTIONS if use in o.uses]
            close = difflib.get_close_matches(lowered, [n.lower() for n in names], n=1, cutoff=0.75)
            hint = f" (did you mean {_BY_KEY[close[0]].name}?)" if close else ""
            problems.append(f"unknown option {key!r}{hint}")
    if problems:
        allowed = ", ".join(o.name for o in OPTIONS if use in o.uses)
        raise DataSourceOptionError(f"format('ordo') {use}: {'; '.join(problems)}. Its options: {allowed}")


def _truthy(value: str | None) -> bool:
    return str(value or "").strip().lower() in ("true", "1", "yes")


def _flag(options: Mapping[str, str], key: str) -> bool:
    """A boolean option (``true``/``false``, any case; absent: false); ``DataSourceOptionError`` otherwise."""
    value = options.get(key)
    if value is None:
        return False
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise DataSourceOptionError(f"{_BY_KEY[key].name} must be true or false, not {value!r}")
    return text == "true"


# --------------------------------------------------------------------------- schema text


def ddl_columns(ddl: str) -> list[tuple[str, str]]:
    """``(name, type text)`` of each column of a table's DDL (no Spark needed; ``schemas.models.parse_ddl``)."""
    try:
        return _ddl_columns(ddl)
    except ValueError as exc:
        raise DataSourceOptionError(f"cannot read the table schema: {exc}") from None


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# --------------------------------------------------------------------------- the source


@dataclass(frozen=True)
class _Table:
    """What the workers need of one table (picklable)."""

    name: str
    settings: Settings
    metadata: Any  # schemas.TableMetadata
    head: int

    def layout(self) -> Any:
        from ordo.producer.data import Layout

        return Layout.of(self.name, self.metadata)


class OrdoDataSource(DataSource):
    """``format("ordo")``: an ordo table by name (``load(name)`` / ``save(name)`` / ``start(name)``)."""

    defaults: ClassVar[dict[str, str]] = {}

    @classmethod
    def name(cls) -> str:
        return NAME

    def _options(self) -> dict[str, str]:
        merged = {k.lower(): v for k, v in self.defaults.items()}
        merged.update({str(k).lower(): str(v) for k, v in self.options.items() if v is not None})
        return merged

    def _settings(self) -> Settings:
        opts = self._options()
        overrides: dict[str, Any] = {field: opts[key] for key, field in SETTINGS_OPTIONS.items() if opts.get(key)}
        if "require_signatures" in overrides:
            overrides["require_signatures"] = parse_bool(overrides["require_signatures"])
        return load_settings(None, **overrides)

    def _table(self) -> _Table:
        from ordo.consumer import Catalog

        opts = self._options()
        name = opts.get("path") or opts.get("table")
        if not name:
            raise DataSourceOptionError('name the table: load("events"), save("events") or option("table", ...)')
        name = table_identifier(name)  # Spark's rules: "Events" is table events; db.table is refused
        settings = self._settings()
        with Catalog(settings.catalog) as catalog:
            info = catalog.table(name)
            metadata = info.metadata
            version, stamp = opts.get("versionasof"), opts.get("timestampasof")
            if (version is not None or stamp is not None) and not self._change_feed():
                try:  # a read as of an older version has that version's schema (before an ALTER TABLE)
                    at = None if version is None else int(version)
                    metadata = catalog.snapshot(name, version=at, timestamp=stamp).metadata
                except (ValueError, OrdoError):
                    pass  # the reader reports the bad option or version
        return _Table(name, settings, metadata, int(info.head_version))

    def _form(self) -> str:
        from ordo.consumer.arrow import check_form

        return check_form(self._options().get(FORM_OPTION, "delta"))

    def _change_feed(self) -> bool:
        return _truthy(self._options().get("readchangefeed"))

    def schema(self) -> str:
        metadata = self._table().metadata
        # a keyless table's row id is hidden, except in the compact change feed (its delete records carry only keys)
        compact = self._change_feed() and self._form() == "compact"
        ddl = metadata.schema if compact else metadata.user_schema
        if self._change_feed():
            ddl += ", `_change_type` STRING, `_commit_version` BIGINT, `_commit_timestamp` TIMESTAMP"
            if self._form() == "compact":
                ddl += ", `_scope` STRING"
        return ddl

    def reader(self, schema: StructType) -> DataSourceReader:
        check_options(self._options(), READ)
        if self._change_feed():
            return ChangeFeedReader(self._table(), schema, self._options(), self._form())
        return SnapshotReader(self._table(), schema, self._options())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        check_options(self._options(), STREAM_READ)
        if not self._change_feed():
            return ChangeFeedStreamReader(self._table(), schema, self._options(), "delta", rows_only=True)
        if "skipchangecommits" in self._options():
            raise DataSourceOptionError(
                "skipChangeCommits applies to a stream of the table's rows, not its change feed"
            )
        return ChangeFeedStreamReader(self._table(), schema, self._options(), self._form())

    def writer(self, schema: StructType, overwrite: bool) -> OrdoWriter:
        check_options(self._options(), WRITE)
        return OrdoWriter(self._table_to_write(schema), schema, self._options(), overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> OrdoStreamWriter:
        check_options(self._options(), STREAM_WRITE)
        if overwrite:
            raise DataSourceOptionError("the ordo sink appends (outputMode 'append'); complete mode is not supported")
        return OrdoStreamWriter(self._table_to_write(schema), schema, self._options())

    def _table_to_write(self, schema: StructType) -> _Table:
        """The table a write goes to; one that does not exist is created from the rows' schema (Delta's rule)."""
        from ordo.consumer import TableNotFoundError

        try:
            return self._table()
        except TableNotFoundError:
            opts = self._options()
            name = table_identifier(opts.get("path") or opts.get("table") or "")
            create_for_write(name, schema, opts, self._settings())
            return self._table()


# --------------------------------------------------------------------------- shapes


def _shape(table: _Table, schema: StructType) -> Any:
    from ordo.consumer.arrow import TableShape
    from ordo.consumer.files_source import arrow_schema

    fields = [f for f in schema.fields if f.name not in CHANGE_COLUMNS]
    if table.metadata.keyless and ROW_ID_COLUMN not in {f.name for f in fields}:
        # merge-on-read and change rows pair records by the hidden row id; ``_batches`` leaves it out
        fields.append(StructField(ROW_ID_COLUMN, StringType(), False))
    arrow = arrow_schema(StructType(fields))
    return TableShape(arrow, tuple(table.metadata.primary_key), tuple(table.metadata.partition_columns))


def _batches(table: Any, schema: StructType | None = None) -> Iterator[Any]:
    """``table``'s rows as the declared ``schema``'s columns (a keyless table's hidden row id left out)."""
    if schema is not None and ROW_ID_COLUMN in table.column_names and ROW_ID_COLUMN not in schema.fieldNames():
        table = table.drop_columns([ROW_ID_COLUMN])
    yield from table.to_batches(max_chunksize=65_536)


# --------------------------------------------------------------------------- snapshot reads


class SnapshotReader(DataSourceReader):
    """A batch read of the table at the head, ``versionAsOf`` or ``timestampAsOf``; one input partition per
    (table partition, bucket).

    A filter ``key = v`` or ``key IN (...)`` on a one-column primary key (``pushFilters``) keeps only the files of
    those keys' buckets whose key range may hold them, and reads only those keys' records from them: a point read
    merges a handful of rows, not the table. Spark still applies every filter.
    """

    def __init__(self, table: _Table, schema: StructType, options: Mapping[str, str]) -> None:
        from ordo.consumer import Catalog
        from ordo.consumer.arrow import FileRef

        version, stamp = options.get("versionasof"), options.get("timestampasof")
        if version is not None and stamp is not None:
            raise DataSourceOptionError("give versionAsOf or timestampAsOf, not both")
        with Catalog(table.settings.catalog) as catalog:
            snapshot = catalog.snapshot(table.name, version=None if version is None else int(version), timestamp=stamp)
        self.shape = _shape(table, schema)
        self.output = schema
        self.files = [FileRef.of(f) for f in snapshot.files]
        self.version = snapshot.id_version
        self.buckets = table_buckets(table.metadata.properties)
        self.keys: Any = None  # the key values a pushed filter asks for (a pyarrow table), or None: every key

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Prune files by equality (``=``, ``IN``) on partition columns and on a one-column primary key; every
        filter is still applied by Spark."""
        from ordo.consumer.arrow import files_with_keys, key_lookup

        for f in filters:
            attribute: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
            if self.keys is None and attribute == self.shape.primary_key and isinstance(f, EqualTo | In):
                keys = key_lookup(self.shape, [f.value] if isinstance(f, EqualTo) else list(f.value))
                if keys is not None:
                    self.keys = keys
                    self.files = files_with_keys(self.files, self.shape, keys, self.buckets)
            column = attribute[0] if len(attribute) == 1 else None
            if column is not None and column in self.shape.partition_columns:
                values: Sequence[Any] | None = None
                if isinstance(f, EqualTo):
                    values = [f.value]
                elif isinstance(f, In):
                    values = list(f.value)
                texts = None if values is None else {_partition_text(v) for v in values}
                if texts is not None and None not in texts:
                    self.files = [r for r in self.files if r.partition.get(column) in texts]
            yield f

    def __getstate__(self) -> dict[str, Any]:
        """The reader without its file list: Spark pickles the reader into every task's command (after the filters
        are pushed, before it asks for the partitions), and each task's files travel in its input partition."""
        state = dict(self.__dict__)
        state["files"] = []
        return state

    def partitions(self) -> Sequence[InputPartition]:
        """Input partitions of whole (table partition, bucket) groups, each merged alone (no shuffle), consecutive
        groups packed into tasks of about ``consumer.arrow.TASK_FILES`` files (``pack_groups``)."""
        from ordo.consumer.arrow import merge_groups, pack_groups

        tasks = pack_groups(merge_groups(self.files, self.shape.partition_columns))
        return [InputPartition(task) for task in tasks] or [InputPartition(())]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from ordo.consumer.arrow import live_rows

        for refs, merge in partition.value:
            rows = live_rows(refs, self.shape, keys=self.keys, merge=merge or self.keys is not None)
            yield from _batches(rows, self.output)


def _partition_text(value: Any) -> str | None:
    """A filter literal as the catalog's partition string, or None when its text form may differ from Spark's."""
    import datetime as dt

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    return None  # floats, timestamps, decimals: Spark's text may differ, so no pruning


# --------------------------------------------------------------------------- change feed


def _plans(table: _Table, shape: Any, commits: Sequence[Any]) -> list[Any]:
    """One ``CommitChanges`` per commit: its files and the previous files of the groups it touched."""
    from ordo.consumer import Catalog
    from ordo.consumer.arrow import plan_commits

    with Catalog(table.settings.catalog) as catalog:
        return plan_commits(catalog, table.name, commits, shape)


@dataclass(frozen=True)
class _SnapshotPart:
    """One merge group of the snapshot a change-feed stream with no starting option begins with."""

    refs: tuple[Any, ...]
    merge: bool
    version: int
    timestamp: Any


def _commit_parts(plans: Sequence[Any]) -> list[InputPartition]:
    """The planned commits as input partitions: consecutive commits packed into tasks (``pack_commits``)."""
    from ordo.consumer.arrow import pack_commits

    return [InputPartition(task) for task in pack_commits(plans)]


class _ChangeReading:
    """Reads an input partition: a snapshot's merge group (``_SnapshotPart``) or a task of planned commits."""

    shape: Any
    form: str
    output: StructType

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa

        from ordo.consumer.arrow import snapshot_rows, task_change_rows

        part = partition.value
        if isinstance(part, _SnapshotPart):
            rows = snapshot_rows(part.refs, self.shape, part.version, part.timestamp, self.form, merge=part.merge)
            yield from _batches(rows, self.output)
            return
        # the task's commits as one table of few, large batches: each batch crosses to the JVM at a cost, and a
        # small commit's rows are a batch per change type
        tables = [rows for rows in task_change_rows(part, self.shape, self.form) if rows.num_rows]
        if tables:
            yield from _batches(pa.concat_tables(tables).combine_chunks(), self.output)


class ChangeFeedReader(_ChangeReading, DataSourceReader):
    """A batch change feed between ``startingVersion``/``endingVersion`` or the timestamps, bounds inclusive."""

    def __init__(self, table: _Table, schema: StructType, options: Mapping[str, str], form: str) -> None:
        from ordo.consumer import Catalog

        self.shape = _shape(table, schema)
        self.output = schema
        self.form = form
        by_id = "startingversion" in options or "endingversion" in options
        by_time = "startingtimestamp" in options or "endingtimestamp" in options
        if by_id == by_time:
            raise DataSourceOptionError(
                "a batch change feed needs startingVersion (and optionally endingVersion) "
                "or startingTimestamp (and optionally endingTimestamp), not both"
            )
        with Catalog(table.settings.catalog) as catalog:
            if by_id:
                start = int(options.get("startingversion", "0"))
                end = options.get("endingversion")
                commits = catalog.commits(table.name, start, None if end is None else int(end), by="id")
            else:
                commits = catalog.commits(
                    table.name, options.get("startingtimestamp", 0), options.get("endingtimestamp"), by="time"
                )
        self.plans = _plans(table, self.shape, commits)

    def __getstate__(self) -> dict[str, Any]:
        """The reader without its plans: Spark pickles the reader into every task's command, before it asks for
        the partitions, and each task's own commits travel in its input partition."""
        state = dict(self.__dict__)
        state["plans"] = []
        return state

    def partitions(self) -> Sequence[InputPartition]:
        return _commit_parts(self.plans) or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if partition.value is not None:
            yield from super().read(partition)


class StreamChangeCommitError(OrdoError, RuntimeError):
    """Raised in a stream of a table's rows by a commit that updates or deletes rows (without skipChangeCommits)."""


def _size(text: str, option: str) -> int:
    """``maxBytesPerTrigger``'s value: a number of bytes or ``64m``/``1g``-style (k, m, g, t)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    found = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)b?\s*", text.lower())
    if found is None or int(found.group(1)) < 1:
        raise DataSourceOptionError(f"{option} must be a positive size such as 1048576, 64m or 1g, not {text!r}")
    return int(found.group(1)) * units.get(found.group(2), 1)


def _positive(options: Mapping[str, str], key: str, name: str) -> int | None:
    text = options.get(key)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise DataSourceOptionError(f"{name} must be an integer >= 1, not {text!r}")
    return value


class ChangeFeedStreamReader(_ChangeReading, DataSourceStreamReader):
    """The change feed as a stream, or (``rows_only``) the table's rows as each append commits them.

    Offsets are ``{"version": next ID version}``. With no starting option it
    begins as Delta's does: the snapshot at the head when the query first
    starts, every live row an ``insert`` at that version (offset ``{"version":
    head, "snapshot": true}``), then the changes after it.
    ``startingVersion``/``startingTimestamp`` begin at that commit's changes,
    ``"latest"`` after the head. Compaction and clustering deliver nothing.

    A stream of the rows (``readStream`` without ``readChangeFeed``) gives each
    commit's inserted rows without the change columns; a commit whose change
    rows hold anything but inserts (an upsert of an existing key, UPDATE,
    DELETE, MERGE, an overwrite or truncate) fails the stream, or is skipped
    whole with ``skipChangeCommits`` (Delta's rule). Every commit is one input
    partition, so that decision is the commit's. Offsets are versions Spark
    checkpoints: a restarted query reads each commit once.
    """

    def __init__(
        self, table: _Table, schema: StructType, options: Mapping[str, str], form: str, *, rows_only: bool = False
    ) -> None:
        self.table = table
        self.shape = _shape(table, schema)
        self.output = schema
        self.form = form
        self.options = dict(options)
        self.rows_only = rows_only
        self.skip_changes = _truthy(options.get("skipchangecommits"))
        self.max_versions = _positive(options, "maxversionspertrigger", "maxVersionsPerTrigger")
        self.max_files = _positive(options, "maxfilespertrigger", "maxFilesPerTrigger")
        text = options.get("maxbytespertrigger")
        self.max_bytes = None if text is None else _size(text, "maxBytesPerTrigger")

    def _catalog(self) -> Any:
        from ordo.consumer import Catalog

        return Catalog(self.table.settings.catalog)

    def initialOffset(self) -> dict:
        start = self.options.get("startingversion")
        stamp = self.options.get("startingtimestamp")
        with self._catalog() as catalog:
            head = catalog.head(self.table.name)
            if stamp is not None:
                found = catalog.commits(self.table.name, stamp, None, by="time", include_rewrites=True)
                return {"version": found[0].id_version if found else head + 1}
        if start is None:
            return {"version": head, "snapshot": True} if head >= 0 else {"version": 0}
        if start.strip().lower() == "latest":
            return {"version": head + 1}
        return {"version": int(start)}

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxFiles, ReadMaxRows

        if self.max_versions is not None:
            return ReadMaxRows(self.max_versions)
        if self.max_files is not None:
            return ReadMaxFiles(self.max_files)
        if self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: Any) -> dict:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        with self._catalog() as catalog:
            end = catalog.head(self.table.name) + 1
            begin = int(start["version"])
            if isinstance(limit, ReadMaxRows):  # maxVersionsPerTrigger: versions, not rows (the snapshot is one)
                end = min(end, begin + int(limit.max_rows))
            elif not isinstance(limit, ReadAllAvailable) and end > begin:
                end = self._within(catalog, begin, end, start.get("snapshot", False))
        if start.get("snapshot"):
            end = max(end, begin + 1)  # the initial snapshot is read even when no commit follows it
        return {"version": max(begin, end)}

    def _within(self, catalog: Any, begin: int, end: int, snapshot: bool) -> int:
        """The end of the whole commits from ``begin`` whose files fit ``maxFilesPerTrigger``/``maxBytesPerTrigger``
        (at least one commit; the initial snapshot counts as one)."""
        if snapshot:
            return begin + 1
        files = size = taken = 0
        for commit in catalog.commits(self.table.name, begin, end - 1, by="id"):  # what the stream reads
            files += len(commit.added_files)
            size += sum(f.size_bytes for f in commit.added_files)
            over = (self.max_files is not None and files > self.max_files) or (
                self.max_bytes is not None and size > self.max_bytes
            )
            if over and taken:
                return int(commit.id_version)
            taken += 1
        return end

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = int(start["version"]), int(end["version"])
        if stop <= begin:
            return []
        parts: list[InputPartition] = []
        if start.get("snapshot"):
            parts += self._snapshot_parts(begin)
            begin += 1
        if stop > begin:
            with self._catalog() as catalog:
                commits = catalog.commits(self.table.name, begin, stop - 1, by="id")
            parts += _commit_parts(_plans(self.table, self.shape, commits))
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not self.rows_only:
            yield from super().read(partition)
            return
        import pyarrow.compute as pc

        from ordo.consumer.arrow import snapshot_rows, task_change_rows

        part = partition.value
        if isinstance(part, _SnapshotPart):
            rows = snapshot_rows(part.refs, self.shape, part.version, part.timestamp, self.form, merge=part.merge)
            yield from _batches(rows.select(list(self.shape.columns)), self.output)
            return
        for plan, rows in zip(part, task_change_rows(part, self.shape, self.form), strict=True):
            kinds = set(pc.unique(rows.column("_change_type")).to_pylist()) if rows.num_rows else set()
            if kinds - {"insert"}:
                if self.skip_changes:
                    continue
                raise StreamChangeCommitError(
                    f"version {plan.id_version} of {self.table.name} ({plan.operation}) updates or deletes rows "
                    f"({', '.join(sorted(kinds))}): a stream of the table's rows takes appends only. Set "
                    "option('skipChangeCommits', 'true') to skip such commits, or read the change feed "
                    "(option('readChangeFeed', 'true'))"
                )
            yield from _batches(rows.select(list(self.shape.columns)), self.output)

    def _snapshot_parts(self, version: int) -> list[InputPartition]:
        from ordo.consumer.arrow import FileRef, merge_groups

        with self._catalog() as catalog:
            snapshot = catalog.snapshot(self.table.name, version=version)
        refs = [FileRef.of(f) for f in snapshot.files]
        return [
            InputPartition(_SnapshotPart(tuple(group), merge, version, snapshot.time_version))
            for group, merge in merge_groups(refs, self.shape.partition_columns)
        ]

    def commit(self, end: dict) -> None:
        """Nothing to release: the catalog keeps every version."""


# --------------------------------------------------------------------------- writes


@dataclass
class FilesMessage(WriterCommitMessage):
    """What one write task reports to the driver: the files it wrote (DataFile JSON)."""

    files: tuple[str, ...]
    txn_id: str = ""
    query_id: str = ""  # the streaming query's id (sink tasks only)


def _static_partition(options: Mapping[str, str], columns: Sequence[str]) -> dict[str, str] | None:
    """The one partition the ``partition`` option names (a JSON object or ``k=v/k=v``), or None without it."""
    text = options.get("partition")
    if text is None:
        return None
    values: dict[str, str] = {}
    text = text.strip()
    if text.startswith("{"):
        values = {str(k): str(v) for k, v in json.loads(text).items()}
    else:
        for item in filter(None, text.split("/")):
            key, sep, value = item.partition("=")
            if not sep:
                raise DataSourceOptionError(f"partition {text!r}: expected k=v/k=v or a JSON object")
            values[key.strip()] = value.strip()
    if set(values) != set(columns):
        raise DataSourceOptionError(f"an overwritten partition needs every partition column {list(columns)}: {values}")
    return values


def replace_where(condition: str, metadata: Any) -> Any:
    """``replaceWhere``'s condition parsed against the table's partition columns (``producer.predicate``).

    ``DataSourceOptionError`` names what the grammar (docs/writer.md, "replaceWhere") does not take.
    """
    from ordo.producer.predicate import PredicateError, parse_predicate

    columns = ddl_columns(metadata.user_schema)
    types = dict(columns)
    partitions = list(metadata.partition_columns)
    if not partitions:
        raise DataSourceOptionError(
            f"replaceWhere {condition!r}: the table has no partition columns; replaceWhere selects partitions "
            "(overwrite the whole table without it)"
        )
    try:
        return parse_predicate(
            condition, [(c, types[c]) for c in partitions], [n for n, _ in columns if n not in partitions]
        )
    except PredicateError as exc:
        raise DataSourceOptionError(f"replaceWhere {condition!r}: {exc}") from None


def _idempotent_write(options: Mapping[str, str]) -> tuple[str | None, int | None]:
    """Delta's ``txnAppId`` + ``txnVersion``: ordo's idempotency pair (app id, batch id), both or neither."""
    app_id, version = options.get("txnappid"), options.get("txnversion")
    if (app_id is None) != (version is None):
        raise DataSourceOptionError("an idempotent write needs both txnAppId and txnVersion")
    if app_id is None or version is None:
        return None, None
    if not app_id.strip():
        raise DataSourceOptionError("txnAppId must not be empty")
    try:
        number = int(version)
    except ValueError:
        number = -1
    if number < 0:
        raise DataSourceOptionError(f"txnVersion must be an integer >= 0, not {version!r}")
    return app_id, number


def _check_write_schema(table: _Table, schema: StructType) -> tuple[Any, list[str]]:
    """The arrow schema to write (table order) and the table columns the rows lack that are written as nulls
    (``producer.data.fillable``); ``SchemaMismatchError`` when the rows' columns differ otherwise."""
    import pyarrow as pa

    from ordo.consumer.arrow import arrow_type
    from ordo.consumer.files_source import arrow_schema
    from ordo.producer.data import SchemaMismatchError, fillable
    from ordo.schemas.models import parse_ddl

    columns = parse_ddl(table.metadata.user_schema)  # a keyless table's row ids are the writer's
    fill = set(fillable(table.layout()))
    have = {f.name: f for f in schema.fields}
    absent = [c.name for c in columns if c.name not in have and c.name in fill]
    missing = [c.name for c in columns if c.name not in have and c.name not in absent]
    extra = sorted(set(have) - {c.name for c in columns})
    wrong = [
        f"{c.name}: {have[c.name].dataType.simpleString()} (table: {c.type})"
        for c in columns
        if c.name in have and have[c.name].dataType.simpleString().lower() != c.type
    ]
    if missing or extra or wrong:
        raise SchemaMismatchError(
            f"the rows do not match table {table.name}: missing {missing}, unexpected {extra}, wrong types {wrong}"
        )
    present = arrow_schema(StructType([have[c.name] for c in columns if c.name in have]))
    fields = [present.field(c.name) if c.name in have else pa.field(c.name, arrow_type(c.type)) for c in columns]
    return pa.schema(fields), absent


class _Writing:
    """The part batch and streaming writers share: task writes and the one intent per write."""

    def _setup(self, table: _Table, schema: StructType, options: Mapping[str, str], overwrite: bool) -> None:
        import dataclasses

        from ordo.producer.data import WriteRefusedError, evolved_metadata
        from ordo.schemas import Operation

        # mergeSchema: the columns the table lacks are added in the same commit as the rows; overwriteSchema: the
        # rows' schema replaces the table's with a whole-table overwrite (the intent carries the table's metadata
        # after the write; a rejected write changes nothing)
        replace = _flag(options, "overwriteschema")
        if replace and (
            not overwrite
            or "partition" in options
            or "replacewhere" in options
            or options.get("partitionoverwritemode", "").strip().lower() == "dynamic"
        ):
            raise DataSourceOptionError(
                "overwriteSchema replaces the table's schema with mode('overwrite') of the whole table: not with "
                "append, partition, replaceWhere or partitionOverwriteMode=dynamic (use mergeSchema to add columns)"
            )
        self.new_metadata = evolved_metadata(
            table.metadata, schema.fields, merge=_flag(options, "mergeschema"), replace=replace
        )
        if self.new_metadata is not None:
            table = dataclasses.replace(table, metadata=self.new_metadata)
        self.table = table
        self.arrow_schema, self.absent = _check_write_schema(table, schema)
        self.layout = table.layout()
        if self.layout.constraints:  # its tasks write rows with pyarrow: no Spark SQL to evaluate them with
            raise WriteRefusedError(
                f"table {table.name} has CHECK constraints {sorted(self.layout.constraints)}, which format('ordo') "
                "writes do not check: write with DeltaTable or a Transaction (they do); nothing was written"
            )
        self.overwrite = overwrite
        if not overwrite and ("partition" in options or "replacewhere" in options):
            raise DataSourceOptionError("partition/replaceWhere apply to mode('overwrite') only")
        if "partition" in options and "replacewhere" in options:
            raise DataSourceOptionError("give partition or replaceWhere, not both")
        self.static = _static_partition(options, self.layout.partition_columns) if overwrite else None
        # replaceWhere: equality on every partition column is that one partition (as `partition`); any other
        # condition replaces the partitions of the pinned snapshot it selects, and every row must satisfy it
        self.where: Any = None
        if overwrite and "replacewhere" in options:
            self.where = replace_where(options["replacewhere"], table.metadata)
            self.static = self.where.pinned()
            if self.static is not None:
                self.where = None
        mode = options.get("partitionoverwritemode", "static").strip().lower()
        if mode not in ("static", "dynamic"):
            raise DataSourceOptionError(f"partitionOverwriteMode must be static or dynamic, not {mode!r}")
        if mode == "dynamic" and (not overwrite or self.static is not None):
            raise DataSourceOptionError(
                "partitionOverwriteMode=dynamic applies to mode('overwrite') without partition/replaceWhere"
            )
        self.dynamic = mode == "dynamic"
        self.txn_app_id, self.txn_version = _idempotent_write(options)
        self.operation = Operation.INSERT_OVERWRITE if overwrite else Operation.INSERT_INTO
        self.txn_id = uuid.uuid4().hex
        self.streaming = False
        self.wait = float(options.get("ordo.committimeout", DEFAULT_WAIT))

    def _txn_for(self, batch_id: Any) -> str:
        """The transaction id of one write: per micro-batch for the sink (tasks and commit derive the same)."""
        return self.txn_id if batch_id is None else f"{self.txn_id}-b{int(batch_id)}"

    def write(self, iterator: Iterator[Any]) -> FilesMessage:
        import pyarrow as pa
        from pyspark import TaskContext

        from ordo.producer.arrow import conform_batch, task_first_number, write_rows

        batches = [conform_batch(pa.Table.from_batches([b]), self.arrow_schema, self.absent) for b in iterator]
        rows = pa.concat_tables(batches) if batches else self.arrow_schema.empty_table()
        context = TaskContext.get()
        batch_id = query_id = None
        if context is not None and self.streaming:
            batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
            from ordo.producer.connection import QUERY_ID_PROPERTY  # the query id (kept in the checkpoint)

            query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        txn_id = self._txn_for(batch_id)
        # a random block of file numbers per task run: a re-run never writes over a committed file
        if self.where is not None:
            self._check_where(rows)
        files = write_rows(rows, self.layout, txn_id, task_first_number(), self.static)
        return FilesMessage(tuple(f.model_dump_json() for f in files), txn_id, query_id or "")

    def _check_where(self, rows: Any) -> None:
        """Every row satisfies ``replaceWhere`` (Delta refuses the write otherwise); nothing is written if not."""
        import pyarrow as pa

        from ordo.producer.arrow import partition_text
        from ordo.producer.data import PartitionValueError

        columns = list(self.layout.partition_columns)
        if not rows.num_rows:
            return
        texts = pa.table({c: partition_text(rows.column(c)) for c in columns})
        for values in texts.group_by(columns, use_threads=False).aggregate([]).to_pylist():
            if any(v is None or v == "" for v in values.values()):
                continue  # refused by write_rows with its own message
            if not self.where.matches(values):
                raise PartitionValueError(
                    f"rows do not match replaceWhere {self.where.text!r}: e.g. the partition {values}; "
                    "nothing was written"
                )

    def _where_partitions(self, files: Sequence[Any], catalog: Any) -> list[dict[str, str]]:
        """The partitions ``replaceWhere`` replaces: those of the pinned snapshot it selects, and those written."""
        from ordo.schemas.models import MAX_PARTITIONS_PER_INTENT

        snapshot = catalog.snapshot(self.table.name, version=self.table.head)
        found = {tuple(sorted(f.partition.items())) for f in files}
        for entry in snapshot.files:
            key = tuple(sorted(entry.partition.items()))
            if key not in found and self.where.matches(dict(key)):
                found.add(key)
        if len(found) > MAX_PARTITIONS_PER_INTENT:
            raise DataSourceOptionError(
                f"replaceWhere {self.where.text!r} selects {len(found)} partitions; one overwrite replaces at most "
                f"{MAX_PARTITIONS_PER_INTENT}: narrow the condition or overwrite the whole table"
            )
        return [dict(p) for p in sorted(found)]

    def _files(self, messages: Sequence[Any]) -> list[Any]:
        from ordo.schemas import DataFile

        return [DataFile.model_validate_json(text) for m in messages if m is not None for text in m.files]

    def _abort(self, messages: Sequence[Any]) -> None:
        from ordo.producer.arrow import delete_files

        delete_files(self.layout, [f.path for f in self._files(messages)])

    def _publish(self, messages: Sequence[Any], app_id: str | None = None, batch_id: int | None = None) -> Any:
        """Check keys across tasks, publish the one intent, wait for the decision and the catalog (numbered steps)."""
        from ordo.producer.arrow import check_unique, delete_files
        from ordo.producer.commit import STREAM_RETRIES, Change, Committer
        from ordo.producer.connection import shared_connection
        from ordo.producer.results import conflict_error
        from ordo.schemas import Operation

        files = self._files(messages)
        # 1. nothing to append is a no-op (nothing is published), and so is an empty dynamic overwrite; an empty
        # static overwrite still clears its scope
        if not files and (self.operation is Operation.INSERT_INTO or self.dynamic):
            return None
        try:
            check_unique(self.layout, files)
        except BaseException:
            delete_files(self.layout, [f.path for f in files])
            raise
        # one client and catalog per process and settings: a Python worker Spark reuses commits batch after
        # batch without connecting to Kafka again (they close at the worker's exit)
        connection = shared_connection(self.table.settings)
        catalog = connection.catalog
        partitions: list[dict[str, str]] | None
        if not self.layout.partition_columns:
            partitions = None
        elif self.where is not None:
            try:
                partitions = self._where_partitions(files, catalog)
            except BaseException:
                delete_files(self.layout, [f.path for f in files])
                raise
            if not partitions:
                return None  # no partition selected and no row written: nothing to replace
        elif self.static is not None:
            partitions = [self.static]
        elif self.operation is Operation.INSERT_OVERWRITE and not self.dynamic:
            partitions = None  # mode("overwrite") without a partition replaces the whole table
        else:
            partitions = [dict(p) for p in sorted({tuple(sorted(f.partition.items())) for f in files})]
        # 2. publish (``producer.commit``): a concurrent INSERT INTO may make a micro-batch retry on the new head
        # (same files), and a micro-batch reads nothing: it is pinned to the head when it commits
        ids = {m.txn_id for m in messages if m is not None and m.txn_id}
        txn_id = ids.pop() if len(ids) == 1 else self._txn_for(batch_id)
        read_version = catalog.head(self.table.name) if self.streaming else self.table.head
        change = Change(
            self.table.name,
            self.operation,
            partitions=None if partitions is None else tuple(partitions),
            added_files=tuple(files),
            metadata=self.new_metadata,
            app_id=app_id,
            batch_id=batch_id,
            writer=f"ordo-datasource/{self.table.name}",
        )
        committer = Committer(connection, timeout=self.wait, catalog_timeout=self.wait, reconnect=True)
        retries = STREAM_RETRIES if self.streaming else 0
        decision = committer.decide(change, txn_id, read_version, retries=retries).decision
        if not decision.accepted:
            delete_files(self.layout, [f.path for f in files])
            if decision.reason == BATCH_ALREADY_COMMITTED:
                return None  # a replayed micro-batch: it is in the table already
            raise conflict_error(decision, f"{self.operation.value} into {self.table.name}")
        if decision.duplicate_of is not None:
            # the same txn id was decided before (a re-run of this batch): its files are the committed ones
            kept = {f.path for f in decision.added_files}
            delete_files(self.layout, [f.path for f in files if f.path not in kept])
        # 3. read-your-writes: the catalog shows the version before the write returns
        committer.visible(self.table.name, int(decision.id_version or 0))
        return decision


class OrdoWriter(_Writing, DataSourceArrowWriter):
    """``df.write.format("ordo")``: append is one INSERT INTO, overwrite one INSERT OVERWRITE."""

    def __init__(self, table: _Table, schema: StructType, options: Mapping[str, str], overwrite: bool) -> None:
        self._setup(table, schema, options, overwrite)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._publish(messages, self.txn_app_id, self.txn_version)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._abort(messages)


def sink_app_id(checkpoint: str, query_id: str) -> str:
    """The sink's exactly-once identity: the checkpoint location and the query id Spark keeps in it.

    A restarted query has both unchanged, so a replayed batch id is refused as
    committed; a new query on a reused (deleted and recreated) checkpoint path
    has a new query id, so its batches 0, 1, ... are new batches.
    """
    where = hashlib.sha256(checkpoint.rstrip("/").encode()).hexdigest()[:16]
    return f"{SINK_APP_PREFIX}{where}-{query_id}"


class OrdoStreamWriter(_Writing, DataSourceStreamArrowWriter):
    """``writeStream.format("ordo")``: one idempotent INSERT INTO per micro-batch."""

    def __init__(self, table: _Table, schema: StructType, options: Mapping[str, str]) -> None:
        self._setup(table, schema, options, False)
        self.streaming = True
        self.app_id = options.get("appid") or None
        self.checkpoint = options.get("checkpointlocation") or ""
        if self.app_id is None and not self.checkpoint:
            raise DataSourceOptionError(
                "the ordo sink needs a checkpointLocation option (its exactly-once identity) or an appId option"
            )

    def _identity(self, messages: Sequence[Any]) -> str:
        """``appId`` when given, else ``sink_app_id`` of the checkpoint and the query id the tasks report."""
        if self.app_id is not None:
            return self.app_id
        ids: set[str] = {m.query_id for m in messages if m is not None and m.query_id}
        if len(ids) != 1:
            raise DataSourceOptionError(
                f"the micro-batch's tasks report {len(ids)} streaming query ids ({sorted(ids)}), not one: "
                "the sink cannot name its exactly-once identity; give an appId option"
            )
        return sink_app_id(self.checkpoint, ids.pop())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if not self._files(messages):
            return  # nothing to append: nothing is published (and no identity is needed)
        try:
            app_id = self._identity(messages)
        except BaseException:
            self._abort(messages)
            raise
        self._publish(messages, app_id, int(batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._abort(messages)


def source_class(settings: Settings | None = None) -> type[OrdoDataSource]:
    """The data source class to register, with ``settings`` as default options (pickled by value)."""
    if settings is None:
        return OrdoDataSource
    defaults = settings_options(settings)
    # a class made here is not importable by name, so cloudpickle ships it by value, defaults included
    return type("OrdoDataSource", (OrdoDataSource,), {"defaults": defaults, "__qualname__": "_ordo_configured"})


__all__ = [
    "DataSourceOptionError",
    "OrdoDataSource",
    "replace_where",
    "settings_options",
    "sink_app_id",
    "source_class",
]


# --------------------------------------------------------------------------- a write creates its table


def _column_list(text: str | None, option: str) -> list[str]:
    names = [part.strip().strip("`") for part in (text or "").split(",")]
    if text is not None and not all(names):
        raise DataSourceOptionError(f"{option}={text!r}: comma-separated column names, none empty")
    return [n for n in names if n]


def create_for_write(name: str, schema: StructType, options: Mapping[str, str], settings: Settings) -> None:
    """Create table ``name`` for a write to it that found none, as Delta does on ``append`` and ``overwrite``.

    The table takes the rows' columns, keyless unless ``ordo.primaryKey`` names a key, partitioned by
    ``ordo.partitionBy``, at ``<warehouse>/<name>``; the write that follows is its first commit after the
    CREATE (two commits where Delta makes one: a write that fails afterwards leaves the empty table). A
    concurrent creator winning the race is fine: the write goes to its table (and fails on its schema if it
    differs).
    """
    from ordo.producer.commit import Change, Committer, new_txn_id
    from ordo.producer.connection import shared_connection
    from ordo.producer.definition import table_metadata
    from ordo.producer.results import conflict_error
    from ordo.schemas import Operation, Reason

    key = _column_list(options.get("ordo.primarykey"), "ordo.primaryKey")
    parts = _column_list(options.get("ordo.partitionby"), "ordo.partitionBy")
    metadata = table_metadata(name, schema, key or None, parts, None, None, None, settings.warehouse)
    wait = float(options.get("ordo.committimeout", DEFAULT_WAIT))
    change = Change(name, Operation.CREATE_TABLE, metadata=metadata, writer=f"ordo-datasource/{name}")
    # the shared connection is the one the write's commit uses next
    committer = Committer(shared_connection(settings), timeout=wait, catalog_timeout=wait)
    decision = committer.decide(change, new_txn_id(), 0).decision
    if not decision.accepted and decision.reason != Reason.TABLE_EXISTS:
        raise conflict_error(decision, f"CREATE TABLE {name} (for a write to a table that did not exist)")
    committer.visible(name, 0)
