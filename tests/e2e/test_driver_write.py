"""FileWriter's driver-side write against its Spark write job: same files, same checks, no job for small records.

Both paths run here on the same records with ``spark.ordo.driverWrite.maxBytes`` switched per write; the other
writer tests run on whichever path the rule picks (``--spark-write job`` forces the job for a whole run).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from ordo.kernel.settings import SettingsError
from ordo.producer.data import (
    OP_COLUMN,
    SEQ_COLUMN,
    ConstraintViolationError,
    InvalidOperationError,
    Layout,
    PartitionValueError,
    PrimaryKeyError,
    RecordCheck,
    upsert_records,
    validate_records,
)
from ordo.producer.filewriter import FileWriter
from ordo.producer.smallwrites import DRIVER_WRITE_CONF, driver_side
from ordo.schemas.paths import write_id_of

SCHEMA = "id BIGINT NOT NULL, v STRING, amount DOUBLE, p STRING"
ROWS = [(i, None if i % 7 == 0 else f"v{i}", i * 1.5, f"p{i % 3}") for i in range(40)]


@contextmanager
def max_bytes(spark: Any, value: str | None) -> Iterator[None]:
    """``DRIVER_WRITE_CONF`` set to ``value`` (None: unset, the default) for the block."""
    before = spark.conf.get(DRIVER_WRITE_CONF, None)
    if value is None:
        spark.conf.unset(DRIVER_WRITE_CONF)
    else:
        spark.conf.set(DRIVER_WRITE_CONF, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(DRIVER_WRITE_CONF)
        else:
            spark.conf.set(DRIVER_WRITE_CONF, before)


PATHS = {"driver": str(2**63 - 1), "job": "0"}  # Long.MaxValue: every plan, also those Spark cannot estimate


def _layout(tmp_path: Path, name: str, **properties: str) -> Layout:
    return Layout(
        name=name,
        location=str(tmp_path / name),
        schema_ddl=SCHEMA,
        primary_key=("id",),
        partition_columns=("p",),
        properties=properties,
    )


def _records(spark: Any, rows: list[tuple[Any, ...]] = ROWS) -> Any:
    return upsert_records(spark.createDataFrame(rows, SCHEMA))


def _write(
    spark: Any, layout: Layout, path: str, records: Any, check: RecordCheck | None = None, **options: Any
) -> tuple[Any, FileWriter]:
    writer = FileWriter(spark, layout, f"w-{path}", **options)
    with max_bytes(spark, PATHS[path]):
        return writer.write(records, check=check), writer


def _described(layout: Layout, stats: Any) -> list[tuple[Any, ...]]:
    """Each file as (partition, bucket, records, key range, rows sorted), its name and write id checked."""
    found = []
    for f in stats.files:
        assert f.path.startswith(f"p={f.partition['p']}/") and f.path.endswith(".parquet")
        table = pq.read_table(Path(layout.location) / f.path)
        assert table.column_names == ["id", "v", "amount", "p", OP_COLUMN, SEQ_COLUMN]
        assert table.num_rows == f.record_count
        rows = sorted(table.to_pylist(), key=lambda r: r["id"])
        found.append((dict(f.partition), f.bucket, f.record_count, f.min_key, f.max_key, rows))
    return sorted(found, key=lambda d: (d[0]["p"], d[1]))


def test_the_rule_picks_small_plans_and_the_setting_bounds_it(spark: Any) -> None:
    local = spark.sql("VALUES (1, 'a'), (2, 'b') AS t(id, v)")  # a LocalRelation: estimated from its rows
    ranged = spark.range(1).selectExpr("id", "'a' AS v")
    big = spark.range(10_000_000).selectExpr("id", "'a' AS v")  # 10 M rows: Spark estimates 80 MB and more
    unknown = spark.createDataFrame([(1, "a")], "id BIGINT, v STRING")  # an RDD of Python rows: no estimate
    with max_bytes(spark, None):
        assert driver_side(local) and driver_side(ranged)
        assert not driver_side(big) and not driver_side(unknown)
    with max_bytes(spark, "0"):
        assert not driver_side(local) and not driver_side(ranged)
    with max_bytes(spark, PATHS["driver"]):  # the largest value: every plan, estimated or not
        assert driver_side(unknown) and driver_side(big)
    with max_bytes(spark, "2 MB"), pytest.raises(SettingsError, match=r"spark\.ordo\.driverWrite\.maxBytes"):
        driver_side(local)


@pytest.mark.parametrize("buckets", ["1", "4"])
def test_both_paths_write_the_same_files(spark: Any, tmp_path: Path, buckets: str) -> None:
    described = {}
    for path in PATHS:
        layout = _layout(tmp_path, f"t_{path}", **{"ordo.buckets": buckets, "ordo.max_records_per_file": "5"})
        stats, _ = _write(spark, layout, path, _records(spark))
        assert all(write_id_of(f.path) == f"w-{path}" for f in stats.files)
        described[path] = _described(layout, stats)
    assert described["driver"] == described["job"]
    assert sum(d[2] for d in described["driver"]) == len(ROWS)
    assert max(d[2] for d in described["driver"]) <= 5  # split at ordo.max_records_per_file


@pytest.mark.parametrize("path", list(PATHS))
def test_a_broken_check_constraint_fails_both_paths_and_leaves_no_file(spark: Any, tmp_path: Path, path: str) -> None:
    layout = _layout(tmp_path, f"check_{path}", **{"delta.constraints.positive": "amount >= 3"})
    with pytest.raises(ConstraintViolationError, match=r"positive \(amount >= 3\) violated"):
        _write(spark, layout, path, _records(spark))
    assert not list(Path(layout.location).rglob("*.parquet"))


@pytest.mark.parametrize("path", list(PATHS))
def test_a_partition_the_write_ids_do_not_name_fails_both_paths(spark: Any, tmp_path: Path, path: str) -> None:
    layout = _layout(tmp_path, f"ids_{path}")
    with pytest.raises(Exception, match=r"which it was not given") as failed:
        _write(spark, layout, path, _records(spark), write_ids={("p0",): "a", ("p1",): "b"})
    # the driver-side write raises in this process (the error itself); a task's error comes wrapped by Spark
    assert isinstance(failed.value, InvalidOperationError) == (path == "driver")
    assert not list(Path(layout.location).rglob("*.parquet"))


@pytest.mark.parametrize("path", list(PATHS))
def test_write_ids_name_each_partitions_files_on_both_paths(spark: Any, tmp_path: Path, path: str) -> None:
    layout = _layout(tmp_path, f"named_{path}")
    ids = {("p0",): "a0", ("p1",): "a1", ("p2",): "a2"}
    stats, writer = _write(spark, layout, path, _records(spark), write_ids=ids)
    assert {f.partition["p"]: write_id_of(f.path) for f in stats.files} == {"p0": "a0", "p1": "a1", "p2": "a2"}
    assert writer.cleanup() == len(stats.files) == 3


@pytest.mark.parametrize("path", list(PATHS))
def test_sort_by_orders_each_file_nulls_first(spark: Any, tmp_path: Path, path: str) -> None:
    layout = Layout(
        name=f"sorted_{path}",
        location=str(tmp_path / f"sorted_{path}"),
        schema_ddl=SCHEMA,
        primary_key=("id",),
        partition_columns=(),
        properties={},
    )
    writer = FileWriter(spark, layout, f"s-{path}")
    with max_bytes(spark, PATHS[path]):
        stats = writer.write(_records(spark), sort_by=["v", "id"])
    assert len(stats.files) == 1
    values = pq.read_table(Path(layout.location) / stats.files[0].path).column("v").to_pylist()
    nulls = sum(v is None for v in values)
    assert nulls and values[:nulls] == [None] * nulls
    assert values[nulls:] == sorted(values[nulls:])


BROKEN = {  # rows -> the error validate_records gives them, whichever path groups them
    "duplicate key": ([(1, "a", 1.0, "p0"), (1, "b", 2.0, "p0"), (2, "c", 3.0, "p1")], PrimaryKeyError),
    "null key": ([(None, "a", 1.0, "p0"), (2, "c", 3.0, "p1")], PrimaryKeyError),
    "empty partition": ([(1, "a", 1.0, ""), (2, "c", 3.0, "p1")], PartitionValueError),
    "null partition": ([(1, "a", 1.0, None), (2, "c", 3.0, "p1")], PartitionValueError),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_validation_refuses_alike_on_both_paths(spark: Any, tmp_path: Path, case: str) -> None:
    rows, error = BROKEN[case]
    schema = SCHEMA.replace("id BIGINT NOT NULL", "id BIGINT")  # a null key must reach the check
    messages = {}
    for path in PATHS:
        with max_bytes(spark, PATHS[path]), pytest.raises(error) as refused:
            validate_records(spark.createDataFrame(rows, schema), _layout(tmp_path, f"v_{path}"))
        messages[path] = str(refused.value)
    assert messages["driver"] == messages["job"]


@pytest.mark.parametrize("path", list(PATHS))
def test_validation_checks_a_static_partition_on_both_paths(spark: Any, tmp_path: Path, path: str) -> None:
    layout = _layout(tmp_path, f"static_{path}")
    with max_bytes(spark, PATHS[path]):
        validate_records(spark.createDataFrame(ROWS[:1], SCHEMA), layout, {"p": "p0"})
        with pytest.raises(PartitionValueError, match=r"outside the partition \{'p': 'p1'\}"):
            validate_records(spark.createDataFrame(ROWS[:3], SCHEMA), layout, {"p": "p1"})


def _jobs_of(spark: Any, action: Any) -> int:
    """How many Spark jobs ``action`` ran (in a job group of its own)."""
    context = spark.sparkContext
    group = f"count-{id(action)}"
    context.setJobGroup(group, "counted")
    try:
        action()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    return len(context.statusTracker().getJobIdsForGroup(group))


@pytest.mark.parametrize("case", list(BROKEN))
def test_the_write_refuses_what_validation_refuses_on_both_paths_and_writes_nothing(
    spark: Any, tmp_path: Path, case: str
) -> None:
    rows, error = BROKEN[case]
    schema = SCHEMA.replace("id BIGINT NOT NULL", "id BIGINT")
    messages = {}
    for path in PATHS:
        layout = _layout(tmp_path, f"wc_{path}")
        records = upsert_records(spark.createDataFrame(rows, schema))
        with pytest.raises(error) as refused:
            _write(spark, layout, path, records, check=RecordCheck(layout))
        messages[path] = str(refused.value)
        assert not list(Path(layout.location).rglob("*.parquet"))
    with pytest.raises(error) as alone:
        validate_records(spark.createDataFrame(rows, schema), _layout(tmp_path, "alone"))
    assert messages["driver"] == messages["job"] == str(alone.value)


@pytest.mark.parametrize("path", list(PATHS))
def test_the_writes_check_covers_a_static_partition_and_a_keyless_table(spark: Any, tmp_path: Path, path: str) -> None:
    layout = _layout(tmp_path, f"ws_{path}")
    with pytest.raises(PartitionValueError, match=r"outside the partition \{'p': 'p1'\}"):
        _write(spark, layout, path, _records(spark, ROWS[:3]), check=RecordCheck(layout, {"p": "p1"}))
    stats, _ = _write(spark, layout, path, _records(spark, ROWS[1:2]), check=RecordCheck(layout, {"p": "p1"}))
    assert [f.partition for f in stats.files] == [{"p": "p1"}]
    keyless = Layout(name=f"kl_{path}", location=str(tmp_path / f"kl_{path}"), schema_ddl="v STRING, p STRING",
                     primary_key=(), partition_columns=("p",), properties={})  # fmt: skip
    rows = upsert_records(spark.createDataFrame([("a", "p0"), ("b", "")], "v STRING, p STRING"))
    with pytest.raises(PartitionValueError, match=r"null or empty partition values \(e\.g\. \[\{'p': ''\}\]\)"):
        _write(spark, keyless, path, rows, check=RecordCheck(keyless))
    assert not list(Path(keyless.location).rglob("*.parquet"))


@pytest.mark.parametrize("path", list(PATHS))
def test_a_row_breaking_its_key_and_a_constraint_gets_the_keys_error_on_both_paths(
    spark: Any, tmp_path: Path, path: str
) -> None:
    layout = _layout(tmp_path, f"kc_{path}", **{"delta.constraints.positive": "amount >= 3"})
    rows = [(1, "a", 1.0, "p0"), (1, "b", 2.0, "p0")]  # a duplicate key, and amounts the constraint refuses
    with pytest.raises(PrimaryKeyError, match="duplicate primary keys"):
        _write(spark, layout, path, _records(spark, rows), check=RecordCheck(layout))


def test_a_small_checked_write_is_one_spark_job_and_a_large_one_checks_first(spark: Any, tmp_path: Path) -> None:
    counted = {}
    for path in PATHS:
        layout = _layout(tmp_path, f"j_{path}")
        records = _records(spark)
        counted[path] = _jobs_of(spark, lambda t=layout, r=records, p=path: _write(spark, t, p, r, RecordCheck(t)))
    assert counted["driver"] == 1, counted  # the collection, checked and written on the driver
    assert counted["job"] >= 2, counted  # the check's grouping job, then the write's
