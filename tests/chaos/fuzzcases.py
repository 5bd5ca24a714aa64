"""Hostile intent records for the bad-input chaos test: what each one is and which rejection it must get.

Pure (no Kafka). ``cases(table, n, seed)`` yields ``FuzzCase``s mixing:

* random bytes, empty and null values, an Avro header with a random body;
* valid intents truncated at a random byte, or with random bits flipped
  (those may still be valid: any decision is fine, as long as there is one);
* valid Avro with absurd values, written with fastavro straight from dicts so
  that nothing validates them on the way: negative or huge versions and sizes,
  empty and oversized strings, 100,000 files, 10,001 partitions, an unknown
  operation, paths with ``..``, absolute paths, schemes, other tables'
  locations, file names without a write id, files under another partition's
  directory, a decision instead of an intent, another table's name, and more.
"""

from __future__ import annotations

import io
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fastavro

from ordo.arbiter.core import Reason
from ordo.schemas import CommitDecision, CommitIntent, DataFile, Operation, Outcome, encode
from ordo.schemas.codec import DEFAULT_CODEC

ANY = None  # any rejection reason (or, for "mutated", any decision)


@dataclass(frozen=True)
class FuzzCase:
    """One record for the intents topic and the decision it must get."""

    kind: str
    value: bytes | None
    reason: str | None  # the expected reason code; ANY = any code of ``Reason.ALL``
    may_accept: bool = False  # bit-flipped valid intents may still be valid


def _valid(table: str, n: int, partition: str) -> CommitIntent:
    spec = {"p": partition}
    return CommitIntent(
        txn_id=f"fz{n}",
        table=table,
        operation=Operation.INSERT_INTO,
        read_version=0,
        partitions=(spec,),
        added_files=(DataFile(path=f"p={partition}/fz{n}-0.parquet", partition=spec, record_count=1, size_bytes=1),),
    )


def _header() -> bytes:
    return encode(_valid("t", 0, "x"))[:10]


def raw_intent(fields: dict[str, Any]) -> bytes:
    """An intent record written by fastavro from a plain dict: Avro-valid, never validated by pydantic."""
    record = {
        "txn_id": "raw",
        "table": "t",
        "operation": "INSERT_INTO",
        "read_version": 0,
        "partitions": None,
        "added_files": [],
        "removed_files": [],
        "metadata": None,
        "app_id": None,
        "batch_id": None,
        "writer": None,
    }
    record.update(fields)
    buffer = io.BytesIO()
    buffer.write(_header())
    fastavro.schemaless_writer(buffer, DEFAULT_CODEC.schema_of(CommitIntent), record)
    return buffer.getvalue()


def _file(path: str, partition: str, count: int = 1, size: int = 1) -> dict[str, Any]:
    return {
        "path": path,
        "partition": {"p": partition},
        "record_count": count,
        "size_bytes": size,
        "min_key": None,
        "max_key": None,
    }


def _insert(table_name: str, n: int, path: str | None = None, **fields: Any) -> bytes:
    partition = f"fz{n}"
    values: dict[str, Any] = {
        "txn_id": f"fz{n}",
        "table": table_name,
        "operation": "INSERT_INTO",
        "read_version": 0,
        "partitions": [{"p": partition}],
        "added_files": [_file(path if path is not None else f"p={partition}/fz{n}-0.parquet", partition)],
    }
    values.update(fields)
    return raw_intent(values)


def unknown_operation(table: str, n: int) -> bytes:
    """A valid intent whose operation enum index (42) names no operation."""
    txn, data = f"fz{n}", _insert(table, n)
    position = 10 + 1 + len(txn) + 1 + len(table)  # header, txn_id (1-byte length), table (1-byte length)
    assert len(txn) < 64 and len(table) < 64
    return data[:position] + bytes([84]) + data[position + 1 :]  # zigzag(42) = 84


def absurd(table: str, n: int, rng: random.Random, big: bool) -> tuple[str, bytes, str | None]:
    """One valid-Avro intent with an absurd value: ``(kind, bytes, expected reason)``."""
    part = f"fz{n}"
    choices: list[tuple[str, Any, str | None]] = [
        ("negative read version", lambda: _insert(table, n, read_version=-rng.randint(1, 2**40)), "MALFORMED_INTENT"),
        ("read version beyond 2**62", lambda: _insert(table, n, read_version=2**63 - 1), "MALFORMED_INTENT"),
        ("read version ahead of head", lambda: _insert(table, n, read_version=2**62), "READ_VERSION_AHEAD"),
        (
            "negative record count",
            lambda: _insert(table, n, added_files=[_file(f"p={part}/a.parquet", part, count=-5)]),
            "MALFORMED_INTENT",
        ),
        (
            "huge size",
            lambda: _insert(table, n, added_files=[_file(f"p={part}/a.parquet", part, size=2**63 - 1)]),
            "MALFORMED_INTENT",
        ),
        ("empty txn id", lambda: _insert(table, n, txn_id=""), "MALFORMED_INTENT"),
        ("txn id of 300 chars", lambda: _insert(table, n, txn_id="x" * 300), "MALFORMED_INTENT"),
        ("empty path", lambda: _insert(table, n, path=""), "MALFORMED_INTENT"),
        ("path with ..", lambda: _insert(table, n, path=f"p={part}/../../etc/passwd"), "INVALID_PATH"),
        ("path starting with ..", lambda: _insert(table, n, path="../other_table/p=a/x.parquet"), "INVALID_PATH"),
        ("absolute path", lambda: _insert(table, n, path="/etc/shadow"), "INVALID_PATH"),
        (
            "another table's location",
            lambda: _insert(table, n, path="s3a://bucket/warehouse/other/p=a/x.parquet"),
            "INVALID_PATH",
        ),
        ("file: URI", lambda: _insert(table, n, path="file:///tmp/x.parquet"), "INVALID_PATH"),
        ("windows drive", lambda: _insert(table, n, path="C:/x.parquet"), "INVALID_PATH"),
        ("backslashes", lambda: _insert(table, n, path=f"p={part}\\..\\..\\x.parquet"), "INVALID_PATH"),
        ("dot segment", lambda: _insert(table, n, path=f"p={part}/./x.parquet"), "INVALID_PATH"),
        ("empty segment", lambda: _insert(table, n, path=f"p={part}//x.parquet"), "INVALID_PATH"),
        ("NUL in path", lambda: _insert(table, n, path=f"p={part}/x\x00.parquet"), "INVALID_PATH"),
        ("path of 5000 chars", lambda: _insert(table, n, path="a/" * 2500), "MALFORMED_INTENT"),
        ("unknown operation", lambda: unknown_operation(table, n), "MALFORMED_INTENT"),
        ("invalid table name", lambda: _insert(table, n, table="../Other"), "MALFORMED_INTENT"),
        ("another table", lambda: _insert(table, n, table="other_table"), "TABLE_MISMATCH"),
        (
            "CREATE_TABLE again",
            lambda: raw_intent(
                {
                    "txn_id": f"fz{n}",
                    "table": table,
                    "operation": "CREATE_TABLE",
                    "metadata": {
                        "location": "/elsewhere",
                        "schema": "id BIGINT",
                        "primary_key": ["id"],
                        "partition_columns": [],
                        "properties": {},
                    },
                }
            ),
            "TABLE_EXISTS",
        ),
        (
            "ALTER_TABLE without metadata",
            lambda: raw_intent({"txn_id": f"fz{n}", "table": table, "operation": "ALTER_TABLE"}),
            "INVALID_METADATA",
        ),
        (
            "ALTER_TABLE moving the table",
            lambda: raw_intent(
                {
                    "txn_id": f"fz{n}",
                    "table": table,
                    "operation": "ALTER_TABLE",
                    "metadata": {
                        "location": "/elsewhere",
                        "schema": "id BIGINT, note STRING",
                        "primary_key": ["id"],
                        "partition_columns": [],
                        "properties": {},
                    },
                }
            ),
            "UNSUPPORTED_ALTER",
        ),
        ("wrong partition column", lambda: _insert(table, n, partitions=[{"q": part}]), "INVALID_PARTITION"),
        ("empty partition list", lambda: _insert(table, n, partitions=[]), "INVALID_PARTITION"),
        (
            "file outside the scope",
            lambda: _insert(table, n, partitions=[{"p": "elsewhere"}]),
            "INVALID_PARTITION",
        ),
        ("file name without a write id", lambda: _insert(table, n, path=f"p={part}/data.parquet"), "INVALID_PATH"),
        (
            "file under another partition's directory",
            lambda: _insert(table, n, path=f"p=elsewhere/fz{n}-0.parquet"),
            "PATH_PARTITION_MISMATCH",
        ),
        ("app id without batch id", lambda: _insert(table, n, app_id="app"), "INVALID_OPERATION"),
        (
            "insert removing files",
            lambda: _insert(table, n, removed_files=["p=a/old.parquet"]),
            "INVALID_OPERATION",
        ),
        (
            "compaction of files never written",
            lambda: _insert(table, n, operation="MINOR_COMPACT", removed_files=[f"p={part}/ghost.parquet"]),
            "FILE_NOT_LIVE",
        ),
        (
            # since 0.5 a write may carry the table's metadata after a schema change (mergeSchema): not this one
            "metadata on an insert that moves the table",
            lambda: _insert(
                table,
                n,
                metadata={
                    "location": "/x",
                    "schema": "id BIGINT",
                    "primary_key": ["id"],
                    "partition_columns": [],
                    "properties": {},
                },
            ),
            "UNSUPPORTED_ALTER",
        ),
        (
            "a MERGE's row counts claimed by an insert",
            lambda: _insert(table, n, operation_metrics={"numTargetRowsInserted": 1}),
            "INVALID_METRICS",
        ),
        (
            "a decision instead of an intent",
            lambda: encode(CommitDecision(txn_id=f"fz{n}", table=table, intent_offset=0, outcome=Outcome.ACCEPTED)),
            "MALFORMED_INTENT",
        ),
        ("writer of 100 KB", lambda: _insert(table, n, writer="w" * 100_000), "MALFORMED_INTENT"),
    ]
    if big:
        choices = [
            (
                "100,000 files",
                # minimal files (~7 bytes each), so that the record stays under Kafka's 1 MB default
                lambda: _insert(table, n, added_files=[{**_file("a", part), "partition": {}}] * 100_000),
                "MALFORMED_INTENT",
            ),
            (
                "10,001 partitions",
                lambda: _insert(table, n, partitions=[{"p": str(i)} for i in range(10_001)]),
                "MALFORMED_INTENT",
            ),
            ("0.95 MB txn id", lambda: _insert(table, n, txn_id="t" * 950_000), "MALFORMED_INTENT"),
        ]
    kind, build, reason = rng.choice(choices)
    return kind, build(), reason


def cases(table: str, count: int, seed: int, big_every: int = 250) -> Iterator[FuzzCase]:
    """``count`` hostile records for ``table``'s intents topic (every ``big_every``-th one a large one)."""
    rng = random.Random(seed)
    header = _header()
    for n in range(count):
        roll = rng.random()
        if n % big_every == big_every - 1:
            kind, value, reason = absurd(table, n, rng, big=True)
            yield FuzzCase(kind, value, reason)
        elif roll < 0.12:
            yield FuzzCase("random bytes", rng.randbytes(rng.randint(1, 300)), ANY)
        elif roll < 0.14:
            yield FuzzCase("empty value", b"" if rng.random() < 0.5 else None, "MALFORMED_INTENT")
        elif roll < 0.24:
            yield FuzzCase("header + random body", header + rng.randbytes(rng.randint(0, 200)), ANY)
        elif roll < 0.40:
            data = encode(_valid(table, n, f"fz{n}"))
            yield FuzzCase("truncated intent", data[: rng.randrange(len(data))], "MALFORMED_INTENT")
        elif roll < 0.55:
            data = bytearray(encode(_valid(table, n, f"fz{n}")))
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(10, len(data))] ^= 1 << rng.randrange(8)
            yield FuzzCase("bit flips", bytes(data), ANY, may_accept=True)
        else:
            kind, value, reason = absurd(table, n, rng, big=False)
            yield FuzzCase(kind, value, reason)


__all__ = ["ANY", "FuzzCase", "Reason", "absurd", "cases", "raw_intent", "unknown_operation"]
