"""The ``format("ordo")`` data source end to end: batch reads and writes, and the change feed in Delta's shape.

Each check compares with ``DeltaTable`` (the reference writer and reader) or
with a Python model of the table: a dict key -> row folded over the commits.
"""

from __future__ import annotations

from typing import Any

import pytest

from ordo.errors import CommitConflictError
from ordo.producer.table import DeltaTable
from ordo.spark.datasource import settings_options
from tests.chaos.common import wait_until
from tests.e2e.stack import writer_stack  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

SCHEMA = "id BIGINT, v STRING, dt STRING"


def rows(df: Any, *cols: str) -> list[tuple[Any, ...]]:
    names = cols or tuple(df.columns)
    return sorted(tuple(r[c] for c in names) for r in df.collect())


def frame(spark: Any, data: list[tuple[Any, ...]]) -> Any:
    return spark.createDataFrame(data, SCHEMA)


def test_batch_write_read_overwrite_and_change_feed(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    settings = writer_stack.settings
    opts = settings_options(settings)
    table = DeltaTable.create(
        spark, "ds_events", schema=SCHEMA, primary_key="id", partitioned_by="dt", settings=settings
    )
    model: dict[int, tuple[Any, ...]] = {}
    changes: list[tuple[Any, ...]] = []  # (version, change type, id, v, dt)

    def head() -> int:
        return table.version

    # v1: append through the data source = one INSERT INTO
    first = [(i, f"a{i}", "d1" if i % 2 else "d2") for i in range(10)]
    frame(spark, first).write.format("ordo").options(**opts).mode("append").save("ds_events")
    assert head() == 1
    assert table.decisions()[0].operation.value == "INSERT_INTO"
    for r in first:
        model[r[0]] = r
        changes.append((1, "insert", *r))
    assert rows(table.read()) == sorted(model.values())
    read = spark.read.format("ordo").options(**opts).load("ds_events")
    assert rows(read) == sorted(model.values())

    # v2: DeltaTable upsert of existing and new keys -> pre/post images and inserts
    second = [(1, "b1", "d1"), (2, "b2", "d2"), (20, "b20", "d1")]
    table.insert_into(frame(spark, second))
    for r in second:
        if r[0] in model:
            changes.append((2, "update_preimage", *model[r[0]]))
            changes.append((2, "update_postimage", *r))
        else:
            changes.append((2, "insert", *r))
        model[r[0]] = r

    # v3: DELETE carries the deleted values
    table.delete("id = 3 OR id = 4")
    for k in (3, 4):
        changes.append((3, "delete", *model.pop(k)))

    # v4: overwrite of one partition through the data source: deletes of its rows, then inserts
    new_d1 = [(100, "c100", "d1"), (1, "c1", "d1")]
    (
        frame(spark, new_d1)
        .write.format("ordo")
        .options(**opts)
        .mode("overwrite")
        .option("replaceWhere", "dt = 'd1'")
        .save("ds_events")
    )
    assert head() == 4
    for k in sorted(k for k, r in model.items() if r[2] == "d1"):
        changes.append((4, "delete", *model.pop(k)))
    for r in new_d1:
        model[r[0]] = r
        changes.append((4, "insert", *r))
    assert rows(table.read()) == sorted(model.values())

    # v5: a compaction yields no change rows
    table.compact("major")
    assert head() == 5

    # reads: head, versionAsOf, partition pruning
    def reader() -> Any:
        return spark.read.format("ordo").options(**opts)  # a DataFrameReader keeps its options: one per read

    assert rows(reader().load("ds_events")) == sorted(model.values())
    assert rows(reader().option("versionAsOf", 2).load("ds_events")) == rows(table.read(version=2))
    pruned = reader().load("ds_events").where("dt = 'd2'")
    assert rows(pruned) == sorted(r for r in model.values() if r[2] == "d2")

    # the batch change feed, Delta's shape, bounds inclusive
    feed = reader().option("readChangeFeed", "true").option("startingVersion", 1).load("ds_events")
    got = rows(feed, "_commit_version", "_change_type", "id", "v", "dt")
    assert got == sorted(changes)
    stamps = {c.id_version: c.timestamp.replace(tzinfo=None) for c in table.catalog.commits("ds_events", 1)}
    assert set(rows(feed, "_commit_version", "_commit_timestamp")) == set(stamps.items())  # v5 (compaction): no rows
    window = (
        spark.read.format("ordo")
        .options(**opts)
        .option("readChangeFeed", "true")
        .option("startingVersion", 2)
        .option("endingVersion", 3)
        .load("ds_events")
    )
    assert rows(window, "_commit_version", "_change_type", "id", "v", "dt") == sorted(
        c for c in changes if 2 <= c[0] <= 3
    )
    compact = (
        spark.read.format("ordo")
        .options(**opts)
        .option("readChangeFeed", "true")
        .option("ordo.changeFeedForm", "compact")
        .option("startingVersion", 4)
        .load("ds_events")
    )
    kinds = sorted(r["_change_type"] for r in compact.collect())
    assert kinds == ["truncate", "upsert", "upsert"]

    # a rejected write fails with the reason, and nothing is committed
    with pytest.raises(Exception, match="duplicate primary keys"):
        frame(spark, [(7, "x", "d2"), (7, "y", "d2")]).write.format("ordo").options(**opts).mode("append").save(
            "ds_events"
        )
    assert head() == 5
    assert issubclass(CommitConflictError, Exception)


def test_a_rejected_commit_fails_with_the_reason_and_deletes_its_files(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    """The writer objects Spark runs, driven by hand: tasks write, then an OVERWRITE commits, then the commit."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from ordo.spark.datasource import source_class
    from tests.e2e.stack import parquet_files

    settings = writer_stack.settings
    table = DeltaTable.create(
        spark, "ds_rejected", schema=SCHEMA, primary_key="id", partitioned_by="dt", settings=settings
    )
    schema = spark.createDataFrame([], SCHEMA).schema
    batch = pa.Table.from_pylist([{"id": 1, "v": "a", "dt": "d1"}], schema=to_arrow_schema(schema)).to_batches()
    source = source_class(settings)({"path": "ds_rejected"})

    writer = source.writer(schema, False)  # a batch append, pinned to version 0 when planned
    message = writer.write(iter(batch))
    assert len(parquet_files(table.location)) == 1
    table.truncate({"dt": "d1"})  # an OVERWRITE of that partition commits first
    with pytest.raises(CommitConflictError, match="CONFLICT_LATER_FAILS") as refused:
        writer.commit([message])
    assert refused.value.reason == "CONFLICT_LATER_FAILS"
    assert parquet_files(table.location) == [], "a refused write deletes its files"
    assert table.version == 1

    # a micro-batch reads nothing: the sink pins it to the head when it commits, so it goes in
    streamer = source_class(settings)({"path": "ds_rejected", "appId": "hand-driven"}).streamWriter(schema, False)
    message = streamer.write(iter(batch))
    table.truncate({"dt": "d1"})
    streamer.commit([message], 0)
    assert table.version == 3
    assert rows(table.read()) == [(1, "a", "d1")]
    committed = parquet_files(table.location)
    # the same query re-runs batch 0 (same txn id): the arbiter answers with the first decision, the re-run's
    # files are deleted and the committed ones are untouched
    streamer.commit([streamer.write(iter(batch))], 0)
    assert table.version == 3
    assert parquet_files(table.location) == committed
    # a restarted query replays batch 0 (a new writer, a new txn id): refused as already committed, counted as done
    restarted = source_class(settings)({"path": "ds_rejected", "appId": "hand-driven"}).streamWriter(schema, False)
    restarted.commit([restarted.write(iter(batch))], 0)
    assert table.version == 3
    # a rejection moves no version: wait until the consumer has applied it to see it in the history
    wait_until(lambda: table.decisions(1)[0].reason is not None, 20, "the rejection in the catalog")
    assert [d.reason for d in table.decisions(1)] == ["BATCH_ALREADY_COMMITTED"]
    assert parquet_files(table.location) == committed
    assert rows(table.read()) == [(1, "a", "d1")]


def test_time_travel_by_timestamp_overwrite_options_and_the_feed_by_time(
    spark: Any,
    writer_stack: Any,  # noqa: F811
) -> None:
    """``timestampAsOf``; ``mode("overwrite")`` of one partition by the ``partition`` option (both spellings) and of
    the whole table; the batch change feed between ``startingTimestamp`` and ``endingTimestamp``, bounds
    inclusive. Each against a model of the table per version."""
    settings = writer_stack.settings
    opts = settings_options(settings)
    table = DeltaTable.create(
        spark, "ds_options", schema=SCHEMA, primary_key="id", partitioned_by="dt", settings=settings
    )
    models: dict[int, dict[int, tuple[Any, ...]]] = {0: {}}

    def reader() -> Any:
        return spark.read.format("ordo").options(**opts)

    def writer(data: list[tuple[Any, ...]], mode: str) -> Any:
        return frame(spark, data).write.format("ordo").options(**opts).mode(mode)

    def stamp(version: int) -> str:
        return table.catalog.snapshot("ds_options", version=version).time_version.isoformat()

    writer([(i, f"a{i}", f"d{i % 3}") for i in range(9)], "append").save("ds_options")  # v1
    models[1] = {i: (i, f"a{i}", f"d{i % 3}") for i in range(9)}
    writer([(1, "b1", "d1"), (20, "b20", "d2")], "append").save("ds_options")  # v2
    models[2] = {**models[1], 1: (1, "b1", "d1"), 20: (20, "b20", "d2")}

    # timestampAsOf: the snapshot at the newest version whose time version is at or before it
    for version in (1, 2):
        at = reader().option("timestampAsOf", stamp(version)).load("ds_options")
        assert rows(at) == sorted(models[version].values())

    # the partition option, k=v/k=v: replaces that partition only
    writer([(30, "c30", "d2"), (31, "c31", "d2")], "overwrite").option("partition", "dt=d2").save("ds_options")  # v3
    models[3] = {k: r for k, r in models[2].items() if r[2] != "d2"} | {30: (30, "c30", "d2"), 31: (31, "c31", "d2")}
    assert table.decisions(1)[0].partitions == ({"dt": "d2"},)
    assert rows(reader().load("ds_options")) == sorted(models[3].values())
    # ... and as a JSON object; a row outside the partition is refused and nothing commits
    writer([(40, "e40", "d0")], "overwrite").option("partition", '{"dt": "d0"}').save("ds_options")  # v4
    models[4] = {k: r for k, r in models[3].items() if r[2] != "d0"} | {40: (40, "e40", "d0")}
    assert rows(reader().load("ds_options")) == sorted(models[4].values())
    with pytest.raises(Exception, match="rows outside the partition"):
        writer([(41, "x", "d1")], "overwrite").option("partition", "dt=d0").save("ds_options")
    assert table.version == 4

    # mode("overwrite") without a partition: the whole table, also partitions the rows have none in
    writer([(50, "f50", "d9")], "overwrite").save("ds_options")  # v5
    models[5] = {50: (50, "f50", "d9")}
    assert table.decisions(1)[0].partitions is None
    assert rows(reader().load("ds_options")) == sorted(models[5].values())

    # the batch change feed by time versions, both bounds inclusive, equals the model's changes
    def changes(version: int) -> list[tuple[Any, ...]]:
        before, after = models[version - 1], models[version]
        overwrite = version in (3, 4, 5)
        scope = {3: {"d2"}, 4: {"d0"}, 5: None}.get(version)
        found: list[tuple[Any, ...]] = []
        if overwrite:
            gone = [r for r in before.values() if scope is None or r[2] in scope]
            found += [(version, "delete", *r) for r in gone]
            found += [(version, "insert", *r) for k, r in after.items() if scope is None or r[2] in scope]
            return found
        for k, r in after.items():
            if k not in before:
                found.append((version, "insert", *r))
            elif before[k] != r:
                found += [(version, "update_preimage", *before[k]), (version, "update_postimage", *r)]
        return found

    feed = (
        reader()
        .option("readChangeFeed", "true")
        .option("startingTimestamp", stamp(2))
        .option("endingTimestamp", stamp(4))
        .load("ds_options")
    )
    assert rows(feed, "_commit_version", "_change_type", "id", "v", "dt") == sorted(
        changes(2) + changes(3) + changes(4)
    )
    since = reader().option("readChangeFeed", "true").option("startingTimestamp", stamp(4)).load("ds_options")
    assert rows(since, "_commit_version", "_change_type", "id", "v", "dt") == sorted(changes(4) + changes(5))


def test_options_are_a_contract(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    """Every option ordo honours is in docs/api.md's table and nothing else passes: a typo, a Delta option ordo
    does not honour yet, an option of another use each fail naming it. ``partitionOverwriteMode=dynamic``
    replaces only the partitions written; ``txnAppId`` + ``txnVersion`` make a batch write idempotent."""
    from pathlib import Path

    from ordo.spark.datasource import OPTIONS

    api = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    block = api.split("| option | applies to | meaning |\n| --- | --- | --- |\n", 1)[1].split("\n\n", 1)[0]
    documented = block.splitlines()
    declared = [f"| `{o.name}` | {', '.join(sorted(o.uses))} | {o.meaning} |" for o in OPTIONS]
    assert documented == declared, "docs/api.md's option table is the contract (ordo.spark.datasource.OPTIONS)"

    settings = writer_stack.settings
    opts = settings_options(settings)
    table = DeltaTable.create(
        spark, "ds_strict", schema=SCHEMA, primary_key="id", partitioned_by="dt", settings=settings
    )

    def write(data: list[tuple[Any, ...]], mode: str = "append", **options: str) -> None:
        frame(spark, data).write.format("ordo").options(**opts, **options).mode(mode).save("ds_strict")

    write([(1, "a", "d1"), (2, "b", "d2")])  # v1
    with pytest.raises(Exception, match=r"(?i)unknown option 'versionAsOff' \(did you mean versionAsOf\?\)"):
        spark.read.format("ordo").options(**opts).option("versionAsOff", 1).load("ds_strict").collect()
    with pytest.raises(Exception, match=r"ignoreDeletes: not supported \(deprecated in Delta\)"):
        write([(3, "c", "d1")], ignoreDeletes="true")
    with pytest.raises(Exception, match="versionAsOf applies to batch read, not to a batch write"):
        write([(3, "c", "d1")], versionAsOf="1")
    with pytest.raises(Exception, match="checkpointLocation applies to stream write, not to a batch read"):
        spark.read.format("ordo").options(**opts).option("checkpointLocation", "/x").load("ds_strict").collect()
    assert table.version == 1  # nothing refused committed anything
    # the table name by Spark's rules: case-insensitive (read and write); a database part is refused naming the rule
    assert spark.read.format("ordo").options(**opts).load("DS_Strict").count() == 2
    frame(spark, [(2, "b2", "d2")]).write.format("ordo").options(**opts).mode("append").save("`Ds_Strict`")  # v2
    assert table.version == 2
    with pytest.raises(Exception, match=r"db\.table is refused.*name the table alone \('ds_strict'\)"):
        spark.read.format("ordo").options(**opts).load("lake.ds_strict").collect()

    # dynamic partition overwrite: only the partitions the rows are in
    write([(5, "e", "d2")], "overwrite", partitionOverwriteMode="dynamic")  # v3
    assert table.decisions(1)[0].partitions == ({"dt": "d2"},)
    assert rows(table.toDF()) == [(1, "a", "d1"), (5, "e", "d2")]
    with pytest.raises(Exception, match="partitionOverwriteMode must be static or dynamic"):
        write([(5, "e", "d2")], "overwrite", partitionOverwriteMode="Dynamically")

    # idempotent writes: a txnVersion the app committed already is skipped, a newer one commits
    write([(10, "x", "d3")], txnAppId="nightly", txnVersion="7")  # v4
    write([(11, "y", "d3")], txnAppId="nightly", txnVersion="7")  # skipped
    write([(12, "z", "d3")], txnAppId="nightly", txnVersion="6")  # older: skipped
    assert table.version == 4
    write([(13, "w", "d3")], txnAppId="nightly", txnVersion="8")  # v5
    assert table.version == 5
    assert [r[0] for r in rows(table.toDF())] == [1, 5, 10, 13]
    assert (table.decisions(1)[0].app_id, table.decisions(1)[0].batch_id) == ("nightly", 8)
    with pytest.raises(Exception, match="needs both txnAppId and txnVersion"):
        write([(14, "v", "d3")], txnAppId="nightly")


def test_every_column_type_reads_back_through_each_reader(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    """A table with timestamp, date, decimal, binary and nested columns: the merged read, ``format("ordo")``, its
    change feed and the CLI's Spark-free reader (``ordo.services.files``) give back what was written."""
    import datetime as dt
    from decimal import Decimal

    from ordo.services.files import change_rows as cli_change_rows
    from ordo.services.files import live_row_count

    settings = writer_stack.settings
    schema = (
        "id BIGINT, at TIMESTAMP, day DATE, amount DECIMAL(12,2), raw BINARY, tags ARRAY<STRING>, "
        "attrs MAP<STRING,INT>, point STRUCT<x: DOUBLE, y: DOUBLE>, dt STRING"
    )
    table = DeltaTable.create(spark, "typed", schema=schema, primary_key="id", partitioned_by="dt", settings=settings)
    stamp = dt.datetime(2024, 5, 1, 12, 30, 15, 250_000)
    data = [
        (1, stamp, dt.date(2024, 5, 1), Decimal("12.50"), b"\x00\x01", ["a", "b"], {"k": 1}, (1.5, -2.0), "d1"),
        (2, None, None, None, None, None, None, None, "d2"),
    ]
    table.insert_into(spark.createDataFrame(data, table.schema))
    table.insert_into(spark.createDataFrame([(3, *data[0][1:])], table.schema))  # v2

    def collected(df: Any) -> list[tuple[Any, ...]]:
        return sorted(tuple(r[c] for c in ("id", "at", "day", "amount", "raw", "tags", "attrs")) for r in df.collect())

    expected = collected(spark.createDataFrame([*data, (3, *data[0][1:])], table.schema))
    assert collected(table.toDF()) == expected
    assert collected(spark.read.format("ordo").options(**settings_options(settings)).load("typed")) == expected
    feed = spark.read.format("ordo").options(**settings_options(settings)).option("readChangeFeed", "true")
    assert collected(feed.option("startingVersion", 1).load("typed")) == expected
    assert collected(table.changes(1, 2)) == expected
    assert live_row_count(table.snapshot()) == 3
    rows = cli_change_rows(table.catalog, "typed", table.catalog.commits("typed", 1))
    assert sorted(r["id"] for r in rows) == [1, 2, 3] and {r["_change_type"] for r in rows} == {"upsert"}
    assert [r["at"] for r in rows if r["id"] == 1] == [stamp.astimezone(dt.UTC)]
