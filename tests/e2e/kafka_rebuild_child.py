"""Child of ``test_change_topic_spark.py``: rebuild a table from its change topic with Spark's own Kafka source.

    python tests/e2e/kafka_rebuild_child.py BOOTSTRAP TOPIC CATALOG TABLE OUT.json

A Spark session of its own (the connector must be on the classpath when the
JVM starts; ``tools/spark_kafka.py`` fetches it), ``format("kafka")`` with
read_committed, ``from_json`` with Debezium's envelope over the table's
schema, the last record per key wins and a ``d`` drops the key; every
tombstone (a null value) must follow its ``d`` at once, under its key. Writes the
rebuilt rows, ordo's snapshot of the table (``consumer.spark.read``) and
counts to OUT.json.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))


def main(bootstrap: str, topic: str, catalog: str, table: str, out: str) -> None:
    import spark_kafka
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from ordo.consumer.spark import read
    from ordo.spark import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("ordo-change-topic")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
    )
    for key, value in spark_kafka.spark_config().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    snapshot = read(spark, table, catalog=catalog)
    row_type = StructType([StructField(f.name, f.dataType, True) for f in snapshot.schema.fields])
    source = StructType(
        [
            StructField("table", StringType()),
            StructField("id_version", LongType()),
            StructField("row", LongType()),
            StructField("txn_id", StringType()),
            StructField("ts_ms", LongType()),
        ]
    )
    envelope = StructType(
        [
            StructField("before", row_type),
            StructField("after", row_type),
            StructField("op", StringType()),
            StructField("source", source),
            StructField("ts_ms", LongType()),
        ]
    )
    raw = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    events = (
        raw.where(F.col("value").isNotNull())  # tombstones: checked below
        .select(
            "offset",
            F.col("key").cast("string").alias("key"),
            F.from_json(F.col("value").cast("string"), envelope).alias("e"),
        )
        .cache()
    )
    # every record in offset order: (key, op or None for a tombstone); a tombstone must follow its delete at once
    sequence = [
        (r["key"], r["op"])
        for r in raw.select(
            "offset",
            F.col("key").cast("string").alias("key"),
            F.get_json_object(F.col("value").cast("string"), "$.op").alias("op"),
        )
        .orderBy("offset")
        .collect()
    ]
    tombstones = [i for i, (_, op) in enumerate(sequence) if op is None]
    entombed = all(i > 0 and sequence[i - 1] == (sequence[i][0], "d") for i in tombstones)
    deletes = [i for i, (_, op) in enumerate(sequence) if op == "d"]
    entombed = entombed and all(i + 1 < len(sequence) and sequence[i + 1] == (sequence[i][0], None) for i in deletes)
    image = F.coalesce(F.col("e.after"), F.col("e.before"))
    keyed = events.select(
        "offset", "key", "e.op", "e.after", image.getField("id").alias("kid"), image.getField("dt").alias("kdt")
    )
    latest = Window.partitionBy("kid", "kdt").orderBy(F.col("offset").desc())
    rebuilt = keyed.withColumn("n", F.row_number().over(latest)).where("n = 1 AND op != 'd'").select("after.*")
    ops = {r["op"]: r["count"] for r in events.groupBy(F.col("e.op").alias("op")).count().collect()}
    unparsed = events.where(F.col("e.op").isNull() | F.col("e.source.id_version").isNull()).count()
    versions = [r[0] for r in events.orderBy("offset").select("e.source.id_version").collect()]
    result = {
        "rebuilt": sorted(repr(tuple(r)) for r in rebuilt.collect()),
        "snapshot": sorted(repr(tuple(r)) for r in snapshot.collect()),
        "columns": rebuilt.columns,
        "records": events.count(),
        "ops": ops,
        "unparsed": unparsed,
        "ordered": versions == sorted(versions),
        "tombstones": len(tombstones),
        "each_delete_then_its_tombstone": entombed,
    }
    Path(out).write_text(json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
