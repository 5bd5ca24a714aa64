"""The ``format("ordo")`` data source: the sink's cost per micro-batch and the change-feed source's rows/s.

One stack on loopback (embedded Tansu, ``ordo arbiter``, ``ordo consumer``) and
one local Spark session. Run alone: ``python -m bench.datasource``.

* Sink overhead: the same ``rate-micro-batch`` stream (R rows per batch, two
  partitions) into a table, once through ``foreachBatch(foreach_batch_committer)``
  and once through ``writeStream.format("ordo")``, B batches each, as fast as
  Spark goes; per batch Spark's ``triggerExecution`` duration, median.
* Change feed: a table gets C commits of upserts (half new keys, half updates
  of existing keys: update pairs need pre-images); a ``readStream`` of its
  change feed (Delta's form) from version 1 into Spark's ``noop`` sink; rows
  delivered / wall time of the query, and the batch read of the same range.

An entry of ``python -m bench`` (``datasource``; results in ``bench/results.json``);
the quick profile takes about two minutes. Run alone, it prints the same figures
as JSON.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from bench.common import Result, machine, pick, ratio, stack

BENCHMARK = "datasource"
SCHEMA = "id BIGINT, v STRING, dt STRING"


def _stream(spark: Any, rows: int) -> Any:
    from pyspark.sql import functions as F

    source = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows).load()
    return source.select(
        F.col("value").alias("id"),
        F.concat(F.lit("r"), F.col("value").cast("string")).alias("v"),
        (F.col("value") % 2).cast("string").alias("dt"),
    )


def _batch_ms(query: Any, batches: int) -> list[float]:
    deadline = time.monotonic() + 600
    while len([p for p in query.recentProgress if p["numInputRows"]]) < batches:
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        if time.monotonic() > deadline:
            raise TimeoutError(f"{query.lastProgress}")
        time.sleep(0.2)
    query.stop()
    progress = [p for p in query.recentProgress if p["numInputRows"]][1:batches]  # the first batch warms up
    return [float(p["durationMs"]["triggerExecution"]) for p in progress]


def measure() -> dict[str, Any]:
    """Both measurements as plain figures (what ``run`` turns into results)."""
    from ordo.producer.streaming import foreach_batch_committer
    from ordo.producer.table import DeltaTable, close_connections
    from ordo.spark import local_spark_session
    from ordo.spark.datasource import settings_options

    rows_per_batch = pick(1_000, 10_000)
    batches = pick(8, 30)
    commits = pick(6, 20)
    commit_rows = pick(10_000, 100_000)
    out: dict[str, Any] = {}
    with stack("ds", "benchds") as bench_stack:
        settings, work = bench_stack.settings, bench_stack.work
        spark = local_spark_session("ordo-bench-ds", cores=2)
        opts = settings_options(settings)
        try:
            # ---------------------------------------------------------------- sink vs foreachBatch
            per_batch: dict[str, list[float]] = {}
            for label in ("foreachBatch", "ordo sink", "foreachBatch ", "ordo sink "):
                name = "sink_" + label.strip().replace(" ", "_").lower() + str(sum(map(len, per_batch.values())))
                table = DeltaTable.create(
                    spark, name, schema=SCHEMA, primary_key="id", partitioned_by="dt", settings=settings
                )
                writer = _stream(spark, rows_per_batch).writeStream.option(
                    "checkpointLocation", str(work / f"chk-{name}")
                )
                if label.startswith("foreachBatch"):
                    query = writer.foreachBatch(foreach_batch_committer(table)).start()
                else:
                    query = writer.format("ordo").options(**opts).start(name)
                per_batch.setdefault(label.strip(), []).extend(_batch_ms(query, batches))
            out["sink"] = {
                "rows_per_batch": rows_per_batch,
                "batches": batches,
                "median_ms": {k: statistics.median(v) for k, v in per_batch.items()},
                "samples_ms": per_batch,
            }
            # ---------------------------------------------------------------- change feed rows/s
            feed = DeltaTable.create(
                spark, "feed", schema=SCHEMA, primary_key="id", partitioned_by="dt", settings=settings
            )
            from pyspark.sql import functions as F

            for c in range(commits):
                start = c * commit_rows // 2  # half the keys are the previous commit's: updates
                df = spark.range(start, start + commit_rows).select(
                    F.col("id"),
                    F.concat(F.lit(f"c{c}-"), F.col("id").cast("string")).alias("v"),
                    (F.col("id") % 4).cast("string").alias("dt"),
                )
                feed.insert_into(df)
            started = time.perf_counter()
            query = (
                spark.readStream.format("ordo")
                .options(**opts)
                .option("readChangeFeed", "true")
                .option("startingVersion", 1)
                .load("feed")
                .writeStream.format("noop")
                .option("checkpointLocation", str(work / "chk-feed"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(900)
            stream_s = time.perf_counter() - started
            stream_rows = sum(p["numInputRows"] for p in query.recentProgress)
            started = time.perf_counter()
            batch_rows = (
                spark.read.format("ordo")
                .options(**opts)
                .option("readChangeFeed", "true")
                .option("startingVersion", 1)
                .load("feed")
                .count()
            )
            batch_s = time.perf_counter() - started
            out["change_feed"] = {
                "commits": commits,
                "rows_per_commit": commit_rows,
                "stream_rows": stream_rows,
                "stream_seconds": round(stream_s, 2),
                "stream_rows_per_s": round(stream_rows / stream_s),
                "batch_rows": batch_rows,
                "batch_seconds": round(batch_s, 2),
                "batch_rows_per_s": round(batch_rows / batch_s),
            }
        finally:
            spark.stop()
            close_connections()
    return out


def run() -> list[Result]:
    """The figures of ``python -m bench datasource``."""
    out = measure()
    sink, feed = out["sink"], out["change_feed"]
    ours, theirs = sink["median_ms"]["ordo sink"], sink["median_ms"]["foreachBatch"]
    return [
        Result(
            BENCHMARK,
            "streaming sink: time per micro-batch",
            "ms",
            round(ours, 1),
            peer="foreachBatch(foreach_batch_committer)",
            peer_value=round(theirs, 1),
            ratio=ratio(ours, theirs),
            target="<= 1.1x foreachBatch",
            met=(ratio(ours, theirs) or 99) <= 1.1,
            samples=sink["samples_ms"],
            notes=f"rate-micro-batch, {sink['rows_per_batch']:,} rows per batch over 2 partitions; Spark's "
            f"triggerExecution per batch, median; {sink['batches'] - 1} timed batches per run after a warm-up, "
            "two runs per side, sides alternated",
            machine=machine(),
        ),
        Result(
            BENCHMARK,
            "change feed stream (Delta's form): rows per second",
            "rows/s",
            feed["stream_rows_per_s"],
            peer="batch change feed, same range",
            peer_value=feed["batch_rows_per_s"],
            ratio=ratio(feed["stream_rows_per_s"], feed["batch_rows_per_s"]),
            samples={k: v for k, v in feed.items() if k.endswith(("rows", "seconds"))},
            notes=f"{feed['commits']} INSERT INTO commits of {feed['rows_per_commit']:,} rows over 4 partitions, "
            "each after the first updating half its keys (pre-images needed); readStream from version 1 into "
            "the noop sink (availableNow), wall time including the query start; the batch read is a count()",
            machine=machine(),
        ),
    ]


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))
