"""Benchmark: what an append costs on S3 against local disk, the writer's files written once at their final path.

    python -m bench object-store        (BENCH_PROFILE=full: five repeats instead of three)

One stack (broker, arbiter, consumer on loopback), one local Spark session and
one S3 server (S3Proxy, ``ordo.broker.s3proxy``, its in-memory backend) in one
run; two tables alike, one under a local directory and one at
``s3://bench/...``. Each repeat appends to both, alternating which goes first:

* a 1-row append;
* a ~100 MB append (incompressible payload; the bytes are the Parquet files').

Each figure is the wall time of ``insert_into`` (validate, the tasks writing
their files, the commit, the catalog showing the version), split into
``write`` (Spark's jobs and the tasks' uploads) and ``commit`` (publish the
intent, wait for the decision and for the catalog). The writer never renames
a file (docs/writer.md, "File layout"), so S3 costs the upload and nothing
after it. The load average is recorded with the figures.
"""

from __future__ import annotations

import os
from typing import Any

from bench.common import Result, interleave, machine, median, pick, ratio, stack

BENCHMARK = "object-store"
BUCKET = "bench"
BIG_ROWS = 1_300_000  # ~100 MB of Parquet: a 144-character hex payload per row (zstd halves it)
SCHEMA = "id BIGINT, payload STRING, dt STRING"


def rows(spark: Any, start: int, count: int) -> Any:
    from pyspark.sql import functions as F

    hashed = [F.sha2(F.concat(F.col("id").cast("string"), F.lit(salt)), 256) for salt in ("a", "b", "c")]
    return spark.range(start, start + count).select(
        F.col("id"),
        F.substring(F.concat(*hashed), 1, 144).alias("payload"),
        F.concat(F.lit("d"), (F.col("id") % 2).cast("string")).alias("dt"),
    )


def append(table: Any, df: Any) -> dict[str, float]:
    """One append in its own transaction: wall time, split into writing and committing (``spark_insert``)."""
    from bench.spark_insert import one_insert

    run = one_insert(table, df)
    commit = run["commit_s"] + run["catalog_wait_s"]
    return {
        "total_s": run["total_s"],
        "write_s": round(run["total_s"] - commit, 3),
        "commit_s": round(commit, 3),
        "bytes": run["bytes"],
        "files": run["files"],
    }


def run() -> list[Result]:
    from ordo.broker.s3proxy import S3ProxyServer
    from ordo.kernel.objectstore import use_options
    from ordo.producer.table import DeltaTable, close_connections
    from ordo.spark import local_spark_session

    repeats = pick(3, 5)
    saved = dict(os.environ)
    with S3ProxyServer(heap="2g") as s3, stack(BENCHMARK) as ordo:
        s3.create_bucket(BUCKET)
        os.environ.update(s3.environment())
        use_options(None)
        spark = local_spark_session("bench-object-store")
        try:
            tables = {
                where: DeltaTable.create(
                    spark,
                    f"append_{where}",
                    schema=SCHEMA,
                    primary_key="id",
                    partitioned_by="dt",
                    location=location,
                    settings=ordo.settings,
                )
                for where, location in (("local", str(ordo.work / "local")), ("s3", f"s3://{BUCKET}/append"))
            }
            for table in tables.values():
                append(table, rows(spark, -10, 10))  # warm-up: JVM, Kafka connections, the S3 client
            starts = {"local": 0, "s3": 0}

            def side(where: str, count: int) -> Any:
                def go(_round: int) -> dict[str, float]:
                    first = starts[where]
                    starts[where] += count
                    return append(tables[where], rows(spark, first, count))

                return go

            small = interleave({w: side(w, 1) for w in tables}, repeats)
            big = interleave({w: side(w, BIG_ROWS) for w in tables}, repeats)
        finally:
            close_connections()
            spark.stop()
            os.environ.clear()
            os.environ.update(saved)
            use_options(None)
    results = []
    for label, runs in (("1-row append", small), ("~100 MB append", big)):
        s3_total = median(r["total_s"] for r in runs["s3"])
        local_total = median(r["total_s"] for r in runs["local"])
        results.append(
            Result(
                BENCHMARK,
                f"{label}: wall time on S3 (S3Proxy) vs local disk",
                "s",
                round(s3_total, 3),
                peer="local disk",
                peer_value=round(local_total, 3),
                ratio=ratio(s3_total, local_total),
                samples={
                    "s3": runs["s3"],
                    "local": runs["local"],
                    "s3_commit_s": median(r["commit_s"] for r in runs["s3"]),
                    "local_commit_s": median(r["commit_s"] for r in runs["local"]),
                    "mb": round(median(r["bytes"] for r in runs["s3"]) / 1e6, 1),
                },
                notes="median of interleaved repeats; commit = publish + decision + catalog; files written once "
                "at their final path (no rename)",
                machine=machine(),
            )
        )
    return results


if __name__ == "__main__":
    from bench.common import table

    print(table(run()))
