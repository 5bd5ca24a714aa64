"""Fixtures for end-to-end tests that need Spark (one local session per test run)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[object]:
    """A local SparkSession shared by the whole run (startup costs ~10 s); ``--spark-write driver`` writes every
    ``FileWriter`` write on the driver (even where Spark has no size estimate), ``job`` with a Spark job."""
    from ordo.producer.smallwrites import DRIVER_WRITE_CONF
    from ordo.spark import local_spark_session

    session = local_spark_session("ordo-tests")
    bound = {"driver": str(2**63 - 1), "job": "0"}.get(request.config.getoption("--spark-write"))
    if bound is not None:
        session.conf.set(DRIVER_WRITE_CONF, bound)
    yield session
    session.stop()
