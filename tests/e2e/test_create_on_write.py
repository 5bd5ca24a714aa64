"""A write to a table that does not exist creates it, as in Delta (issue 21, item 0): batch and streaming.

Each table is compared with a plain-Python model of what was written; the created table's definition (key,
partition columns, schema) with what the options asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ordo import DeltaTable
from ordo.spark.datasource import settings_options
from tests.e2e.stack import writer_stack  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

ROWS = [(1, "a", "x"), (2, "b", "y"), (2, "b", "y")]


def rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.select("id", "v", "dt").collect())


@pytest.fixture
def write(spark: Any, writer_stack: Any) -> Any:  # noqa: F811
    """``df.write.format("ordo")`` with the stack's settings."""

    def writer(data: list[tuple[Any, ...]], mode: str, **options: str) -> Any:
        df = spark.createDataFrame(data, "id BIGINT, v STRING, dt STRING")
        return df.write.format("ordo").options(**settings_options(writer_stack.settings), **options).mode(mode)

    return writer


def test_an_append_to_a_new_name_creates_a_keyless_table(spark: Any, writer_stack: Any, write: Any) -> None:  # noqa: F811
    write(ROWS, "append").save("made_by_append")
    write(ROWS[:1], "append").save("made_by_append")
    table = DeltaTable.forName(spark, "made_by_append", settings=writer_stack.settings)
    assert rows(table.toDF()) == sorted(ROWS + ROWS[:1]), "a keyless table keeps every row appended"
    detail = table.detail().collect()[0]
    assert list(detail["partitionColumns"]) == []
    assert [f.name for f in table.toDF().schema.fields] == ["id", "v", "dt"]
    assert [r["operation"] for r in table.history().collect()][-1] == "CREATE TABLE"


def test_an_overwrite_creates_a_keyed_partitioned_table_from_options(
    spark: Any,
    writer_stack: Any,  # noqa: F811
    write: Any,
) -> None:
    write(ROWS[:2], "overwrite", **{"ordo.primaryKey": "id", "ordo.partitionBy": "dt"}).save("made_by_overwrite")
    table = DeltaTable.forName(spark, "made_by_overwrite", settings=writer_stack.settings)
    detail = table.detail().collect()[0]
    snapshot = table.snapshot()
    assert (detail["format"], detail["name"], list(detail["partitionColumns"]), list(detail["primaryKey"])) == (
        "ordo",
        "made_by_overwrite",
        ["dt"],
        ["id"],
    )
    assert (detail["numFiles"], detail["sizeInBytes"], detail["version"]) == (
        len(snapshot.files),
        sum(f.size_bytes for f in snapshot.files),
        snapshot.id_version,
    )
    write([(2, "c", "y"), (3, "d", "x")], "append").save("made_by_overwrite")
    assert rows(table.toDF()) == [(1, "a", "x"), (2, "c", "y"), (3, "d", "x")], "a key table upserts"
    write([(9, "z", "x")], "overwrite").save("made_by_overwrite")
    assert rows(table.toDF()) == [(9, "z", "x")]


def test_a_stream_to_a_new_name_creates_the_table(spark: Any, writer_stack: Any, tmp_path: Path) -> None:  # noqa: F811
    source = tmp_path / "in"
    source.mkdir()
    spark.createDataFrame(ROWS, "id BIGINT, v STRING, dt STRING").write.json(str(source / "part"))
    query = (
        spark.readStream.schema("id BIGINT, v STRING, dt STRING")
        .json(str(source / "part"))
        .writeStream.format("ordo")
        .options(**settings_options(writer_stack.settings))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start("made_by_stream")
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    table = DeltaTable.forName(spark, "made_by_stream", settings=writer_stack.settings)
    assert rows(table.toDF()) == sorted(ROWS)


def test_a_definition_that_cannot_be_a_table_is_refused_and_nothing_is_created(
    spark: Any,
    writer_stack: Any,  # noqa: F811
    write: Any,
) -> None:
    with pytest.raises(Exception, match="nope"):
        write(ROWS, "append", **{"ordo.primaryKey": "nope"}).save("never_made")
    assert not DeltaTable.exists(spark, "never_made", settings=writer_stack.settings)
    with pytest.raises(Exception, match=r"ordo\.partitionBy"):
        write(ROWS, "append", **{"ordo.partitionBy": "dt,,v"}).save("never_made")
