"""Reading a table's data files without Spark, for the CLI (``ordo show``, ``ordo changes --rows``, ``ordo vacuum``).

The files follow the writer contract (docs/writer.md): Parquet with every
table column plus ``_ordo_op`` (``upsert``/``delete``) and ``_ordo_seq`` (NULL
in files of user commits, whose records take the ID version that added the
file; the original sequence number in compaction output). pyarrow reads them
in a fraction of a second where a Spark session takes ten to start; Spark
remains the reader for data-sized work (``consumer.spark``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ordo.errors import OrdoError
from schemas.models import ddl_columns
from schemas.operations import OP_COLUMN, REGISTRY, SEQ_COLUMN, TRUNCATING_OPERATIONS, ChangeRows

if TYPE_CHECKING:
    from consumer.models import Commit, FileEntry, Snapshot

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class DataFileError(OrdoError):
    """Raised when a data file the catalog lists cannot be read (moved, deleted, or unreachable storage)."""


def filesystem(path: str) -> tuple[Any, str]:
    """``(pyarrow FileSystem, path within it)`` for a local path, ``file:`` URI or any URI pyarrow knows."""
    from pyarrow import fs

    if path.startswith("file:"):
        return fs.LocalFileSystem(), re.sub(r"^file:(//)?", "", path)
    if _SCHEME.match(path):
        return fs.FileSystem.from_uri(path)  # type: ignore[no-any-return]
    return fs.LocalFileSystem(), path


def read_file(entry: FileEntry, columns: Sequence[str] | None = None) -> Any:
    """One data file as a pyarrow Table (only ``columns`` when given); ``DataFileError`` if unreadable.

    A requested column the file lacks (added by ALTER TABLE after it was written) reads as NULL.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs, path = filesystem(entry.absolute_path)
    try:
        if columns is None:
            return pq.read_table(path, filesystem=fs)
        with fs.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            present = set(parquet.schema_arrow.names)
            table = parquet.read(columns=[c for c in columns if c in present])
    except (OSError, ValueError) as exc:
        raise DataFileError(f"cannot read data file {entry.absolute_path}: {exc}") from exc
    for column in columns:
        if column not in present:
            table = table.append_column(column, pa.nulls(table.num_rows))
    return table.select(list(columns))


def live_row_count(snapshot: Snapshot) -> int:
    """Rows a reader sees at ``snapshot`` (merge-on-read), reading only the key and ordo columns.

    Per partition and primary key the record with the highest effective
    sequence number wins (an upsert beats a delete on a tie, as in
    ``consumer.spark.read``); a winning delete hides the key.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    metadata = snapshot.metadata
    keys = [*metadata.partition_columns, *metadata.primary_key]
    keys = list(dict.fromkeys(keys))
    parts = []
    for entry in snapshot.files:
        if entry.record_count == 0:
            continue
        table = read_file(entry, [*keys, OP_COLUMN, SEQ_COLUMN])
        seq = pc.coalesce(table[SEQ_COLUMN].cast(pa.int64()), pa.scalar(entry.seq, pa.int64()))
        upsert = pc.equal(table[OP_COLUMN], pa.scalar("upsert")).cast(pa.int64())
        rank = pc.add(pc.multiply(seq, pa.scalar(2, pa.int64())), upsert)  # upsert wins a tie
        columns = {}
        for column in keys:
            values = table[column]
            if column in metadata.partition_columns:
                # a delete record may leave its partition column null: the file's partition says where it is
                fill = pa.scalar(entry.partition.get(column), pa.string())
                values = pc.coalesce(values.cast(pa.string()), fill)
            columns[column] = values
        columns["_rank"] = rank
        parts.append(pa.table(columns))
    if not parts:
        return 0
    merged = pa.concat_tables(parts, promote_options="permissive")
    winners = merged.group_by(keys, use_threads=False).aggregate([("_rank", "max")])
    live = pc.equal(pc.bit_wise_and(winners["_rank_max"], pa.scalar(1, pa.int64())), pa.scalar(1, pa.int64()))
    return int(pc.sum(live.cast(pa.int64())).as_py() or 0)


def _merged_rows(
    files: Sequence[FileEntry], columns: Sequence[str], partition_columns: Sequence[str], primary_key: Sequence[str]
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Merge-on-read of ``files`` in Python (CLI-sized): per (partition, key) the live row."""
    best: dict[tuple[Any, ...], tuple[tuple[int, bool], str, dict[str, Any]]] = {}
    key_columns = list(dict.fromkeys([*partition_columns, *primary_key]))
    for entry in files:
        if entry.record_count == 0:
            continue
        for record in read_file(entry, [*columns, OP_COLUMN, SEQ_COLUMN]).to_pylist():
            row = {c: record.get(c) for c in columns}
            for column in partition_columns:
                if row.get(column) is None:
                    row[column] = entry.partition.get(column)
            key = tuple(row.get(c) for c in key_columns)
            seq = record.get(SEQ_COLUMN)
            rank = (entry.seq if seq is None else seq, record[OP_COLUMN] == "upsert")  # an upsert wins a tie
            if key not in best or rank > best[key][0]:
                best[key] = (rank, record[OP_COLUMN], row)
    return {key: row for key, (_, op, row) in best.items() if op == "upsert"}


def change_rows(
    commits: Iterable[Commit],
    columns: Sequence[str],
    partition_columns: Sequence[str],
    snapshot_files: Callable[[int], Sequence[FileEntry]] | None = None,
    primary_key: Sequence[str] = (),
) -> list[dict]:
    """The change feed of ``commits`` as plain rows (the same rows as ``consumer.spark.changes``).

    Each row holds the table ``columns`` plus ``_change_type`` (``upsert``,
    ``delete`` or ``truncate``), ``_commit_version``, ``_commit_timestamp`` and
    ``_scope``; a version's ``truncate`` row comes before its other rows.
    A RESTORE gives the rows that differ between the snapshots before and
    after it (``snapshot_files(version)``: the live files at a version): an
    ``upsert`` per row new or changed, a ``delete`` with the old row per key
    gone. Compaction and clustering contribute nothing.
    """
    rows: list[dict] = []
    for commit in sorted(commits, key=lambda c: c.id_version):
        if not commit.data_change:
            continue
        if REGISTRY[commit.operation].change_rows is ChangeRows.DIFF:
            if snapshot_files is None:
                raise DataFileError(f"version {commit.id_version}'s rows need the snapshots before and after it")
            before = _merged_rows(snapshot_files(commit.id_version - 1), columns, partition_columns, primary_key)
            after = _merged_rows(snapshot_files(commit.id_version), columns, partition_columns, primary_key)
            meta = {"_commit_version": commit.id_version, "_commit_timestamp": commit.timestamp, "_scope": None}
            for key in sorted(after.keys() | before.keys(), key=repr):
                if key in after and after[key] != before.get(key):
                    rows.append({**after[key], "_change_type": "upsert", **meta})
                elif key not in after:
                    rows.append({**before[key], "_change_type": "delete", **meta})
            continue
        if commit.operation.value in TRUNCATING_OPERATIONS:
            scope = None
            if commit.partitions is not None and partition_columns:
                scope = json.dumps([dict(p) for p in commit.partitions], sort_keys=True, separators=(",", ":"))
            row = dict.fromkeys(columns)
            row.update(
                _change_type="truncate",
                _commit_version=commit.id_version,
                _commit_timestamp=commit.timestamp,
                _scope=scope,
            )
            rows.append(row)
        for entry in commit.added_files:
            if not entry.data_change or entry.record_count == 0:
                continue
            for record in read_file(entry, [*columns, OP_COLUMN]).to_pylist():
                row = {c: record.get(c) for c in columns}
                for column in partition_columns:
                    if row.get(column) is None:
                        row[column] = entry.partition.get(column)
                row.update(
                    _change_type=record[OP_COLUMN],
                    _commit_version=commit.id_version,
                    _commit_timestamp=commit.timestamp,
                    _scope=None,
                )
                rows.append(row)
    return rows


__all__ = ["DataFileError", "change_rows", "ddl_columns", "filesystem", "live_row_count", "read_file"]
