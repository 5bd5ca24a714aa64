"""Streaming queries killed for real: ``kill -9`` of a query's whole process group (its Python driver, the JVM
and the Python workers), then a restart on the same checkpoint.

Each query runs in a process of its own (``tests/e2e/stream_child.py``, its
own Spark driver), so the kill lands wherever the query is: planning,
writing, committing to ordo, or logging its progress. Against a model:

* the ``format("ordo")`` sink fed by ``rate-micro-batch`` (a replayed batch
  has the same rows): every batch committed once under one identity, the
  table equal to the rows of the committed batches, no record in two
  committed files;
* the change-feed source into a Parquet file sink while commits keep coming:
  the output equals the model's changes, no row lost or repeated.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from ordo.producer.table import DeltaTable
from ordo.spark.datasource import settings_options
from tests.chaos.common import first_decisions, read_logs
from tests.e2e.stack import parquet_files, writer_stack  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = "id BIGINT, v STRING, part STRING"
ROWS_PER_BATCH = 5
START_TIMEOUT = 150.0


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """The query process, in a session of its own so that one ``killpg`` takes its JVM and workers too."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.stream_child", *args],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def kill(child: subprocess.Popen[bytes]) -> None:
    """SIGKILL the query's whole process group (driver, JVM, Python workers) and reap the driver."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait(timeout=30)


def wait(child: subprocess.Popen[bytes], log: Path, done: Callable[[], bool], poll: float = 0.2) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not done():
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        assert child.poll() is None, f"the query process exited ({child.returncode}):\n{tail}"
        assert time.monotonic() < deadline, f"no progress:\n{tail}"
        time.sleep(poll)


def settle(settings: Any, table: str, catalog: Any, timeout: float = 60.0) -> None:
    """Wait until every intent the killed query published is decided and the catalog shows the last decision.

    A kill can land after a batch's intent reached the broker and before its
    decision: that batch still commits, a moment later. Checking the history,
    the table and the files at different moments of that would compare two
    different tables.
    """
    deadline = time.monotonic() + timeout
    while True:
        logs = read_logs(settings, table)
        first, _ = first_decisions(logs)
        if len(first) == len(logs.intents):
            versions = [d.id_version for d in first.values() if d.accepted and d.id_version is not None]
            if catalog.head(table) >= max(versions, default=0):
                return
        assert time.monotonic() < deadline, f"{len(logs.intents) - len(first)} intent(s) still undecided"
        time.sleep(0.2)


def test_sink_killed_mid_run_commits_every_batch_once(spark: Any, writer_stack: Any, tmp_path: Path) -> None:  # noqa: F811
    settings = writer_stack.settings
    table = DeltaTable.create(
        spark, "kill_sink", schema=SCHEMA, primary_key="id", partitioned_by="part", settings=settings
    )
    catalog = table.catalog
    args = ["sink", "kill_sink", str(tmp_path / "checkpoint"), json.dumps(settings_options(settings))]
    args.append(str(ROWS_PER_BATCH))

    def head() -> int:
        return catalog.head("kill_sink")

    log = tmp_path / "first.log"
    child = start(args, log)
    try:
        wait(child, log, lambda: head() >= 3)
        # kill right after a batch commits to ordo, before Spark is likely to have logged it: the restart
        # replays that batch, which must be refused as committed
        seen = head()
        wait(child, log, lambda: head() > seen, poll=0.005)
    finally:
        kill(child)
    killed_at = head()
    log = tmp_path / "second.log"
    child = start(args, log)
    try:
        wait(child, log, lambda: head() >= killed_at + 3)
        time.sleep(0.3)  # the second kill lands mid-batch, wherever the query is
    finally:
        kill(child)
    settle(settings, "kill_sink", catalog)

    history = catalog.history("kill_sink")
    trail = [(d.outcome.value, d.reason, d.app_id, d.batch_id) for d in reversed(history)]
    batches = [d for d in history if d.batch_id is not None]
    accepted = sorted(d.batch_id for d in batches if d.accepted)
    refused = [d for d in batches if not d.accepted]
    assert accepted == list(range(len(accepted))), f"every batch committed once, in order: {trail}"
    assert len({d.app_id for d in batches}) == 1, f"one identity across the restart: {trail}"
    assert all(d.reason == "BATCH_ALREADY_COMMITTED" for d in refused), trail
    print(f"batches committed {len(accepted)}, replays refused {len(refused)}")
    expected = {(i, f"r{i}", str(i % 2)) for i in range(ROWS_PER_BATCH * len(accepted))}
    assert {(r["id"], r["v"], r["part"]) for r in table.read().collect()} == expected
    referenced = [f.path for c in catalog.commits("kill_sink", 0) for f in c.added_files]
    root = Path(table.location)
    assert sum(pq.read_metadata(root / p).num_rows for p in referenced) == len(expected), "a record was written twice"
    assert set(referenced) <= set(parquet_files(root))


def committed_through(checkpoint: Path) -> int:
    """The next ID version after the last micro-batch Spark logged as committed (1, where it starts, before any)."""
    commits = checkpoint / "commits"
    done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.exists() else []
    if not done:
        return 1
    lines = (checkpoint / "offsets" / str(max(done))).read_text().splitlines()
    return int(json.loads(lines[-1])["version"])


def test_change_feed_stream_killed_mid_run_loses_and_repeats_nothing(
    spark: Any,
    writer_stack: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from ordo.spark.datasource import source_class

    settings = writer_stack.settings
    table = DeltaTable.create(
        spark, "kill_feed", schema=SCHEMA, primary_key="id", partitioned_by="part", settings=settings
    )
    catalog = table.catalog
    struct = StructType(
        [StructField("id", LongType()), StructField("v", StringType()), StructField("part", StringType())]
    )
    source = source_class(settings)
    model: dict[int, tuple[Any, ...]] = {}
    expected: list[tuple[Any, ...]] = []

    def upsert(data: list[tuple[Any, ...]]) -> None:
        """One INSERT INTO through the data source's writer, driven by hand (no Spark job in this process)."""
        writer = source({"path": "kill_feed"}).writer(struct, False)
        batch = pa.Table.from_pylist(
            [dict(zip(("id", "v", "part"), r, strict=True)) for r in data], schema=to_arrow_schema(struct)
        )
        writer.commit([writer.write(iter(batch.to_batches()))])
        version = catalog.head("kill_feed")
        for r in data:
            if r[0] in model:
                expected.append((version, "update_preimage", *model[r[0]]))
                expected.append((version, "update_postimage", *r))
            else:
                expected.append((version, "insert", *r))
            model[r[0]] = r

    step = iter(range(1_000))

    def next_commit() -> None:
        k = next(step)
        upsert([(k % 7, f"u{k}", str(k % 7 % 2)), (100 + k, f"n{k}", str(k % 2))])

    for _ in range(4):
        next_commit()
    result = table.delete("id IN (0, 101)")
    assert result is not None
    for key in (0, 101):
        expected.append((result.id_version, "delete", *model.pop(key)))

    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    args = ["feed", "kill_feed", str(checkpoint), json.dumps(settings_options(settings)), str(output)]
    log = tmp_path / "first.log"
    child = start(args, log)
    try:
        # commits keep coming while the query runs; it is killed once it logged a few micro-batches
        def progressed() -> bool:
            through = committed_through(checkpoint)
            if catalog.head("kill_feed") + 1 - through < 3:  # a few versions ahead of the query, not a backlog
                next_commit()
            return through >= 4

        wait(child, log, progressed, poll=0.3)
    finally:
        kill(child)
    for _ in range(3):  # more commits while the query is down
        next_commit()
    log = tmp_path / "second.log"
    child = start(args, log)
    try:
        wait(child, log, lambda: committed_through(checkpoint) >= 6)
        for _ in range(3):
            next_commit()
            time.sleep(0.3)
        wait(child, log, lambda: committed_through(checkpoint) == catalog.head("kill_feed") + 1)
    finally:
        kill(child)

    cols = ["_commit_version", "_change_type", "id", "v", "part"]
    delivered = [tuple(r[c] for c in cols) for r in spark.read.parquet(str(output)).collect()]
    assert len(delivered) == len(set(delivered)), "a change row was delivered twice"
    assert sorted(delivered) == sorted(expected), "the output equals the model's changes"
