"""A Structured Streaming query in a process of its own (its own Spark driver), for the kill tests.

    python -m tests.e2e.stream_child sink TABLE CHECKPOINT OPTIONS_JSON ROWS_PER_BATCH
    python -m tests.e2e.stream_child feed TABLE CHECKPOINT OPTIONS_JSON OUTPUT

``sink``: a ``rate-micro-batch`` source (batch ``b`` holds the values
``b * ROWS_PER_BATCH ..``, the same rows when a batch is replayed) into
``format("ordo")``, micro-batches back to back. ``feed``: the table's change
feed in Delta's shape from version 1, one version per micro-batch, into a
Parquet file sink (exactly once by its own log). Both run until killed;
``OPTIONS_JSON`` holds the ``ordo.*`` settings options. Prints ``started`` once
the query runs.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> None:
    from pyspark.sql import functions as F

    from ordo.spark import local_spark_session

    mode, table, checkpoint, options = argv[0], argv[1], argv[2], json.loads(argv[3])
    spark = local_spark_session(f"ordo-kill-{mode}", cores=1)
    if mode == "sink":
        rows = int(argv[4])
        source = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows).load()
        query = (
            source.select(
                F.col("value").alias("id"),
                F.concat(F.lit("r"), F.col("value").cast("string")).alias("v"),
                (F.col("value") % 2).cast("string").alias("part"),
            )
            .writeStream.format("ordo")
            .options(**options)
            .option("checkpointLocation", checkpoint)
            .start(table)
        )
    elif mode == "feed":
        query = (
            spark.readStream.format("ordo")
            .options(**options)
            .option("readChangeFeed", "true")
            .option("startingVersion", 1)
            .option("maxVersionsPerTrigger", 1)
            .load(table)
            .writeStream.format("parquet")
            .option("path", argv[4])
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="500 milliseconds")
            .start()
        )
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print("started", query.id, flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
