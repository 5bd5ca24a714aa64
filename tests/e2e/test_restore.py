"""RESTORE through the real stack (Kafka, the arbiter and consumer processes, Spark), against a model per version.

``restoreToVersion`` publishes one metadata-only RESTORE: the table then holds
the very files of version N (no file written), reads equal the model at N, and
the change feed of the RESTORE's version is the model's difference between
the head before it and N. A hostile RESTORE (a path the table never had at N)
is refused by the arbiter.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from ordo.errors import CommitConflictError
from ordo.producer.table import DeltaTable
from ordo.schemas import CommitIntent, DataFile, Operation, Reason
from tests.e2e.stack import parquet_files, writer_stack  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

SCHEMA = "id BIGINT, amount BIGINT, dt STRING"
Row = tuple[Any, ...]


def rows_of(df: Any) -> list[Row]:
    return sorted((r["id"], r["amount"], r["dt"]) for r in df.collect())


def model_difference(before: dict[int, Row], after: dict[int, Row]) -> list[tuple[str, Row]]:
    """Delta's change rows from ``before`` to ``after``: insert, delete, update pre- and post-images."""
    out = [("insert", after[k]) for k in after.keys() - before.keys()]
    out += [("delete", before[k]) for k in before.keys() - after.keys()]
    for k in before.keys() & after.keys():
        if before[k] != after[k]:
            out += [("update_preimage", before[k]), ("update_postimage", after[k])]
    return sorted(out)


def test_restore_to_version_is_metadata_only_and_its_change_feed_is_the_difference(
    spark: Any,
    writer_stack: Any,  # noqa: F811
) -> None:
    table = DeltaTable.create(
        spark,
        "restore_e2e",
        schema=SCHEMA,
        primary_key="id",
        partitioned_by="dt",
        buckets=1,  # one file per partition and commit: the compaction below picks files by version
        settings=writer_stack.settings,
    )
    models: dict[int, dict[int, Row]] = {0: {}}
    model: dict[int, Row] = {}

    def insert(rows: list[Row]) -> None:
        table.insert_into(spark.createDataFrame(rows, SCHEMA))
        model.update({r[0]: r for r in rows})
        models[table.version] = dict(model)

    insert([(i, i * 10, "2024-05-01" if i % 2 else "2024-05-02") for i in range(1, 9)])  # v1
    table.update({"amount": "amount + 1"}, "id <= 4")  # v2: merge-on-read records beside v1's
    model.update({k: (k, v[1] + 1, v[2]) for k, v in model.items() if k <= 4})
    models[2] = dict(model)
    insert([(9, 90, "2024-05-01")])  # v3
    # v4: a MINOR compaction of v1's and v3's files of dt=2024-05-01, not v2's: its output keeps sequences 1 and 3,
    # so v2's update of ids 1 and 3 (sequence 2) still wins over it
    odd = {"dt": "2024-05-01"}
    inputs = [f.path for f in table.snapshot(3).files if f.partition == odd and f.added_version in (1, 3)]
    assert len(inputs) == 2
    with table.begin() as txn:
        txn.compact("minor", odd, files=inputs)
        txn.commit()
    models[4] = dict(model)
    assert not set(inputs) & {f.path for f in table.snapshot().files}
    insert([(20, 200, "2024-05-03"), (2, 999, "2024-05-02")])  # v5: a new partition and an update of id 2
    table.delete("id = 5")  # v6
    del model[5]
    models[6] = dict(model)
    assert rows_of(table.toDF()) == sorted(model.values())
    written = set(parquet_files(table.location))

    result = table.restoreToVersion(3)  # v7
    assert result is not None and result.id_version == 7
    decision = result.decision  # the arbiter's decision as the writer got it
    assert decision is not None
    assert (decision.operation, decision.restore_version, decision.partitions) == (Operation.RESTORE, 3, None)
    history = table.decisions(1)[0]  # and in the catalog's history
    assert (history.operation, history.restore_version) == (Operation.RESTORE, 3)
    assert {f.path for f in table.snapshot().files} == {f.path for f in table.snapshot(3).files}
    assert set(parquet_files(table.location)) == written, "RESTORE writes no file"
    # v1's file is back with its records' sequence 1: v2's update of ids 1 and 3 still wins over it
    assert rows_of(table.toDF()) == sorted(models[3].values())
    difference = model_difference(models[6], models[3])
    assert {kind for kind, _ in difference} == {"insert", "delete", "update_preimage", "update_postimage"}
    feed = table.changes(7, 7, form="delta").collect()
    assert sorted((r["_change_type"], (r["id"], r["amount"], r["dt"])) for r in feed) == difference
    assert {r["_commit_version"] for r in feed} == {7}
    compact = table.changes(7, 7).collect()  # the compact form: new or changed rows, keys gone
    expected = {("upsert", r) for kind, r in difference if kind in ("insert", "update_postimage")}
    expected |= {("delete", r) for kind, r in difference if kind == "delete"}
    assert {(r["_change_type"], (r["id"], r["amount"], r["dt"])) for r in compact} == expected

    # by time, to the version before v3's insert
    by_time = table.restoreToTimestamp(table.snapshot(2).time_version)  # v8
    assert by_time is not None and by_time.decision is not None and by_time.decision.restore_version == 2
    assert rows_of(table.toDF()) == sorted(models[2].values())
    assert sorted(
        (r["_change_type"], (r["id"], r["amount"], r["dt"])) for r in table.changes(8, 8, form="delta").collect()
    ) == model_difference(models[3], models[2])


def test_a_hostile_restore_is_refused_by_the_arbiter(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    table = DeltaTable.create(
        spark, "restore_hostile", schema=SCHEMA, primary_key="id", partitioned_by="dt", settings=writer_stack.settings
    )
    table.insert_into(spark.createDataFrame([(1, 10, "2024-05-01")], SCHEMA))  # v1
    table.insert_overwrite(spark.createDataFrame([(2, 20, "2024-05-01")], SCHEMA), {"dt": "2024-05-01"})  # v2
    real = table.snapshot(1).files[0]
    smuggled = DataFile(
        path=f"dt=2024-05-01/{uuid.uuid4().hex}-0.parquet", partition={"dt": "2024-05-01"}, record_count=1, size_bytes=1
    )
    honest = DataFile(path=real.path, partition=dict(real.partition), record_count=1, size_bytes=1, bucket=real.bucket)
    for added, version, reason in (
        ((honest, smuggled), 1, Reason.NOT_LIVE_AT_VERSION),  # a path this table never had
        ((honest,), 3, Reason.INVALID_RESTORE_VERSION),  # a version after the one read
        ((honest,), 0, Reason.NOT_LIVE_AT_VERSION),  # v1's file was not live at 0
    ):
        intent = CommitIntent(
            txn_id=uuid.uuid4().hex,
            table=table.name,
            operation=Operation.RESTORE,
            read_version=2,
            added_files=added,
            restore_version=version,
        )
        decision = table._conn.client.commit(intent, timeout=60)
        assert not decision.accepted and decision.reason == reason, decision.message
    assert table.version == 2 and rows_of(table.toDF()) == [(2, 20, "2024-05-01")]
    # a RESTORE is a whole-table overwrite: a write read before it fails (OVERWRITE -> INSERT)
    with table.begin() as txn:
        txn.insert_into(spark.createDataFrame([(3, 30, "2024-05-01")], SCHEMA))
        table.restoreToVersion(1)  # v3
        with pytest.raises(CommitConflictError) as refused:
            txn.commit()
    assert refused.value.reason == Reason.CONFLICT_LATER_FAILS
    assert table.version == 3 and rows_of(table.toDF()) == [(1, 10, "2024-05-01")]
