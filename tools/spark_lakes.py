"""Fetch the Delta Lake and Apache Iceberg Spark jars into ~/.m2 with mvn; print their coordinates.

    .venv-bench-spark/bin/python tools/spark_lakes.py            # Delta's and Iceberg's jars
    .venv-bench-iceberg/bin/python tools/spark_lakes.py iceberg  # Iceberg's only (no delta-spark there)

``bench/peers_spark.py`` loads them into its Spark session with ``spark.jars.packages`` resolved from
~/.m2 only (the Ivy settings of ``tools/spark-kafka``, offline), as ``tools/spark_kafka.py`` does for the
Kafka connector. Delta's jar is the version of the installed ``delta-spark`` Python package (the two must
match); Iceberg's is ``ORDO_ICEBERG_RUNTIME`` or the newest Spark 4 runtime known here, with the SQLite JDBC
driver its JDBC catalog uses (the catalog with atomic commits the benchmark gives Iceberg). Needs ``mvn``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

KAFKA_TOOL = Path(__file__).resolve().parent / "spark-kafka"
MAVEN_SETTINGS = KAFKA_TOOL / "maven-settings.xml"  # every repository a POM names, through Maven Central
IVY_SETTINGS = KAFKA_TOOL / "ivysettings.xml"  # resolve from ~/.m2 only
PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:get"
# The newest Iceberg Spark runtime for Spark 4 (1.12.0 is built for Spark 4.1; there is none for 4.2 yet).
ICEBERG_RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"
SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.54.1.0"  # the driver of Iceberg's JDBC catalog (a SQLite file)
# Spark ships slf4j; Ivy would otherwise want the jar of the version Delta's POM names (mvn fetched only its POM).
EXCLUDES = "org.slf4j:slf4j-api"


def delta_coordinate() -> str:
    """delta-spark's jar for the installed ``delta-spark`` Python package."""
    return f"io.delta:delta-spark_2.13:{metadata.version('delta-spark')}"


def iceberg_coordinate() -> str:
    """The Iceberg Spark runtime to load (``ORDO_ICEBERG_RUNTIME`` overrides)."""
    return os.environ.get("ORDO_ICEBERG_RUNTIME", ICEBERG_RUNTIME)


def iceberg_spark(coordinate: str | None = None) -> str:
    """The Spark line (``4.1``) an Iceberg runtime is built for, from its artifact name."""
    artifact = (coordinate or iceberg_coordinate()).split(":")[1]
    return artifact.removeprefix("iceberg-spark-runtime-").split("_")[0]


def fetch(artifact: str) -> None:
    """Make sure ``artifact`` and its dependencies are in ~/.m2 (offline first, then Maven Central)."""
    for offline in (["-o"], []):
        done = subprocess.run(
            ["mvn", "-q", "-B", *offline, "-s", str(MAVEN_SETTINGS), PLUGIN, f"-Dartifact={artifact}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0:
            return
    raise RuntimeError(f"mvn could not fetch {artifact}: {done.stdout[-1000:]}{done.stderr[-1000:]}")


def spark_config(lakes: tuple[str, ...] = ("delta", "iceberg")) -> dict[str, str]:
    """The Spark settings that load the jars of ``lakes`` (``delta``, ``iceberg``) from ~/.m2, fetching them first."""
    coordinates = [delta_coordinate()] if "delta" in lakes else []
    coordinates += [iceberg_coordinate(), SQLITE_JDBC] if "iceberg" in lakes else []
    for artifact in coordinates:
        fetch(artifact)
    return {
        "spark.jars.packages": ",".join(coordinates),
        "spark.jars.excludes": EXCLUDES,
        "spark.jars.ivySettings": str(IVY_SETTINGS),
    }


if __name__ == "__main__":
    try:
        print(spark_config(tuple(sys.argv[1:]) or ("delta", "iceberg"))["spark.jars.packages"])
    except (RuntimeError, FileNotFoundError, metadata.PackageNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
