"""A transaction's data files written by one Spark job, or by the driver when small, at their final paths.

The job's tasks write with pyarrow through the ``ordo_records`` data source (``producer.records_source``,
``producer.arrow.RecordWrite``): no staging area and no rename, which on an object store would be a copy and a
delete per file. A failed job's files are deleted; what cannot be deleted is an orphan VACUUM removes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ordo.producer.data import (
    BAD_PARTITION_COLUMN,
    BUCKET_COLUMN,
    DEFAULT_MAX_RECORDS_PER_FILE,
    MAX_RECORDS_PER_FILE_PROPERTY,
    Layout,
    RecordCheck,
    Storage,
    _violation,
    enforce_constraints,
)
from ordo.producer.smallwrites import driver_side
from ordo.schemas import DataFile
from ordo.schemas.paths import write_id_of

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession


def _nulls_first(rows: Any, columns: Sequence[str]) -> Any:
    """``rows`` (a pyarrow table) sorted by ``columns`` ascending, nulls first (Spark's ascending order)."""
    import pyarrow as pa

    if int(pa.__version__.split(".")[0]) >= 25:  # null placement per key; the table-wide option is deprecated
        return rows.sort_by([(c, "ascending", "at_start") for c in columns])
    return rows.sort_by([(c, "ascending") for c in columns], null_placement="at_start")


def _raise_violation(exc: BaseException) -> None:
    """A write's error that is a CHECK constraint the rows broke, raised as ``ConstraintViolationError``."""
    violation = _violation(exc)
    if violation is not None:
        raise violation from None


@dataclass(frozen=True)
class WriteStats:
    """What one staged write produced and how long its phases took."""

    files: tuple[DataFile, ...]
    spark_seconds: float
    finish_seconds: float
    validate_seconds: float = 0.0  # the records' check when it is its own Spark job (``write``'s ``check``)


class FileWriter:
    """Writes records of one transaction into ``<partition path>/<txn id>-<n>.parquet`` files.

    The txn id in the names is the write id (``schemas.paths``): it stays the
    same when a metadata-level retry republishes the files under a new txn id.

    1. The records get hidden string copies of the partition columns (and the
       bucket), are repartitioned by them and sorted within each task, so each
       (partition, bucket) is one run of rows in one task.
    2. Each task writes its runs with pyarrow straight to their final paths
       (``producer.arrow.RecordWrite``, run by the ``ordo_records`` data
       source: ``producer.records_source``) and reports each file's
       ``DataFile`` from the footer it wrote. Nothing is staged or renamed: on
       an object store a rename is a copy and a delete.
    3. If the job fails, Spark's abort deletes what its finished tasks wrote,
       and the writer deletes any other file of this write id it finds (one
       listing of the location); a file a killed executor was still writing
       is an orphan for ``ordo vacuum --orphans``.

    Records Spark estimates small (``driver_side``) skip the job: they are
    collected to Arrow, sorted as a task sorts them, and written in this
    process by the same ``RecordWrite``, as one task (file numbers and names
    alike); what it wrote before failing it deletes itself.
    """

    def __init__(
        self,
        spark: SparkSession,
        layout: Layout,
        txn_id: str,
        *,
        write_ids: Mapping[tuple[str, ...], str] | None = None,
    ) -> None:
        """``write_ids``: the write id of each partition's files (partition values in column order), when one
        Spark job writes for several transactions (``producer.rewrites``: one per partition); a file of a
        partition it does not name fails the write. Default: ``txn_id`` for every file."""
        self.spark = spark
        self.layout = layout
        self.txn_id = txn_id
        self.write_ids = write_ids
        self.storage = Storage(layout.location)
        self.written: list[str] = []  # relative paths at their final place, for cleanup

    def write(
        self,
        records: DataFrame,
        *,
        sort_by: Sequence[str] = (),
        target_files: int | None = None,
        check: RecordCheck | None = None,
    ) -> WriteStats:
        """Write ``records`` (table columns + ``_ordo_op`` + ``_ordo_seq``) and return the files made.

        Small records (``driver_side``) are collected to Arrow and written by this process; others by a Spark job.
        ``check`` refuses bad keys and partition values before anything is written: on the rows the driver-side
        write collects (one collection, not two), else by its own Spark job first. A table's CHECK constraints
        are evaluated by the write's collection, so with constraints the check keeps its own, earlier one: a row
        breaking both gets the key's error on either path.
        """
        import time

        from ordo.producer import records_source

        df, hidden = self._with_hidden(records)
        on_driver = driver_side(df)
        validate_seconds = 0.0
        if check is not None and (not on_driver or self.layout.constraints):
            started = time.perf_counter()
            check.in_spark(records)
            validate_seconds, check = time.perf_counter() - started, None
        layout = self.layout
        spec = records_source.write_spec(
            layout.location,
            layout.partition_columns,
            layout.primary_key,
            self.txn_id,
            hidden,
            layout.buckets > 1,
            layout.int_property(MAX_RECORDS_PER_FILE_PROPERTY, DEFAULT_MAX_RECORDS_PER_FILE),
            self.write_ids,
        )
        started = time.perf_counter()
        try:
            rows = self._collect(df, [*hidden, *sort_by], check) if on_driver else None  # nothing written yet
        except BaseException as exc:
            _raise_violation(exc)
            raise
        try:
            if rows is not None:
                files = records_source.record_write(df.schema, spec).write(iter(rows.to_batches()))
                spark_seconds = time.perf_counter() - started
            else:
                files, spark_seconds = self._write_in_job(self._laid_out(df, hidden, sort_by, target_files), spec)
        except BaseException as exc:
            self._delete_left_by_failed_job()
            _raise_violation(exc)
            raise
        started = time.perf_counter()
        files = [f for f in files if f.record_count]
        self.written.extend(f.path for f in files)
        ordered = sorted(files, key=lambda f: (sorted(f.partition.items()), f.bucket, f.path))
        return WriteStats(tuple(ordered), spark_seconds, time.perf_counter() - started, validate_seconds)

    def _write_in_job(self, df: DataFrame, spec: dict[str, Any]) -> tuple[list[DataFile], float]:
        """The records written by the tasks of one Spark job (``ordo_records``); the files and the job's seconds."""
        import os
        import tempfile
        import time

        from ordo.producer import records_source

        records_source.register(df.sparkSession)  # the session the write runs in (a stream's clone, maybe)
        handle, result = tempfile.mkstemp(prefix=f"ordo-write-{self.txn_id}-", suffix=".jsonl")
        os.close(handle)
        started = time.perf_counter()
        try:
            writer = df.write.format(records_source.NAME).mode("append")
            writer.option("write", records_source.write_options(spec)).option("result", result).save()
            seconds = time.perf_counter() - started
            with open(result, encoding="utf-8") as lines:
                return [DataFile.model_validate_json(line) for line in lines if line.strip()], seconds
        finally:
            os.unlink(result)

    @staticmethod
    def _collect(df: DataFrame, order: Sequence[str], check: RecordCheck | None) -> pa.Table:
        """The records collected to Arrow, for the ``RecordWrite`` a task would run to write them here, as one task.

        The hidden columns, the bucket and the CHECK constraints are the same Spark expressions as the job's, so
        the collection evaluates them (a violated constraint fails it with the same error). ``check``'s column
        comes with them, and the check runs on the collected rows. The rows are sorted as the job's tasks sort
        them: by ``order`` (the hidden columns, then the write's ``sort_by``), nulls first.
        """
        collected = df if check is None else df.withColumn(BAD_PARTITION_COLUMN, check.column())
        rows = collected.coalesce(1).toArrow()  # one task: small rows over spark.default.parallelism cost more tasks
        if check is not None:
            if not check.on_collected(rows):  # a key Arrow cannot group: Spark groups it
                check.in_spark(df)
            rows = rows.drop_columns([BAD_PARTITION_COLUMN])
        if order and rows.num_rows > 1:
            rows = _nulls_first(rows, order)
        return rows

    def _with_hidden(self, records: DataFrame) -> tuple[DataFrame, list[str]]:
        """``records`` checked against the CHECK constraints, with the hidden (partition, bucket) columns."""
        from pyspark.sql import functions as F

        layout = self.layout
        hidden = [f"_ordo_p{i}" for i in range(len(layout.partition_columns))]
        columns = {
            name: F.col(f"`{c}`").cast("string") for name, c in zip(hidden, layout.partition_columns, strict=True)
        }
        if layout.buckets > 1:
            from ordo.producer.buckets import bucket_column

            columns[BUCKET_COLUMN] = bucket_column(layout.schema(), layout.primary_key, layout.buckets)
            hidden = [*hidden, BUCKET_COLUMN]  # one output file per (partition, bucket) at least
        df = enforce_constraints(records, layout)
        return (df.withColumns(columns) if columns else df), hidden  # one projection: one analysis, not one each

    @staticmethod
    def _laid_out(df: DataFrame, hidden: Sequence[str], sort_by: Sequence[str], target_files: int | None) -> DataFrame:
        """``df`` laid out in tasks as the files should be: one task per (partition, bucket), its rows contiguous."""
        from pyspark.sql import functions as F

        if hidden:
            df = df.repartition(*[F.col(h) for h in hidden])
            df = df.sortWithinPartitions(*[F.col(h) for h in hidden], *[F.col(f"`{c}`") for c in sort_by])
        elif sort_by:
            df = df.orderBy(*[F.col(f"`{c}`") for c in sort_by])
            if target_files:
                df = df.coalesce(target_files)
        elif target_files:
            df = df.coalesce(target_files)
        return df

    def _delete_left_by_failed_job(self) -> None:
        """Delete the files of this write id that are not this writer's (what the failed job's tasks left)."""
        kept = set(self.written)
        try:
            for relative, _size in self.storage.list_files():
                if relative not in kept and write_id_of(relative) == self.txn_id:
                    self.storage.delete_file(relative)
        except OSError:
            pass  # orphans then: no commit names them

    def hand_over(self, write_id: str) -> FileWriter:
        """A writer that owns (and cleans up) the files of ``write_id`` this one put in place; they leave this one."""
        taken = FileWriter(self.spark, self.layout, write_id)
        taken.written = [path for path in self.written if write_id_of(path) == write_id]
        self.written = [path for path in self.written if write_id_of(path) != write_id]
        return taken

    def cleanup(self) -> int:
        """Delete every file this writer put in place; the number deleted."""
        deleted = 0
        for relative in self.written:
            if self.storage.delete_file(relative):
                deleted += 1
        self.written.clear()
        return deleted
