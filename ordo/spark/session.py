"""A local SparkSession configured for ordo (tests, demo, examples).

Spark is imported lazily: importing this module costs nothing.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import SparkSession

    from ordo.kernel.settings import Settings


def local_spark_session(
    app_name: str = "ordo", cores: int = 2, warehouse: str | None = None, config: Mapping[str, str] | None = None
) -> SparkSession:
    """Get or create a small local-mode SparkSession (UI off, few shuffle partitions, quiet logs).

    ``config``: more Spark settings, applied last (e.g. delta-spark's packages and extensions, to run
    ``format("delta")`` and ``format("ordo")`` in one session).
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only, never the machine's address
    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", str(max(2, cores * 2)))
        .config("spark.default.parallelism", str(max(2, cores * 2)))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.parquet.compression.codec", "zstd")
        .config("spark.sql.sources.partitionOverwriteMode", "static")
        .config("spark.driver.extraJavaOptions", "-Dderby.system.home=/tmp/ordo-derby")
    )
    if warehouse:
        builder = builder.config("spark.sql.warehouse.dir", warehouse)
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if id(spark) not in _REGISTERED:  # keep the settings a DeltaTable registered with an existing session
        register(spark)
    return spark


def register(spark: SparkSession, settings: Settings | None = None) -> None:
    """Register the ``ordo`` data source with ``spark`` (``format("ordo")``); ``settings`` become its defaults.

    Also enables Python data source filter pushdown (partition pruning). Calling it again replaces the
    registration (the last settings given win).
    """
    from ordo.spark.datasource import source_class

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(source_class(settings))
    _REGISTERED[id(spark)] = settings


def registered_settings(spark: SparkSession) -> tuple[bool, Settings | None]:
    """Whether ``register`` ran for this session, and with which settings."""
    return id(spark) in _REGISTERED, _REGISTERED.get(id(spark))


_REGISTERED: dict[int, Settings | None] = {}
