"""Spark-free reads of ordo tables with pyarrow: merge-on-read and the change feed in both forms.

The ``format("ordo")`` data source runs these functions inside Spark's Python
workers, where there is no SparkSession: each works on a list of data files
(``FileEntry``) and returns a ``pyarrow.Table`` with the table's columns.

Merge-on-read follows the writer contract (docs/consumer.md): per partition
and primary key, the record with the highest effective sequence number
``coalesce(_ordo_seq, added version)`` wins (an upsert beats a delete of the
same sequence number); a winning delete hides the key.

The change feed comes in two forms (docs/consumer.md, "Change feed"):

* ``delta`` (Delta's shape): ``_change_type`` is ``insert``,
  ``update_preimage``, ``update_postimage`` or ``delete``, each with the full
  row. A pre-image is the key's row in the snapshot before the commit, looked
  up per (partition, bucket): every record of a key lives in its bucket's
  files, so ``plan_commits`` asks the catalog only for the live files of the
  groups the commit wrote (``touched_groups``), keeps those whose key range
  (file stats) overlaps the commit's keys, and ``change_rows`` reads from them
  only the rows of the commit's keys (a filter pushed into the Parquet scan).
  The work per commit follows the rows it touched and the files of their
  groups, not the table. An INSERT OVERWRITE or TRUNCATE gives one ``delete``
  per row it removed (it reads the partitions it cleared, or the table), then
  its ``insert`` rows. A RESTORE gives exactly the rows that differ between
  the snapshot before it and the version it restored (``diff_rows``): keys
  only before are ``delete``, keys only after ``insert``, keys whose row
  changed a pre- and a post-image; an unchanged row gives nothing.
* ``compact``: the records as written (``upsert``/``delete``) plus one
  ``truncate`` marker per INSERT OVERWRITE/TRUNCATE, with its ``_scope``; a
  RESTORE's difference as ``upsert`` (new or changed rows) and ``delete``.

Compaction and clustering commits yield no rows in either form.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ordo.consumer.errors import DataFileError
from ordo.kernel.objectstore import filesystem
from ordo.schemas.buckets import bucket_of_text
from ordo.schemas.dispatch import OperationTable
from ordo.schemas.models import parse_ddl, split_top_level
from ordo.schemas.operations import (
    OP_COLUMN,
    OP_DELETE,
    OP_UPSERT,
    ROW_ID_COLUMN,
    SEQ_COLUMN,
    Operation,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from ordo.consumer.catalog import Catalog
    from ordo.consumer.models import Commit, FileEntry
    from ordo.schemas import TableMetadata

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
SCOPE = "_scope"
CHANGE_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP, SCOPE)  # what the change feed adds to the rows
UPSERT, DELETE, TRUNCATE = OP_UPSERT, OP_DELETE, "truncate"
INSERT, PREIMAGE, POSTIMAGE = "insert", "update_preimage", "update_postimage"
DELTA_FORM, COMPACT_FORM = "delta", "compact"
FORMS = (DELTA_FORM, COMPACT_FORM)
_SEQ = "__ordo_eff_seq"
READ_THREADS = 4  # files of one merge group read at once


class ReadStats:
    """What this process's readers read from data files: files opened, rows materialized (after filters).

    ``READ_STATS`` is the process-wide instance; tests and benchmarks read it
    (what the change feed's work per commit is made of).
    """

    def __init__(self) -> None:
        self.files = 0
        self.rows = 0
        self._lock = threading.Lock()

    def add(self, files: int, rows: int) -> None:
        with self._lock:
            self.files += files
            self.rows += rows

    def reset(self) -> tuple[int, int]:
        """``(files, rows)`` so far, and start again from zero."""
        with self._lock:
            seen = (self.files, self.rows)
            self.files = self.rows = 0
        return seen


READ_STATS = ReadStats()
_POOL: tuple[int, Any] | None = None  # (pid that made it, ThreadPoolExecutor)
_POOL_LOCK = threading.Lock()


def _read_pool() -> Any:
    """This process's pool of ``READ_THREADS`` file readers, made on first use and kept (a new one in a forked
    child, whose copy has no threads): a pool per merge group spent ~17 % of the change topic publisher's time
    starting threads (bench/change_topic.py under cProfile)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != os.getpid():
            from concurrent.futures import ThreadPoolExecutor

            _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="ordo-read"))
        return _POOL[1]


@dataclass(frozen=True)
class FileRef:
    """One data file to read: where it is, the version that added it, its partition and the operation."""

    path: str
    added_version: int
    partition: Mapping[str, str]
    operation: str = ""
    min_key: str | None = None
    max_key: str | None = None
    bucket: int = 0
    size_bytes: int = 0  # what packing reads into tasks weighs (0: unknown)

    @classmethod
    def of(cls, entry: FileEntry) -> FileRef:
        return cls(
            entry.absolute_path,
            entry.seq,  # the records' sequence: added_version, or what a file a RESTORE re-added had
            dict(entry.partition),
            entry.operation,
            entry.min_key,
            entry.max_key,
            entry.bucket,
            entry.size_bytes,
        )


@dataclass(frozen=True)
class TableShape:
    """What a reader needs of the table: its Arrow schema (table columns), key and partition columns."""

    schema: Any  # pyarrow.Schema of the table columns
    primary_key: tuple[str, ...]
    partition_columns: tuple[str, ...]

    @classmethod
    def of(cls, metadata: TableMetadata, columns: Sequence[str] | None = None) -> TableShape:
        """The shape of a table from its metadata, without Spark (``columns``: only those, in table order)."""
        import pyarrow as pa

        fields = [
            pa.field(c.name, arrow_type(c.type), c.nullable)
            for c in parse_ddl(metadata.schema)
            if columns is None or c.name in columns
        ]
        return cls(pa.schema(fields), tuple(metadata.primary_key), tuple(metadata.partition_columns))

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)


def check_form(form: str) -> str:
    """``form`` lower-cased if it names a change feed form, else ``ValueError``."""
    value = str(form).lower()
    if value not in FORMS:
        raise ValueError(f"change feed form must be one of {list(FORMS)}, not {form!r}")
    return value


# --------------------------------------------------------------------------- types and files

_SIMPLE_TYPES = {
    "boolean": "bool_",
    "tinyint": "int8",
    "byte": "int8",
    "smallint": "int16",
    "short": "int16",
    "int": "int32",
    "integer": "int32",
    "bigint": "int64",
    "long": "int64",
    "float": "float32",
    "real": "float32",
    "double": "float64",
    "string": "string",
    "binary": "binary",
    "date": "date32",
}


def arrow_type(text: str) -> Any:
    """The Arrow type Spark gives a column of Spark type ``text`` (its ``simpleString``), without Spark.

    The same mapping as ``pyspark.sql.pandas.types.to_arrow_type`` (timestamps in microseconds, UTC unless
    ``timestamp_ntz``); ``ValueError`` for a type it does not know.
    """
    import pyarrow as pa

    value = " ".join(text.split()).lower()
    if value in _SIMPLE_TYPES:
        return getattr(pa, _SIMPLE_TYPES[value])()
    if value in ("timestamp", "timestamp_ltz"):
        return pa.timestamp("us", tz="UTC")
    if value == "timestamp_ntz":
        return pa.timestamp("us")
    if re.fullmatch(r"(var)?char\(\d+\)", value):
        return pa.string()
    found = re.fullmatch(r"dec(?:imal)?(?:\((\d+)\s*(?:,\s*(\d+))?\))?|numeric", value)
    if found is not None:
        return pa.decimal128(int(found.group(1) or 10), int(found.group(2) or 0))
    found = re.fullmatch(r"(array|map|struct)\s*<(.*)>", value, re.S)
    if found is not None:
        kind, inner = found.group(1), found.group(2)
        if kind == "array":
            return pa.list_(arrow_type(inner))
        if kind == "map":
            key, item = (p.strip() for p in split_top_level(inner))
            return pa.map_(arrow_type(key), arrow_type(item))
        fields = []
        for part in split_top_level(inner):
            name, sep, field_type = part.partition(":")
            if not sep:
                raise ValueError(f"cannot read the struct field {part!r} of type {text!r}")
            fields.append(pa.field(name.strip().strip("`"), arrow_type(field_type)))
        return pa.struct(fields)
    raise ValueError(f"no Arrow type for the Spark type {text!r}")


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _parquet(path: str, columns: Sequence[str], filters: Any = None) -> pa.Table:
    """The ``columns`` a data file has (of those asked for; ``filters`` pushed into the scan), on its filesystem;
    ``DataFileError`` when it cannot be read."""
    import pyarrow.parquet as pq

    fs, inner = filesystem(path)
    try:
        with fs.open_input_file(inner) as handle:
            parquet = pq.ParquetFile(handle)
            present = [c for c in columns if c in parquet.schema_arrow.names]
            if filters is None:
                return parquet.read(columns=present)
        return pq.read_table(inner, filesystem=fs, columns=present, filters=filters)
    except OSError as exc:
        raise DataFileError(f"cannot read data file {path}: {exc}") from exc


def _text(value: str) -> Any:
    """``value`` as a typed Arrow string scalar. A bare ``str`` in a compute call makes pyarrow infer its type,
    which tries (and, without python-dateutil, fails) an import each time: 0.1 ms a call, a tenth of the change
    feed's work per small commit."""
    import pyarrow as pa

    return pa.scalar(value, pa.string())


def _typed(column: Any, value: str, data_type: Any) -> Any:
    import pyarrow as pa

    try:
        return pa.array([value] * len(column), pa.string()).cast(data_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return column


def _key_filter(keys: Any, shape: TableShape) -> Any:
    """A Parquet scan filter keeping the rows whose key columns each hold one of ``keys``' values."""
    import pyarrow.compute as pc

    found = None
    for k in shape.primary_key:
        term = pc.field(k).isin(keys.column(k).unique())
        found = term if found is None else found & term
    return found


def read_file(ref: FileRef, shape: TableShape, keys: Any = None) -> pa.Table:
    """One data file as table columns + ``_ordo_op`` + effective sequence, cast to the table's types.

    ``keys`` (a table of primary-key columns) keeps only the records of those keys:
    the scan reads only those rows (row groups their statistics rule out are skipped).
    Partition columns a delete record left null are filled from the file's partition.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if keys is not None and keys.num_rows == 0:
        return _concat([], shape)
    raw = None
    wanted = [*shape.columns, OP_COLUMN, SEQ_COLUMN]
    if keys is not None:
        try:
            raw = _parquet(ref.path, wanted, filters=_key_filter(keys, shape))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            raw = None  # a key column the filter cannot compare as written: read the file, join below
    if raw is None:
        raw = _parquet(ref.path, wanted)
    n = raw.num_rows
    READ_STATS.add(1, n)
    if ROW_ID_COLUMN in shape.primary_key and (ROW_ID_COLUMN not in raw.column_names or raw[ROW_ID_COLUMN].null_count):
        # a keyless table's rows are told apart by their row ids: a file without them cannot be merged
        raise DataFileError(f"data file {ref.path} of a keyless table lacks row ids ({ROW_ID_COLUMN})")
    arrays, names = [], []
    for field in shape.schema:
        if field.name in raw.column_names:
            column = raw.column(field.name)
            if column.type != field.type:
                column = column.cast(field.type)
        else:
            column = pa.nulls(n, field.type)
        if field.name in shape.partition_columns and column.null_count and field.name in ref.partition:
            column = pc.coalesce(column, _typed(column, ref.partition[field.name], field.type))
        arrays.append(column)
        names.append(field.name)
    op = raw.column(OP_COLUMN) if OP_COLUMN in raw.column_names else pa.array([UPSERT] * n, pa.string())
    seq_source = raw.column(SEQ_COLUMN) if SEQ_COLUMN in raw.column_names else pa.nulls(n, pa.int64())
    seq = pc.coalesce(seq_source.cast(pa.int64()), pa.scalar(ref.added_version, pa.int64()))
    table = pa.table([*arrays, op.cast(pa.string()), seq], names=[*names, OP_COLUMN, _SEQ])
    if keys is not None and table.num_rows:
        table = table.join(keys, list(shape.primary_key), join_type="left semi")
    return table


def _scan(refs: Sequence[FileRef], shape: TableShape, keys: Any = None) -> tuple[pa.Table, Any] | None:
    """The records of local files of ONE partition in one multi-threaded dataset scan, and each row's index into
    ``refs``; None when the scan cannot read them as ``read_file`` would (the caller reads file by file).

    ``keys`` (a table of primary-key columns) pushes ``_key_filter`` into the scan: row groups whose statistics
    rule the keys out are skipped, and the rows kept are a superset of those keys' records (the caller joins)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    partition = refs[0].partition if refs else {}
    local = all(not (r.path.startswith("file:") or _SCHEME.match(r.path)) for r in refs)
    if not refs or not local or any(r.partition != partition for r in refs):
        return None
    fields = [*shape.schema, pa.field(OP_COLUMN, pa.string()), pa.field(SEQ_COLUMN, pa.int64())]
    schema = pa.schema([f.with_nullable(True) for f in fields])
    try:
        raw = ds.dataset([r.path for r in refs], format="parquet", schema=schema).to_table(
            columns=[*schema.names, "__filename"], filter=None if keys is None else _key_filter(keys, shape)
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError):
        return None
    if ROW_ID_COLUMN in shape.primary_key and raw.column(ROW_ID_COLUMN).null_count:
        return None  # a keyless table's file without row ids: ``read_file`` names it
    position = {r.path: i for i, r in enumerate(refs)}
    names = pc.dictionary_encode(raw.column("__filename")).combine_chunks()
    try:
        per_name = pa.array([position[name.as_py()] for name in names.dictionary], pa.int64())
    except KeyError:
        return None
    index = per_name.take(names.indices)
    READ_STATS.add(len(refs), raw.num_rows)
    versions = pa.array([r.added_version for r in refs], pa.int64())
    arrays = []
    for field in shape.schema:
        column = raw.column(field.name)
        if field.name in shape.partition_columns and column.null_count and field.name in partition:
            column = pc.coalesce(column, _typed(column, partition[field.name], field.type))
        arrays.append(column)
    op = pc.coalesce(raw.column(OP_COLUMN), _text(UPSERT))
    seq = pc.coalesce(raw.column(SEQ_COLUMN), versions.take(index))
    return pa.table([*arrays, op, seq], names=[*shape.columns, OP_COLUMN, _SEQ]), index


def read_files(refs: Sequence[FileRef], shape: TableShape, keys: Any = None) -> pa.Table:
    """The records of many files of ONE partition, as ``read_file`` gives each, in one multi-threaded scan; only
    those of ``keys`` when given.

    One pyarrow dataset scan instead of a Python call per file (a merge group
    after many small commits has hundreds): columns missing from a file read
    as null, narrower types are widened, and each row's file gives its
    effective sequence. A point read pushes its keys' filter into the same
    scan: a ``pq.read_table`` per file cost 0.9 ms a file against the scan's
    0.3. Anything the scan cannot do alike (a type it cannot cast or compare,
    a path it reports otherwise, files of several partitions) falls back to
    ``read_file`` per file, on threads.
    """
    if keys is not None and keys.num_rows == 0:
        return _concat([], shape)
    scanned = _scan(refs, shape, keys)
    if scanned is None:
        if keys is None:
            return _concat([read_file(r, shape) for r in refs], shape)
        return _concat(list(_read_pool().map(lambda r: read_file(r, shape, keys), refs)), shape)
    table = scanned[0]
    if keys is not None and table.num_rows:
        table = table.join(keys, list(shape.primary_key), join_type="left semi")
    return table


def read_each(refs: Sequence[FileRef], shape: TableShape) -> dict[str, pa.Table]:
    """Each file's records by its path, as ``read_file`` gives them, read in one scan per partition.

    What a task of the change feed reads first: its commits' own files,
    hundreds of small ones after many small commits, where a Python call per
    file cost twice the scan.
    """
    import pyarrow.compute as pc

    found: dict[str, pa.Table] = {}
    for group in by_partition(refs, shape.partition_columns).values():
        unique = list({r.path: r for r in group}.values())
        scanned = _scan(unique, shape) if len(unique) > 1 else None
        if scanned is None:
            found.update((r.path, read_file(r, shape)) for r in unique)
            continue
        table, index = scanned
        order = pc.sort_indices(index)  # stable: each file's rows in the order it holds them
        table, index = table.take(order), index.take(order)
        counts = dict.fromkeys(range(len(unique)), 0)
        for item in pc.value_counts(index).to_pylist():
            counts[item["values"]] = item["counts"]
        start = 0
        for i, ref in enumerate(unique):
            found[ref.path] = table.slice(start, counts[i])
            start += counts[i]
    return found


def _concat(tables: Sequence[pa.Table], shape: TableShape) -> pa.Table:
    import pyarrow as pa

    if not tables:
        fields = [*shape.schema, pa.field(OP_COLUMN, pa.string()), pa.field(_SEQ, pa.int64())]
        return pa.schema(fields).empty_table()
    return pa.concat_tables(tables)


def latest_records(records: pa.Table, shape: TableShape) -> pa.Table:
    """Per primary key the record with the highest effective sequence (an upsert wins a tie).

    Sorts only the key, sequence and op columns, takes each key's last record
    in that order (where the next sorted key differs; nulls are equal to
    nulls, NaN to NaN, as a group-by takes them) and gathers the winners'
    full rows once: 2.5x faster than sorting the whole table and grouping.
    (Until November 2026 a tie went to the delete here, unlike the shuffle plan
    and compaction; ties only come from a writer that broke the one record per
    key per commit rule.)
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    count = records.num_rows
    if count < 2:
        return records
    keys = list(shape.primary_key)
    order = pc.sort_indices(
        records.select([*keys, _SEQ, OP_COLUMN]),
        # last of a key: the highest sequence, and of a tie the upsert ("delete" < "upsert")
        sort_keys=[*[(k, "ascending") for k in keys], (_SEQ, "ascending"), (OP_COLUMN, "ascending")],
    )
    same: Any = None  # row i's key equals row i + 1's, in sorted order
    for key in keys:
        column = records.column(key).take(order)
        ahead, behind = column.slice(1), column.slice(0, count - 1)
        equal = pc.or_(
            pc.fill_null(pc.equal(ahead, behind), False),
            pc.and_(pc.is_null(ahead), pc.is_null(behind)),
        )
        if pa.types.is_floating(column.type):
            equal = pc.or_(equal, pc.fill_null(pc.and_(pc.is_nan(ahead), pc.is_nan(behind)), False))
        same = equal if same is None else pc.and_(same, equal)
    winner = pa.array([True], pa.bool_())  # the last record: a winner
    last = pa.concat_arrays([pc.invert(same).combine_chunks(), winner])
    return records.take(order.filter(last))


def live_rows(refs: Sequence[FileRef], shape: TableShape, keys: Any = None, merge: bool = True) -> pa.Table:
    """Merge-on-read of the files of ONE partition (or one bucket of it): its live rows (table columns),
    only ``keys`` when given."""
    import pyarrow.compute as pc

    if len(refs) > 2:  # many small files (merge-on-read records): one multi-threaded scan
        records = read_files(refs, shape, keys)
    else:
        records = _concat([read_file(r, shape, keys) for r in refs], shape)
    if merge:
        records = latest_records(records, shape)
    live = records.filter(pc.equal(records.column(OP_COLUMN), _text(UPSERT)))
    return live.select(shape.columns).cast(shape.schema)  # the schema's nullability too (NOT NULL columns)


def needs_merge(refs: Sequence[FileRef]) -> bool:
    """False when a partition's files hold each key at most once (one non-cluster file, or one MAJOR_COMPACT)."""
    if len(refs) == 1:
        return refs[0].operation != "CLUSTER"
    return not (all(r.operation == "MAJOR_COMPACT" for r in refs) and len({r.added_version for r in refs}) == 1)


def by_partition(refs: Sequence[FileRef], columns: Sequence[str]) -> dict[tuple[str, ...], list[FileRef]]:
    """Files grouped by their partition values (in ``columns`` order)."""
    groups: dict[tuple[str, ...], list[FileRef]] = {}
    for r in refs:
        groups.setdefault(tuple(r.partition.get(c, "") for c in columns), []).append(r)
    return groups


def by_bucket(refs: Sequence[FileRef], columns: Sequence[str]) -> dict[tuple[tuple[str, ...], int], list[FileRef]]:
    """Files grouped by (partition values in ``columns`` order, bucket): the unit of merge-on-read.

    Every record of a key is in its bucket's files (``producer.buckets``), so a
    group's live rows are a pure function of the group's files.
    """
    groups: dict[tuple[tuple[str, ...], int], list[FileRef]] = {}
    for r in refs:
        groups.setdefault((tuple(r.partition.get(c, "") for c in columns), r.bucket), []).append(r)
    return groups


def merge_groups(refs: Sequence[FileRef], columns: Sequence[str]) -> list[tuple[tuple[FileRef, ...], bool]]:
    """The (partition, bucket) groups of ``refs`` in a stable order, each with whether it needs a merge."""
    groups = by_bucket(refs, columns)
    return [(tuple(group), needs_merge(group)) for _, group in sorted(groups.items())]


# --------------------------------------------------------------------------- change feed


@dataclass(frozen=True)
class CommitChanges:
    """What computing one commit's change rows needs: the commit, its files, the previous files to look in."""

    id_version: int
    timestamp: datetime
    operation: str
    scope: tuple[Mapping[str, str], ...] | None  # partitions an overwrite/truncate cleared (None: the table)
    added: tuple[FileRef, ...]
    previous: tuple[FileRef, ...]  # live files before the commit that may hold a touched key


def _key_bounds(ref: FileRef | FileEntry, n_keys: int) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    if ref.min_key is None or ref.max_key is None:
        return None
    if n_keys == 1:
        return (ref.min_key,), (ref.max_key,)
    try:
        low, high = tuple(json.loads(ref.min_key)), tuple(json.loads(ref.max_key))
    except (ValueError, TypeError):
        return None
    return (low, high) if len(low) == len(high) == n_keys else None


def _converters(shape: TableShape) -> list[Any] | None:
    """How to compare each key column's stat text in value order; None when a type has no safe order here."""
    import pyarrow as pa

    found: list[Any] = []
    for k in shape.primary_key:
        t = shape.schema.field(k).type
        if pa.types.is_integer(t):
            found.append(int)
        elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_date(t):
            found.append(str)
        else:
            return None
    return found


_Bounds = tuple[tuple[Any, ...], tuple[Any, ...]] | None


class _KeyRanges:
    """Each file's key range (its ``min_key``/``max_key`` stats in value order), converted once per file.

    ``plan_commits`` asks for the same earlier files' ranges once per commit that touches their group:
    converting the stat text on every ask was most of planning a long change feed.
    """

    def __init__(self, shape: TableShape) -> None:
        self.converters = _converters(shape)
        self._cache: dict[tuple[str, str | None, str | None], _Bounds] = {}

    def bounds(self, ref: FileRef | FileEntry) -> _Bounds:
        """The file's per-column (low, high) key bounds; None when its stats cannot say."""
        key = (ref.path, ref.min_key, ref.max_key)
        try:
            return self._cache[key]
        except KeyError:
            pass
        found: _Bounds = None
        if self.converters is not None:
            text = _key_bounds(ref, len(self.converters))
            if text is not None:
                try:
                    low = tuple(c(v) for c, v in zip(self.converters, text[0], strict=True))
                    high = tuple(c(v) for c, v in zip(self.converters, text[1], strict=True))
                    found = (low, high)
                except (TypeError, ValueError):
                    found = None
        self._cache[key] = found
        return found

    @staticmethod
    def hull(added: Sequence[_Bounds]) -> _Bounds:
        """The per-column (lowest low, highest high) of ``added``'s bounds; None when one is unknown."""
        known = [b for b in added if b is not None]
        if not known or len(known) < len(added):
            return None
        try:
            low = tuple(min(column) for column in zip(*(b[0] for b in known), strict=True))
            high = tuple(max(column) for column in zip(*(b[1] for b in known), strict=True))
        except (TypeError, ValueError):
            return None
        return low, high

    def may_overlap(self, prev: FileRef | FileEntry, added: Sequence[_Bounds], hull: _Bounds = None) -> bool:
        """False only when file stats prove ``prev`` holds no key of the files whose ``bounds`` are ``added``.

        ``hull`` (``hull(added)``) settles most files with one comparison: a commit of new keys lies beyond
        every earlier file's range, and a long change feed asks this for each earlier file of each commit."""
        mine = self.bounds(prev)
        if mine is None:
            return True
        low, high = mine
        if hull is not None:
            try:
                if any(h < ol or oh < lo for lo, h, ol, oh in zip(low, high, hull[0], hull[1], strict=True)):
                    return False
            except TypeError:
                return True
        for theirs in added:
            if theirs is None:
                return True
            o_low, o_high = theirs
            try:
                # per-column bounds: disjoint in any one column means no common key
                if all(not (h < ol or oh < lo) for lo, h, ol, oh in zip(low, high, o_low, o_high, strict=True)):
                    return True
            except TypeError:
                return True
        return False


def key_lookup(shape: TableShape, values: Sequence[Any]) -> Any:
    """The table of one-column primary-key ``values`` (an equality or IN filter on the key), typed as the key
    column; None when the key is not one column of an integer or string type, or a value is not of it."""
    import pyarrow as pa

    ranges = _KeyRanges(shape)
    if ranges.converters is None or len(shape.primary_key) != 1 or not values:
        return None
    key = shape.primary_key[0]
    kind = shape.schema.field(key).type
    if not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return None
    wanted = int if pa.types.is_integer(kind) else str
    if any(type(v) is not wanted for v in values):  # bool is an int subclass: refused too
        return None
    try:
        return pa.table({key: pa.array(sorted(set(values)), kind)})
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return None


def files_with_keys(refs: Sequence[FileRef], shape: TableShape, keys: Any, buckets: int = 1) -> list[FileRef]:
    """Of ``refs``, the files that may hold one of ``keys`` (``key_lookup``'s table): in a bucket of theirs (a table
    of ``buckets`` > 1) and with a key range (``min_key``/``max_key``) that may hold one. Every record of a key is
    in such a file, so merging only those gives the keys' rows."""
    ranges = _KeyRanges(shape)
    values = keys.column(0).to_pylist()
    # A one-column integer or string key's canonical text is its decimal or itself (producer.buckets).
    wanted = {bucket_of_text(str(v), buckets) for v in values} if buckets > 1 else None
    found = []
    for ref in refs:
        if wanted is not None and ref.bucket not in wanted:
            continue
        bounds = ranges.bounds(ref)
        if bounds is None or any(bounds[0][0] <= v <= bounds[1][0] for v in values):
            found.append(ref)
    return found


def touched_groups(commit: Commit, partition_columns: Sequence[str]) -> list[tuple[dict[str, str], int | None]] | None:
    """The (partition, bucket) groups of the snapshot before ``commit`` its change rows read; None: the whole table.

    A logical write reads the groups it added files to (every record of a key
    is in its bucket's files); an INSERT OVERWRITE or TRUNCATE every bucket of
    the partitions it cleared (``bucket`` None), or the whole table; a RESTORE
    the whole table; a commit with no change rows none (its operation's
    ``ChangeReader.groups``).
    """
    return CHANGES[commit.operation].groups(commit, partition_columns)


def plan_commit(
    commit: Commit, previous_files: Sequence[FileEntry], shape: TableShape, ranges: _KeyRanges | None = None
) -> CommitChanges:
    """The files one commit's change rows need: its own, and the previous snapshot's in the touched scope.

    ``previous_files`` may be the whole previous snapshot or only the touched
    groups' files (``plan_commits``); the result is the same. ``ranges``: the
    key ranges already converted (``plan_commits`` shares one over its commits).
    """
    return CHANGES[commit.operation].plan(commit, previous_files, shape, ranges)


def _scope_of(commit: Commit, partition_columns: Sequence[str]) -> tuple[Mapping[str, str], ...] | None:
    if commit.partitions is None or not partition_columns:
        return None
    return tuple(dict(p) for p in commit.partitions)


def _added_groups(commit: Commit, partition_columns: Sequence[str]) -> list[tuple[dict[str, str], int | None]]:
    """The (partition, bucket) groups of the files ``commit`` added whose records are its changes, sorted."""
    seen: dict[tuple[tuple[str, ...], int], tuple[dict[str, str], int | None]] = {}
    for f in commit.added_files:
        if f.data_change:
            key = (tuple(f.partition.get(c, "") for c in partition_columns), f.bucket)
            seen.setdefault(key, (dict(f.partition), f.bucket))
    return [seen[k] for k in sorted(seen)]


class ChangeReader:
    """How the commits of an operation give change rows: what they read, and the rows (``CHANGES``).

    This base gives none (a table's creation, a metadata change, a rewrite):
    it reads nothing and yields an empty table.
    """

    whole_snapshots = False  # its rows compare the snapshots before and after it (not read from its own files)

    def groups(
        self, commit: Commit, partition_columns: Sequence[str]
    ) -> list[tuple[dict[str, str], int | None]] | None:
        """The groups of the previous snapshot its rows read (``touched_groups``)."""
        return []

    def plan(
        self, commit: Commit, previous: Sequence[FileEntry], shape: TableShape, ranges: _KeyRanges | None
    ) -> CommitChanges:
        """Its files and the previous files its rows read (``plan_commit``)."""
        scope = _scope_of(commit, shape.partition_columns)
        return CommitChanges(commit.id_version, commit.timestamp, commit.operation.value, scope, (), ())

    def reads_previous(self, compact: bool) -> bool:
        """Whether its rows in a form read the previous snapshot (the compact form gives records as written)."""
        return not compact

    def rows(self, plan: CommitChanges, shape: TableShape, form: str, own: Callable[[FileRef], pa.Table]) -> pa.Table:
        """Its change rows in ``form``; ``own`` reads one of its files' records."""
        return _stack([], shape, form)


class KeyedChanges(ChangeReader):
    """Merge-on-read writes (INSERT INTO, UPDATE, DELETE): per key of its records, an insert, a pre- and
    post-image, or a delete, against the key's row in the groups it wrote to."""

    def groups(
        self, commit: Commit, partition_columns: Sequence[str]
    ) -> list[tuple[dict[str, str], int | None]] | None:
        return _added_groups(commit, partition_columns)

    def plan(
        self, commit: Commit, previous: Sequence[FileEntry], shape: TableShape, ranges: _KeyRanges | None
    ) -> CommitChanges:
        partition_columns = shape.partition_columns
        added = tuple(FileRef.of(f) for f in commit.added_files if f.data_change)
        ranges = ranges or _KeyRanges(shape)
        touched = {g: [ranges.bounds(r) for r in refs] for g, refs in by_bucket(added, partition_columns).items()}
        hulls = {g: ranges.hull(bounds) for g, bounds in touched.items()}
        prev = []
        for f in previous:
            group = (tuple(f.partition.get(c, "") for c in partition_columns), f.bucket)
            if group in touched and ranges.may_overlap(f, touched[group], hulls[group]):
                prev.append(FileRef.of(f))
        scope = _scope_of(commit, partition_columns)
        return CommitChanges(commit.id_version, commit.timestamp, commit.operation.value, scope, added, tuple(prev))

    def rows(self, plan: CommitChanges, shape: TableShape, form: str, own: Callable[[FileRef], pa.Table]) -> pa.Table:
        import pyarrow.compute as pc

        version, stamp, columns = plan.id_version, plan.timestamp, shape.columns
        outputs: list[pa.Table] = []
        if form == COMPACT_FORM:
            return _stack(_compact_records(plan, shape, own), shape, form)
        new_groups = by_bucket(plan.added, shape.partition_columns)  # a key's records are in its (partition, bucket)
        old_groups = by_bucket(plan.previous, shape.partition_columns)
        keys = list(shape.primary_key)
        # The groups with no earlier file that may hold their keys (a commit of new keys: all of them) give their
        # upserts as inserts, and their deletes nothing: one merge for all of them, by partition and key.
        fresh = [r for group, refs in new_groups.items() if group not in old_groups for r in refs]
        if fresh:
            latest = latest_records(_concat([own(r) for r in fresh], shape), _by_partition_and_key(shape))
            upserts = latest.filter(pc.equal(latest.column(OP_COLUMN), _text(UPSERT))).select(columns)
            outputs.append(_with_meta(upserts, INSERT, version, stamp))
        for group, refs in new_groups.items():
            if group not in old_groups:
                continue
            latest = latest_records(_concat([own(r) for r in refs], shape), shape)
            key_table = latest.select(keys)
            before = live_rows(old_groups[group], shape, keys=key_table)
            upserts = latest.filter(pc.equal(latest.column(OP_COLUMN), _text(UPSERT))).select(columns)
            deletes = latest.filter(pc.equal(latest.column(OP_COLUMN), _text(DELETE))).select(keys)
            if before.num_rows == 0:
                outputs.append(_with_meta(upserts, INSERT, version, stamp))
                continue
            existed = before.select(keys)
            inserted = _semi(upserts, existed, keys, anti=True)
            updated = _semi(upserts, existed, keys)
            pre = _semi(before, updated.select(keys), keys)
            gone = _semi(before, deletes, keys)
            outputs.append(_with_meta(inserted.select(columns), INSERT, version, stamp))
            outputs.append(_with_meta(pre.select(columns), PREIMAGE, version, stamp))
            outputs.append(_with_meta(updated.select(columns), POSTIMAGE, version, stamp))
            outputs.append(_with_meta(gone.select(columns), DELETE, version, stamp))
        return _stack(outputs, shape, form)


def _by_partition_and_key(shape: TableShape) -> TableShape:
    """``shape`` keyed by its partition columns and its primary key: the records of several partitions merged at
    once, each key within its own partition (as a merge group of one partition takes them)."""
    extra = tuple(c for c in shape.partition_columns if c not in shape.primary_key)
    if not extra:
        return shape
    return TableShape(shape.schema, (*extra, *shape.primary_key), shape.partition_columns)


class ScopeChanges(ChangeReader):
    """Overwrites (INSERT OVERWRITE, TRUNCATE): every row its scope held is deleted, every row it wrote inserted
    (compact form: a ``truncate`` marker with its ``_scope``, then its records)."""

    def groups(
        self, commit: Commit, partition_columns: Sequence[str]
    ) -> list[tuple[dict[str, str], int | None]] | None:
        if commit.partitions is None or not partition_columns:
            return None
        return [(dict(p), None) for p in commit.partitions]

    def plan(
        self, commit: Commit, previous: Sequence[FileEntry], shape: TableShape, ranges: _KeyRanges | None
    ) -> CommitChanges:
        partition_columns = shape.partition_columns
        added = tuple(FileRef.of(f) for f in commit.added_files if f.data_change)
        scope = _scope_of(commit, partition_columns)
        prev = [FileRef.of(f) for f in previous]
        if scope is not None:
            wanted = {tuple(p.get(c, "") for c in partition_columns) for p in scope}
            prev = [r for r in prev if tuple(r.partition.get(c, "") for c in partition_columns) in wanted]
        return CommitChanges(commit.id_version, commit.timestamp, commit.operation.value, scope, added, tuple(prev))

    def rows(self, plan: CommitChanges, shape: TableShape, form: str, own: Callable[[FileRef], pa.Table]) -> pa.Table:
        import pyarrow as pa

        version, stamp = plan.id_version, plan.timestamp
        outputs: list[pa.Table] = []
        if form == COMPACT_FORM:
            scope = None
            if plan.scope is not None:
                scope = json.dumps([dict(p) for p in plan.scope], sort_keys=True, separators=(",", ":"))
            marker = pa.table([pa.nulls(1, f.type) for f in shape.schema], schema=shape.schema)
            marker = _with_meta(marker, TRUNCATE, version, stamp)
            outputs.append(marker.append_column(SCOPE, pa.array([scope], pa.string())))
            return _stack([*outputs, *_compact_records(plan, shape, own)], shape, form)
        for refs in by_bucket(plan.previous, shape.partition_columns).values():
            removed = live_rows(refs, shape)
            outputs.append(_with_meta(removed, DELETE, version, stamp))
        for refs in by_bucket(plan.added, shape.partition_columns).values():
            rows = live_rows(refs, shape, merge=len(refs) > 1)
            outputs.append(_with_meta(rows, INSERT, version, stamp))
        return _stack(outputs, shape, form)


class DiffChanges(ChangeReader):
    """RESTORE: the rows that differ between the snapshot before it and the one after (``diff_rows``)."""

    whole_snapshots = True

    def groups(
        self, commit: Commit, partition_columns: Sequence[str]
    ) -> list[tuple[dict[str, str], int | None]] | None:
        return None  # the whole table before and after

    def plan(
        self, commit: Commit, previous: Sequence[FileEntry], shape: TableShape, ranges: _KeyRanges | None
    ) -> CommitChanges:
        gone = set(commit.removed_files)  # ``added``: the whole snapshot after it
        kept = [FileRef.of(f) for f in previous if f.path not in gone]
        after = (*kept, *(FileRef.of(f) for f in commit.added_files))
        before = tuple(FileRef.of(f) for f in previous)
        return CommitChanges(commit.id_version, commit.timestamp, commit.operation.value, None, after, before)

    def reads_previous(self, compact: bool) -> bool:
        return True

    def rows(self, plan: CommitChanges, shape: TableShape, form: str, own: Callable[[FileRef], pa.Table]) -> pa.Table:
        import pyarrow as pa

        version, stamp = plan.id_version, plan.timestamp
        outputs: list[pa.Table] = []
        inserted, deleted, pre, post = diff_rows(plan.previous, plan.added, shape)
        if form == COMPACT_FORM:
            for rows, kind in ((deleted, DELETE), (inserted, UPSERT), (post, UPSERT)):
                rows = _with_meta(rows, kind, version, stamp)
                outputs.append(rows.append_column(SCOPE, pa.nulls(rows.num_rows, pa.string())))
        else:
            for rows, kind in ((deleted, DELETE), (inserted, INSERT), (pre, PREIMAGE), (post, POSTIMAGE)):
                outputs.append(_with_meta(rows, kind, version, stamp))
        return _stack(outputs, shape, form)


def _compact_records(plan: CommitChanges, shape: TableShape, own: Callable[[FileRef], pa.Table]) -> list[pa.Table]:
    """The compact form's rows of a commit's own files: its records as written (``upsert``/``delete``)."""
    import pyarrow as pa

    outputs = []
    for ref in plan.added:
        written = own(ref)
        rows = _with_meta(written.select(shape.columns), written.column(OP_COLUMN), plan.id_version, plan.timestamp)
        outputs.append(rows.append_column(SCOPE, pa.nulls(rows.num_rows, pa.string())))
    return outputs


# Each operation's change rows (``schemas.dispatch``; an operation that ``extends`` another reads as it does).
CHANGES: OperationTable[ChangeReader] = OperationTable("the change-row reader", "ordo.consumer.arrow")
CHANGES.register(Operation.CREATE_TABLE, Operation.ALTER_TABLE)(ChangeReader())
CHANGES.register(Operation.MINOR_COMPACT, Operation.MAJOR_COMPACT, Operation.CLUSTER)(ChangeReader())
CHANGES.register(Operation.INSERT_INTO, Operation.UPDATE, Operation.DELETE)(KeyedChanges())
CHANGES.register(Operation.INSERT_OVERWRITE, Operation.TRUNCATE)(ScopeChanges())
CHANGES.register(Operation.RESTORE)(DiffChanges())


_GroupKey = tuple[tuple[str, ...], int]


class _LiveFiles:
    """The live files of some (partition, bucket) groups, walked forward one commit at a time.

    ``plan_commits`` asks the catalog once for the groups its commits touch at
    the version before the first of them, then applies every commit in between
    (compactions included) instead of asking for a snapshot per commit: a feed
    of 100 small commits asked 100 times, once per bucket each.
    """

    def __init__(self, files: Sequence[FileEntry], partition_columns: Sequence[str], groups: set[Any] | None) -> None:
        self.columns = tuple(partition_columns)
        self.groups = groups  # the group keys (or partition keys, ``(values, None)``) kept; None: every group
        self.files: dict[_GroupKey, dict[str, FileEntry]] = {}
        for f in files:
            self._add(f)

    def _key(self, f: FileEntry) -> _GroupKey:
        return (tuple(f.partition.get(c, "") for c in self.columns), f.bucket)

    def _kept(self, key: _GroupKey) -> bool:
        return self.groups is None or key in self.groups or (key[0], None) in self.groups

    def _add(self, f: FileEntry) -> None:
        key = self._key(f)
        if self._kept(key):
            self.files.setdefault(key, {})[f.path] = f

    def apply(self, commit: Commit) -> None:
        """The files after ``commit``: its removed files gone, its added files live."""
        gone = set(commit.removed_files)
        if gone:
            for group in self.files.values():
                for path in gone.intersection(group):
                    del group[path]
        for f in commit.added_files:
            self._add(f)

    def of(self, groups: list[tuple[dict[str, str], int | None]] | None) -> list[FileEntry]:
        """The live files of ``groups`` (``touched_groups``' form; None: every group kept)."""
        if groups is None:
            return [f for key in sorted(self.files) for f in self.files[key].values()]
        found: list[FileEntry] = []
        for partition, bucket in groups:
            values = tuple(partition.get(c, "") for c in self.columns)
            if bucket is None:
                for key in sorted(k for k in self.files if k[0] == values):
                    found.extend(self.files[key].values())
            else:
                found.extend(self.files.get((values, bucket), {}).values())
        return found


def _group_keys(groups: list[tuple[dict[str, str], int | None]], columns: Sequence[str]) -> set[Any]:
    return {(tuple(p.get(c, "") for c in columns), b) for p, b in groups}


def plan_commits(
    catalog: Catalog, table: str, commits: Sequence[Commit], shape: TableShape, form: str = DELTA_FORM
) -> list[CommitChanges]:
    """``plan_commit`` of each commit, with only its touched groups' files at the previous version.

    One commit: the catalog's snapshot of its touched groups at the version
    before it. Several: one snapshot of every group any of them touches, at the
    version before the first, walked forward through the commits in between
    (``Catalog.commits`` with the rewrites): the same files as a snapshot per
    commit, for two catalog queries. The compact form needs no previous files,
    but for a commit whose rows are a difference (a RESTORE).
    """
    compact = check_form(form) == COMPACT_FORM
    columns = shape.partition_columns
    wanted: dict[int, list[tuple[dict[str, str], int | None]] | None] = {}  # per ID version, the groups it reads
    for commit in commits:
        if not CHANGES[commit.operation].reads_previous(compact):
            continue
        groups = touched_groups(commit, columns)
        if commit.id_version > 0 and groups != []:
            wanted[commit.id_version] = groups
    ranges = _KeyRanges(shape)
    if len(wanted) <= 1:
        plans = []
        for commit in commits:
            previous: Sequence[FileEntry] = ()
            if commit.id_version in wanted:
                groups = wanted[commit.id_version]
                previous = catalog.snapshot(table, version=commit.id_version - 1, groups=groups).files
            plans.append(plan_commit(commit, previous, shape, ranges))
        return plans
    first, last = min(wanted), max(wanted)
    every: list[tuple[dict[str, str], int | None]] | None = []
    for groups in wanted.values():
        if groups is None or every is None:
            every = None
        else:
            every += groups
    keys: set[Any] | None = None
    if every is not None:
        unique = {json.dumps([sorted(p.items()), b]): (p, b) for p, b in every}
        every = [unique[k] for k in sorted(unique)]
        keys = _group_keys(every, columns)
    live = _LiveFiles(catalog.snapshot(table, version=first - 1, groups=every).files, columns, keys)
    between = {c.id_version: c for c in catalog.commits(table, first, last - 1, include_rewrites=True)}
    previous_of: dict[int, list[FileEntry]] = {}
    for version in range(first, last + 1):
        if version in wanted:
            previous_of[version] = live.of(wanted[version])
        if version < last:
            step = between.get(version)
            if step is not None:
                live.apply(step)
    return [plan_commit(c, previous_of.get(c.id_version, ()), shape, ranges) for c in commits]


# A task reads about this many files at most (a commit or group with more: a task of its own). A Python task
# costs Spark 40-80 ms beside its work on this project's 2-core benchmark machine (start, command, Arrow stream:
# docs/benchmarks.md, "What a Python task costs"), and a small file about 0.3 ms to read: at 128 files a task
# cost more than its reading.
TASK_FILES = 512
TASK_BYTES = 128 * 1024 * 1024  # and about this many bytes


def task_change_rows(plans: Sequence[CommitChanges], shape: TableShape, form: str = DELTA_FORM) -> Iterator[pa.Table]:
    """``change_rows`` of each of a task's commits, in order, their own files read first in one scan per partition
    (``read_each``; a RESTORE's are whole snapshots, read by ``diff_rows``)."""
    own = [r for p in plans if not CHANGES[Operation(p.operation)].whole_snapshots for r in p.added]
    records = read_each(own, shape) if len(own) > 1 else None
    for plan in plans:
        yield change_rows(plan, shape, form, records)


def plan_files(plan: CommitChanges) -> tuple[int, int]:
    """``(files, bytes)`` computing ``plan``'s change rows reads (its own files and the previous ones it looks in)."""
    refs = (*plan.added, *plan.previous)
    return len(refs), sum(r.size_bytes for r in refs)


def _pack(items: Sequence[Any], weights: Sequence[tuple[int, int]], task_files: int) -> list[tuple[Any, ...]]:
    """Consecutive ``items`` packed into tasks of at most ``task_files`` files and ``TASK_BYTES`` bytes
    (``weights``: each item's files and bytes; an item larger than that is a task of its own), as evenly as that
    many tasks allow. Deterministic: the same items always give the same tasks, in their order."""
    tasks = files = size = 0
    for n, b in weights:  # how many tasks the limits need, filled greedily
        if tasks == 0 or files + n > task_files or size + b > TASK_BYTES:
            tasks, files, size = tasks + 1, 0, 0
        files, size = files + n, size + b
    if tasks <= 1:
        return [tuple(items)] if items else []
    # that many tasks, cut where the running work (files, bytes as files' worth) crosses each task's even share
    work = [n + b / (TASK_BYTES / task_files) for n, b in weights]
    share = sum(work) / tasks
    packed: list[tuple[Any, ...]] = []
    current: list[Any] = []
    done, files, size = 0.0, 0, 0
    for item, w, (n, b) in zip(items, work, weights, strict=True):
        even = done + w / 2 > share * (len(packed) + 1) and len(packed) < tasks - 1
        if current and (even or files + n > task_files or size + b > TASK_BYTES):
            packed.append(tuple(current))
            current, files, size = [], 0, 0
        current.append(item)
        done, files, size = done + w, files + n, size + b
    packed.append(tuple(current))
    return packed


def pack_commits(plans: Sequence[CommitChanges], task_files: int = TASK_FILES) -> list[tuple[CommitChanges, ...]]:
    """Consecutive planned commits packed into Spark tasks (``_pack``: about ``task_files`` files or
    ``TASK_BYTES`` bytes read each).

    A task per commit cost a Python task per commit (its scheduling, its Arrow
    stream, its share of the planner's output): the change feed of 100 small
    commits spent more there than in reading them.
    """
    return _pack(plans, [plan_files(p) for p in plans], task_files)


def pack_groups(
    groups: Sequence[tuple[tuple[FileRef, ...], bool]], task_files: int = TASK_FILES
) -> list[tuple[tuple[tuple[FileRef, ...], bool], ...]]:
    """``merge_groups``' (partition, bucket) groups packed into Spark tasks like ``pack_commits``' commits: each
    group is still merged alone, and a table of many small groups is not a Python task per group."""
    return _pack(groups, [(len(refs), sum(r.size_bytes for r in refs)) for refs, _ in groups], task_files)


def _with_meta(rows: pa.Table, change: str | Any, version: int, timestamp: datetime) -> pa.Table:
    import pyarrow as pa

    n = rows.num_rows
    kinds = change if not isinstance(change, str) else pa.array([change] * n, pa.string())
    rows = rows.append_column(CHANGE_TYPE, kinds)
    rows = rows.append_column(COMMIT_VERSION, pa.array([version] * n, pa.int64()))
    stamp = pa.array([timestamp] * n, pa.timestamp("us", tz="UTC"))
    return rows.append_column(COMMIT_TIMESTAMP, stamp)


def change_rows(
    plan: CommitChanges, shape: TableShape, form: str = DELTA_FORM, records: Mapping[str, pa.Table] | None = None
) -> pa.Table:
    """The change rows of one commit (table columns + ``_change_type``, ``_commit_version``, ``_commit_timestamp``;
    the compact form adds ``_scope``): its operation's ``ChangeReader.rows``. ``records``: its added files'
    records already read (``read_each``)."""

    def own(ref: FileRef) -> pa.Table:
        found = None if records is None else records.get(ref.path)
        return read_file(ref, shape) if found is None else found

    return CHANGES[Operation(plan.operation)].rows(plan, shape, check_form(form), own)


def _semi(table: pa.Table, other: pa.Table, keys: list[str], anti: bool = False) -> pa.Table:
    """``table``'s rows whose key is (``anti``: is not) among ``other``'s: a left semi (anti) join. One key column of
    one type is a set lookup (a null key matches nothing, as in the join): an Acero join costs ~1 ms to set up,
    and a small commit's change rows made five per group."""
    import pyarrow.compute as pc

    if len(keys) != 1 or table.schema.field(keys[0]).type != other.schema.field(keys[0]).type:
        return table.join(other, keys, join_type="left anti" if anti else "left semi")
    found = pc.is_in(table.column(keys[0]), value_set=other.column(keys[0]).combine_chunks(), skip_nulls=True)
    return table.filter(pc.invert(found) if anti else found)


def _same_rows(a: pa.Table, b: pa.Table) -> Any:
    """Per row, True where ``a`` and ``b`` (same length, same columns) hold equal values; NULL equals NULL."""
    import pyarrow as pa
    import pyarrow.compute as pc

    same: Any = pa.array([True] * a.num_rows, pa.bool_())
    for name in a.column_names:
        x, y = a.column(name).combine_chunks(), b.column(name).combine_chunks()
        equal = pc.or_(pc.fill_null(pc.equal(x, y), False), pc.and_(pc.is_null(x), pc.is_null(y)))
        if pa.types.is_floating(x.type):
            equal = pc.or_(equal, pc.fill_null(pc.and_(pc.is_nan(x), pc.is_nan(y)), False))
        same = pc.and_(same, equal)
    return same


def diff_rows(
    before: Sequence[FileRef], after: Sequence[FileRef], shape: TableShape
) -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
    """The live rows that differ between two snapshots' files: (inserted, deleted, pre-images, post-images).

    Merged per (partition, bucket), where every record of a key lives; per
    primary key a row only after is inserted, only before deleted, and one
    whose values changed gives its row before (pre) and after (post). Equal
    rows give nothing: the change feed of a RESTORE is the exact difference.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = list(shape.primary_key)
    order = [(k, "ascending") for k in keys]
    parts = shape.partition_columns
    old_groups, new_groups = by_bucket(before, parts), by_bucket(after, parts)
    found: list[list[pa.Table]] = [[], [], [], []]
    empty = shape.schema.empty_table()
    for group in sorted(set(old_groups) | set(new_groups)):
        old_refs, new_refs = old_groups.get(group, []), new_groups.get(group, [])
        if {r.path for r in old_refs} == {r.path for r in new_refs}:
            continue  # the same files: the same rows
        old = live_rows(old_refs, shape) if old_refs else empty
        new = live_rows(new_refs, shape) if new_refs else empty
        found[0].append(new.join(old.select(keys), keys, join_type="left anti").select(shape.columns))
        found[1].append(old.join(new.select(keys), keys, join_type="left anti").select(shape.columns))
        common_old = old.join(new.select(keys), keys, join_type="left semi").sort_by(order).select(shape.columns)
        common_new = new.join(old.select(keys), keys, join_type="left semi").sort_by(order).select(shape.columns)
        changed = pc.invert(_same_rows(common_old, common_new))
        found[2].append(common_old.filter(changed))
        found[3].append(common_new.filter(changed))
    tables = [pa.concat_tables(t).cast(shape.schema) if t else empty for t in found]
    return tables[0], tables[1], tables[2], tables[3]


def snapshot_rows(
    refs: Sequence[FileRef],
    shape: TableShape,
    version: int,
    timestamp: datetime,
    form: str = DELTA_FORM,
    merge: bool = True,
) -> pa.Table:
    """The live rows of ``refs`` (one merge group of a snapshot) as change rows: ``insert`` (``upsert`` in the compact
    form) at ``version``, as a change-feed stream with no starting option begins (Delta's initial snapshot)."""
    import pyarrow as pa

    form = check_form(form)
    rows = live_rows(refs, shape, merge=merge).select(shape.columns)
    rows = _with_meta(rows, INSERT if form == DELTA_FORM else UPSERT, version, timestamp)
    if form == COMPACT_FORM:
        rows = rows.append_column(SCOPE, pa.nulls(rows.num_rows, pa.string()))
    return _stack([rows], shape, form)


def change_schema(shape: TableShape, form: str = DELTA_FORM) -> pa.Schema:
    """The Arrow schema of change rows in ``form``."""
    import pyarrow as pa

    fields = [*shape.schema]
    fields += [
        pa.field(CHANGE_TYPE, pa.string()),
        pa.field(COMMIT_VERSION, pa.int64()),
        pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC")),
    ]
    if check_form(form) == COMPACT_FORM:
        fields.append(pa.field(SCOPE, pa.string()))
    return pa.schema(fields)


def _stack(outputs: Sequence[pa.Table], shape: TableShape, form: str) -> pa.Table:
    import pyarrow as pa

    schema = change_schema(shape, form)
    tables = [t.cast(schema) for t in outputs if t.num_rows]
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)


__all__ = [
    "CHANGE_COLUMNS",
    "CHANGE_TYPE",
    "COMMIT_TIMESTAMP",
    "COMMIT_VERSION",
    "COMPACT_FORM",
    "DELTA_FORM",
    "READ_STATS",
    "CommitChanges",
    "FileRef",
    "ReadStats",
    "TableShape",
    "by_bucket",
    "by_partition",
    "change_rows",
    "change_schema",
    "check_form",
    "diff_rows",
    "files_with_keys",
    "key_lookup",
    "live_rows",
    "merge_groups",
    "needs_merge",
    "pack_commits",
    "pack_groups",
    "plan_commit",
    "plan_commits",
    "read_each",
    "snapshot_rows",
    "task_change_rows",
    "touched_groups",
]
