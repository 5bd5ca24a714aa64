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
  a JVM reader pays for the bytes.

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
from bench.peers_spark import _frame, _noop, _ReadTable, _session


def _median(action: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    from ordo.consumer.arrow import FileRef, TableShape, live_rows, read_files
    from ordo.consumer.spark import _no_merge_needed

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
        _noop(table.read())  # warm-up: the Python workers, the classes
        load_start = os.getloadavg()[0]
        figures = {
            "plan": _median(table.read, repeats),
            "spark full read": _median(lambda: _noop(table.read()), repeats),
            "arrow merge, one process": _median(lambda: [live_rows(g, shape, merge=True) for g in merged], repeats),
            "arrow files only": _median(lambda: [read_files(g, shape) for g in merged], repeats),
            "spark parquet scan": _median(lambda: _noop(spark.read.parquet(*paths)), repeats),
        }
        print(
            f"read profile: {rows} rows, {len(snapshot.files)} files in {len(groups)} groups "
            f"({len(merged)} merged), parallelism {spark.sparkContext.defaultParallelism}; "
            f"load average {load_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end"
        )
        for name, seconds in figures.items():
            print(f"    {name}: {seconds * 1000:.0f} ms (median of {repeats})")
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
