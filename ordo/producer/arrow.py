"""Data-file writing with pyarrow inside Spark's tasks: every writer's files are made here, at their final path.

Spark's Python workers have no SparkSession; each task writes its rows here,
under the writer contract (ordo/producer/data.py):
``<partition path>/<txn id>-<n>.parquet``. Two entries:

* ``write_rows``, for the ``format("ordo")`` sink: a task's user rows become
  upsert records (``_ordo_op`` = ``upsert``, a null ``_ordo_seq``);
* ``RecordWrite``, for ``producer.filewriter.FileWriter`` (``DeltaTable``, UPDATE,
  DELETE, MERGE, compaction; through ``producer.records_source``): a task's
  records, already in file form and sorted by (partition, bucket), streamed
  into one file per group.

Files are written once where they stay: there is no staging directory and no
rename (on an object store a rename is a copy plus a delete). ``n`` is unique
across the tasks of one write: each task run takes its own random block of
``FILES_PER_TASK`` numbers (``task_first_number``), so a re-run or a
speculative copy of a task never overwrites a file a commit names; what a
failed or abandoned task left is an orphan no commit names (``ordo vacuum
--orphans``). Rows are checked before anything is written: non-null
keys, non-empty partition values (inside a static partition when one is
given) and no duplicate key within the task; ``check_unique`` checks across
tasks at commit time. A keyless table's rows get their new row ids here
(``<txn id>:<first number>:<n>``, unique per task run) and skip both key checks.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ordo.producer.buckets import bucket_array
from ordo.producer.commit import Change
from ordo.producer.data import (
    EXAMPLES,
    OP_COLUMN,
    OP_UPSERT,
    SEQ_COLUMN,
    InvalidOperationError,
    Layout,
    PartitionValueError,
    PrimaryKeyError,
    SchemaMismatchError,
    Storage,
    key_stats,
)
from ordo.schemas import DataFile, Operation
from ordo.schemas.models import parse_ddl
from ordo.schemas.operations import ROW_ID_COLUMN
from ordo.schemas.paths import data_file_path

if TYPE_CHECKING:
    import pyarrow as pa

    from ordo.schemas import CommitIntent

FILES_PER_TASK = 100_000  # file numbers reserved per task attempt
_BUCKET = "__ordo_bucket"
ROW_GROUP_BYTES = 64 * 1024 * 1024  # Arrow bytes buffered per row group (Spark's batches are 10 000 rows)
COMPRESSION = "zstd"  # a file of at least SMALL_FILE_BYTES: the smaller file, for about the same decoding time
SMALL_FILE_COMPRESSION = "snappy"  # a smaller one: read many at a time, where zstd's fixed cost per page told
SMALL_FILE_BYTES = 1024 * 1024  # Arrow bytes of a file's first row group below which it is a small file


def compression(rows: pa.Table) -> str:
    """The codec of a file whose first row group is ``rows``.

    A small write makes small files (one per partition and bucket), and a
    merge-on-read opens hundreds of them: pyarrow sets up a zstd decoder for
    every page, about 0.12 ms a file of five columns, a third of what opening
    the file costs in all (docs/benchmarks.md, "Where an uncompacted read
    goes"). Snappy decodes them at the cost of an uncompressed file. A large
    file (a compaction's, a bulk load's) keeps zstd: there the bytes count.
    """
    return COMPRESSION if rows.nbytes >= SMALL_FILE_BYTES else SMALL_FILE_COMPRESSION


DICTIONARY_SAMPLE = 10_000  # rows looked at to choose the dictionary-encoded columns of a file


def dictionary_columns(rows: pa.Table, sample: int = DICTIONARY_SAMPLE) -> list[str]:
    """The columns worth dictionary encoding: those whose first ``sample`` values repeat (at most half distinct).

    pyarrow dictionary-encodes every column by default; a column of unique
    values (keys, ids, free text) then costs twice to four times its plain,
    compressed size. Nested columns are left plain.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    head = rows.slice(0, sample)
    found = []
    for field in head.schema:
        if pa.types.is_nested(field.type) or not head.num_rows:
            continue
        distinct = pc.count_distinct(head.column(field.name), mode="all").as_py()
        if distinct * 2 <= head.num_rows:
            found.append(field.name)
    return found


def task_first_number() -> int:
    """The first file number of this task run: a random block, plus the partition id and attempt when in Spark."""
    from pyspark import TaskContext

    context = TaskContext.get()
    task = 0 if context is None else context.partitionId() * 100 + min(context.attemptNumber(), 99)
    return (secrets.randbits(40) * 10_000 + task) * FILES_PER_TASK


def conform_batch(batch: pa.Table, schema: pa.Schema, fill: Collection[str] = ()) -> pa.Table:
    """The batch's columns in table order and types, a column of ``fill`` it lacks as nulls; ``SchemaMismatchError``
    when names differ otherwise or a cast fails."""
    import pyarrow as pa

    have, want = set(batch.column_names), set(schema.names)
    if have | (want & set(fill)) != want:
        raise SchemaMismatchError(
            f"the rows' columns do not match the table: missing {sorted(want - have - set(fill))}, "
            f"unexpected {sorted(have - want)}"
        )
    try:
        columns = [
            batch.column(f.name).cast(f.type) if f.name in have else pa.nulls(batch.num_rows, f.type) for f in schema
        ]
        return pa.table(columns, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaMismatchError(f"the rows' types do not match the table ({exc}); nothing was written") from exc


def partition_text(column: Any) -> Any:
    """Partition values as the strings Spark's ``cast(... as string)`` gives (ints, strings, dates, booleans)."""
    import pyarrow as pa

    return column.cast(pa.string())


def check_rows(rows: pa.Table, layout: Layout, static: Mapping[str, str] | None = None) -> None:
    """Refuse null keys, bad partition values and duplicate keys (per partition) in ``rows``."""
    import pyarrow.compute as pc

    if rows.num_rows == 0:
        return
    for k in () if layout.keyless else layout.primary_key:  # a keyless table's row ids are new (``write_rows``)
        if rows.column(k).null_count:
            raise PrimaryKeyError(f"primary key {list(layout.primary_key)} violated: null values in {k!r}")
    for c in layout.partition_columns:
        text = partition_text(rows.column(c))
        bad = text.null_count or pc.any(pc.equal(text, "")).as_py()
        if bad:
            raise PartitionValueError(f"null or empty values of partition column {c!r}; nothing was written")
        if static is not None and not pc.all(pc.equal(text, static[c])).as_py():
            raise PartitionValueError(f"rows outside the partition {dict(static)} being written; nothing was written")
    if layout.keyless:
        return  # new row ids: unique by construction
    identity = list(layout.identity)
    counts = rows.group_by(identity, use_threads=False).aggregate([([], "count_all")])
    dups = counts.filter(pc.greater(counts.column("count_all"), 1))
    if dups.num_rows:
        examples = dups.slice(0, EXAMPLES).to_pylist()
        raise PrimaryKeyError(
            f"primary key {list(layout.primary_key)} violated: duplicate primary keys within the write "
            f"(e.g. {examples}); nothing was written"
        )


def write_rows(
    rows: pa.Table, layout: Layout, txn_id: str, first_number: int, static: Mapping[str, str] | None = None
) -> list[DataFile]:
    """Check ``rows`` (table columns) and write them as upsert records, one file per (partition, bucket)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    check_rows(rows, layout, static)
    if rows.num_rows == 0:
        return []
    if layout.keyless and ROW_ID_COLUMN not in rows.column_names:
        rows = with_row_ids(rows, layout, f"{txn_id}:{first_number}:")
    storage = Storage(layout.location)
    columns = layout.partition_columns
    buckets = bucket_array(rows, layout.primary_key, layout.buckets)
    texts = {c: partition_text(rows.column(c)) for c in columns}
    texts[_BUCKET] = buckets
    # one file per (partition, bucket) present in the rows
    groups: list[tuple[dict[str, str], int, pa.Table]] = []
    found = pa.table(texts).group_by([*columns, _BUCKET], use_threads=False).aggregate([])
    for values in found.to_pylist():
        mask = None
        for c in [*columns, _BUCKET]:
            eq = pc.equal(texts[c], values[c])
            mask = eq if mask is None else pc.and_(mask, eq)
        groups.append(({c: str(values[c]) for c in columns}, int(values[_BUCKET]), rows.filter(mask)))
    files = []
    written: list[str] = []
    try:
        ordered = sorted(groups, key=lambda g: (sorted(g[0].items()), g[1]))
        for n, (partition, bucket, part_rows) in enumerate(ordered):
            count = part_rows.num_rows
            records = part_rows.append_column(OP_COLUMN, pa.array([OP_UPSERT] * count, pa.string()))
            records = records.append_column(SEQ_COLUMN, pa.nulls(count, pa.int64()))
            relative = data_file_path(columns, partition, txn_id, first_number + n)
            target = storage.path(relative)
            storage.ensure_parent(relative)
            with storage.fs.open_output_stream(target) as out:
                pq.write_table(
                    records, out, compression=compression(records), use_dictionary=dictionary_columns(records)
                )
            written.append(relative)
            footer = storage.footer(relative)
            size = storage.fs.get_file_info(target).size
            low, high = key_stats(footer, layout.primary_key)
            files.append(
                DataFile(
                    path=relative,
                    partition=partition,
                    record_count=count,
                    size_bytes=int(size or 0),
                    min_key=low,
                    max_key=high,
                    bucket=bucket,
                )
            )
    except BaseException:
        delete_files(layout, written)
        raise
    return files


@dataclass(frozen=True)
class RecordWrite:
    """One write's records, streamed by each Spark task into files at their final paths.

    The task's rows come sorted by the ``hidden`` columns (each partition
    column as text, then the bucket when the table has several), so every
    (partition, bucket) is one run: one file, split at ``max_records``
    records. Each file is described by a ``DataFile`` from the footer pyarrow
    just wrote (no second read). A task that fails deletes what it wrote.
    ``producer.records_source`` runs it in Spark's tasks.
    """

    location: str
    partition_columns: tuple[str, ...]
    primary_key: tuple[str, ...]
    write_id: str
    hidden: tuple[str, ...]
    bucketed: bool
    schema: Any  # the files' pyarrow schema: table columns, _ordo_op, _ordo_seq (all nullable)
    max_records: int
    # The write id of each partition's files (partition values in column order), when one Spark job writes for
    # several transactions (``producer.rewrites``: one per partition); None: ``write_id`` for every file.
    write_ids: Mapping[tuple[str, ...], str] | None = None

    def write_id_for(self, partition: Mapping[str, str]) -> str:
        """The write id a file of ``partition`` is named by; a partition the write was not given fails it."""
        if self.write_ids is None:
            return self.write_id
        key = tuple(partition[c] for c in self.partition_columns)
        if key not in self.write_ids:
            raise InvalidOperationError(f"the write produced a file in partition {partition}, which it was not given")
        return self.write_ids[key]

    def write(self, batches: Iterator[pa.RecordBatch]) -> list[DataFile]:
        """Write the task's records (file columns plus the hidden ones); the files made."""
        import pyarrow as pa

        files = _GroupFiles(self, task_first_number())
        try:
            for batch in batches:
                for key, run in self._runs(batch):
                    files.add(key, pa.Table.from_batches([run]).select(self.schema.names).cast(self.schema))
            files.close()
        except BaseException:
            files.discard()
            raise
        return files.done

    def _runs(self, batch: pa.RecordBatch) -> Iterator[tuple[tuple[Any, ...], pa.RecordBatch]]:
        """The batch cut where the hidden columns' values change, each run with its values."""
        import pyarrow as pa
        import pyarrow.compute as pc

        rows = batch.num_rows
        if rows == 0:
            return
        if not self.hidden:
            yield (), batch
            return
        columns = [batch.column(h) for h in self.hidden]
        changed = None
        for column in columns:
            text = pc.fill_null(column.cast(pa.string()), "\x00")
            step = pc.not_equal(text.slice(1), text.slice(0, rows - 1))
            changed = step if changed is None else pc.or_(changed, step)
        assert changed is not None
        starts = [0, *(i + 1 for i in pc.indices_nonzero(changed).to_pylist()), rows]
        for begin, end in itertools.pairwise(starts):
            yield tuple(c[begin].as_py() for c in columns), batch.slice(begin, end - begin)

    def group(self, key: tuple[Any, ...]) -> tuple[dict[str, str], int]:
        """The partition and bucket of a run's hidden values."""
        values = list(key)
        bucket = int(values.pop()) if self.bucketed else 0
        return {c: str(v) for c, v in zip(self.partition_columns, values, strict=True)}, bucket

    def data_file(self, key: tuple[Any, ...], relative: str, metadata: Any, size: int) -> DataFile:
        """The ``DataFile`` of a written file from its (partition, bucket) key and footer."""
        partition, bucket = self.group(key)
        low, high = key_stats(metadata, self.primary_key)
        return DataFile(
            path=relative,
            partition=partition,
            record_count=metadata.num_rows,
            size_bytes=size,
            min_key=low,
            max_key=high,
            bucket=bucket,
        )


class _GroupFiles:
    """The files one task of a ``RecordWrite`` writes: the open one, its buffered rows, and those done."""

    def __init__(self, write: RecordWrite, first_number: int) -> None:
        self.write = write
        self.storage = Storage(write.location)
        self.number = first_number
        self.done: list[DataFile] = []
        self.written: list[str] = []
        self.key: tuple[Any, ...] | None = None
        self.relative = ""
        self.out: Any = None
        self.writer: Any = None
        self.rows = 0  # records in the open file, buffered ones included
        self.buffer: list[pa.Table] = []
        self.buffered_bytes = 0

    def add(self, key: tuple[Any, ...], records: pa.Table) -> None:
        if key != self.key:
            self.close()
            self.key = key
        while records.num_rows:
            if self.out is None:
                self._open()
            take = min(records.num_rows, self.write.max_records - self.rows)
            part, records = records.slice(0, take), records.slice(take)
            self.buffer.append(part)
            self.buffered_bytes += part.nbytes
            self.rows += take
            if self.buffered_bytes >= ROW_GROUP_BYTES:
                self._flush()
            if self.rows >= self.write.max_records:
                self._finish()

    def _open(self) -> None:
        write = self.write
        assert self.key is not None
        partition, _bucket = write.group(self.key)
        self.relative = data_file_path(write.partition_columns, partition, write.write_id_for(partition), self.number)
        self.number += 1
        self.storage.ensure_parent(self.relative)
        self.out = self.storage.fs.open_output_stream(self.storage.path(self.relative))
        self.written.append(self.relative)

    def _flush(self) -> None:
        """Write the buffered rows as a row group (the file's writer is made at its first, to see the rows)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.buffer:
            rows = pa.concat_tables(self.buffer)
            if self.writer is None:
                dictionary = dictionary_columns(rows)
                self.writer = pq.ParquetWriter(
                    self.out, self.write.schema, compression=compression(rows), use_dictionary=dictionary
                )
            self.writer.write_table(rows)
            self.buffer, self.buffered_bytes = [], 0

    def _finish(self) -> None:
        """Close the open file (its upload completes here on an object store) and describe it."""
        if self.out is None:
            return
        self._flush()
        self.writer.close()
        size = self.out.tell()
        self.out.close()
        assert self.key is not None
        self.done.append(self.write.data_file(self.key, self.relative, self.writer.writer.metadata, size))
        self.writer = self.out = None
        self.rows = 0

    def close(self) -> None:
        self._finish()

    def discard(self) -> None:
        """Delete every file this task wrote (best effort: the task is failing anyway)."""
        try:
            if self.out is not None:
                self.out.close()
        except Exception:
            pass
        for relative in self.written:
            try:
                self.storage.delete_file(relative)
            except OSError:
                pass  # left as an orphan: no commit names it, ``ordo vacuum --orphans`` removes it


def with_row_ids(rows: pa.Table, layout: Layout, prefix: str) -> pa.Table:
    """A keyless table's rows (user columns) with new row ids ``<prefix><n>``, in table column order."""
    import pyarrow as pa

    ids = pa.array([f"{prefix}{n}" for n in range(rows.num_rows)], pa.string())
    names = [c.name for c in parse_ddl(layout.schema_ddl)]
    return pa.table([ids if n == ROW_ID_COLUMN else rows.column(n) for n in names], names=names)


def check_unique(layout: Layout, files: Sequence[DataFile]) -> None:
    """Refuse a write whose tasks wrote the same key (per partition): reads the key columns of the files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if layout.keyless:
        return  # row ids are unique per task run (``write_rows``)
    storage = Storage(layout.location)
    by_part: dict[tuple[str, ...], list[DataFile]] = {}
    for f in files:
        by_part.setdefault(tuple(f.partition.get(c, "") for c in layout.partition_columns), []).append(f)
    for group in by_part.values():
        if len(group) < 2:
            continue
        tables = []
        for f in group:
            with storage.fs.open_input_file(storage.path(f.path)) as handle:
                tables.append(pq.read_table(handle, columns=list(layout.primary_key)))
        keys = pa.concat_tables(tables)
        counts = keys.group_by(list(layout.primary_key), use_threads=False).aggregate([([], "count_all")])
        if counts.num_rows != keys.num_rows:
            raise PrimaryKeyError(
                f"primary key {list(layout.primary_key)} violated: duplicate primary keys within the write; "
                "nothing was committed"
            )


def delete_files(layout: Layout, relative_paths: Sequence[str]) -> int:
    """Delete written files (a rejected or aborted write); the number deleted."""
    storage = Storage(layout.location)
    return sum(1 for p in relative_paths if storage.delete_file(p))


def insert_intent(
    rows: pa.Table, layout: Layout, txn_id: str, read_version: int, writer: str | None = None
) -> CommitIntent:
    """INSERT INTO of ``rows`` without Spark: their files written now (``write_rows``, numbered from 0), and the
    intent that commits them, scoped to the partitions written (benchmarks, tests and tools that write as a
    stream's tasks do)."""
    files = write_rows(rows, layout, txn_id, 0)
    columns = layout.partition_columns
    scope = {tuple(f.partition[c] for c in columns): dict(f.partition) for f in files} if columns else None
    partitions = None if scope is None else tuple(scope[k] for k in sorted(scope))
    change = Change(layout.name, Operation.INSERT_INTO, partitions=partitions, added_files=tuple(files), writer=writer)
    return change.intent(txn_id, read_version)


__all__ = [
    "RecordWrite",
    "check_rows",
    "check_unique",
    "conform_batch",
    "delete_files",
    "insert_intent",
    "task_first_number",
    "write_rows",
]
