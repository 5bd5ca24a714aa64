"""A table written through the real stack with real Parquet files, and a plain-Python model of its row changes.

``TableWriter`` commits INSERT INTO, UPDATE, DELETE, INSERT OVERWRITE,
TRUNCATE and MAJOR COMPACT through a ``CommitClient`` (so a real arbiter
decides them), writing the data files as the writer does
(``producer.arrow.write_rows``; delete records by hand, in the writer's
format). Alongside it keeps the live rows per (partition, key) and, per ID
version, the row changes a Debezium reader must get: the oracle of the change
topic tests (``read_change_topic`` reads the topic back).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ordo.producer import CommitClient
from ordo.producer.arrow import write_rows
from ordo.producer.buckets import bucket_array
from ordo.producer.data import Layout
from ordo.schemas import CommitIntent, DataFile, Operation, TableMetadata
from ordo.schemas.paths import data_file_path

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("n", pa.float64()), ("dt", pa.string())])
DDL = "id BIGINT, v STRING, n DOUBLE, dt STRING"
BUCKETS = 2
Row = dict[str, Any]
Change = tuple[str, Row | None, Row | None]  # (op, before, after)


def key_of(row: Mapping[str, Any]) -> tuple[str, int]:
    return (row["dt"], row["id"])


class TableWriter:
    """Commits through the stack and models the live rows and each version's row changes."""

    def __init__(
        self,
        client: CommitClient,
        name: str,
        location: str,
        schema: pa.Schema = SCHEMA,
        ddl: str = DDL,
        values: Callable[[random.Random], Row] | None = None,
    ) -> None:
        self.client = client
        self.name = name
        self.schema = schema
        self.values = values  # the non-key columns of a random row (default: ``v`` and ``n``)
        self.metadata = TableMetadata(
            location=location,
            schema=ddl,
            primary_key=("id",),
            partition_columns=("dt",),
            properties={"ordo.buckets": str(BUCKETS)},
        )
        self.layout = Layout.of(name, self.metadata)
        self.head = -1
        self.live: dict[tuple[str, int], Row] = {}
        self.expected: dict[int, list[Change]] = {}  # ID version -> its changes (any order)
        self.serial = 0
        self._commit(Operation.CREATE_TABLE, metadata=self.metadata)

    def _commit(self, operation: Operation, **fields: Any) -> int:
        self.serial += 1
        intent = CommitIntent(
            txn_id=fields.pop("txn_id", f"{self.name}-{self.serial}"),
            table=self.name,
            operation=operation,
            read_version=max(self.head, 0),
            **fields,
        )
        decision = self.client.commit(intent, timeout=60)
        assert decision.accepted, decision
        assert decision.id_version == self.head + 1, (decision.id_version, self.head)
        self.head = decision.id_version
        return self.head

    def _txn(self) -> str:
        return f"w{self.serial + 1}x{random.getrandbits(24):06x}"

    def upsert(self, rows: list[Row], operation: Operation = Operation.INSERT_INTO, *, merge: bool = False) -> int:
        """INSERT INTO or UPDATE: each row replaces its key's row or adds one; ``merge``: an UPDATE that claims
        MERGE's metrics (``DeltaTable.merge``'s commit)."""
        txn = self._txn()
        files = write_rows(pa.Table.from_pylist(rows, self.schema), self.layout, txn, 0)
        parts = sorted({r["dt"] for r in rows})
        metrics = {}
        if merge:
            operation = Operation.UPDATE
            updated = sum(key_of(r) in self.live for r in rows)
            metrics = {"numTargetRowsInserted": len(rows) - updated, "numTargetRowsUpdated": updated}
            metrics["numTargetRowsDeleted"] = 0
        version = self._commit(
            operation,
            txn_id=txn,
            partitions=tuple({"dt": p} for p in parts),
            added_files=tuple(files),
            operation_metrics=metrics,
        )
        changes: list[Change] = []
        for row in rows:
            old = self.live.get(key_of(row))
            changes.append(("c", None, dict(row)) if old is None else ("u", old, dict(row)))
            self.live[key_of(row)] = dict(row)
        self.expected[version] = changes
        return version

    def delete(self, dt: str, ids: list[int]) -> int:
        """DELETE of keys of partition ``dt`` (delete records, the writer's format); a missing key changes nothing."""
        txn = self._txn()
        keys = pa.table({"id": pa.array(ids, pa.int64())})
        buckets = bucket_array(keys, ("id",), BUCKETS).to_pylist()
        files = []
        for n, bucket in enumerate(sorted(set(buckets))):
            mine = [k for k, b in zip(ids, buckets, strict=True) if b == bucket]
            path = data_file_path(("dt",), {"dt": dt}, txn, n)
            columns = {f.name: pa.nulls(len(mine), f.type) for f in self.schema}
            columns["id"] = pa.array(mine, pa.int64())
            columns["dt"] = pa.array([dt] * len(mine), pa.string())
            columns["_ordo_op"] = pa.array(["delete"] * len(mine), pa.string())
            columns["_ordo_seq"] = pa.nulls(len(mine), pa.int64())
            records = pa.table(columns)
            full = Path(self.metadata.location) / path
            full.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(records, full)
            files.append(
                DataFile(
                    path=path,
                    partition={"dt": dt},
                    record_count=len(mine),
                    size_bytes=full.stat().st_size,
                    min_key=str(min(mine)),
                    max_key=str(max(mine)),
                    bucket=bucket,
                )
            )
        version = self._commit(Operation.DELETE, txn_id=txn, partitions=({"dt": dt},), added_files=tuple(files))
        gone = [self.live.pop((dt, k)) for k in ids if (dt, k) in self.live]
        self.expected[version] = [("d", row, None) for row in gone]
        return version

    def overwrite(self, dt: str | None, rows: list[Row]) -> int:
        """INSERT OVERWRITE of partition ``dt`` (None: the table), or TRUNCATE when ``rows`` is empty."""
        txn = self._txn()
        files = write_rows(pa.Table.from_pylist(rows, self.schema), self.layout, txn, 0) if rows else []
        operation = Operation.INSERT_OVERWRITE if rows else Operation.TRUNCATE
        scope = None if dt is None else ({"dt": dt},)
        version = self._commit(operation, txn_id=txn, partitions=scope, added_files=tuple(files))
        cleared = [k for k in self.live if dt is None or k[0] == dt]
        changes: list[Change] = [("d", self.live.pop(k), None) for k in cleared]
        for row in rows:
            self.live[key_of(row)] = dict(row)
            changes.append(("c", None, dict(row)))
        self.expected[version] = changes
        return version

    def compact(self, catalog: Any, dt: str) -> int:
        """MAJOR COMPACT of partition ``dt``: its live rows rewritten, one file per bucket; no row changes."""
        txn = self._txn()
        self.wait(catalog)
        removed = tuple(f.path for f in catalog.snapshot(self.name).files if f.partition.get("dt") == dt)
        rows = [r for k, r in sorted(self.live.items()) if k[0] == dt]
        files = write_rows(pa.Table.from_pylist(rows, self.schema), self.layout, txn, 0)
        version = self._commit(
            Operation.MAJOR_COMPACT,
            txn_id=txn,
            partitions=({"dt": dt},),
            added_files=tuple(f.model_copy(update={"data_change": False}) for f in files),
            removed_files=removed,
        )
        self.expected[version] = []
        return version

    def wait(self, catalog: Any) -> None:
        catalog.wait_for_version(self.name, self.head, timeout=60)

    def random_step(self, rng: random.Random, catalog: Any) -> int:
        """One random commit of the kinds above, on a few keys of three partitions."""
        dt = rng.choice(("a", "b", "c"))
        live = sorted(k[1] for k in self.live if k[0] == dt)
        kind = rng.choices(("insert", "update", "delete", "overwrite", "truncate", "compact"), (6, 4, 2, 1, 1, 1))[0]
        if kind == "update" and live:
            ids = rng.sample(live, min(len(live), rng.randint(1, 4)))
            return self.upsert([self.row(i, dt, rng) for i in ids], Operation.UPDATE)
        if kind == "delete" and live:
            ids = [*rng.sample(live, min(len(live), rng.randint(1, 3))), 10_000 + rng.randint(0, 9)]  # one missing
            return self.delete(dt, sorted(set(ids)))
        if kind == "overwrite":
            return self.overwrite(dt, [self.row(i, dt, rng) for i in sorted(rng.sample(range(41), 3))])
        if kind == "truncate" and rng.random() < 0.3:
            return self.overwrite(None, [])
        if kind == "compact" and live:
            return self.compact(catalog, dt)
        ids = sorted({rng.randint(0, 40) for _ in range(rng.randint(1, 6))})
        return self.upsert([self.row(i, dt, rng) for i in ids])

    def row(self, key: int, dt: str, rng: random.Random) -> Row:
        if self.values is not None:
            return {"id": key, **self.values(rng), "dt": dt}
        return {"id": key, "v": f"v{rng.randint(0, 10**6)}", "n": rng.random() * 100, "dt": dt}


Record = tuple[bytes | None, dict[str, Any]]  # (key, value as JSON); a tombstone's value: TOMBSTONE


TOMBSTONE: dict[str, Any] = {}


def read_change_topic(bootstrap_config: Mapping[str, Any], topic: str, *, tombstones: bool = False) -> list[Record]:
    """Every record of ``topic`` a read_committed reader sees, in offset order: ``(key, value as JSON)``; with
    ``tombstones`` a tombstone (null value) is ``(key, TOMBSTONE)``, else it is left out."""
    from ordo.kernel.logread import read_to_end

    config = {**bootstrap_config, "group.id": "test.changes", "isolation.level": "read_committed"}
    return [
        (m.key(), TOMBSTONE if m.value() is None else json.loads(m.value()))
        for m in read_to_end(config, topic, transactional=True, timeout=30)
        if tombstones or m.value() is not None
    ]


def check_tombstones(records: list[Record]) -> int:
    """Assert that every ``d`` is followed at once by a tombstone with its key, and nothing else is one (the
    records as ``read_change_topic(..., tombstones=True)`` gives them); returns the tombstones' count."""
    count = 0
    for index, (key, value) in enumerate(records):
        if value is TOMBSTONE:
            assert index > 0 and records[index - 1][1] is not TOMBSTONE, f"a tombstone at {index} after no delete"
            assert records[index - 1][1]["op"] == "d" and records[index - 1][0] == key, index
            count += 1
        elif value["op"] == "d":
            assert index + 1 < len(records) and records[index + 1] == (key, TOMBSTONE), f"no tombstone after {index}"
    return count


def check_topic(records: list[Record], writer: TableWriter) -> dict[str, int]:
    """Assert the topic is the model's changes exactly once in version order; returns counts per op."""
    by_version: dict[int, list[Change]] = {}
    position = (0, -1)
    counts = {"c": 0, "u": 0, "d": 0}
    for key, value in records:
        source = value["source"]
        assert source["table"] == writer.name and source["connector"] == "ordo"
        here = (source["id_version"], source["row"])
        expected_next = (position[0], position[1] + 1)
        assert here == expected_next or (here[0] > position[0] and here[1] == 0), (position, here)
        position = here
        assert value["transaction"]["id"] == source["txn_id"]
        after, before = value["after"], value["before"]
        row = after if after is not None else before
        assert key is not None and json.loads(key) == {"id": row["id"], "dt": row["dt"]}
        by_version.setdefault(here[0], []).append((value["op"], before, after))
        counts[value["op"]] += 1
    for version in range(1, writer.head + 1):
        got = sorted(by_version.get(version, []), key=repr)
        want = sorted(writer.expected.get(version, []), key=repr)
        assert got == want, f"version {version}: {got} != {want}"
    assert set(by_version) <= set(range(1, writer.head + 1))
    return counts


def fold(records: list[Record]) -> dict[tuple[str, int], Row]:
    """The rows a Debezium reader holds after applying ``records`` in order."""
    state: dict[tuple[str, int], Row] = {}
    for _key, value in records:
        if value["op"] == "d":
            del state[key_of(value["before"])]
        else:
            state[key_of(value["after"])] = value["after"]
    return state
