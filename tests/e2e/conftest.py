"""Fixtures for end-to-end tests that need Spark (one local session per test run)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[object]:
    """A local SparkSession shared by the whole run (startup costs ~10 s); ``--spark-write job`` writes every
    ``FileWriter`` write with a Spark job, the driver-side write off."""
    from ordo.producer.filewriter import DRIVER_WRITE_CONF
    from ordo.spark import local_spark_session

    session = local_spark_session("ordo-tests")
    if request.config.getoption("--spark-write") == "job":
        session.conf.set(DRIVER_WRITE_CONF, "0")
    yield session
    session.stop()
