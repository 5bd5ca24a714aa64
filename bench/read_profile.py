"""Where an uncompacted full read through Spark goes (issue 29): Spark's wall time against the same merge in Arrow.

    .venv-bench-spark/bin/python -m bench.read_profile [rows] [repeats]

One local Spark session with ``bench.peers_spark``'s settings and one embedded stack; the table is workload 3's
for ordo (``rows`` keys, default 100,000, in one commit, then 100 upserts of 1 % of the keys each, unmerged).
Timed, each the median of ``repeats`` (default 5), with the 1-minute load average:

* ``plan``: building the read's DataFrame on the driver (``DeltaTable.read()``: the catalog's snapshot, the
  merge groups, the data source's options), no rows;
* ``spark full read``: every row into Spark's ``noop`` sink, as workload 3 times it;
* ``arrow merge, one process``: the same merge-on-read in this process, ``consumer.arrow.live_rows`` over each
  (partition, bucket) group the read merges, one after the other: the Python work the read's tasks do, without
  Spark;
* ``arrow files only``: reading the same files with pyarrow, no merge;
* ``spark parquet scan``: Spark's own (JVM, vectorized) scan of the same files into ``noop``, no merge: the floor
  a JVM reader pays for the bytes;
* ``spark point read``: ``WHERE id = k`` collected, as workload 3 times it, and ``arrow point read, one process``:
  the same files the pushed filter keeps (``files_with_keys``), merged for that key (``live_rows(keys=)``).

Then workload 4's table (``BENCH_PEERS_SPARK_COMMITS``, default 150 commits of 10 rows, every 10th an UPDATE
of 10 rows), and its change feed of the last 100 versions:

* ``changes plan``: the feed's DataFrame on the driver (the catalog's commits, ``plan_commits``), no rows;
* ``spark changes``: the feed into ``noop``, as workload 4 times it;
* ``arrow changes, one process``: ``task_change_rows`` over the same planned tasks (``pack_commits``), in this
  process: the Python work the feed's tasks do, without Spark (``BENCH_READ_PROFILE_CPROFILE=1`` prints its
  cProfile, by own time).

What the full read costs beyond ``arrow merge`` is Spark's: the tasks' Python workers (started, fed their groups,
their Arrow batches sent to the JVM) and the job's scheduling.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import stack
from bench.peers_spark import HISTORY_ROWS, _frame, _noop, _point, _ReadTable, _session


def _median(action: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    from ordo.consumer import Catalog
    from ordo.consumer.arrow import (
        FileRef,
        TableShape,
        files_with_keys,
        key_lookup,
        live_rows,
        pack_commits,
        plan_commits,
        read_files,
        task_change_rows,
    )
    from ordo.consumer.spark import _no_merge_needed
    from ordo.schemas.buckets import table_buckets

    rows = int(argv[0]) if argv else 100_000
    repeats = int(argv[1]) if len(argv) > 1 else 5
    per_upsert = rows // 100
    work = Path(tempfile.mkdtemp(prefix="ordo-read-profile-"))
    with stack("read-profile") as running:
        spark = _session(work, ("ordo",))
        table = _ReadTable("ordo", spark, work, running.settings)
        table.load(_frame(spark, 0, rows, "base"))
        for i in range(100):
            table.upsert(_frame(spark, (i * per_upsert * 7) % rows, per_upsert, f"u{i}"))
        snapshot = table.ordo.snapshot()
        shape = TableShape.of(snapshot.metadata)
        groups: dict[Any, list[Any]] = {}
        for f in snapshot.files:
            groups.setdefault((tuple(sorted(f.partition.items())), f.bucket), []).append(f)
        merged = [[FileRef.of(f) for f in g] for g in groups.values() if not _no_merge_needed(g)]
        paths = [f.absolute_path for f in snapshot.files]
        key = rows // 2 + 1
        keys = key_lookup(shape, [key])
        buckets = table_buckets(snapshot.metadata.properties)
        point_files = files_with_keys([FileRef.of(f) for f in snapshot.files], shape, keys, buckets)
        point_groups: dict[Any, list[Any]] = {}
        for ref in point_files:
            point_groups.setdefault((tuple(sorted(ref.partition.items())), ref.bucket), []).append(ref)
        _noop(table.read())  # warm-up: the Python workers, the classes
        load_start = os.getloadavg()[0]
        figures = {
            "plan": _median(table.read, repeats),
            "spark full read": _median(lambda: _noop(table.read()), repeats),
            "arrow merge, one process": _median(lambda: [live_rows(g, shape, merge=True) for g in merged], repeats),
            "arrow files only": _median(lambda: [read_files(g, shape) for g in merged], repeats),
            "spark parquet scan": _median(lambda: _noop(spark.read.parquet(*paths)), repeats),
            "spark point read": _median(lambda: _point(table.read(), key), repeats),
            "arrow point read, one process": _median(
                lambda: [live_rows(g, shape, keys=keys) for g in point_groups.values()], repeats
            ),
        }
        history = _ReadTable("ordo", spark, work, running.settings, "history", cdf=True)
        commits = int(os.environ.get("BENCH_PEERS_SPARK_COMMITS") or 150)
        for i in range(commits):
            if i % 10 == 9:
                low = (i - 5) * HISTORY_ROWS
                history.update(f"'u{i}'", f"id >= {low} AND id < {low + HISTORY_ROWS}")
            else:
                history.load(_frame(spark, i * HISTORY_ROWS, HISTORY_ROWS, f"c{i}"))
        head = history.head()
        history_shape = TableShape.of(history.ordo.snapshot().metadata)

        def arrow_changes() -> int:
            with Catalog(running.settings.catalog) as catalog:
                plans = plan_commits(
                    catalog, history.ordo.name, catalog.commits(history.ordo.name, head - 99, head), history_shape
                )
            return sum(t.num_rows for task in pack_commits(plans) for t in task_change_rows(task, history_shape))

        figures["changes plan"] = _median(lambda: history.changes(head - 99, head), repeats)
        figures["spark changes"] = _median(lambda: _noop(history.changes(head - 99, head)), repeats)
        figures["arrow changes, one process"] = _median(arrow_changes, repeats)
        if os.environ.get("BENCH_READ_PROFILE_CPROFILE"):  # where the change feed's Python time goes
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            profiler.runcall(arrow_changes)
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        print(
            f"read profile: {rows} rows, {len(snapshot.files)} files in {len(groups)} groups "
            f"({len(merged)} merged), point read {len(point_files)} files; change feed {commits} commits, "
            f"{len(history.ordo.snapshot().files)} files; parallelism {spark.sparkContext.defaultParallelism}; "
            f"load average {load_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end"
        )
        for name, seconds in figures.items():
            print(f"    {name}: {seconds * 1000:.0f} ms (median of {repeats})")
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
