"""Rewrites of many partitions in one Spark job: one read, each group's output written, a transaction per partition.

A table service that keeps a streaming table compact finds work in many
(partition, bucket) groups at once. A Spark job per group pays a job's fixed
price per group (scheduling, a read, two shuffles, a write); one transaction
for all of them would lose everything to a conflict in any one partition.
``stage_rewrites`` does what the conflict matrix allows: the matrix's scope is
the partition (docs/conflicts.md), so each partition gets its own transaction,
all pinned to one read version, and one Spark job reads every input, keeps the
newest record per key (``data.rewrite_records``, whose window is per partition
and key, so groups never mix) and writes each (partition, bucket) group's
output. Each partition's files are named with its own transaction's id, the
write id the arbiter checks (``schemas.paths``: an accepted commit's write id
is never accepted again, so one write id cannot serve several commits).

``commit_each`` then publishes the partitions' intents together. A partition
whose commit is rejected loses its own rewrite only (its files are deleted);
the others stand or fall on their own.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ordo.producer.data import InvalidOperationError
from ordo.producer.transaction import Transaction
from ordo.schemas import Operation

if TYPE_CHECKING:
    from ordo.producer.handle import TableHandle
    from ordo.producer.results import CommitResult

MODES = {Operation.MINOR_COMPACT: "minor", Operation.MAJOR_COMPACT: "major", Operation.CLUSTER: "cluster"}
COMMIT_THREADS = 16  # intents of one batch in flight at once


@dataclass(frozen=True)
class PartitionRewrite:
    """What to rewrite in one partition: its canonical values, and for MINOR the live files to merge.

    ``files`` None: MAJOR COMPACT and CLUSTER take every live file of the
    partition (they drop delete records, so a file left out would bring keys
    back; the arbiter checks it: ``INCOMPLETE_REWRITE``); MINOR then takes each
    bucket holding two files or more.
    """

    partition: Mapping[str, str]
    files: tuple[str, ...] | None = None


def stage_rewrites(
    table: TableHandle,
    operation: Operation,
    rewrites: Sequence[PartitionRewrite],
    *,
    read_version: int,
    sort_by: Sequence[str] = (),
) -> list[Transaction]:
    """Stage ``operation`` in each partition of ``rewrites`` with one Spark job: one staged transaction per
    partition that has something to rewrite, each pinned to ``read_version``.

    A partition with nothing to do (MINOR: fewer than two of the files; MAJOR:
    no bucket with two files or more) gets no transaction. When the job fails,
    nothing stays on storage and the exception propagates.
    """
    from ordo.producer.data import read_files, rewrite_records, target_file_count
    from ordo.producer.filewriter import FileWriter

    mode = MODES.get(operation)
    if mode is None:
        raise InvalidOperationError(f"{operation.value} is not a rewrite; use {sorted(o.value for o in MODES)}")
    snapshot = table._conn.catalog.snapshot(table.name, version=read_version)
    if snapshot.metadata != table.metadata:  # rewrite with the schema of the version read (an ALTER since the open)
        table._set_metadata(snapshot.metadata)
    layout = table.layout
    columns = layout.partition_columns
    live: dict[tuple[str, ...], list[Any]] = {}
    for entry in snapshot.files:
        live.setdefault(tuple(entry.partition.get(c, "") for c in columns), []).append(entry)
    chosen: dict[tuple[str, ...], list[Any]] = {}
    for rewrite in rewrites:
        key = _key(rewrite.partition, columns)
        if key in chosen:
            raise InvalidOperationError(f"partition {dict(rewrite.partition)} is given twice")
        inputs = _inputs(mode, live.get(key, []), rewrite.files)
        if inputs:
            chosen[key] = inputs
    if not chosen:
        return []
    transactions = {key: Transaction(table, read_version) for key in sorted(chosen)}
    for txn in transactions.values():
        txn._snapshot = snapshot  # the pinned snapshot, read once for all of them
    everything = [entry for key in transactions for entry in chosen[key]]
    writer = FileWriter(
        table.spark, layout, uuid.uuid4().hex, write_ids={key: txn.txn_id for key, txn in transactions.items()}
    )
    staged: list[Transaction] = []
    try:
        records = rewrite_records(
            read_files(table.spark, layout, [(e.absolute_path, e.added_version) for e in everything]), layout, mode
        )
        target = None if columns else target_file_count(sum(e.size_bytes for e in everything), layout)
        stats = writer.write(records, sort_by=sort_by, target_files=target)
        outputs: dict[tuple[str, ...], list[Any]] = {}
        for f in stats.files:
            outputs.setdefault(_key(f.partition, columns), []).append(f)
        for key, txn in transactions.items():
            with txn._stage(operation):
                txn._writer = writer.hand_over(txn.txn_id)
                txn._time("spark_write", stats.spark_seconds)
                txn._time("finish_files", stats.finish_seconds)
                txn.write_seconds = stats.spark_seconds + stats.finish_seconds
                scope = [dict(zip(columns, key, strict=True))] if columns else None
                txn._staged(outputs.get(key, []), scope, removed=sorted(e.path for e in chosen[key]))
            staged.append(txn)
    except BaseException:
        for txn in staged:
            txn.abort()
        writer.cleanup()
        raise
    return staged


def _key(partition: Mapping[str, str], columns: Sequence[str]) -> tuple[str, ...]:
    if set(partition) != set(columns):
        raise InvalidOperationError(f"partition {dict(partition)} must name exactly the partition columns {columns}")
    return tuple(str(partition[c]) for c in columns)


def _inputs(mode: str, files: list[Any], wanted: tuple[str, ...] | None) -> list[Any]:
    """The live files of one partition a rewrite reads (``Transaction.compact``'s choice, for one partition)."""
    if wanted is not None:
        if mode != "minor":
            raise InvalidOperationError("only a MINOR compaction may take a subset of a partition's files")
        paths = set(wanted)
        chosen = [f for f in files if f.path in paths]
        groups = [chosen] if len(chosen) >= 2 else []
    else:
        by_bucket: dict[int, list[Any]] = {}
        for f in files:
            by_bucket.setdefault(f.bucket, []).append(f)
        busy = [group for _, group in sorted(by_bucket.items()) if len(group) >= 2]
        if mode == "minor":
            groups = busy
        else:
            groups = [files] if (busy or (mode == "cluster" and files)) else []
    return Transaction._rewrite_inputs(mode, groups)


def commit_each(
    transactions: Sequence[Transaction], timeout: float | None = None
) -> list[CommitResult | BaseException]:
    """Commit the staged ``transactions`` with their intents in flight together; per transaction, in order, its
    ``CommitResult`` or the exception its commit raised (``CommitConflictError`` for a rejection)."""
    if not transactions:
        return []

    from ordo.producer.results import CatalogLagError

    def commit(txn: Transaction) -> CommitResult | BaseException:
        try:
            result = txn.commit(timeout)
        except CatalogLagError as exc:  # accepted: only the catalog is behind
            return exc.result if exc.result is not None else exc
        except Exception as exc:  # each partition's outcome is its own
            return exc
        if result is None:  # only a no-op commits to nothing, and stage_rewrites stages none
            return InvalidOperationError(f"transaction {txn.txn_id} had nothing to commit")
        return result

    with ThreadPoolExecutor(min(COMMIT_THREADS, len(transactions)), thread_name_prefix="ordo-rewrite-commit") as pool:
        return list(pool.map(commit, transactions))


def warm_up(spark: Any) -> None:
    """A rewrite of a few rows in a scratch directory, end to end (write, one scan with versions by file name,
    newest record per key, output per group): the first rewrite of a fresh Spark session pays class loading and
    JIT compilation (on a 2-core machine, 20 s where the next took 3 to 6), so a service runs this first."""
    import tempfile

    from ordo.producer.data import Layout, join_location, read_files, rewrite_records, upsert_records
    from ordo.producer.filewriter import FileWriter
    from ordo.schemas import TableMetadata

    with tempfile.TemporaryDirectory(prefix="ordo-warm-up-") as scratch:
        metadata = TableMetadata(
            location=scratch,
            schema="`id` bigint, `v` string, `part` string",
            primary_key=("id",),
            partition_columns=("part",),
            properties={"ordo.buckets": "2"},
        )
        layout = Layout.of("warm_up", metadata)
        rows = spark.createDataFrame([(i, "v", str(i % 2)) for i in range(16)], "id bigint, v string, part string")
        files = FileWriter(spark, layout, "warm-0").write(upsert_records(rows)).files
        inputs = [(join_location(scratch, f.path), version) for version, f in enumerate(files, 1)]
        FileWriter(spark, layout, "warm-1").write(rewrite_records(read_files(spark, layout, inputs), layout, "minor"))


__all__ = ["PartitionRewrite", "commit_each", "stage_rewrites", "warm_up"]
