"""ordo on a Spark standalone cluster with its tables on S3, each step checked against a plain-Python model.

The topology (tests/cluster/conftest.py): S3Proxy, Kafka, a PostgreSQL
catalog, arbiter and consumer, a master and two workers whose executors run
ordo from its wheel in their own Python, and this process as the driver. The
steps share the package's topology and this module's tables, in order.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ordo.producer.table import DeltaTable
from tests.cluster.conftest import BUCKET, ROOT, Topology, objects, rows_of

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.timeout(900)]

SCHEMA = "id BIGINT, name STRING, score INT, dt STRING"


def test_executors_run_ordo_from_its_wheel_in_their_own_python(topology: Topology) -> None:
    """No executor leans on the driver's files: ordo comes from the executors' environment, not the checkout."""

    def where(_: Any) -> tuple[str, str, str, str, str]:
        import ordo

        return (
            ordo.__file__,
            sys.executable,
            os.environ.get("PYTHONPATH", ""),
            os.getcwd(),
            os.environ.get("ORDO_CATALOG", ""),
        )

    import pyspark

    seen = set(topology.spark.sparkContext.parallelize(range(4), 4).map(where).collect())
    venv = str(topology.executors_python.parent.parent)
    spark_home = str(Path(pyspark.__file__).parent)  # the workers' Spark: its pyspark.zip and py4j are on the path
    for module, python, path, cwd, catalog in seen:
        assert module.startswith(venv + "/lib/") and "site-packages/ordo/" in module, module
        assert python == str(topology.executors_python)
        checkout = [p for p in path.split(os.pathsep) if p.startswith(str(ROOT)) and not p.startswith(spark_home)]
        assert not checkout and not cwd.startswith(str(ROOT)), (checkout, cwd)
        assert catalog == "", "an executor has the driver's settings"
    assert len(topology.cluster.executor_pids()) == 1, "this driver's one executor, a JVM of its own"


def test_a_table_at_an_s3a_location_is_written_read_updated_and_deleted(topology: Topology) -> None:
    """The s3a:// spelling (what Spark users write) is the s3:// table; the first append runs in the executors."""
    spark, settings = topology.spark, topology.settings
    given = topology.location("people").replace("s3://", "s3a://")
    table = DeltaTable.create(
        spark, "people", schema=SCHEMA, primary_key="id", partitioned_by="dt", location=given, settings=settings
    )
    assert table.location == topology.location("people")
    model = {i: (f"n{i}", i, f"d{i % 2}") for i in range(20)}
    table.insert_into(spark.createDataFrame([(k, *v) for k, v in model.items()], SCHEMA))
    assert rows_of(table.read()) == model
    table.update({"score": "score + 100"}, where="id < 5")
    model |= {k: (n, s + 100, d) for k, (n, s, d) in model.items() if k < 5}
    table.delete("id >= 15")
    model = {k: v for k, v in model.items() if k < 15}
    assert rows_of(table.read()) == model
    assert DeltaTable.forPath(spark, given, settings=settings).name == "people"
    # written once where they stay: only the data files the commits named, no staging area, no marker object
    named = {f.path for c in table.catalog.commits("people", 0, None, include_rewrites=True) for f in c.added_files}
    stored = objects(table.location)
    assert set(stored) == named, sorted(set(stored) ^ named)
    assert all(size > 0 for size in stored.values())


def test_create_with_the_builder_and_by_writing_then_append_and_overwrite(topology: Topology) -> None:
    from ordo.spark.datasource import settings_options

    spark, settings = topology.spark, topology.settings
    built = (
        DeltaTable.create(spark, settings=settings)
        .tableName("built")
        .addColumns(SCHEMA)
        .primaryKey("id")
        .partitionedBy("dt")
        .location(topology.location("built"))
        .execute()
    )
    assert built.location == topology.location("built") and built.version == 0
    model = {i: (f"b{i}", i, f"d{i % 3}") for i in range(12)}
    built.insert_into(spark.createDataFrame([(k, *v) for k, v in model.items()], SCHEMA))
    more = {i: (f"c{i}", -i, f"d{i % 3}") for i in range(8, 16)}  # 8..11 are upserts
    built.insert_into(spark.createDataFrame([(k, *v) for k, v in more.items()], SCHEMA))
    model |= more
    assert rows_of(built.read()) == model
    replaced = {i: (f"o{i}", i * 2, "d1") for i in (1, 4, 100)}
    built.insert_overwrite(spark.createDataFrame([(k, *v) for k, v in replaced.items()], SCHEMA), {"dt": "d1"})
    model = {k: v for k, v in model.items() if v[2] != "d1"} | replaced
    assert rows_of(built.read()) == model
    # by writing: format("ordo") creates the table in the warehouse (on S3) and appends in the executors
    rows = [(i, f"w{i}", i, "d0") for i in range(5)]
    writer = spark.createDataFrame(rows, SCHEMA).write.format("ordo").options(**settings_options(settings))
    writer.option("ordo.primaryKey", "id").option("ordo.partitionBy", "dt").mode("append").save("written")
    written = DeltaTable.forName(spark, "written", settings=settings)
    assert written.location == f"{settings.warehouse}/written"
    assert rows_of(written.read()) == {i: (n, s, d) for i, n, s, d in rows}


def wait_until(what: str, condition: Callable[[], bool], timeout: float = 300.0, query: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if query is not None:
            assert query.exception() is None, query.exception()
            assert query.isActive, "the query stopped"
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
        time.sleep(1.0)


ROWS_PER_BATCH = 20  # consecutive values: distinct keys within a batch, upserts across batches
KEYS = 40


def test_a_stream_with_its_checkpoint_on_s3_while_ordo_compactor_compacts(topology: Topology) -> None:
    """Keyed upserts from a rate source through the sink; ``ordo compactor --master spark://...`` beside it."""
    from pyspark.sql import functions as F

    from ordo.spark.datasource import settings_options

    spark, settings = topology.spark, topology.settings
    table = DeltaTable.create(
        spark,
        "streamed",
        schema="id BIGINT, v BIGINT, part STRING",
        primary_key="id",
        partitioned_by="part",
        location=topology.location("streamed"),
        settings=settings,
    )
    source = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", ROWS_PER_BATCH).load()
    checkpoint = f"s3a://{BUCKET}/{topology.prefix}/checkpoints/streamed"
    query = (
        source.select(
            (F.col("value") % KEYS).alias("id"),
            F.col("value").alias("v"),
            (F.col("value") % 2).cast("string").alias("part"),
        )
        .writeStream.format("ordo")
        .options(**settings_options(settings))
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="3 seconds")
        .start("streamed")
    )
    compactor = topology.start_ordo(
        "compactor", "--master", topology.cluster.url, "--tables", "streamed", "--interval", "2",
        "--no-metrics", name="compactor",
    )  # fmt: skip
    try:

        def compacted() -> bool:
            assert compactor.running, f"ordo compactor exited:\n{compactor.tail()}"
            return any(
                "COMPACT" in c.operation for c in table.catalog.commits("streamed", 0, None, include_rewrites=True)
            )

        wait_until("compaction by ordo compactor", compacted, query=query)
        seen = table.catalog.table("streamed").head_version
        wait_until(
            "two batches after it", lambda: table.catalog.table("streamed").head_version >= seen + 2, query=query
        )
    finally:
        query.stop()
        compactor.terminate(timeout=30)
    assert query.exception() is None
    commits = table.catalog.commits("streamed", 0, None, include_rewrites=True)
    batches = sum(1 for c in commits if c.operation == "INSERT_INTO")
    assert sum(1 for c in commits if "COMPACT" in c.operation) >= 1
    values = range(batches * ROWS_PER_BATCH)
    model = {}
    for value in values:
        model[value % KEYS] = value
    got = {r["id"]: r["v"] for r in table.read().collect()}
    assert got == model, "a batch lost or written twice, or a compaction changed the rows"
    assert [f for f in objects(f"s3://{BUCKET}/{topology.prefix}/checkpoints/streamed") if f.startswith("commits/")]


def test_update_delete_merge_time_travel_change_feed_restore_and_vacuum(topology: Topology) -> None:
    from ordo.spark.datasource import settings_options

    spark, settings = topology.spark, topology.settings
    table = DeltaTable.create(
        spark, "steps", schema=SCHEMA, primary_key="id", partitioned_by="dt",
        location=topology.location("steps"), settings=settings,
    )  # fmt: skip
    versions: dict[int, dict[int, tuple[Any, ...]]] = {0: {}}
    model = {i: (f"s{i}", i, f"d{i % 2}") for i in range(10)}
    v1 = table.insert_into(spark.createDataFrame([(k, *v) for k, v in model.items()], SCHEMA))
    versions[v1.id_version] = dict(model)
    v2 = table.update({"score": "score * 10"}, where="id % 3 = 0")
    model = {k: (n, s * 10 if k % 3 == 0 else s, d) for k, (n, s, d) in model.items()}
    versions[v2.id_version] = dict(model)
    v3 = table.delete("id IN (1, 2)")
    model = {k: v for k, v in model.items() if k not in (1, 2)}
    versions[v3.id_version] = dict(model)
    source = spark.createDataFrame([(3, "m3", 33, "d1"), (20, "m20", 20, "d0")], SCHEMA)
    (
        DeltaTable.forName(spark, "steps", settings=settings)
        .alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    model |= {3: ("m3", 33, "d1"), 20: ("m20", 20, "d0")}
    versions[table.version] = dict(model)
    assert rows_of(table.read()) == model
    for version, expected in versions.items():
        assert rows_of(table.read(version=version)) == expected, f"time travel to {version}"
    # the change feed, batch: every logical commit's rows
    changes = table.changes(v1.id_version, None).collect()
    deletes = {(r["_commit_version"], r["id"]) for r in changes if r["_change_type"] == "delete"}
    assert deletes == {(v3.id_version, 1), (v3.id_version, 2)}
    upserts_v2 = {r["id"] for r in changes if r["_commit_version"] == v2.id_version}
    assert upserts_v2 == {k for k in versions[v1.id_version] if k % 3 == 0}
    # the change feed, streaming, its checkpoint and output on S3; the same rows as the batch feed
    output = f"s3a://{BUCKET}/{topology.prefix}/feed/out"
    feed = (
        spark.readStream.format("ordo")
        .options(**settings_options(settings))
        .option("readChangeFeed", "true")
        .option("ordo.changeFeedForm", "compact")
        .option("startingVersion", v1.id_version)
        .load("steps")
        .writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", f"s3a://{BUCKET}/{topology.prefix}/feed/checkpoint")
        .start()
    )
    feed.processAllAvailable()
    feed.stop()
    assert feed.exception() is None
    cols = ["_commit_version", "_change_type", "id"]
    streamed = sorted(tuple(r[c] for c in cols) for r in spark.read.parquet(output).collect())
    assert streamed == sorted(tuple(r[c] for c in cols) for r in changes)
    # RESTORE to the first insert, then VACUUM deletes the objects no retained version needs
    table.restoreToVersion(v1.id_version)
    assert rows_of(table.read()) == versions[v1.id_version]
    live = {f.path for f in table.catalog.snapshot("steps").files}
    before = objects(table.location)
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    deleted = table.vacuum(0)
    after = objects(table.location)
    assert deleted and set(deleted) == set(before) - set(after), "VACUUM deleted objects, exactly those it named"
    assert set(after) == live, "only the live files remain"
    assert rows_of(table.read()) == versions[v1.id_version]


def test_an_executor_killed_mid_task_is_retried_without_a_duplicate_row_or_a_referenced_orphan(
    topology: Topology,
) -> None:
    """SIGKILL of the executor while a write's tasks run: Spark relaunches it and retries the tasks; the commit names
    only files of finished attempts, all present; a keyless table shows any duplicated row."""
    import signal
    import threading

    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    spark, settings = topology.spark, topology.settings
    # keyless and unpartitioned: no check job before the write, so the only tasks that run are the write's
    table = DeltaTable.create(
        spark, "killed", schema="n BIGINT", location=topology.location("killed"), settings=settings
    )

    def slow(n: int) -> int:
        import time as clock

        clock.sleep(0.3)
        return n

    rows = spark.range(0, 48, 1, 4).select(F.udf(slow, LongType())(F.col("id")).alias("n"))
    killed: list[int] = []

    def kill_the_executor_once_tasks_run() -> None:
        deadline = time.monotonic() + 120
        tracker = spark.sparkContext.statusTracker()
        while time.monotonic() < deadline:
            stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            writing = [s for s in stages if s is not None and s.numActiveTasks]
            pids = topology.cluster.executor_pids()
            if writing and pids:
                time.sleep(2.0)  # some tasks under way, some files open
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_the_executor_once_tasks_run, daemon=True)
    killer.start()
    result = table.insert_into(rows)
    killer.join(timeout=5)
    assert killed, "no executor was killed: the write ran before it could be"
    assert result is not None
    got = sorted(r["n"] for r in table.read().collect())
    assert got == list(range(48)), "a row lost or written twice"
    named = {f.path for f in result.added_files}
    stored = objects(table.location)
    assert named <= set(stored), "the commit names a file that is not there"
    assert killed[0] not in topology.cluster.executor_pids()
