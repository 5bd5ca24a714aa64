"""Spark-free data-file writing with pyarrow, for the ``format("ordo")`` sink's tasks.

Spark's Python workers have no SparkSession, so the data source cannot use
``FileWriter``; each task writes its rows here instead, under the same
contract (ordo/producer/data.py): ``<partition path>/<txn id>-<n>.parquet`` with
every table column plus ``_ordo_op`` = ``upsert`` and a null ``_ordo_seq``.
``n`` is unique across the tasks of one write: the caller gives each task run
its own block of ``FILES_PER_TASK`` numbers (the data source: a random block
plus the task's partition id and attempt), so a re-run never overwrites a file
a commit already names. Rows are checked before anything is written: non-null
keys, non-empty partition values (inside a static partition when one is
given) and no duplicate key within the task; ``check_unique`` checks across
tasks at commit time. A keyless table's rows get their new row ids here
(``<txn id>:<first number>:<n>``, unique per task run) and skip both key checks.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ordo.producer.buckets import bucket_array
from ordo.producer.data import (
    EXAMPLES,
    OP_COLUMN,
    OP_UPSERT,
    SEQ_COLUMN,
    Layout,
    PartitionValueError,
    PrimaryKeyError,
    SchemaMismatchError,
    Storage,
    data_file_path,
    key_stats,
)
from ordo.schemas import CommitIntent, DataFile, Operation
from ordo.schemas.models import parse_ddl
from ordo.schemas.operations import ROW_ID_COLUMN

if TYPE_CHECKING:
    import pyarrow as pa

FILES_PER_TASK = 100_000  # file numbers reserved per task attempt
_BUCKET = "__ordo_bucket"


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
            storage.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
            with storage.fs.open_output_stream(target) as out:
                pq.write_table(records, out, compression="zstd")
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
    return CommitIntent(
        txn_id=txn_id,
        table=layout.name,
        operation=Operation.INSERT_INTO,
        read_version=read_version,
        partitions=None if scope is None else tuple(scope[k] for k in sorted(scope)),
        added_files=tuple(files),
        writer=writer,
    )


__all__ = ["check_rows", "check_unique", "conform_batch", "delete_files", "insert_intent", "write_rows"]
