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
comes from ``format("ordo")``.

Merge-on-read and change rows are ``consumer.arrow``'s, the one implementation
every reader shares: Spark runs them in its Python workers through the
``ordo_files`` data source (``consumer.files_source``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ordo.consumer.arrow import (  # the record and change-feed columns, declared once (pyarrow-free at import)
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    OP_COLUMN,
    SCOPE,
    SEQ_COLUMN,
    UPSERT,
)
from ordo.consumer.catalog import Catalog, Timestamp
from ordo.consumer.models import FileEntry, Snapshot
from ordo.kernel.objectstore import spark_path
from ordo.schemas.buckets import table_buckets
from ordo.schemas.operations import ROW_ID_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


_GLOB = re.compile(r"([\\\[\]{}*?])")
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
    location = spark_path(location)
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
    return spark.read.schema(schema).parquet(*[_glob_escape(spark_path(f.absolute_path)) for f in files])


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

    The groups are packed into tasks of about ``TASK_BYTES`` (at least one per
    core when there are enough groups) and read through the ``ordo_files``
    data source (``consumer.files_source``). Not two per core: a Python task
    costs Spark 40-80 ms beside its work (docs/benchmarks.md, "What a Python
    task costs"), more than the balance it bought.
    """
    from ordo.consumer.arrow import FileRef
    from ordo.consumer.files_source import NAME, groups_option, register

    total = sum(f.size_bytes for g in groups for f in g)
    parallelism = max(1, int(spark.sparkContext.defaultParallelism))
    tasks = max(1, min(len(groups), max(parallelism, -(-total // TASK_BYTES))))
    bins = [[tuple(FileRef.of(f) for f in g) for g in b] for b in _bins(groups, tasks)]
    register(spark)
    option = groups_option(bins, metadata.primary_key, metadata.partition_columns, table_buckets(metadata.properties))
    return spark.read.format(NAME).schema(schema).option("groups", option).load()


def read_snapshot(spark: SparkSession, snapshot: Snapshot) -> DataFrame:
    """The table's rows at ``snapshot``: merge-on-read of its live files, table columns only.

    Groups that need no merge are a plain Parquet scan; the others are merged
    each (partition, bucket) in one task with pyarrow (the plan has no
    Exchange).
    """
    from pyspark.sql import functions as F

    metadata = snapshot.metadata
    schema = table_schema(spark, metadata.schema)
    columns = [f.name for f in schema.fields]
    missing = [c for c in (*metadata.primary_key, *metadata.partition_columns) if c not in columns]
    if missing:
        raise ValueError(f"table {snapshot.table!r}: key/partition columns {missing} are not in its schema")
    if not snapshot.files:
        return spark.createDataFrame([], schema)
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
        frame = _scan(spark, direct, _file_schema(schema))
        if not all(f.operation == "MAJOR_COMPACT" for f in direct):
            # delete records to drop; a MAJOR_COMPACT holds live rows only (the writer contract, docs/writer.md),
            # which spares its readers reading and testing the op column (~30 % of a plain Parquet read)
            frame = frame.where(F.col(OP_COLUMN) == UPSERT)
        frames.append(frame.select(*[F.col(_quote(c)) for c in columns]))
    if to_merge:
        frames.append(_merge_by_bucket(spark, to_merge, schema, metadata))
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
) -> DataFrame:
    """The table at ID ``version``, as of ``timestamp``, or at the head (table columns only).

    ``catalog`` is a ``Catalog``, a catalog location, or None for ``ORDO_CATALOG``.
    Raises ``TableNotFoundError`` / ``VersionNotFoundError`` like ``Catalog.snapshot``.
    A keyless table's hidden row id is left out (``read_snapshot``, the writers' read, keeps it).
    """
    snapshot = _catalog(catalog).snapshot(table, version=version, timestamp=timestamp)
    df = read_snapshot(spark, snapshot)
    return df.drop(ROW_ID_COLUMN) if snapshot.metadata.keyless else df


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
    from ordo.consumer.arrow import COMPACT_FORM, TableShape, plan_commits
    from ordo.consumer.files_source import NAME, arrow_schema, commits_option, register

    cat = _catalog(catalog)
    metadata = cat.table(table).metadata
    schema = table_schema(spark, metadata.schema)
    shape = TableShape(arrow_schema(schema), tuple(metadata.primary_key), tuple(metadata.partition_columns))
    plans = plan_commits(cat, table, cat.commits(table, start, end, by=by), shape, form=COMPACT_FORM)
    register(spark)
    option = commits_option(plans, metadata.primary_key, metadata.partition_columns, COMPACT_FORM)
    return spark.read.format(NAME).schema(change_schema(schema)).option("commits", option).load()


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
