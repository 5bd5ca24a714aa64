"""Fetch Spark's Kafka connector (``spark-sql-kafka-0-10``) from Maven Central into ~/.m2; print its coordinate.

    .venv/bin/python tools/spark_kafka.py        # or: make spark-kafka

A Spark session then loads it with ``spark.jars.packages=<coordinate>`` and
``spark.jars.ivySettings=tools/spark-kafka/ivysettings.xml`` (resolved from
~/.m2 only, offline). The connector's version is the installed PySpark's when
Maven Central has it, else the newest earlier minor release of the same major
that it has (PySpark can be ahead of the connectors published there:
docs/change-topic.md); ``ORDO_SPARK_KAFKA_VERSION`` picks one. Needs ``mvn``.
The e2e test of the change topic runs this script itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent / "spark-kafka"
MAVEN_SETTINGS = HERE / "maven-settings.xml"
IVY_SETTINGS = HERE / "ivysettings.xml"
ARTIFACT = "org.apache.spark:spark-sql-kafka-0-10_2.13"
PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:get"  # 2.8 (mvn's default) also wants test jars


def candidates(pyspark_version: str) -> list[str]:
    """The connector versions to try, best first: the PySpark version, then earlier minors of its major."""
    wanted = os.environ.get("ORDO_SPARK_KAFKA_VERSION")
    if wanted:
        return [wanted]
    parts = pyspark_version.split(".")
    major, minor = int(parts[0]), int(parts[1])
    return [pyspark_version] + [f"{major}.{m}.0" for m in range(minor - 1, -1, -1)]


def fetch(version: str) -> bool:
    """True once ``version`` and its dependencies are in ~/.m2 (offline check first, then Maven Central)."""
    for offline in (["-o"], []):
        done = subprocess.run(
            ["mvn", "-q", "-B", *offline, "-s", str(MAVEN_SETTINGS), PLUGIN, f"-Dartifact={ARTIFACT}:{version}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0:
            return True
    return False


def coordinate() -> str:
    """The Maven coordinate of a connector in ~/.m2 for the installed PySpark; ``RuntimeError`` if none."""
    import pyspark

    tried = []
    for version in candidates(pyspark.__version__):
        tried.append(version)
        if fetch(version):
            return f"{ARTIFACT}:{version}"
    raise RuntimeError(f"no {ARTIFACT} of versions {tried} could be fetched from Maven Central with mvn")


def spark_config() -> dict[str, str]:
    """The Spark settings that load the connector (fetching it first)."""
    return {"spark.jars.packages": coordinate(), "spark.jars.ivySettings": str(IVY_SETTINGS)}


if __name__ == "__main__":
    try:
        print(coordinate())
    except (RuntimeError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
