"""SparkSessions configured for ordo: a local one (tests, demo, examples) and one on a cluster's master.

Both reach tables on S3 through Hadoop's S3A with the settings ordo maps from
the AWS variables and profile (``kernel.objectstore``: endpoint, region, path
style, the AWS SDK's credentials chain), unless the session's own
``spark.hadoop.fs.s3a.*`` say otherwise; ``object_store_settings`` gives them
for a session built elsewhere. S3A's jars are not Spark's own: put
``hadoop-aws`` (of PySpark's Hadoop release) and its AWS SDK bundle on the
classpath (``tools/spark_s3a.py`` fetches them; docs/operations.md,
"Production"). Spark is imported lazily: importing this module costs nothing. The JVM a
session starts writes its banner and log4j lines to the process's stdout and
stderr; in the ``ordo`` program with ``--log-format json`` they become records
of the ``ordo.jvm`` logger (``kernel.streams.child_output``).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ordo.kernel.streams import child_output

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import SparkSession

    from ordo.kernel.settings import Settings


def local_spark_session(
    app_name: str = "ordo",
    cores: int = 2,
    warehouse: str | None = None,
    config: Mapping[str, str] | None = None,
    *,
    detached: bool = False,
    source: bool = True,
) -> SparkSession:
    """Get or create a small local-mode SparkSession (UI off, few shuffle partitions, quiet logs).

    ``config``: more Spark settings, applied last (e.g. delta-spark's packages and extensions, to run
    ``format("delta")`` and ``format("ordo")`` in one session). ``detached``: start Spark's JVM in a session of
    its own (``launch_detached``), for a service that stops Spark itself on SIGTERM. ``source=False``: do not
    register the ``format("ordo")`` source now (a ``DeltaTable`` registers it when it opens, with its settings).
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
    for key, value in PYTHON_WORKER_SETTINGS.items():
        builder = builder.config(key, value)
    if warehouse:
        builder = builder.config("spark.sql.warehouse.dir", warehouse)
    for key, value in object_store_settings(config).items():
        builder = builder.config(key, value)
    with child_output():  # the JVM starts here and keeps these descriptors
        if detached:
            launch_detached(builder._options)  # type: ignore[attr-defined]
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    use_session_object_store(spark)
    if source and id(spark) not in _REGISTERED:  # keep the settings a DeltaTable registered with an existing session
        register(spark)
    return spark


def cluster_spark_session(master: str, app_name: str = "ordo", config: Mapping[str, str] | None = None) -> SparkSession:
    """Get or create a SparkSession on ``master`` (``spark://host:port``, ``yarn``, ``k8s://...``) for ordo.

    The driver runs here (client mode). Settings come from ``config``, then
    Spark's own (``spark-defaults.conf``, ``PYSPARK_PYTHON`` for the
    executors' Python, which must have ordo installed: docs/operations.md,
    "Production"); the S3A settings ordo maps fill what neither sets.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in object_store_settings(config).items():
        builder = builder.config(key, value)
    with child_output():  # the JVM's lines: records of ordo.jvm under --log-format json
        spark = builder.getOrCreate()
    use_session_object_store(spark)
    if id(spark) not in _REGISTERED:
        register(spark)
    return spark


# Spark's Python workers (where format("ordo") reads and writes) reached over a Unix socket, not loopback TCP:
# 8 Python tasks on 2 cores took 341 ms instead of 797 (docs/benchmarks.md, "What a Python task costs"). A
# cluster's own settings decide there (docs/operations.md, "Production").
PYTHON_WORKER_SETTINGS = {"spark.python.unix.domain.socket.enabled": "true"}


def object_store_settings(config: Mapping[str, str] | None = None) -> dict[str, str]:
    """``config`` plus the ``spark.hadoop.fs.s3a.*`` settings ordo maps from the AWS variables and profile
    (``kernel.objectstore``) that ``config`` does not set itself."""
    from ordo.kernel.objectstore import S3Options

    given = dict(config or {})
    prefix = "spark.hadoop."
    hadoop = {k[len(prefix) :]: v for k, v in given.items() if k.startswith(prefix)}
    mapped = S3Options.resolve(hadoop=hadoop).hadoop_settings(hadoop)
    return given | {prefix + k: v for k, v in mapped.items()}


def use_session_object_store(spark: SparkSession) -> None:
    """Make this process's pyarrow reach S3 as the session's S3A does (its ``fs.s3a.*`` win over the AWS
    variables): the driver then reads and deletes the files Spark's executors wrote."""
    from ordo.kernel.objectstore import S3Options, use_options

    try:
        conf = spark.sparkContext.getConf().getAll()
    except Exception:  # Spark Connect: no SparkContext; the AWS variables hold
        return
    prefix = "spark.hadoop."
    hadoop = {k[len(prefix) :]: v for k, v in conf if k.startswith(prefix + "fs.s3a.")}
    use_options(S3Options.resolve(hadoop=hadoop))


def launch_detached(options: Mapping[str, str]) -> None:
    """Start Spark's JVM (the Py4J gateway, with ``options`` as its Spark conf) in a new session, unless one runs.

    A supervisor that stops a service by signalling its process group (systemd's
    default ``KillMode=control-group``, a shell's job control, ``kill -TERM -PGID``)
    would otherwise stop the JVM at the same moment as Python: the rewrite in
    flight then fails half-way and ``spark.stop()`` raises from Py4J. Detached,
    the JVM gets no signal; Python cancels its jobs and stops it in order. The
    JVM still dies with Python: it exits when the pipe to its stdin closes.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        conf = SparkConf(loadDefaults=False)
        conf.setAll(list(options.items()))
        gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm


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
