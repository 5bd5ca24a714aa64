"""The change topic in Kafka Connect's form, read by Kafka Connect's own ``JsonConverter``: typed Structs, tombstones.

Real broker, ``ordo arbiter``, ``ordo consumer`` and ``ordo cdc --format connect-json`` (tombstones on, the
default) processes; commits with real Parquet files of a table with BIGINT, SMALLINT, DOUBLE, BOOLEAN, STRING,
BINARY, DATE, TIMESTAMP, TIMESTAMP_NTZ and DECIMAL columns (``changes_model.TableWriter``: inserts, updates, a
MERGE, deletes, overwrites, a truncate, compactions). A JVM reads the topic as a Connect sink does
(``tools/connect-json/ReadChangeTopic.java``: a KafkaConsumer with read_committed, every key and value through
``org.apache.kafka.connect.json.JsonConverter`` with ``schemas.enable=true``, from Maven Central by
``tools/connect_json.py``; on Tansu, from which Kafka's Java client reads nothing, JsonConverter converts the
bytes confluent-kafka read). Every record must convert, each value to the Java type its logical schema names,
and the Structs must be the model's row changes exactly once, each ``d`` followed by its tombstone.
"""

from __future__ import annotations

import base64
import json
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
from ordo.schemas import Operation
from ordo.services.stack import ProcessGroup
from ordo.settings import Settings

from ..integration.changes_model import TOMBSTONE, Record, TableWriter, check_tombstones, check_topic, fold

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("v", pa.string()),
        ("n", pa.float64()),
        ("small", pa.int16()),
        ("flag", pa.bool_()),
        ("blob", pa.binary()),
        ("day", pa.date32()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("local", pa.timestamp("us")),
        ("amount", pa.decimal128(10, 2)),
        ("dt", pa.string()),
    ]
)
DDL = (
    "id BIGINT, v STRING, n DOUBLE, small SMALLINT, flag BOOLEAN, blob BINARY, day DATE, at TIMESTAMP, "
    "local TIMESTAMP_NTZ, amount DECIMAL(10,2), dt STRING"
)
# The Java class JsonConverter gives each column: the proof that its schema typed it (a wrong payload type reads
# as 0 or fails, never as the right class with the value).
JAVA = {
    "id": "Long",
    "v": "String",
    "n": "Double",
    "small": "Short",
    "flag": "Boolean",
    "blob": "byte[]",
    "day": "Date",
    "at": "String",
    "local": "Long",
    "amount": "BigDecimal",
    "dt": "String",
}


def values(rng: random.Random) -> dict[str, Any]:
    return {
        "v": rng.choice([None, f"v{rng.randint(0, 999)}", 'quote " and ünïcode']),
        "n": rng.random() * 1000 - 500,
        "small": rng.randint(-(2**15), 2**15 - 1),
        "flag": rng.choice([None, True, False]),
        "blob": rng.choice([None, b"", bytes(rng.randrange(256) for _ in range(5))]),
        "day": date(1960, 1, 1) + timedelta(days=rng.randint(0, 40_000)),  # before the epoch too
        "at": datetime(2024, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randint(0, 10**13)),
        "local": datetime(1969, 12, 31) + timedelta(microseconds=rng.randint(0, 10**13)),
        "amount": Decimal(rng.randint(-(10**9), 10**9)) / 100,
    }


def python_value(name: str, described: dict[str, Any]) -> Any:
    """A Connect value as the reader described it, back in the model's Python type (checking its Java class)."""
    value = described["value"]
    if value is None:
        return None
    assert described["java"] == JAVA[name], (name, described)
    if name == "blob":
        return base64.b64decode(value)
    if name == "day":
        return date(1970, 1, 1) + timedelta(days=value)
    if name == "at":
        return datetime.fromisoformat(value)
    if name == "local":
        return datetime(1970, 1, 1) + timedelta(microseconds=value)
    if name == "amount":
        return Decimal(value)
    return value


def row_of(described: dict[str, Any]) -> dict[str, Any] | None:
    """A ``<prefix>.<table>.Value`` Struct (or its absence) as a model row."""
    if "fields" not in described:
        assert described["value"] is None and described["optional"], described
        return None
    return {name: python_value(name, field) for name, field in described["fields"].items()}


def as_record(line: dict[str, Any], prefix: str) -> Record:
    """One record the Java reader printed, as ``changes_model`` reads the plain form (``check_topic``)."""
    key = line["key"]
    assert key["schema"] == f"{prefix}.events.Key" and list(key["fields"]) == ["id", "dt"], key
    plain_key = json.dumps({name: field["value"] for name, field in key["fields"].items()}).encode()
    value = line["value"]
    if value is None:
        return plain_key, TOMBSTONE
    assert value["schema"] == f"{prefix}.events.Envelope", value["schema"]
    fields = value["fields"]
    assert fields["source"]["schema"] == "io.ordo.cdc.Source"
    assert fields["transaction"]["schema"] == "event.block"
    envelope = {
        "before": row_of(fields["before"]),
        "after": row_of(fields["after"]),
        "op": fields["op"]["value"],
        "source": {name: field["value"] for name, field in fields["source"]["fields"].items()},
        "transaction": {name: field["value"] for name, field in fields["transaction"]["fields"].items()},
    }
    assert fields["source"]["fields"]["id_version"]["java"] == "Long"
    return plain_key, envelope


def read_raw(settings: Settings, topic: str) -> list[dict[str, Any]]:
    """The topic's records a read_committed reader sees: ``{"offset", "key", "value"}``, bytes in base64."""
    from ordo.kernel.logread import read_to_end

    config = settings.kafka_config(**{"group.id": "test.connect", "isolation.level": "read_committed"})
    b64 = lambda data: None if data is None else base64.b64encode(data).decode("ascii")  # noqa: E731
    return [
        {"offset": m.offset(), "key": b64(m.key()), "value": b64(m.value())}
        for m in read_to_end(config, topic, transactional=True, timeout=30)
    ]


def test_kafka_connects_json_converter_reads_every_record_as_typed_structs_with_tombstones(
    settings: Settings, processes: ProcessGroup, broker_kind: str, tmp_path: Path
) -> None:
    assert shutil.which("mvn") and shutil.which("java"), "Maven and Java 17+ are needed to run JsonConverter"
    fetched = subprocess.run(
        [sys.executable, str(ROOT / "tools/connect_json.py")], capture_output=True, text=True, timeout=600, check=False
    )
    assert fetched.returncode == 0, fetched.stderr
    classpath = fetched.stdout.strip()
    processes.start_arbiter(settings, timeout=60)
    consumer = processes.start_ordo(settings, "consumer", "--no-http", name="consumer")
    consumer.wait_for_line("consumer ready", timeout=60)
    cdc = processes.start_ordo(
        settings, "cdc", "--metrics-port", "0", "--max-records", "7", "--format", "connect-json", name="cdc"
    )
    rng = random.Random(11)
    with CommitClient(settings=settings) as client, Catalog(settings.catalog) as catalog:
        writer = TableWriter(client, "events", f"{settings.warehouse}/events", SCHEMA, DDL, values)
        writer.upsert([writer.row(i, dt, rng) for dt in ("a", "b", "c") for i in range(12)])
        merged = writer.upsert([writer.row(i, "a", rng) for i in (3, 4, 50)], merge=True)
        for _ in range(20):
            writer.random_step(rng, catalog)
        writer.delete("b", sorted(k for dt, k in writer.live if dt == "b")[:3])
        writer.overwrite(None, [])  # TRUNCATE: a delete (and its tombstone) per live row
        writer.upsert([writer.row(i, "c", rng) for i in range(5)], Operation.INSERT_INTO)
        writer.wait(catalog)
    cdc.wait_for_line("cdc ready", timeout=60)
    topic = topic_name("{prefix}.{table}.changes", settings.topic_prefix, "events")
    last = max(v for v, changes in writer.expected.items() if changes)
    reader = ["java", "-cp", classpath, str(ROOT / "tools/connect-json/ReadChangeTopic.java")]
    deadline = time.monotonic() + 120
    while True:
        raw = read_raw(settings, topic)
        if broker_kind == "kafka":  # a read_committed KafkaConsumer, as a Connect worker reads
            source = [settings.bootstrap_servers or "", topic, str(raw[-1]["offset"] + 1 if raw else 0)]
        else:  # Kafka's Java client reads nothing from Tansu: JsonConverter gets the bytes confluent-kafka read
            dump = tmp_path / "records.jsonl"
            dump.write_text("".join(json.dumps(r) + "\n" for r in raw))
            source = ["--records", str(dump), topic]
        read = subprocess.run(
            [*reader, *source],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert read.returncode == 0, read.stderr[-4000:]  # JsonConverter converted every record
        printed = [json.loads(line) for line in read.stdout.splitlines()]
        assert [p["offset"] for p in printed] == [r["offset"] for r in raw]  # every record, none twice
        records = [as_record(line, settings.topic_prefix) for line in printed]
        changes = [r for r in records if r[1] is not TOMBSTONE]
        if changes and changes[-1][1]["source"]["id_version"] == last:
            break
        assert time.monotonic() < deadline, "the last version did not reach the topic within 120 s"
        time.sleep(0.5)
    counts = check_topic(changes, writer)
    print(f"{len(records)} records through JsonConverter: {counts}, {len(records) - len(changes)} tombstones")
    assert counts["c"] and counts["u"] and counts["d"], counts
    assert check_tombstones(records) == counts["d"]  # each delete followed by its tombstone, nothing else
    assert fold(changes) == writer.live
    assert {r[1]["source"]["operation"] for r in changes if r[1]["source"]["id_version"] == merged} == {"MERGE"}
    images = [image for _, value in changes for image in (value["before"], value["after"]) if image is not None]
    for column in ("v", "flag", "blob"):  # nulls of nullable columns, and values, both went through
        assert {image[column] is None for image in images} == {True, False}, column
