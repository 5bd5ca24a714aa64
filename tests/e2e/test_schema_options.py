"""Schema changes with a write, end to end on the real stack against a Python model of the table.

``mergeSchema=true`` (the data source, ``DeltaTable.insert_into``/``insert_overwrite`` and a ``Transaction``'s
writes with ``merge_schema=True``): the columns the rows bring are added in the same commit as the rows; rows
written before read null in them on every read path (snapshot, time travel, change feed); a write that fails
leaves the schema unchanged; a transaction pinned before the change is refused ``SCHEMA_CHANGED``.
"""

from __future__ import annotations

from typing import Any

import pytest

from ordo.errors import CommitConflictError
from ordo.producer.table import DeltaTable
from ordo.spark.datasource import settings_options
from tests.e2e.stack import writer_stack  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


def rows(df: Any, *cols: str) -> list[tuple[Any, ...]]:
    names = cols or tuple(df.columns)
    return sorted((tuple(r[c] for c in names) for r in df.collect()), key=repr)


def test_merge_schema_adds_the_rows_columns_in_the_same_commit(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    settings = writer_stack.settings
    opts = settings_options(settings)
    table = DeltaTable.create(
        spark, "merged", schema="id BIGINT, v STRING, dt STRING", primary_key="id", partitioned_by="dt",
        settings=settings,
    )  # fmt: skip
    columns = ["id", "v", "dt"]
    model: dict[int, dict[str, Any]] = {}

    def fold(data: list[tuple[Any, ...]], names: list[str]) -> None:
        for r in data:
            model[r[0]] = dict(zip(names, r, strict=True))

    def expected(names: list[str]) -> list[tuple[Any, ...]]:
        return sorted((tuple(row.get(c) for c in names) for row in model.values()), key=repr)

    def write(data: list[tuple[Any, ...]], ddl: str, mode: str = "append", **options: str) -> None:
        spark.createDataFrame(data, ddl).write.format("ordo").options(**opts).options(**options).mode(mode).save(
            "merged"
        )

    first = [(i, f"a{i}", "d1" if i % 2 else "d2") for i in range(6)]
    write(first, "id BIGINT, v STRING, dt STRING")  # v1
    fold(first, columns)

    # without mergeSchema a new column is refused naming it, and nothing changes
    with pytest.raises(Exception, match=r"unexpected \['score'\]"):
        write([(10, "x", "d1", 5)], "id BIGINT, v STRING, dt STRING, score INT")
    assert table.version == 1

    # v2: one INSERT INTO that adds `score` with its rows; the rows written before read null in it
    second = [(1, "b1", "d1", 7), (10, "b10", "d2", 9)]
    write(second, "id BIGINT, v STRING, dt STRING, score INT", mergeSchema="true")
    assert table.version == 2
    assert table.decisions(1)[0].operation.value == "INSERT_INTO"
    at_2, at_1 = (table.catalog.snapshot("merged", version=v) for v in (2, 1))
    assert "`score` int" in at_2.metadata.schema and "score" not in at_1.metadata.schema
    assert any(f.added_version == 2 for f in at_2.files), "the rows and the column are one commit"
    columns = [*columns, "score"]
    fold(second, columns)
    read = spark.read.format("ordo").options(**opts).load("merged")
    assert read.columns == columns
    assert rows(read, *columns) == expected(columns)
    assert rows(DeltaTable.forName(spark, "merged", settings=settings).read(), *columns) == expected(columns)
    # time travel: version 1 has the schema of version 1
    old = spark.read.format("ordo").options(**opts).option("versionAsOf", 1).load("merged")
    assert old.columns == ["id", "v", "dt"] and rows(old) == sorted(first, key=repr)
    # the change feed: the v1 inserts have null scores, v2's upsert of id 1 is an update pair
    feed = spark.read.format("ordo").options(**opts).option("readChangeFeed", "true").option("startingVersion", 1)
    got = rows(feed.load("merged"), "_commit_version", "_change_type", "id", "score")
    want = [(1, "insert", r[0], None) for r in first]
    want += [(2, "update_preimage", 1, None), (2, "update_postimage", 1, 7), (2, "insert", 10, 9)]
    assert got == sorted(want, key=repr)

    # a write that fails leaves the schema unchanged: refused before publishing (duplicate keys) ...
    with pytest.raises(Exception, match="duplicate primary keys"):
        write([(20, "c", "d1", 1, "x"), (20, "d", "d1", 1, "y")], "id BIGINT, v STRING, dt STRING, score INT, a STRING",
              mergeSchema="true")  # fmt: skip
    # ... and refused by the arbiter (an added column must have an atomic type): its files are deleted
    with pytest.raises(Exception, match=r"rejected \(INVALID_METADATA\): added column 'tags' has type"):
        write([(21, "c", "d1", 1, ["t"])], "id BIGINT, v STRING, dt STRING, score INT, tags ARRAY<STRING>",
              mergeSchema="true")  # fmt: skip
    assert table.version == 2 and DeltaTable.forName(spark, "merged", settings=settings).schema.fieldNames() == columns
    assert rows(spark.read.format("ordo").options(**opts).load("merged"), *columns) == expected(columns)

    # a transaction pinned before a schema change is refused SCHEMA_CHANGED (its snapshot lacks the column)
    stale = table.begin()
    stale.insert_into(spark.createDataFrame([(30, "s", "d1", 3)], "id BIGINT, v STRING, dt STRING, score INT"))

    # v3: an overwrite of one partition with mergeSchema, through replaceWhere; other partitions keep null notes
    third = [(40, "e", "d1", 4, "n40")]
    write(third, "id BIGINT, v STRING, dt STRING, score INT, note STRING", "overwrite", mergeSchema="true",
          replaceWhere="dt = 'd1'")  # fmt: skip
    assert table.version == 3
    with pytest.raises(CommitConflictError, match="SCHEMA_CHANGED"):
        stale.commit()
    columns = [*columns, "note"]
    for key in [k for k, r in model.items() if r["dt"] == "d1"]:
        del model[key]
    fold(third, columns)
    assert rows(spark.read.format("ordo").options(**opts).load("merged"), *columns) == expected(columns)

    # v4, v5: DeltaTable and Transaction writes with merge_schema=True
    fourth = [(50, "f", "d2", 5, None, 1.5)]
    names = "id BIGINT, v STRING, dt STRING, score INT, note STRING, ratio DOUBLE"
    result = table.insert_into(spark.createDataFrame(fourth, names), merge_schema=True)
    assert result is not None and result.id_version == 4 and result.decision.metadata is not None
    columns = [*columns, "ratio"]
    fold(fourth, columns)
    assert table.schema.fieldNames() == columns, "the handle's schema follows its own commit"
    with table.begin() as txn:
        fifth = [(60, "g", "d3", None, "n60", 2.0, True)]
        txn.insert_overwrite(spark.createDataFrame(fifth, names + ", flag BOOLEAN"), merge_schema=True)
        assert txn.commit() is not None
    columns = [*columns, "flag"]
    fold(fifth, columns)
    assert rows(table.read(), *columns) == expected(columns)
    assert rows(table.read(version=3), *columns[:5]) == sorted(
        (tuple(r) for r in table.read(version=3).select(*columns[:5]).collect()), key=repr
    )
    assert table.read(version=3).columns == columns[:5]


def test_merge_schema_on_a_keyless_table(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    settings = writer_stack.settings
    opts = settings_options(settings)
    table = DeltaTable.create(spark, "merged_log", schema="line STRING", settings=settings)
    spark.createDataFrame([("a",), ("a",)], "line STRING").write.format("ordo").options(**opts).mode("append").save(
        "merged_log"
    )
    frame = spark.createDataFrame([("b", 1)], "line STRING, n INT")
    frame.write.format("ordo").options(**opts).option("mergeSchema", "true").mode("append").save("merged_log")
    assert table.version == 2
    read = spark.read.format("ordo").options(**opts).load("merged_log")
    assert read.columns == ["line", "n"]
    assert rows(read) == [("a", None), ("a", None), ("b", 1)]
    with pytest.raises(Exception, match="mergeSchema must be true or false"):
        frame.write.format("ordo").options(**opts).option("mergeSchema", "yes").mode("append").save("merged_log")


def test_overwrite_schema_replaces_the_schema_in_one_commit(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    """``overwriteSchema=true`` with ``mode("overwrite")``: the rows' schema (columns dropped, retyped, added,
    reordered) is the table's from that one commit on; older versions keep theirs; key and partition columns
    cannot change (refused naming them, as are the other modes)."""
    from ordo.producer.data import InvalidOperationError

    settings = writer_stack.settings
    opts = settings_options(settings)
    table = DeltaTable.create(
        spark, "reshaped", schema="id BIGINT, v STRING, amount INT, dt STRING", primary_key="id",
        partitioned_by="dt", settings=settings,
    )  # fmt: skip
    first = [(i, f"a{i}", i * 10, "d1" if i % 2 else "d2") for i in range(6)]
    old_ddl = "id BIGINT, v STRING, amount INT, dt STRING"

    def write(data: list[tuple[Any, ...]], ddl: str, mode: str = "overwrite", **options: str) -> None:
        spark.createDataFrame(data, ddl).write.format("ordo").options(**opts).options(**options).mode(mode).save(
            "reshaped"
        )

    write(first, old_ddl, "append")  # v1
    new_ddl = "id BIGINT, dt STRING, amount DOUBLE, label STRING"
    second = [(1, "d1", 1.5, "x"), (7, "d3", 7.5, None)]
    for mode, extra, message in (
        ("append", {}, "overwriteSchema replaces the table's schema with mode\\('overwrite'\\) of the whole table"),
        ("overwrite", {"replaceWhere": "dt = 'd1'"}, "not with append, partition, replaceWhere"),
        ("overwrite", {"partitionOverwriteMode": "dynamic"}, "not with append, partition, replaceWhere"),
        ("overwrite", {}, None),  # without overwriteSchema: the rows do not match the table
    ):
        flags = {"overwriteSchema": "true"} if message is not None else {}
        with pytest.raises(Exception, match=message or r"the rows do not match table reshaped"):
            write(second, new_ddl, mode, **flags, **extra)
    # key and partition columns keep their definition: refused before anything is written
    with pytest.raises(Exception, match=r"keeps the key and partition columns \['id', 'dt'\].*other types \['id: int"):
        write([(1, "d1", 1.5)], "id INT, dt STRING, amount DOUBLE", overwriteSchema="true")
    with pytest.raises(Exception, match=r"keeps the key and partition columns.*missing \['dt'\]"):
        write([(1, 1.5)], "id BIGINT, amount DOUBLE", overwriteSchema="true")
    assert table.version == 1

    write(second, new_ddl, overwriteSchema="true")  # v2: one INSERT OVERWRITE of the whole table
    assert table.version == 2 and table.decisions(1)[0].operation.value == "INSERT_OVERWRITE"
    read = spark.read.format("ordo").options(**opts).load("reshaped")
    assert read.columns == ["id", "dt", "amount", "label"]
    assert rows(read) == sorted(second, key=repr)
    assert [f.dataType.simpleString() for f in read.schema.fields] == ["bigint", "string", "double", "string"]
    old = spark.read.format("ordo").options(**opts).option("versionAsOf", 1).load("reshaped")
    assert old.columns == ["id", "v", "amount", "dt"] and rows(old) == sorted(first, key=repr)
    feed = spark.read.format("ordo").options(**opts).option("readChangeFeed", "true").option("startingVersion", 2)
    # the overwrite's change rows: every old row deleted (read under the new schema: a dropped column is gone, a
    # retyped one cast, a new one null), then its inserts
    want = [("delete", r[0], r[3], float(r[2]), None) for r in first] + [("insert", *r) for r in second]
    assert rows(feed.load("reshaped"), "_change_type", "id", "dt", "amount", "label") == sorted(want, key=repr)

    # the DeltaTable path: a whole-table overwrite with overwrite_schema=True; a partial one is refused
    reshaped = DeltaTable.forName(spark, "reshaped", settings=settings)
    third = [(3, "d2", 3.0)]
    with pytest.raises(InvalidOperationError, match="pass whole_table=True"):
        reshaped.insert_overwrite(
            spark.createDataFrame(third, "id BIGINT, dt STRING, amount DOUBLE"), overwrite_schema=True
        )
    result = reshaped.insert_overwrite(
        spark.createDataFrame(third, "id BIGINT, dt STRING, amount DOUBLE"), whole_table=True, overwrite_schema=True
    )
    assert result is not None and result.id_version == 3
    assert reshaped.schema.fieldNames() == ["id", "dt", "amount"]
    assert rows(reshaped.read()) == [(3, "d2", 3.0)]
    assert table.read(version=2).columns == ["id", "dt", "amount", "label"]


def test_merge_schema_on_the_streaming_sink(spark: Any, writer_stack: Any, tmp_path: Any) -> None:  # noqa: F811
    """``writeStream.format("ordo").option("mergeSchema", "true")``: the first micro-batch adds the stream's new
    column with its rows; the later ones append under the schema it made (as Delta's streaming sink)."""
    settings = writer_stack.settings
    table = DeltaTable.create(spark, "streamed", schema="id BIGINT, v STRING", primary_key="id", settings=settings)
    table.insert_into(spark.createDataFrame([(0, "old")], "id BIGINT, v STRING"))
    source = tmp_path / "in"
    source.mkdir()
    for batch in range(3):  # one file per micro-batch
        spark.createDataFrame([(10 * batch + i, f"s{batch}", batch) for i in (1, 2)], "id BIGINT, v STRING, n INT")\
            .coalesce(1).write.parquet(str(source / f"b{batch}"))  # fmt: skip
    stream = (
        spark.readStream.schema("id BIGINT, v STRING, n INT")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source / "b*"))
        .writeStream.format("ordo")
        .options(**settings_options(settings))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .option("mergeSchema", "true")
        .trigger(availableNow=True)
        .start("streamed")
    )
    stream.awaitTermination(300)
    assert stream.exception() is None
    assert table.version == 4  # the INSERT INTO above, then one commit per micro-batch
    assert [c.name for c in table.toDF().schema.fields] == ["id", "v", "n"]
    expected = [(0, "old", None)] + [(10 * b + i, f"s{b}", b) for b in range(3) for i in (1, 2)]
    assert rows(table.toDF(), "id", "v", "n") == sorted(expected, key=repr)
    assert rows(table.read(version=1), "id", "v") == [(0, "old")]
    assert table.read(version=1).columns == ["id", "v"]  # before the stream
    assert table.read(version=2).columns == ["id", "v", "n"]  # its first micro-batch added n with its rows
