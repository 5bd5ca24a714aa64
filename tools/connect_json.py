"""Fetch Kafka Connect's JsonConverter (``connect-json``) and the Kafka client from Maven Central; print the class path.

    .venv/bin/python tools/connect_json.py        # or: make connect-json

``tools/connect-json/pom.xml`` names them (the Kafka release ordo runs);
``mvn dependency:build-classpath`` fetches them into ~/.m2 (offline first)
and the class path is printed, for::

    java -cp "$(python tools/connect_json.py)" tools/connect-json/ReadChangeTopic.java BOOTSTRAP TOPIC

which reads a change topic the way a Kafka Connect sink does (read_committed,
JsonConverter with ``schemas.enable=true``; docs/change-topic.md). Needs
``mvn`` and Java 17+. The e2e test of the Connect form runs this script itself.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
POM = HERE / "connect-json" / "pom.xml"
READER = HERE / "connect-json" / "ReadChangeTopic.java"
MAVEN_SETTINGS = HERE / "spark-kafka" / "maven-settings.xml"  # every repository read through Maven Central
MVN = ["mvn", "-q", "-B", "-s", str(MAVEN_SETTINGS), "-f", str(POM), "dependency:build-classpath"]


def classpath() -> str:
    """The class path of ``connect-json`` and ``kafka-clients`` in ~/.m2; ``RuntimeError`` if mvn cannot fetch them."""
    errors = []
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "classpath.txt"
        for offline in (["-o"], []):
            done = subprocess.run(
                [*MVN, *offline, f"-Dmdep.outputFile={out}"],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode == 0 and out.exists():
                return out.read_text().strip()
            errors.append((done.stdout + done.stderr)[-2000:])
    raise RuntimeError(f"mvn could not fetch {POM.name}'s dependencies from Maven Central: {errors[-1]}")


if __name__ == "__main__":
    try:
        print(classpath())
    except (RuntimeError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
