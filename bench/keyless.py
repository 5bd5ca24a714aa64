"""Benchmark: what a keyless table costs against a key table, on one stack, interleaved.

    .venv/bin/python bench/keyless.py [--rows 200000] [--repeat 3] [--json PATH]

Starts its own stack on loopback (embedded Tansu broker, ``ordo arbiter`` and
``ordo consumer``) and a local Spark session (``local[2]``), creates a key
table (``primary_key="id"``) and a keyless one with the same schema
(``id BIGINT, value STRING, dt STRING``, 4 partitions, 4 buckets) and, each
round, on both tables in alternating order:

* appends ``--rows`` new rows (one INSERT INTO): total seconds, and the
  ``validate`` (key check: a grouping for the key table, a partition-value scan
  for the keyless one) and ``spark_write`` phases;
* UPDATEs 1 % of the rows (``id % 100 = 7``);
* reads the whole table (``toDF().count()``, merge-on-read).

Reports medians and the bytes per row of the appended files (the keyless
files carry the row id column).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def rows_frame(spark: Any, start: int, rows: int) -> Any:
    from pyspark.sql import functions as F

    return spark.range(start, start + rows).select(
        F.col("id"),
        F.concat(F.lit("value-"), F.col("id").cast("string")).alias("value"),
        F.concat(F.lit("d"), (F.col("id") % 4).cast("string")).alias("dt"),
    )


def round_of(table: Any, spark: Any, start: int, rows: int) -> dict[str, float]:
    started = time.perf_counter()
    with table.begin() as txn:
        txn.insert_into(rows_frame(spark, start, rows))
        result = txn.commit()
    append = time.perf_counter() - started
    assert result is not None
    started = time.perf_counter()
    table.update({"value": "concat(value, '!')"}, "id % 100 = 7")
    update = time.perf_counter() - started
    started = time.perf_counter()
    count = table.toDF().count()
    read = time.perf_counter() - started
    return {
        "append_s": append,
        "validate_s": txn.timings.get("validate", 0.0),
        "spark_write_s": txn.timings.get("spark_write", 0.0),
        "update_s": update,
        "read_s": read,
        "rows": float(count),
        "bytes_per_row": sum(f.size_bytes for f in result.added_files) / rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)

    from bench.common import interleave, machine, stack
    from ordo.producer.table import DeltaTable, close_connections
    from ordo.spark import local_spark_session

    with stack("keyless") as running:
        spark = local_spark_session("bench-keyless", cores=2)
        try:
            settings = running.settings
            schema = "id BIGINT, value STRING, dt STRING"
            tables = {
                "key": DeltaTable.create(
                    spark, "kt", schema=schema, primary_key="id", partitioned_by="dt", settings=settings
                ),
                "keyless": DeltaTable.create(spark, "klt", schema=schema, partitioned_by="dt", settings=settings),
            }
            for t in tables.values():  # warm-up: JVM, connections
                t.insert_into(rows_frame(spark, -1000, 1000))
            results = interleave(
                {name: (lambda r, t=t: round_of(t, spark, r * args.rows, args.rows)) for name, t in tables.items()},
                args.repeat,
            )
        finally:
            close_connections()
            spark.stop()
    report: dict[str, Any] = {"rows": args.rows, "repeat": args.repeat, "machine": machine()}
    print(f"{args.rows} rows per append, {args.repeat} rounds, load average {report['machine']['load_average']}")
    print(f"{'figure':16} {'key':>10} {'keyless':>10} {'ratio':>7}")
    for figure in ("append_s", "validate_s", "spark_write_s", "update_s", "read_s", "bytes_per_row"):
        medians = {name: statistics.median(r[figure] for r in runs) for name, runs in results.items()}
        report[figure] = medians
        ratio = medians["keyless"] / medians["key"] if medians["key"] else float("nan")
        print(f"{figure:16} {medians['key']:10.3f} {medians['keyless']:10.3f} {ratio:7.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
