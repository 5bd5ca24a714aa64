"""Benchmark: one INSERT INTO of N rows through the Spark writer, split into writing data vs committing.

    .venv/bin/python bench/spark_insert.py [--rows 1000000] [--partitions 4] [--repeat 3] [--json PATH]

Starts its own stack on loopback (embedded Tansu broker, ``ordo arbiter`` and
``ordo consumer`` processes; Tansu keeps everything in memory) and a local
Spark session (``local[2]``). Each repetition inserts ``--rows`` new rows
(``id BIGINT, value STRING, dt STRING`` over ``--partitions`` partitions) in
one transaction and reports its phases:

* ``validate``: the Spark job refusing null/duplicate keys and bad partition values;
* ``spark_write``: the Spark job whose tasks write the Parquet files at their final paths
  (``<partition>/<txn id>-<n>.parquet``, described from the footers they wrote);
* ``finish_files``: reading the list of files the tasks reported (nothing is moved);
* ``publish_decision``: publishing the intent and waiting for the arbiter's decision;
* ``catalog_wait``: until the consumer's catalog shows the new version (read-your-writes).

"write data" = validate + spark_write + finish_files; "commit" = publish_decision.
A small warm-up insert runs first (JVM, Kafka connections) and is reported apart.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PHASES = ("validate", "spark_write", "finish_files", "publish_decision", "catalog_wait")
WRITE_PHASES = ("validate", "spark_write", "finish_files")


def rows_frame(spark: Any, start: int, rows: int, partitions: int) -> Any:
    from pyspark.sql import functions as F

    return spark.range(start, start + rows).select(
        F.col("id"),
        F.concat(F.lit("value-"), F.col("id").cast("string")).alias("value"),
        F.date_format(
            F.date_add(F.lit("2024-01-01").cast("date"), (F.col("id") % partitions).cast("int")), "yyyy-MM-dd"
        ).alias("dt"),
    )


def one_insert(table: Any, df: Any) -> dict[str, Any]:
    started = time.perf_counter()
    with table.begin() as txn:
        txn.insert_into(df)
        result = txn.commit()
    total = time.perf_counter() - started
    assert result is not None
    phases = {p: round(txn.timings.get(p, 0.0), 3) for p in PHASES}
    return {
        "id_version": result.id_version,
        "records": result.record_count,
        "files": len(result.added_files),
        "bytes": sum(f.size_bytes for f in result.added_files),
        "phases": phases,
        "write_data_s": round(sum(phases[p] for p in WRITE_PHASES), 3),
        "commit_s": phases["publish_decision"],
        "catalog_wait_s": phases["catalog_wait"],
        "total_s": round(total, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "spark_insert.json"))
    parser.add_argument("--keep", action="store_true", help="keep the warehouse directory")
    args = parser.parse_args(argv)

    from bench.common import stack
    from ordo.producer.table import DeltaTable, close_connections
    from ordo.spark import local_spark_session

    runs: list[dict[str, Any]] = []
    with stack("insert") as bench_stack:
        settings, work = bench_stack.settings, bench_stack.work
        spark = local_spark_session("ordo-bench", cores=args.cores)
        try:
            table = DeltaTable.create(
                spark,
                "bench_insert",
                schema="id BIGINT, value STRING, dt STRING",
                primary_key="id",
                partitioned_by="dt",
                settings=settings,
            )
            warmup = one_insert(table, rows_frame(spark, 0, 1000, args.partitions))
            print(f"warm-up (1000 rows): {warmup['total_s']:.2f} s {warmup['phases']}")
            start = 1000
            for i in range(args.repeat):
                run = one_insert(table, rows_frame(spark, start, args.rows, args.partitions))
                start += args.rows
                runs.append(run)
                print(
                    f"run {i + 1}: {run['records']:,} rows, {run['files']} files, {run['bytes'] / 1e6:.1f} MB: "
                    f"write data {run['write_data_s']:.2f} s, commit {run['commit_s'] * 1000:.0f} ms, "
                    f"catalog {run['catalog_wait_s'] * 1000:.0f} ms, total {run['total_s']:.2f} s  {run['phases']}"
                )
            count = table.read().count()
            assert count == 1000 + args.rows * args.repeat, count
        finally:
            close_connections()
            spark.stop()
    summary = {p: round(statistics.median(r["phases"][p] for r in runs), 3) for p in PHASES} | {
        k: round(statistics.median(r[k] for r in runs), 3)
        for k in ("write_data_s", "commit_s", "catalog_wait_s", "total_s")
    }
    print(
        f"median of {len(runs)}: write data {summary['write_data_s']:.2f} s "
        f"(validate {summary['validate']:.2f}, spark write {summary['spark_write']:.2f}, "
        f"finish files {summary['finish_files']:.3f}), commit {summary['commit_s'] * 1000:.0f} ms, "
        f"catalog wait {summary['catalog_wait_s'] * 1000:.0f} ms, total {summary['total_s']:.2f} s"
    )
    report = {
        "benchmark": "spark_insert",
        "rows": args.rows,
        "partitions": args.partitions,
        "cores": args.cores,
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "warmup": warmup,
        "runs": runs,
        "median": summary,
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
