"""The table service beside a streaming writer and concurrent UPDATEs, end to end (real broker, arbiter, Spark).

A Structured Streaming query inserts micro-batches into partitions ``0`` and
``1`` while a thread UPDATEs the seed rows of partition ``s`` and the service
(``ordo.services.compactor.Compactor``, on the same Spark session in a thread) compacts.
Afterwards: no writer decision was rejected because of the service, the
service's commits were accepted, the data equals the model (every streamed id
once, the seed rows updated once per accepted UPDATE), and files per partition
went down.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from ordo.errors import CommitConflictError
from ordo.producer.streaming import foreach_batch_committer
from ordo.producer.table import DeltaTable
from ordo.services.compactor import MAJOR, MINOR, Compactor, table_layout, writer_rejections_by_service
from tests.e2e.stack import writer_stack  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

SCHEMA = "id BIGINT, v STRING, n BIGINT, part STRING"
ROWS_PER_BATCH = 10
SEEDS = 20
REWRITES = {"MINOR_COMPACT", "MAJOR_COMPACT", "CLUSTER"}
COLD_SECONDS = 4  # ordo.compaction.cold_seconds of the table
INTERVAL = 1.0  # seconds between the service's rounds


def test_service_beside_a_stream_and_updates(spark: Any, writer_stack: Any, tmp_path: Any) -> None:  # noqa: F811
    from pyspark.sql import functions as F

    table = DeltaTable.create(
        spark,
        "svc",
        schema=SCHEMA,
        primary_key="id",
        partitioned_by="part",
        properties={"ordo.compaction.min_files": "4", "ordo.compaction.cold_seconds": str(COLD_SECONDS)},
        settings=writer_stack.settings,
    )
    table.insert_into(spark.createDataFrame([(-i, f"s{i}", 0, "s") for i in range(1, SEEDS + 1)], SCHEMA))

    service = Compactor(spark, writer_stack.settings, tables=["svc"], interval=INTERVAL)
    stop_service = threading.Event()
    service_thread = threading.Thread(target=service.run, args=(stop_service,), daemon=True)
    service_thread.start()

    source = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", ROWS_PER_BATCH).load()
    rows = source.select(
        F.col("value").alias("id"),
        F.concat(F.lit("r"), F.col("value").cast("string")).alias("v"),
        F.lit(0).cast("bigint").alias("n"),
        (F.col("value") % 2).cast("string").alias("part"),
    )
    committer = foreach_batch_committer(table, retries=5)
    query = (
        rows.writeStream.foreachBatch(committer)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )

    updates: list[int] = []
    update_errors: list[str] = []
    stop_updates = threading.Event()

    def update_loop() -> None:
        writer = DeltaTable.open(spark, "svc", settings=writer_stack.settings)
        while not stop_updates.is_set():
            try:
                result = writer.update({"n": "n + 1"}, "id < 0", partition={"part": "s"})
                if result is not None:
                    updates.append(result.id_version)
            except CommitConflictError as exc:  # a writer may lose to a writer, never to the service
                update_errors.append(str(exc.reason))
            stop_updates.wait(3.0)

    updater = threading.Thread(target=update_loop, daemon=True)
    updater.start()
    try:
        deadline = time.monotonic() + 300
        peak = 0
        while time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            peak = max(peak, table_layout(table.catalog, "svc")["max_files_per_partition"])
            minors = service.metrics.value(service.metrics.committed, table="svc", operation=MINOR)
            if len(committer.committed) >= 12 and len(updates) >= 3 and minors >= 1:
                break
            time.sleep(1.0)
        else:
            pytest.fail(
                f"no progress: batches {committer.committed[-3:]}, updates {updates}, {service.metrics.samples()}"
            )
    finally:
        stop_updates.set()
        updater.join(60)
        query.stop()
    assert query.exception() is None

    def settle() -> dict[str, Any]:
        """Wait until every partition is cold and the service has nothing left to do; the layout then."""
        stopped = time.monotonic()
        while time.monotonic() < stopped + 120:
            cold = time.monotonic() - stopped > COLD_SECONDS + 2 * INTERVAL  # nothing is pending while hot
            layout = table_layout(table.catalog, "svc")
            if cold and layout["max_files_per_partition"] <= table.layout.buckets and not layout["pending"]:
                return layout
            time.sleep(1.0)
        pytest.fail(f"the layout did not settle: {layout}, service {service.metrics.samples()}")

    # the writers stopped: the partitions turn cold; MINORs may have left one file per bucket, where a MAJOR has
    # nothing to do (it is not planned). One more UPDATE puts a second file in buckets of s: once s is cold
    # again, it gets its MAJOR COMPACT.
    settle()
    last_update = table.update({"n": "n + 1"}, "id < 0", partition={"part": "s"})
    assert last_update is not None
    updates.append(last_update.id_version)
    layout = settle()
    stop_service.set()
    service_thread.join(120)
    assert not service_thread.is_alive()

    decisions = table.decisions()
    assert writer_rejections_by_service(decisions) == [], "a writer was rejected because of the service"
    by_txn = {d.txn_id: d for d in decisions}
    for d in decisions:  # the same check, by hand: a rejected writer's conflicting txn is never a rewrite
        if not d.accepted and d.operation is not None and d.operation.value not in REWRITES:
            other = by_txn.get(d.conflicting_txn_id)
            assert other is None or other.operation is None or other.operation.value not in REWRITES, d
    rewrites = [d for d in decisions if d.operation is not None and d.operation.value in REWRITES]
    accepted = [d for d in rewrites if d.accepted]
    assert any(d.operation.value == MINOR for d in accepted), "no MINOR COMPACT beside the stream"
    assert any(d.operation.value == MAJOR for d in accepted), (
        f"no MAJOR COMPACT once the partitions were cold: layout {layout}, rewrites "
        f"{[(d.id_version, d.operation.value, d.accepted, d.reason, d.partitions) for d in rewrites]}, "
        f"last update v{last_update.id_version}"
    )
    rejected = service.metrics.value(
        service.metrics.rejected, table="svc", operation=MAJOR, reason="CONFLICT_LATER_FAILS"
    )
    assert len([d for d in rewrites if not d.accepted]) >= rejected
    assert service.metrics.value(service.metrics.committed, table="svc", operation=MINOR) >= 1
    assert service.metrics.value(service.metrics.bytes_rewritten, table="svc", operation=MINOR) > 0

    # the data equals the model
    last = max(d.batch_id for d in decisions if d.accepted and d.batch_id is not None)
    streamed = (last + 1) * ROWS_PER_BATCH
    got = {r.id: (r.v, r.n, r.part) for r in table.read().collect()}
    expected = {i: (f"r{i}", 0, str(i % 2)) for i in range(streamed)}
    expected.update({-i: (f"s{i}", len(updates), "s") for i in range(1, SEEDS + 1)})
    assert got == expected
    assert table.snapshot().record_count == len(expected), "a rewrite left superseded records behind"

    layout = table_layout(table.catalog, "svc")
    # one base file and one stream file per bucket at most (writers split files by bucket)
    assert layout["max_files_per_partition"] <= 2 * table.layout.buckets < peak, (layout, peak)
    assert layout["last_compaction"] is not None
