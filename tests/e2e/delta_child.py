"""One Spark session running delta-spark and ordo side by side (tests/e2e/test_delta_side_by_side.py).

``python -m tests.e2e.delta_child WORK`` with the stack's ``ORDO_*`` settings in the environment: writes a Delta
table with delta-spark's own calls (a partitioned write, an UPDATE and a DELETE through ``delta.tables``), copies
its head into a new ordo table made with Delta's builder calls, and prints one JSON document: both tables' rows and
Delta's version-0 rows read back through ordo's copy of version 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(work: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    from delta.tables import DeltaTable as DeltaLakeTable
    from spark_lakes import spark_config

    from ordo import DeltaTable
    from ordo.spark import local_spark_session

    config = {
        **spark_config(("delta",)),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.databricks.delta.snapshotPartitions": "2",
    }
    spark = local_spark_session("ordo-delta-side-by-side", warehouse=str(work / "warehouse"), config=config)
    rows = [(i, f"v{i}", ["a", "b", "c"][i % 3]) for i in range(60)]
    df = spark.createDataFrame(rows, "id BIGINT, v STRING, dt STRING")
    path = str(work / "delta-events")
    df.write.format("delta").partitionBy("dt").save(path)
    lake = DeltaLakeTable.forPath(spark, path)
    lake.update(condition="id % 5 = 0", set={"v": "concat(v, '-x')"})
    lake.delete("dt = 'c' AND id > 40")

    # the copy: Delta's builder calls on ordo's DeltaTable, then a write of the Delta table's head
    source = spark.read.format("delta").load(path)
    DeltaTable.create(spark).tableName("copied").addColumns(source.schema).partitionedBy("dt").execute()
    source.write.format("ordo").mode("append").save("copied")
    copy = DeltaTable.forName(spark, "copied")
    old = spark.read.format("delta").option("versionAsOf", 0).load(path)
    DeltaTable.create(spark).tableName("copied_v0").addColumns(old.schema).partitionedBy("dt").execute()
    old.write.format("ordo").mode("append").save("copied_v0")

    def collect(frame) -> list:  # type: ignore[no-untyped-def]
        return sorted([r["id"], r["v"], r["dt"]] for r in frame.collect())

    print(
        json.dumps(
            {
                "spark": spark.version,
                "delta": collect(spark.read.format("delta").load(path)),
                "ordo": collect(spark.read.format("ordo").load("copied")),
                "ordo_head": collect(copy.toDF()),
                "delta_history": [r["operation"] for r in lake.history().collect()],
                "ordo_history": [r["operation"] for r in copy.history().collect()],
                "v0": collect(spark.read.format("ordo").load("copied_v0")),
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
