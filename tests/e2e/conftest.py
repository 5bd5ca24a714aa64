"""Fixtures for end-to-end tests that need Spark (one local session per test run)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A local SparkSession shared by the whole run (startup costs ~10 s)."""
    from ordo.spark import local_spark_session

    session = local_spark_session("ordo-tests")
    yield session
    session.stop()
