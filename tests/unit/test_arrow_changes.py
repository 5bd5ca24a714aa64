"""The Spark-free pieces of ``format("ordo")``: change rows in both forms, pre-image pruning, option parsing.

Data files are real Parquet written here with pyarrow in the writer's format
(table columns + ``_ordo_op`` + ``_ordo_seq``); no Spark, no broker.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ordo.consumer.arrow import CommitChanges, FileRef, TableShape, change_rows, live_rows, plan_commit, snapshot_rows
from ordo.consumer.models import Commit, FileEntry
from ordo.schemas import Operation, Rebase

SHAPE = TableShape(pa.schema([("id", pa.int64()), ("v", pa.string()), ("dt", pa.string())]), ("id",), ("dt",))
STAMP = datetime(2024, 5, 1, tzinfo=UTC)


def write(tmp: Path, name: str, records: list[tuple[Any, ...]], seq: list[int | None] | None = None) -> str:
    """A data file: rows ``(id, v, dt, op)``."""
    ids, vs, dts, ops = (list(c) for c in zip(*records, strict=True)) if records else ([], [], [], [])
    table = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": pa.array(vs, pa.string()),
            "dt": pa.array(dts, pa.string()),
            "_ordo_op": pa.array(ops, pa.string()),
            "_ordo_seq": pa.array(seq or [None] * len(ids), pa.int64()),
        }
    )
    path = tmp / name
    pq.write_table(table, path)
    return str(path)


def ref(path: str, version: int, dt: str, low: int | None = None, high: int | None = None) -> FileRef:
    return FileRef(
        path, version, {"dt": dt}, "INSERT_INTO", None if low is None else str(low), None if high is None else str(high)
    )


def kinds(table: pa.Table) -> list[tuple[Any, ...]]:
    cols = ["_change_type", "id", "v", "dt"]
    return sorted(tuple(r[c] for c in cols) for r in table.select(cols).to_pylist())


def test_upserts_and_deletes_give_delta_change_types_with_full_rows(tmp_path: Path) -> None:
    before = write(
        tmp_path, "a.parquet", [(1, "a1", "x", "upsert"), (2, "a2", "x", "upsert"), (3, "a3", "x", "upsert")]
    )
    newer = write(tmp_path, "b.parquet", [(1, "b1", "x", "upsert")])  # v2 replaced key 1
    commit = write(
        tmp_path, "c.parquet", [(1, "c1", "x", "upsert"), (9, "c9", "x", "upsert"), (3, None, "x", "delete")]
    )
    plan = CommitChanges(3, STAMP, "UPDATE", None, (ref(commit, 3, "x"),), (ref(before, 1, "x"), ref(newer, 2, "x")))
    rows = change_rows(plan, SHAPE)
    assert kinds(rows) == [
        ("delete", 3, "a3", "x"),  # the deleted values, not the delete record's nulls
        ("insert", 9, "c9", "x"),
        ("update_postimage", 1, "c1", "x"),
        ("update_preimage", 1, "b1", "x"),  # the row at v2, the snapshot before the commit
    ]
    assert set(rows.column("_commit_version").to_pylist()) == {3}


def test_overwrite_deletes_what_it_removed_then_inserts(tmp_path: Path) -> None:
    before = write(tmp_path, "a.parquet", [(1, "a1", "x", "upsert"), (2, "a2", "x", "upsert")])
    gone = write(tmp_path, "d.parquet", [(2, None, "x", "delete")], seq=[None])
    new = write(tmp_path, "n.parquet", [(5, "n5", "x", "upsert")])
    plan = CommitChanges(
        4, STAMP, "INSERT_OVERWRITE", ({"dt": "x"},), (ref(new, 4, "x"),), (ref(before, 1, "x"), ref(gone, 2, "x"))
    )
    assert kinds(change_rows(plan, SHAPE)) == [("delete", 1, "a1", "x"), ("insert", 5, "n5", "x")]
    compact = change_rows(plan, SHAPE, form="compact")
    assert sorted(compact.column("_change_type").to_pylist()) == ["truncate", "upsert"]
    assert [s for s in compact.column("_scope").to_pylist() if s] == ['[{"dt":"x"}]']


def test_merge_on_read_keeps_the_newest_record_and_hides_deletes(tmp_path: Path) -> None:
    a = write(tmp_path, "a.parquet", [(1, "a1", "x", "upsert"), (2, "a2", "x", "upsert")])
    b = write(tmp_path, "b.parquet", [(1, None, "x", "delete"), (2, "b2", "x", "upsert")])
    rows = live_rows([ref(a, 1, "x"), ref(b, 2, "x")], SHAPE)
    assert rows.to_pylist() == [{"id": 2, "v": "b2", "dt": "x"}]
    # a compaction output keeps the original sequence in _ordo_seq: an older record stays older
    c = write(tmp_path, "c.parquet", [(2, "a2-old", "x", "upsert")], seq=[1])
    rows = live_rows([ref(b, 2, "x"), ref(c, 5, "x")], SHAPE)
    assert rows.to_pylist() == [{"id": 2, "v": "b2", "dt": "x"}]


def test_a_snapshot_as_change_rows_is_its_live_rows_as_inserts(tmp_path: Path) -> None:
    # A change-feed stream with no starting option begins with this (Delta's initial snapshot).
    a = write(tmp_path, "a.parquet", [(1, "a1", "x", "upsert"), (2, "a2", "x", "upsert"), (3, "a3", "x", "upsert")])
    b = write(tmp_path, "b.parquet", [(1, None, "x", "delete"), (2, "b2", "x", "upsert")])
    refs = [ref(a, 1, "x"), ref(b, 2, "x")]
    rows = snapshot_rows(refs, SHAPE, 2, STAMP)
    assert kinds(rows) == [("insert", 2, "b2", "x"), ("insert", 3, "a3", "x")]
    assert set(rows.column("_commit_version").to_pylist()) == {2}
    assert set(rows.column("_commit_timestamp").to_pylist()) == {STAMP}
    compact = snapshot_rows(refs, SHAPE, 2, STAMP, form="compact")
    assert kinds(compact) == [("upsert", 2, "b2", "x"), ("upsert", 3, "a3", "x")]
    assert compact.column("_scope").null_count == 2


def entry(path: str, version: int, dt: str, low: int, high: int) -> FileEntry:
    return FileEntry(path, path, {"dt": dt}, 1, 1, str(low), str(high), version, True, "INSERT_INTO")


def test_pre_images_are_looked_up_only_where_the_commit_touched(tmp_path: Path) -> None:
    added = entry("new", 9, "x", 100, 120)
    previous = [
        entry("same-part-overlap", 1, "x", 110, 200),
        entry("same-part-disjoint", 2, "x", 1, 99),
        entry("other-part", 3, "y", 100, 120),
    ]
    commit = Commit(
        "t",
        9,
        STAMP,
        STAMP,
        Operation.INSERT_INTO,
        True,
        "txn",
        8,
        Rebase.NONE,
        ({"dt": "x"},),
        None,
        None,
        None,
        0,
        0,
        (added,),
        (),
    )
    plan = plan_commit(commit, previous, SHAPE)
    assert [r.path for r in plan.previous] == ["same-part-overlap"]
    truncate = Commit(
        "t",
        10,
        STAMP,
        STAMP,
        Operation.TRUNCATE,
        True,
        "txn2",
        9,
        Rebase.NONE,
        ({"dt": "y"},),
        None,
        None,
        None,
        0,
        0,
        (),
        (),
    )
    assert [r.path for r in plan_commit(truncate, previous, SHAPE).previous] == ["other-part"]


def test_data_source_option_parsing_needs_no_spark_session() -> None:
    probe = (
        "import sys\n"
        "from ordo.spark.datasource import ddl_columns, replace_where\n"
        "from ordo.schemas import TableMetadata\n"
        "assert ddl_columns('`id` bigint NOT NULL, `a,b<` decimal(10,2), `m``x` map<string,int>') == "
        "[('id', 'bigint'), ('a,b<', 'decimal(10,2)'), ('m`x', 'map<string,int>')]\n"
        "meta = TableMetadata(location='/t', schema='id bigint, dt string, region string', primary_key=('id',),"
        " partition_columns=('dt', 'region'))\n"
        "where = replace_where(\"dt = '2024-05-01' AND region = 'eu'\", meta)\n"
        "assert where.pinned() == {'dt': '2024-05-01', 'region': 'eu'}\n"
        "where = replace_where(\"dt >= '2024-05-01'\", meta)\n"
        "assert where.pinned() is None and where.matches({'dt': '2024-05-02', 'region': 'x'})\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_arrow_readers_and_writers_import_no_spark() -> None:
    probe = (
        "import sys\n"
        "import ordo.consumer.arrow, ordo.producer.arrow\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')], 'spark imported'\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_partition_filters_prune_files_and_stay_applied_by_spark() -> None:
    from datetime import date

    from pyspark.sql.datasource import EqualTo, GreaterThan, In

    from ordo.spark.datasource import SnapshotReader

    reader = SnapshotReader.__new__(SnapshotReader)  # planning state only; no catalog needed for pruning
    reader.shape = SHAPE
    reader.files = [ref(f"f{d}", 1, d) for d in ("2024-05-01", "2024-05-02", "2024-05-03")]
    reader.buckets = 1
    reader.keys = None
    filters = [EqualTo(("id",), 3), In(("dt",), (date(2024, 5, 1), "2024-05-03")), GreaterThan(("dt",), "2024")]
    assert list(reader.pushFilters(filters)) == filters  # Spark still evaluates every filter
    assert [r.path for r in reader.files] == ["f2024-05-01", "f2024-05-03"]
    list(reader.pushFilters([EqualTo(("dt",), 1.5)]))  # a literal whose text may differ: no pruning
    assert len(reader.files) == 2


def test_task_writes_refuse_bad_rows_before_writing_and_write_the_contract(tmp_path: Path) -> None:
    from ordo.producer.arrow import check_unique, conform_batch, write_rows
    from ordo.producer.data import Layout, PartitionValueError, PrimaryKeyError, SchemaMismatchError
    from ordo.schemas import TableMetadata

    layout = Layout.of(
        "t",
        TableMetadata(
            location=str(tmp_path),
            schema="`id` bigint, `v` string, `dt` string",
            primary_key=("id",),
            partition_columns=("dt",),
        ),
    )
    schema = SHAPE.schema

    def table(rows: list[tuple[Any, ...]]) -> pa.Table:
        return pa.table({n: [r[i] for r in rows] for i, n in enumerate(schema.names)}, schema=schema)

    with pytest.raises(SchemaMismatchError, match="missing"):
        conform_batch(pa.table({"id": [1]}), schema)
    with pytest.raises(PrimaryKeyError, match="duplicate"):
        write_rows(table([(1, "a", "x"), (1, "b", "x")]), layout, "txn", 0)
    with pytest.raises(PrimaryKeyError, match="null"):
        write_rows(table([(None, "a", "x")]), layout, "txn", 0)
    with pytest.raises(PartitionValueError, match="outside"):
        write_rows(table([(1, "a", "y")]), layout, "txn", 0, {"dt": "x"})
    assert not list(tmp_path.rglob("*.parquet")), "a refused write leaves no file"

    files = write_rows(table([(1, "a", "x"), (2, "b", "y"), (3, "c", "x")]), layout, "txn", 500)
    assert sorted(f.path for f in files) == ["dt=x/txn-500.parquet", "dt=y/txn-501.parquet"]
    written = pq.read_table(tmp_path / "dt=x" / "txn-500.parquet")
    assert written.column_names == ["id", "v", "dt", "_ordo_op", "_ordo_seq"]
    assert written.column("_ordo_op").to_pylist() == ["upsert", "upsert"]
    assert {f.path: (f.record_count, f.min_key, f.max_key) for f in files}["dt=x/txn-500.parquet"] == (2, "1", "3")
    other_task = write_rows(table([(3, "z", "x")]), layout, "txn", 100_000)
    with pytest.raises(PrimaryKeyError, match="duplicate"):
        check_unique(layout, files + other_task)  # two tasks wrote key 3 in dt=x


def test_a_whole_table_scope_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    from ordo.producer.delta import log_whole_table

    with caplog.at_level("INFO", logger="ordo.producer"):
        for _ in range(3):
            log_whole_table("scope_log_table", "DELETE")
    assert [r.getMessage() for r in caplog.records].count(
        "DELETE on scope_log_table has whole-table scope (its condition pins no partition with equality "
        "predicates): it conflicts with writes in every partition"
    ) == 1


def _spark_types() -> list[Any]:
    from pyspark.sql import types as T

    point = T.StructType(
        [T.StructField("x", T.DoubleType()), T.StructField("y", T.MapType(T.StringType(), T.DateType()))]
    )
    nested = T.StructType([T.StructField("a", T.IntegerType()), T.StructField("b", T.ArrayType(T.StringType()))])
    return [
        T.BooleanType(), T.ByteType(), T.ShortType(), T.IntegerType(), T.LongType(), T.FloatType(), T.DoubleType(),
        T.StringType(), T.BinaryType(), T.DateType(), T.TimestampType(), T.TimestampNTZType(), T.DecimalType(10, 2),
        T.DecimalType(38, 0), T.ArrayType(T.LongType()), T.MapType(T.StringType(), T.IntegerType()), nested,
        T.ArrayType(point),
    ]  # fmt: skip


def test_arrow_type_is_sparks_mapping_without_spark() -> None:
    """``TableShape.of`` reads a table's DDL (Spark's ``simpleString`` per column) with ``arrow_type``: the Arrow
    types Spark's own mapping gives, for every type a column can have."""
    from pyspark.sql.pandas.types import to_arrow_type

    from ordo.consumer.arrow import arrow_type

    for data_type in _spark_types():
        assert arrow_type(data_type.simpleString()) == to_arrow_type(data_type, timezone="UTC"), data_type


def test_arrow_type_refuses_a_type_it_does_not_know() -> None:
    from ordo.consumer.arrow import arrow_type

    with pytest.raises(ValueError, match="no Arrow type for the Spark type 'interval day'"):
        arrow_type("interval day")


def test_a_restore_gives_exactly_the_rows_that_differ(tmp_path: Path) -> None:
    """RESTORE's plan: ``previous`` is the snapshot before it, ``added`` the snapshot after it (consumer.arrow)."""
    old = write(tmp_path, "a.parquet", [(1, "a1", "x", "upsert"), (2, None, "x", "upsert"), (3, "a3", "x", "upsert")])
    update = write(tmp_path, "u.parquet", [(1, "u1", "x", "upsert")])  # v2
    later = write(tmp_path, "l.parquet", [(3, "l3", "x", "upsert"), (4, "l4", "x", "upsert"), (1, None, "x", "delete")])
    other = write(tmp_path, "o.parquet", [(7, "o7", "y", "upsert")])  # v4: a partition the restored version lacks
    # before (v4): old, update, later, other; after restoring v2: old and update again, ``old`` keeping sequence 1
    before = (ref(old, 1, "x"), ref(update, 2, "x"), ref(later, 3, "x"), ref(other, 4, "y"))
    after = (ref(old, 1, "x"), ref(update, 2, "x"))
    plan = CommitChanges(5, STAMP, "RESTORE", None, after, before)
    assert kinds(change_rows(plan, SHAPE)) == [
        ("delete", 4, "l4", "x"),
        ("delete", 7, "o7", "y"),
        ("insert", 1, "u1", "x"),  # deleted at v3, back as v2 had it (u1 beats a1: sequence 2 > 1)
        ("update_postimage", 3, "a3", "x"),
        ("update_preimage", 3, "l3", "x"),
    ]  # key 2 (v NULL before and after) is unchanged: no row
    compact = change_rows(plan, SHAPE, form="compact")
    assert kinds(compact) == [
        ("delete", 4, "l4", "x"),
        ("delete", 7, "o7", "y"),
        ("upsert", 1, "u1", "x"),
        ("upsert", 3, "a3", "x"),
    ]
    assert set(compact.column("_commit_version").to_pylist()) == {5}
    same = CommitChanges(6, STAMP, "RESTORE", None, after, after)
    assert change_rows(same, SHAPE).num_rows == 0


def test_a_restore_plan_takes_the_whole_snapshot_before_and_after(tmp_path: Path) -> None:
    def entry(path: str, version: int, seq: int | None = None) -> FileEntry:
        name = Path(path).name
        return FileEntry(name, path, {"dt": "x"}, 1, 1, None, None, version, False, "INSERT_INTO", 0, seq)

    a, b = (
        write(tmp_path, "a.parquet", [(1, "a", "x", "upsert")]),
        write(tmp_path, "b.parquet", [(1, "b", "x", "upsert")]),
    )
    commit = Commit(
        table="t", id_version=5, time_version=STAMP, timestamp=STAMP, operation=Operation.RESTORE,
        data_change=True, txn_id="r", read_version=4, rebase=Rebase.NONE, partitions=None, writer=None, app_id=None,
        batch_id=None, intent_offset=5, log_offset=5, added_files=(entry(a, 5, seq=1),), removed_files=("b.parquet",),
    )  # fmt: skip
    plan = plan_commit(commit, [entry(b, 3)], SHAPE)
    assert [r.path for r in plan.previous] == [b]
    assert [(r.path, r.added_version) for r in plan.added] == [(a, 1)]  # the re-added file's own sequence
    assert kinds(change_rows(plan, SHAPE)) == [("update_postimage", 1, "a", "x"), ("update_preimage", 1, "b", "x")]


def test_a_point_read_of_many_files_finds_what_a_read_per_file_finds(tmp_path: Path) -> None:
    """``live_rows(keys=)`` of more than two files is one dataset scan with the keys' filter pushed in; each key's
    row is the one a read of every file, merged, gives: the newest record, a delete hiding it, a compaction's
    older sequence, a file written before a column existed (null), a key in no file."""
    files = [
        ref(write(tmp_path, "a.parquet", [(1, "a1", "x", "upsert"), (2, "a2", "x", "upsert")]), 1, "x"),
        ref(write(tmp_path, "b.parquet", [(1, "b1", "x", "upsert"), (3, "b3", "x", "upsert")]), 2, "x"),
        ref(write(tmp_path, "c.parquet", [(2, None, "x", "delete"), (4, "c4", "x", "upsert")]), 3, "x"),
        ref(write(tmp_path, "d.parquet", [(3, "d3-old", "x", "upsert")], seq=[1]), 4, "x"),
    ]
    narrow = tmp_path / "e.parquet"  # no column v: the table gained it later
    pq.write_table(
        pa.table({"id": pa.array([5], pa.int64()), "dt": ["x"], "_ordo_op": ["upsert"], "_ordo_seq": [None]}), narrow
    )
    files.append(ref(str(narrow), 5, "x"))
    every = {r["id"]: r for r in live_rows(files, SHAPE).to_pylist()}
    assert sorted(every) == [1, 3, 4, 5]
    for wanted in ([1], [2], [3], [5], [1, 3, 4, 99], [99]):
        keys = pa.table({"id": pa.array(wanted, pa.int64())})
        found = live_rows(files, SHAPE, keys=keys).to_pylist()
        assert sorted(found, key=lambda r: r["id"]) == [every[k] for k in sorted(wanted) if k in every], wanted
    assert live_rows(files, SHAPE, keys=pa.table({"id": pa.array([], pa.int64())})).num_rows == 0


def test_a_point_read_by_a_two_column_key_keeps_only_whole_keys(tmp_path: Path) -> None:
    """The pushed filter keeps rows whose columns each hold one of the keys' values, (1, "b") among them for
    keys (1, "a") and (2, "b"): the join after the scan drops it."""
    shape = TableShape(pa.schema([("id", pa.int64()), ("k", pa.string()), ("v", pa.string())]), ("id", "k"), ())
    refs = []
    for n in range(3):
        table = pa.table(
            {
                "id": pa.array([1, 1, 2, 2], pa.int64()),
                "k": ["a", "b", "a", "b"],
                "v": [f"{n}-1a", f"{n}-1b", f"{n}-2a", f"{n}-2b"],
                "_ordo_op": ["upsert"] * 4,
                "_ordo_seq": pa.array([None] * 4, pa.int64()),
            }
        )
        path = tmp_path / f"f{n}.parquet"
        pq.write_table(table, path)
        refs.append(FileRef(str(path), n + 1, {}, "INSERT_INTO"))
    keys = pa.table({"id": pa.array([1, 2], pa.int64()), "k": ["a", "b"]})
    found = sorted((r["id"], r["k"], r["v"]) for r in live_rows(refs, shape, keys=keys).to_pylist())
    assert found == [(1, "a", "2-1a"), (2, "b", "2-2b")]


def test_a_small_file_is_written_with_snappy_and_a_large_one_with_zstd(tmp_path: Path) -> None:
    """``producer.arrow.compression``: a small write's files (read hundreds at a time by merge-on-read) in snappy,
    a file of ``SMALL_FILE_BYTES`` or more of rows in zstd; the codec each column chunk of the footer names."""
    from ordo.producer.arrow import SMALL_FILE_BYTES, write_rows
    from ordo.producer.data import Layout
    from ordo.schemas import TableMetadata

    layout = Layout.of(
        "t",
        TableMetadata(location=str(tmp_path), schema="`id` bigint, `v` string, `dt` string", primary_key=("id",)),
    )
    width = 1000
    count = SMALL_FILE_BYTES // width + 1
    big = pa.table(
        {"id": pa.array(range(count), pa.int64()), "v": [f"{i:0{width}d}" for i in range(count)], "dt": ["x"] * count}
    )
    small = big.slice(0, 10)
    assert small.nbytes < SMALL_FILE_BYTES <= big.nbytes

    def codecs(files: list[Any]) -> set[str]:
        footer = pq.ParquetFile(tmp_path / files[0].path).metadata
        return {footer.row_group(0).column(c).compression for c in range(footer.num_columns)}

    assert codecs(write_rows(small, layout, "small", 0)) == {"SNAPPY"}
    assert codecs(write_rows(big, layout, "big", 0)) == {"ZSTD"}


def test_the_hull_of_a_commits_key_ranges_settles_overlap_as_the_ranges_do() -> None:
    """``_KeyRanges.may_overlap`` with the added files' hull answers as without it, for 2,000 random ranges of a
    two-column key, and for unknown bounds (a file without stats may hold any key)."""
    import random

    from ordo.consumer.arrow import _KeyRanges

    shape = TableShape(pa.schema([("a", pa.int64()), ("b", pa.string())]), ("a", "b"), ())
    ranges = _KeyRanges(shape)
    rng = random.Random(29)

    def file(n: int, known: bool = True) -> FileRef:
        a = sorted(rng.randrange(100) for _ in range(2))
        b = sorted(rng.choice("abcdefgh") for _ in range(2))
        low, high = (f'[{a[0]}, "{b[0]}"]', f'[{a[1]}, "{b[1]}"]') if known else (None, None)
        return FileRef(f"f{n}", 1, {}, "INSERT_INTO", low, high)

    differ = 0
    for n in range(2000):
        added = [ranges.bounds(file(1000 * n + i, known=rng.random() > 0.02)) for i in range(rng.randrange(1, 4))]
        prev = file(-n, known=rng.random() > 0.02)
        hull = ranges.hull(added)
        assert ranges.may_overlap(prev, added, hull) == ranges.may_overlap(prev, added), (prev, added)
        differ += hull is not None and not ranges.may_overlap(prev, added, hull)
    assert differ > 100  # the hull did rule files out


def test_a_commits_groups_without_earlier_files_are_merged_at_once_each_key_in_its_partition(tmp_path: Path) -> None:
    """The groups of a commit with no earlier file that may hold their keys give their upserts as inserts in one
    merge: the same key in two partitions is two rows, a key written twice gives its newer record, a delete of a
    key no file held gives nothing; a group with earlier files beside them still gives its pre- and post-images."""
    x_new = write(tmp_path, "x.parquet", [(1, "x1", "x", "upsert"), (2, "x2-old", "x", "upsert")], seq=[7, 6])
    x_again = write(tmp_path, "x2.parquet", [(2, "x2", "x", "upsert"), (5, None, "x", "delete")], seq=[7, 7])
    y_new = write(tmp_path, "y.parquet", [(1, "y1", "y", "upsert")])
    z_old = write(tmp_path, "z0.parquet", [(3, "z3-old", "z", "upsert")])
    z_new = write(tmp_path, "z.parquet", [(3, "z3", "z", "upsert"), (4, "z4", "z", "upsert")])
    added = (ref(x_new, 7, "x"), ref(x_again, 7, "x"), ref(y_new, 7, "y"), ref(z_new, 7, "z"))
    plan = CommitChanges(7, STAMP, "INSERT_INTO", None, added, (ref(z_old, 2, "z"),))
    assert kinds(change_rows(plan, SHAPE)) == [
        ("insert", 1, "x1", "x"),
        ("insert", 1, "y1", "y"),
        ("insert", 2, "x2", "x"),
        ("insert", 4, "z4", "z"),
        ("update_postimage", 3, "z3", "z"),
        ("update_preimage", 3, "z3-old", "z"),
    ]
