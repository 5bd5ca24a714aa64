"""Streaming ingestion end to end: a real Structured Streaming query, stopped, crashed and restarted.

The source is ``rate-micro-batch`` (a fixed number of rows per micro-batch,
values 0, 1, 2, ... in offset order), so a replayed batch carries the same rows.
Every record must end up in the table exactly once: no value missing up to the
last committed batch, and no record written twice (counted in the raw files,
which merge-on-read would otherwise hide behind the primary key).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ordo.producer.streaming import foreach_batch_committer
from ordo.producer.table import DeltaTable
from tests.e2e.stack import parquet_files, writer_stack  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

ROWS_PER_BATCH = 7
SCHEMA = "id BIGINT, v STRING, part STRING"


class InjectedCrash(RuntimeError):
    """Fault injection: the driver dies after a batch committed, before Spark checkpointed it."""


def stream(spark: Any) -> Any:
    from pyspark.sql import functions as F

    source = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", ROWS_PER_BATCH).load()
    return source.select(
        F.col("value").alias("id"),
        F.concat(F.lit("r"), F.col("value").cast("string")).alias("v"),
        (F.col("value") % 2).cast("string").alias("part"),
    )


def run_until(query: Any, condition: Any, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if query.exception() is not None or not query.isActive:
            return
        assert time.monotonic() < deadline, f"streaming query made no progress: {query.lastProgress}"
        time.sleep(0.2)


def test_stream_restart_commits_every_record_exactly_once(spark: Any, writer_stack: Any, tmp_path: Path) -> None:  # noqa: F811
    from pyspark.errors import StreamingQueryException

    table = DeltaTable.create(
        spark, "stream", schema=SCHEMA, primary_key="id", partitioned_by="part", settings=writer_stack.settings
    )
    checkpoint = str(tmp_path / "checkpoint")
    crashed: list[int] = []

    def crash_once_after(batch_id: int, result: Any) -> None:
        if batch_id == 2 and result is not None and not crashed:
            crashed.append(batch_id)
            raise InjectedCrash("driver lost after committing batch 2")

    # run 1: commits batches 0..2, then "crashes" before Spark records batch 2 in the checkpoint
    committer = foreach_batch_committer(table, on_commit=crash_once_after)
    query = stream(spark).writeStream.foreachBatch(committer).option("checkpointLocation", checkpoint).start()
    query_id = query.id
    with pytest.raises(StreamingQueryException, match="driver lost"):
        query.awaitTermination(120)
    assert committer.committed == [0, 1, 2]

    # run 2: Spark replays batch 2 (same id, same rows): already committed, so nothing is written twice
    committer = foreach_batch_committer(table)
    query = stream(spark).writeStream.foreachBatch(committer).option("checkpointLocation", checkpoint).start()
    assert query.id == query_id, "the query id (our app_id) must survive the restart"
    run_until(query, lambda: len(committer.committed) >= 2)
    query.stop()
    assert query.exception() is None
    assert committer.replayed == [2]
    assert committer.committed[:2] == [3, 4]

    # run 3: a plain stop/restart in the middle of the stream
    committer = foreach_batch_committer(table)
    query = stream(spark).writeStream.foreachBatch(committer).option("checkpointLocation", checkpoint).start()
    run_until(query, lambda: len(committer.committed) >= 2)
    query.stop()
    assert query.exception() is None

    last = max(c.batch_id for c in table.decisions() if c.accepted and c.batch_id is not None)
    expected = (last + 1) * ROWS_PER_BATCH
    rows = table.read().collect()
    assert sorted(r.id for r in rows) == list(range(expected)), "a record is missing or appears twice"
    assert all(r.v == f"r{r.id}" and r.part == str(r.id % 2) for r in rows)
    snapshot = table.snapshot()
    assert snapshot.record_count == expected, "some batch was written twice (raw records in the live files)"
    accepted = [c for c in table.decisions() if c.accepted and c.batch_id is not None]
    assert sorted(c.batch_id for c in accepted) == list(range(last + 1)), "each batch committed exactly once"
    assert {c.app_id for c in accepted} == {str(query_id)}
    reasons = [c.reason for c in table.decisions() if not c.accepted]
    assert "BATCH_ALREADY_COMMITTED" in reasons, reasons
    # a stop can interrupt a batch mid-commit; a replay racing it may lose an INSERT conflict and retry
    assert set(reasons) <= {"BATCH_ALREADY_COMMITTED", "CONFLICT_LATER_FAILS"}, reasons
    committed_files = {f.path for c in table.catalog.commits("stream", 0, None) for f in c.added_files}
    on_disk = set(parquet_files(table.location))
    assert on_disk == committed_files, f"files no commit references: {sorted(on_disk - committed_files)}"


def test_stream_retries_insert_conflicts(spark: Any, writer_stack: Any) -> None:  # noqa: F811
    """A batch rejected by a concurrent INSERT INTO into its partition is republished on the new head."""
    table = DeltaTable.create(
        spark, "stream_retry", schema=SCHEMA, primary_key="id", partitioned_by="part", settings=writer_stack.settings
    )
    committer = foreach_batch_committer(table, app_id="loader", retries=3)
    batch = spark.createDataFrame([(1, "a", "0"), (2, "b", "0")], SCHEMA)

    other_writer = DeltaTable.open(spark, "stream_retry", settings=writer_stack.settings)
    original_begin = table.begin

    def begin_then_race(**kwargs: Any) -> Any:
        txn = original_begin(**kwargs)
        original_insert = txn.insert_into

        def insert_then_race(df: Any) -> Any:
            staged = original_insert(df)
            # fault injection: another writer's INSERT into the same partition commits between staging and commit
            other_writer.insert_into(spark.createDataFrame([(100, "x", "0")], SCHEMA))
            return staged

        txn.insert_into = insert_then_race
        return txn

    table.begin = begin_then_race  # type: ignore[method-assign]
    committer(batch, 0)
    table.begin = original_begin  # type: ignore[method-assign]
    assert committer.committed == [0]
    assert committer.last_result is not None and committer.last_result.attempts == 2
    committer(batch, 0)  # a replay of the same batch id commits nothing
    assert committer.replayed == [0]
    rows = {r.id: r.v for r in table.read().collect()}
    assert rows == {1: "a", 2: "b", 100: "x"}
    assert table.snapshot().record_count == 3
