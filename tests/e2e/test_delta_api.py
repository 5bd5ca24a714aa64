"""The delta-spark calls on ``DeltaTable``: lookup, history, update/delete with Delta's arguments, MERGE,
OPTIMIZE, VACUUM's floor and RESTORE, each checked against a Python model of the table (key -> row)."""

from __future__ import annotations

from typing import Any

import pytest

from ordo.consumer.errors import TableNotFoundError
from ordo.producer.table import DeltaTable
from ordo.schemas.errors import InvalidNameError
from ordo.services.vacuum import VacuumError
from tests.e2e.stack import writer_stack  # noqa: F401

MERGE_HISTORY = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

SCHEMA = "id BIGINT, amount BIGINT, dt STRING"


def rows_of(df: Any) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["amount"], r["dt"]) for r in df.collect())


def test_delta_spark_calls_against_a_model(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    settings = writer_stack.settings
    assert not DeltaTable.exists(spark, "payments", settings=settings)
    table = DeltaTable.createIfNotExists(
        spark, "payments", schema=SCHEMA, primary_key="id", partitioned_by="dt", settings=settings
    )
    again = DeltaTable.createIfNotExists(
        spark, "payments", schema=SCHEMA, primary_key="id", partitioned_by="dt", settings=settings
    )
    assert again.location == table.location
    assert DeltaTable.exists(spark, "payments", settings=settings)
    assert DeltaTable.forName(spark, "payments", settings=settings).name == "payments"
    # Spark's identifier rules: case-insensitive, backticks quote; a database part is refused naming the rule
    assert DeltaTable.forName(spark, "Payments", settings=settings).name == "payments"
    assert DeltaTable.forName(spark, "`PAYMENTS`", settings=settings).name == "payments"
    assert DeltaTable.exists(spark, "Payments", settings=settings), "exists follows the same rule as forName"
    with pytest.raises(InvalidNameError, match=r"db\.table is refused.*name the table alone \('payments'\)"):
        DeltaTable.forName(spark, "sales.payments", settings=settings)
    assert DeltaTable.forPath(spark, table.location, settings=settings).name == "payments"
    with pytest.raises(TableNotFoundError):
        DeltaTable.forPath(spark, table.location + "-elsewhere", settings=settings)

    model = {i: (i, i * 10 - 30, "2024-05-01" if i % 2 else "2024-05-02") for i in range(8)}
    table.insert_into(spark.createDataFrame(list(model.values()), SCHEMA))  # v1
    assert rows_of(table.toDF()) == sorted(model.values())

    # Delta's argument order: update(condition, set); the condition pins one partition -> scoped to it
    result = table.update("dt = '2024-05-01' AND amount < 0", {"amount": "0"})  # v2
    assert result is not None
    updated = 0
    for k, r in list(model.items()):
        if r[2] == "2024-05-01" and r[1] < 0:
            model[k] = (k, 0, r[2])
            updated += 1
    assert rows_of(table.toDF()) == sorted(model.values())
    assert table.decisions(1)[0].partitions == ({"dt": "2024-05-01"},)

    result = table.delete("dt = '2024-05-02' AND amount < 0")  # v3
    assert result is not None
    deleted = sum(1 for r in model.values() if r[2] == "2024-05-02" and r[1] < 0)
    model = {k: r for k, r in model.items() if not (r[2] == "2024-05-02" and r[1] < 0)}
    # Delta's UPDATE and DELETE metrics, derived from the records each wrote (one per row changed)
    (upd,) = table.history().where("version = 2").collect()
    (dele,) = table.history().where("version = 3").collect()
    assert (upd["operation"], int(upd["operationMetrics"]["numUpdatedRows"])) == ("UPDATE", updated) != ("UPDATE", 0)
    assert (dele["operation"], int(dele["operationMetrics"]["numDeletedRows"])) == ("DELETE", deleted) != ("DELETE", 0)
    assert rows_of(table.toDF()) == sorted(model.values())
    assert table.decisions(1)[0].partitions == ({"dt": "2024-05-02"},)
    table.delete(condition="amount > 1000 OR id = 7")  # v4: an OR pins nothing -> whole-table scope
    model.pop(7, None)
    assert table.decisions(1)[0].partitions is None

    # MERGE: update matched with a condition, delete other matches, insert the rest (one transaction)
    source = spark.createDataFrame([(1, 111, "2024-05-01"), (3, -1, "2024-05-01"), (40, 400, "2024-05-02")], SCHEMA)
    before = table.version
    (
        table.merge(source, "target.id = source.id AND target.dt = source.dt")
        .whenMatchedDelete(condition="source.amount < 0")
        .whenMatchedUpdate(set={"amount": "source.amount + target.amount"})
        .whenNotMatchedInsertAll()
        .execute()
    )  # v5
    assert table.version == before + 1
    assert table.decisions(1)[0].operation.value == "UPDATE"
    model.pop(3)
    model[1] = (1, 111 + model[1][1], "2024-05-01")
    model[40] = (40, 400, "2024-05-02")
    assert rows_of(table.toDF()) == sorted(model.values())
    merged = dict(model)

    # OPTIMIZE maps onto compaction and clustering; data unchanged
    assert table.optimize().where("dt = '2024-05-01'").executeCompaction() is not None  # v6
    assert table.optimize().executeZOrderBy("amount") is not None  # v7
    assert rows_of(table.toDF()) == sorted(model.values())

    # history as a DataFrame with Delta's columns, newest first, limit honoured
    history = table.history(3).collect()
    assert [h["version"] for h in history] == [7, 6, 5]
    assert [h["operation"] for h in history] == ["OPTIMIZE", "OPTIMIZE", "MERGE"]  # Delta's names
    assert [h["ordoOperation"] for h in history] == ["CLUSTER", "MAJOR_COMPACT", "UPDATE"]
    merge_metrics = history[2]["operationMetrics"]
    assert int(merge_metrics["numOutputRows"]) == history[2]["numOutputRows"] == 3  # one record per row changed
    assert {k: int(merge_metrics[k]) for k in MERGE_HISTORY} == {
        "numTargetRowsInserted": 1,  # 40
        "numTargetRowsUpdated": 1,  # 1
        "numTargetRowsDeleted": 1,  # 3
    }
    assert history[1]["operationMetrics"]["numRemovedFiles"] != "0"  # the compaction removed what it rewrote
    assert all(h["outcome"] == "ACCEPTED" for h in history)
    assert table.history().count() == table.version + 1

    # a rejected intent shows in history on request, with its reason
    from ordo.errors import CommitConflictError

    with table.begin() as first, table.begin() as second:
        first.update({"amount": "amount + 1"}, "id = 1", partition={"dt": "2024-05-01"})
        second.update({"amount": "amount + 2"}, "id = 1", partition={"dt": "2024-05-01"})
        first.commit()
        with pytest.raises(CommitConflictError) as refused:
            second.commit()
    model[1] = (1, model[1][1] + 1, "2024-05-01")
    merged = dict(model)
    assert table.history().where("outcome = 'REJECTED'").count() == 0
    rejected = table.history(include_rejected=True).where("outcome = 'REJECTED'").collect()
    assert [(r["version"], r["reason"], r["txnId"]) for r in rejected] == [(None, refused.value.reason, second.txn_id)]

    # RESTORE: one metadata-only commit re-adding the old snapshot's files
    table.truncate()  # v9
    assert table.toDF().count() == 0
    table.restoreToVersion(8)  # v10
    assert table.decisions(1)[0].operation.value == "RESTORE"
    assert {f.path for f in table.snapshot().files} == {f.path for f in table.snapshot(8).files}
    assert rows_of(table.toDF()) == sorted(merged.values())
    stamp = table.catalog.snapshot("payments", version=1).time_version
    table.restoreToTimestamp(stamp)  # v11
    first = {i: (i, i * 10 - 30, "2024-05-01" if i % 2 else "2024-05-02") for i in range(8)}
    assert rows_of(table.toDF()) == sorted(first.values())

    # the change feed in Delta's form, through DeltaTable.changes
    feed = table.changes(5, 5, form="delta").collect()
    kinds = sorted((r["_change_type"], r["id"]) for r in feed)
    assert kinds == [("delete", 3), ("insert", 40), ("update_postimage", 1), ("update_preimage", 1)]

    # VACUUM: Delta's safety floor
    with pytest.raises(VacuumError, match="safety floor"):
        table.vacuum(1)
    assert table.vacuum(dry_run=True) == []


def test_restore_is_a_whole_table_overwrite(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    """RESTORE clears partitions created after the target version, and restoring an empty snapshot empties the
    table: each is one metadata-only RESTORE of the whole table (the very files of that version; ``rewrite=True``
    one INSERT OVERWRITE of its rows), checked against a model per version."""
    settings = writer_stack.settings
    table = DeltaTable.create(
        spark, "restored", schema=SCHEMA, primary_key="id", partitioned_by="dt", settings=settings
    )
    models: dict[int, dict[int, tuple[Any, ...]]] = {0: {}}
    model: dict[int, tuple[Any, ...]] = {}

    def commit(data: list[tuple[Any, ...]]) -> None:
        table.insert_into(spark.createDataFrame(data, SCHEMA))
        model.update({r[0]: r for r in data})
        models[table.version] = dict(model)

    commit([(1, 10, "2024-05-01"), (2, 20, "2024-05-02")])  # v1
    commit([(3, 30, "2024-05-03"), (1, 11, "2024-05-01")])  # v2: a partition v1 did not have
    commit([(4, 40, "2024-05-04")])  # v3: another one
    assert rows_of(table.toDF()) == sorted(model.values())

    restored = table.restoreToVersion(1)  # v4
    assert restored is not None and restored.decision is not None and restored.decision.restore_version == 1
    restore = table.decisions(1)[0]
    assert (restore.operation.value, restore.partitions) == ("RESTORE", None)
    assert {f.path for f in table.snapshot().files} == {f.path for f in table.snapshot(1).files}
    assert rows_of(table.toDF()) == sorted(models[1].values())
    assert {tuple(f.partition.items()) for f in table.snapshot().files} == {
        (("dt", "2024-05-01"),),
        (("dt", "2024-05-02"),),
    }

    table.restoreToVersion(0)  # v5: the empty table as created
    assert table.decisions(1)[0].partitions is None
    assert table.toDF().count() == 0
    assert table.snapshot().files == ()

    table.restoreToVersion(3, rewrite=True)  # v6: everything back, rewritten
    assert table.decisions(1)[0].operation.value == "INSERT_OVERWRITE"
    assert rows_of(table.toDF()) == sorted(models[3].values())
    assert not {f.path for f in table.snapshot().files} & {f.path for f in table.snapshot(3).files}
    empty_stamp = table.catalog.snapshot("restored", version=5).time_version
    table.restoreToTimestamp(empty_stamp)  # v7: by time, to the emptied table
    assert table.toDF().count() == 0
    assert table.version == 7


def test_scope_from_conditions_update_everything_exists_and_vacuum_override(
    spark: Any,
    writer_stack: Any,  # noqa: F811
) -> None:
    """IN lists and partial pins narrow UPDATE/DELETE/MERGE scopes (checked in the decisions); a MERGE pinned to
    one partition may insert elsewhere; ``update(None, set)`` updates every row; ``exists`` registers the data
    source; ``vacuum`` below the floor runs when Delta's check is off. Each against a model."""
    import os

    from ordo.producer.maintenance import RETENTION_CHECK_CONF
    from ordo.spark import registered_settings

    settings = writer_stack.settings
    # exists() registers format("ordo") with its settings, as every DeltaTable call does
    other = settings.with_overrides(warehouse=settings.warehouse + "-probe")
    assert not DeltaTable.exists(spark, "regions", settings=other)
    assert registered_settings(spark) == (True, other)
    assert not DeltaTable.exists(spark, "regions", settings=settings)
    assert registered_settings(spark) == (True, settings)

    schema = "id BIGINT, amount BIGINT, dt STRING, region STRING"
    table = DeltaTable.create(
        spark, "regions", schema=schema, primary_key="id", partitioned_by=["dt", "region"], settings=settings
    )
    places = [("a", "eu"), ("a", "us"), ("b", "eu"), ("b", "us"), ("c", "eu")]
    model = {i: (i, i, *places[i % len(places)]) for i in range(20)}

    def rows() -> list[tuple[Any, ...]]:
        return sorted((r["id"], r["amount"], r["dt"], r["region"]) for r in table.toDF().collect())

    def scope() -> list[tuple[str, str]] | None:
        found = table.decisions(1)[0].partitions
        return None if found is None else sorted((p["dt"], p["region"]) for p in found)

    table.insert_into(spark.createDataFrame(list(model.values()), schema))

    # IN lists on every partition column: every combination is the scope
    table.update("dt IN ('a', 'b') AND region IN ('eu') AND amount > 5", {"amount": "amount * 10"})
    for k, r in model.items():
        if r[2] in ("a", "b") and r[3] == "eu" and r[1] > 5:
            model[k] = (k, r[1] * 10, r[2], r[3])
    assert scope() == [("a", "eu"), ("b", "eu")]
    assert rows() == sorted(model.values())

    # a partial pin: the partitions of the pinned snapshot that match it
    table.delete("region = 'us' AND amount < 10")
    model = {k: r for k, r in model.items() if not (r[3] == "us" and r[1] < 10)}
    assert scope() == [("a", "us"), ("b", "us")]
    assert rows() == sorted(model.values())
    table.update("dt = 'c'", {"amount": "amount + 1"})  # one column of two pinned: the partitions with dt = c
    model = {k: (k, r[1] + 1, r[2], r[3]) if r[2] == "c" else r for k, r in model.items()}
    assert scope() == [("c", "eu")]
    assert rows() == sorted(model.values())

    # Delta's update(None, set) and update(set=...): every row, whole-table scope
    table.update(None, {"amount": "amount + 100"})
    model = {k: (k, r[1] + 100, r[2], r[3]) for k, r in model.items()}
    assert scope() is None
    assert rows() == sorted(model.values())
    table.update(set={"amount": "amount - 100"})
    model = {k: (k, r[1] - 100, r[2], r[3]) for k, r in model.items()}
    assert rows() == sorted(model.values())

    # a MERGE pinned to one partition whose not-matched rows are inserted into others: scope = read + written
    source = spark.createDataFrame(
        [(0, -1, "a", "eu"), (900, 9, "d", "eu"), (901, 9, "a", "us")], "id BIGINT, amount BIGINT, day STRING, r STRING"
    )
    (
        table.merge(source, "target.id = source.id AND target.dt = 'a' AND target.region = 'eu'")
        .whenMatchedUpdate(set={"amount": "source.amount"})
        .whenNotMatchedInsert(
            values={"id": "source.id", "amount": "source.amount", "dt": "source.day", "region": "source.r"}
        )
        .execute()
    )
    model[0] = (0, -1, "a", "eu")
    model[900], model[901] = (900, 9, "d", "eu"), (901, 9, "a", "us")
    assert scope() == [("a", "eu"), ("a", "us"), ("d", "eu")]
    assert rows() == sorted(model.values())
    # the same with unqualified pins (the source has no such columns)
    source = spark.createDataFrame([(902, 1, "e", "eu")], "id BIGINT, amount BIGINT, day STRING, r STRING")
    (
        table.merge(source, "target.id = source.id AND dt = 'b' AND region = 'eu'")
        .whenNotMatchedInsert(
            values={"id": "source.id", "amount": "source.amount", "dt": "source.day", "region": "source.r"}
        )
        .execute()
    )
    model[902] = (902, 1, "e", "eu")
    assert scope() == [("b", "eu"), ("e", "eu")]
    assert rows() == sorted(model.values())

    # VACUUM below the floor when Delta's check is off: files no version within 0 hours references go
    table.compact("major")
    old = {f.path: f.absolute_path for f in table.snapshot(1).files}
    with pytest.raises(VacuumError, match="safety floor"):
        table.vacuum(0)
    spark.conf.set(RETENTION_CHECK_CONF, "false")
    try:
        deleted = table.vacuum(0)
    finally:
        spark.conf.unset(RETENTION_CHECK_CONF)
    assert old and set(old) <= set(deleted)
    assert not any(os.path.exists(path) for path in old.values())
    assert not {f.path for f in table.snapshot().files} & set(deleted)
    assert rows() == sorted(model.values())


def test_the_canonical_merge_with_aliases_every_clause_kind_and_metrics(
    spark: Any,
    writer_stack: Any,  # noqa: F811
) -> None:
    """Delta's documented merge: ``forName(...).alias("t").merge(src.alias("s"), "t.id = s.id")`` with matched,
    not-matched and not-matched-by-source clauses, each with a condition; Delta's metrics; against a model."""
    settings = writer_stack.settings
    created = DeltaTable.create(spark, "canon", schema=SCHEMA, primary_key="id", partitioned_by="dt", settings=settings)
    model = {i: (i, i * 10, "a" if i % 2 else "b") for i in range(10)}
    created.insert_into(spark.createDataFrame(list(model.values()), SCHEMA))
    source = spark.createDataFrame([(1, 7, "a"), (2, -1, "b"), (4, 44, "b"), (20, 200, "a"), (21, -5, "b")], SCHEMA)

    table = DeltaTable.forName(spark, "canon", settings=settings).alias("t")
    assert rows_of(table.toDF().select("t.id", "t.amount", "t.dt")) == sorted(model.values())
    builder = (
        table.merge(source.alias("s"), "t.id = s.id")
        .whenMatchedDelete(condition="s.amount < 0")
        .whenMatchedUpdate(condition="t.amount > 5", set={"amount": "s.amount + t.amount"})
        .whenMatchedUpdateAll()
        .whenNotMatchedInsert(condition="s.amount > 0", values={"id": "s.id", "amount": "s.amount", "dt": "s.dt"})
        .whenNotMatchedBySourceUpdate(condition="t.dt = 'a'", set={"amount": "t.amount + 1000"})
        .whenNotMatchedBySourceDelete(condition="t.id >= 8")
    )
    metrics = builder.execute().collect()
    # the model: matched 1, 2, 4; not matched 20 (inserted), 21 (amount < 0: nothing)
    expected = dict(model)
    expected.pop(2)  # matched, s.amount < 0
    expected[1] = (1, 7 + 10, "a")  # matched, t.amount = 10 > 5: the first update clause
    expected[4] = (4, 44 + 40, "b")  # matched, t.amount = 40 > 5
    expected[20] = (20, 200, "a")
    updated_by_source, deleted_by_source = 0, 0
    for i, (_, amount, dt) in model.items():
        if i in (1, 2, 4):
            continue
        if dt == "a":
            expected[i] = (i, amount + 1000, dt)
            updated_by_source += 1
        elif i >= 8:
            expected.pop(i)
            deleted_by_source += 1
    assert rows_of(table.toDF()) == sorted(expected.values())
    assert [tuple(r) for r in metrics] == [
        (1 + 2 + 1 + updated_by_source + deleted_by_source, 2 + updated_by_source, 1 + deleted_by_source, 1)
    ]
    assert builder.result is not None and builder.result.id_version == table.version
    # history shows the MERGE with the metrics execute() returned, as the decisions log carries them
    (row,) = table.history(1).collect()
    (affected, num_updated, num_deleted, num_inserted) = tuple(metrics[0])
    shown = {k: int(v) for k, v in row["operationMetrics"].items()}
    assert (row["operation"], row["ordoOperation"], row["version"]) == ("MERGE", "UPDATE", table.version)
    assert (shown["numTargetRowsInserted"], shown["numTargetRowsUpdated"], shown["numTargetRowsDeleted"]) == (
        num_inserted,
        num_updated,
        num_deleted,
    )
    assert shown["numOutputRows"] == affected == row["numOutputRows"]  # each affected row is one record written
    assert shown["numTargetFilesAdded"] == shown["numAddedFiles"] == row["numFiles"] > 0
    (decision,) = table.decisions(1)
    assert decision.operation_metrics == {
        "numTargetRowsInserted": num_inserted,
        "numTargetRowsUpdated": num_updated,
        "numTargetRowsDeleted": num_deleted,
    }

    # a hostile writer's claims are refused by the real arbiter, the reason naming what is wrong
    from ordo.producer import CommitClient
    from ordo.schemas import CommitIntent, Operation

    lies = {"numTargetRowsInserted": 5, "numTargetRowsUpdated": 0, "numTargetRowsDeleted": 0}
    hostile = [
        (lies, "the metrics count 5 changed rows"),  # no file: no row can have changed
        ({"numSourceRows": 3}, "UPDATE may claim only"),
        ({**lies, "numTargetRowsInserted": -5}, "metric numTargetRowsInserted is -5"),
    ]
    head = table.version
    with CommitClient(settings=settings) as client:
        for n, (claimed, says) in enumerate(hostile):
            intent = CommitIntent(
                txn_id=f"hostile-{n}", table="canon", operation=Operation.UPDATE, read_version=head,
                operation_metrics=claimed,
            )  # fmt: skip
            refused = client.commit(intent, timeout=60.0)
            assert (refused.accepted, refused.reason) == (False, "INVALID_METRICS")
            assert says in (refused.message or ""), refused.message
    assert table.version == head
    shown_refused = table.history(include_rejected=True).where("txnId LIKE 'hostile-%'").collect()
    assert [(r["reason"], r["operationMetrics"]) for r in shown_refused] == [("INVALID_METRICS", {})] * 3
    # the log re-derives: `ordo replay --verify` decides every intent again, the MERGE's metrics byte for byte
    import json
    import os
    import subprocess

    from ordo.services.stack import ordo_args, settings_env

    env = {**os.environ, **settings_env(settings)}
    done = subprocess.run(
        ordo_args("replay", "canon", "--verify", "--json"), env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["ok"] and report["matched"] == report["decisions"] > 0, report
    assert report["rejected"].get("INVALID_METRICS") == 3, report
    assert table.decisions(1)[0].partitions is None  # rows no source row matches: the whole table was read

    # without an alias the names are target and source, as before; a merge that applies to nothing commits nothing
    unchanged = table.version
    nothing = (
        DeltaTable.forName(spark, "canon", settings=settings)
        .merge(spark.createDataFrame([(99, 1, "a")], SCHEMA), "target.id = source.id")
        .whenMatchedDelete()
        .execute()
    )
    assert [tuple(r) for r in nothing.collect()] == [(0, 0, 0, 0)] and table.version == unchanged
    with pytest.raises(Exception, match="alias"):
        table.alias("not an identifier")


def test_the_table_builder(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    """``DeltaTable.create(spark).tableName(...).addColumn(s)(...)...execute()`` and ``createIfNotExists``; the
    definition reaches the catalog as given; ``replace``/``createOrReplace`` replace the schema and the data in
    one commit; what ordo cannot do is refused with the reason."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from ordo.producer.data import InvalidTableError

    settings = writer_stack.settings
    table = (
        DeltaTable.create(spark, settings=settings)
        .tableName("built")
        .addColumn("id", "BIGINT", nullable=False)
        .addColumn("kind", StringType(), comment="what happened")
        .addColumns(StructType([StructField("amount", LongType()), StructField("dt", StringType())]))
        .partitionedBy("dt")
        .clusterBy("amount")
        .primaryKey("id")
        .property("owner", "payments")
        .comment("the built table")
        .execute()
    )
    metadata = DeltaTable.forName(spark, "built", settings=settings).metadata
    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in table.schema.fields] == [
        ("id", "bigint", False),
        ("kind", "string", True),
        ("amount", "bigint", True),
        ("dt", "string", True),
    ]
    assert (metadata.primary_key, metadata.partition_columns) == (("id",), ("dt",))
    props = dict(metadata.properties)
    assert (props["owner"], props["comment"], props["ordo.cluster_by"]) == ("payments", "the built table", "amount")
    table.insert_into(spark.createDataFrame([(1, "a", 5, "d")], table.schema))

    # createIfNotExists opens the existing table (its data kept), by the key property too
    again = (
        DeltaTable.createIfNotExists(spark, settings=settings)
        .tableName("built")
        .addColumns("id BIGINT, kind STRING, amount BIGINT, dt STRING")
        .property("ordo.primaryKey", "id")
        .execute()
    )
    assert again.toDF().count() == 1

    # without a primary key: a keyless table (Delta's default), whose appends keep duplicates
    keyless = DeltaTable.create(spark, settings=settings).tableName("keyless").addColumns("id BIGINT").execute()
    assert keyless.keyless and keyless.primary_key == () and keyless.schema.fieldNames() == ["id"]
    keyless.insert_into(spark.createDataFrame([(1,), (1,)], "id BIGINT"))
    assert sorted(r.id for r in keyless.toDF().collect()) == [1, 1]
    with pytest.raises(InvalidTableError, match="needs columns"):
        DeltaTable.create(spark, settings=settings).tableName("empty").primaryKey("id").execute()

    # create takes names by Spark's identifier rules, as forName does: mixed case and backticks map to the
    # lower-case table; a database part or a name that is no identifier is refused with the rule
    quoted = DeltaTable.create(spark, settings=settings).tableName("`Named_Events`").addColumns("id BIGINT").execute()
    assert quoted.name == "named_events" and quoted.location.endswith("/named_events")
    assert DeltaTable.forName(spark, "NAMED_EVENTS", settings=settings).name == "named_events"
    mixed = DeltaTable.create(spark, "MixedCase", schema="id BIGINT", settings=settings)
    assert mixed.name == "mixedcase" and DeltaTable.exists(spark, "mixedcase", settings=settings)
    assert DeltaTable.createIfNotExists(spark, "`MIXEDCASE`", schema="id BIGINT", settings=settings).name == "mixedcase"
    for bad, rule in (
        ("sales.orders", r"db\.table is refused.*name the table alone \('orders'\)"),
        ("`sales.orders`", r"one Spark identifier"),
        ("has-dash", r"one Spark identifier"),
        ("9lives", r"\[a-z\]\[a-z0-9_\]\*"),
    ):
        with pytest.raises(InvalidNameError, match=rule):
            DeltaTable.create(spark, bad, schema="id BIGINT", settings=settings)
        with pytest.raises(InvalidNameError, match=rule):
            DeltaTable.create(spark, settings=settings).tableName(bad).addColumns("id BIGINT").execute()
    assert not any(DeltaTable.exists(spark, n, settings=settings) for n in ("orders", "has_dash", "lives"))

    # replace / createOrReplace, Delta's meaning: the schema becomes the definition's and the data is removed, in one
    # commit that keeps the history
    before = DeltaTable.forName(spark, "built", settings=settings).version
    replaced = (
        DeltaTable.createOrReplace(spark, settings=settings)
        .tableName("Built")
        .addColumn("id", "BIGINT", nullable=False)
        .addColumns("amount DOUBLE, dt STRING")
        .partitionedBy("dt")
        .clusterBy("amount")
        .primaryKey("id")
        .property("owner", "payments")
        .comment("the built table")
        .execute()
    )
    assert replaced.name == "built" and replaced.version == before + 1
    assert [(f.name, f.dataType.simpleString()) for f in replaced.schema.fields] == [
        ("id", "bigint"), ("amount", "double"), ("dt", "string"),
    ]  # fmt: skip
    assert replaced.toDF().count() == 0 and replaced.read(version=before).count() == 1, "history is kept"
    assert replaced.read(version=before).columns == ["id", "kind", "amount", "dt"]
    replaced.insert_into(spark.createDataFrame([(2, 2.5, "d")], replaced.schema))
    assert [tuple(r) for r in replaced.toDF().collect()] == [(2, 2.5, "d")]
    # what files are bucketed and placed by, and properties, do not change that way: refused naming them
    with pytest.raises(InvalidTableError, match=r"not its partition columns \('dt',\) -> \(\)"):
        DeltaTable.replace(spark, settings=settings).tableName("built").addColumns("id BIGINT, dt STRING").primaryKey(
            "id"
        ).clusterBy("amount").property("owner", "payments").comment("the built table").execute()
    with pytest.raises(InvalidTableError, match=r"primary key \('id',\) -> \(\).*properties"):
        DeltaTable.replace(spark, settings=settings).tableName("built").addColumns(
            "id BIGINT, dt STRING"
        ).partitionedBy("dt").execute()
    assert DeltaTable.forName(spark, "built", settings=settings).version == before + 2
    # replace needs the table; createOrReplace creates it
    with pytest.raises(TableNotFoundError, match="does not exist"):
        DeltaTable.replace(spark, settings=settings).tableName("fresh").addColumns("id BIGINT").execute()
    fresh = DeltaTable.createOrReplace(spark, settings=settings).tableName("fresh").addColumns("id BIGINT").execute()
    assert fresh.version == 0 and fresh.keyless
    assert not DeltaTable.exists(spark, "empty", settings=settings)
