"""The table service (``ordo compactor``) beside streaming ingestion: with and without it, in one plot.

Two runs on the same stack and Spark session, one after the other: a
Structured Streaming query (``rate-micro-batch``, upserts over a bounded key
space, four partitions, one INSERT INTO per micro-batch) into a fresh table,
once with the service off (``ordo.compaction.enabled=false``) and once with the
service (``ordo.services.compactor.Compactor``, in this process on the same Spark
session) running. Every few seconds: files per partition (max) from the
catalog, and the time of a full snapshot read. At the end: INSERT rejections
caused by the service (must be 0), service commits accepted/rejected, and the
snapshot read against the same rows as plain Parquet with the service on.

Both runs stream the same number of micro-batches (after a warm-up), so the
plot's x axis is micro-batches committed. Also: a snapshot read after 100 small upsert commits on a base table with the
service running during the commits (target: <= 1.5x plain Parquet).

Draws ``docs/compactor-service.png`` (matplotlib). Quick profile: ~1-2 minutes
per run (30 micro-batches); ``BENCH_PROFILE=full``: 200 micro-batches per run.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, Result, interleave, machine, median, pick, ratio, stack

BENCHMARK = "table service"
PLOT = ROOT / "docs" / "compactor-service.png"
SCHEMA = "id BIGINT, value STRING, part STRING"
PARTITIONS = 4
COLD_SECONDS = 5


def _read_seconds(frame: Any) -> float:
    started = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def _ingest(
    spark: Any, settings: Any, work: Path, name: str, service: bool, batches: int, seconds: float
) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from ordo.producer.streaming import foreach_batch_committer
    from ordo.producer.table import DeltaTable
    from ordo.services.compactor import Compactor, table_layout, writer_rejections_by_service

    properties = {"ordo.compaction.min_files": "4", "ordo.compaction.cold_seconds": "10"}
    if not service:
        properties["ordo.compaction.enabled"] = "false"
    table = DeltaTable.create(
        spark, name, schema=SCHEMA, primary_key="id", partitioned_by="part", properties=properties, settings=settings
    )
    keys = pick(50_000, 200_000)
    source = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", pick(2_000, 5_000)).load()
    rows = source.select(
        (F.col("value") % keys).alias("id"),
        F.concat(F.lit("v"), F.col("value").cast("string")).alias("value"),
        (F.col("value") % keys % PARTITIONS).cast("string").alias("part"),
    )
    compactor = Compactor(spark, settings, tables=[name], interval=2.0) if service else None
    stop = threading.Event()
    thread = threading.Thread(target=compactor.run, args=(stop,), daemon=True) if compactor else None
    committer = foreach_batch_committer(table, retries=10)
    query = (
        rows.writeStream.foreachBatch(committer)
        .option("checkpointLocation", str(work / f"{name}-checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    if thread is not None:
        thread.start()
    samples: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        while time.monotonic() - started < seconds and len(committer.committed) < batches:
            time.sleep(pick(3.0, 5.0))
            if query.exception() is not None:
                raise RuntimeError(f"the stream failed: {query.exception()}")
            layout = table_layout(table.catalog, name)
            samples.append(
                {
                    "t": round(time.monotonic() - started, 1),
                    "batches": len(committer.committed),
                    "files": layout["files"],
                    "max_files_per_partition": layout["max_files_per_partition"],
                    "read_s": round(_read_seconds(table.read()), 3),
                }
            )
    finally:
        query.stop()
        stop.set()
        if thread is not None:
            thread.join(300)
    decisions = table.decisions()
    rewrites = [d for d in decisions if d.operation is not None and d.operation.rewrites]
    return {
        "table": table,
        "samples": samples,
        "batches": len(committer.committed),
        "insert_rejections_by_service": len(writer_rejections_by_service(decisions)),
        "insert_rejections": len(
            [d for d in decisions if not d.accepted and not (d.operation and d.operation.rewrites)]
        ),
        "service_accepted": len([d for d in rewrites if d.accepted]),
        "service_rejected": len([d for d in rewrites if not d.accepted]),
    }


def _warm_up(spark: Any, settings: Any) -> None:
    """JVM, Kafka clients and Python workers warm before the first measured run."""
    from ordo.producer.table import DeltaTable

    table = DeltaTable.create(
        spark, "warm_up", schema=SCHEMA, primary_key="id", partitioned_by="part", settings=settings
    )
    for i in range(3):
        table.insert_into(spark.createDataFrame([(i, "w", str(i % PARTITIONS))], SCHEMA))
    table.read().count()


def _plot(runs: dict[str, dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (files_ax, read_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for label, run in runs.items():
        t = [s["batches"] for s in run["samples"]]
        files_ax.plot(t, [s["max_files_per_partition"] for s in run["samples"]], marker="o", label=label)
        read_ax.plot(t, [s["read_s"] for s in run["samples"]], marker="o", label=label)
    files_ax.set(title="files per partition (max)", xlabel="micro-batches committed", ylabel="live files")
    read_ax.set(title="snapshot read time", xlabel="micro-batches committed", ylabel="seconds")
    for ax in (files_ax, read_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("streaming ingestion with and without ordo compactor")
    fig.tight_layout()
    PLOT.parent.mkdir(exist_ok=True)
    fig.savefig(PLOT, dpi=100)
    plt.close(fig)


def _upserts_with_service(spark: Any, settings: Any, work: Path) -> dict[str, Any]:
    """100 small upsert commits on a base table with the service running; then reads vs plain Parquet."""
    from pyspark.sql import functions as F

    from bench.spark_insert import rows_frame
    from ordo.producer.table import DeltaTable
    from ordo.services.compactor import Compactor, table_layout

    base_rows = pick(200_000, 1_000_000)
    upserts = 100
    upsert_rows = base_rows // 100
    table = DeltaTable.create(
        spark,
        "upserts",
        schema="id BIGINT, value STRING, dt STRING",
        primary_key="id",
        partitioned_by="dt",
        properties={"ordo.compaction.cold_seconds": str(COLD_SECONDS)},
        settings=settings,
    )
    table.insert_into(rows_frame(spark, 0, base_rows, 4))
    compactor = Compactor(spark, settings, tables=["upserts"], interval=2.0)
    stop = threading.Event()
    thread = threading.Thread(target=compactor.run, args=(stop,), daemon=True)
    thread.start()
    started = time.perf_counter()
    try:
        for i in range(upserts):
            lo = i * upsert_rows
            table.insert_into(
                rows_frame(spark, lo, upsert_rows, 4).withColumn("value", F.concat(F.lit(f"v{i}-"), "value"))
            )
        commits_s = time.perf_counter() - started
        time.sleep(COLD_SECONDS + 2 * 2.0)  # the partitions turn cold: the MAJOR COMPACT becomes due
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and table_layout(table.catalog, "upserts")["pending"]:
            time.sleep(1.0)
        settle_s = time.perf_counter() - started - commits_s
    finally:
        stop.set()
        thread.join(300)
    version = table.version
    plain = str(work / "plain-upserts")
    table.read(version=version).write.parquet(plain)
    if spark.read.parquet(plain).count() != base_rows:
        raise RuntimeError("row counts differ")
    timings = interleave(
        {
            "plain": lambda _r: _read_seconds(spark.read.parquet(plain)),
            "table": lambda _r: _read_seconds(table.read(version=version)),
        },
        pick(5, 7),
    )
    return {
        "base_rows": base_rows,
        "upsert_commits": upserts,
        "commits_s": round(commits_s, 1),
        "settle_s": round(settle_s, 1),
        "live_files": len(table.snapshot(version).files),
        "service_commits": sum(1 for d in table.decisions() if d.accepted and d.operation and d.operation.rewrites),
        "plain_s": median(timings["plain"]),
        "table_s": median(timings["table"]),
        "seconds": {k: [round(x, 3) for x in v] for k, v in timings.items()},
    }


def run() -> list[Result]:
    from ordo.producer.table import close_connections
    from ordo.spark import local_spark_session

    batches = pick(30, 200)
    seconds = pick(180.0, 900.0)  # a run ends after this long even if it committed fewer micro-batches
    results: list[Result] = []
    with stack("service") as bench_stack:
        settings, work = bench_stack.settings, bench_stack.work
        spark = local_spark_session("ordo-bench-service", cores=2)
        try:
            _warm_up(spark, settings)
            runs = {
                "service off": _ingest(spark, settings, work, "ingest_off", False, batches, seconds),
                "service on": _ingest(spark, settings, work, "ingest_on", True, batches, seconds),
            }
            on = runs["service on"]
            plain = str(work / "plain-ingest")
            on["table"].read().write.parquet(plain)
            reads = interleave(
                {
                    "plain": lambda _r: _read_seconds(spark.read.parquet(plain)),
                    "on": lambda _r: _read_seconds(runs["service on"]["table"].read()),
                    "off": lambda _r: _read_seconds(runs["service off"]["table"].read()),
                },
                pick(3, 5),
            )
            upserts = _upserts_with_service(spark, settings, work)
        finally:
            close_connections()
            spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    _plot(runs)
    figures = {label: {k: v for k, v in run.items() if k != "table"} for label, run in runs.items()}
    plain_s, on_s, off_s = (median(reads[k]) for k in ("plain", "on", "off"))
    common = {"runs": figures, "read_seconds": reads, "plot": str(PLOT.relative_to(ROOT)), "batches": batches}
    results.append(
        Result(
            BENCHMARK,
            "INSERT rejections caused by the service during streaming ingestion",
            "txns",
            on["insert_rejections_by_service"],
            target="0",
            met=on["insert_rejections_by_service"] == 0,
            samples=common,
            notes=f"service commits: {on['service_accepted']} accepted, {on['service_rejected']} rejected; "
            f"{on['batches']} micro-batches with it, {runs['service off']['batches']} without",
            machine=machine(),
        )
    )
    results.append(
        Result(
            BENCHMARK,
            "files per partition (max) at the end of ingestion, service on",
            "files",
            on["samples"][-1]["max_files_per_partition"] if on["samples"] else None,
            peer="service off",
            peer_value=runs["service off"]["samples"][-1]["max_files_per_partition"]
            if runs["service off"]["samples"]
            else None,
            samples={"plot": common["plot"]},
            notes=f"{batches} micro-batches per run (at most {seconds:.0f} s); over time: docs/compactor-service.png",
            machine=machine(),
        )
    )
    results.append(
        Result(
            BENCHMARK,
            "snapshot read after streaming ingestion, service on",
            "s",
            round(on_s, 3),
            peer="plain Parquet, same rows",
            peer_value=round(plain_s, 3),
            ratio=ratio(on_s, plain_s),
            samples={"service_off_s": round(off_s, 3), "ratio_off": ratio(off_s, plain_s)},
            notes="all columns read (noop sink), merge-on-read; the service-off table read "
            f"{off_s:.3f} s ({ratio(off_s, plain_s)}x plain)",
            machine=machine(),
        )
    )
    results.append(
        Result(
            BENCHMARK,
            "snapshot read after 100 small upsert commits, service running during the commits",
            "s",
            round(upserts["table_s"], 3),
            peer="plain Parquet, same rows",
            peer_value=round(upserts["plain_s"], 3),
            ratio=ratio(upserts["table_s"], upserts["plain_s"]),
            target="<= 1.5x plain Parquet",
            met=(ratio(upserts["table_s"], upserts["plain_s"]) or 99) <= 1.5,
            samples=upserts,
            notes=f"{upserts['base_rows']:,} base rows; read once the partitions were cold and the service had "
            f"no pending work ({upserts['settle_s']} s after the last commit)",
            machine=machine(),
        )
    )
    return results


if __name__ == "__main__":
    os.environ.setdefault("BENCH_PROFILE", "quick")
    from bench.common import table

    print(table(run()))
