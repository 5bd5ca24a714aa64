"""The change topic read by Spark's own Kafka source: a table rebuilt from it equals ordo's snapshot.

Real broker, ``ordo arbiter``, ``ordo consumer`` and ``ordo cdc`` processes;
commits with real Parquet files of a table with dates, timestamps, decimals,
booleans and doubles (``changes_model.TableWriter``: inserts, updates,
deletes, overwrites, a truncate, compactions). A child process
(``kafka_rebuild_child.py``) starts Spark with ``spark-sql-kafka-0-10``
(fetched from Maven Central by ``tools/spark_kafka.py``), reads the topic
with ``format("kafka")`` and ``from_json`` and folds it; the rows must equal
``consumer.spark.read`` of the table, column by column and type by type, and
each delete must be followed by its tombstone (tombstones are on by default).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ordo.consumer import Catalog
from ordo.consumer.changetopic import topic_name
from ordo.producer import CommitClient
from ordo.services.stack import ProcessGroup
from ordo.settings import Settings

from ..integration.changes_model import TableWriter, read_change_topic

# Its subject is a Kafka client (Spark's Kafka source) reading the broker: it runs on each broker (tests/README.md).
pytestmark = [pytest.mark.spark, pytest.mark.each_broker, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("v", pa.string()),
        ("n", pa.float64()),
        ("day", pa.date32()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("amount", pa.decimal128(10, 2)),
        ("flag", pa.bool_()),
        ("dt", pa.string()),
    ]
)
DDL = "id BIGINT, v STRING, n DOUBLE, day DATE, at TIMESTAMP, amount DECIMAL(10,2), flag BOOLEAN, dt STRING"


def values(rng: random.Random) -> dict[str, Any]:
    return {
        "v": rng.choice([None, f"v{rng.randint(0, 999)}", 'quote " and ünïcode']),
        "n": rng.random() * 1000,
        "day": date(2024, 1, 1) + timedelta(days=rng.randint(0, 400)),
        "at": datetime(2024, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randint(0, 10**13)),
        "amount": Decimal(rng.randint(-(10**6), 10**6)) / 100,
        "flag": rng.random() < 0.5,
    }


def test_spark_kafka_source_rebuilds_the_table_from_the_change_topic(
    settings: Settings, processes: ProcessGroup, tmp_path: Path
) -> None:
    assert shutil.which("mvn"), "Maven is needed to fetch Spark's Kafka connector: apt-get install maven"
    fetched = subprocess.run(
        [sys.executable, str(ROOT / "tools/spark_kafka.py")], capture_output=True, text=True, timeout=600, check=False
    )
    assert fetched.returncode == 0, fetched.stderr
    connector = fetched.stdout.strip().rsplit(":", 1)[1]  # the child loads this version, offline
    processes.start_arbiter(settings, timeout=60)
    consumer = processes.start_ordo(settings, "consumer", "--no-http", name="consumer")
    consumer.wait_for_line("consumer ready", timeout=60)
    cdc = processes.start_ordo(settings, "cdc", "--metrics-port", "0", "--max-records", "50", name="cdc")
    rng = random.Random(5)
    with CommitClient(settings=settings) as client, Catalog(settings.catalog) as catalog:
        writer = TableWriter(client, "events", f"{settings.warehouse}/events", SCHEMA, DDL, values)
        writer.upsert([writer.row(i, dt, rng) for dt in ("a", "b", "c") for i in range(20)])
        for _ in range(30):
            writer.random_step(rng, catalog)
        writer.overwrite(None, [])  # TRUNCATE
        writer.upsert([writer.row(i, dt, rng) for dt in ("a", "b") for i in range(15)])
        for _ in range(15):
            writer.random_step(rng, catalog)
        writer.wait(catalog)
    cdc.wait_for_line("cdc ready", timeout=60)
    topic = topic_name("{prefix}.{table}.changes", settings.topic_prefix, "events")
    last = max(v for v, changes in writer.expected.items() if changes)
    for _ in range(200):
        records = read_change_topic(settings.kafka_config(), topic)
        if records and records[-1][1]["source"]["id_version"] == last:
            break
        time.sleep(0.3)
    expected = sum(len(c) for c in writer.expected.values())
    assert len(records) == expected
    out = tmp_path / "rebuilt.json"
    child = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests/e2e/kafka_rebuild_child.py"),
            settings.bootstrap_servers or "",
            topic,
            str(Path(settings.catalog).absolute()),
            "events",
            str(out),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "ORDO_SPARK_KAFKA_VERSION": connector},
        timeout=480,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-4000:]
    result = json.loads(out.read_text())
    print(f"{result['records']} records {result['ops']}; {len(result['snapshot'])} rows rebuilt")
    assert result["records"] == expected and result["unparsed"] == 0 and result["ordered"]
    assert set(result["ops"]) == {"c", "u", "d"}
    assert result["tombstones"] == result["ops"]["d"] and result["each_delete_then_its_tombstone"]
    assert result["columns"] == SCHEMA.names
    assert result["snapshot"], "an empty table proves nothing"
    assert result["rebuilt"] == result["snapshot"]
    assert len(result["snapshot"]) == len(writer.live)
