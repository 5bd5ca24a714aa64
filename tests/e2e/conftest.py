"""Fixtures for end-to-end tests that need Spark (one local session per test run)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# The session's JVM compiles with C1 only and collects with the serial GC (the Kafka launcher's JVMs do the
# same): a test's queries are small and short, and on 2 cores C2's compile threads and G1's concurrent threads
# cost more CPU than they save (tests/e2e/test_writer_matrix.py and test_reads.py: 148 s of CPU instead of 176 s).
TEST_JVM_OPTIONS = "-Dderby.system.home=/tmp/ordo-derby -XX:+UseSerialGC -XX:TieredStopAtLevel=1"


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[object]:
    """A local SparkSession shared by the whole run (startup costs ~10 s); ``--spark-write driver`` writes every
    ``FileWriter`` write on the driver (even where Spark has no size estimate), ``job`` with a Spark job."""
    from ordo.producer.smallwrites import DRIVER_WRITE_CONF
    from ordo.spark import local_spark_session

    session = local_spark_session("ordo-tests", config={"spark.driver.extraJavaOptions": TEST_JVM_OPTIONS})
    bound = {"driver": str(2**63 - 1), "job": "0"}.get(request.config.getoption("--spark-write"))
    if bound is not None:
        session.conf.set(DRIVER_WRITE_CONF, bound)
    yield session
    session.stop()
