"""Spark reads end to end: merge-on-read at every version and the change feed, against plain-Python models.

Real broker, arbiter and consumer processes; the test itself writes the
Parquet data files (pyarrow) in the writer contract's format: all table
columns plus ``_ordo_op`` and ``_ordo_seq``, compaction and clustering output
carrying each record's original sequence number. Two oracles:

* ``serial``: the table's rows after applying the accepted logical commits in
  ID-version order (upserts, deletes, overwrite/truncate clearing their scope;
  compaction and clustering change nothing), independent of files;
* the change records each logical commit wrote.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ordo.consumer import Catalog, TableNotFoundError, VersionNotFoundError
from ordo.consumer.spark import changes, read
from ordo.producer import CommitClient
from ordo.schemas import CommitDecision, CommitIntent, DataFile, Operation
from ordo.services.stack import ProcessGroup
from ordo.settings import Settings

from ..unit.test_catalog import at
from ..unit.test_catalog_model import IntentSource, LiveModel

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

KEYS = range(6)
Key = tuple[str | None, int]  # (partition value, id)
Record = dict[str, Any]  # id, v, dt, _ordo_op, _ordo_seq
ARROW_SCHEMA = pa.schema(
    [("id", pa.int64()), ("v", pa.string()), ("dt", pa.string()), ("_ordo_op", pa.string()), ("_ordo_seq", pa.int64())]
)


@dataclass
class DataTable:
    """One table: intents from ``IntentSource``, data files written here, decisions folded into the oracles."""

    name: str
    location: Path
    source: IntentSource
    rng: random.Random
    model: LiveModel = field(default_factory=LiveModel)
    records: dict[str, list[Record]] = field(default_factory=dict)  # path -> records as written
    states: list[dict[Key, str]] = field(default_factory=list)  # serial model: rows after each ID version
    changed: dict[int, list[tuple[str, Key, str | None]]] = field(default_factory=dict)  # version -> records
    truncated: dict[int, str | None] = field(default_factory=dict)  # version -> scope JSON (None: whole table)

    @property
    def partitioned(self) -> bool:
        return self.source.partitioned

    def effective(self, path: str) -> list[tuple[int, Record]]:
        """``(effective seq, record)`` of a live file's records."""
        added = next(v for v in reversed(range(self.model.head + 1)) if self.model.live(v).get(path) is not None)
        seq = self.model.live(added)[path]
        return [(r["_ordo_seq"] if r["_ordo_seq"] is not None else seq, r) for r in self.records[path]]

    def write(self, path: str, rows: list[Record]) -> None:
        target = self.location / path
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows, schema=ARROW_SCHEMA), target)
        self.records[path] = rows

    def stage(self, intent: CommitIntent, keys: list[int] | None = None) -> CommitIntent:
        """Write the intent's data files (``keys``, default random ones); fix their record counts and sizes."""
        if intent.txn_id in {p.split("/")[-1].rsplit("-", 1)[0] for p in self.records}:
            return intent  # a retried intent: its files exist already
        files = []
        if intent.operation.rewrites:
            rows_by_part = self._rewrite(intent)
            for f in intent.added_files:
                part = f.partition.get("dt")
                self.write(f.path, rows_by_part.pop(part, []))
        else:
            for f in intent.added_files:
                part = f.partition.get("dt")
                rows = []
                for key in keys or self.rng.sample(list(KEYS), self.rng.randint(1, 4)):
                    if intent.operation is Operation.DELETE:
                        # a delete carries the key; the partition column may be null (the file's partition counts)
                        rows.append(
                            {
                                "id": key,
                                "v": None,
                                "dt": self.rng.choice((part, None)),
                                "_ordo_op": "delete",
                                "_ordo_seq": None,
                            }
                        )
                    else:
                        rows.append(
                            {
                                "id": key,
                                "v": f"{intent.txn_id}:{key}",
                                "dt": part,
                                "_ordo_op": "upsert",
                                "_ordo_seq": None,
                            }
                        )
                self.write(f.path, rows)
        for f in intent.added_files:
            size = (self.location / f.path).stat().st_size
            files.append(f.model_copy(update={"record_count": len(self.records[f.path]), "size_bytes": size}))
        return intent.model_copy(update={"added_files": tuple(DataFile.model_validate(f.model_dump()) for f in files)})

    def _rewrite(self, intent: CommitIntent) -> dict[str | None, list[Record]]:
        """Compaction/cluster output per partition from the input files, each record keeping its sequence number."""
        by_part: dict[str | None, list[tuple[int, Record]]] = {}
        for path in intent.removed_files:
            part = self.model.partitions[path].get("dt")
            read_live = self.model.live(intent.read_version)
            seq = read_live[path]
            for r in self.records[path]:
                by_part.setdefault(part, []).append((r["_ordo_seq"] if r["_ordo_seq"] is not None else seq, r))
        out: dict[str | None, list[Record]] = {}
        for part, items in by_part.items():
            if intent.operation is Operation.CLUSTER:
                kept = sorted(items, key=lambda item: (item[1]["id"], item[0]))  # every record, sorted by key
            else:
                newest: dict[int, tuple[int, Record]] = {}
                for seq, r in items:
                    if r["id"] not in newest or seq > newest[r["id"]][0]:
                        newest[r["id"]] = (seq, r)
                kept = sorted(newest.values(), key=lambda item: item[1]["id"])
                if intent.operation is Operation.MAJOR_COMPACT:
                    kept = [item for item in kept if item[1]["_ordo_op"] == "upsert"]
            out[part] = [
                {**r, "dt": r["dt"] if r["_ordo_op"] == "upsert" else part, "_ordo_seq": seq} for seq, r in kept
            ]
        return out

    def fold(self, decision: CommitDecision) -> None:
        """Apply an answer to the live-file model and the serial model."""
        self.model.apply(decision)
        if not decision.accepted or decision.duplicate_of is not None:
            return
        version = decision.id_version
        assert version is not None and decision.operation is not None
        state = dict(self.states[-1]) if self.states else {}
        operation = decision.operation
        if operation in (Operation.INSERT_OVERWRITE, Operation.TRUNCATE):
            scope = None
            if decision.partitions is not None and self.partitioned:
                parts = {p["dt"] for p in decision.partitions}
                scope = json.dumps([dict(p) for p in decision.partitions], sort_keys=True, separators=(",", ":"))
                state = {k: v for k, v in state.items() if k[0] not in parts}
            else:
                state = {}
            self.truncated[version] = scope
        if operation.data_change and operation is not Operation.CREATE_TABLE:
            written = []
            for f in decision.added_files:
                part = f.partition.get("dt")
                for r in self.records[f.path]:
                    key = (part, r["id"])
                    if r["_ordo_op"] == "upsert":
                        state[key] = r["v"]
                    else:
                        state.pop(key, None)
                    written.append((r["_ordo_op"], (part, r["id"]), r["v"]))  # the file's partition
            self.changed[version] = written
        self.states.append(state)

    def expected(self, version: int) -> set[tuple[Any, ...]]:
        """Rows ``(id, v, dt)`` at ``version`` per the serial model."""
        return {(key, value, part) for (part, key), value in self.states[version].items()}


def rows(frame: Any) -> set[tuple[Any, ...]]:
    collected = frame.collect()
    result = {(r["id"], r["v"], r["dt"]) for r in collected}
    assert len(result) == len(collected), "a key appears twice"
    return result


@dataclass
class Stack:
    settings: Settings
    catalog: Catalog
    tables: dict[str, DataTable]


def random_steps(client: CommitClient, table: DataTable, steps: int) -> None:
    done = 0
    while done < steps:
        burst = [table.stage(table.source.next(table.model)) for _ in range(table.rng.choice((1, 1, 2)))]
        futures = [client.submit(intent) for intent in burst]  # pinned to the same snapshot: concurrent
        for future in futures:
            table.fold(future.result(timeout=30))
        done += len(burst)


def rewrite(client: CommitClient, table: DataTable, operation: Operation, dt: str | None) -> None:
    """A compaction/cluster of partition ``dt`` at the head (whatever the random part produced)."""
    source, model = table.source, table.model
    inputs = source.live_in(model, model.head, dt)
    if not inputs:
        return
    txn = source.name()
    intent = CommitIntent(
        txn_id=txn,
        table=table.name,
        operation=operation,
        read_version=model.head,
        partitions=({"dt": dt},) if table.partitioned else None,
        added_files=source.files(txn, dt, 2 if operation is Operation.CLUSTER else 1),
        removed_files=inputs,
    )
    decision = client.commit(table.stage(intent))
    assert decision.accepted, decision
    table.fold(decision)


def stale_compaction(client: CommitClient, table: DataTable, dt: str | None) -> None:
    """A minor compaction pinned before a newer write of the same keys, committed after it.

    Its output must keep the inputs' sequence numbers: with the compaction's own
    version as their sequence, the older values would hide the newer write.
    """
    source, model = table.source, table.model
    txn = source.name()
    scope = ({"dt": dt},) if table.partitioned else None
    seed = CommitIntent(
        txn_id=txn,
        table=table.name,
        operation=Operation.INSERT_INTO,
        read_version=model.head,
        partitions=scope,
        added_files=source.files(txn, dt),
    )
    table.fold(client.commit(table.stage(seed, keys=list(KEYS))))
    read = model.head
    inputs = source.live_in(model, read, dt)
    txn = source.name()
    newer = CommitIntent(
        txn_id=txn,
        table=table.name,
        operation=Operation.UPDATE,
        read_version=read,
        partitions=scope,
        added_files=source.files(txn, dt),
    )
    table.fold(client.commit(table.stage(newer, keys=list(KEYS))))
    txn = source.name()
    compaction = CommitIntent(
        txn_id=txn,
        table=table.name,
        operation=Operation.MINOR_COMPACT,
        read_version=read,
        partitions=scope,
        added_files=source.files(txn, dt),
        removed_files=inputs,
    )
    decision = client.commit(table.stage(compaction))
    assert decision.accepted and decision.rebase.value == "COMPACTION_COMPLETES", decision
    table.fold(decision)


def run_history(client: CommitClient, table: DataTable, steps: int) -> None:
    table.fold(client.commit(table.source.create(str(table.location))))
    random_steps(client, table, steps)
    stale_compaction(client, table, "a" if table.partitioned else None)
    for operation, dt in [(Operation.MINOR_COMPACT, "a"), (Operation.MAJOR_COMPACT, "b"), (Operation.CLUSTER, "c")]:
        rewrite(client, table, operation, dt if table.partitioned else None)
        random_steps(client, table, 2)


@pytest.fixture(scope="module")
def stack(make_settings: Callable[..., Settings], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = make_settings()
    group = ProcessGroup(log_dir=tmp_path_factory.mktemp("reads-logs"))
    warehouse = Path(settings.warehouse)
    try:
        group.start_arbiter(settings, timeout=60)
        consumer = group.start_ordo(settings, "consumer", "--no-http", name="consumer-reads")
        consumer.wait_for_line("consumer ready", timeout=60)
        tables = {
            "events": DataTable("events", warehouse / "events", IntentSource("events", seed=71), random.Random(1)),
            # a location with characters Spark treats as URL or glob syntax
            "plain": DataTable(
                "plain", warehouse / "plain x+[1]%", IntentSource("plain", seed=72, partitioned=False), random.Random(2)
            ),
        }
        with CommitClient(settings=settings) as client:
            run_history(client, tables["events"], 24)
            run_history(client, tables["plain"], 10)
        catalog = Catalog(settings.catalog)
        for table in tables.values():
            catalog.wait_for_version(table.name, table.model.head, timeout=30)
        yield Stack(settings, catalog, tables)
    finally:
        group.stop()


def test_history_covers_merges_deletes_overwrites_and_rewrites(stack: Stack) -> None:
    events = stack.tables["events"]
    operations = set(events.model.operations)
    assert {Operation.DELETE, Operation.INSERT_OVERWRITE} & operations
    assert {Operation.MINOR_COMPACT, Operation.MAJOR_COMPACT, Operation.CLUSTER} & operations
    assert any(r["_ordo_op"] == "delete" for records in events.records.values() for r in records)


@pytest.mark.parametrize("name", ["events", "plain"])
def test_read_at_every_version_equals_the_serial_model(spark: Any, stack: Stack, name: str) -> None:
    table = stack.tables[name]
    for version in range(table.model.head + 1):
        frame = read(spark, name, version=version, catalog=stack.catalog)
        assert frame.columns == ["id", "v", "dt"]
        assert rows(frame) == table.expected(version), f"{name} at version {version}"
    assert rows(read(spark, name, catalog=stack.catalog)) == table.expected(table.model.head)


def _format_ordo(spark: Any, stack: Stack, name: str, version: int) -> Any:
    """``spark.read.format("ordo")`` of ``name`` at ``version``."""
    from ordo.spark.datasource import settings_options

    return (
        spark.read.format("ordo").options(**settings_options(stack.settings)).option("versionAsOf", version).load(name)
    )


@pytest.mark.parametrize("via", ["read", "format"])
@pytest.mark.parametrize("name", ["events", "plain"])
def test_a_point_read_by_key_equals_the_model(spark: Any, stack: Stack, name: str, via: str) -> None:
    """``id = k`` and ``id IN (...)`` pushed into the merge (only files whose key range may hold the keys are
    read) give the model's rows of those keys: live, deleted, never written; at old versions and the head; through
    ``consumer.spark.read`` and ``format("ordo")``."""
    from pyspark.sql import functions as F

    table = stack.tables[name]
    rng = random.Random(11)
    for version in [*sorted(rng.sample(range(1, table.model.head + 1), 3)), table.model.head]:
        expected = table.expected(version)
        keys = sorted({r[0] for r in expected})
        chosen = [*rng.sample(keys, min(3, len(keys))), max(keys, default=0) + 1000]
        if via == "read":
            frame = read(spark, name, version=version, catalog=stack.catalog)
        else:
            frame = _format_ordo(spark, stack, name, version)
        for key in chosen:
            assert rows(frame.where(f"id = {key}")) == {r for r in expected if r[0] == key}, f"{name} v{version}"
        assert rows(frame.where(F.col("id").isin(chosen))) == {r for r in expected if r[0] in chosen}


def test_format_ordo_reads_only_a_point_reads_keys_from_the_files_that_may_hold_them(spark: Any, stack: Stack) -> None:
    """The reader ``format("ordo")`` plans for ``id = k`` keeps every file that holds a record of ``k`` (of those
    whose bucket and key range may: ``consumer.arrow.files_with_keys``) and reads only ``k``'s records from them;
    Spark still applies the filter."""
    from pyspark.sql.datasource import EqualTo

    from ordo.spark.datasource import OrdoDataSource, settings_options

    table = stack.tables["events"]
    schema = _format_ordo(spark, stack, "events", table.model.head).schema
    source = OrdoDataSource({"path": "events", **settings_options(stack.settings)})
    whole = source.reader(schema)
    expected = table.expected(table.model.head)
    key = sorted({r[0] for r in expected})[0]
    pruned = source.reader(schema)
    assert list(pruned.pushFilters([EqualTo(("id",), key)])) == [EqualTo(("id",), key)]  # Spark still filters
    assert pruned.keys is not None and pruned.keys.column("id").to_pylist() == [key]
    holding = {r.path for r in whole.files if key in pq.read_table(r.path, columns=["id"]).column("id").to_pylist()}
    assert holding and holding <= {r.path for r in pruned.files} <= {r.path for r in whole.files}
    rows = [r for part in pruned.partitions() for batch in pruned.read(part) for r in batch.to_pylist()]
    assert {tuple(r.values()) for r in rows} == {r for r in expected if r[0] == key}


def test_read_as_of_a_timestamp(spark: Any, stack: Stack) -> None:
    table = stack.tables["events"]
    rng = random.Random(3)
    for version in sorted(rng.sample(range(table.model.head + 1), 5)):
        millis = table.model.times[version]
        expected_version = table.model.version_at(millis)
        assert expected_version is not None
        frame = read(spark, "events", timestamp=at(millis), catalog=stack.catalog)
        assert rows(frame) == table.expected(expected_version)
    with pytest.raises(VersionNotFoundError, match="before table 'events' was created"):
        read(spark, "events", timestamp=at(table.model.times[0] - 1), catalog=stack.catalog)
    with pytest.raises(VersionNotFoundError, match="does not exist"):
        read(spark, "events", version=table.model.head + 1, catalog=stack.catalog)
    with pytest.raises(TableNotFoundError):
        read(spark, "nope", catalog=stack.catalog)


def expected_changes(table: DataTable, versions: list[int]) -> list[tuple[Any, ...]]:
    result = []
    for version in versions:
        stamp = at(table.model.times[version]).replace(tzinfo=None)
        if version in table.truncated:
            result.append((None, None, None, "truncate", version, stamp, table.truncated[version]))
        for op, (part, key), value in table.changed.get(version, []):
            result.append((key, value, part, op, version, stamp, None))
    return sorted(result, key=repr)


def change_rows(frame: Any) -> list[tuple[Any, ...]]:
    assert frame.columns == ["id", "v", "dt", "_change_type", "_commit_version", "_commit_timestamp", "_scope"]
    return sorted(
        (
            (r["id"], r["v"], r["dt"], r["_change_type"], r["_commit_version"], r["_commit_timestamp"], r["_scope"])
            for r in frame.collect()
        ),
        key=repr,
    )


@pytest.mark.parametrize("name", ["events", "plain"])
def test_changes_by_id_version(spark: Any, stack: Stack, name: str) -> None:
    table = stack.tables[name]
    head = table.model.head
    for low, high in [(0, head), (2, 2), (3, min(head, 9)), (head - 4, head)]:
        frame = changes(spark, name, low, high, catalog=stack.catalog)
        assert change_rows(frame) == expected_changes(table, table.model.logical(low, high)), (low, high)
    rewrites = [v for v, op in enumerate(table.model.operations) if op.rewrites]
    for version in rewrites[:3]:
        assert changes(spark, name, version, version, catalog=stack.catalog).count() == 0


def test_changes_by_time_version(spark: Any, stack: Stack) -> None:
    table = stack.tables["events"]
    times = table.model.times
    head = table.model.head
    for low_v, high_v in [(1, head), (4, 12)]:
        low, high = times[low_v], times[high_v]
        versions = [v for v in range(head + 1) if table.model.operations[v].data_change and low <= times[v] <= high]
        frame = changes(spark, "events", at(low), at(high), by="time", catalog=stack.catalog)
        assert change_rows(frame) == expected_changes(table, versions)
    with pytest.raises(VersionNotFoundError):
        changes(spark, "events", head + 1, catalog=stack.catalog)
