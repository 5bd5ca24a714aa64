"""The change feed's work per commit follows the rows the commit touched, not the table.

Two real tables per case, built by the pure core into a real SQLite catalog with
real Parquet files (the writer's pyarrow path, ``producer.arrow.write_rows``):
a small one and one ten times larger. The same small commit (update, insert and
delete a few keys of one partition) is then planned and read as the change
feed does (``plan_commits`` on the catalog, ``change_rows`` on the files), and
its work is counted: catalog file entries fetched for pre-images, data files
opened and rows read (``READ_STATS``). Both tables give the same counts and the
same change rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ordo.arbiter.core import apply, evaluate, new_state
from ordo.consumer import Catalog
from ordo.consumer.arrow import READ_STATS, TableShape, change_rows, plan_commits, touched_groups
from ordo.consumer.store import CatalogWriter, LogRecord
from ordo.producer.arrow import write_rows
from ordo.producer.data import Layout
from ordo.schemas import CommitIntent, DataFile, Operation, TableMetadata, encode

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("dt", pa.string())])
SHAPE = TableShape(SCHEMA, ("id",), ("dt",))
ROWS_PER_COMMIT = 40
BUCKETS = 4


class Builder:
    """Drives the pure core for one table and applies its decisions to a real catalog."""

    def __init__(self, root: Path, name: str) -> None:
        self.name = name
        self.metadata = TableMetadata(
            location=str(root / name),
            schema="id BIGINT, v STRING, dt STRING",
            primary_key=("id",),
            partition_columns=("dt",),
            properties={"ordo.buckets": str(BUCKETS)},
        )
        self.layout = Layout.of(name, self.metadata)
        self.catalog_path = str(root / f"{name}.db")
        self.writer = CatalogWriter(self.catalog_path, "ordo")
        self.state = new_state(name)
        self.offset = 0
        self.rows: dict[int, tuple[Any, ...]] = {}
        self.submit(Operation.CREATE_TABLE, metadata=self.metadata)

    def submit(self, operation: Operation, **fields: Any) -> Any:
        intent = CommitIntent(
            txn_id=fields.pop("txn_id", f"t{self.offset}"),
            table=self.name,
            operation=operation,
            read_version=max(self.state.head_version, 0),
            **fields,
        )
        decision = evaluate(self.state, intent, 1_000_000 + self.offset * 1000, self.offset)
        assert decision.accepted, decision
        data = encode(decision)
        apply(self.state, decision, data)
        self.writer.apply([LogRecord(self.name, self.offset, 1_000_000 + self.offset * 1000, data)])
        self.offset += 1
        return decision

    def write(self, rows: list[tuple[Any, ...]], operation: Operation = Operation.INSERT_INTO, **fields: Any) -> Any:
        txn = f"w{self.offset}"
        table = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows], SCHEMA)
        files = write_rows(table, self.layout, txn, 0)
        partitions = sorted({r[2] for r in rows})
        decision = self.submit(
            operation,
            txn_id=txn,
            partitions=tuple({"dt": p} for p in partitions),
            added_files=tuple(files),
            **fields,
        )
        self.rows.update({r[0]: r for r in rows})
        return decision

    def delete(self, keys: list[int], dt: str) -> list[DataFile]:
        """Delete records (the writer's format: key, partition, ``_ordo_op = delete``) in their buckets' files."""
        import pyarrow.parquet as pq

        from ordo.producer.buckets import bucket_array
        from ordo.schemas.paths import data_file_path

        txn = f"d{self.offset}"
        table = pa.table({"id": pa.array(keys, pa.int64())})
        buckets = bucket_array(table, ("id",), BUCKETS).to_pylist()
        files = []
        for n, bucket in enumerate(sorted(set(buckets))):
            ids = [k for k, b in zip(keys, buckets, strict=True) if b == bucket]
            path = data_file_path(("dt",), {"dt": dt}, txn, n)
            records = pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "v": pa.nulls(len(ids), pa.string()),
                    "dt": pa.array([dt] * len(ids), pa.string()),
                    "_ordo_op": pa.array(["delete"] * len(ids), pa.string()),
                    "_ordo_seq": pa.nulls(len(ids), pa.int64()),
                }
            )
            full = Path(self.metadata.location) / path
            full.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(records, full)
            files.append(
                DataFile(
                    path=path,
                    partition={"dt": dt},
                    record_count=len(ids),
                    size_bytes=full.stat().st_size,
                    min_key=str(min(ids)),
                    max_key=str(max(ids)),
                    bucket=bucket,
                )
            )
        return files

    def major_compact(self, dt: str) -> None:
        """A MAJOR COMPACT of partition ``dt``: its live rows in one file per bucket."""
        live = sorted((r for r in self.rows.values() if r[2] == dt), key=lambda r: r[0])
        removed = tuple(sorted(p for p, key in self.state.files.items() if key == (dt,)))
        txn = f"c{self.offset}"
        table = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in live], SCHEMA)
        files = write_rows(table, self.layout, txn, 0)
        self.submit(
            Operation.MAJOR_COMPACT,
            txn_id=txn,
            partitions=({"dt": dt},),
            added_files=tuple(f.model_copy(update={"data_change": False}) for f in files),
            removed_files=removed,
        )

    def close(self) -> None:
        self.writer.close()


def history(builder: Builder, partitions: int, commits: int) -> None:
    """``commits`` INSERT INTOs of ``ROWS_PER_COMMIT`` new keys in each of ``partitions`` partitions.

    Keys ``p * 1e6 + c * 1000 + i``: each commit's keys are a range of their own, as a stream writes them.
    """
    for c in range(commits):
        for p in range(partitions):
            builder.write([(p * 1_000_000 + c * 1000 + i, f"v{c}", f"p{p}") for i in range(ROWS_PER_COMMIT)])


class Recording:
    """A real catalog that counts the file entries its snapshots and commits return."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.entries = 0

    def snapshot(self, *args: Any, **kwargs: Any) -> Any:
        found = self.catalog.snapshot(*args, **kwargs)
        self.entries += len(found.files)
        return found

    def commits(self, *args: Any, **kwargs: Any) -> Any:
        found = self.catalog.commits(*args, **kwargs)
        self.entries += sum(len(c.added_files) for c in found)
        return found


def the_small_commit(builder: Builder) -> tuple[int, list[tuple[Any, ...]]]:
    """Update 3 keys and insert 2 in partition p0 (one commit), then delete 2 (another); the expected change rows."""
    old = builder.rows
    updated = [(1000 + i, "new", "p0") for i in (1, 7, 30)]
    inserted = [(1000 + 500 + i, "new", "p0") for i in range(2)]
    expected = [("update_preimage", *old[r[0]]) for r in updated]
    expected += [("update_postimage", *r) for r in updated] + [("insert", *r) for r in inserted]
    first = builder.write(updated + inserted).id_version
    gone = [2000 + 3, 2000 + 11]
    expected_delete = [("delete", *old[k]) for k in gone]
    files = builder.delete(gone, "p0")
    builder.submit(Operation.DELETE, partitions=({"dt": "p0"},), added_files=tuple(files))
    for k in gone:
        builder.rows.pop(k)
    return first, sorted(expected + expected_delete)


def work_of_the_small_commit(builder: Builder) -> tuple[tuple[int, int, int], list[tuple[Any, ...]]]:
    """(catalog entries fetched, files read, rows read) of the change feed of the small commit, and its rows."""
    first, expected = the_small_commit(builder)
    builder.close()
    with Catalog(builder.catalog_path) as catalog:
        commits = catalog.commits(builder.name, first, first + 1)
        recording = Recording(catalog)
        READ_STATS.reset()
        plans = plan_commits(recording, builder.name, commits, SHAPE)  # type: ignore[arg-type]
        tables = [change_rows(plan, SHAPE) for plan in plans]
        files, rows = READ_STATS.reset()
        assert all(touched_groups(c, ("dt",)) for c in commits)
    got = sorted(
        (r["_change_type"], r["id"], r["v"], r["dt"]) for t in tables for r in t.to_pylist() if r["_change_type"]
    )
    assert got == expected
    return (recording.entries, files, rows), got


@pytest.mark.parametrize("growth", ["partitions", "compacted history"])
def test_work_per_commit_does_not_grow_with_the_table(tmp_path: Path, growth: str) -> None:
    """The same small commit costs the same on a table and on one ten times larger.

    ``partitions``: 10x the partitions (10x rows and files). ``compacted history``: 10x the commits everywhere,
    also in the touched partition, which a MAJOR COMPACT folded into one file per bucket (10x the rows in it):
    the key filter reads only the rows of the commit's keys.
    """
    measured = {}
    for scale in (1, 10):
        builder = Builder(tmp_path, f"t{scale}")
        if growth == "partitions":
            history(builder, partitions=2 * scale, commits=3)
        else:
            history(builder, partitions=2, commits=3 * scale)
            builder.major_compact("p0")
        live = len(builder.state.files)
        measured[scale] = (live, *work_of_the_small_commit(builder))
    (small_live, small_work, small_rows), (large_live, large_work, large_rows) = measured[1], measured[10]
    assert large_live >= 5 * small_live, "the larger table is larger"
    assert small_rows == large_rows
    assert large_work == small_work, f"work (catalog entries, files, rows): small {small_work}, large {large_work}"
    entries, _, rows = large_work
    assert entries < large_live / 4, "the catalog returned only the touched groups' files"
    assert rows <= 4 * 10, f"rows read follow the commit's rows (7 keys, their files), not the table: {rows}"


def test_a_long_feed_is_planned_like_a_snapshot_per_commit_and_gives_the_model_rows(tmp_path: Path) -> None:
    """60 commits of upserts of new and old keys, deletes, compactions and a truncate, in two partitions.

    ``plan_commits`` plans the whole range from one snapshot walked forward; each commit's plan must equal the
    plan from that commit's own full snapshot before it, and the change rows of every commit (Delta's form) must
    be what a plain-Python model of the table says: insert for a new key, pre- and post-image for a key that was
    there, delete for a key removed (its row before), nothing for a compaction; the packed tasks hold every
    commit once, in version order.
    """
    import random

    from ordo.consumer.arrow import pack_commits, plan_commit, task_change_rows

    rng = random.Random(24)
    builder = Builder(tmp_path, "long")
    before: dict[int, dict[int, tuple[Any, ...]]] = {}  # per ID version, the model's rows before it
    expected: dict[int, list[tuple[Any, ...]]] = {}
    next_key = 0
    for step in range(60):
        rows = dict(builder.rows)
        dt = rng.choice(["p0", "p1"])
        mine = [k for k, r in rows.items() if r[2] == dt]
        if step == 45:
            removed = tuple(sorted(p for p, key in builder.state.files.items() if key == (dt,)))
            version = builder.submit(Operation.TRUNCATE, partitions=({"dt": dt},), removed_files=removed).id_version
            expected[version] = [("delete", *rows[k]) for k in mine]
            builder.rows = {k: r for k, r in rows.items() if r[2] != dt}
        elif step % 15 == 14:
            builder.major_compact(dt)
            expected[builder.state.head_version] = []
            continue
        elif step % 7 == 6 and mine:
            gone = rng.sample(mine, min(3, len(mine)))
            files = builder.delete(gone, dt)
            version = builder.submit(Operation.DELETE, partitions=({"dt": dt},), added_files=tuple(files)).id_version
            expected[version] = [("delete", *rows[k]) for k in gone]
            for k in gone:
                builder.rows.pop(k)
        else:
            old = rng.sample(mine, min(len(mine), rng.choice([0, 2, 5])))
            new = list(range(next_key, next_key + rng.choice([1, 4, 10])))
            next_key += len(new)
            written = [(k, f"s{step}", dt) for k in sorted(old + new)]
            version = builder.write(written).id_version
            expected[version] = [("insert", *r) for r in written if r[0] not in rows]
            expected[version] += [("update_preimage", *rows[r[0]]) for r in written if r[0] in rows]
            expected[version] += [("update_postimage", *r) for r in written if r[0] in rows]
        before[version] = rows
    builder.close()
    with Catalog(builder.catalog_path) as catalog:
        commits = catalog.commits(builder.name, 1)
        plans = plan_commits(catalog, builder.name, commits, SHAPE)
        each = [plan_commit(c, catalog.snapshot(builder.name, version=c.id_version - 1).files, SHAPE) for c in commits]

    def files(plan: Any) -> tuple[Any, ...]:
        return plan.id_version, sorted(r.path for r in plan.added), sorted(r.path for r in plan.previous)

    assert [files(p) for p in plans] == [files(p) for p in each]
    got: dict[int, list[tuple[Any, ...]]] = {}
    for plan in plans:
        table = change_rows(plan, SHAPE)
        got[plan.id_version] = sorted((r["_change_type"], r["id"], r["v"], r["dt"]) for r in table.to_pylist())
    logical = {v: sorted(rows) for v, rows in expected.items() if v in got}
    assert got == logical
    assert sum(1 for rows in logical.values() for r in rows if r[0] == "update_preimage") > 10, "the feed updates"
    assert sum(1 for rows in logical.values() for r in rows if r[0] == "delete") > 10, "the feed deletes"
    tasks = pack_commits(plans, task_files=8)  # several tasks of this small feed
    assert [p.id_version for task in tasks for p in task] == [p.id_version for p in plans]
    assert tasks == pack_commits(plans, task_files=8) and len(tasks) > 1
    # a task reads its commits' own files in one scan per partition first: the same rows, compact form too
    for form in ("delta", "compact"):
        one_by_one = [change_rows(p, SHAPE, form).to_pylist() for p in plans]
        by_task = [rows.to_pylist() for task in tasks for rows in task_change_rows(task, SHAPE, form)]
        assert by_task == one_by_one


def test_merge_groups_are_packed_in_order_within_the_task_limits() -> None:
    """``pack_groups``: every group once, in order, whole; tasks of at most ``TASK_FILES`` files unless one group
    alone is larger; the same groups always give the same tasks."""
    from ordo.consumer.arrow import TASK_FILES, FileRef, pack_groups

    sizes = [1, 3, 50, 7, TASK_FILES + 5, 2, 2, 90, 1, 40, 40, 40, 1]
    groups = [
        (tuple(FileRef(f"g{i}-{j}", 1, {}, size_bytes=1000) for j in range(n)), i % 2 == 0) for i, n in enumerate(sizes)
    ]
    tasks = pack_groups(groups)
    assert [g for task in tasks for g in task] == groups
    assert all(sum(len(refs) for refs, _ in task) <= TASK_FILES or len(task) == 1 for task in tasks)
    assert len(tasks) >= -(-sum(sizes) // TASK_FILES) and tasks == pack_groups(groups)
    assert pack_groups([]) == [] and pack_groups(groups[:2]) == [tuple(groups[:2])]


def test_a_key_filter_reads_only_the_files_whose_key_range_may_hold_the_key(tmp_path: Path) -> None:
    """``ordo_files`` (Spark's merge-on-read): ``id = k`` and ``id IN (...)`` pushed down keep only the files of the
    keys' buckets whose key range may hold the keys, and give exactly the merged rows of those keys (upserted,
    deleted, untouched); a filter on another column, or a value of another type, prunes nothing. Told no bucket
    count (a plan from before it was passed), the key ranges alone prune, to the same rows."""
    from pyspark.sql.datasource import EqualTo, GreaterThan, In
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from ordo.consumer.arrow import FileRef, by_bucket
    from ordo.consumer.files_source import FilesReader, groups_option
    from ordo.schemas.buckets import bucket_of_text

    builder = Builder(tmp_path, "points")
    history(builder, partitions=2, commits=6)
    builder.write([(1000 + i, "new", "p0") for i in (1, 7)])  # upserts of keys commit 1 wrote
    files = builder.delete([1003], "p0")
    builder.submit(Operation.DELETE, partitions=({"dt": "p0"},), added_files=tuple(files))
    builder.rows.pop(1003)
    builder.close()
    with Catalog(builder.catalog_path) as catalog:
        snapshot = catalog.snapshot(builder.name)
    groups = list(by_bucket([FileRef.of(f) for f in snapshot.files], ("dt",)).values())
    schema = StructType(
        [StructField("id", LongType()), StructField("v", StringType()), StructField("dt", StringType())]
    )

    def read(*filters: Any, buckets: int = BUCKETS) -> tuple[list[tuple[Any, ...]], list[FileRef]]:
        import json

        option = groups_option([[tuple(g) for g in groups]], ("id",), ("dt",), buckets)
        reader = FilesReader(schema, json.loads(option))
        assert list(reader.pushFilters(list(filters))) == list(filters)  # Spark still applies every filter
        kept = [f for task in reader.bins for g in task for f in g]
        rows = [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]
        return sorted((r["id"], r["v"], r["dt"]) for r in rows), kept

    every, all_files = read()
    total = len(all_files)
    assert every == sorted(builder.rows.values())
    assert {f.bucket for f in all_files} == set(range(BUCKETS))
    pruned_more = False
    for wanted in ([1001], [1003], [1005], [1001, 1003, 2010, 5_000_000]):
        pushed = EqualTo(("id",), wanted[0]) if len(wanted) == 1 else In(("id",), tuple(wanted))
        rows, kept = read(pushed)
        assert rows == sorted(builder.rows[k] for k in wanted if k in builder.rows)
        assert {f.bucket for f in kept} <= {bucket_of_text(str(k), BUCKETS) for k in wanted}
        by_range_rows, by_range = read(pushed, buckets=1)
        assert by_range_rows == rows
        assert {f.path for f in kept} <= {f.path for f in by_range} and len(by_range) < total / 3
        pruned_more |= len(kept) < len(by_range)
    assert pruned_more, "the buckets pruned nothing the key ranges kept"
    assert len(read(EqualTo(("id",), "1001"))[1]) == total  # a string for a BIGINT key: no pruning
    assert len(read(GreaterThan(("id",), 1001))[1]) == total
    assert len(read(EqualTo(("v",), "new"))[1]) == total
