"""Fetch Spark's S3A jars into ~/.m2 with mvn; print their classpath.

    .venv/bin/python tools/spark_s3a.py        # or: make s3a

S3A is Hadoop's S3 filesystem (``s3a://``): ``org.apache.hadoop:hadoop-aws`` of
the Hadoop release PySpark ships (read from its ``hadoop-client-api`` jar; the
two must match), with what it needs at run time (the AWS SDK bundle, about
700 MB, once). A Spark session loads them with ``spark.driver.extraClassPath``
and ``spark.executor.extraClassPath`` (``spark_config()``): from the disk of
each node rather than shipped by the driver to every executor. The cluster
tests (tests/cluster) run this themselves; ``ORDO_HADOOP_AWS_VERSION`` picks
another release. Needs ``mvn``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

MAVEN_SETTINGS = Path(__file__).resolve().parent / "spark-kafka" / "maven-settings.xml"  # Maven Central only
POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.ordo</groupId><artifactId>ordo-s3a</artifactId><version>1</version><packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-aws</artifactId><version>{v}</version></dependency>
  </dependencies>
</project>
"""


def hadoop_version() -> str:
    """The Hadoop release PySpark ships (``ORDO_HADOOP_AWS_VERSION`` overrides)."""
    wanted = os.environ.get("ORDO_HADOOP_AWS_VERSION")
    if wanted:
        return wanted
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    for jar in sorted(jars.glob("hadoop-client-api-*.jar")):
        match = re.fullmatch(r"hadoop-client-api-(\d[\w.-]*)\.jar", jar.name)
        if match:
            return match.group(1)
    raise RuntimeError(f"no hadoop-client-api jar in {jars}: which Hadoop does this PySpark ship?")


def classpath(version: str | None = None) -> list[str]:
    """The jars of ``hadoop-aws`` and its run-time dependencies in ~/.m2 (fetched first: offline, then Central)."""
    version = version or hadoop_version()
    with tempfile.TemporaryDirectory(prefix="ordo-s3a-") as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(POM.format(v=version))
        out = Path(tmp) / "classpath.txt"
        for offline in (["-o"], []):
            done = subprocess.run(
                [
                    "mvn",
                    "-q",
                    "-B",
                    *offline,
                    "-s",
                    str(MAVEN_SETTINGS),
                    "-f",
                    str(pom),
                    "dependency:build-classpath",
                    "-DincludeScope=runtime",
                    f"-Dmdep.outputFile={out}",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode == 0 and out.is_file():
                jars = [j for j in out.read_text().strip().split(os.pathsep) if j]
                if any(Path(j).name == f"hadoop-aws-{version}.jar" for j in jars):
                    return jars
        raise RuntimeError(f"mvn could not fetch hadoop-aws {version}: {done.stdout[-1000:]}{done.stderr[-1000:]}")


def spark_config(version: str | None = None) -> dict[str, str]:
    """The Spark settings that put the S3A jars on the driver's and the executors' classpath."""
    path = os.pathsep.join(classpath(version))
    return {"spark.driver.extraClassPath": path, "spark.executor.extraClassPath": path}


if __name__ == "__main__":
    try:
        print(os.pathsep.join(classpath()))
    except (RuntimeError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
