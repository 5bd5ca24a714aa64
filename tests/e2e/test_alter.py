"""``DeltaTable.alter`` end to end: Spark writes before and after, reads at every version through Spark,
``format("ordo")`` and pyarrow, the change feed and the history; a stale transaction is refused."""

from __future__ import annotations

from typing import Any

import pytest

from ordo.errors import CommitConflictError
from ordo.producer.table import DeltaTable
from ordo.services.files import change_rows
from ordo.spark.datasource import settings_options
from tests.e2e.stack import writer_stack  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

SCHEMA = "id BIGINT, v STRING, dt STRING"


def rows_of(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def test_alter_adds_a_column_older_versions_keep_their_schema(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    settings = writer_stack.settings
    table = DeltaTable.create(spark, "altered", schema=SCHEMA, primary_key="id", partitioned_by="dt", settings=settings)
    table.insert_into(spark.createDataFrame([(1, "a", "d1"), (2, "b", "d2")], SCHEMA))  # v1
    stale = table.begin()  # pinned to v1, staged before the ALTER, committed after it
    stale.insert_into(spark.createDataFrame([(3, "c", "d1")], SCHEMA))

    result = table.alter("note STRING", set_properties={"owner": "team-a"})  # v2
    assert result.id_version == 2 and result.time_version is not None
    assert table.schema.fieldNames() == ["id", "v", "dt", "note"]
    assert table.metadata.properties["owner"] == "team-a"
    with pytest.raises(CommitConflictError) as rejected:
        stale.commit()
    assert rejected.value.reason == "SCHEMA_CHANGED"
    assert table.version == 2

    new = "id BIGINT, v STRING, dt STRING, note STRING"
    table.insert_into(spark.createDataFrame([(2, "b2", "d2", "n2"), (4, "d", "d1", None)], new))  # v3

    # Spark reads: the head has the column (NULL in the file written before it), older versions have not.
    assert table.read().columns == ["id", "v", "dt", "note"]
    assert rows_of(table.read()) == [(1, "a", "d1", None), (2, "b2", "d2", "n2"), (4, "d", "d1", None)]
    assert table.read(version=1).columns == ["id", "v", "dt"]
    assert rows_of(table.read(version=1)) == [(1, "a", "d1"), (2, "b", "d2")]
    assert rows_of(table.read(version=2)) == [(1, "a", "d1", None), (2, "b", "d2", None)]

    # format("ordo"): the same, versionAsOf included.
    opts = settings_options(settings)
    head = spark.read.format("ordo").options(**opts).load("altered")
    assert head.columns == ["id", "v", "dt", "note"]
    assert rows_of(head) == rows_of(table.read())
    old = spark.read.format("ordo").options(**opts).option("versionAsOf", 1).load("altered")
    assert old.columns == ["id", "v", "dt"] and rows_of(old) == [(1, "a", "d1"), (2, "b", "d2")]

    # The change feed (pyarrow path) reads the old file's rows with a NULL note; the ALTER adds no rows.
    commits = table.catalog.commits("altered", 1, 3)
    assert [c.operation.value for c in commits] == ["INSERT_INTO", "ALTER_TABLE", "INSERT_INTO"]
    feed = change_rows(table.catalog, "altered", commits)
    assert sorted((r["_commit_version"], r["id"], r["note"]) for r in feed) == [
        (1, 1, None),
        (1, 2, None),
        (3, 2, "n2"),
        (3, 4, None),
    ]
    spark_feed = table.changes(1, 3)
    assert sorted((r["_commit_version"], r["id"], r["note"]) for r in spark_feed.collect()) == sorted(
        (r["_commit_version"], r["id"], r["note"]) for r in feed
    )

    # DESCRIBE HISTORY shows it, and the rejected stale commit with its reason.
    history = table.history(include_rejected=True).collect()
    altered = [h for h in history if h["ordoOperation"] == "ALTER_TABLE"]
    assert {h["operation"] for h in altered} == {"ALTER TABLE"}
    assert len(altered) == 1 and altered[0]["version"] == 2
    assert any(h["reason"] == "SCHEMA_CHANGED" and h["version"] is None for h in history)

    # A second handle opened before the change writes the new schema once it begins a transaction.
    other = DeltaTable.open(spark, "altered", settings=settings)
    table.alter("score DOUBLE")  # v4
    other.insert_into(spark.createDataFrame([(5, "e", "d2", "n5", 0.5)], new + ", score DOUBLE"))  # v5
    assert rows_of(table.read().where("id = 5")) == [(5, "e", "d2", "n5", 0.5)]

    # What the arbiter does not support is refused with its reason, and nothing changes.
    with pytest.raises(CommitConflictError) as bad:
        table.alter(set_properties={"ordo.buckets": "8"})
    assert bad.value.reason == "UNSUPPORTED_ALTER"
    assert table.version == 5
