"""Structured Streaming with ``format("ordo")``: the sink and the change feed source, stopped and restarted.

The sink test leaves the table and the checkpoint exactly as a driver killed
after a micro-batch committed but before Spark recorded it: the last entry of
the checkpoint's ``commits/`` log is removed, so the restarted query replays
that batch (same id, same rows from ``rate-micro-batch``). Every value must be
in the table once, and no record may be written twice (counted in the raw
files, which merge-on-read would otherwise hide behind the primary key).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from ordo.producer.table import DeltaTable
from ordo.spark.datasource import settings_options
from tests.e2e.stack import parquet_files, writer_stack  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

ROWS_PER_BATCH = 7
SCHEMA = "id BIGINT, v STRING, part STRING"


def rate_stream(spark: Any, base: int = 0) -> Any:
    from pyspark.sql import functions as F

    source = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", ROWS_PER_BATCH).load()
    return source.select(
        (F.col("value") + base).alias("id"),
        F.concat(F.lit("r"), F.col("value").cast("string")).alias("v"),
        (F.col("value") % 2).cast("string").alias("part"),
    )


def wait_for(query: Any, condition: Any, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert query.exception() is None, query.exception()
        assert query.isActive, "the query stopped"
        assert time.monotonic() < deadline, f"no progress: {query.lastProgress}"
        time.sleep(0.3)


def test_sink_is_exactly_once_across_a_restart(spark: Any, writer_stack: Any, tmp_path: Path) -> None:  # noqa: F811
    settings = writer_stack.settings
    table = DeltaTable.create(
        spark, "ds_sink", schema=SCHEMA, primary_key="id", partitioned_by="part", settings=settings
    )
    checkpoint = tmp_path / "checkpoint"

    def start() -> Any:
        return (
            rate_stream(spark)
            .writeStream.format("ordo")
            .options(**settings_options(settings))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="2 seconds")  # idle between batches, so stop() falls between them
            .start("ds_sink")
        )

    query = start()
    wait_for(query, lambda: table.version >= 3)
    time.sleep(0.5)  # let Spark log the batch that just committed
    query.stop()
    # the state of a driver killed after batch C committed, before Spark logged it: drop C from the
    # commit log, and any later planned batch from the offset log (the stop may have come mid-batch)
    logged = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    replayed = logged[-1]
    for log_dir, first in (("commits", replayed), ("offsets", replayed + 1)):
        for p in (checkpoint / log_dir).iterdir():
            number = p.name.lstrip(".").split(".")[0]
            if number.isdigit() and int(number) >= first:
                os.remove(p)
    committed = [d.batch_id for d in table.catalog.history("ds_sink") if d.outcome.value == "ACCEPTED"]
    assert replayed in committed
    again = [b for b in (replayed, replayed + 1) if b in committed]  # in the table already: must be refused
    version_before = table.version

    query = start()
    wait_for(query, lambda: table.version >= version_before + 2)
    query.stop()
    assert query.exception() is None

    history = table.catalog.history("ds_sink")
    refused = [d for d in history if d.reason == "BATCH_ALREADY_COMMITTED"]
    trail = [(d.outcome.value, d.reason, d.app_id, d.batch_id, d.duplicate_of) for d in history]
    assert sorted(d.batch_id for d in refused) == again, f"the replayed batch is refused, and only it: {trail}"
    batches = sorted(d.batch_id for d in history if d.outcome.value == "ACCEPTED" and d.batch_id is not None)
    assert batches == list(range(len(batches))), "every batch committed once, in order"
    expected = {(i, f"r{i}", str(i % 2)) for i in range(ROWS_PER_BATCH * len(batches))}
    got = {(r["id"], r["v"], r["part"]) for r in table.read().collect()}
    assert got == expected
    # no record committed twice (raw files, before merge-on-read); files of a batch interrupted by stop()
    # are orphans no commit names (vacuum's business), the refused replay's files are deleted at once
    referenced = [f.path for c in table.catalog.commits("ds_sink", 0) for f in c.added_files]
    root = Path(table.location)
    assert sum(pq.read_metadata(root / p).num_rows for p in referenced) == len(expected), "a record was written twice"
    assert set(referenced) <= set(parquet_files(root))


def test_a_new_query_on_a_reused_checkpoint_path_loses_nothing(
    spark: Any,
    writer_stack: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The checkpoint is deleted and its path reused: the new query (new query id, batches from 0 again) is a new
    identity, so its batches commit instead of being refused as replays of the old query's."""
    import shutil

    settings = writer_stack.settings
    table = DeltaTable.create(spark, "ds_reuse", schema=SCHEMA, primary_key="id", settings=settings)
    checkpoint = tmp_path / "checkpoint"
    queries = []
    for base in (0, 1_000_000):  # the second query's rows are new keys, so a dropped batch shows
        shutil.rmtree(checkpoint, ignore_errors=True)
        query = (
            rate_stream(spark, base)
            .writeStream.format("ordo")
            .options(**settings_options(settings))
            .option("checkpointLocation", str(checkpoint))
            .start("ds_reuse")
        )
        target = table.version + 3
        wait_for(query, lambda t=target: table.version >= t)  # type: ignore[misc]
        query.stop()
        assert query.exception() is None
        queries.append(str(query.id))
    history = table.catalog.history("ds_reuse")
    assert not [d for d in history if not d.accepted], "nothing refused: the second query is a new identity"
    accepted = [d for d in history if d.batch_id is not None]
    by_query = {q: sorted(d.batch_id for d in accepted if d.app_id and d.app_id.endswith(q)) for q in queries}
    assert len(accepted) == sum(len(b) for b in by_query.values()), "every batch's app id names its query"
    for q, batches in by_query.items():
        assert batches == list(range(len(batches))) and len(batches) >= 3, (q, batches)
    first, second = (len(by_query[q]) for q in queries)
    expected = {i for i in range(ROWS_PER_BATCH * first)} | {1_000_000 + i for i in range(ROWS_PER_BATCH * second)}
    assert {r["id"] for r in table.read().collect()} == expected


def test_sink_fails_the_query_with_the_reason(spark: Any, writer_stack: Any, tmp_path: Path) -> None:  # noqa: F811
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import functions as F

    settings = writer_stack.settings
    table = DeltaTable.create(spark, "ds_sink_bad", schema=SCHEMA, primary_key="id", settings=settings)
    dup = rate_stream(spark).withColumn("id", F.lit(1).cast("bigint"))  # every row the same key
    query = (
        dup.writeStream.format("ordo")
        .options(**settings_options(settings))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .start("ds_sink_bad")
    )
    with pytest.raises(StreamingQueryException, match="duplicate primary keys"):
        query.awaitTermination(180)
    assert table.version == 0
    assert parquet_files(table.location) == []


def test_change_feed_stream_resumes_without_loss_or_repeat(
    spark: Any,
    writer_stack: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    settings = writer_stack.settings
    opts = settings_options(settings)
    table = DeltaTable.create(
        spark, "ds_feed", schema=SCHEMA, primary_key="id", partitioned_by="part", settings=settings
    )
    model: dict[int, tuple[Any, ...]] = {}
    expected: list[tuple[Any, ...]] = []

    def upsert(data: list[tuple[Any, ...]]) -> None:
        result = table.insert_into(spark.createDataFrame(data, SCHEMA))
        assert result is not None
        for r in data:
            if r[0] in model:
                expected.append((result.id_version, "update_preimage", *model[r[0]]))
                expected.append((result.id_version, "update_postimage", *r))
            else:
                expected.append((result.id_version, "insert", *r))
            model[r[0]] = r

    def delete(ids: list[int]) -> None:
        result = table.delete(f"id IN ({', '.join(map(str, ids))})")
        assert result is not None
        for k in ids:
            expected.append((result.id_version, "delete", *model.pop(k)))

    upsert([(i, f"a{i}", str(i % 2)) for i in range(6)])
    upsert([(1, "b1", "1"), (7, "b7", "1")])
    delete([2, 3])
    table.compact("minor")  # no rows
    checkpoint = str(tmp_path / "feed-checkpoint")
    output = str(tmp_path / "feed-out")

    # Spark's memory sink cannot recover from a checkpoint: the file sink (exactly once by its own log) can
    def run() -> Any:
        query = (
            spark.readStream.format("ordo")
            .options(**opts)
            .option("readChangeFeed", "true")
            .option("startingVersion", 1)
            .option("maxVersionsPerTrigger", 2)
            .load("ds_feed")
            .writeStream.format("parquet")
            .option("path", output)
            .option("checkpointLocation", checkpoint)
            .start()
        )
        query.processAllAvailable()
        query.stop()
        assert query.exception() is None
        return query

    first = run()
    with_data = [p for p in first.recentProgress if p["numInputRows"]]
    assert len(with_data) >= 2, "maxVersionsPerTrigger=2 splits the four versions into several micro-batches"
    # more commits while the query is down: the restarted query resumes from its checkpoint
    upsert([(4, "c4", "0"), (9, "c9", "1")])
    delete([0])
    run()
    cols = ["_commit_version", "_change_type", "id", "v", "part"]
    collected = [tuple(r[c] for c in cols) for r in spark.read.parquet(output).collect()]
    assert sorted(collected) == sorted(expected)
    assert len(collected) == len(set(collected)), "a change row was delivered twice"

    def feed(name: str, **options: Any) -> Any:
        return (
            spark.readStream.format("ordo")
            .options(**opts)
            .option("readChangeFeed", "true")
            .options(**options)
            .load("ds_feed")
            .writeStream.format("memory")
            .queryName(name)
            .start()
        )

    def seen(name: str) -> list[tuple[Any, ...]]:
        cols = ["_commit_version", "_change_type", "id", "v", "part"]
        return sorted(tuple(r[c] for c in cols) for r in spark.table(name).collect())

    # startingTimestamp: from the first commit at or after that time version
    delete_version = max(v for v, kind, *_ in expected if kind == "delete")
    stamp = table.catalog.snapshot("ds_feed", version=delete_version).time_version
    query = feed("feed_from_time", startingTimestamp=stamp.isoformat())
    query.processAllAvailable()
    query.stop()
    assert seen("feed_from_time") == sorted(e for e in expected if e[0] >= delete_version)
    # "latest": nothing of the past, then what commits while the query runs
    query = feed("feed_latest", startingVersion="latest")
    query.processAllAvailable()
    assert seen("feed_latest") == []
    already = len(expected)
    upsert([(9, "d9", "1")])
    query.processAllAvailable()
    query.stop()
    assert seen("feed_latest") == sorted(expected[already:])
    # no starting option (Delta's default): the snapshot at the head, each live row an insert at that version,
    # then the changes after it
    head = table.catalog.head("ds_feed")
    initial = sorted((head, "insert", *row) for row in model.values())
    query = feed("feed_initial")
    query.processAllAvailable()
    assert seen("feed_initial") == initial
    already = len(expected)
    upsert([(5, "e5", "1"), (1, "e1", "1")])
    query.processAllAvailable()
    query.stop()
    assert seen("feed_initial") == sorted(initial + expected[already:])


def test_a_stream_of_the_tables_rows_takes_appends_exactly_once(
    spark: Any,
    writer_stack: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """``readStream.format("ordo").load(t)`` (bronze -> silver): the initial snapshot, then each append's rows,
    exactly once across a restart; compaction delivers nothing; ``maxFilesPerTrigger`` splits the commits; a
    commit that updates or deletes rows fails the stream, naming the version, unless ``skipChangeCommits``."""
    from pyspark.errors import StreamingQueryException

    settings = writer_stack.settings
    opts = settings_options(settings)
    table = DeltaTable.create(
        spark, "ds_rows", schema=SCHEMA, primary_key="id", partitioned_by="part", settings=settings
    )
    appended: list[tuple[Any, ...]] = []

    def append(ids: range) -> None:
        data = [(i, f"v{i}", str(i % 2)) for i in ids]
        table.insert_into(spark.createDataFrame(data, SCHEMA))
        appended.extend(data)

    append(range(0, 4))  # v1: in the initial snapshot
    checkpoint, output = str(tmp_path / "rows-chk"), str(tmp_path / "rows-out")

    def run(**options: str) -> Any:
        query = (
            spark.readStream.format("ordo")
            .options(**opts, **options)
            .load("ds_rows")
            .writeStream.format("parquet")
            .option("path", output)
            .option("checkpointLocation", checkpoint)
            .start()
        )
        query.processAllAvailable()
        query.stop()
        assert query.exception() is None
        return query

    def delivered() -> list[tuple[Any, ...]]:
        return sorted((r["id"], r["v"], r["part"]) for r in spark.read.parquet(output).collect())

    run()
    assert delivered() == sorted(appended)
    for first in (10, 20, 30):  # v2..v4, each writing both partitions (two files)
        append(range(first, first + 4))
    table.compact("minor")  # v5: no rows
    query = run(maxFilesPerTrigger="2")
    assert len([p for p in query.recentProgress if p["numInputRows"]]) == 3, "one 2-file commit per micro-batch"
    assert delivered() == sorted(appended), "each appended row once, across the restart; compaction adds none"
    assert list(spark.read.parquet(output).columns) == ["id", "v", "part"]

    # an upsert of an existing key changes a row: the stream fails naming the version, until told to skip
    table.insert_into(spark.createDataFrame([(10, "changed", "0"), (50, "v50", "0")], SCHEMA))  # v6
    changing = table.version
    with pytest.raises(StreamingQueryException, match=rf"version {changing} of ds_rows .*skipChangeCommits"):
        run()
    table.delete("id = 11")  # v7
    append(range(60, 62))  # v8
    run(skipChangeCommits="true")
    assert delivered() == sorted(appended), "the changing commits skipped whole, the append after them delivered"
