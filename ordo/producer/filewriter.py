"""A transaction's data files written by one Spark job, at their final paths (``FileWriter``).

The job's tasks write with pyarrow through the ``ordo_records`` data source (``producer.records_source``,
``producer.arrow.RecordWrite``): no staging area and no rename, which on an object store would be a copy and a
delete per file. A failed job's files are deleted; what cannot be deleted is an orphan VACUUM removes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ordo.producer.data import (
    BUCKET_COLUMN,
    DEFAULT_MAX_RECORDS_PER_FILE,
    MAX_RECORDS_PER_FILE_PROPERTY,
    Layout,
    Storage,
    _violation,
    enforce_constraints,
)
from ordo.schemas import DataFile
from ordo.schemas.paths import write_id_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class WriteStats:
    """What one staged write produced and how long its phases took."""

    files: tuple[DataFile, ...]
    spark_seconds: float
    finish_seconds: float


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
    ) -> WriteStats:
        """Write ``records`` (table columns + ``_ordo_op`` + ``_ordo_seq``) and return the files made."""
        import os
        import tempfile
        import time

        from ordo.producer import records_source

        df, hidden = self._arranged(records, sort_by, target_files)
        layout = self.layout
        spec = records_source.write_options(
            layout.location,
            layout.partition_columns,
            layout.primary_key,
            self.txn_id,
            hidden,
            layout.buckets > 1,
            layout.int_property(MAX_RECORDS_PER_FILE_PROPERTY, DEFAULT_MAX_RECORDS_PER_FILE),
            self.write_ids,
        )
        records_source.register(df.sparkSession)  # the session the write runs in (a stream's clone, maybe)
        handle, result = tempfile.mkstemp(prefix=f"ordo-write-{self.txn_id}-", suffix=".jsonl")
        os.close(handle)
        started = time.perf_counter()
        try:
            writer = df.write.format(records_source.NAME).mode("append")
            writer.option("write", spec).option("result", result).save()
            spark_seconds = time.perf_counter() - started
            started = time.perf_counter()
            with open(result, encoding="utf-8") as lines:
                files = [DataFile.model_validate_json(line) for line in lines if line.strip()]
        except BaseException as exc:
            self._delete_left_by_failed_job()
            violation = _violation(exc)  # a CHECK constraint the rows broke: the job's error, named
            if violation is not None:
                raise violation from None
            raise
        finally:
            os.unlink(result)
        files = [f for f in files if f.record_count]
        self.written.extend(f.path for f in files)
        ordered = sorted(files, key=lambda f: (sorted(f.partition.items()), f.bucket, f.path))
        return WriteStats(tuple(ordered), spark_seconds, time.perf_counter() - started)

    def _arranged(
        self, records: DataFrame, sort_by: Sequence[str], target_files: int | None
    ) -> tuple[DataFrame, list[str]]:
        """``records`` with the hidden (partition, bucket) columns, laid out in tasks as the files should be."""
        from pyspark.sql import functions as F

        layout = self.layout
        hidden = [f"_ordo_p{i}" for i in range(len(layout.partition_columns))]
        df = enforce_constraints(records, layout)
        for name, column in zip(hidden, layout.partition_columns, strict=True):
            df = df.withColumn(name, F.col(f"`{column}`").cast("string"))
        if layout.buckets > 1:
            from ordo.producer.buckets import bucket_column

            df = df.withColumn(BUCKET_COLUMN, bucket_column(layout.schema(), layout.primary_key, layout.buckets))
            hidden = [*hidden, BUCKET_COLUMN]  # one output file per (partition, bucket) at least
        if hidden:
            # one task per (partition, bucket), its rows contiguous: one file each
            df = df.repartition(*[F.col(h) for h in hidden])
            df = df.sortWithinPartitions(*[F.col(h) for h in hidden], *[F.col(f"`{c}`") for c in sort_by])
        elif sort_by:
            df = df.orderBy(*[F.col(f"`{c}`") for c in sort_by])
            if target_files:
                df = df.coalesce(target_files)
        elif target_files:
            df = df.coalesce(target_files)
        return df, hidden

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
