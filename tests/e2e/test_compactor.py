"""The table service beside a streaming writer and concurrent UPDATEs, end to end (real broker, arbiter, Spark).

A Structured Streaming query inserts micro-batches into partitions ``0`` to
``3`` while a thread UPDATEs the seed rows of partition ``s`` and the service
(``ordo.services.compactor.Compactor``, on the same Spark session in a thread) compacts:
its batches rewrite many (partition, bucket) groups in one Spark job and commit
per partition. Afterwards: no writer decision was rejected because of the
service, the service's commits were accepted, the data equals the model (every
streamed id once, the seed rows updated once per accepted UPDATE), and files
per partition went down.

Then the batches themselves (``producer.rewrites``): one Spark job for every
partition of a batch, and a conflict that loses one partition's rewrite only;
and the service's scheduling: every partition of a table in one batch, tables
in parallel up to the limit, a fleet that splits the tables.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ordo.errors import CommitConflictError
from ordo.producer.streaming import foreach_batch_committer
from ordo.producer.table import DeltaTable
from ordo.services.compactor import MAJOR, MINOR, Compactor, table_layout, writer_rejections_by_service
from tests.e2e.stack import writer_stack  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

SCHEMA = "id BIGINT, v STRING, n BIGINT, part STRING"
ROWS_PER_BATCH = 100
STREAM_PARTITIONS = 4
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
        (F.col("value") % STREAM_PARTITIONS).cast("string").alias("part"),
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
    expected = {i: (f"r{i}", 0, str(i % STREAM_PARTITIONS)) for i in range(streamed)}
    expected.update({-i: (f"s{i}", len(updates), "s") for i in range(1, SEEDS + 1)})
    assert got == expected
    assert table.snapshot().record_count == len(expected), "a rewrite left superseded records behind"

    layout = table_layout(table.catalog, "svc")
    # one base file and one stream file per bucket at most (writers split files by bucket)
    assert layout["max_files_per_partition"] <= 2 * table.layout.buckets < peak, (layout, peak)
    assert layout["last_compaction"] is not None


# --------------------------------------------------------------------------- batches: one job, a commit per partition

BATCH_PARTITIONS = ("0", "1", "2", "3")


def _filled(spark: Any, settings: Any, name: str, partitions: Sequence[str], inserts: int, **properties: str) -> Any:
    """A table of ``partitions`` (4 buckets) with ``inserts`` INSERT INTOs: about one file per group each."""
    table = DeltaTable.create(
        spark,
        name,
        schema=SCHEMA,
        primary_key="id",
        partitioned_by="part",
        properties={"ordo.compaction.cold_seconds": "3600", **properties},
        settings=settings,
    )
    for n in range(inserts):
        rows = [(i, f"v{n}", n, p) for k, p in enumerate(partitions) for i in range(k * 1000, k * 1000 + 40)]
        table.insert_into(spark.createDataFrame(rows, SCHEMA))
    return table


def _spark_jobs(spark: Any, group: str, stage: Callable[[], Any]) -> tuple[Any, int]:
    """``stage()``'s result and the Spark jobs it ran (in job group ``group``)."""
    spark.sparkContext.setJobGroup(group, group)
    try:
        return stage(), len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)


def test_one_spark_job_rewrites_every_partition_and_a_conflict_loses_only_its_partition(
    spark: Any,
    writer_stack: Any,  # noqa: F811
) -> None:
    from ordo.producer.rewrites import PartitionRewrite, commit_each, stage_rewrites
    from ordo.schemas import Operation
    from ordo.schemas.paths import write_id_of
    from ordo.services.compactor import SPARK_CONF

    table = _filled(
        spark, writer_stack.settings, "batched", BATCH_PARTITIONS, 3, **{"ordo.compaction.enabled": "false"}
    )
    version = table.version
    before = table.read().collect()
    listing = next(iter(SPARK_CONF))
    spark.conf.set(listing, SPARK_CONF[listing])  # the service's session: no listing job of its own
    try:
        one, jobs_one = _spark_jobs(
            spark,
            "batch-one",
            lambda: stage_rewrites(
                table, Operation.MAJOR_COMPACT, [PartitionRewrite({"part": "0"})], read_version=version
            ),
        )
        for txn in one:
            txn.abort()
        staged, jobs_all = _spark_jobs(
            spark,
            "batch-all",
            lambda: stage_rewrites(
                table,
                Operation.MAJOR_COMPACT,
                [PartitionRewrite({"part": p}) for p in BATCH_PARTITIONS],
                read_version=version,
            ),
        )
    finally:
        spark.conf.unset(listing)
    assert jobs_all == jobs_one > 0, "the Spark work of a batch grows with its partitions"
    assert [t.partitions for t in staged] == [({"part": p},) for p in BATCH_PARTITIONS]
    assert len({t.txn_id for t in staged}) == len(BATCH_PARTITIONS)
    for txn in staged:  # each partition's output in its partition, named by its own transaction (the write id)
        assert txn.read_version == version
        assert txn.added_files and {f.partition["part"] for f in txn.added_files} == {txn.partitions[0]["part"]}
        assert {write_id_of(f.path) for f in txn.added_files} == {txn.txn_id}
        assert len(txn.added_files) == len({f.bucket for f in txn.added_files}) == table.layout.buckets

    # an INSERT into partition 2 commits meanwhile: INSERT -> MAJOR is "later fails" there, nowhere else
    table.insert_into(spark.createDataFrame([(2000, "late", 9, "2")], SCHEMA))
    outcomes = dict(zip(BATCH_PARTITIONS, commit_each(staged), strict=True))
    assert isinstance(outcomes.pop("2"), CommitConflictError)
    assert all(not isinstance(r, BaseException) for r in outcomes.values()), outcomes
    lost = next(t for t in staged if t.partitions[0]["part"] == "2")
    assert not any((writer_stack.warehouse / "batched" / f.path).exists() for f in lost.added_files)

    layout = table_layout(table.catalog, "batched")
    assert layout["files_per_partition"]["2"] == 3 * table.layout.buckets + 1  # untouched, plus the insert
    assert all(layout["files_per_partition"][p] == table.layout.buckets for p in ("0", "1", "3"))
    expected = {r.id: (r.v, r.n, r.part) for r in before} | {2000: ("late", 9, "2")}
    assert {r.id: (r.v, r.n, r.part) for r in table.read().collect()} == expected


def test_the_service_rewrites_a_table_in_one_batch_and_tables_in_parallel_up_to_the_limit(
    spark: Any,
    writer_stack: Any,  # noqa: F811
) -> None:
    names = ["par_a", "par_b", "par_c"]
    tables = [
        _filled(spark, writer_stack.settings, n, BATCH_PARTITIONS, 3, **{"ordo.compaction.min_files": "3"})
        for n in names
    ]
    groups = sum(len({(f.partition["part"], f.bucket) for f in t.snapshot().files}) for t in tables)
    service = Compactor(spark, writer_stack.settings, tables=names, interval=INTERVAL, parallel_tables=2)
    busy: list[float] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            busy.append(service.metrics.value(service.metrics.busy))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        committed = service.round()
    finally:
        sampling.set()
        sampler.join(10)
        service.shutdown()
        service.close()
    assert committed == groups, service.metrics.samples()
    assert max(busy) == 2, "never two tables at once, or more than the limit"
    for table in tables:
        rewrites = [d for d in table.decisions() if d.operation is not None and d.operation.value in REWRITES]
        assert len(rewrites) == len(BATCH_PARTITIONS) and all(d.accepted for d in rewrites)
        assert {d.operation.value for d in rewrites} == {MINOR}
        assert len({d.read_version for d in rewrites}) == 1, "one batch: every partition read at one version"
        assert service.metrics.value(service.metrics.committed, table=table.name, operation=MINOR) == 4
        assert table_layout(table.catalog, table.name)["max_files_per_partition"] == table.layout.buckets


def test_a_fleet_splits_the_tables_and_hands_them_over(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    """Two members of one group: each table compacted by one of them; when one leaves, the other takes over."""
    from ordo.services.compactor_fleet import Claims

    settings = writer_stack.settings
    names = [f"fleet_{i}" for i in range(4)]
    tables = [_filled(spark, settings, n, ("0", "1"), 0, **{"ordo.compaction.min_files": "3"}) for n in names]
    group = f"{settings.topic_prefix}.compactors"
    members = []
    for _ in range(2):
        claims = Claims(settings, group)
        member = Compactor(spark, settings, tables=names, interval=INTERVAL, claims=claims)
        claims.on_release(member.release)
        claims.join()
        members.append(member)

    def split() -> bool:
        for member in members:
            member.claims.poll()
        owned = [set(filter(member.claims.holds, names)) for member in members]
        return all(owned) and not owned[0] & owned[1] and owned[0] | owned[1] == set(names)

    deadline = time.monotonic() + 120
    while not split():
        assert time.monotonic() < deadline, "the group did not split the tables"
        time.sleep(0.2)
    owners = {n: i for i, member in enumerate(members) for n in names if member.claims.holds(n)}
    for table in tables:
        for n in range(3):
            rows = [(i, f"v{n}", n, p) for k, p in enumerate(("0", "1")) for i in range(k * 1000, k * 1000 + 40)]
            table.insert_into(spark.createDataFrame(rows, SCHEMA))
    try:
        for member in members:
            member.round()
        for name in names:  # each table by its owner alone
            counts = [m.metrics.value(m.metrics.committed, table=name, operation=MINOR) for m in members]
            assert counts[owners[name]] == 2 and counts[1 - owners[name]] == 0, (name, counts)
        leaving, staying = members
        leaving.shutdown()
        leaving.claims.close()
        deadline = time.monotonic() + 120
        while not all(staying.claims.holds(n) for n in names):
            assert time.monotonic() < deadline, "the tables did not move to the member left"
            staying.claims.poll()
            time.sleep(0.2)
        for table in tables:
            for n in range(3, 6):
                table.insert_into(spark.createDataFrame([(i, f"v{n}", n, "0") for i in range(40)], SCHEMA))
        staying.round()
        for name in names:
            assert staying.metrics.value(staying.metrics.committed, table=name, operation=MINOR) >= 1, name
    finally:
        for member in members:
            member.shutdown()
            member.claims.close()
            member.close()
    for table in tables:
        rejected = [d for d in table.decisions() if not d.accepted]
        assert rejected == [], "a rewrite met another rewrite"


def test_the_services_warm_up_rewrite_runs_end_to_end(spark: Any) -> None:
    """``warm_up`` (the service's first, scratch rewrite) writes and rewrites; the service would only log a
    failure of it, so it is run here directly."""
    from ordo.producer.rewrites import warm_up

    warm_up(spark)  # raises on any error in the write, the scan or the rewrite
