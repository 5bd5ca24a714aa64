"""Bucketed tables end to end: every operation keeps each file in one (partition, bucket), reads have no shuffle.

Real broker, arbiter, consumer and Spark. After every operation the snapshot
(``DeltaTable.read()``, the shuffle plan and ``format("ordo")``) is compared
with a plain-Python model; every data file's keys hash to the file's bucket;
the physical plan of a read has no Exchange.
"""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq
import pytest

from ordo.producer.buckets import bucket_array, bucket_column
from ordo.producer.table import DeltaTable, InvalidOperationError
from tests.e2e.stack import writer_stack  # noqa: F401

from ..unit.test_buckets import VECTORS

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

SCHEMA = "id BIGINT NOT NULL, v STRING, dt STRING NOT NULL"


def plan_text(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def state(df: Any) -> dict[tuple[str, int], str | None]:
    rows = df.collect()
    found = {(r["dt"], r["id"]): r["v"] for r in rows}
    assert len(found) == len(rows), "a key appears twice"
    return found


def frame(spark: Any, rows: list[tuple[int, str | None, str]]) -> Any:
    return spark.createDataFrame(rows, SCHEMA)


def check(spark: Any, table: DeltaTable, model: dict[tuple[str, int], str | None]) -> None:
    """Reads agree with the model; files are bucketed; the read plan has no Exchange."""
    df = table.read()
    assert "Exchange" not in plan_text(df), plan_text(df)
    assert state(df) == model
    assert state(spark.read.format("ordo").load(table.name)) == model
    buckets = table.layout.buckets
    for entry in table.snapshot().files:
        assert 0 <= entry.bucket < buckets
        keys = pq.read_table(entry.absolute_path, columns=["id"])
        assert set(bucket_array(keys, ["id"], buckets).to_pylist()) == {entry.bucket}, entry.path


def test_spark_bucket_expression_matches_fixed_vectors(spark: Any) -> None:
    """Spark's built-in expression gives the committed vectors (the same as pyarrow's)."""

    df = spark.createDataFrame([(t,) for t, *_ in VECTORS], "k STRING")
    for i, n in enumerate((4, 7, 1024), start=1):
        got = [r[0] for r in df.select(bucket_column(df.schema, ["k"], n)).collect()]
        assert got == [v[i] for v in VECTORS]
    typed = spark.createDataFrame([(0, True), (-9223372036854775808, False)], "i BIGINT, b BOOLEAN")
    assert [r[0] for r in typed.select(bucket_column(typed.schema, ["i"], 1024)).collect()] == [606, 632]
    assert [r[0] for r in typed.select(bucket_column(typed.schema, ["b"], 7)).collect()] == [4, 1]
    assert [r[0] for r in typed.select(bucket_column(typed.schema, ["i"], 1)).collect()] == [0, 0]


def test_bucketed_table_through_every_operation(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    settings = writer_stack.settings
    table = DeltaTable.create(
        spark, "bucketed", schema=SCHEMA, primary_key="id", partitioned_by="dt", buckets=3, settings=settings
    )
    assert table.metadata.properties["ordo.buckets"] == "3"
    assert DeltaTable.open(spark, "bucketed", settings=settings).layout.buckets == 3
    model: dict[tuple[str, int], str | None] = {}

    base = [(i, f"a{i}", "x" if i % 2 else "y") for i in range(40)]
    result = table.insert_into(frame(spark, base))
    assert result is not None
    assert {f.bucket for f in result.added_files} == {0, 1, 2}
    model.update({(d, i): v for i, v, d in base})
    check(spark, table, model)

    for round_ in range(3):  # small upserts: merge-on-read records in every bucket
        rows = [(i, f"u{round_}-{i}", "x" if i % 2 else "y") for i in range(round_, 40, 4)]
        table.insert_into(frame(spark, rows))
        model.update({(d, i): v for i, v, d in rows})
    check(spark, table, model)

    table.update({"v": "concat(v, '!')"}, "id < 6")
    for key in [k for k in model if k[1] < 6]:
        model[key] = f"{model[key]}!"
    table.delete("id >= 35")
    model = {k: v for k, v in model.items() if k[1] < 35}
    check(spark, table, model)

    source = frame(spark, [(1, "m1", "x"), (2, "m2", "y"), (100, "m100", "y")])
    table.merge(
        source, "target.id = source.id AND target.dt = source.dt"
    ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    model.update({("x", 1): "m1", ("y", 2): "m2", ("y", 100): "m100"})
    check(spark, table, model)

    # compaction of one bucket: only that bucket's files are inputs and outputs
    before = {f.path: f.bucket for f in table.snapshot().files}
    minor = table.compact("minor", {"dt": "x"}, bucket=1)
    assert minor is not None
    assert {before[p] for p in minor.removed_files} == {1}
    assert {f.bucket for f in minor.added_files} == {1}
    check(spark, table, model)
    major = table.compact("major")
    assert major is not None
    assert {f.bucket for f in major.added_files} == {0, 1, 2}
    assert len(table.snapshot().files) == 6  # one base file per (partition, bucket)
    check(spark, table, model)

    with pytest.raises(InvalidOperationError, match="not a bucket"):
        table.compact("minor", bucket=3)
    clustered = table.cluster("v", {"dt": "x"})
    assert clustered is not None and {f.bucket for f in clustered.added_files} == {0, 1, 2}
    table.insert_overwrite(frame(spark, [(7, "o7", "y"), (8, "o8", "y")]), partition={"dt": "y"})
    model = {k: v for k, v in model.items() if k[0] != "y"}
    model.update({("y", 7): "o7", ("y", 8): "o8"})
    check(spark, table, model)

    # the format("ordo") sink buckets its files the same way
    frame(spark, [(200 + i, f"s{i}", "x") for i in range(12)]).write.format("ordo").mode("append").save("bucketed")
    model.update({("x", 200 + i): f"s{i}" for i in range(12)})
    check(spark, table, model)
    assert table.read().where("dt = 'x'").count() == sum(1 for k in model if k[0] == "x")


def test_unbucketed_table_keeps_working(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    table = DeltaTable.create(
        spark, "one_bucket", schema="id BIGINT, v DOUBLE", primary_key=["id", "v"], settings=writer_stack.settings
    )
    assert table.layout.buckets == 1  # a double key has no canonical text: one bucket
    table.insert_into(spark.createDataFrame([(1, 1.0), (2, 2.0)], "id BIGINT, v DOUBLE"))
    table.insert_into(spark.createDataFrame([(1, 1.0), (3, 3.0)], "id BIGINT, v DOUBLE"))
    assert {f.bucket for f in table.snapshot().files} == {0}
    df = table.read()
    assert "Exchange" not in plan_text(df)
    assert sorted(tuple(r) for r in df.collect()) == [(1, 1.0), (2, 2.0), (3, 3.0)]


def test_a_read_after_major_compaction_is_a_plain_scan_and_other_reads_drop_deletes(
    spark: Any,
    writer_stack: Any,  # noqa: F811
) -> None:
    """MAJOR_COMPACT output (live rows only) is read without the op column; other direct reads keep the filter."""
    table = DeltaTable.create(
        spark, "plain_after_major", schema=SCHEMA, primary_key="id", partitioned_by="dt", buckets=2,
        settings=writer_stack.settings,
    )  # fmt: skip
    table.insert_into(frame(spark, [(i, f"a{i}", "x") for i in range(20)]))
    table.insert_into(frame(spark, [(i, f"b{i}", "x") for i in range(5)]))
    table.delete("id >= 15")
    model = {("x", i): (f"b{i}" if i < 5 else f"a{i}") for i in range(15)}
    merged = table.read()
    assert "ordo_files" in plan_text(merged)  # groups with several files: merged in their tasks, deletes applied
    assert state(merged) == model
    table.compact("major")
    assert {f.operation for f in table.snapshot().files} == {"MAJOR_COMPACT"}
    compacted = table.read()
    plan = plan_text(compacted)
    assert "_ordo_op" not in plan and "ordo_files" not in plan, plan  # Spark's Parquet scan; op not read or tested
    assert "Exchange" not in plan_text(compacted)
    assert state(compacted) == model
    # beside a group whose lone file is an INSERT's (it may hold delete records), the filter is back
    table.insert_into(frame(spark, [(50, "c50", "w")]))
    mixed = table.read()
    assert "_ordo_op" in plan_text(mixed)
    assert state(mixed) == {**model, ("w", 50): "c50"}
