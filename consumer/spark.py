"""Spark reads of ordo tables: merge-on-read snapshots and change feeds.

The only module of the consumer that imports ``pyspark`` (lazily, inside the
functions). Data files follow the writer contract (docs/consumer.md):
Parquet under ``<location>/<partition path>/<write id>-<n>.parquet`` (``schemas.paths``) holding all
table columns plus ``_ordo_op`` (``upsert``/``delete``) and ``_ordo_seq``
(NULL for user commits; the original sequence number in compaction and
clustering output). A record's effective sequence number is
``coalesce(_ordo_seq, ID version that added its file)``.

``read`` takes the live files of the snapshot, keeps per partition and primary
key the record with the highest effective sequence number, and drops keys
whose winner is a delete. A partition needs no merge when its only live file
is not clustering output, or when all its files come from one MAJOR_COMPACT:
its keys are already unique, and only delete records are filtered out (none
when every such file is MAJOR_COMPACT output, which holds live rows only).

``changes`` returns the change feed in its compact form: the records written
by logical commits in a version or time range (bounds inclusive) plus one
``truncate`` marker row per INSERT_OVERWRITE/TRUNCATE commit. Delta's form
(``insert``/``update_preimage``/``update_postimage``/``delete`` with full rows)
comes from ``format("ordo")`` (``consumer.arrow``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from consumer.arrow import (  # the record and change-feed columns, declared once (pyarrow-free at import)
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    DELETE,
    OP_COLUMN,
    SCOPE,
    SEQ_COLUMN,
    TRUNCATE,
    TRUNCATING_OPERATIONS,
    UPSERT,
)
from consumer.catalog import Catalog, Timestamp
from consumer.models import FileEntry, Snapshot
from schemas.operations import REGISTRY, ChangeRows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


_GLOB = re.compile(r"([\\\[\]{}*?])")
# Up to this many files, file -> sequence number lookups are literal maps in the plan; above, a broadcast join.
INLINE_FILE_LIMIT = 500
MERGE_METHODS = ("bucket", "shuffle")
TASK_BYTES = 128 * 1024 * 1024  # a no-shuffle read packs (partition, bucket) groups into tasks of about this size


def _catalog(catalog: Catalog | str | os.PathLike[str] | None) -> Catalog:
    return catalog if isinstance(catalog, Catalog) else Catalog(catalog)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _glob_escape(path: str) -> str:
    """Spark treats read paths as glob patterns; escape the metacharacters so every path is literal."""
    return _GLOB.sub(r"\\\1", path)


def table_schema(spark: SparkSession, ddl: str) -> Any:
    """The ``StructType`` of a Spark DDL schema string."""
    return spark.createDataFrame([], ddl).schema


def _file_schema(schema: Any) -> Any:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    names = {f.name for f in schema.fields}
    clash = names & {OP_COLUMN, SEQ_COLUMN}
    if clash:
        raise ValueError(f"table columns {sorted(clash)} collide with ordo's own columns")
    return StructType([*schema.fields, StructField(OP_COLUMN, StringType()), StructField(SEQ_COLUMN, LongType())])


def qualified_location(spark: SparkSession, location: str) -> str:
    """The table location as Hadoop qualifies it (``file:/...``, ``s3a://...``): the prefix of Spark's file paths."""
    try:
        jvm: Any = spark._jvm  # type: ignore[attr-defined]
        path = jvm.org.apache.hadoop.fs.Path(location)
        qualified = str(path.getFileSystem(spark._jsc.hadoopConfiguration()).makeQualified(path).toString())  # type: ignore[attr-defined]
    except Exception:  # Spark Connect has no JVM handle: qualify like Hadoop does for local paths
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", location):
            qualified = location
        else:
            qualified = "file:" + os.path.abspath(location)
    return qualified.rstrip("/")


def _scan(spark: SparkSession, files: Sequence[FileEntry], schema: Any) -> DataFrame:
    return spark.read.schema(schema).parquet(*[_glob_escape(f.absolute_path) for f in files])


def _with_file_info(
    spark: SparkSession, frame: DataFrame, files: Sequence[FileEntry], location: str, extra: dict[str, Any]
) -> DataFrame:
    """Join each record with its file's catalog entry (``_f_seq``, ``_f_part`` and ``extra`` columns).

    ``extra`` maps a column name to ``(Spark type, {file path: value})``.

    Spark reports a record's file in ``_metadata.file_path`` as a URL-encoded
    qualified path; it is decoded (a literal ``+`` survives) and matched with
    the catalog's paths. A record whose file is not matched fails the query
    rather than being dropped or mis-sequenced.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    prefix = qualified_location(spark, location)
    decoded = F.expr("url_decode(replace(_metadata.file_path, '+', '%2B'))")
    unmatched = F.concat(F.lit("ordo: data file not in the catalog snapshot: "), F.col("_f_path"))
    if len(files) <= INLINE_FILE_LIMIT:
        # Few files: look the file up in literal maps (no join, no extra Spark job).
        def lookup(values: list[tuple[str, Any]], data_type: Any) -> Any:
            pairs = [item for key, value in values for item in (F.lit(key), F.lit(value).cast(data_type))]
            return F.element_at(F.create_map(*pairs), F.col("_f_path"))

        paths = [prefix + "/" + f.path for f in files]
        frame = frame.withColumn("_f_path", decoded)
        columns = {
            "_f_seq": lookup([(p, f.seq) for p, f in zip(paths, files, strict=True)], LongType()),
            "_f_part": lookup(
                [(p, json.dumps(dict(f.partition), sort_keys=True)) for p, f in zip(paths, files, strict=True)],
                StringType(),
            ),
        }
        for name, (data_type, values) in extra.items():
            columns[name] = lookup([(p, values[f.path]) for p, f in zip(paths, files, strict=True)], data_type)
        frame = frame.withColumns(columns)
        return frame.withColumn(
            "_f_seq", F.when(F.col("_f_seq").isNull(), F.raise_error(unmatched)).otherwise(F.col("_f_seq"))
        )
    fields = [
        StructField("_f_path", StringType(), False),
        StructField("_f_seq", LongType(), False),
        StructField("_f_part", StringType(), False),
    ]
    for name, (data_type, _) in extra.items():
        fields.append(StructField(name, data_type))
    rows = []
    for f in files:
        row = [prefix + "/" + f.path, f.seq, json.dumps(dict(f.partition), sort_keys=True)]
        row.extend(values[f.path] for _, values in extra.values())
        rows.append(tuple(row))
    mapping = spark.createDataFrame(rows, StructType(fields))
    joined = frame.withColumn("_f_path", decoded).join(F.broadcast(mapping), "_f_path", "left")
    return joined.withColumn(
        "_f_seq", F.when(F.col("_f_seq").isNull(), F.raise_error(unmatched)).otherwise(F.col("_f_seq"))
    )


def _no_merge_needed(files: Sequence[FileEntry]) -> bool:
    """True when a (partition, bucket)'s live files hold each key at most once (see the module docstring)."""
    if len(files) == 1:
        return files[0].operation != "CLUSTER"
    return all(f.operation == "MAJOR_COMPACT" for f in files) and len({f.seq for f in files}) == 1


def _bins(groups: list[list[FileEntry]], tasks: int) -> list[list[list[FileEntry]]]:
    """Groups packed into ``tasks`` bins of about equal bytes (largest first; deterministic)."""
    bins: list[list[list[FileEntry]]] = [[] for _ in range(tasks)]
    sizes = [0] * tasks
    ordered = sorted(groups, key=lambda g: (-sum(f.size_bytes for f in g), g[0].path))
    for group in ordered:
        smallest = min(range(tasks), key=lambda i: (sizes[i], i))
        bins[smallest].append(group)
        sizes[smallest] += sum(f.size_bytes for f in group)
    return [b for b in bins if b]


def _merge_by_bucket(spark: SparkSession, groups: list[list[FileEntry]], schema: Any, metadata: Any) -> DataFrame:
    """Merge-on-read of whole (partition, bucket) groups, each in one task with pyarrow: no Exchange.

    The groups are packed into tasks of about ``TASK_BYTES`` (at least two per
    core when there are enough groups) and read through the ``ordo_files``
    data source (``consumer.files_source``).
    """
    from consumer.arrow import FileRef
    from consumer.files_source import NAME, groups_option, register

    total = sum(f.size_bytes for g in groups for f in g)
    parallelism = max(1, int(spark.sparkContext.defaultParallelism))
    tasks = max(1, min(len(groups), max(2 * parallelism, -(-total // TASK_BYTES))))
    bins = [[tuple(FileRef.of(f) for f in g) for g in b] for b in _bins(groups, tasks)]
    register(spark)
    option = groups_option(bins, metadata.primary_key, metadata.partition_columns)
    return spark.read.format(NAME).schema(schema).option("groups", option).load()


def read_snapshot(spark: SparkSession, snapshot: Snapshot, merge: str = "bucket") -> DataFrame:
    """The table's rows at ``snapshot``: merge-on-read of its live files, table columns only.

    ``merge="bucket"`` (the default) merges each (partition, bucket) in one
    task with pyarrow (the plan has no Exchange); ``merge="shuffle"`` is the
    older plan, one ``groupBy`` over every record to be merged.
    """
    from pyspark.sql import functions as F

    if merge not in MERGE_METHODS:
        raise ValueError(f"merge must be one of {list(MERGE_METHODS)}, not {merge!r}")

    metadata = snapshot.metadata
    schema = table_schema(spark, metadata.schema)
    columns = [f.name for f in schema.fields]
    missing = [c for c in (*metadata.primary_key, *metadata.partition_columns) if c not in columns]
    if missing:
        raise ValueError(f"table {snapshot.table!r}: key/partition columns {missing} are not in its schema")
    if not snapshot.files:
        return spark.createDataFrame([], schema)
    file_schema = _file_schema(schema)
    # the unit of merge-on-read: a (partition, bucket); every record of a key is in its bucket's files
    groups: dict[tuple[tuple[tuple[str, str], ...], int], list[FileEntry]] = {}
    for f in snapshot.files:
        groups.setdefault((tuple(sorted(f.partition.items())), f.bucket), []).append(f)
    direct: list[FileEntry] = []
    to_merge: list[list[FileEntry]] = []
    for _, group in sorted(groups.items()):
        if _no_merge_needed(group):
            direct.extend(group)
        else:
            to_merge.append(group)
    frames = []
    if direct:
        frame = _scan(spark, direct, file_schema)
        if not all(f.operation == "MAJOR_COMPACT" for f in direct):
            # delete records to drop; a MAJOR_COMPACT holds live rows only (the writer contract, docs/writer.md),
            # which spares its readers reading and testing the op column (~30 % of a plain Parquet read)
            frame = frame.where(F.col(OP_COLUMN) == UPSERT)
        frames.append(frame.select(*[F.col(_quote(c)) for c in columns]))
    if to_merge and merge == "bucket":
        frames.append(_merge_by_bucket(spark, to_merge, schema, metadata))
    elif to_merge:
        files = [f for g in to_merge for f in g]
        keys = list(metadata.primary_key)
        frame = _with_file_info(spark, _scan(spark, files, file_schema), files, metadata.location, {})
        seq = F.coalesce(F.col(SEQ_COLUMN), F.col("_f_seq"))
        payload = F.struct(*[F.col(_quote(c)).alias(c) for c in columns], F.col(OP_COLUMN).alias(OP_COLUMN))
        # Highest effective sequence number wins; on a tie (a writer broke the one-record-per-key-per-commit
        # contract) the upsert wins, so the result is deterministic.
        order = F.struct(seq.alias("s"), F.col(OP_COLUMN).alias("o"))
        winners = frame.groupBy("_f_part", *[F.col(_quote(k)) for k in keys]).agg(F.max_by(payload, order).alias("_w"))
        live = winners.where(F.col("_w").getField(OP_COLUMN) != DELETE)
        frames.append(live.select(*[F.col("_w").getField(c).alias(c) for c in columns]))
    result = frames[0]
    for other in frames[1:]:
        result = result.unionByName(other)
    return result


def read(
    spark: SparkSession,
    table: str,
    version: int | None = None,
    timestamp: Timestamp | None = None,
    catalog: Catalog | str | os.PathLike[str] | None = None,
    merge: str = "bucket",
) -> DataFrame:
    """The table at ID ``version``, as of ``timestamp``, or at the head (table columns only).

    ``catalog`` is a ``Catalog``, a catalog location, or None for ``ORDO_CATALOG``.
    Raises ``TableNotFoundError`` / ``VersionNotFoundError`` like ``Catalog.snapshot``.
    ``merge`` is ``read_snapshot``'s.
    """
    return read_snapshot(spark, _catalog(catalog).snapshot(table, version=version, timestamp=timestamp), merge)


def change_schema(schema: Any) -> Any:
    """The schema ``changes`` returns: table columns, then ``_change_type``, ``_commit_version``,
    ``_commit_timestamp`` and ``_scope``."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    extra = [
        StructField(CHANGE_TYPE, StringType(), False),
        StructField(COMMIT_VERSION, LongType(), False),
        StructField(COMMIT_TIMESTAMP, TimestampType(), False),
        StructField(SCOPE, StringType(), True),
    ]
    return StructType([*[StructField(f.name, f.dataType, True) for f in schema.fields], *extra])


def changes(
    spark: SparkSession,
    table: str,
    start: int | Timestamp,
    end: int | Timestamp | None = None,
    by: str = "id",
    catalog: Catalog | str | os.PathLike[str] | None = None,
) -> DataFrame:
    """Records written by logical commits with ID (``by="id"``) or time (``by="time"``) version in ``[start, end]``.

    Bounds are INCLUSIVE; ``end=None`` is the head (see ``Catalog.commits``).
    Columns: the table's, then ``_change_type`` (``upsert``, ``delete`` or
    ``truncate``), ``_commit_version`` (ID version), ``_commit_timestamp``
    (time version) and ``_scope``. Partition columns a delete record left null
    are filled from its file's partition. Each INSERT_OVERWRITE/TRUNCATE commit adds
    one ``truncate`` row, all table columns NULL, whose ``_scope`` is a JSON
    array of the partitions it cleared (``[{"dt": "2024-01-01"}]``) or NULL when
    it cleared the whole table; apply it before that version's other rows. A
    RESTORE gives the exact difference between the table before it and after:
    an ``upsert`` per row new or changed, a ``delete`` per key gone (its row before).
    Compaction and clustering never contribute rows. Row order is unspecified.
    """
    from pyspark.sql import Row
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, TimestampType

    cat = _catalog(catalog)
    info = cat.table(table)
    schema = table_schema(spark, info.metadata.schema)
    columns = [f.name for f in schema.fields]
    out_schema = change_schema(schema)
    found = cat.commits(table, start, end, by=by)
    files = [f for c in found for f in c.added_files if f.data_change]
    markers = []
    for commit in found:
        if commit.operation.value in TRUNCATING_OPERATIONS:
            scope = None
            if commit.partitions is not None and info.metadata.partition_columns:
                scope = json.dumps([dict(p) for p in commit.partitions], sort_keys=True, separators=(",", ":"))
            values = dict.fromkeys(columns)
            values.update(
                {
                    CHANGE_TYPE: TRUNCATE,
                    COMMIT_VERSION: commit.id_version,
                    COMMIT_TIMESTAMP: commit.timestamp,
                    SCOPE: scope,
                }
            )
            markers.append(Row(**values))
    frames = []
    for commit in found:
        if REGISTRY[commit.operation].change_rows is ChangeRows.DIFF:
            frames.append(_diff_changes(spark, cat, table, commit, columns, info.metadata))
    if markers:
        frames.append(
            spark.createDataFrame([tuple(r[c] for c in out_schema.fieldNames()) for r in markers], out_schema)
        )
    if files:
        versions = {f.path: f.added_version for f in files}
        stamps = {c.id_version: c.timestamp for c in found}
        extra: dict[str, tuple[Any, dict[str, Any]]] = {
            "_c_version": (LongType(), versions),
            "_c_time": (TimestampType(), {path: stamps[v] for path, v in versions.items()}),
        }
        types = {f.name: f.dataType for f in schema.fields}
        partition_columns = info.metadata.partition_columns
        for i, column in enumerate(partition_columns):
            extra[f"_c_part{i}"] = (StringType(), {f.path: f.partition.get(column) for f in files})
        frame = _with_file_info(spark, _scan(spark, files, _file_schema(schema)), files, info.metadata.location, extra)

        def output(column: str) -> Any:
            if column not in partition_columns:
                return F.col(_quote(column))
            # a delete record may leave its partition columns null: the file's partition says where it applies
            index = partition_columns.index(column)
            from_file = F.col(f"_c_part{index}").cast(types[column])
            return F.coalesce(F.col(_quote(column)), from_file).alias(column)

        frames.append(
            frame.select(
                *[output(c) for c in columns],
                F.col(OP_COLUMN).alias(CHANGE_TYPE),
                F.col("_c_version").alias(COMMIT_VERSION),
                F.col("_c_time").alias(COMMIT_TIMESTAMP),
                F.lit(None).cast("string").alias(SCOPE),
            )
        )
    if not frames:
        return spark.createDataFrame([], out_schema)
    result = frames[0]
    for other in frames[1:]:
        result = result.unionByName(other)
    return result


def _diff_changes(
    spark: SparkSession, cat: Catalog, table: str, commit: Any, columns: list[str], metadata: Any
) -> DataFrame:
    """A RESTORE's change rows: the rows that differ between the snapshots before and after it (compact form)."""
    from pyspark.sql import functions as F

    def rows(version: int) -> DataFrame:
        frame = read_snapshot(spark, cat.snapshot(table, version))
        have = set(frame.columns)
        return frame.select(*[F.col(_quote(c)) if c in have else F.lit(None).alias(c) for c in columns])

    before, after = rows(commit.id_version - 1), rows(commit.id_version)
    keys = list(dict.fromkeys([*metadata.partition_columns, *metadata.primary_key]))
    upserts = after.exceptAll(before).withColumn(CHANGE_TYPE, F.lit(UPSERT))
    deletes = before.join(after.select(*keys), keys, "left_anti").withColumn(CHANGE_TYPE, F.lit(DELETE))
    meta = [
        F.lit(commit.id_version).cast("long").alias(COMMIT_VERSION),
        F.lit(commit.timestamp).cast("timestamp").alias(COMMIT_TIMESTAMP),
        F.lit(None).cast("string").alias(SCOPE),
    ]
    return upserts.unionByName(deletes.select(*upserts.columns)).select(
        *[F.col(_quote(c)) for c in columns], F.col(CHANGE_TYPE), *meta
    )


__all__ = [
    "CHANGE_TYPE",
    "COMMIT_TIMESTAMP",
    "COMMIT_VERSION",
    "OP_COLUMN",
    "SCOPE",
    "SEQ_COLUMN",
    "change_schema",
    "changes",
    "qualified_location",
    "read",
    "read_snapshot",
    "table_schema",
]
