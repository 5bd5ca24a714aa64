"""The Spark writer API end to end: operations, time travel, change feed, compaction files, refusals, lifecycle.

Real broker, arbiter and consumer processes (tests/e2e/stack.py), local Spark,
Parquet files on disk. Data is tiny: Spark's per-job overhead dominates.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from ordo.errors import CommitConflictError, TableNotFoundError
from ordo.producer.table import (
    CommitResult,
    DeltaTable,
    InvalidOperationError,
    InvalidTableError,
    PartitionValueError,
    PrimaryKeyError,
    SchemaMismatchError,
    TableExistsError,
    TransactionStateError,
)
from ordo.schemas import Operation
from tests.e2e.stack import files_of_txn, parquet_files, writer_stack  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

PEOPLE = "id BIGINT, name STRING, score INT"
EVENTS = "id BIGINT, v STRING, dt STRING"


def rows_of(df: Any, key: str = "id") -> dict[Any, tuple[Any, ...]]:
    """``{key: (other columns...)}`` of a DataFrame, refusing duplicate keys."""
    result: dict[Any, tuple[Any, ...]] = {}
    for row in df.collect():
        values = row.asDict()
        k = values.pop(key)
        assert k not in result, f"key {k} twice"
        result[k] = tuple(values.values())
    return result


def people(spark: Any, rows: list[tuple[int, str, int]]) -> Any:
    return spark.createDataFrame(rows, PEOPLE)


def file_records(table: DeltaTable, relative: str) -> list[dict[str, Any]]:
    """The raw records of one data file (with ``_ordo_op`` and ``_ordo_seq``), in file order."""
    return pq.read_table(str(Path(table.location) / relative)).to_pylist()


# --------------------------------------------------------------------------- create / open


def test_create_open_and_definition_errors(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    settings = writer_stack.settings
    table = DeltaTable.create(spark, "defs", schema=PEOPLE, primary_key=["id"], settings=settings)
    assert table.location == str(Path(settings.warehouse).resolve() / "defs")
    assert table.version == 0

    opened = DeltaTable.open(spark, "defs", settings=settings)
    assert opened.metadata == table.metadata
    assert [f.name for f in opened.schema.fields] == ["id", "name", "score"]
    assert opened.primary_key == ("id",)

    with pytest.raises(TableExistsError) as info:
        DeltaTable.create(spark, "defs", schema=PEOPLE, primary_key="id", settings=settings)
    assert info.value.reason == "TABLE_EXISTS"
    with pytest.raises(TableNotFoundError):
        DeltaTable.open(spark, "no_such_table", settings=settings)
    with pytest.raises(InvalidTableError, match="not in the schema"):
        DeltaTable.create(spark, "bad1", schema=PEOPLE, primary_key="nope", settings=settings)
    with pytest.raises(InvalidTableError, match="reserved"):
        DeltaTable.create(spark, "bad2", schema="id BIGINT, _ordo_op STRING", primary_key="id", settings=settings)
    with pytest.raises(InvalidTableError, match="primary_key names no column"):
        DeltaTable.create(spark, "bad3", schema=PEOPLE, primary_key=[], settings=settings)


# --------------------------------------------------------------------------- operations, time travel, changes


def test_operations_time_travel_changes_and_compaction(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    # one bucket: compaction takes every file of the table here (per-bucket compaction: tests/e2e/test_buckets.py)
    table = DeltaTable.create(
        spark, "people", schema=PEOPLE, primary_key="id", buckets=1, settings=writer_stack.settings
    )
    states: dict[int, dict[int, tuple[str, int]]] = {0: {}}

    r1 = table.insert_into(people(spark, [(i, f"n{i}", i) for i in range(1, 6)]))
    assert isinstance(r1, CommitResult) and r1.id_version == 1 and r1.time_version is not None
    assert r1.operation is Operation.INSERT_INTO and r1.record_count == 5
    states[1] = {i: (f"n{i}", i) for i in range(1, 6)}
    stats = {(f.min_key, f.max_key) for f in table.snapshot().files}
    assert min(k for k, _ in stats) == "1" and max(k for _, k in stats) == "5"

    r2 = table.update({"score": "score + 10", "name": "upper(name)"}, where="id <= 2")
    assert r2 is not None and r2.id_version == 2 and r2.record_count == 2  # delta records for the affected keys only
    states[2] = {**states[1], 1: ("N1", 11), 2: ("N2", 12)}

    r3 = table.delete("id = 5")
    assert r3 is not None and r3.id_version == 3 and r3.record_count == 1
    states[3] = {k: v for k, v in states[2].items() if k != 5}

    r4 = table.insert_into(people(spark, [(6, "n6", 6), (3, "x3", 33)]))
    assert r4 is not None
    states[4] = {**states[3], 6: ("n6", 6), 3: ("x3", 33)}

    assert rows_of(table.read()) == states[4]
    for version in (1, 2, 3):
        assert rows_of(table.read(version=version)) == states[version], version
    assert rows_of(table.read(timestamp=r2.time_version)) == states[2]
    assert rows_of(table.read(version=0)) == {}

    # change feed by ID version and by time: the records written by versions 2..3
    feed = table.changes(2, 3).collect()
    assert sorted((r.id, r._commit_version, r._change_type) for r in feed) == [
        (1, 2, "upsert"),
        (2, 2, "upsert"),
        (5, 3, "delete"),
    ]
    assert {(r.id, r.name, r.score) for r in feed if r._change_type == "upsert"} == {(1, "N1", 11), (2, "N2", 12)}
    by_time = table.changes(r2.time_version, r3.time_version, by="time").collect()
    assert {r._commit_version for r in by_time} == {2, 3}

    # MINOR: per key the newest record, delete records kept, original sequence numbers kept
    live_before = {f.path for f in table.snapshot().files}
    assert len(live_before) >= 4
    minor = table.compact("minor")
    assert minor is not None and minor.time_version is None and minor.operation is Operation.MINOR_COMPACT
    assert set(minor.removed_files) == live_before
    assert rows_of(table.read()) == states[4]
    # as of r4's time the snapshot is the compaction's (it inherits that time): same rows, fewer files
    assert rows_of(table.read(timestamp=r4.time_version)) == states[4]
    records = [r for f in minor.added_files for r in file_records(table, f.path)]
    by_key = {r["id"]: (r["_ordo_op"], r["_ordo_seq"]) for r in records}
    assert len(records) == len(by_key) == 6
    assert by_key == {
        1: ("upsert", 2),
        2: ("upsert", 2),
        3: ("upsert", 4),
        4: ("upsert", 1),
        5: ("delete", 3),
        6: ("upsert", 4),
    }

    # MAJOR: base files of live rows only
    table.insert_into(people(spark, [(7, "n7", 7)]))
    states[6] = {**states[4], 7: ("n7", 7)}
    major = table.compact("major")
    assert major is not None and major.operation is Operation.MAJOR_COMPACT
    records = [r for f in major.added_files for r in file_records(table, f.path)]
    assert {r["id"]: r["_ordo_seq"] for r in records} == {1: 2, 2: 2, 3: 4, 4: 1, 6: 4, 7: 6}
    assert {r["_ordo_op"] for r in records} == {"upsert"}
    assert rows_of(table.read()) == states[6]

    # CLUSTER: live rows rewritten sorted by the given column
    table.insert_into(people(spark, [(8, "a8", 8)]))
    states[8] = {**states[6], 8: ("a8", 8)}
    clustered = table.cluster("name")
    assert clustered is not None and clustered.operation is Operation.CLUSTER and clustered.time_version is None
    names = [r["name"] for f in clustered.added_files for r in file_records(table, f.path)]
    assert len(clustered.added_files) == 1 and names == sorted(names) and len(names) == len(states[8])
    assert rows_of(table.read()) == states[8]

    # old versions stay readable after the rewrites (their files stay on storage)
    assert rows_of(table.read(version=3)) == states[3]
    # rewrites are not changes
    versions = {r._commit_version for r in table.changes(1, clustered.id_version).collect()}
    assert versions == {1, 2, 3, 4, 6, 8}
    history = table.decisions()
    operations = [h.operation for h in sorted(history, key=lambda h: h.log_offset) if h.accepted]
    assert operations == [
        Operation.CREATE_TABLE,
        Operation.INSERT_INTO,
        Operation.UPDATE,
        Operation.DELETE,
        Operation.INSERT_INTO,
        Operation.MINOR_COMPACT,
        Operation.INSERT_INTO,
        Operation.MAJOR_COMPACT,
        Operation.INSERT_INTO,
        Operation.CLUSTER,
    ]


def test_overwrite_truncate_and_partition_paths(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    table = DeltaTable.create(
        spark, "events", schema=EVENTS, primary_key="id", partitioned_by="dt", settings=writer_stack.settings
    )
    odd = "2024/01:02 x=y"  # needs escaping in a path
    first = table.insert_into(
        spark.createDataFrame([(1, "a", "d1"), (2, "b", "d1"), (3, "c", "d2"), (4, "d", "d3"), (5, "e", odd)], EVENTS)
    )
    assert first is not None
    assert {tuple(p.items()) for p in first.decision.partitions} == {(("dt", v),) for v in ("d1", "d2", "d3", odd)}, (
        "INSERT's scope is the partitions written"
    )
    pattern = re.compile(rf"dt=([^/]+)/{first.txn_id}-\d+\.parquet")
    escaped = {}
    for f in first.added_files:
        match = pattern.fullmatch(f.path)
        assert match, f.path
        escaped[f.partition["dt"]] = match.group(1)
    assert escaped == {"d1": "d1", "d2": "d2", "d3": "d3", odd: "2024%2F01%3A02 x%3Dy"}

    # static overwrite: the DataFrame may leave the partition column out
    static = table.insert_overwrite(spark.createDataFrame([(10, "s")], "id BIGINT, v STRING"), {"dt": "d1"})
    assert static is not None and static.decision.partitions == ({"dt": "d1"},)
    # dynamic overwrite: the partitions present in the DataFrame
    dynamic = table.insert_overwrite(spark.createDataFrame([(11, "t", "d2")], EVENTS))
    assert dynamic is not None and dynamic.decision.partitions == ({"dt": "d2"},)
    expected = {10: ("s", "d1"), 11: ("t", "d2"), 4: ("d", "d3"), 5: ("e", odd)}
    assert rows_of(table.read()) == expected

    table.truncate({"dt": "d3"})
    del expected[4]
    assert rows_of(table.read()) == expected

    # partition-scoped update/delete touch only that partition
    table.update({"v": "'z'"}, partition={"dt": odd})
    expected[5] = ("z", odd)
    assert rows_of(table.read()) == expected

    table.truncate()
    assert rows_of(table.read()) == {}
    assert rows_of(table.read(version=first.id_version)) == {
        1: ("a", "d1"),
        2: ("b", "d1"),
        3: ("c", "d2"),
        4: ("d", "d3"),
        5: ("e", odd),
    }


def test_non_string_partition_values_are_canonical(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    schema = "id BIGINT, v STRING, n INT, day DATE"
    table = DeltaTable.create(
        spark,
        "typed_parts",
        schema=schema,
        primary_key="id",
        partitioned_by=["n", "day"],
        settings=writer_stack.settings,
    )
    import datetime

    day = datetime.date(2024, 1, 2)
    table.insert_into(spark.createDataFrame([(1, "a", 3, day), (2, "b", 4, day)], schema))
    files = table.snapshot().files
    assert {tuple(sorted(f.partition.items())) for f in files} == {
        (("day", "2024-01-02"), ("n", "3")),
        (("day", "2024-01-02"), ("n", "4")),
    }
    assert all(f.path.startswith(("n=3/day=2024-01-02/", "n=4/day=2024-01-02/")) for f in files)
    # "03" and a date object name the same partition as the files' labels
    table.insert_overwrite(spark.createDataFrame([(5, "c")], "id BIGINT, v STRING"), {"n": "03", "day": day})
    assert rows_of(table.read()) == {5: ("c", 3, day), 2: ("b", 4, day)}


def test_a_write_without_a_nullable_column_writes_nulls(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    """Delta's rule: a table column a write leaves out is null in its rows, if it is nullable and neither key nor
    partition column; through the DeltaTable API and ``format("ordo")``, on a key table and a keyless one."""
    from ordo.spark.datasource import settings_options

    opts = settings_options(writer_stack.settings)
    wide = "id BIGINT, v STRING, n INT NOT NULL, note STRING, dt STRING"
    keyed = DeltaTable.create(
        spark, "gaps", schema=wide, primary_key="id", partitioned_by="dt", settings=writer_stack.settings
    )
    keyed.insert_into(spark.createDataFrame([(1, "a", 10, "x", "d1")], wide))
    keyed.insert_into(spark.createDataFrame([(2, 20, "d1"), (1, 11, "d2")], "id BIGINT, n INT, dt STRING"))
    rows = spark.createDataFrame([(3, "c", 30, "d1")], "id BIGINT, v STRING, n INT, dt STRING")
    rows.write.format("ordo").options(**opts).mode("append").save("gaps")
    assert sorted((tuple(r) for r in keyed.read().collect()), key=repr) == [
        (1, "a", 10, "x", "d1"),
        (1, None, 11, None, "d2"),  # another partition: its own record of key 1
        (2, None, 20, None, "d1"),
        (3, "c", 30, None, "d1"),
    ]
    version = keyed.version
    with pytest.raises(SchemaMismatchError, match=r"missing columns \['n'\]"):  # NOT NULL: never filled
        keyed.insert_into(spark.createDataFrame([(4, "d", "d1")], "id BIGINT, v STRING, dt STRING"))
    with pytest.raises(Exception, match=r"missing \['n'\]"):
        spark.createDataFrame([(4, "d", "d1")], "id BIGINT, v STRING, dt STRING").write.format("ordo").options(
            **opts
        ).mode("append").save("gaps")
    assert keyed.version == version

    events = DeltaTable.create(
        spark, "gaps_log", schema="at BIGINT, kind STRING, detail STRING", settings=writer_stack.settings
    )
    events.insert_into(spark.createDataFrame([(1, "open")], "at BIGINT, kind STRING"))
    spark.createDataFrame([(1, "open")], "at BIGINT, kind STRING").write.format("ordo").options(**opts).mode(
        "append"
    ).save("gaps_log")
    assert [tuple(r) for r in events.read().collect()] == [(1, "open", None), (1, "open", None)]


# --------------------------------------------------------------------------- refusals


def test_refusals_write_nothing(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    table = DeltaTable.create(
        spark, "strict", schema=EVENTS, primary_key="id", partitioned_by="dt", settings=writer_stack.settings
    )
    good = spark.createDataFrame([(1, "a", "d1")], EVENTS)
    table.insert_into(good)
    before_files = parquet_files(table.location)
    version = table.version

    with pytest.raises(SchemaMismatchError, match=r"missing columns \['id'\]"):
        table.insert_into(good.drop("id"))  # a key column is never filled with nulls
    with pytest.raises(SchemaMismatchError, match=r"missing columns \['dt'\]"):
        table.insert_into(good.drop("dt"))  # nor a partition column
    with pytest.raises(SchemaMismatchError, match=r"extra columns \[x\]"):
        table.insert_into(good.withColumn("x", good.id))
    with pytest.raises(SchemaMismatchError, match="id: table has bigint, DataFrame has int"):
        table.insert_into(good.withColumn("id", good.id.cast("int")))
    with pytest.raises(SchemaMismatchError, match=r"V \(did you mean v\?\)"):
        table.insert_into(good.withColumnRenamed("v", "V"))
    with pytest.raises(PrimaryKeyError, match="null primary key"):
        table.insert_into(spark.createDataFrame([(None, "a", "d1"), (2, "b", "d1")], EVENTS))
    with pytest.raises(PrimaryKeyError, match=r"duplicate primary keys.*'id': 7"):
        table.insert_into(spark.createDataFrame([(7, "a", "d1"), (7, "b", "d1"), (8, "c", "d1")], EVENTS))
    with pytest.raises(PartitionValueError, match="null or empty partition values"):
        table.insert_into(spark.createDataFrame([(9, "a", None)], EVENTS))
    with pytest.raises(PartitionValueError, match="outside the partition"):
        table.insert_overwrite(spark.createDataFrame([(9, "a", "d1"), (10, "b", "d2")], EVENTS), {"dt": "d1"})
    with pytest.raises(InvalidOperationError, match="cannot change key or partition columns"):
        table.update({"id": "id + 1"})
    with pytest.raises(InvalidOperationError, match="cannot change key or partition columns"):
        table.update({"dt": "'d9'"})
    with pytest.raises(InvalidOperationError, match="unknown columns"):
        table.update({"nope": "1"})
    with pytest.raises(InvalidOperationError, match="minor' or 'major"):
        table.compact("medium")
    with pytest.raises(InvalidOperationError, match="exactly the partition columns"):
        table.truncate({"day": "d1"})
    unpartitioned = DeltaTable.create(
        spark, "strict_flat", schema=PEOPLE, primary_key="id", settings=writer_stack.settings
    )
    with pytest.raises(InvalidOperationError, match="not partitioned"):
        unpartitioned.truncate({"dt": "d1"})

    assert parquet_files(table.location) == before_files, "a refused write left files"
    assert table.version == version, "a refused write committed"
    assert parquet_files(unpartitioned.location) == []


# --------------------------------------------------------------------------- transactions


def test_transaction_lifecycle(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    table = DeltaTable.create(
        spark, "lifecycle", schema=EVENTS, primary_key="id", partitioned_by="dt", settings=writer_stack.settings
    )
    df = spark.createDataFrame([(1, "a", "d1"), (2, "b", "d2")], EVENTS)

    # leaving the block without commit deletes the staged files
    with table.begin() as txn:
        txn.insert_into(df)
        staged = files_of_txn(table.location, txn.txn_id)
        assert len(staged) == 2
        with pytest.raises(TransactionStateError, match="exactly one operation"):
            txn.delete("id = 1")
    assert txn.state == "aborted" and files_of_txn(table.location, txn.txn_id) == []

    # abort() does the same
    txn = table.begin()
    txn.insert_into(df)
    assert files_of_txn(table.location, txn.txn_id)
    txn.abort()
    assert files_of_txn(table.location, txn.txn_id) == []
    with pytest.raises(TransactionStateError):
        txn.commit()
    assert table.version == 0

    # a refused staging leaves the transaction open for another try
    txn = table.begin()
    with pytest.raises(SchemaMismatchError):
        txn.insert_into(df.withColumn("x", df.id))
    txn.insert_into(df)
    result = txn.commit()
    assert result is not None and result.id_version == 1 and txn.commit() is result

    # no-ops commit nothing: compaction of single files, empty inserts and dynamic overwrites
    assert table.compact("minor") is None
    assert table.insert_into(df.limit(0)) is None
    assert table.insert_overwrite(df.limit(0)) is None
    assert table.version == 1


def test_rejected_transaction_cleans_up_and_insert_retry(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    table = DeltaTable.create(
        spark, "retry", schema=EVENTS, primary_key="id", partitioned_by="dt", settings=writer_stack.settings
    )
    table.insert_into(spark.createDataFrame([(1, "a", "d1")], EVENTS))

    # INSERT vs INSERT on one partition: the later fails and its files are gone
    t1, t2 = table.begin(), table.begin()
    t1.insert_into(spark.createDataFrame([(2, "b", "d1")], EVENTS))
    t2.update({"v": "'u'"}, partition={"dt": "d1"})
    assert files_of_txn(table.location, t2.txn_id)
    r1 = t1.commit()
    with pytest.raises(CommitConflictError) as info:
        t2.commit()
    assert info.value.reason == "CONFLICT_LATER_FAILS"
    assert (info.value.conflicting_txn_id, info.value.conflicting_version) == (r1.txn_id, r1.id_version)
    assert files_of_txn(table.location, t2.txn_id) == []

    # metadata-level retry: the same files republished on the new head under a new txn id
    t1, t2 = table.begin(), table.begin()
    t1.insert_into(spark.createDataFrame([(3, "c", "d1")], EVENTS))
    t2.insert_into(spark.createDataFrame([(4, "d", "d1"), (1, "z", "d1")], EVENTS))
    first_txn, staged = t2.txn_id, t2.added_files
    with table.begin() as other, pytest.raises(InvalidOperationError, match="only safe for INSERT INTO"):
        other.truncate()
        other.commit(retries=1)
    r1 = t1.commit()
    r2 = t2.commit(retries=2)
    assert r2 is not None and r2.attempts == 2 and r2.txn_id != first_txn and r2.id_version == r1.id_version + 1
    assert t2.read_version >= r1.id_version
    assert [f.path for f in r2.added_files] == [f.path for f in staged]
    assert rows_of(table.read()) == {1: ("z", "d1"), 2: ("b", "d1"), 3: ("c", "d1"), 4: ("d", "d1")}
