"""Keyless tables (``DeltaTable.create`` without ``primary_key``) end to end on the real stack with real Spark.

Every read is compared with a plain-Python model: a list of rows in which
duplicates are kept. The change feed in Delta's shape is compared with the
rows the model says each commit inserted, changed (pre- and post-image) or
deleted. The hidden row id never shows in what users read.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ordo.producer.table import DeltaTable, InvalidOperationError, SchemaMismatchError
from ordo.schemas.operations import ROW_ID_COLUMN
from ordo.spark.datasource import settings_options
from tests.e2e.stack import writer_stack  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

SCHEMA = "id BIGINT, v STRING, dt STRING"
COLUMNS = ["id", "v", "dt"]
Row = tuple[Any, ...]


def rows(df: Any) -> list[Row]:
    assert df.columns == COLUMNS, df.columns
    return sorted((r["id"], r["v"], r["dt"]) for r in df.collect())


def feed(table: DeltaTable, start: int, end: int | None = None) -> list[Row]:
    """The change feed in Delta's shape as sorted ``(version, change type, id, v, dt)``."""
    df = table.changes(start, end, form="delta")
    assert ROW_ID_COLUMN not in df.columns
    return sorted((r["_commit_version"], r["_change_type"], r["id"], r["v"], r["dt"]) for r in df.collect())


def arrow_rows(table: DeltaTable) -> list[Row]:
    """The head read with pyarrow only (``consumer.arrow``, what the data source's tasks run), row id dropped."""
    from ordo.consumer.arrow import FileRef, TableShape, live_rows, merge_groups

    snapshot = table.snapshot()
    shape = TableShape.of(snapshot.metadata)
    found: list[Row] = []
    for group, merge in merge_groups([FileRef.of(f) for f in snapshot.files], shape.partition_columns):
        data = live_rows(group, shape, merge=merge)
        ids = data.column(ROW_ID_COLUMN).to_pylist()
        assert len(set(ids)) == len(ids) and None not in ids, "row ids repeat or are missing"
        found.extend((r["id"], r["v"], r["dt"]) for r in data.drop_columns([ROW_ID_COLUMN]).to_pylist())
    return sorted(found)


class Model:
    """The table as a list of rows (duplicates kept) and the change rows each version gave.

    Each row has a model-side identity (an insert makes a new one, an update keeps it), which is what a RESTORE's
    change rows pair by; the table's own row ids are never read here.
    """

    def __init__(self) -> None:
        self.entries: list[tuple[int, Row]] = []
        self.changes: list[Row] = []
        self._ids = iter(range(1_000_000))

    @property
    def rows(self) -> list[Row]:
        return [r for _, r in self.entries]

    def insert(self, version: int, new: list[Row]) -> None:
        self.entries.extend((next(self._ids), r) for r in new)
        self.changes.extend((version, "insert", *r) for r in new)

    def update(self, version: int, match: Any, change: Any) -> None:
        kept = []
        for i, r in self.entries:
            if match(r):
                after = change(r)
                self.changes += [(version, "update_preimage", *r), (version, "update_postimage", *after)]
                kept.append((i, after))
            else:
                kept.append((i, r))
        self.entries = kept

    def delete(self, version: int, match: Any) -> None:
        self.changes.extend((version, "delete", *r) for r in self.rows if match(r))
        self.entries = [(i, r) for i, r in self.entries if not match(r)]

    def restore(self, version: int, entries: list[tuple[int, Row]]) -> None:
        """The table becomes ``entries`` again: the difference by identity, as RESTORE's change rows."""
        before, after = dict(self.entries), dict(entries)
        for i, r in before.items():
            if i not in after:
                self.changes.append((version, "delete", *r))
            elif after[i] != r:
                self.changes += [(version, "update_preimage", *r), (version, "update_postimage", *after[i])]
        self.changes.extend((version, "insert", *r) for i, r in after.items() if i not in before)
        self.entries = list(entries)

    def check(self, table: DeltaTable, spark: Any, opts: dict[str, str]) -> None:
        expected = sorted(self.rows)
        assert rows(table.toDF()) == expected
        assert rows(DeltaTable.forName(spark, table.name, settings=table.settings).toDF()) == expected
        assert rows(spark.read.format("ordo").options(**opts).load(table.name)) == expected
        assert arrow_rows(table) == expected


def test_keyless_table_against_a_model(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    settings = writer_stack.settings
    opts = settings_options(settings)
    table = DeltaTable.create(spark, "kl_events", schema=SCHEMA, partitioned_by="dt", settings=settings)
    assert table.keyless and table.primary_key == ()
    assert table.schema.fieldNames() == COLUMNS
    assert rows(table.toDF()) == []
    ddl = spark.read.format("ordo").options(**opts).load("kl_events").schema.fieldNames()
    assert ddl == COLUMNS
    model = Model()

    # v1: INSERT INTO with duplicates (a row twice, an id twice): all kept
    first = [(1, "a", "d1"), (1, "a", "d1"), (2, "b", "d2"), (2, "c", "d2"), (3, "x", "d1")]
    result = table.insert_into(spark.createDataFrame(first, SCHEMA))
    assert result is not None and result.id_version == 1
    model.insert(1, first)
    model.check(table, spark, opts)

    # v2: the same rows again through the data source: appended again
    spark.createDataFrame(first[:3], SCHEMA).write.format("ordo").options(**opts).mode("append").save("kl_events")
    assert table.version == 2
    model.insert(2, first[:3])
    model.check(table, spark, opts)
    at_v2 = list(model.entries)

    # the row id is ordo's: a DataFrame that brings one is refused, nothing is committed
    with pytest.raises(SchemaMismatchError, match=ROW_ID_COLUMN):
        table.insert_into(
            spark.createDataFrame([(9, "z", "d1", "mine")], f"{SCHEMA}, {ROW_ID_COLUMN} STRING")  # type: ignore[arg-type]
        )
    with pytest.raises(InvalidOperationError, match="unknown columns"):
        table.update({ROW_ID_COLUMN: "'x'"}, "id = 1")
    assert table.version == 2

    # v3: UPDATE changes every matching row, duplicates included; pre/post images pair exactly
    table.update({"v": "v || '_u'"}, "id = 1")
    model.update(3, lambda r: r[0] == 1, lambda r: (r[0], r[1] + "_u", r[2]))
    model.check(table, spark, opts)

    # v4: DELETE removes every matching row
    table.delete("v = 'c' OR id = 3")
    model.delete(4, lambda r: r[1] == "c" or r[0] == 3)
    model.check(table, spark, opts)

    # v5: MERGE: matched rows updated (a source row may match several target rows), the others inserted,
    # and a source row that matches nothing inserted even when it repeats a target row's values elsewhere
    source = spark.createDataFrame([(2, "m2", "d2"), (7, "m7", "d1"), (7, "m7", "d1")], SCHEMA)
    (
        table.alias("t")
        .merge(source.alias("s"), "t.id = s.id AND t.dt = s.dt")
        .whenMatchedUpdate(set={"v": "s.v"})
        .whenNotMatchedInsertAll()
        .execute()
    )
    model.update(5, lambda r: (r[0], r[2]) == (2, "d2"), lambda r: (r[0], "m2", r[2]))
    model.insert(5, [(7, "m7", "d1"), (7, "m7", "d1")])
    model.check(table, spark, opts)

    # a target row matched by two source rows is refused (Delta refuses it too)
    twice = spark.createDataFrame([(7, "p", "d1"), (7, "q", "d1")], SCHEMA)
    with pytest.raises(InvalidOperationError, match="matched several source rows"):
        table.alias("t").merge(twice.alias("s"), "t.id = s.id").whenMatchedUpdate(set={"v": "s.v"}).execute()
    assert table.version == 5

    # v6: MERGE delete of one of the two (7, m7) rows is impossible by value: both go
    gone = spark.createDataFrame([(7, "m7", "d1")], SCHEMA)
    table.alias("t").merge(gone.alias("s"), "t.id = s.id AND t.v = s.v").whenMatchedDelete().execute()
    model.delete(6, lambda r: r == (7, "m7", "d1"))
    model.check(table, spark, opts)

    # v7, v8: compaction and clustering keep every row (and its row id: the feed after them stays exact)
    table.compact("minor")
    table.cluster("v")
    model.check(table, spark, opts)
    table.compact("major")
    model.check(table, spark, opts)
    head = table.version
    table.update({"v": "v || '!'"}, "dt = 'd2'")
    model.update(head + 1, lambda r: r[2] == "d2", lambda r: (r[0], r[1] + "!", r[2]))
    model.check(table, spark, opts)

    # RESTORE to v2 (metadata only: its files live again): the change rows are the exact difference
    table.restoreToVersion(2)
    model.restore(table.version, at_v2)
    model.check(table, spark, opts)
    # INSERT OVERWRITE of one partition: its rows go, the new ones (a duplicate pair) come
    table.insert_overwrite(spark.createDataFrame([(5, "o", "d2"), (5, "o", "d2")], SCHEMA), {"dt": "d2"})
    model.delete(table.version, lambda r: r[2] == "d2")
    model.insert(table.version, [(5, "o", "d2"), (5, "o", "d2")])
    model.check(table, spark, opts)

    assert feed(table, 1) == sorted(model.changes)
    assert Counter(r[1] for r in feed(table, 1)).keys() == {"insert", "update_preimage", "update_postimage", "delete"}
    # the data source's change feed too, and the compact form keeps the row id (its delete records carry only keys)
    delta = spark.read.format("ordo").options(**opts).option("readChangeFeed", "true").option("startingVersion", 1)
    found = delta.load("kl_events")
    assert ROW_ID_COLUMN not in found.columns
    assert len(found.collect()) == len(model.changes)
    compact = table.changes(1, form="compact")
    assert ROW_ID_COLUMN in compact.columns
    assert compact.where("_change_type = 'delete'").where(f"{ROW_ID_COLUMN} IS NULL").count() == 0

    # ALTER TABLE adds a column: older rows read it as NULL, new appends fill it; the row id stays hidden
    table.alter("note STRING")
    assert table.schema.fieldNames() == [*COLUMNS, "note"]
    table.insert_into(spark.createDataFrame([(8, "n", "d1", "x"), (8, "n", "d1", "x")], f"{SCHEMA}, note STRING"))
    found = spark.read.format("ordo").options(**opts).load("kl_events")
    assert found.columns == [*COLUMNS, "note"]
    assert sorted((tuple(r) for r in found.collect()), key=repr) == sorted(
        [(*r, None) for r in model.rows] + [(8, "n", "d1", "x")] * 2, key=repr
    )


def test_concurrent_appends_never_conflict(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    """Two transactions pinned to one version both append (key tables: the later fails); rows of both stay."""
    settings = writer_stack.settings
    table = DeltaTable.create(spark, "kl_concurrent", schema=SCHEMA, partitioned_by="dt", settings=settings)
    keyed = DeltaTable.create(
        spark, "kl_keyed", schema=SCHEMA, primary_key="id", partitioned_by="dt", settings=settings
    )
    same = [(1, "a", "d1"), (2, "b", "d1")]
    for t in (table, keyed):
        t1, t2 = t.begin(), t.begin()
        t1.insert_into(spark.createDataFrame(same, SCHEMA))
        t2.insert_into(spark.createDataFrame(same, SCHEMA))
        first = t1.commit()
        assert first is not None
        if t is keyed:
            from ordo.errors import CommitConflictError

            with pytest.raises(CommitConflictError):
                t2.commit()
            continue
        second = t2.commit()
        assert second is not None and second.id_version == first.id_version + 1
        assert second.rebase.value == "NONE"
    assert rows(table.toDF()) == sorted(same + same)
    assert rows(keyed.toDF()) == sorted(same)


def test_keyless_streaming_sink_and_read(spark: Any, writer_stack: Any, tmp_path: Path) -> None:  # noqa: F811
    """The sink appends each micro-batch (duplicates kept, exactly once); a stream of the table's rows delivers
    every appended row once and hides the row id; an UPDATE fails that stream like on a key table."""
    from pyspark.errors import StreamingQueryException

    settings = writer_stack.settings
    opts = settings_options(settings)
    table = DeltaTable.create(spark, "kl_stream", schema=SCHEMA, settings=settings)
    batches = [[(1, "a", "d1"), (1, "a", "d1")], [(1, "a", "d1"), (2, "b", "d2")]]
    source_dir = tmp_path / "source"
    source_dir.mkdir()
    sink_chk = str(tmp_path / "sink-chk")

    def sink() -> None:
        query = (
            spark.readStream.schema(SCHEMA)
            .json(str(source_dir))
            .writeStream.format("ordo")
            .options(**opts)
            .option("checkpointLocation", sink_chk)
            .start("kl_stream")
        )
        query.processAllAvailable()
        query.stop()
        assert query.exception() is None

    appended: list[Row] = []
    for n, batch in enumerate(batches):
        spark.createDataFrame(batch, SCHEMA).coalesce(1).write.mode("overwrite").json(str(tmp_path / f"b{n}"))
        for part in (tmp_path / f"b{n}").glob("part-*.json"):
            part.rename(source_dir / f"b{n}-{part.name}")
        sink()
        appended.extend(batch)
        assert rows(table.toDF()) == sorted(appended)
    sink()  # nothing new: nothing appended twice
    assert rows(table.toDF()) == sorted(appended)

    output, chk = str(tmp_path / "rows-out"), str(tmp_path / "rows-chk")

    def run(**options: str) -> None:
        query = (
            spark.readStream.format("ordo")
            .options(**opts, **options)
            .load("kl_stream")
            .writeStream.format("parquet")
            .option("path", output)
            .option("checkpointLocation", chk)
            .start()
        )
        query.processAllAvailable()
        query.stop()
        assert query.exception() is None

    run()
    table.insert_into(spark.createDataFrame([(2, "b", "d2")], SCHEMA))
    appended.append((2, "b", "d2"))
    run()
    assert rows(spark.read.parquet(output)) == sorted(appended)
    table.update({"v": "'z'"}, "id = 2")
    with pytest.raises(StreamingQueryException, match="skipChangeCommits"):
        run()
